"""Sampler configuration: one frozen dataclass, validated on construction.

Owns: the sampler settings and their legal ranges. Knows nothing of tensors.
CLI flags map 1:1 to these fields (`--temperature`, `--top-k`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

STAGES = ("top_k", "penalties", "temperature", "min_p", "top_p")
DEFAULT_ORDER = STAGES  # the report's order


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
        if not (self.temperature >= 0.0):
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be >= 0 (0 = off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ConfigError(f"min-p must be in [0, 1], got {self.min_p}")
        if not (self.repeat_penalty > 0.0):
            raise ConfigError(f"repeat-penalty must be > 0, got {self.repeat_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if v != v or v in (float("inf"), float("-inf")):
                raise ConfigError(f"{name.replace('_', '-')} must be finite, got {v}")
        if self.penalty_last_n < -1:
            raise ConfigError(f"penalty-last-n must be >= -1 (-1 = all), got {self.penalty_last_n}")
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
