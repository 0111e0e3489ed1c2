"""Time to first token of a one-shot generate, from process start, split into its parts.

    python bench/ttft.py --model PATH [--prompt TEXT] [-n 64] [--draft mtp] [--profile 20]

Prints seconds from the interpreter's start (the process's start time, read from /proc) to: torch
imported, the CUDA context made, our imports done, the engine built (weights on the device), the
first piece streamed, the last piece; `--profile N` adds the N functions with the most cumulative
time in building the engine and in the generate up to its first token (cProfile);
the same order of events as `mtp-turbo generate PROMPT -n N` (which this mirrors, minus argument
parsing). Run it twice: the first run pays the Triton kernel cache, the second shows a warm one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def process_age() -> float:
    """Seconds since this process started (Linux /proc)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--draft", default="none")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    a = ap.parse_args()
    t_start = time.perf_counter() - process_age()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import torch

    t_torch = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    t_cuda = time.perf_counter()
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    t_import = time.perf_counter()
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    eng = Engine(EngineConfig(model=a.model, progress=False))
    t_engine = time.perf_counter()
    first = None
    spec = SpecConfig(draft=a.draft) if a.draft != "none" else None
    for piece in eng.generate(a.prompt, sampler=SamplerConfig(temperature=0.0), max_tokens=a.n, spec=spec):
        if first is None and piece.token_ids:
            first = time.perf_counter()
            if prof is not None:
                prof.disable()
    t_end = time.perf_counter()
    st = eng.last_stats
    if prof is not None:
        import pstats

        pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(a.profile)
    print(f"ttft: torch imported {t_torch - t_start:.2f} s | CUDA context {t_cuda - t_start:.2f} s | "
          f"imports {t_import - t_start:.2f} s | engine built {t_engine - t_start:.2f} s | first token "
          f"{first - t_start:.2f} s | {st.gen_tokens} tokens {t_end - t_start:.2f} s (prefill {st.prompt_s * 1e3:.0f} ms, "
          f"decode {st.decode_s:.2f} s, {st.decode_tps:.0f} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
