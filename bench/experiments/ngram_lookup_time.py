"""Device time of the n-gram drafter's lookup (spec/drafters/ngram.py): the Triton kernel and the torch
path, each replayed from a CUDA graph, per token-buffer size and committed count.

Why: the lookup runs inside every n-gram round's graph; it should cost a few microseconds whatever
the context (one launch, a program per 1024 ends). Each row: a graph of `reps` lookups (k = 3)
replayed `iters` times, CUDA events around the replays, us per lookup; the drafts are checked
against the torch path first.

    python bench/experiments/ngram_lookup_time.py [--reps 50] [--iters 20]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def time_graph(fn, reps: int, iters: int) -> float:
    import torch

    fn()  # compile / scratch before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / (reps * iters)


def main() -> int:
    import torch

    from mtp_turbo.spec.drafters.ngram import NGramDrafter

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50, help="lookups a graph")
    ap.add_argument("--iters", type=int, default=20, help="replays timed")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ngram_lookup_time: no CUDA device: nothing timed (SKIPPED)")
        return 0
    kern, ref = NGramDrafter(kernels="triton"), NGramDrafter(kernels="torch")
    g = torch.Generator(device="cuda").manual_seed(0)
    print("| buffer | committed | kernel us | torch us | same drafts |")
    print("|---|---|---|---|---|")
    for C in (4096 + 16, 12288 + 16, 131072 + 16):
        tok = torch.randint(0, 2000, (C,), device="cuda", generator=g)
        for L in (400, C // 2, C - 16):
            n = torch.tensor([L], device="cuda")
            same = torch.equal(kern.lookup(tok, n, 3), ref.lookup(tok, n, 3))
            tk = time_graph(lambda: kern.lookup(tok, n, 3), args.reps, args.iters)
            tt = time_graph(lambda: ref.lookup(tok, n, 3), args.reps, args.iters)
            print(f"| {C} | {L} | {tk:.2f} | {tt:.2f} | {'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
