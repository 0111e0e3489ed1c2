"""KChooser against simulated rounds: how close it gets to the best fixed k (CPU, no model).

Rounds accept each drafted position with a chain of conditional probabilities (a regime) and take
T[k] ms with noise; the figure is the chooser's tokens per ms over the best fixed k's, for
stationary regimes and for regimes that switch every `period` rounds (the best fixed k in
hindsight). T is the MT-Bench temp-0 shape of a round (plain step 0.69 ms, k=3 round 1.08 ms).
Run with chooser options, e.g. `--p-decay 0.9` for the window before session 17.

    python bench/experiments/chooser_sim.py [--p-decay 0.97] [--seeds 8]
"""

from __future__ import annotations

import argparse
import math
import random

from mtp_turbo.spec.adaptive import KChooser

T = [0.69, 0.92, 1.0, 1.08]
REGIMES = {"t0": [0.8, 0.75, 0.7], "mid": [0.6, 0.45, 0.35], "t06": [0.49, 0.73, 0.78],
           "bad": [0.3, 0.5, 0.5], "worse": [0.2, 0.4, 0.4]}


def accepted(rng, k, cond):
    a = 0
    while a < k and rng.random() < cond[a]:
        a += 1
    return a


def run(kw, seed, regimes, rounds, period, noise, fixed_k=None):
    rng = random.Random(seed)
    c = KChooser(3, **kw)
    toks, t, cur = 0, 0.0, regimes[0]
    for r in range(rounds):
        if period and r % period == 0:
            cur = rng.choice(regimes)
        k = c.choose() if fixed_k is None else fixed_k
        a = accepted(rng, k, cur)
        s = T[k] * (1 + noise * abs(rng.gauss(0, 1)))
        c.update(k, k, a, s)
        toks, t = toks + a + 1, t + s
    return toks / t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--p-decay", type=float, default=None, help="KChooser p_decay (default: the class's)")
    ap.add_argument("--seeds", type=int, default=8)
    a = ap.parse_args()
    kw = {} if a.p_decay is None else {"p_decay": a.p_decay}
    for name, cond in REGIMES.items():
        best_k = max(range(4), key=lambda k: (1 + sum(math.prod(cond[:i + 1]) for i in range(k))) / T[k])
        r = [run(kw, s, [cond], 3000, 0, 0.05) / run(kw, s, [cond], 3000, 0, 0.05, fixed_k=best_k)
             for s in range(a.seeds)]
        print(f"{name:6s} stationary: {sum(r) / len(r):.3f} of fixed k = {best_k} (min {min(r):.3f})")
    regs = list(REGIMES.values())
    r = [run(kw, s, regs, 4000, 60, 0.2) / max(run(kw, s, regs, 4000, 60, 0.2, fixed_k=k) for k in range(4))
         for s in range(a.seeds)]
    print("regimes switching every 60 rounds: " + " ".join(f"{x:.3f}" for x in r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
