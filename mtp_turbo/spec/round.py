"""One speculative round, repeated: draft k tokens, verify k+1 rows in one main forward,
accept/reject, commit the emitted tokens, and tell the drafter.

Owns: the round loop and its stats (RoundStats: rounds, drafts and acceptance per draft position,
tokens per round, the time split). Ignores: model internals (the target's forward), the acceptance
math (spec/verify.py, which shares sample_dist with plain decoding), how drafts are made
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

import torch

from ..sampling.config import SamplerConfig
from .config import SpecConfig
from .drafters.base import Drafter
from .target import Target
from .verify import verify


@dataclass
class RoundStats:
    """Counts and times of the rounds of one generation."""

    drafter: str
    k: int  # drafts per round at most
    rounds: int = 0
    emitted: int = 0  # tokens the rounds emitted (accepted drafts + one sampled token each)
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    accept_s: float = 0.0

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
        return (f"spec ({self.drafter}, k <= {self.k}): {self.rounds} rounds, {self.drafted} drafted, "
                f"{self.accepted} accepted, {self.tokens_per_round:.2f} tokens/round, acceptance per "
                f"position [{acc}] | draft {self.draft_s * 1e3:.1f} ms, verify {self.verify_s * 1e3:.1f} ms, "
                f"accept {self.accept_s * 1e3:.1f} ms")


class _Timer:
    """Device-accurate time split without extra host syncs: CUDA events, read at the end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: dict[str, list] = {"draft": [], "verify": [], "accept": []}

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def add(self, what: str, a, b) -> None:
        self.marks[what].append((a, b))

    def totals(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
            return {w: sum(a.elapsed_time(b) for a, b in v) / 1e3 for w, v in self.marks.items()}
        return {w: sum(b - a for a, b in v) for w, v in self.marks.items()}


def drafter_sampler(sampler: SamplerConfig, spec: SpecConfig) -> SamplerConfig | None:
    """What the drafter is told of the verifier's sampler: the whole config when its drafts follow
    the penalties or are coupled to the verifier's draw (exact rule), else None (raw argmax)."""
    if spec.spec_sample != "exact" or not (spec.draft_penalties or spec.draft_coupling):
        return None
    if spec.draft_penalties:
        return sampler
    return dataclasses.replace(sampler, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)


def speculative_tokens(target: Target, sampler: SamplerConfig, spec: SpecConfig, budget: int,
                       drafter: Drafter, stats: RoundStats) -> Iterator[list[int]]:
    """Yield the tokens each round emits (accepted drafts + one recovered or bonus token)."""
    drafter.set_sampler(drafter_sampler(sampler, spec), coupling=spec.draft_coupling)
    drafter.begin(target.tokens)
    K = spec.draft_tokens
    produced = 0
    timer = _Timer(target.device)
    try:
        while produced < budget:
            n = len(target.tokens)
            # k drafts need k+1 cells from n-1 and may emit k+1 tokens: stay inside both limits
            k = max(0, min(K, budget - produced - 1, target.ctx_size - n))
            t_a = timer.mark()
            drafts = drafter.propose(target.tokens, k) if k > 0 else []
            k = len(drafts)
            if k:
                target.tok_buf[n: n + k] = torch.tensor(drafts, dtype=torch.int64)
            t_b = timer.mark()
            logits, hidden = target.forward(1 + k, pad_to=K + 1 if k else 0)
            t_c = timer.mark()
            if k:
                res = verify(logits, target.tok_buf[: n + k], k, sampler, pos0=n, mode=spec.spec_sample)
                a, emitted = res.accepted, res.emitted
            else:
                a, emitted = 0, [int(target.sample_next(logits[:1], sampler).item())]
            t_d = timer.mark()
            timer.add("draft", t_a, t_b)
            timer.add("verify", t_b, t_c)
            timer.add("accept", t_c, t_d)
            target.commit(emitted, a)
            drafter.observe(target.tokens, a, hidden[: a + 1] if hidden is not None else None)
            produced += len(emitted)
            stats.add(k, a, len(emitted))
            yield emitted
    finally:
        tot = timer.totals()
        stats.draft_s, stats.verify_s, stats.accept_s = tot["draft"], tot["verify"], tot["accept"]
