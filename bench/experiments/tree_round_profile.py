"""Where a replayed tree round's time goes on CUDA, beside a chain round: the kernels of 64 generated
tokens (after a warm-up that captures every graph) under torch.profiler, top kernels by CUDA time, and
wall ms a round. Session 35 measured 1.26-1.69 ms a tree round against 0.73-0.77 for the chain k = 3
(bench/RESULTS.md), ~1 ms of it fixed; this is the next step.

    python bench/experiments/tree_round_profile.py --model GEMMA.gguf [--tree 3:2,1] [--temp 0.6]
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from mtp_turbo.engine import Engine, EngineConfig
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig

PROMPT = "Write a short story about a robot who learns to paint."


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--tree", default="3:2,1")
    p.add_argument("--temp", type=float, default=0.6)
    p.add_argument("--tokens", type=int, default=64)
    a = p.parse_args()
    e = Engine(EngineConfig(model=a.model, device="cuda", ctx_size=1024, progress=False))
    s = SamplerConfig(temperature=a.temp, seed=1)
    for name, spec in (("chain k=3", SpecConfig(draft="mtp", draft_tokens=3)),
                       (f"tree {a.tree}", SpecConfig(draft="mtp", draft_tree=a.tree))):
        def go():
            e.reset()
            return e.generate_ids(PROMPT, sampler=s, max_tokens=a.tokens, stop_ids=(), spec=spec)
        for _ in range(2):  # every graph captured
            go()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        go()
        torch.cuda.synchronize()
        rounds = e.last_stats.spec.rounds
        print(f"{name}: {(time.perf_counter() - t0) * 1e3 / rounds:.3f} ms a round (prompt included), {rounds} rounds")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            go()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))


if __name__ == "__main__":
    main()
