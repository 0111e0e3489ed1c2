"""Drafters (base.py: the interface; ngram.py: prompt lookup; mtp.py: the MTP head; model.py: a
smaller model of the same tokenizer) and
`make_drafter`, which builds the one a SpecConfig names."""

from __future__ import annotations

from ...errors import ConfigError
from .base import Drafter


def make_drafter(spec, main, main_gguf, capacity: int, kernels: str = "torch") -> Drafter:
    """The drafter SpecConfig `spec` names, for main model `main` (from GGUFFile `main_gguf`) with
    a context of `capacity` tokens; kernels: the main model's step kernels ("triton" / "torch"),
    which a draft model's steps use too."""
    if spec.draft == "ngram":
        from .ngram import NGramDrafter

        return NGramDrafter(spec.ngram_min, spec.ngram_max)
    if spec.draft == "mtp":
        from .mtp import load_mtp_drafter

        return load_mtp_drafter(spec, main, main_gguf, capacity)
    if spec.draft == "model":
        from .model import load_draft_model

        return load_draft_model(spec, main, main_gguf, capacity, kernels)
    raise ConfigError(f"no drafter for draft={spec.draft!r}")
