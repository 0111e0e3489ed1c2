"""Choosing each round's number of drafts from what decoding measures: never slower than plain.

Owns: KChooser. Ignores: how rounds run (program.py) and what drafters do.

Rule: a round with k drafts emits E(k) = 1 + sum_{i<k} P(accepted > i) tokens on average and
takes T(k) seconds (host work included); pick the k in 0..K with the most E(k) / T(k), k = 0
being a plain decoding step. P(accepted > i) and T(k) are running averages of the rounds seen
(a round that compiled or captured is left out of T, and one slow round, a host hiccup, counts
as at most `clip` times the running value: one outlier must not park the chooser at k = 0,
where the other k are never timed again). Until every k has been
timed the chooser tries the untimed ones (K first); afterwards it re-times a neighbour of the
best every `probe` rounds, so a change in acceptance (a new kind of text) moves k.
"""

from __future__ import annotations


class KChooser:
    def __init__(self, k_max: int, adaptive: bool = True, decay: float = 0.9, probe: int = 32,
                 clip: float = 2.0):
        assert k_max >= 0 and 0 < decay < 1 and clip >= 1
        self.K, self.adaptive, self.decay, self.probe, self.clip = k_max, adaptive, decay, probe, clip
        self.t: list[float | None] = [None] * (k_max + 1)  # seconds per round
        self.seen = [0] * (k_max + 1)
        self.p = [0.5] * k_max  # P(accepted > i), an optimistic-neutral start
        self.rounds = 0

    def expected(self, k: int) -> float:
        return 1.0 + sum(self.p[:k])

    def best(self) -> int:
        return max(range(self.K + 1), key=lambda k: self.expected(k) / self.t[k])

    def choose(self) -> int:
        if not self.adaptive:
            return self.K
        for k in range(self.K, -1, -1):  # time every k first (the largest first)
            if self.t[k] is None:
                return k
        b = self.best()
        if self.probe and self.rounds % self.probe == self.probe - 1:
            return min(self.K, b + 1) if (self.rounds // self.probe) % 2 else max(0, b - 1)
        return b

    def update(self, k: int, drafted: int, accepted: int, seconds: float, fresh: bool = False) -> None:
        """A round asked for k drafts, drafted `drafted` (a drafter may find fewer), accepted
        `accepted`, and took `seconds`; `fresh`: it compiled or captured (not a timing)."""
        assert 0 <= accepted <= drafted <= self.K, (accepted, drafted, self.K)
        self.rounds += 1
        d = self.decay
        for i in range(drafted):
            self.p[i] = d * self.p[i] + (1 - d) * float(accepted > i)
        self.seen[drafted] += 1
        if fresh:
            return
        old = self.t[drafted]
        self.t[drafted] = seconds if old is None else d * old + (1 - d) * min(seconds, self.clip * old)
