"""Speculative rounds, repeated: choose k, draft, verify k+1 rows, accept on the device (one device
program a round, program.py), commit the emitted tokens, tell the drafter.

Owns: the round loop and its stats (RoundStats: rounds, drafts and acceptance per draft position,
tokens per round, the time split). Ignores: the device work (program.py), model internals (the
target), the acceptance rules (verify.py), choosing k (adaptive.py), how drafts are made
(spec/drafters/).

Cache bookkeeping: before a round the target's cache holds every committed token but the pending
last one t0. The verify forward writes t0 and the drafts at cells [n-1, n-1+k]; after `a` accepted
drafts, cells up to n-1+a hold committed K/V and the length moves there; the cells of rejected
drafts are stale and are overwritten by the next forward before anything reads them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Iterator

from ..sampling.config import SamplerConfig
from .adaptive import KChooser
from .config import SpecConfig
from .drafters.base import Drafter
from .program import RoundProgram, launched_ahead
from .target import Target


@dataclass
class RoundStats:
    """Counts and times of the rounds of one generation."""

    drafter: str
    k: int  # drafts per round at most
    rounds: int = 0
    emitted: int = 0  # tokens the rounds emitted (accepted drafts + one sampled token each)
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    round_s: float = 0.0  # wall time of the rounds, launch to commit, host work included (the
    # consumer's work on the previous round's tokens runs inside it, beside the device)
    host_s: float = 0.0  # of which host work around the device program (staging, bookkeeping)
    # the device program's parts (only with SpecConfig.round_split: CUDA events between them)
    draft_s: float = 0.0
    verify_s: float = 0.0
    accept_s: float = 0.0
    k_counts: dict[int, int] = field(default_factory=dict)  # rounds per number of drafts
    ahead: int = 0  # rounds launched before the round before them was read (program.launch_after)

    def __post_init__(self) -> None:
        self.drafted_per_position = self.drafted_per_position or [0] * self.k
        self.accepted_per_position = self.accepted_per_position or [0] * self.k

    @property
    def drafted(self) -> int:
        return sum(self.drafted_per_position)

    @property
    def accepted(self) -> int:
        return sum(self.accepted_per_position)

    @property
    def tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    def add(self, k: int, accepted: int, emitted: int) -> None:
        self.rounds += 1
        self.emitted += emitted
        for i in range(k):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += i < accepted

    def summary(self) -> str:
        acc = ", ".join(f"{a:.2f}" for a in self.acceptance_per_position)
        ks = ", ".join(f"{k}: {n}" for k, n in sorted(self.k_counts.items()))
        s = (f"spec ({self.drafter}, k <= {self.k}): {self.rounds} rounds (per k {{{ks}}}), {self.drafted} drafted, "
             f"{self.accepted} accepted, {self.tokens_per_round:.2f} tokens/round, acceptance per position "
             f"[{acc}], {self.ahead} launched ahead | rounds {self.round_s * 1e3:.1f} ms, of which host "
             f"{self.host_s * 1e3:.1f} ms")
        if self.draft_s or self.verify_s:
            s += (f" | device: draft {self.draft_s * 1e3:.1f} ms, verify {self.verify_s * 1e3:.1f} ms, "
                  f"accept {self.accept_s * 1e3:.1f} ms")
        return s


def drafter_sampler(sampler: SamplerConfig, spec: SpecConfig) -> SamplerConfig | None:
    """What the drafter is told of the verifier's sampler: the whole config when its drafts follow
    the penalties or are coupled to the verifier's draw (exact rule), else None (raw argmax)."""
    if spec.spec_sample != "exact" or not (spec.draft_penalties or spec.draft_coupling):
        return None
    if spec.draft_penalties:
        return sampler
    return dataclasses.replace(sampler, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)


def speculative_tokens(target: Target, sampler: SamplerConfig, spec: SpecConfig, budget: int,
                       drafter: Drafter, stats: RoundStats, program: RoundProgram | None = None,
                       plain_steps: int = 1) -> Iterator[list[int]]:
    """Yield the tokens each round emits (accepted drafts + one recovered or bonus token).
    program: the RoundProgram to run rounds with (the engine keeps one per sampler and drafter, so
    its CUDA graphs outlive a call); default a new one. plain_steps: where the chooser picks k = 0,
    that many plain steps run as one device program (as plain decoding runs them: one host sync
    for all), each counted as a round of k = 0 and timed as 1/plain_steps of the program."""
    assert plain_steps >= 1 and spec.draft_tokens >= 1, "draft_tokens 0 (auto): resolve it with spec.for_sampler"
    drafter.set_sampler(drafter_sampler(sampler, spec), coupling=spec.draft_coupling)
    drafter.begin(target.tokens)
    if program is None:
        program = RoundProgram(target, sampler, spec.spec_sample, drafter, split=spec.round_split)
    # the chooser's measurements stay with the program (and its graphs) across calls
    key = (spec.draft_tokens, spec.adaptive)
    if program.chooser_key != key:
        program.chooser, program.chooser_key = KChooser(spec.draft_tokens, adaptive=spec.adaptive), key
    chooser = program.chooser
    produced = 0
    # rounds launched before the previous one is read: fixed k, drafts made on the device
    ahead = program.pipeline and drafter.on_device and not spec.adaptive
    followed = None  # the ticket after which the next round was launched ahead (its drafter state then moves)
    last_end = 0.0  # when the last round was settled (a round launched ahead is timed from there)

    def launch():
        """Choose k, draft on the host if the drafter does, launch the round -> (ticket, want, t0, host s)."""
        t0 = time.perf_counter()
        n = len(target.tokens)
        # k drafts need k+1 cells from n-1 and may emit k+1 tokens: stay inside both limits
        want = max(0, min(chooser.choose(), budget - produced - 1, target.ctx_size - n))
        host = None  # a host drafter's drafts (None: the device drafter's, or a plain step)
        if want and not drafter.on_device:
            host = drafter.propose(target.tokens, want) or None
        t1 = time.perf_counter()
        if want == 0 and plain_steps > 1 and budget - produced >= plain_steps and n + plain_steps <= target.ctx_size:
            return program.launch(0, steps=plain_steps), 0, t0, t1 - t0
        return program.launch(want if drafter.on_device else 0, host), want, t0, t1 - t0

    def launch_after(pending):
        """The next round, launched before `pending` is read (None where it cannot be)."""
        nonlocal followed
        t0 = time.perf_counter()
        prev = pending[0]
        most = produced + prev.most  # what may be out once pending is read
        want = min(chooser.choose(), budget - most - 1, target.ctx_size - len(target.tokens) - prev.most)
        ticket = program.launch_after(prev, want) if want >= 1 else None
        if ticket is None:
            return None
        followed = prev
        return ticket, want, t0, time.perf_counter() - t0

    def settle(pending) -> list[int]:
        """Wait for the launched round, commit it, tell the drafter and the stats -> its tokens."""
        nonlocal produced, followed, last_end
        ticket, want, t0, host_s = pending
        t0 = max(t0, last_end)  # launched ahead: its time starts where the round before it ended
        a, emitted, k = program.finish(ticket)
        t3 = time.perf_counter()
        target.commit(emitted, a, on_device=True)
        drafter.observe(target.tokens, a, None, stored=True)  # plain steps: a = steps - 1 rows "accepted"
        if followed is ticket:  # the next round caught up from this one's outcome
            drafter.launched_after(a)
            followed = None
            stats.ahead += 1
        t4 = last_end = time.perf_counter()
        steps = len(emitted) if ticket.kind == "steps" else 1
        for _ in range(steps):  # a program of plain steps: that many rounds of k = 0
            chooser.update(want, k, 0 if steps > 1 else a, (t4 - t0) / steps, fresh=program.last_fresh)
            stats.add(k, 0 if steps > 1 else a, len(emitted) // steps)
        stats.host_s += host_s + (t4 - t3)
        stats.round_s += t4 - t0  # launch to commit: the consumer's time since the launch overlaps it
        if program.last_split is not None:
            d, v, acc = program.last_split
            stats.draft_s, stats.verify_s, stats.accept_s = stats.draft_s + d / 1e3, stats.verify_s + v / 1e3, \
                stats.accept_s + acc / 1e3
        stats.k_counts[k] = stats.k_counts.get(k, 0) + steps
        produced += len(emitted)
        return emitted

    # rounds one ahead of the consumer; one in flight at a stop is drained, never committed
    yield from launched_ahead(launch, settle, lambda: produced < budget, lambda p: program.finish(p[0]),
                              launch_after if ahead else None)
