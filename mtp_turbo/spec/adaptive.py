"""Choosing each round's number of drafts from what decoding measures: never slower than plain.

Owns: KChooser. Ignores: how rounds run (program.py) and what drafters do.

Rule: a round with k drafts emits E(k) = 1 + sum_{i<k} P(accepted > i) tokens on average and
takes T(k) seconds (host work included); pick the k in 0..K with the most E(k) / T(k), k = 0
being a plain decoding step. T(k) is a running average of the rounds seen (a round that compiled,
captured or caught the drafter up on a long stretch is left out, and one slow round, a host
hiccup, counts as at most `clip` times the running value: one outlier must not park the chooser at
k = 0). P(accepted > i) is a decayed count of the rounds that drafted past i (`p_decay`, a window of
~1 / (1 - p_decay) of them) over a weak prior of 1/2: with a short window (0.9) a run of bad luck
parked the chooser at k = 0 on estimates that k = 0 never updates (bench/experiments/chooser_sim.py;
bench/RESULTS.md session 17). Until every k has been timed the chooser tries
the untimed ones (K first); afterwards it tries a neighbour of the best every `probe` rounds, so a
change in acceptance (a new kind of text) moves k. A try lasts `try_rounds` rounds: from k = 0 its
first round catches the drafter up on every row since the last draft (no timing), the others
measure, and the acceptance seen before it is dropped (it is as old as the stretch of plain steps:
a few rounds of the try must be able to move k). While plain stays best the gap between tries
doubles, up to `probe_max` rounds.
"""

from __future__ import annotations


class KChooser:
    def __init__(self, k_max: int, adaptive: bool = True, decay: float = 0.9, probe: int = 32,
                 clip: float = 2.0, probe_max: int = 1024, try_rounds: int = 4, p_decay: float = 0.97):
        assert k_max >= 0 and 0 < decay < 1 and 0 < p_decay < 1 and clip >= 1 and 0 < try_rounds < probe <= probe_max
        self.K, self.adaptive, self.decay, self.probe, self.clip = k_max, adaptive, decay, probe, clip
        self.p_decay = p_decay
        self.probe_max, self.try_rounds = probe_max, try_rounds
        self.gap, self.since, self.up = probe, 0, False  # rounds between tries, since the last, direction
        self.try_k, self.trying = 0, 0  # the k being tried, rounds of the try left
        self.t: list[float | None] = [None] * (k_max + 1)  # seconds per round
        self.seen = [0] * (k_max + 1)
        # P(accepted > i) = (hits + 1/2) / (rounds + 1): decayed counts over a prior of 1/2
        self.hits = [0.0] * k_max
        self.rounds = [0.0] * k_max

    @property
    def p(self) -> list[float]:
        return [(h + 0.5) / (n + 1.0) for h, n in zip(self.hits, self.rounds)]

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
        if b == 0:  # what k > 0 saw before this stretch of plain steps is that old: the try decides
            self.hits, self.rounds = [0.0] * self.K, [0.0] * self.K
        return self.try_k

    def update(self, k: int, drafted: int, accepted: int, seconds: float, fresh: bool = False) -> None:
        """A round asked for k drafts, drafted `drafted` (a drafter may find fewer), accepted
        `accepted`, and took `seconds`; `fresh`: it compiled or captured (not a timing)."""
        assert 0 <= accepted <= drafted <= self.K, (accepted, drafted, self.K)
        d = self.decay
        for i in range(drafted):
            self.hits[i] = self.p_decay * self.hits[i] + float(accepted > i)
            self.rounds[i] = self.p_decay * self.rounds[i] + 1.0
        self.seen[drafted] += 1
        if fresh:
            return
        old = self.t[drafted]
        self.t[drafted] = seconds if old is None else d * old + (1 - d) * min(seconds, self.clip * old)
