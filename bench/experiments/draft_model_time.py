"""Where a round of `--draft model` spends its time on the GPU: the draft cache's catch-up (encode) and
its k steps, timed apart with synchronizes around each part (so the parts add up to more than a round).

    python bench/experiments/draft_model_time.py MAIN DRAFT [--k 3] [--rounds 20]
"""
import argparse
import time

import torch

from mtp_turbo.engine import Engine, EngineConfig
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.drafters.model import DraftModelDrafter, PREFILL_CHUNK
from mtp_turbo.spec.config import SpecConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("main")
    ap.add_argument("draft")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    eng = Engine(EngineConfig(model=a.main, progress=False, ctx_size=2048))
    spec = SpecConfig(draft="model", draft_model=a.draft, draft_tokens=a.k)
    prompt = "def quicksort(arr):\n    "
    eng.generate_ids(prompt, sampler=SamplerConfig(temperature=0), max_tokens=64, spec=spec)  # warm
    dr = eng.drafter
    assert isinstance(dr, DraftModelDrafter)
    tokens = eng.encode_prompt(prompt) + eng.generate_ids(prompt, sampler=SamplerConfig(temperature=0), max_tokens=200)
    sync = torch.cuda.synchronize
    t_sync, t_steps, t_all = [], [], []
    n0 = len(tokens) - a.rounds * 2
    for r in range(a.rounds):  # each round: 2 new committed tokens (an accepted draft and a correction)
        toks = tokens[: n0 + 2 * r]
        sync()
        t0 = time.perf_counter()
        dr._sync(toks)
        sync()
        t1 = time.perf_counter()
        dr.propose(toks, a.k)
        sync()
        t2 = time.perf_counter()
        t_sync.append(t1 - t0)
        t_all.append(t2 - t1)
    dr.reset()
    print(f"catch-up (encode of the new rows) ms: {1e3 * sorted(t_sync)[len(t_sync) // 2]:.2f} (median)")
    print(f"propose with k={a.k} (catch-up of nothing + k steps) ms: {1e3 * sorted(t_all)[len(t_all) // 2]:.2f}")
    # one step alone
    toks = tokens[:n0]
    dr._sync(toks)
    n = len(toks)
    for j in range(5):
        sync()
        t0 = time.perf_counter()
        dr.runner.forward(dr.buf[n - 1: n], n - 1)
        sync()
        t_steps.append(time.perf_counter() - t0)
        dr.kv.rollback(n - 1)
    print("one draft step ms:", [round(1e3 * t, 2) for t in t_steps])
    print("runner graphs:", getattr(dr.runner, "use_graphs", None), "chunk", PREFILL_CHUNK)


if __name__ == "__main__":
    main()
