"""What `--draft auto` drafts with for a model: the MTP head shipped for it (at the k the registry
measured for that head; else on the CPU with adaptive k, which keeps a round that would not pay a
plain step), else the draft model the registry pairs with it when that is installed, else nothing
(plain decoding).

Owns: `choose`. Ignores: building drafters (the caller's `use`, which raises ModelFileError or
ConfigError where a drafter cannot be had), keeping the choice and saying it (the engine), the
registry's table (io/registry.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import ConfigError, ModelFileError
from ..io.registry import entry_of_file, paired_draft
from .config import SpecConfig


def choose(spec: SpecConfig, model_path, cpu: bool,
           use: Callable[[SpecConfig], None]) -> tuple[SpecConfig | None, str]:
    """(the spec to draft with, or None for plain decoding; what to say about it) for the model file
    at `model_path`. use(spec) makes that spec's drafter current, or raises."""
    mtp = dataclasses.replace(spec, draft="mtp", adaptive=spec.adaptive or cpu)
    entry = entry_of_file(model_path)
    if entry is not None and entry.mtp_k and not spec.draft_tokens:
        # the fixed k measured fastest for its shipped head, on a GPU and on the CPU (where it beat
        # adaptive k: bench/RESULTS.md session 29)
        mtp = dataclasses.replace(spec, draft="mtp", draft_tokens=entry.mtp_k)
    try:
        use(mtp)
        return mtp, "drafts with the MTP head"
    except ModelFileError as e:
        said = f"decodes without a drafter: {e}"
    pair = paired_draft(model_path)
    if pair is None:
        return None, said
    model = dataclasses.replace(spec, draft="model", draft_model=pair.name)
    try:
        use(model)
    except (ModelFileError, ConfigError) as e:
        return None, f"{said}; draft model {pair.name}: {e}"
    return model, f"drafts with the draft model {pair.name} (no MTP head for this model)"
