"""Repacking GGUF block-quantized matrices into separate, aligned arrays for the GEMV kernels.

Owns: `PackedWeight` (one [N_out, K] weight matrix in Q8_0, Q5_0, Q4_0, or dense bf16/f32 for
comparison), its construction from raw GGUF bytes (split_q8_0: Q8_0 bytes to codes and scales
on any device) or from a dense matrix, the exact inverse back to GGUF bytes, and a plain torch
dequantization of the packed arrays (the reference the GEMV fallback uses). Ignores: the kernels (kernels/), dispatch (gemv.py), file parsing (io/).

Layout (all arrays row-major, one row per output feature; K % 32 == 0, nb = K // 32 blocks/row):
  q8_0: qs int8 [N, K]               element k of row n = scales[n, k//32] * qs[n, k]
  q4_0: qs uint8 [N, PB]             block PAIRS, PB = pair_bytes(K) = ceil(nb / 2) * 32: byte c of
                                     pair i holds element c of block 2i (low nibble) and element c
                                     of block 2i+1 (high nibble), value = nibble - 8; odd nb: the
                                     last pair's high nibbles are 0 (no block)
  q5_0: qs uint8 [N, PB] as q4_0,    plus qh int32 [N, nb]: bit qh_bit(j) of block b's word = 5th
                                     bit of element b*32+j (ggml's uint32 bits permuted; int32:
                                     torch's uint32 is thin on ops), value = (nibble | bit << 4) - 16
  scales: float16 [N, nb] for every block format.
Why pairs, not ggml's in-block order (byte j of a block = elements j and j + 16): both nibble
halves of a line are then whole blocks in element order, so the integer kernel's block-diagonal x
operand (dot_i8w, kernels/triton_gemv.py) has 4 blocks per 128-byte tile instead of 8 (half the
operand rows and integer MACs; H200, bench/RESULTS.md 2026-11-30 session 4). Rows start 32-byte
aligned (PB and K are multiples of 32).
Why q5_0's qh bits permuted: a 4-byte word k of a pair holds elements 4k..4k+3, whose 5th bits are
then bits k, 16 + k (elements 4k, 4k + 1) and 8 + k, 24 + k (4k + 2, 4k + 3) of the block's word:
16 apart, so one rotate and one mask put two of them beside their nibbles in a kernel converting
bf16 pairs (dot_bf16n, bench/RESULTS.md session 5; since removed). The kernels kept read a bit
through qh_bit like any other order; frag8 re-lays the matrix from `codes()`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from gguf import GGMLQuantizationType as T

from ..errors import ConfigError
from .formats import quantize

BLOCK_FORMATS = ("q8_0", "q5_0", "q4_0")
DENSE_FORMATS = ("bf16", "f32")
FORMATS = BLOCK_FORMATS + DENSE_FORMATS
QK = 32  # elements per block of every block format here
CODE_OFFSET = {"q8_0": 128, "q5_0": 16, "q4_0": 8}  # PackedWeight.codes() - offset = the block's integer

# ggml block sizes in bytes (32 elements): fp16 d + payload.
BLOCK_BYTES = {"q8_0": 34, "q5_0": 22, "q4_0": 18}
GGML_TYPES = {"q8_0": T.Q8_0, "q5_0": T.Q5_0, "q4_0": T.Q4_0, "bf16": T.BF16, "f32": T.F32}
_DENSE_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def split_q8_0(raw: torch.Tensor, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0 bytes (uint8, rows of 34-byte blocks: fp16 scale, 32 int8 codes) of a [N, K] matrix ->
    (codes int8 [N, K], scales fp16 [N, K / 32]), new contiguous tensors on raw's device (a GPU
    splits the file's bytes there, without a host copy)."""
    n, k = shape
    assert k % 32 == 0 and raw.dtype == torch.uint8 and raw.numel() == n * k // 32 * 34, (shape, raw.numel())
    blk = raw.reshape(n * k // 32, 34)
    scales = blk[:, :2].contiguous().view(torch.float16).reshape(n, k // 32)
    codes = blk[:, 2:].contiguous().view(torch.int8).reshape(n, k)
    return codes, scales


def pair_bytes(k: int) -> int:
    """Bytes per row of a q4_0 / q5_0 qs array (block pairs, see the module docstring)."""
    return (k // QK + 1) // 2 * 32


def qh_bit(j):
    """Bit of a block's stored qh word that holds element j's 5th bit (j: int or integer array):
    element 4k + i at k + 8 * (0, 2, 1, 3)[i]."""
    return 8 * (((j % 4) >> 1) | (((j % 4) & 1) << 1)) + j // 4


def _move_bits(qh: np.ndarray, src, dst) -> np.ndarray:
    """uint32 words with bit src(j) moved to bit dst(j), for j < 32."""
    qh = qh.astype(np.uint32)
    out = np.zeros_like(qh)
    for j in range(QK):
        out |= ((qh >> np.uint32(src(j))) & np.uint32(1)) << np.uint32(dst(j))
    return out


def gguf_qh_to_stored(qh: np.ndarray) -> np.ndarray:
    """ggml qh words (bit j = element j) -> the stored order (bit qh_bit(j)); uint32 in, uint32 out."""
    return _move_bits(qh, lambda j: j, qh_bit)


def stored_qh_to_gguf(qh: np.ndarray) -> np.ndarray:
    """Inverse of gguf_qh_to_stored."""
    return _move_bits(qh, qh_bit, lambda j: j)


def gguf_nibbles_to_pairs(qs: np.ndarray, nb: int) -> np.ndarray:
    """ggml in-block nibble order uint8 [n, nb * 16] -> block pairs uint8 [n, pair_bytes]."""
    n = qs.shape[0]
    b = qs.reshape(n, nb, 16)
    e = np.concatenate([b & 15, b >> 4], axis=2)  # [n, nb, 32], element order
    if nb % 2:
        e = np.concatenate([e, np.zeros_like(e[:, :1])], axis=1)
    e = e.reshape(n, -1, 2, 32)
    return (e[:, :, 0] | (e[:, :, 1] << 4)).reshape(n, -1)


def pairs_to_gguf_nibbles(qs: np.ndarray, nb: int) -> np.ndarray:
    """The inverse of gguf_nibbles_to_pairs: uint8 [n, pair_bytes] -> uint8 [n, nb * 16]."""
    n = qs.shape[0]
    p = qs.reshape(n, -1, 1, 32)
    e = np.concatenate([p & 15, p >> 4], axis=2).reshape(n, -1, 32)[:, :nb]  # [n, nb, 32]
    return (e[:, :, :16] | (e[:, :, 16:] << 4)).reshape(n, nb * 16)


def fmt_name(fmt: str | int | T) -> str:
    """Normalise 'Q8_0' / GGMLQuantizationType.Q8_0 / 8 to 'q8_0'; ConfigError if unsupported."""
    if isinstance(fmt, str):
        name = fmt.lower()
    else:
        try:
            name = T(int(fmt)).name.lower()
        except ValueError:
            name = str(fmt)
    if name not in FORMATS:
        raise ConfigError(f"unsupported weight format {fmt!r}; supported: {', '.join(FORMATS)}")
    return name


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """One [N_out, K] matrix, repacked. Construct with `from_gguf_bytes` or `from_dense`."""

    fmt: str
    shape: tuple[int, int]  # (N_out, K)
    qs: torch.Tensor  # see module docstring; dense formats: the matrix itself [N, K]
    scales: torch.Tensor | None = None  # float16 [N, K/32] (block formats)
    qh: torch.Tensor | None = None  # int32 [N, K/32] (q5_0 only)
    # other layouts of the same matrix built from this one on first use (kernels/frag8.for_weight8), by name
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        n, k = self.shape
        assert self.fmt in FORMATS, self.fmt
        if self.fmt in DENSE_FORMATS:
            assert self.qs.shape == (n, k) and self.qs.dtype == _DENSE_DTYPES[self.fmt]
            return
        assert k % QK == 0, f"K={k} must be a multiple of {QK}"
        nb = k // QK
        want = (n, k) if self.fmt == "q8_0" else (n, pair_bytes(k))
        assert self.qs.shape == want and self.qs.dtype == (
            torch.int8 if self.fmt == "q8_0" else torch.uint8
        ), (self.qs.shape, self.qs.dtype)
        assert self.scales is not None and self.scales.shape == (n, nb)
        assert self.scales.dtype == torch.float16
        if self.fmt == "q5_0":
            assert self.qh is not None and self.qh.shape == (n, nb) and self.qh.dtype == torch.int32
        else:
            assert self.qh is None

    # ---------------------------------------------------------------- construction
    @staticmethod
    def from_gguf_bytes(raw, fmt: str | int | T, shape: tuple[int, int]) -> "PackedWeight":
        """raw: uint8 bytes of the tensor as stored in GGUF (any shape, numpy or torch, CPU),
        rows of ggml blocks; shape = (N_out, K) in torch order (GGUF lists it as [K, N_out])."""
        fmt = fmt_name(fmt)
        n, k = (int(s) for s in shape)
        a = raw.detach().cpu().numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw)
        a = np.ascontiguousarray(a).reshape(-1)
        if fmt in DENSE_FORMATS:
            item = 2 if fmt == "bf16" else 4
            if a.dtype != np.uint8 or a.size != n * k * item:
                raise ConfigError(f"{fmt} tensor of shape {shape} needs {n * k * item} bytes, got {a.nbytes}")
            t = torch.from_numpy(a.copy()).view(_DENSE_DTYPES[fmt]).reshape(n, k)
            return PackedWeight(fmt, (n, k), t)
        if k % QK != 0:
            raise ConfigError(f"{fmt} needs K % 32 == 0, got shape {shape}")
        bs, nb = BLOCK_BYTES[fmt], k // QK
        if a.dtype != np.uint8 or a.size != n * nb * bs:
            raise ConfigError(f"{fmt} tensor of shape {shape} needs {n * nb * bs} bytes, got {a.nbytes}")
        if fmt == "q8_0":
            with warnings.catch_warnings():  # a read-only map: split_q8_0 only reads it (its outputs are copies)
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                return PackedWeight(fmt, (n, k), *split_q8_0(torch.from_numpy(a), (n, k)))
        blk = a.reshape(n, nb, bs)
        scales = torch.from_numpy(blk[:, :, 0:2].copy().view(np.float16).reshape(n, nb))
        qh = None
        if fmt == "q4_0":
            qs = torch.from_numpy(gguf_nibbles_to_pairs(blk[:, :, 2:], nb))
        else:  # q5_0: d, qh (4 bytes little-endian), qs[16]
            qh = torch.from_numpy(gguf_qh_to_stored(blk[:, :, 2:6].copy().view("<u4").reshape(n, nb)).view(np.int32))
            qs = torch.from_numpy(gguf_nibbles_to_pairs(blk[:, :, 6:], nb))
        return PackedWeight(fmt, (n, k), qs.contiguous(), scales.contiguous(), qh)

    @staticmethod
    def from_dense(w: torch.Tensor, fmt: str) -> "PackedWeight":
        """Quantize (block formats, via `quantize_bytes`) or cast (dense formats) a [N, K] matrix."""
        fmt = fmt_name(fmt)
        assert w.dim() == 2, w.shape
        if fmt in DENSE_FORMATS:
            return PackedWeight(fmt, tuple(w.shape), w.detach().to(_DENSE_DTYPES[fmt]).contiguous())
        raw = quantize_bytes(w.detach().float().cpu().numpy(), fmt)
        return PackedWeight.from_gguf_bytes(raw, fmt, tuple(w.shape)).to(w.device)

    # ---------------------------------------------------------------- inverse / info
    def to_gguf_bytes(self) -> np.ndarray:
        """The exact GGUF bytes this was built from: uint8 [N, row_bytes]."""
        n, k = self.shape
        if self.fmt in DENSE_FORMATS:
            return self.qs.detach().cpu().contiguous().view(torch.uint8).numpy().reshape(n, -1).copy()
        nb = k // QK
        parts = [self.scales.detach().cpu().contiguous().numpy().view(np.uint8).reshape(n, nb, 2)]
        if self.fmt == "q5_0":
            words = stored_qh_to_gguf(self.qh.detach().cpu().contiguous().numpy().view(np.uint32))
            parts.append(words.astype("<u4").view(np.uint8).reshape(n, nb, 4))
        qs = self.qs.detach().cpu().contiguous().numpy().view(np.uint8)
        if self.fmt != "q8_0":
            qs = pairs_to_gguf_nibbles(qs, nb)
        parts.append(qs.reshape(n, nb, -1))
        return np.concatenate(parts, axis=2).reshape(n, -1)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed arrays (what one full read of the matrix moves; with an odd number of
        blocks per row that includes the 16 bytes of the last pair's empty half)."""
        return sum(t.numel() * t.element_size() for t in (self.qs, self.scales, self.qh) if t is not None)

    @property
    def device(self) -> torch.device:
        return self.qs.device

    def to(self, device) -> "PackedWeight":
        mv = (lambda t: None if t is None else t.to(device))
        return PackedWeight(self.fmt, self.shape, mv(self.qs), mv(self.scales), mv(self.qh))

    def rows(self, idx: torch.Tensor) -> "PackedWeight":
        """The matrix of rows idx (int64 [n'], on the weight's device): a gathered LM head."""
        pick = (lambda t: None if t is None else t[idx].contiguous())
        return PackedWeight(self.fmt, (int(idx.numel()), self.shape[1]), pick(self.qs), pick(self.scales),
                            pick(self.qh))

    @staticmethod
    def cat(parts: "list[PackedWeight]") -> "PackedWeight":
        """Matrices of one format and K stacked by rows (fused q|k|v or gate|up: one read, one call)."""
        fmt, k = parts[0].fmt, parts[0].shape[1]
        assert all(p.fmt == fmt and p.shape[1] == k for p in parts), [(p.fmt, p.shape) for p in parts]
        cat = (lambda ts: None if ts[0] is None else torch.cat(ts, dim=0).contiguous())
        return PackedWeight(fmt, (sum(p.shape[0] for p in parts), k), cat([p.qs for p in parts]),
                            cat([p.scales for p in parts]), cat([p.qh for p in parts]))

    def codes(self) -> torch.Tensor:
        """int32 [N, K] stored integers of a block format in element order: q8_0 value + 128,
        q5_0 nibble | 5th bit << 4 (value + 16), q4_0 nibble (value + 8); see CODE_OFFSET."""
        n, k = self.shape
        assert self.fmt in BLOCK_FORMATS, self.fmt
        if self.fmt == "q8_0":
            return self.qs.to(torch.int32) + 128
        nb = k // QK
        p = self.qs.reshape(n, -1, 1, QK).to(torch.int32)
        q = torch.cat([p & 0xF, p >> 4], dim=2).reshape(n, -1, QK)[:, :nb]  # [n, nb, 32] element order
        if self.fmt == "q5_0":
            shifts = qh_bit(torch.arange(QK, device=p.device, dtype=torch.int32))
            q = q | (((self.qh.reshape(n, nb, 1) >> shifts) & 1) << 4)  # arithmetic shift; &1 keeps the bit
        return q.reshape(n, k)

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K] on the weight's device (exact: fp16 scale x small integer)."""
        n, k = self.shape
        if self.fmt in DENSE_FORMATS:
            return self.qs.float()
        q = (self.codes() - CODE_OFFSET[self.fmt]).float().reshape(n, k // QK, QK)
        return (q * self.scales.float().unsqueeze(2)).reshape(n, k)


def quantize_bytes(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 [rows, cols] -> GGUF bytes uint8 [rows, cols/32*block_bytes] for fmt in
    q8_0 / q5_0 / q4_0 (ggml rule) / q4_0_lloyd (formats.quantize)."""
    return np.asarray(quantize(np.ascontiguousarray(x, dtype=np.float32), fmt))
