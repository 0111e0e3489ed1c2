"""Model-free drafters: n-gram prompt lookup, and a scripted drafter for checks.

Owns: NGramDrafter (its incremental n-gram index) and ScriptedDrafter. Ignores: verification and
the main model's cache (spec/round.py), the interface's hooks (base.py).
"""

from __future__ import annotations

from typing import Callable

from .base import Drafter


class NGramDrafter(Drafter):
    """Prompt lookup (vLLM's ngram / transformers' prompt_lookup): find the most recent earlier
    occurrence of the longest suffix of n tokens (ngram_max down to ngram_min) and propose what
    followed it. An index per n maps each n-gram to the end of its latest occurrence, updated
    incrementally, so a lookup costs O(ngram_max) whatever the context length."""

    name = "ngram"

    def __init__(self, ngram_min: int = 2, ngram_max: int = 4):
        assert 1 <= ngram_min <= ngram_max
        self.ns = list(range(ngram_max, ngram_min - 1, -1))
        self.index: dict[int, dict[tuple, int]] = {n: {} for n in self.ns}
        self.seen: list[int] = []  # the sequence whose n-gram ends [1, len(seen)) are indexed

    def begin(self, tokens: list[int]) -> None:
        self.index = {n: {} for n in self.ns}
        self.seen = []
        self._sync(tokens)

    def _sync(self, tokens: list[int]) -> None:
        if tokens[: len(self.seen)] != self.seen:  # history was rewritten: rebuild
            self.index = {n: {} for n in self.ns}
            self.seen = []
        # index n-grams ending at e < len(tokens) only: the current suffix stays out, so a lookup
        # finds the latest *earlier* occurrence
        for e in range(max(len(self.seen), 1), len(tokens)):
            for n in self.ns:
                if e >= n:
                    self.index[n][tuple(tokens[e - n : e])] = e
        self.seen = list(tokens)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        self._sync(tokens)
        L = len(tokens)
        for n in self.ns:
            if L < n + 1:
                continue
            e = self.index[n].get(tuple(tokens[L - n :]))
            if e is not None:
                return tokens[e : min(e + k, L)]
        return []


class ScriptedDrafter(Drafter):
    """Drafts from a function of the committed tokens (for checks: any deterministic proposer)."""

    name = "scripted"

    def __init__(self, fn: Callable[[list[int], int], list[int]]):
        self.fn = fn

    def propose(self, tokens: list[int], k: int) -> list[int]:
        return list(self.fn(list(tokens), k))[:k]
