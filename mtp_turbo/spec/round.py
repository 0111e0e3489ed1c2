"""One speculative round, repeated: draft k tokens, verify k+1 rows in one main forward,
accept/reject, commit the emitted tokens, and tell the drafter.

Owns: the round loop and its stats (rounds, drafted, acceptance per draft position, tokens per
round, time split). Ignores: model internals (the engine's step does the forward) and the
acceptance math (spec/verify.py, which shares sample_dist with plain decoding).

Cache bookkeeping: before a round the cache holds every committed token but the pending last one
t0. The verify forward writes t0 and the drafts at cells [n-1, n-1+k]; after `a` accepted drafts,
cells up to n-1+a hold committed K/V and the length moves there; the cells of rejected drafts are
stale and are overwritten by the next forward before anything reads them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterator

import torch

from ..errors import ConfigError
from .config import SpecConfig
from .drafter import Drafter, NGramDrafter
from .verify import verify


def make_drafter(engine, spec: SpecConfig) -> Drafter:
    if spec.draft == "ngram":
        return NGramDrafter(spec.ngram_min, spec.ngram_max)
    if spec.draft == "mtp":
        try:
            from ..models.mtp_load import load_mtp_drafter
        except ImportError:
            raise ConfigError("the MTP drafter is not available in this build; use --draft ngram or none") from None
        return load_mtp_drafter(engine, spec)
    raise ConfigError(f"no drafter for draft={spec.draft!r}")


class _Timer:
    """Device-accurate time split without extra host syncs: CUDA events, read at the end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: dict[str, list] = {"draft": [], "verify": [], "sample": []}

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


def speculative_tokens(engine, sampler, spec: SpecConfig, budget: int, stats, drafter: Drafter | None = None) -> Iterator[list[int]]:
    """Yield the tokens each round emits (accepted drafts + one recovered or bonus token)."""
    drafter = drafter or make_drafter(engine, spec)
    if hasattr(drafter, "set_sampler"):  # MTP: penalised argmax, or the coupled draw at temp > 0
        exact = spec.spec_sample == "exact"
        if exact and (spec.draft_penalties or spec.draft_coupling):
            pen = sampler if spec.draft_penalties else dataclasses.replace(sampler, repeat_penalty=1.0,
                                                                           presence_penalty=0.0, frequency_penalty=0.0)
            drafter.set_sampler(pen, coupling=spec.draft_coupling)
        else:
            drafter.set_sampler(None)
    drafter.begin(engine.tokens)
    K = spec.draft_tokens
    drafted_at = [0] * K
    accepted_at = [0] * K
    rounds = produced = 0
    timer = _Timer(engine.device)
    stats.spec = sp = {"drafter": drafter.name, "k": K, "rounds": 0, "drafted": 0, "accepted": 0,
                       "tokens_per_round": 0.0, "acceptance_per_position": [],
                       "draft_s": 0.0, "verify_s": 0.0, "sample_s": 0.0}
    try:
        while produced < budget:
            n = len(engine.tokens)
            # k drafts need k+1 cells from n-1 and may emit k+1 tokens: stay inside both limits
            k = max(0, min(K, budget - produced - 1, engine.ctx_size - n))
            t_a = timer.mark()
            drafts = drafter.propose(engine.tokens, k) if k > 0 else []
            k = len(drafts)
            t_b = timer.mark()
            logits, hidden = engine.step_logits(drafts, pad_to=K + 1 if drafts else 0)
            t_c = timer.mark()
            if k:
                toks = engine._tok_dev[:n]
                toks = torch.cat([toks, torch.tensor(drafts, dtype=torch.int64, device=engine.device)])
                res = verify(logits, toks, k, sampler, pos0=n, mode=spec.spec_sample)
                a, emitted = res.accepted, res.emitted
            else:
                a, emitted = 0, [int(engine.sample_next(logits[:1], sampler).item())]
            t_d = timer.mark()
            timer.add("draft", t_a, t_b)
            timer.add("verify", t_b, t_c)
            timer.add("sample", t_c, t_d)
            engine.append(emitted, extra_cached=a)
            drafter.observe(engine.tokens, a, hidden[: a + 1] if hidden is not None else None)
            rounds += 1
            produced += len(emitted)
            for i in range(k):
                drafted_at[i] += 1
                accepted_at[i] += i < a
            sp.update(rounds=rounds, drafted=sum(drafted_at), accepted=sum(accepted_at),
                      tokens_per_round=produced / rounds,
                      acceptance_per_position=[accepted_at[i] / drafted_at[i] if drafted_at[i] else 0.0 for i in range(K)],
                      accepted_per_position=list(accepted_at), drafted_per_position=list(drafted_at))
            yield emitted
    finally:
        tot = timer.totals()
        sp.update(draft_s=tot["draft"], verify_s=tot["verify"], sample_s=tot["sample"])
