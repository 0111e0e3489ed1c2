"""What Gumbel-coupled drafts and small draft trees would accept, simulated on real text (CPU, fp32).

A prediction for the coupled-drafting issue before any kernel is written. Plain continuations of
MT-Bench prompts are sampled with Gumbel-max noise g(seed, position, token) (exact sampling from the
chain's final distribution p), then every round start t along the text is replayed with the MTP
head's teacher-forced chain (the drafts the head makes when the earlier drafts were accepted, which
under coupling are exactly the sampled tokens), with four ways of proposing the token at each depth:

- argmax: the head's argmax (what the engine drafts today; accepted when the sampled token is it);
- icdf: the head's inverse-CDF draw in token order with the verifier's uniform (`--draft-coupling`
  today), simulated with the uniform that draws the same token from p;
- gumbel: argmax over x of log q(x) + g(seed, position, x), q the head's chain distribution;
- tree2 / tree3: the gumbel child plus the head's argmax (plus its second best): accepted when the
  sampled token is any child (every child assumed to continue its own chain below).

Tokens per round for k drafts = 1 + the accepted prefix length, averaged over round starts.
The noise here comes from torch.Generator per (seed, position), not the engine's counter hash: the
text differs, the statistics do not.

    python bench/experiments/coupling_sim.py --prompts 8 --max-tokens 128 --seeds 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from accept import load_prompts  # noqa: E402

from mtp_turbo.benchmark.config import SAMPLED  # noqa: E402
from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.models.mtp_load import load_head  # noqa: E402
from mtp_turbo.sampling.chain import final_logits, penalty_counts  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.train.forward import chain_states, main_hidden  # noqa: E402

HEAD = ROOT.parent / "mtp_turbo" / "data" / "gemma3-270m-mtp.gguf"
METHODS = ("argmax", "icdf", "gumbel", "tree2", "tree3")


def noise(seed: int, pos: int, v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Gumbel [V], uniforms [V]) for (seed, position)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + pos)
    u = torch.rand(v, generator=g, dtype=torch.float64).clamp_min(1e-300)
    return -torch.log(-torch.log(u)), u


def fl_of(logits: torch.Tensor, hist: list[int], cfg: SamplerConfig) -> torch.Tensor:
    counts = None
    if cfg.uses_penalties:
        counts = penalty_counts(torch.tensor(hist), 1, logits.shape[-1], cfg.penalty_last_n)
    return final_logits(logits[None].float(), counts, cfg)[0].double()


def load_models():
    """(the CPU engine in fp32, the shipped MTP head in bf16) for the replays."""
    torch.manual_seed(0)
    eng = Engine(EngineConfig(device="cpu", cpu_weights="f32", progress=False, cpu_cache=False))
    head = load_head(str(HEAD), eng.model, device="cpu", dtype=torch.float32, draft_quant="bf16", head_quant="bf16")
    return eng, head


def head_chain(eng: Engine, head, toks: list[int], depth: int) -> list[torch.Tensor]:
    """The head's teacher-forced chain states along toks, depth steps from every cell (sink 64, window 256)."""
    model, tt = eng.model, torch.tensor(toks)[None]
    with torch.no_grad():
        H = main_hidden(model, tt)
        src = model.final_norm(H) if head.cfg.hidden_source == "post_norm" else H
        return chain_states(head.W, head.cfg, _rope(head, len(toks)), model.embed_tokens(tt), src, depth, 64, 256)


def head_logits(head, states: list[torch.Tensor], j: int, t0: int, vocab: int) -> torch.Tensor:
    """The head's logits [vocab] at chain step j from cell t0 (-inf off the head's rows)."""
    full = torch.full((vocab,), float("-inf"))
    full[head.vocab_ids if head.vocab_ids is not None else slice(None)] = head.logits(states[j - 1][:, t0], dense=True)[0]
    return full


def sample_path(eng: Engine, ids: list[int], cfg: SamplerConfig, seed: int, n: int) -> list[int]:
    toks = list(ids)
    eng.start(toks)
    with torch.inference_mode():
        for _ in range(n):
            lg, _ = eng.forward(1)
            g, _ = noise(seed, len(toks), lg.shape[-1])
            t = int((fl_of(lg[-1], toks, cfg) + g).argmax())
            toks.append(t)
            eng.tok_buf[len(toks) - 1: len(toks)].fill_(t)
            eng.commit([t], on_device=True)
            if t in eng.tokenizer.stop_ids:
                break
    return toks


def accepts(fp: torch.Tensor, fq: torch.Tensor, x: int, g: torch.Tensor, raw: torch.Tensor) -> dict[str, bool]:
    """Whether each method's proposal(s) hold the sampled token x (p: final logits fp, head: fq; the
    head's children ranked on fq, or at temp 0 (fq one-hot) on its raw logits)."""
    order = torch.argsort(fq if int(torch.isfinite(fq).sum()) > 1 else raw, descending=True)
    a1, a2 = int(order[0]), int(order[1])
    gum = int((fq + g).argmax())
    # icdf: the uniform that draws x from p (its own interval's midpoint stands for a random one)
    p = torch.softmax(fp, 0)
    q = torch.softmax(fq, 0)
    cp, cq = torch.cumsum(p, 0), torch.cumsum(q, 0)
    lo, hi = float(cp[x] - p[x]), float(cp[x])
    u = lo + (hi - lo) * float(torch.rand(()))
    icdf = int(torch.searchsorted(cq, torch.tensor([u * float(cq[-1])], dtype=cq.dtype), right=True).clamp(max=len(q) - 1))
    return {"argmax": a1 == x, "icdf": icdf == x, "gumbel": gum == x, "tree2": x in (gum, a1),
            "tree3": x in (gum, a1, a2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--chain", choices=("bench", "default"), default="bench",
                    help="bench: mtp-turbo bench's sampled chain (penalties on); default: SamplerConfig's")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng, head = load_models()
    model = eng.model
    extra = SAMPLED if a.chain == "bench" else {}
    cfg = SamplerConfig(temperature=a.temperature, **(extra if a.temperature > 0 else {}))
    V = model.cfg.vocab_size
    hits = {m: [[] for _ in range(a.depth)] for m in METHODS}
    rounds = {m: [] for m in METHODS}
    for pi, prompt in enumerate(load_prompts(eng, a.prompts)["mt_bench"]):
        ids = eng.encode_prompt(prompt)
        for seed in range(a.seeds):
            toks = sample_path(eng, ids, cfg, seed, a.max_tokens)
            T = len(toks)
            logits = eng.forward_logits(toks, chunk=512)  # [T, V]: row s predicts token s + 1
            states = head_chain(eng, head, toks, a.depth)
            for t0 in range(len(ids) - 2, T - 1 - a.depth):  # chain start cell t0: step j drafts token t0+j+1
                acc = {m: True for m in METHODS}
                n_acc = {m: 0 for m in METHODS}
                for j in range(1, a.depth + 1):
                    s = t0 + j  # the drafted token's position is s + ... : main row s predicts token s + 1
                    x = toks[s + 1]
                    hist = toks[: s + 1]
                    fp = fl_of(logits[s], hist, cfg)
                    full = head_logits(head, states, j, t0, V)
                    fq = fl_of(full, hist, cfg)
                    g, _ = noise(seed, s + 1, V)
                    r = accepts(fp, fq, x, g, full)
                    for m in METHODS:
                        hits[m][j - 1].append(r[m])
                        if acc[m] and r[m]:
                            n_acc[m] += 1
                        else:
                            acc[m] = False
                for m in METHODS:
                    rounds[m].append(1 + n_acc[m])
        print(f"prompt {pi}: " + " ".join(f"{m} {sum(rounds[m]) / len(rounds[m]):.3f}" for m in METHODS), flush=True)
    res = {"temperature": a.temperature, "chain": a.chain, "prompts": a.prompts, "seeds": a.seeds, "depth": a.depth,
           "rounds": len(rounds["argmax"]),
           "tokens_per_round": {m: sum(v) / len(v) for m, v in rounds.items()},
           "accept_by_depth": {m: [sum(h) / max(1, len(h)) for h in hits[m]] for m in METHODS}}
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


def _rope(head, T):
    head.rope_at(torch.tensor([T + 8]))
    return head.rope


if __name__ == "__main__":
    raise SystemExit(main())
