"""Choosing each round's number of drafts from what decoding measures: never slower than plain.

Owns: KChooser. Ignores: how rounds run (program.py) and what drafters do.

Rule: a round with k drafts emits E(k) = 1 + sum_{i<k} P(accepted > i) tokens on average and
takes T(k) seconds (host work included); pick the k in 0..K with the most E(k) / T(k), k = 0
being a plain decoding step. P(accepted > i) and T(k) are running averages of the rounds seen
(a round that compiled, captured or caught the drafter up on a long stretch is left out of T,
and one slow round, a host hiccup, counts as at most `clip` times the running value: one outlier
must not park the chooser at k = 0). Until every k has been timed the chooser tries the untimed
ones (K first); afterwards it tries a neighbour of the best every `probe` rounds, so a change in
acceptance (a new kind of text) moves k. A try lasts `try_rounds` rounds: from k = 0 its first
round catches the drafter up on every row since the last draft (no timing), the others measure.
While plain stays best the gap between tries doubles, up to `probe_max` rounds.
"""

from __future__ import annotations


class KChooser:
    def __init__(self, k_max: int, adaptive: bool = True, decay: float = 0.9, probe: int = 32,
                 clip: float = 2.0, probe_max: int = 1024, try_rounds: int = 4):
        assert k_max >= 0 and 0 < decay < 1 and clip >= 1 and 0 < try_rounds < probe <= probe_max
        self.K, self.adaptive, self.decay, self.probe, self.clip = k_max, adaptive, decay, probe, clip
        self.probe_max, self.try_rounds = probe_max, try_rounds
        self.gap, self.since, self.up = probe, 0, False  # rounds between tries, since the last, direction
        self.try_k, self.trying = 0, 0  # the k being tried, rounds of the try left
        self.t: list[float | None] = [None] * (k_max + 1)  # seconds per round
        self.seen = [0] * (k_max + 1)
        self.p = [0.5] * k_max  # P(accepted > i), an optimistic-neutral start

    def expected(self, k: int) -> float:
        return 1.0 + sum(self.p[:k])

    def best(self) -> int:
        return max(range(self.K + 1), key=lambda k: self.expected(k) / self.t[k])

    def choose(self) -> int:
        if not self.adaptive or self.K == 0:
            return self.K
        for k in range(self.K, -1, -1):  # time every k first (the largest first)
            if self.t[k] is None:
                return k
        if self.trying:
            self.trying -= 1
            return self.try_k
        b = self.best()
        self.since += 1
        if self.since < self.gap:
            return b
        self.since = 0
        self.gap = min(2 * self.gap, self.probe_max) if b == 0 else self.probe
        self.up = not self.up
        self.try_k = b + 1 if b == 0 or (self.up and b < self.K) else b - 1
        self.trying = self.try_rounds - 1
        return self.try_k

    def update(self, k: int, drafted: int, accepted: int, seconds: float, fresh: bool = False) -> None:
        """A round asked for k drafts, drafted `drafted` (a drafter may find fewer), accepted
        `accepted`, and took `seconds`; `fresh`: it compiled or captured (not a timing)."""
        assert 0 <= accepted <= drafted <= self.K, (accepted, drafted, self.K)
        d = self.decay
        for i in range(drafted):
            self.p[i] = d * self.p[i] + (1 - d) * float(accepted > i)
        self.seen[drafted] += 1
        if fresh:
            return
        old = self.t[drafted]
        self.t[drafted] = seconds if old is None else d * old + (1 - d) * min(seconds, self.clip * old)
