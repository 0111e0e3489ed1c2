"""Which draft tree of at most N verify rows accepts most, from the ranks of the sampled tokens (CPU, fp32).

For the coupled-drafting issue's tree shapes. Plain continuations are sampled as coupling_sim.py does;
every round start is replayed with the MTP head's teacher-forced chain, and at each depth j the rank of
the sampled token among the head's candidates is kept: order "gumbel" = the Gumbel-coupled draw first,
then the head's chain distribution in descending order; "argmax" = that order without the coupled draw
(at temp 0 both are the head's ranking on its raw logits). Under teacher forcing the head's state at
depth j is the state of the tree node the walk reached, so a tree whose node at each depth d holds
children of ranks 0..c-1 accepts exactly the longest prefix of the rank sequence it contains.

Expected tokens a round of a tree = 1 + sum over its draft nodes of P(rank prefix = the node's path).
The prefix probabilities only shrink down a path, so the best tree of N nodes (root included: the
verify rows) holds the N - 1 most frequent rank prefixes (prefix-closed). Printed per N: the chain
(all ranks 0), the best tree, and its shape (parents), its head steps a round (internal nodes) and depth.

    python bench/experiments/tree_shape_sim.py --prompts 8 --max-tokens 128 --seeds 2 --depth 6
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coupling_sim import fl_of, head_chain, head_logits, load_models, noise, sample_path  # noqa: E402

from accept import load_prompts  # noqa: E402

from mtp_turbo.benchmark.config import SAMPLED  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402

MAX_RANK = 4  # ranks past this count as "not proposed"


def ranks(fq: torch.Tensor, raw: torch.Tensor, g: torch.Tensor, x: int) -> dict[str, int]:
    """x's rank among the head's candidates, by order (see the module docstring)."""
    key = fq if int(torch.isfinite(fq).sum()) > 1 else raw
    order = torch.argsort(key, descending=True)[: MAX_RANK + 1].tolist()
    gum = int((fq + g).argmax())
    coupled = [gum] + [t for t in order if t != gum]
    return {"argmax": order.index(x) if x in order[:MAX_RANK] else MAX_RANK,
            "gumbel": coupled.index(x) if x in coupled[:MAX_RANK] else MAX_RANK}


def best_trees(seqs: list[tuple[int, ...]], max_nodes: int) -> list[dict]:
    """Per N = 2..max_nodes: the chain and the best tree of N nodes from rank sequences."""
    n = len(seqs)
    freq = Counter()
    for s in seqs:
        for d in range(1, len(s) + 1):
            if s[d - 1] >= MAX_RANK:
                break
            freq[s[:d]] += 1
    out = []
    for nodes in range(2, max_nodes + 1):
        chosen = []
        for path, c in sorted(freq.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0])):
            if len(chosen) == nodes - 1:
                break
            if len(path) == 1 or path[:-1] in chosen:
                chosen.append(path)
        chain = sum(freq[(0,) * d] for d in range(1, nodes)) / n
        index = {(): 0}
        parents = [-1]
        for path in sorted(chosen, key=lambda p: (len(p), p)):
            index[path] = len(parents)
            parents.append(index[path[:-1]])
        internal = len({p for p in parents[1:]})
        out.append({"nodes": nodes, "chain": 1 + chain, "tree": 1 + sum(freq[p] for p in chosen) / n,
                    "parents": parents, "head_steps": internal, "depth": max(len(p) for p in chosen)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--max-nodes", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng, head = load_models()
    cfg = SamplerConfig(temperature=a.temperature, **(SAMPLED if a.temperature > 0 else {}))
    V = eng.model.cfg.vocab_size
    seqs = {"argmax": [], "gumbel": []}
    for pi, prompt in enumerate(load_prompts(eng, a.prompts)["mt_bench"]):
        ids = eng.encode_prompt(prompt)
        for seed in range(a.seeds):
            toks = sample_path(eng, ids, cfg, seed, a.max_tokens)
            T = len(toks)
            states = head_chain(eng, head, toks, a.depth)
            for t0 in range(len(ids) - 2, T - 1 - a.depth):
                r = {o: [] for o in seqs}
                for j in range(1, a.depth + 1):
                    s = t0 + j
                    full = head_logits(head, states, j, t0, V)
                    g, _ = noise(seed, s + 1, V)
                    for o, k in ranks(fl_of(full, toks[: s + 1], cfg), full, g, toks[s + 1]).items():
                        r[o].append(k)
                for o in seqs:
                    seqs[o].append(tuple(r[o]))
        print(f"prompt {pi}: {len(seqs['argmax'])} rounds", flush=True)
    res = {"temperature": a.temperature, "prompts": a.prompts, "seeds": a.seeds, "depth": a.depth,
           "rounds": len(seqs["argmax"]), "orders": {o: best_trees(s, a.max_nodes) for o, s in seqs.items()}}
    for o, rows in res["orders"].items():
        print(f"order {o}:")
        for row in rows:
            print(f"  N={row['nodes']:2d}  chain {row['chain']:.3f}  tree {row['tree']:.3f}  head steps "
                  f"{row['head_steps']}  depth {row['depth']}  parents {row['parents']}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
