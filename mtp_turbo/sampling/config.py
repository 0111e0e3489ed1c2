"""Sampler configuration: one frozen dataclass, validated on construction.

Owns: the sampler settings and their legal ranges. Knows nothing of tensors.
CLI flags map 1:1 to these fields (`--temperature`, `--top-k`, ...); the server's requests build
this class too, so a value refused here is refused everywhere.

The ranges keep the float32 chain finite: logits are divided by the temperature and the repeat
penalty (or multiplied by it) and shifted by the presence and frequency penalties times a count
of at most the context, so bounded factors keep every logit far from overflow, and a subnormal
temperature (which rounds to 0 in float32) cannot divide by zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

STAGES = ("top_k", "penalties", "temperature", "min_p", "top_p")
DEFAULT_ORDER = STAGES  # the report's order
TEMPERATURE = (1e-3, 100.0)  # or 0 (greedy); a draw below 1e-3 is all but greedy: ask for 0
REPEAT_PENALTY = (1e-2, 100.0)  # 1 = off; beyond these a logit is scaled by more than 100x
PENALTY = 100.0  # |presence_penalty|, |frequency_penalty|: logits are O(10), so 100 already forbids a token
INT_MAX = 2**31 - 1  # top_k, penalty_last_n: beyond the vocabulary / the context they mean "all"


@dataclass(frozen=True)
class SamplerConfig:
    temperature: float = 0.8  # 0 = greedy (argmax after penalties)
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    min_p: float = 0.05  # 0.0 = off
    repeat_penalty: float = 1.0  # 1.0 = off; llama.cpp/HF rule: l>0 -> l/r, else l*r
    presence_penalty: float = 0.0  # subtracted once from every token seen in the window
    frequency_penalty: float = 0.0  # subtracted per occurrence in the window
    penalty_last_n: int = 64  # window of history the penalties see; -1 = all, 0 = off
    seed: int = 0  # key of the counter-based random stream (with the absolute position)
    order: tuple[str, ...] = DEFAULT_ORDER

    def __post_init__(self) -> None:
        # every comparison is written so that NaN fails it
        t = self.temperature
        if not (t == 0.0 or TEMPERATURE[0] <= t <= TEMPERATURE[1]):
            raise ConfigError(f"temperature must be 0 (greedy) or in [{TEMPERATURE[0]:g}, {TEMPERATURE[1]:g}], got {t}")
        if not (0 <= self.top_k <= INT_MAX):
            raise ConfigError(f"top-k must be in [0, {INT_MAX}] (0 = off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ConfigError(f"min-p must be in [0, 1], got {self.min_p}")
        lo, hi = REPEAT_PENALTY
        if not (lo <= self.repeat_penalty <= hi):
            raise ConfigError(f"repeat-penalty must be in [{lo:g}, {hi:g}] (1 = off), got {self.repeat_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not (-PENALTY <= v <= PENALTY):
                raise ConfigError(f"{name.replace('_', '-')} must be in [{-PENALTY:g}, {PENALTY:g}], got {v}")
        if not (-1 <= self.penalty_last_n <= INT_MAX):
            raise ConfigError(f"penalty-last-n must be in [-1, {INT_MAX}] (-1 = all, 0 = off), "
                              f"got {self.penalty_last_n}")
        if not (0 <= self.seed < 2**63):
            raise ConfigError(f"seed must be in [0, 2^63), got {self.seed}")
        order = tuple(self.order)
        bad = [s for s in order if s not in STAGES]
        if bad or len(set(order)) != len(order):
            raise ConfigError(
                f"sampler order must be distinct names from {','.join(STAGES)}; got {','.join(order)}"
            )
        object.__setattr__(self, "order", order)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_penalties(self) -> bool:
        return self.penalty_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        )
