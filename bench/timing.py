"""CUDA-graph timing shared by the bench scripts (gemv_bench.py, sample_bench.py)."""

from __future__ import annotations

import math
import statistics

import torch


def time_graph(fn_list, reps: int = 7, warm_ms: float = 50.0, rep_ms: float = 2.0) -> float:
    """Median seconds per call of the callables in fn_list, replayed as one CUDA graph: replays for
    warm_ms first, then reps of >= rep_ms each. (With 7 single replays and no warm-up, the head's
    first case after a compile measured 7-11% slower than the same tile timed right after it:
    bench/results/2026-11-30i, run 1.)"""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fn_list[:2]:
            fn()  # compile / warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fn_list:
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    one_ms = max(start.elapsed_time(end), 1e-3)
    for _ in range(math.ceil(warm_ms / one_ms)):
        g.replay()
    n = math.ceil(rep_ms / one_ms)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(n):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / (n * len(fn_list)))
    del g
    return statistics.median(times)
