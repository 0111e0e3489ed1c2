"""What an engine keeps between calls: its device programs and its drafters.

Owns: ProgramCache, the RoundPrograms by (sampler shape, mode, split, drafter spec) and the drafters
by spec, each bounded, least recently used out (a program's CUDA graphs released with it); which
drafter is current. Ignores: what a program or a drafter does (program.py, drafters/), when the
engine switches and what it resets then (engine.py).

Why by shape: a server's requests mix seeds, temperatures, top-p and draft modes. Programs keyed
by the whole SamplerConfig captured new graphs for every seed (85-130 ms a call, ~2 MiB each, never
freed); a program's values are read from its params buffer, so one per shape serves them all, and a
drafter kept across mode switches is neither loaded nor captured again (bench/RESULTS.md session 26).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Callable

from ..sampling.config import SamplerConfig
from .drafters.base import Drafter
from .program import RoundProgram, program_shape

MAX_PROGRAMS = 16  # each holds its CUDA graphs (~2 MiB)
MAX_DRAFTERS = 4


class ProgramCache:
    def __init__(self):
        self.programs: OrderedDict[tuple, RoundProgram] = OrderedDict()
        self.drafters: OrderedDict[object, Drafter] = OrderedDict()
        self.drafter: Drafter | None = None  # the current one (None: plain decoding)
        self.spec = None  # its SpecConfig with draft_tokens 0 (a drafter serves any k)

    def use_drafter(self, spec, make: Callable[[], Drafter]) -> bool:
        """Make the drafter of `spec` current: the one kept for it, or make()'s. True when the
        current drafter changed (it then knows nothing the engine committed meanwhile)."""
        same = dataclasses.replace(spec, draft_tokens=0)
        if self.drafter is not None and self.spec == same:
            return False
        drafter = self.drafters.pop(same, None)
        if drafter is None:
            drafter = make()
        self.drafters[same] = drafter
        while len(self.drafters) > MAX_DRAFTERS:
            old, _ = self.drafters.popitem(last=False)
            self.drop(lambda key: key[3] == old)
        self.drafter, self.spec = drafter, same
        return True

    def stop_drafting(self) -> None:
        """Plain decoding: the current drafter stops following the sequence (kept for later)."""
        self.drafter = self.spec = None

    def release_drafters(self) -> None:
        """Forget every drafter and the programs that use them."""
        self.stop_drafting()
        self.drafters.clear()
        self.drop(lambda key: key[3] is not None)

    def drop(self, which: Callable[[tuple], bool]) -> None:
        """Release the programs whose key `which` picks."""
        for key in [key for key in self.programs if which(key)]:
            self.programs.pop(key).release()

    def program(self, sampler: SamplerConfig, mode: str, with_drafter: bool, split: bool, vocab: int,
                history: int, make: Callable[[], RoundProgram]) -> RoundProgram:
        """The program for this sampler's shape (logits of `vocab` over a token buffer of `history`),
        mode and the current drafter (with_drafter), set to this sampler's values; make() builds one
        the first time."""
        key = (program_shape(sampler, vocab, history), mode, split, self.spec if with_drafter else None)
        program = self.programs.pop(key, None)
        if program is None:
            program = make()
        else:
            program.set_sampler(sampler)
        self.programs[key] = program
        while len(self.programs) > MAX_PROGRAMS:
            self.programs.popitem(last=False)[1].release()
        return program
