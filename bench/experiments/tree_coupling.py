"""Tokens a round of chains and trees with and without coupled drafts, through the engine (any device).

Issue 39's parts measured apart: argmax vs coupled drafts (SpecConfig.draft_coupling: the spine's
picks are the verifier's own draw from the head's distribution) for a chain and for trees (leaves:
the head's next best, the spine's pick left out). Every configuration's text is checked against
plain decoding's (same seed, same text). MT-Bench first turns, the bench's sampled chain.

    python bench/experiments/tree_coupling.py --n-prompts 8 --max-tokens 128 --temp 0.6 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

from mtp_turbo.benchmark.config import SAMPLED, load_prompts
from mtp_turbo.engine import Engine, EngineConfig
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temp", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", default="3;3:2,1;3:3,2,1", help="';'-separated: k (a chain) or a tree spec")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    eng = Engine(EngineConfig(model=a.model, device=a.device, ctx_size=1024, progress=False))
    sampler = SamplerConfig(**{**SAMPLED, "temperature": a.temp, "seed": a.seed})
    prompts = load_prompts("mtbench", a.n_prompts)
    plain = []
    for pr in prompts:
        eng.reset()
        plain.append(eng.generate_ids(pr, sampler=sampler, max_tokens=a.max_tokens, stop_ids=(),
                                      spec=SpecConfig(draft="none")))
    rows = []
    for c in [c.strip() for c in a.configs.split(";") if c.strip()]:
        for coupling in (False, True):
            tree = c if ":" in c else ""
            spec = SpecConfig(draft="mtp", draft_tokens=0 if tree else int(c), draft_tree=tree,
                              draft_coupling=coupling)
            emitted = rounds = 0
            same = True
            for pr, want in zip(prompts, plain):
                eng.reset()
                got = eng.generate_ids(pr, sampler=sampler, max_tokens=a.max_tokens, stop_ids=(), spec=spec)
                same &= got == want
                st = eng.last_stats.spec
                emitted, rounds = emitted + st.emitted, rounds + st.rounds
            row = {"drafts": f"tree {tree}" if tree else f"chain k={c}", "coupled": coupling,
                   "tokens_per_round": emitted / rounds, "rounds": rounds, "same_text": same}
            rows.append(row)
            print(f"{row['drafts']:>16} coupled={coupling!s:5} tokens/round {row['tokens_per_round']:.3f} "
                  f"({rounds} rounds) same text: {same}", flush=True)
    if a.json:
        json.dump({"temp": a.temp, "n_prompts": a.n_prompts, "max_tokens": a.max_tokens, "seed": a.seed,
                   "device": str(eng.device), "rows": rows}, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
