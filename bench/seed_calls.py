"""Cost of a call as the server drives the engine: a new seed (or temperature, or draft mode) a call.

    python bench/seed_calls.py --model PATH [--calls 40] [-n 32] [--out FILE.json]

One engine, one prompt; per phase the wall time of each call (generate_ids, n tokens) and the
allocator's reserved GPU memory after it:
  repeat   the same seed every call (the warm path the benchmark measures)
  seeds    a new seed every call (what a seedless server request is)
  values   a new temperature and top-p every call (one sampler shape)
  modes    the draft mode switched every call: none, mtp, ngram, mtp, ...
Phases 1-3 run with --draft auto (the MTP head) at temperature 0.7 with the default chain. Prints
the median ms a call per phase and the memory at its start and end; the package measured is the
one on PYTHONPATH (an A/B runs it from two trees).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    eng = Engine(EngineConfig(model=a.model, device="cuda", progress=False))
    prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle."
    auto = SpecConfig(draft="auto")
    chain = dict(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05)

    def call(sampler, spec):
        torch.cuda.synchronize()
        t = time.perf_counter()
        eng.generate_ids(prompt, sampler=sampler, max_tokens=a.n, spec=spec)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3, torch.cuda.memory_reserved() / 2**20

    call(SamplerConfig(**chain, seed=0), auto)  # loads, compiles, captures
    modes = [SpecConfig(draft="none"), SpecConfig(draft="mtp"), SpecConfig(draft="ngram")]
    phases = {
        "repeat": [(SamplerConfig(**chain, seed=0), auto)] * a.calls,
        "seeds": [(SamplerConfig(**chain, seed=1000 + i), auto) for i in range(a.calls)],
        "values": [(SamplerConfig(**{**chain, "temperature": 0.5 + 0.01 * i, "top_p": 0.9 - 0.002 * i}, seed=7), auto)
                   for i in range(a.calls)],
        "modes": [(SamplerConfig(**chain, seed=3), modes[i % 3]) for i in range(a.calls)],
    }
    res = {}
    for name, calls in phases.items():
        rows = [call(s, sp) for s, sp in calls]
        ms = [r[0] for r in rows]
        res[name] = {"ms": ms, "mib": [r[1] for r in rows]}
        print(f"{name:7s} median {statistics.median(ms):7.1f} ms a call (min {min(ms):.1f}, max {max(ms):.1f}); "
              f"reserved {rows[0][1]:.0f} -> {rows[-1][1]:.0f} MiB")
    if a.out:
        json.dump(res, open(a.out, "w"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
