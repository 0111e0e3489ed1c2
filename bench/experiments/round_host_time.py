"""Where a speculative round's wall time goes on the host, through the public API: the device
program's own time (CUDA events around its graph replay) against the host work before and after it.

Each named host function is wrapped with a timer (this script only: the package is unchanged);
per round it prints medians in us of: wall (one round's launch to the next round's launch), device
(event to event around the replay), and the host parts (the drafter's prepare, the graph replay
call, the wait for the round, commit + observe, the chooser, the drafter's staging) and the host's
critical path: from one round's sync to the next round's replay. What the device waits for each
round is wall - device.

    python bench/experiments/round_host_time.py --model M [--prompts 8] [--temps 0,0.6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mtp_turbo.benchmark.config import load_prompts  # noqa: E402
from mtp_turbo.engine import Engine  # noqa: E402
from mtp_turbo.engine_config import EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec import adaptive, program  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402
from mtp_turbo.spec.drafters import mtp  # noqa: E402

CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64, seed=0)
T = defaultdict(list)  # name -> seconds per call


def timed(cls, name, key=None):
    f = getattr(cls, name)

    def wrap(*a, **kw):
        t0 = time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            T[key or name].append(time.perf_counter() - t0)

    setattr(cls, name, wrap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temps", default="0,0.6")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (a check of this script: no device times)")
    ap.add_argument("--pipeline", default="off", help="EngineConfig.pipeline (off: every round is read before the next launch)")
    args = ap.parse_args()
    for cls, name in ((mtp.MTPDrafter, "prepare"), (mtp.MTPDrafter, "observe"), (program.RoundProgram, "launch"),
                      (program.RoundProgram, "finish"), (Engine, "commit"), (adaptive.KChooser, "choose"),
                      (adaptive.KChooser, "update"), (mtp.MTPDrafter, "_stage"), (mtp.MTPDrafter, "_seq_window"),
                      (mtp.MTPDrafter, "_follow"), (mtp.MTPDrafter, "_repair"), (program.RoundProgram, "_go")):
        timed(cls, name)
    dev_ms = []
    real_replay, real_read = program.RoundProgram._replay, program.RoundProgram._read
    last_read = [None]

    def replay(self, graphs):  # the device program between two events
        t0 = time.perf_counter()
        if last_read[0] is not None:  # the host's critical path: the last round's sync to this replay
            T["sync -> next replay"].append(t0 - last_read[0])
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t1 = time.perf_counter()
        real_replay(self, graphs)
        T["replay call"].append(time.perf_counter() - t1)
        b.record()
        dev_ms.append((a, b))

    def read(self, *a):
        t0 = time.perf_counter()
        out = real_read(self, *a)
        T["_read (sync)"].append(time.perf_counter() - t0)
        last_read[0] = time.perf_counter()
        return out

    program.RoundProgram._replay, program.RoundProgram._read = replay, read
    # with rounds launched ahead the device never waits between them: the host parts timed here are
    # those of rounds read before the next launch (pipeline off)
    eng = Engine(EngineConfig(model=args.model, device=args.device, progress=False, pipeline=args.pipeline))
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    prompts = load_prompts("mtbench", args.prompts)
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    for temp in [float(t) for t in args.temps.split(",")]:
        sampler = SamplerConfig(temperature=temp, **(CHAIN if temp > 0 else {}))
        for p in prompts:  # warm-up: graphs captured
            eng.generate_text(p, sampler=sampler, max_tokens=args.max_tokens, spec=spec)
        sync()
        T.clear()
        dev_ms.clear()
        last_read[0] = None
        rounds, decode_s = 0, 0.0
        for p in prompts:
            eng.generate_text(p, sampler=sampler, max_tokens=args.max_tokens, spec=spec)
            rounds += eng.last_stats.spec.rounds
            decode_s += eng.last_stats.decode_s
            last_read[0] = None  # a prompt's first round follows its prefill
        sync()
        dev = [a.elapsed_time(b) * 1e3 for a, b in dev_ms] or [0.0]
        print(f"temp {temp}: {rounds} rounds, wall {decode_s / rounds * 1e6:.0f} us a round (decode), device "
              f"{statistics.median(dev):.0f} us (median, mean {statistics.mean(dev):.0f}); host per round, "
              "median / mean us:")
        for k, v in T.items():
            print(f"  {k:12s} {statistics.median(v) * 1e6:7.1f} / {statistics.mean(v) * 1e6:7.1f}  ({len(v)} calls)")


if __name__ == "__main__":
    main()
