"""Cost of one sampler call on the GPU: fused kernels (sampling/fused.py) vs the torch chain.

For each case: `sample_tokens` (logits [R, V] + a 4096-token sequence + positions -> ids),
timed as CUDA-graph replays (median of reps; "x10" = ten calls back to back in one graph, per
call: what a call costs inside the decode step's graph; "1/graph" = one call a graph, the graph
launch included), beside the torch chain doing the same (window gather, counts, sample_dist,
uniforms, draw) captured the same way and eagerly. The last column counts the rows where both
drew the same token (they may differ only within ~1e-7 of a float32 CDF boundary of the torch
draw). --kernels adds each kernel's device time a call (torch.profiler over replays of the x10
graph). Targets (issue 19, H200): top-k 40 <= 20 us (1 row), <= 40 us (8 rows); top-k 0 + top-p
0.95 <= 60 us (1 row).

Cases: the bench chain (temp 0.6, top-k 40, top-p 0.95, min-p 0.05, repeat 1.08, presence 0.4,
last 64) at 1, 3, 4 (plain, MTP verify rows), 8, 16 rows; the engine's default chain
(SamplerConfig(): temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties) at 1, 3, 4; the MTP
drafter's pick (greedy + the bench chain's penalties) on its 32768-row head; and the full-vocabulary
configurations (top-k 0, top-k 200, whole-history penalties).

A/B in one call: --before DIR runs the same cases with the mtp_turbo package under DIR (a copy of
another version's tree, e.g. `git archive <rev> mtp_turbo | tar -x -C DIR`) in a subprocess, then
with this checkout, and prints both, after / before, and whether the two versions drew the same
tokens. The script only uses sample_tokens / make_plan / PEN / SCAN_MAX, which both have.

    python bench/sample_bench.py [--vocab 262144] [--reps 7] [--cases NAME,...] [--no-torch]
                                 [--kernels] [--before DIR] [--tree DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

CHAIN = dict(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4,
             penalty_last_n=64, seed=1)
# name: (config fields, rows, target us by rows, vocab (None: --vocab)); None fields = SamplerConfig()'s
CASES = {
    "top-k 40 chain": (CHAIN, (1, 3, 4, 8, 16), {1: 20, 8: 40}, None),
    "default chain": (dict(seed=1), (1, 3, 4), {}, None),
    "drafter greedy + penalties": ({**CHAIN, "temperature": 0.0}, (1,), {}, 32768),
    "top-k 0 + top-p 0.95": (dict(temperature=1.0, top_k=0, top_p=0.95, min_p=0.0, seed=1), (1, 8), {1: 60}, None),
    "top-k 0 chain": ({**CHAIN, "top_k": 0}, (1, 8), {}, None),
    "greedy + penalties": ({**CHAIN, "temperature": 0.0}, (1, 4), {}, None),
    "top-k 40 chain, last_n -1": ({**CHAIN, "penalty_last_n": -1}, (1, 4), {}, None),
    "top-k 200 chain": ({**CHAIN, "top_k": 200}, (1,), {}, None),
}


def time_eager(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(max(20, reps * 5)):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def kernel_times(fn, calls: int = 10, replays: int = 20) -> dict[str, float]:
    """Device seconds a call per kernel name: torch.profiler over replays of a graph of `calls` calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        dev = getattr(e, "device_time_total", None)
        if dev is None:
            dev = getattr(e, "cuda_time_total", 0.0)
        if dev and not e.key.startswith(("cudaGraph", "Memcpy", "Memset")):
            out[e.key[:40]] = out.get(e.key[:40], 0.0) + dev * 1e-6 / (calls * replays)
    del g
    return out


def inputs(rows: int, vocab: int, seed: int = 0):
    """LM-like logits (a bulk and ~0.1% strong tokens), a 4096-token history with repeats of the
    strong tokens, the rows' positions at its end (as verification rows would be)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g) * 2.0
    x += (torch.rand(rows, vocab, generator=g) < 0.001) * (6 + 4 * torch.rand(rows, vocab, generator=g))
    tok = torch.randint(0, vocab, (4096,), generator=g)
    tok[::2] = x[0].topk(20).indices[torch.randint(0, 20, (2048,), generator=g)]
    pos = torch.arange(4000, 4000 + rows)
    return x.cuda(), tok.cuda(), pos.cuda()


def measure(args) -> list[dict]:
    from mtp_turbo.sampling import fused
    from mtp_turbo.sampling.config import SamplerConfig
    from timing import time_graph  # bench/timing.py (this folder is on sys.path)

    names = [n for n in CASES if not args.cases or n in args.cases.split(",")]
    out = []
    for name in names:
        fields, row_list, targets, vocab = CASES[name]
        cfg, vocab = SamplerConfig(**fields), vocab or args.vocab
        for rows in row_list:
            logits, tok, pos = inputs(rows, vocab)
            window = min(cfg.penalty_last_n, tok.numel()) if cfg.penalty_last_n >= 0 else tok.numel()
            plan = fused.make_plan(cfg, vocab, window)
            launches = len(plan.passes) + (2 if plan.mode == "cand" else 1)
            launches += fused.PEN in plan.stages and window > fused.SCAN_MAX  # the count table

            def fz(logits=logits, tok=tok, pos=pos, cfg=cfg):
                return fused.sample_tokens(logits, tok, pos, cfg)

            def tc(logits=logits, tok=tok, pos=pos, cfg=cfg):
                return fused.sample_tokens(logits, tok, pos, cfg, backend="torch")

            f10 = time_graph([fz] * 10, args.reps)
            f1 = time_graph([fz], args.reps)
            tg = te = float("nan")
            if not args.no_torch:
                try:
                    tg = time_graph([tc], args.reps)
                except Exception as e:  # noqa: BLE001 (a chain op that cannot be captured: report it)
                    print(f"  (torch chain not capturable: {type(e).__name__})")
                te = time_eager(tc, args.reps)
            ids = fz()
            same = int((ids == tc()).sum())
            out.append(dict(case=name, rows=rows, vocab=vocab, f10=f10, f1=f1, torch_graph=tg, torch_eager=te,
                            same=same, ids=ids.tolist(), target=targets.get(rows), mode=plan.mode, launches=launches,
                            kernels=kernel_times(fz) if args.kernels else {}))
    return out


def print_table(res: list[dict]) -> None:
    print(f"{'case':<28}{'R':>3}{'V':>8}{'fused x10':>11}{'fused 1/g':>11}{'torch graph':>13}{'torch eager':>13}"
          f"{'speedup':>9}{'target':>8}{'same tok':>10}")
    for r in res:
        tg, te = r["torch_graph"], r["torch_eager"]
        best = te if math.isnan(tg) else min(tg, te)
        same, target = f"{r['same']}/{r['rows']}", str(r["target"]) if r["target"] else "-"
        print(f"{r['case']:<28}{r['rows']:>3}{r['vocab']:>8}{r['f10'] * 1e6:>11.1f}{r['f1'] * 1e6:>11.1f}"
              f"{tg * 1e6:>13.1f}{te * 1e6:>13.1f}{best / r['f10']:>8.1f}x{target:>8}{same:>10}"
              f"   [{r['mode']}: {r['launches']} kernel launches]")
        if r["kernels"]:
            ks = sorted(r["kernels"].items(), key=lambda kv: -kv[1])
            print("      " + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in ks))


def print_ab(before: list[dict], after: list[dict]) -> None:
    print(f"\n{'case':<28}{'R':>3}{'before x10':>12}{'after x10':>11}{'after/bef':>10}{'before 1/g':>12}"
          f"{'after 1/g':>11}{'same tok b/a':>14}{'b == a':>8}")
    bk = {(r["case"], r["rows"]): r for r in before}
    for a in after:
        b = bk.get((a["case"], a["rows"]))
        if b is None:
            continue
        same, equal = f"{b['same']}/{a['same']}/{a['rows']}", "yes" if a["ids"] == b["ids"] else "NO"
        print(f"{a['case']:<28}{a['rows']:>3}{b['f10'] * 1e6:>12.1f}{a['f10'] * 1e6:>11.1f}{a['f10'] / b['f10']:>10.3f}"
              f"{b['f1'] * 1e6:>12.1f}{a['f1'] * 1e6:>11.1f}{same:>14}{equal:>8}")
        if a["kernels"] or b["kernels"]:
            keys = sorted(set(a["kernels"]) | set(b["kernels"]), key=lambda k: -a["kernels"].get(k, 0.0))
            print("      " + ", ".join(f"{k} {b['kernels'].get(k, 0) * 1e6:.1f} -> {a['kernels'].get(k, 0) * 1e6:.1f}"
                                       for k in keys))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--no-torch", action="store_true", help="skip timing the torch chain (tokens still compared)")
    ap.add_argument("--kernels", action="store_true", help="each kernel's device time a call (torch.profiler)")
    ap.add_argument("--before", metavar="DIR", help="A/B: first the same cases with DIR/mtp_turbo, in a subprocess")
    ap.add_argument("--tree", metavar="DIR", help="import mtp_turbo from DIR instead of this checkout")
    ap.add_argument("--json", metavar="FILE", help="write the results here")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "a GPU benchmark"
    here = os.path.dirname(os.path.abspath(__file__))
    if args.tree:
        assert os.path.isdir(os.path.join(args.tree, "mtp_turbo")), f"no mtp_turbo package under {args.tree}"
        sys.path.insert(0, os.path.abspath(args.tree))
    else:
        sys.path.insert(0, os.path.dirname(here))
    before = None
    if args.before:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "before.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--tree", args.before, "--json", path,
                   "--vocab", str(args.vocab), "--reps", str(args.reps), "--cases", args.cases]
            cmd += ["--no-torch"] * args.no_torch + ["--kernels"] * args.kernels
            print(f"before: {args.before}", flush=True)
            subprocess.run(cmd, check=True)
            with open(path) as f:
                before = json.load(f)["results"]
        print(f"\nafter: {args.tree or 'this checkout'}")
    import mtp_turbo

    print(f"sampler call, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{list(mtp_turbo.__path__)[0]}; us per call")
    res = measure(args)
    print_table(res)
    if before is not None:
        print_ab(before, res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": res}, f)


if __name__ == "__main__":
    main()
