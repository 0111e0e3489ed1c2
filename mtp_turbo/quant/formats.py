"""Block formats Q8_0, Q5_0, Q4_0 (ggml rule) and Q4_0 (Lloyd scale search): quantize to GGUF bytes.

Owns: float32 weights [rows, cols] -> raw GGUF bytes [rows, cols/32 * type_size] in ggml's block
layouts (Q8_0 = fp16 d + 32 int8; Q5_0 = fp16 d + 4-byte qh + 16 nibble bytes; Q4_0 = fp16 d + 16
nibble bytes), byte-identical to `gguf.quants.quantize` for the ggml rule (same float32 operation
order, round-half-away in Q8_0, trunc(x/d + 8.5 or 16.5) in Q4_0/Q5_0, first max-magnitude
element's sign); the format-name table; quantize-then-dequantize for error studies.
Ignores: the Lloyd search itself (lloyd.py), dequantization (dequant.py, re-exported here), GEMV
kernels, repacking and per-tensor policy (other modules). Runs in torch on the input's device.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from mtp_turbo.errors import ConfigError
from mtp_turbo.quant.dequant import dequantize
from mtp_turbo.quant.lloyd import lloyd_q4_0

__all__ = ["FORMATS", "ggml_type_of", "quantize", "quantize_tensor", "quantize_dequantize",
           "dequantize"]

QK = 32
# format name -> ggml type id of the bytes it produces
FORMATS: dict[str, int] = {"q8_0": int(T.Q8_0), "q5_0": int(T.Q5_0), "q4_0": int(T.Q4_0),
                           "q4_0_lloyd": int(T.Q4_0)}
# blocks per chunk: cache-sized on the CPU, large on the GPU (bounds temporaries on big matrices)
_CHUNK_BLOCKS = {"cpu": 1 << 13, "cuda": 1 << 18}


def ggml_type_of(fmt: str) -> int:
    """ggml type id of a format name; ConfigError for an unknown name."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown quantization format {fmt!r} (known: {', '.join(FORMATS)})")
    return FORMATS[fmt]


def _recip(d: torch.Tensor) -> torch.Tensor:
    """numpy's np.where(d == 0, 0, 1 / d) in float32 (an IEEE division, not a fast reciprocal)."""
    return torch.where(d == 0, torch.zeros_like(d), torch.div(torch.ones_like(d), d))


def signed_absmax(blocks: torch.Tensor) -> torch.Tensor:
    """[N, 32] -> [N, 1]: the element of largest magnitude, the first one on ties (numpy argmax)."""
    a = blocks.abs()
    amax = a.amax(dim=1, keepdim=True)
    idx = torch.arange(blocks.shape[1], device=blocks.device).expand_as(a)
    first = torch.where(a == amax, idx, blocks.shape[1]).amin(dim=1, keepdim=True)
    return blocks.gather(1, first)


def _f16_bytes(d: torch.Tensor) -> torch.Tensor:
    """[N, 1] float32 -> [N, 2] uint8 little-endian fp16 (round to nearest even, as numpy)."""
    return d.to(torch.float16).contiguous().view(torch.uint8).reshape(-1, 2)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """[N, 32] uint8 (low 4 bits used) -> [N, 16]: element j low nibble, element j+16 high."""
    return (q[:, :16] & 0x0F) | (q[:, 16:] << 4)


def _q8_0_blocks(x: torch.Tensor) -> torch.Tensor:
    d = x.abs().amax(dim=1, keepdim=True) / 127
    n = x * _recip(d)
    # np_roundf: round half away from zero, computed exactly as gguf does
    a = n.abs()
    fl = torch.floor(a)
    qs = torch.sign(n) * (fl + torch.floor(2 * (a - fl)))
    return torch.cat([_f16_bytes(d), qs.to(torch.int8).view(torch.uint8)], dim=1)


def ggml_q4_0_levels(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ggml Q4_0 rule on [N, 32] float32 -> (d [N, 1] float32 before fp16 rounding, nibbles [N, 32])."""
    d = signed_absmax(x) / -8
    q = torch.trunc((x * _recip(d)) + 8.5)
    return d, q.to(torch.uint8).clamp(0, 15)


def _q4_0_blocks(x: torch.Tensor) -> torch.Tensor:
    d, q = ggml_q4_0_levels(x)
    return torch.cat([_f16_bytes(d), _pack_nibbles(q)], dim=1)


def _q4_0_lloyd_blocks(x: torch.Tensor) -> torch.Tensor:
    d, q = ggml_q4_0_levels(x)
    d16, lev = lloyd_q4_0(x, d.to(torch.float16).squeeze(1), q.to(torch.int8) - 8)
    nib = (lev + 8).to(torch.uint8)
    return torch.cat([d16.reshape(-1, 1).contiguous().view(torch.uint8), _pack_nibbles(nib)], dim=1)


def _q5_0_blocks(x: torch.Tensor) -> torch.Tensor:
    d = signed_absmax(x) / -16
    q = torch.trunc((x * _recip(d)) + 16.5).to(torch.uint8).clamp(0, 31)
    # qh: bit i of the little-endian uint32 = bit 4 of element i
    hb = ((q >> 4) & 1).reshape(-1, 4, 8).to(torch.int32)
    qh = (hb << torch.arange(8, device=x.device, dtype=torch.int32)).sum(dim=2).to(torch.uint8)
    return torch.cat([_f16_bytes(d), qh, _pack_nibbles(q)], dim=1)


_QUANTIZERS = {"q8_0": _q8_0_blocks, "q5_0": _q5_0_blocks, "q4_0": _q4_0_blocks,
               "q4_0_lloyd": _q4_0_lloyd_blocks}


def quantize_tensor(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """float weights [..., cols] -> uint8 GGUF bytes [..., cols/32 * type_size] on x's device."""
    ggml_type = ggml_type_of(fmt)
    assert x.ndim >= 1 and x.shape[-1] % QK == 0, f"last dim {tuple(x.shape)} not a multiple of {QK}"
    _, size = GGML_QUANT_SIZES[T(ggml_type)]
    blocks = x.to(torch.float32).reshape(-1, QK)
    fn = _QUANTIZERS[fmt]
    step = _CHUNK_BLOCKS.get(x.device.type, 1 << 13)
    out = torch.cat([fn(blocks[i:i + step]) for i in range(0, blocks.shape[0], step)] or
                    [torch.empty(0, size, dtype=torch.uint8, device=x.device)])
    assert out.shape == (blocks.shape[0], size)
    return out.reshape(*x.shape[:-1], x.shape[-1] // QK * size)


def quantize(x: torch.Tensor | np.ndarray, fmt: str) -> np.ndarray:
    """float weights [rows, cols] -> np.uint8 GGUF bytes [rows, cols/32 * type_size].

    Same shape and bytes as gguf.quants.quantize for "q8_0", "q5_0", "q4_0"; "q4_0_lloyd" gives
    Q4_0 bytes from the Lloyd scale search (never worse per block than "q4_0").
    """
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return quantize_tensor(x, fmt).cpu().numpy()


def quantize_dequantize(x: torch.Tensor | np.ndarray, fmt: str) -> torch.Tensor:
    """x through fmt and back: float32 tensor of x's shape (on x's device for a torch input)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    raw = quantize_tensor(x, fmt)
    return dequantize(raw.reshape(-1), ggml_type_of(fmt), tuple(x.shape))
