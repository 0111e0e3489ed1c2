"""Host time of the MTP drafter's per-round half (prepare + observe) at a short and a long context.

The GPU waits for this each round (spec/program.py runs prepare before replaying the round's graph).
A tiny random head (tests/spec/drafters/conftest.py's TinyMTP) on the CPU: the host work does not
depend on the head's size. Figures in bench/RESULTS.md (session 12, "The round's host half").

    PYTHONPATH=. python bench/experiments/prepare_host_time.py
"""

import importlib.util
import time
from pathlib import Path

import torch

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.drafters.mtp import MTPDrafter

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("conftest", ROOT / "tests/spec/drafters/conftest.py")
cf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cf)

tiny = cf.TinyMTP()
for N in (300, 12000):
    head, fm = tiny.head(), tiny.main(n=N + 400)
    d = MTPDrafter(head, capacity=N + 400, sink=64, window=256, kernels="torch")
    toks = [int(x) for x in torch.randint(0, tiny.V, (N,), generator=torch.Generator().manual_seed(0))]
    d.set_sampler(SamplerConfig(temperature=0.6, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64))
    d.begin(toks)
    d.on_prefill(0, N - 1, fm.hidden(toks)[: N - 1], toks)
    prep, obs = [], []
    for r in range(150):  # a round: prepare, one draft accepted + the bonus, observe
        t0 = time.perf_counter()
        d.prepare(toks, 3)
        t1 = time.perf_counter()
        toks = toks + [r % tiny.V, (r * 7) % tiny.V]
        d.hbuf[len(toks) - 4: len(toks) - 2].copy_(fm.hidden(toks)[len(toks) - 4: len(toks) - 2])
        t2 = time.perf_counter()
        d.observe(toks, 1, None, stored=True)
        prep.append(t1 - t0)
        obs.append(time.perf_counter() - t2)
    prep, obs = sorted(prep[10:]), sorted(obs[10:])
    print(f"{N:6d} tokens: prepare {prep[len(prep) // 2] * 1e6:.0f} us, observe {obs[len(obs) // 2] * 1e6:.0f} us "
          "(medians)")
