"""Where a decoding token's device time goes, end to end through the public API: plain and each
drafter of --modes (default MTP at the default k: 3 at temp 0, 2 with the chain), at temp 0 and with
the temp-0.6 chain, on a short prompt set and (optionally) a long prompt.

For each case: a warm-up generation, then each prompt prefilled outside the profiler and its
decode profiled (torch.profiler, CUDA kernels, graph replays included); prints decode tok/s of the
profiled runs (profiler on: read the ratios, not the speeds), kernels per round and the device time
per kernel name per round (a round: a plain token, or a speculative round).

    python bench/round_profile.py --model M [--modes mtp,ngram] [--draft-tokens K] [--long FILE] [--file-weights]
        --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtp_turbo.benchmark.config import load_prompts  # noqa: E402
from mtp_turbo.engine import Engine  # noqa: E402
from mtp_turbo.engine_config import EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402

CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64, seed=0)


def run(eng, prompts, sampler, spec, n: int) -> dict:
    """Each prompt: prefilled by a 1-token generation outside the profiler, then the profiled
    generation of the same prompt reuses that cache (all but the last prompt token), so the
    kernels counted are the decode's."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    act = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU

    def gen(p):
        for _ in eng.generate(p, sampler=sampler, max_tokens=n, spec=spec, stop_ids=()):
            pass
        if cuda:
            torch.cuda.synchronize()
        return eng.last_stats

    for p in prompts:  # warm-up: graphs captured, kernels built
        eng.reset()
        gen(p)
    stats, per_key = [], {}
    for p in prompts:
        eng.reset()
        for _ in eng.generate(p, sampler=sampler, max_tokens=1, spec=spec, stop_ids=()):  # the drafter's too
            pass
        with profile(activities=[act]) as pr:
            stats.append(gen(p))
        for ev in pr.key_averages():
            t = (getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)) if cuda \
                else ev.self_cpu_time_total
            if t > 0 and ev.count > 0:
                k = per_key.setdefault(ev.key[:60], [0.0, 0])
                k[0] += t
                k[1] += ev.count
    toks = sum(s.gen_tokens for s in stats)
    dec = sum(s.decode_s for s in stats)
    rounds = sum(s.spec.rounds for s in stats) if spec is not None else toks
    rows = sorted(({"kernel": k, "us_per_round": t / rounds, "launches_per_round": c / rounds}
                   for k, (t, c) in per_key.items()), key=lambda r: -r["us_per_round"])
    total = sum(t for t, _ in per_key.values())
    return {"tokens": toks, "rounds": rounds, "decode_tps": toks / dec, "tokens_per_round": toks / rounds,
            "prompt_cached": [s.prompt_cached for s in stats], "device_us_per_round": total / rounds,
            "wall_us_per_round": dec / rounds * 1e6,
            "launches_per_round": sum(r["launches_per_round"] for r in rows), "kernels": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--long", default="", help="a .json list whose first string is the long prompt ('' = none)")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--modes", default="mtp", help="drafters profiled beside plain decoding (comma list: mtp, ngram)")
    ap.add_argument("--draft-tokens", type=int, default=0, help="k (0 = the default: 3 at temp 0, 2 when sampling)")
    ap.add_argument("--file-weights", action="store_true", help="the matrices as the file's bytes (EngineConfig.file_weights)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sets = {"short": load_prompts("mtbench", a.n_prompts)}
    if a.long:
        sets["long"] = json.load(open(a.long))[:1]
    out = []
    for name, prompts in sets.items():
        eng = Engine(EngineConfig(model=a.model, ctx_size=4096 if name == "short" else 16384, progress=False,
                                  file_weights=a.file_weights))
        for temp in (0.0, 0.6):
            sampler = SamplerConfig(temperature=0.0) if temp == 0 else SamplerConfig(temperature=temp, **CHAIN)
            specs = [None] + [SpecConfig(draft=m, draft_tokens=a.draft_tokens).for_sampler(temp == 0)
                              for m in a.modes.split(",") if m]
            for spec in specs:
                r = run(eng, prompts, sampler, spec, a.max_tokens)
                r |= {"set": name, "temp": temp,
                      "mode": "plain" if spec is None else f"{spec.draft} k={spec.draft_tokens}"}
                out.append(r)
                print(f"{name} temp {temp:g} {r['mode']}: {r['decode_tps']:.1f} tok/s (profiled), "
                      f"{r['tokens_per_round']:.2f} tokens/round, wall {r['wall_us_per_round']:.0f} us/round, "
                      f"device {r['device_us_per_round']:.0f} us/round, {r['launches_per_round']:.0f} launches/round")
                for k in r["kernels"][: a.top]:
                    print(f"    {k['kernel']:<60} {k['us_per_round']:8.1f} us {k['launches_per_round']:6.1f}x")
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
