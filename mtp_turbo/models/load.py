"""Build a main model from a GGUF file onto a device.

Owns: choosing the dtype per device, dequantizing every tensor onto the device with a progress
bar, and checking that the file holds what the architecture needs. Ignores: the forward itself.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from ..errors import ModelFileError
from ..io.gguf_file import GGUFFile
from ..quant.dequant import dequantize
from ..quant.repack import split_q8_0
from .gemma3 import LAYER_TENSORS, Gemma3, Gemma3Config

# Types we can dequantize (gguf.GGMLQuantizationType values): F32, F16, Q4_0, Q5_0, Q8_0, Q4_K, Q6_K, BF16
SUPPORTED_TYPES = {0, 1, 2, 6, 8, 12, 14, 30}
Q8_0 = 8


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def required_tensors(cfg: Gemma3Config) -> list[str]:
    names = ["token_embd", "output_norm"]
    for i in range(cfg.n_layers):
        names += [f"blk.{i}.{n}" for n in LAYER_TENSORS.values()]
    return names


def load_gemma3(gf: GGUFFile, device: torch.device, dtype: torch.dtype | None = None, progress: bool = True,
                max_positions: int | None = None) -> Gemma3:
    """The model of `gf` on `device`; max_positions: see Gemma3 (the engine's context size)."""
    dtype = dtype or default_dtype(device)
    tok = gf.metadata.get("tokenizer.ggml.tokens")
    emb = gf.tensors.get("token_embd.weight")
    if emb is None:
        raise ModelFileError(f"{gf.path}: no token_embd.weight tensor")
    cfg = Gemma3Config.from_metadata(gf.metadata, vocab_size=emb.shape[0])
    if tok is not None and len(tok) != cfg.vocab_size:
        raise ModelFileError(f"{gf.path}: tokenizer has {len(tok)} tokens but the embedding {cfg.vocab_size} rows")
    names = required_tensors(cfg)
    missing = [n for n in names if f"{n}.weight" not in gf.tensors]
    if missing:
        raise ModelFileError(f"{gf.path}: missing tensor {missing[0]}.weight (and {len(missing) - 1} more)")
    for n in names:
        t = gf.tensors[f"{n}.weight"]
        if t.ggml_type not in SUPPORTED_TYPES:
            import gguf

            raise ModelFileError(
                f"{gf.path}: tensor {n}.weight has unsupported type {gguf.GGMLQuantizationType(t.ggml_type).name}"
            )
    weights = {}
    head_q8 = None
    for n in tqdm(names, desc="loading weights", unit="tensor", disable=not progress, leave=False):
        is_norm = n.endswith("norm")
        t = gf.tensors[f"{n}.weight"]
        if n == "token_embd" and t.ggml_type == Q8_0 and torch.device(device).type == "cuda":
            # the file's codes and scales stay on the device: the fused step's LM head reads them
            # (models/fused.py, FusedTiles.head_q8) and the MTP drafter gathers its head rows from
            # them; the dense rows serve the embedding and the torch step (its tied head too)
            raw = gf.raw_tensor(f"{n}.weight", device)
            head_q8 = split_q8_0(raw, t.shape)
            weights[n] = dequantize(raw, t.ggml_type, t.shape).to(dtype)
            continue
        # norms stay fp32: they are tiny and the fp32 +1 matters
        weights[n] = gf.load(f"{n}.weight", device=device, dtype=torch.float32 if is_norm else dtype)
    return Gemma3(cfg, weights, device, dtype, head_q8=head_q8, max_positions=max_positions)

