"""The K-quant int8 fragment layout: a Q4_K, Q5_K or Q6_K matrix in the order of `mma.m16n8k32.s8` A registers.

Owns: `FragKWeight` (one [N, K] Q4_K / Q5_K / Q6_K matrix from the file's block bytes, re-laid on frag8.py's
geometry so that the frag8 GEMV's lanes load their A registers' codes in one 16-byte load, plus a
per-lane record of the sub-block scales), its exact decoding (`dequantize`: the tests and the CPU
emulation) and its split counters. Ignores: the kernel (frag8_gemv.py), the PTX (ptx.py), the x
operand (frag8_x.py), the 32-block formats (frag8.py).

Why: the issue of file bytes in the fused kernels (a step reads the file's bytes, not a dense bf16
copy 3.5x larger). A sub-block's weights are an integer code times one scale plus one offset, so an
integer mma of the codes against x's int8 pieces gives an exact int32 sum; the scales multiply
once a sub-block per row, as in frag8's Q4_0.

Geometry (frag8.py): row tiles of 16 rows (N padded with zero-scale rows), chunks of 64 columns =
two 32-blocks b; K is a multiple of 256 (one super-block = 4 chunks). Lane L = (g, t).
  q4_k  value = (d sc) q - (dmin m) per 32-block, q in 0..15. A register = q itself
        (`w & 0x0F0F0F0F`, `(w >> 4) & 0x0F0F0F0F`), MULT 1. The offset's share is (dmin m) x the
        block's sum of x, which the kernel takes from one more mma with every A byte 1.
        qf int32 [NT, NC, 32, 4]: frag8's nibble words (q4_0's layout) of q.
        record of lane group g (4 registers): (sc bytes (row g b0, g+8 b0, g b1, g+8 b1), m bytes in the
        same order, f16x2 (d, dmin) of row g, f16x2 (d, dmin) of row g+8); the first two words in
        sf int32 [NT, NC, 8, 2], the last two, once a super-block, in df int32 [NT, NC / 4, 8, 2].
  q5_k  value = (d sc) q - (dmin m) per 32-block, q in 0..31: q4_k's record and words (the low 4 bits),
        plus the 5th bits: hf int32 [NT, NC, 32]: byte i has in bit 4 b + r the 5th bit of register r's
        byte i in block b (a shift and `& 0x10101010` put it at bit 4). A register = q, MULT 1.
  q6_k  value = (d sc_j) (q - 32) per 16 columns j, q in 0..63. A register = 4 (q - 32) =
        (low nibble << 2 | high 2 bits << 6) ^ 0x80, MULT 4; the xor is stored: the high field is
        kept as (q >> 4) ^ 2. Registers a0, a1 hold a block's columns 0-15 and a2, a3 its columns
        16-31, so one mma with a2 = a3 = 0 and one with a0 = a1 = 0 give the two halves' sums.
        qf int32 [NT, NC, 32, 4]: frag8's nibble words of q & 15.
        hf int32 [NT, NC, 32, 2]: word b has in byte i, bits 2r..2r+1, the stored high field of
        register r's byte i (`(w << 6 - 2r) & 0xC0C0C0C0` puts it at bits 6-7).
        record of lane group g: (sc int8 of block 0 (row g cols 0-15, g+8 0-15, g 16-31, g+8 16-31):
        register order), the same for block 1, f16x2 (d of row g, d of row g+8), unused); the first
        two words in sf int32 [NT, NC, 8, 2], the third once a super-block in df int32 [NT, NC / 4, 8, 1].
The kernels gather a lane's 4 record registers from sf and df. Bytes: 4.625 bits a weight for q4_k
(the file 4.5: its 12 scale bytes a super-block unpacked to 16), 5.625 for q5_k (the file 5.5), 6.5625
for q6_k (the file's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf import GGMLQuantizationType as T

from ..dequant import k_fields
from .frag8 import COLS, ROWS, SLICE_ROWS, lane_codes, lane_rows_cols, nibble_words, to_i32

FORMATS = {T.Q4_K: "q4_k", T.Q5_K: "q5_k", T.Q6_K: "q6_k"}
MULT = {"q4_k": 1, "q5_k": 1, "q6_k": 4}  # the int8 an A register holds = MULT x the sub-block's integer
SHIFT = {f: m.bit_length() - 1 for f, m in MULT.items()}
SUPER = 256  # columns of a super-block (4 chunks)


def _bytes4(a: torch.Tensor) -> torch.Tensor:
    """int64 [..] 32-bit patterns from 4 byte values a [.., 4] (byte i = a[..., i] & 0xFF)."""
    return ((a.to(torch.int64) & 0xFF) << (8 * torch.arange(4, device=a.device))).sum(-1)


def _f16x2(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """int64 32-bit patterns of two float16 tensors packed (lo in bits 0-15)."""
    bits = (lambda h: h.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF)
    return bits(lo) | (bits(hi) << 16)


def _rows_g(a: torch.Tensor, nt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a [NT*16, ..] -> (rows g, rows g + 8) each [NT, 8, ..]."""
    a = a.reshape(nt, ROWS, *a.shape[1:])
    return a[:, :8], a[:, 8:]


@dataclass(frozen=True, eq=False)
class FragKWeight:
    """A Q4_K / Q5_K / Q6_K matrix in the int8 fragment layout (module docstring). Build with `from_gguf`."""

    fmt: str
    shape: tuple[int, int]  # (N, K) of the matrix (unpadded rows; K a multiple of 256)
    qf: torch.Tensor
    sf: torch.Tensor  # the record's chunk words, int32 [NT, NC, 8, 2]
    df: torch.Tensor  # the record's super-block words, int32 [NT, NC / 4, 8, 2 (q4_k, q5_k) or 1 (q6_k)]
    hf: torch.Tensor | None = None  # q5_k's 5th bits, q6_k's high fields
    counters: torch.Tensor | None = None  # int32 [NT]: the GEMV's split-K arrival counters (zeros between calls)

    @property
    def tiles(self) -> tuple[int, int]:
        return self.sf.shape[0], self.sf.shape[1]

    def record(self) -> torch.Tensor:
        """int32 [NT, NC, 8, 4]: every chunk's 4 record words as the kernels gather them (q6_k's 4th:
        a copy of the 3rd)."""
        sup = self.df.repeat_interleave(4, dim=1)
        return torch.cat([self.sf, sup] if self.df.shape[-1] == 2 else [self.sf, sup, sup], -1)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qf, self.sf, self.df, self.hf) if t is not None)

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.qf, self.sf, self.df, self.hf, self.counters) if t is not None]

    @staticmethod
    def from_gguf(raw: torch.Tensor, ggml_type: int, shape: tuple[int, int],
                  slice_rows: int = SLICE_ROWS) -> "FragKWeight":
        """The matrix of GGUF bytes raw (uint8, as in the file; its device is the layout's), exact;
        built from slices of at most slice_rows rows (the int64 temporaries take ~8 bytes a weight)."""
        fmt = FORMATS[T(int(ggml_type))]
        n, k = shape
        assert k % SUPER == 0, f"K={k} must be a multiple of {SUPER}"
        if n > slice_rows:
            rows = raw.reshape(n, -1)
            parts = [FragKWeight.from_gguf(rows[r0:r0 + slice_rows].reshape(-1), ggml_type,
                                           (min(n, r0 + slice_rows) - r0, k), slice_rows)
                     for r0 in range(0, n, slice_rows)]
            cat = (lambda ts: None if ts[0] is None else torch.cat(ts).contiguous())
            return FragKWeight(fmt, (n, k), cat([p.qf for p in parts]), cat([p.sf for p in parts]),
                               cat([p.df for p in parts]), cat([p.hf for p in parts]),
                               cat([p.counters for p in parts]))
        f = k_fields(raw, ggml_type, shape)
        nt, nc = -(-n // ROWS), k // COLS
        dev = raw.device
        pad = nt * ROWS - n

        def rows(a, value=0):
            return torch.cat([a, torch.full((pad, *a.shape[1:]), value, dtype=a.dtype, device=dev)]) if pad else a

        codes = rows(f["q"].to(torch.int32))
        v = lane_codes(codes)  # [NT, NC, 2, 32, 4 r, 4 i]
        qf = nibble_words(v)
        hf = None
        if fmt == "q5_k":  # the 5th bits: byte i, bit 4 b + r
            ar = torch.arange(4, device=dev)
            sh = 4 * torch.arange(2, device=dev)[:, None, None] + 8 * ar[None, :, None] + ar[None, None, :]  # [b, i, r]
            fifth = ((v >> 4) & 1).permute(0, 1, 3, 2, 5, 4)  # [NT, NC, 32 L, 2 b, 4 i, 4 r]
            hf = to_i32((fifth << sh).sum((-3, -2, -1)))  # [NT, NC, 32]
        if fmt in ("q4_k", "q5_k"):
            sc, m = (rows(f[key]).reshape(nt, ROWS, nc, 2) for key in ("sc", "m"))

            def order(a):  # [NT, 16, NC, 2] -> [NT, NC, 8 g, 4]: (g b0, g+8 b0, g b1, g+8 b1)
                a = a.permute(0, 2, 1, 3)
                return torch.stack([a[:, :, :8, 0], a[:, :, 8:, 0], a[:, :, :8, 1], a[:, :, 8:, 1]], -1)

            d = rows(f["d"]).repeat_interleave(4, 1)  # [NT*16, NC]: each chunk's super-block
            dmin = rows(f["dmin"]).repeat_interleave(4, 1)
            dd = _f16x2(d, dmin).reshape(nt, ROWS, nc).permute(0, 2, 1)  # [NT, NC, 16]
            rec = torch.stack([_bytes4(order(sc)), _bytes4(order(m)), dd[:, :, :8], dd[:, :, 8:]], -1)
        else:
            sh = 8 * torch.arange(4, device=dev)[:, None] + 2 * torch.arange(4, device=dev)[None, :]  # [i, r]
            hi = ((v >> 4) ^ 2).permute(0, 1, 3, 2, 5, 4)  # [NT, NC, 32 L, 2 b, 4 i, 4 r]
            hf = (hi << sh).sum((-2, -1))  # [NT, NC, 32, 2]
            sc = rows(f["sc"]).reshape(nt, ROWS, nc, 2, 2).permute(0, 2, 1, 3, 4)  # [NT, NC, 16, b, half]
            regs = [torch.stack([sc[:, :, :8, b, 0], sc[:, :, 8:, b, 0], sc[:, :, :8, b, 1], sc[:, :, 8:, b, 1]], -1)
                    for b in range(2)]
            d = rows(f["d"]).repeat_interleave(4, 1)
            dg = d.reshape(nt, ROWS, nc).permute(0, 2, 1)  # [NT, NC, 16]
            rec = torch.stack([_bytes4(regs[0]), _bytes4(regs[1]), _f16x2(dg[:, :, :8], dg[:, :, 8:]),
                               torch.zeros_like(regs[0][..., 0], dtype=torch.int64)], -1)
            hf = to_i32(hf)
        rec = to_i32(rec)  # [NT, NC, 8, 4]; its last words are the same in a super-block's 4 chunks
        df = rec[:, ::4, :, 2:3] if fmt == "q6_k" else rec[:, ::4, :, 2:4]
        return FragKWeight(fmt, (n, k), to_i32(qf), rec[..., :2].contiguous(), df.contiguous(), hf,
                           torch.zeros(nt, dtype=torch.int32, device=dev))

    def dequantize(self) -> torch.Tensor:
        """float64 [N, K]: the values the stored words give (exact), decoded as the PTX reads them."""
        n, k = self.shape
        step = SLICE_ROWS // ROWS  # tiles decoded at once (the int64 temporaries: ~8 bytes a weight)
        cut = (lambda t, a: None if t is None else t[a:a + step])
        return torch.cat([self._decode(cut(self.qf, a), cut(self.sf, a), cut(self.df, a), cut(self.hf, a))
                          for a in range(0, self.tiles[0], step)])[:n, :k]

    def row_values(self, index: torch.Tensor) -> torch.Tensor:
        """float32 [T, K]: rows `index` (int64 [T], on the layout's device) as the loader's values (the
        exact values rounded once to float32, as gguf's dequantization rounds them); only their row
        tiles are decoded, with no host sync (capturable in a CUDA graph): embedding rows."""
        tiles = index // ROWS
        pick = (lambda t: None if t is None else t.index_select(0, tiles))
        vals = self._decode(pick(self.qf), pick(self.sf), pick(self.df), pick(self.hf))  # [T * 16, K]
        vals = vals.reshape(index.shape[0], ROWS, -1)
        return vals[torch.arange(index.shape[0], device=index.device), index % ROWS].float()

    def _decode(self, qf: torch.Tensor, sf: torch.Tensor, df: torch.Tensor, hf: torch.Tensor | None) -> torch.Tensor:
        """float64 [nt * 16, NC * 64]: the row tiles whose words are qf, sf, df, hf (any nt of them)."""
        nt, nc = sf.shape[0], sf.shape[1]
        sup = df.repeat_interleave(4, dim=1)  # each chunk's super-block words: the 4 record words
        sf = torch.cat([sf, sup] if df.shape[-1] == 2 else [sf, sup, sup], -1)
        dev = qf.device
        sh8 = 8 * torch.arange(4, device=dev)
        qf = qf.to(torch.int64) & 0xFFFFFFFF
        w = qf.reshape(nt, nc, 32, 2, 2).permute(0, 1, 3, 2, 4)  # [NT, NC, b, L, h]
        by = (w[..., None] >> sh8) & 0xFF  # [.., h, i]
        lo, hi = by & 0xF, by >> 4
        nib = torch.stack([lo[..., 0, :], lo[..., 1, :], hi[..., 0, :], hi[..., 1, :]], dim=-2)  # [NT, NC, b, L, r, i]
        rec = sf.to(torch.int64) & 0xFFFFFFFF  # [NT, NC, 8, 4] (q6_k: the 4th a copy of the 3rd, unused)
        f16 = (lambda bits: (bits & 0xFFFF).to(torch.int16).view(torch.float16).double())
        byte = (lambda word, i: (word >> (8 * i)) & 0xFF)
        lane = torch.arange(32, device=dev)
        g = lane // 4
        r = torch.arange(4, device=dev)
        if self.fmt in ("q4_k", "q5_k"):
            ints = nib  # MULT 1
            if self.fmt == "q5_k":  # the 5th bit of block b's register r, byte i: bit 8 i + 4 b + r
                hw = (hf.to(torch.int64) & 0xFFFFFFFF)[:, :, None, :, None, None]  # [NT, NC, 1, L, 1, 1]
                sh = (8 * r[None, None, :] + 4 * torch.arange(2, device=dev)[:, None, None] + r[None, :, None])
                ints = nib | (((hw >> sh[:, None]) & 1) << 4)  # sh [b, 1, r, i]
            # per (tile, chunk, lane, block, register r): rows g (r even) / g + 8 (r odd)
            scb = torch.stack([byte(rec[..., 0], 2 * b + h) for b in range(2) for h in range(2)], -1)  # [NT,NC,8,(b,h)]
            mb = torch.stack([byte(rec[..., 1], 2 * b + h) for b in range(2) for h in range(2)], -1)
            dg = torch.stack([f16(rec[..., 2]), f16(rec[..., 3])], -1)  # [NT, NC, 8, h]
            dm = torch.stack([f16(rec[..., 2] >> 16), f16(rec[..., 3] >> 16)], -1)
            scb, mb = scb.reshape(nt, nc, 8, 2, 2).double(), mb.reshape(nt, nc, 8, 2, 2).double()
            a = (dg[:, :, :, None, :] * scb)[:, :, g]  # [NT, NC, 32, b, h]
            o = (dm[:, :, :, None, :] * mb)[:, :, g]
            a = a.permute(0, 1, 3, 2, 4)[..., r % 2]  # [NT, NC, b, L, r]
            o = o.permute(0, 1, 3, 2, 4)[..., r % 2]
            vals = a[..., None] * ints.double() - o[..., None]
        else:
            hf = hf.to(torch.int64) & 0xFFFFFFFF  # [NT, NC, 32, 2]
            hw = hf.permute(0, 1, 3, 2)[..., None, None]  # [NT, NC, b, L, 1, 1]
            field = (hw >> (8 * torch.arange(4, device=dev)[None, :] + 2 * r[:, None])) & 3  # [.., r, i]
            ints = (nib << 2) | (field << 6)  # the stored field carries the ^ 0x80
            ints = ints - 256 * (ints >= 128)  # int8: 4 (q - 32)
            sc = torch.stack([byte(rec[..., b], i) for b in range(2) for i in range(4)], -1)  # [NT, NC, 8, (b, r)]
            sc = (sc - 256 * (sc >= 128)).reshape(nt, nc, 8, 2, 4).double()
            dg = torch.stack([f16(rec[..., 2]), f16(rec[..., 2] >> 16)], -1)  # [NT, NC, 8, h]
            s = dg[:, :, :, None, r % 2] * sc  # [NT, NC, 8, b, r]
            s = s[:, :, g].permute(0, 1, 3, 2, 4)  # [NT, NC, b, L, r]
            vals = s[..., None] * ints.double() / MULT["q6_k"]
        rr, cc = lane_rows_cols(dev)
        out = torch.zeros(nt, nc, 2, ROWS, 32, dtype=torch.float64, device=dev)
        out[:, :, :, rr, cc] = vals
        return out.permute(0, 3, 1, 2, 4).reshape(nt * ROWS, nc * COLS)
