"""How much device memory a model takes held dense, and the automatic choice of the file's bytes.

Owns: `dense_bytes` (a model's weights loaded dense: matrices bf16, the rest float32, a Q8_0 LM
head's codes and their layout beside it), `kv_bytes`, and `file_weights_needed` (auto: hold the
matrices as the file's bytes when the dense copy and the K/V cache would not fit the free memory).
Ignores: loading (load.py), the layouts (quant/), what the engine does with the answer.

Why: a dense bf16 copy is ~3.5x a Q4_K_M file (a 12B model: 24 GB against 7.3); on a GPU without
that much free memory the dense load fails where the file's bytes (1.0x the file, bench/RESULTS.md
session 36) fit.
"""

from __future__ import annotations

from ..io.gguf_file import GGUFFile
from .arch import ModelConfig, tensor_shapes

Q8_0 = 8
WORKSPACE = 1 << 30  # the load's largest temporary, the prefill scratch, CUDA graphs: a margin
HEADROOM = 0.9  # of the free memory a plan may take (the allocator's fragmentation, other kernels)


def dense_bytes(gf: GGUFFile, cfg: ModelConfig) -> int:
    """Device bytes of the model's weights loaded dense on CUDA: matrices as bf16, vectors float32;
    a Q8_0 LM head also keeps its codes and scales and their tensor-core layout (about twice the
    head's file bytes)."""
    total = 0
    for name, shape in tensor_shapes(cfg).items():
        n = 1
        for d in shape:
            n *= d
        total += n * (2 if len(shape) == 2 else 4)
    head = "token_embd.weight" if cfg.tied_head else "output.weight"
    t = gf.tensors.get(head)
    if t is not None and t.ggml_type == Q8_0:
        total += 2 * t.nbytes
    return total


def kv_bytes(cfg: ModelConfig, ctx: int) -> int:
    """The bf16 K/V cache of ctx cells."""
    return 2 * 2 * cfg.n_layers * min(ctx, cfg.context_length) * cfg.n_kv_heads * cfg.head_dim


def file_weights_needed(dense: int, kv: int, free: int) -> bool:
    """True when the dense weights, the K/V cache and a workspace margin exceed HEADROOM of the
    device's free bytes."""
    return dense + kv + WORKSPACE > HEADROOM * free
