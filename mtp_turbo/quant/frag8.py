"""The int8 fragment layout: a packed weight stored in the order of `mma.m16n8k32.s8` A registers.

Owns: `Frag8Weight` (one [N_out, K] Q8_0 / Q5_0 / Q4_0 matrix re-laid so that each lane of a warp
loads, in one or two 16-byte loads, exactly the weights of its integer-mma A registers for a
16-row x 64-column chunk, in a form that becomes those registers in 0-4 bit operations each), its
construction from a `PackedWeight`, its decoding (the tests and the CPU path) and the lane index
map. Ignores: the kernel (gemv_frag8.py), the fp16 layout (frag.py, whose geometry, padding and
scale records this shares), GGUF bytes (repack.py).

Why: the fp16 layout (frag.py) needs one f16x2 FMA per register and two mma per 32-block; integer
tensor cores take a whole 32-block in one mma.m16n8k32 and need no float conversion: the weight
becomes an exact int8 multiple of its value, the mma sums in exact int32.

Geometry as frag.py (16-row tiles T, 64-column chunks C = 2 blocks, lane L: g = L // 4, t = L % 4).
For block b of chunk C the A registers are (PTX ISA, "Matrix fragments for mma.m16n8k32", .s8):
    a0 = W[g, 4t .. 4t+3]      a1 = W[g+8, 4t .. 4t+3]
    a2 = W[g, 16+4t .. +3]     a3 = W[g+8, 16+4t .. +3]      (columns + 32 b; byte i = column + i)
as int8 multiples of the value: q8_0 the value itself, q5_0 8 (q - 16), q4_0 16 (q - 8). Stored:
  q8_0  qf int32 [NT, NC, 2, 32, 4]: [.., b, L, r] = register a_r of block b (the bytes are the values);
  q4_0  qf int32 [NT, NC, 32, 4]: word 2 b + h has in byte i the nibbles of rows g + 8 h: low = column
        4t+i (a_h), high = column 16+4t+i (a_{h+2}). `((w << 4) & 0xF0F0F0F0) ^ 0x80808080` is a_h =
        16 (q - 8), `(w & 0xF0F0F0F0) ^ 0x80808080` is a_{h+2};
  q5_0  the same nibbles, plus hf int32 [NT, NC, 32]: NOT the 5th bit of register r = 4 b + j's byte i
        at bit 8 i + 7 - r, so `(hf << r) & 0x80808080` ORed onto the nibble at bits 3..6 gives
        8 (q - 16) (bit 7 = 1 - 5th bit is the sign: 8 q - 128);
  every format: sf float16 [NT, NC, 8, 4], frag.scale_records (the block scales, as stored in GGUF).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .frag import COLS, ROWS, FragWeight, padded_codes, scale_records, scales_from_records, to_i32, with_tail
from .repack import BLOCK_FORMATS, CODE_OFFSET, QK, PackedWeight

MULT = {"q8_0": 1, "q5_0": 8, "q4_0": 16}  # the int8 a register holds = MULT x the block's integer
SHIFT = {f: m.bit_length() - 1 for f, m in MULT.items()}  # log2(MULT): the GEMV folds 2^-SHIFT into x's scale


def lane_rows_cols(device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(row [32, 4, 4], col [32, 4, 4]) within a tile / a block of the int8 weights of lane L's A
    registers: [L, r, i] = register a_r, byte i."""
    lane = torch.arange(32, device=device)
    g, t = (lane // 4)[:, None, None], (lane % 4)[:, None, None]
    r, i = torch.arange(4, device=device)[None, :, None], torch.arange(4, device=device)[None, None, :]
    return g + 8 * (r % 2), 16 * (r // 2) + 4 * t + i


@dataclass(frozen=True, eq=False)
class Frag8Weight(FragWeight):
    """A block-format matrix in the int8 fragment layout (module docstring). Build with `from_packed`."""

    def a_values(self) -> torch.Tensor:
        """int64 [NT, NC, 2, 32, 4, 4]: the int8 A register bytes [tile, chunk, block, lane, r, i] the
        kernel's bit operations produce (MULT x the block integer), from the stored words."""
        nt, nc = self.tiles
        dev = self.qf.device
        qf = self.qf.to(torch.int64) & 0xFFFFFFFF
        sh8 = 8 * torch.arange(4, device=dev)
        if self.fmt == "q8_0":
            b = (qf[..., None] >> sh8) & 0xFF  # [NT, NC, 2, 32, 4 r, 4 i]
            return b - 256 * (b >= 128)
        w = qf.reshape(nt, nc, 32, 2, 2).permute(0, 1, 3, 2, 4)  # [NT, NC, block, L, h]
        by = (w[..., None] >> sh8) & 0xFF  # [.., h, i]
        lo, hi = by & 0xF, by >> 4
        q = torch.stack([lo[..., 0, :], lo[..., 1, :], hi[..., 0, :], hi[..., 1, :]], dim=-2)  # [.., r, i]
        if self.fmt == "q5_0":
            hf = self.hf.to(torch.int64) & 0xFFFFFFFF  # [NT, NC, 32]
            bit = _h_bits(dev)  # [block, 1, r, i]
            q = q | ((1 - ((hf[:, :, None, :, None, None] >> bit) & 1)) << 4)
        return MULT[self.fmt] * (q - CODE_OFFSET[self.fmt])

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K]: the A register bytes / MULT x the block scales, placed by lane_rows_cols (exact)."""
        n, k = self.shape
        nt, nc = self.tiles
        r, c = lane_rows_cols(self.qf.device)
        ints = torch.zeros(nt, nc, 2, ROWS, QK, dtype=torch.int64, device=self.qf.device)
        ints[:, :, :, r, c] = self.a_values()
        vals = ints.permute(0, 1, 3, 2, 4).float() / MULT[self.fmt]  # [NT, NC, 16, 2 blocks, 32]
        vals = vals * scales_from_records(self.sf)[..., None]
        return vals.reshape(nt, nc, ROWS, COLS).permute(0, 2, 1, 3).reshape(nt * ROWS, nc * COLS)[:n, :k]

    @staticmethod
    def from_packed(w: PackedWeight) -> "Frag8Weight":
        """The same matrix re-laid (exact: the same integers and scales, padding has scale 0)."""
        assert w.fmt in BLOCK_FORMATS, w.fmt
        codes, sc = padded_codes(w)
        nt, nc = codes.shape[0] // ROWS, codes.shape[1] // COLS
        dev = w.device
        r, c = lane_rows_cols(dev)
        blocks = codes.reshape(nt, ROWS, nc, 2, QK).permute(0, 2, 3, 1, 4).to(torch.int64)  # [NT, NC, 2, 16, 32]
        v = blocks[:, :, :, r, c]  # [NT, NC, 2, 32 L, 4 r, 4 i] codes
        sh8 = 8 * torch.arange(4, device=dev)
        hf = None
        if w.fmt == "q8_0":
            qf = (((v - 128) & 0xFF) << sh8).sum(-1)  # [NT, NC, 2, 32, 4]: bytes = the values
        else:
            nib = v & 0xF
            words = ((nib[..., 0:2, :] | (nib[..., 2:4, :] << 4)) << sh8).sum(-1)  # [NT, NC, 2, 32, h]
            qf = words.permute(0, 1, 3, 2, 4).reshape(nt, nc, 32, 4)  # word 2 b + h
            if w.fmt == "q5_0":
                hf = to_i32(((1 - (v >> 4)) << _h_bits(dev)).sum((2, -2, -1)))  # [NT, NC, 32]
        return Frag8Weight(w.fmt, w.shape, with_tail(to_i32(qf)), with_tail(scale_records(sc, nt, nc)),
                           None if hf is None else with_tail(hf))


def _h_bits(device) -> torch.Tensor:
    """int64 [2 blocks, 1, 4 r, 4 i]: the hf bit of q5_0's register r = 4 b + j, byte i: 8 i + 7 - r."""
    r = 4 * torch.arange(2, device=device)[:, None, None, None] + torch.arange(4, device=device)[None, None, :, None]
    return 8 * torch.arange(4, device=device)[None, None, None, :] + 7 - r


def for_weight8(w: PackedWeight) -> Frag8Weight:
    """w's int8 fragment layout, built on first use and kept with w (`PackedWeight.derived`), with its
    split counters (`counters`)."""
    if "frag8" not in w.derived:
        w.derived["frag8"] = Frag8Weight.from_packed(w)
        w.derived["frag8_counters"] = torch.zeros(w.derived["frag8"].tiles[0], dtype=torch.int32, device=w.device)
    return w.derived["frag8"]


def counters(w: PackedWeight) -> torch.Tensor:
    """int32 [NT], zeros between calls: the GEMV's split-K arrival counters (one per program of row
    tiles; each call's last arriving split resets its own), made with the layout so that no call
    allocates one (CUDA-graph capture)."""
    for_weight8(w)
    return w.derived["frag8_counters"]
