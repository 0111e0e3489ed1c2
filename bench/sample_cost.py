"""Cost of one sampling-distribution build (sample_dist) at the real vocabulary size.

Full chain: top-k 40, penalties over a 64-token window (repeat, presence, frequency), temperature,
min-p, top-p. Prints the median ms per call and per row for R = 1 and R = 4 on CPU and, if
present, CUDA. Standalone: `python bench/sample_cost.py [--vocab 262144] [--runs 200]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mtp_turbo.sampling.chain import sample_dist
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.sampling.draw import draw
from mtp_turbo.sampling.rng import uniforms

CFG = SamplerConfig(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1,
                    presence_penalty=0.3, frequency_penalty=0.1, penalty_last_n=64, seed=1)


def time_one(device: str, rows: int, vocab: int, runs: int, with_draw: bool) -> float:
    g = torch.Generator().manual_seed(rows)
    logits = (3 * torch.randn(rows, vocab, generator=g)).to(device)
    tokens = torch.randint(0, vocab, (2000 + rows - 1,), generator=g).to(device)
    pos = torch.arange(rows, dtype=torch.int64, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def once():
        p = sample_dist(logits, tokens, CFG)
        if with_draw:
            draw(p, uniforms(CFG.seed, pos))

    for _ in range(5):
        once()
    sync()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        once()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch default); 1 is "
                    "the honest number on a shared/oversubscribed host")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"sample_dist cost, V={args.vocab}, top-k 40 + penalties(64) + temp + min-p + top-p, "
          f"median of {args.runs} (torch {torch.__version__}, {torch.get_num_threads()} CPU threads)")
    print(f"{'device':<8}{'R':>3}{'dist ms':>10}{'dist ms/row':>13}{'+draw ms':>10}{'+draw ms/row':>14}")
    for dev in devices:
        for rows in (1, 4):
            d = time_one(dev, rows, args.vocab, args.runs, False)
            dd = time_one(dev, rows, args.vocab, args.runs, True)
            print(f"{dev:<8}{rows:>3}{d:>10.3f}{d / rows:>13.3f}{dd:>10.3f}{dd / rows:>14.3f}")


if __name__ == "__main__":
    main()
