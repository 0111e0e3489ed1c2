"""Long-prompt check for the MTP drafter: a prompt of >= 12k tokens (The Tempest), prefilled in
streaming chunks, temp 0: acceptance with --draft-sink 0, 64, and an unbounded window (full-attention
drafter), and the draft step time at 1k vs 12k tokens of context.

Run: python bench/long_prompt.py [--device cuda] [--drafter HEAD.gguf] [--tokens 256] [--out out/long.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402

TEXT = Path(__file__).parent / "data" / "tempest.txt"


def run(eng, ids, spec, n):
    eng.reset()
    t0 = time.perf_counter()
    out = eng.generate_ids(ids, sampler=SamplerConfig(temperature=0.0), max_tokens=n, spec=spec, stop_ids=())
    st = eng.last_stats
    sp = st.spec
    return {"tokens": len(out), "tokens_per_round": sp.tokens_per_round, "rounds": sp.rounds,
            "acceptance": sp.acceptance_per_position, "draft_ms_per_round": 1e3 * sp.draft_s / sp.rounds,
            "prompt_s": st.prompt_s, "wall_s": time.perf_counter() - t0, "ids": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default=None, help="main model GGUF (default: Gemma-3-270M)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated after each prompt")
    ap.add_argument("--prompt-tokens", type=int, default=12288)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--drafter", default=None, help="MTP head GGUF (default: the shipped one)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng = Engine(EngineConfig(model=a.model, device=a.device, ctx_size=a.prompt_tokens + a.tokens + 64, progress=False))
    ids_all = eng.tokenizer.encode(TEXT.read_text(encoding="utf-8", errors="replace"))
    if len(ids_all) < a.prompt_tokens:
        raise SystemExit(f"the text has only {len(ids_all)} tokens")
    long_ids = ids_all[: a.prompt_tokens]
    short_ids = ids_all[: min(1024, a.prompt_tokens)]
    R = {"device": str(eng.device), "drafter": a.drafter or "shipped", "prompt_tokens": len(long_ids), "k": a.k,
         "cells": {}}
    configs = {"sink0_window256": (0, 256), "sink64_window256": (64, 256), "unbounded": (0, 1 << 20)}
    for name, (sink, window) in configs.items():
        spec = SpecConfig(draft="mtp", draft_tokens=a.k, draft_sink=sink, draft_window=window, drafter=a.drafter)
        R["cells"][name] = run(eng, long_ids, spec, a.tokens)
        c = R["cells"][name]
        print(f"{name:18s} tokens/round {c['tokens_per_round']:.2f}  acceptance "
              + " ".join(f"{x:.3f}" for x in c["acceptance"]) + f"  draft {c['draft_ms_per_round']:.2f} ms/round"
              f"  (prefill {c['prompt_s']:.1f} s)", flush=True)
    unb = R["cells"]["unbounded"]["tokens_per_round"]
    for name in ("sink0_window256", "sink64_window256"):
        r = R["cells"][name]["tokens_per_round"] / unb if unb else 0.0
        R[f"{name}_vs_unbounded"] = r
        print(f"{name} / unbounded tokens per round: {r:.3f} (target >= 0.95)")
    spec = SpecConfig(draft="mtp", draft_tokens=a.k, drafter=a.drafter)
    short = run(eng, short_ids, spec, a.tokens)
    R["draft_ms_per_round_1k"] = short["draft_ms_per_round"]
    R["draft_ms_per_round_12k"] = R["cells"]["sink64_window256"]["draft_ms_per_round"]
    print(f"draft time per round (k={a.k}, sink 64, window 256): 1k context {R['draft_ms_per_round_1k']:.2f} ms, "
          f"{len(long_ids) / 1024:.0f}k context {R['draft_ms_per_round_12k']:.2f} ms")
    same = all(c["ids"] == R["cells"]["unbounded"]["ids"] for c in R["cells"].values())
    print(f"greedy text identical across drafter settings: {same}")
    for c in R["cells"].values():
        c.pop("ids")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(R, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
