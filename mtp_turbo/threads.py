"""How many CPU threads the engine's steps use: fixed by --threads, or chosen by measurement.

Owns: `ThreadChooser`, which times the decode loop's tokens under each thread count it may use
(all the cores this process may run on, and one) and keeps the faster, probing the other for a
few tokens every `period` tokens so that a change in the machine's load is noticed.
Ignores: what a step computes, the GPU (a CUDA engine's host thread count does not set its speed).

Why: with two threads on two cores, every parallel region of a step waits for both threads; when
another process holds one core, the second thread's share runs late at every region. On a 2-core
x86 machine with one busy process beside it, plain decoding of the default model ran at 18.9 tok/s
with 2 threads and 43.7 with 1, against 69.1 and 44.3 on the quiet machine; a passive OpenMP wait
policy did not help (35.6 busy, 32.5 quiet) (bench/RESULTS.md session 25).
"""

from __future__ import annotations

import os

import torch


def available_cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class ThreadChooser:
    """Per emitted token, the seconds under the thread count that produced it; the count with the
    lower moving average is used, the other tried for `probe` programs every `period` tokens."""

    def __init__(self, options: tuple[int, ...], period: int = 64, probe: int = 3, decay: float = 0.5):
        assert options and all(n >= 1 for n in options), options
        self.options = tuple(dict.fromkeys(options))
        self.period, self.probe, self.decay = period, probe, decay
        self.cost: dict[int, float] = {}  # thread count -> moving average of seconds a token
        self.current = self.options[0]
        self._since = 0  # tokens since the last probe began
        self._probing: list[int] = []  # the programs of the probe under way: their thread counts

    def apply(self) -> None:
        torch.set_num_threads(self.current)

    def record(self, seconds: float, tokens: int) -> None:
        """A program that ran under `current` took `seconds` for `tokens` emitted tokens; choose the
        count for the next one."""
        if tokens <= 0 or len(self.options) == 1:
            return
        per = seconds / tokens
        old = self.cost.get(self.current)
        self.cost[self.current] = per if old is None else self.decay * old + (1 - self.decay) * per
        self._since += tokens
        if self._probing:
            self.current = self._probing.pop()
        elif self._since >= self.period or any(n not in self.cost for n in self.options):
            self._since = 0
            others = [n for n in self.options if n != self.current]
            self._probing = [self.current] + [others[0]] * (self.probe - 1)  # popped from the end
            self.current = others[0]
        else:
            self.current = min(self.cost, key=self.cost.get)
