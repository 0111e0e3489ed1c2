"""Dequantization of GGUF tensor bytes to float32, in vectorized torch (CPU or CUDA).

Owns: turning the raw bytes of one GGUF tensor (as stored in the file) into a float32 tensor on
the same device, for the types models/load.py accepts (SUPPORTED_TYPES): F32, F16, BF16, Q8_0,
Q5_0, Q5_1, Q4_0, Q4_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K.
Every float operation mirrors `gguf.quants.dequantize` (numpy, float32) in the same order (one
rounding per product, no fused multiply-add), so the results are bit-identical to it.
Ignores: quantizing (formats.py), GEMV kernels and repacking (other modules of this package),
file parsing (io/). Integer unpacking is done in int16/int32/uint8 ops torch supports on CUDA.
Products and offsets are applied in place: a fresh output-sized temporary per step made the CPU
load 3x slower (page faults on every new buffer).
"""

from __future__ import annotations

import math

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from mtp_turbo.errors import ModelFileError

QK_K = 256


def _f16(b: torch.Tensor) -> torch.Tensor:
    """[n, 2] uint8 (little-endian fp16 bytes) -> [n, 1] float32 (exact widening)."""
    return b.contiguous().view(torch.float16).to(torch.float32)


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """[n, g*group] uint8 -> [n, g*2*group]: per group of `group` bytes, low nibbles then high."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, group)
    out = torch.empty((n, q.shape[1], 2, group), dtype=torch.uint8, device=qs.device)
    torch.bitwise_and(q, 0x0F, out=out[:, :, 0])
    torch.bitwise_right_shift(q, 4, out=out[:, :, 1])
    return out.reshape(n, -1)


def _bits(b: torch.Tensor, nbits: int) -> torch.Tensor:
    """[n, m] uint8 -> [n, 8/nbits, m]: field j (bits j*nbits.., LSB first) of every byte."""
    shifts = torch.arange(0, 8, nbits, device=b.device, dtype=torch.uint8).reshape(1, -1, 1)
    return (b.unsqueeze(1) >> shifts) & ((1 << nbits) - 1)


def _q8_0(bl: torch.Tensor) -> torch.Tensor:
    d = _f16(bl[:, :2])
    x = bl[:, 2:].contiguous().view(torch.int8).to(torch.float32)
    return x.mul_(d)


def _q4_0(bl: torch.Tensor) -> torch.Tensor:
    d = _f16(bl[:, :2])
    q = _nibbles(bl[:, 2:], 16).view(torch.int8).sub_(8)  # nibbles 0..15: the same bits as int8
    return q.to(torch.float32).mul_(d)


def _qh32(b: torch.Tensor) -> torch.Tensor:
    """[n, 4] uint8 (little-endian uint32 of high bits) -> [n, 32] uint8 bit i = element i."""
    return _bits(b, 1).permute(0, 2, 1).reshape(b.shape[0], 32)


def _q4_1(bl: torch.Tensor) -> torch.Tensor:
    """Q4_1 blocks [n, 20] (d, min, 16 nibble bytes) -> [n, 32]: d*q + min."""
    d, m = _f16(bl[:, 0:2]), _f16(bl[:, 2:4])
    return _nibbles(bl[:, 4:], 16).to(torch.float32).mul_(d).add_(m)


def _q5_0(bl: torch.Tensor) -> torch.Tensor:
    d = _f16(bl[:, :2])
    q = _nibbles(bl[:, 6:], 16).bitwise_or_(_qh32(bl[:, 2:6]).bitwise_left_shift_(4))
    return q.view(torch.int8).sub_(16).to(torch.float32).mul_(d)  # 0..31: the same bits as int8


def _q5_1(bl: torch.Tensor) -> torch.Tensor:
    """Q5_1 blocks [n, 24] (d, min, 32 high bits, 16 nibble bytes) -> [n, 32]: d*q + min."""
    d, m = _f16(bl[:, 0:2]), _f16(bl[:, 2:4])
    q = _nibbles(bl[:, 8:], 16).bitwise_or_(_qh32(bl[:, 4:8]).bitwise_left_shift_(4))
    return q.to(torch.float32).mul_(d).add_(m)


def _q2_k(bl: torch.Tensor) -> torch.Tensor:
    """Q2_K blocks [n, 84] (16 scale/min nibble pairs, 2-bit qs, d, dmin) -> [n, 256]."""
    n = bl.shape[0]
    sc = bl[:, 0:16]
    d, dmin = _f16(bl[:, 80:82]), _f16(bl[:, 82:84])
    dl = (d * (sc & 0x0F).to(torch.float32)).reshape(n, QK_K // 16, 1)
    ml = (dmin * (sc >> 4).to(torch.float32)).reshape(n, QK_K // 16, 1)
    q = _bits(bl[:, 16:80].reshape(n * 2, 32), 2)  # per 32-byte half: shifts 0,2,4,6
    q = q.reshape(n, QK_K // 16, 16).to(torch.float32)
    return q.mul_(dl).sub_(ml).reshape(n, QK_K)


def _q3_k(bl: torch.Tensor) -> torch.Tensor:
    """Q3_K blocks [n, 110] (high-bit mask, 2-bit qs, 6-bit scales, d) -> [n, 256]."""
    n = bl.shape[0]
    hmask, qs, s = bl[:, 0:32], bl[:, 32:96], bl[:, 96:108]
    d = _f16(bl[:, 108:110])
    # 16 6-bit scales: low 4 bits from nibbles of bytes 0..7, high 2 from the 2-bit fields of 8..11
    sc = _nibbles(s[:, 0:8], 8).bitwise_or_(_bits(s[:, 8:12], 2).reshape(n, 16).bitwise_left_shift_(4))
    dl = (d * sc.view(torch.int8).sub_(32).to(torch.float32)).reshape(n, QK_K // 16, 1)
    lo = _bits(qs.reshape(n * 2, 32), 2).reshape(n, QK_K // 16, 16)
    hi = _bits(hmask, 1).reshape(n, QK_K // 16, 16)
    # gguf's ql - 4*(1 - h) is the 3-bit value (h<<2 | ql) minus 4: the same int8, hence float
    q = lo.bitwise_or_(hi.bitwise_left_shift_(2)).view(torch.int8).sub_(4)
    return q.to(torch.float32).mul_(dl).reshape(n, QK_K)


def _scale_min_k4(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, 12] packed 6-bit scales/mins of Q4_K -> ([n, 8], [n, 8]) as float32."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc.to(torch.float32), mn.to(torch.float32)


def _d_dm_k4(bl: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K block head (d, dmin, 12 packed bytes) -> (d*scale, dmin*min), each [n, 8, 1]."""
    n = bl.shape[0]
    d, dmin = _f16(bl[:, 0:2]), _f16(bl[:, 2:4])
    sc, mn = _scale_min_k4(bl[:, 4:16])
    return (d * sc).reshape(n, -1, 1), (dmin * mn).reshape(n, -1, 1)


def _q4_k(bl: torch.Tensor) -> torch.Tensor:
    n = bl.shape[0]
    d, dm = _d_dm_k4(bl)
    q = _nibbles(bl[:, 16:], 32).reshape(n, -1, 32).to(torch.float32)
    return q.mul_(d).sub_(dm).reshape(n, QK_K)


def _q5_k(bl: torch.Tensor) -> torch.Tensor:
    """Q5_K blocks [n, 176] (d, dmin, 6-bit scales/mins, high bits, nibbles) -> [n, 256]."""
    n = bl.shape[0]
    d, dm = _d_dm_k4(bl)
    hi = _bits(bl[:, 16:48], 1)  # [n, 8, 32]: bit j of byte i is the 5th bit of element 32*j + i
    q = _nibbles(bl[:, 48:], 32).reshape(n, -1, 32).bitwise_or_(hi.bitwise_left_shift_(4))
    return q.to(torch.float32).mul_(d).sub_(dm).reshape(n, QK_K)


def _q6_k(bl: torch.Tensor) -> torch.Tensor:
    n = bl.shape[0]
    ql, qh = bl[:, 0:128], bl[:, 128:192]
    scales = bl[:, 192:208].contiguous().view(torch.int8).to(torch.float32)
    d = (_f16(bl[:, 208:210]) * scales).reshape(n, QK_K // 16, 1)
    lo = _nibbles(ql, 64).reshape(n, -1, 32)
    hi = _bits(qh.reshape(n * 2, 32), 2).reshape(n, -1, 32)  # per 32-byte half: shifts 0,2,4,6
    q = lo.bitwise_or_(hi.bitwise_left_shift_(4)).view(torch.int8).sub_(32)  # 0..63: int8's bits
    q = q.reshape(n, QK_K // 16, -1).to(torch.float32)
    return q.mul_(d).reshape(n, QK_K)


_BLOCK_FNS = {T.Q8_0: _q8_0, T.Q4_0: _q4_0, T.Q4_1: _q4_1, T.Q5_0: _q5_0, T.Q5_1: _q5_1, T.Q2_K: _q2_k,
              T.Q3_K: _q3_k, T.Q4_K: _q4_k, T.Q5_K: _q5_k, T.Q6_K: _q6_k}

SUPPORTED_TYPES: frozenset[int] = frozenset([T.F32, T.F16, T.BF16, *_BLOCK_FNS])


def _block_rows(raw: torch.Tensor, t: T) -> torch.Tensor:
    """raw's bytes as [blocks, block bytes] (copied where unaligned: the fp16 fields are viewed)."""
    raw = raw.contiguous().reshape(-1)
    if raw.data_ptr() % 4:
        raw = raw.clone()
    return raw.reshape(-1, GGML_QUANT_SIZES[t][1])


# 4-bit formats whose blocks are codes 0..15 with an affine per 32 elements (int4_groups)
INT4_TYPES: frozenset[int] = frozenset([T.Q4_0, T.Q4_1, T.Q4_K])


def int4_groups(raw: torch.Tensor, ggml_type: int, shape: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """A Q4_0 / Q4_1 / Q4_K matrix [N, K] as its codes and an affine per group of 32: (q uint8 [N, K]
    in 0..15, scale, offset float32 [N, K // 32]) with dequantize's value = q * scale + offset (Q4_0:
    d, -8d; Q4_1: d, min; Q4_K: the sub-block's d * sc, -dmin * m)."""
    t = T(int(ggml_type))
    assert t in INT4_TYPES and len(shape) == 2, (t, shape)
    n, k = (int(s) for s in shape)
    bl = _block_rows(raw, t)
    if t == T.Q4_K:
        d, dm = _d_dm_k4(bl)
        q, scale, offset = _nibbles(bl[:, 16:], 32), d, -dm
    else:
        d = _f16(bl[:, :2])
        if t == T.Q4_0:
            q, scale, offset = _nibbles(bl[:, 2:], 16), d, -8 * d
        else:
            q, scale, offset = _nibbles(bl[:, 4:], 16), d, _f16(bl[:, 2:4])
    return q.reshape(n, k), scale.reshape(n, k // 32), offset.reshape(n, k // 32)


# K-quant formats whose integer fields int-exact GEMVs read (k_fields, quant/kernels/fragk.py)
K_FIELD_TYPES: frozenset[int] = frozenset([T.Q4_K, T.Q5_K, T.Q6_K])


def k_fields(raw: torch.Tensor, ggml_type: int, shape: tuple[int, int]) -> dict[str, torch.Tensor]:
    """A Q4_K / Q5_K / Q6_K matrix [N, K] as its integer fields, with dequantize's value of element (n, k)
    (sub-block j = k // 32 (Q4_K, Q5_K) or k // 16 (Q6_K), super-block s = k // 256):
    Q4_K: q uint8 [N, K] 0..15, sc / m uint8 [N, K // 32] 0..63, d / dmin float16 [N, K // 256];
          value = (d sc) q - (dmin m).
    Q5_K: as Q4_K with q 0..31 (the nibble and the 5th bit).
    Q6_K: q uint8 [N, K] 0..63, sc int8 [N, K // 16], d float16 [N, K // 256]; value = (d sc) (q - 32)."""
    t = T(int(ggml_type))
    assert t in K_FIELD_TYPES and len(shape) == 2, (t, shape)
    n, k = (int(s) for s in shape)
    bl = _block_rows(raw, t)
    ns = k // QK_K
    if t in (T.Q4_K, T.Q5_K):
        sc, mn = _scale_min_k4(bl[:, 4:16])
        if t == T.Q4_K:
            q = _nibbles(bl[:, 16:], 32)
        else:  # bit j of high byte i is the 5th bit of element 32 j + i
            q = _nibbles(bl[:, 48:], 32).reshape(-1, 8, 32).bitwise_or_(_bits(bl[:, 16:48], 1).bitwise_left_shift_(4))
        return {"q": q.reshape(n, k), "sc": sc.to(torch.uint8).reshape(n, 8 * ns),
                "m": mn.to(torch.uint8).reshape(n, 8 * ns),
                "d": bl[:, 0:2].contiguous().view(torch.float16).reshape(n, ns),
                "dmin": bl[:, 2:4].contiguous().view(torch.float16).reshape(n, ns)}
    lo = _nibbles(bl[:, 0:128], 64).reshape(-1, 8, 32)
    hi = _bits(bl[:, 128:192].reshape(-1, 32), 2).reshape(-1, 8, 32)
    return {"q": lo.bitwise_or_(hi.bitwise_left_shift_(4)).reshape(n, k),
            "sc": bl[:, 192:208].contiguous().view(torch.int8).reshape(n, 16 * ns),
            "d": bl[:, 208:210].contiguous().view(torch.float16).reshape(n, ns)}


def nbytes_for(ggml_type: int, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of torch-order `shape` takes in `ggml_type` (last dim = GGUF row)."""
    block, size = GGML_QUANT_SIZES[T(ggml_type)]
    n = math.prod(shape)
    assert shape[-1] % block == 0, f"row of {shape[-1]} not a multiple of block {block}"
    return n // block * size


def dequantize(raw: torch.Tensor, ggml_type: int, shape: tuple[int, ...]) -> torch.Tensor:
    """GGUF bytes -> float32 tensor of `shape`, on raw's device.

    raw: uint8 tensor of the tensor's bytes as stored in GGUF (1-D; any contiguous shape is
    flattened). shape: torch order (rows, cols) = reversed GGUF ne. Bit-exact with
    gguf.quants.dequantize. Raises ModelFileError for a type it does not handle.
    """
    try:
        t = T(int(ggml_type))
    except ValueError:
        raise ModelFileError(f"unknown ggml tensor type id {ggml_type}") from None
    if t not in SUPPORTED_TYPES:
        raise ModelFileError(f"unsupported ggml tensor type {t.name} (id {int(t)}) for dequantization")
    assert raw.dtype == torch.uint8, f"raw must be uint8, got {raw.dtype}"
    shape = tuple(int(s) for s in shape)
    raw = raw.contiguous().reshape(-1)
    want = nbytes_for(t, shape)
    assert raw.numel() == want, f"{t.name} {shape}: expected {want} bytes, got {raw.numel()}"
    if raw.data_ptr() % 4:
        raw = raw.clone()  # dtype views (fp16 scales, f32 data) need an aligned storage offset
    if t == T.F32:
        return raw.view(torch.float32).reshape(shape).clone()
    if t == T.F16:
        return raw.view(torch.float16).to(torch.float32).reshape(shape)
    if t == T.BF16:
        # bf16 bits are the high half of the float32 (as gguf's int16 << 16), NaN payloads kept.
        return (raw.view(torch.int16).to(torch.int32) << 16).view(torch.float32).reshape(shape)
    _, size = GGML_QUANT_SIZES[t]
    blocks = raw.reshape(-1, size)
    return _BLOCK_FNS[t](blocks).reshape(shape)
