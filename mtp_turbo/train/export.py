"""Write an MTP head to GGUF (arch "gemma3-mtp"); models/mtp_load.py reads it.

Owns: the file layout: matrices in Q8_0 (quant/formats.quantize), norms F32, tensor names from
models/mtp_head.tensor_names (blk.{n_layer}.nextn.* + the block's usual names), metadata
mtp.base_model_sha256, mtp.hidden_source, mtp.vocab_ids (I32; absent = full head), mtp.recipe
(JSON). Ignores: training and the head's math.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from ..io.gguf_write import write_gguf
from ..models.mtp_head import ARCH, MTPConfig, tensor_names
from ..quant.formats import ggml_type_of, quantize

F32 = 0


def save_head(path, W: dict[str, torch.Tensor], cfg: MTPConfig, base_sha256: str,
              vocab_ids: torch.Tensor | np.ndarray | None, recipe: dict[str, Any], fmt: str = "q8_0") -> None:
    """W: internal name -> float tensor (norms hold the full multiplier, like GGUF Gemma norms)."""
    names = tensor_names(cfg)
    missing = sorted(set(names) - set(W))
    assert not missing, f"head weights missing {missing}"
    tensors = {}
    for k, name in names.items():
        w = W[k].detach().float().cpu().contiguous()
        if k.endswith("norm"):
            tensors[name] = (w.numpy().view(np.uint8).reshape(-1), F32, tuple(w.shape))
        else:
            tensors[name] = (quantize(w, fmt).reshape(-1), ggml_type_of(fmt), tuple(w.shape))
    meta: dict[str, Any] = {
        "general.name": "MTP head (self-distilled)",
        "mtp.base_model_sha256": base_sha256,
        "mtp.hidden_source": cfg.hidden_source,
        "mtp.n_layer": int(cfg.n_layer),
        "mtp.recipe": json.dumps(recipe, sort_keys=True),
    }
    if vocab_ids is not None:
        ids = np.asarray(torch.as_tensor(vocab_ids).cpu().numpy(), dtype=np.int32)
        meta["mtp.vocab_ids"] = ids
    write_gguf(path, ARCH, meta, tensors)
