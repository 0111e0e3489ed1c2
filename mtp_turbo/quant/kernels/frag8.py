"""The int8 fragment layout: a packed weight stored in the order of `mma.m16n8k32.s8` A registers.

Owns: `Frag8Weight` (one [N_out, K] Q8_0 / Q5_0 / Q4_0 matrix re-laid so that each lane of a warp
loads, in one or two 16-byte loads, exactly the weights of its integer-mma A registers for a
16-row x 64-column chunk, in a form that becomes those registers in 0-4 bit operations each), its
construction from a `PackedWeight`, its decoding (the tests and the CPU path), the lane index map,
the padding and scale records, and the per-weight copy with its split-K counters (`for_weight8`).
Ignores: the kernel (frag8_gemv.py), its PTX (ptx.py), GGUF bytes (repack.py keeps the byte-exact
form; this is built from it).

Why: generic Triton kernels spend their issue slots moving converted weights through shared memory
into the operand layout; here a lane's bytes are already its operand, and integer tensor cores take
a whole 32-block in one mma with exact int32 sums: the weight is an exact int8 multiple of its value.

Geometry. Row tiles of 16 output rows (T = 0..NT-1, N padded to 16 with zero-scale rows), chunks of
64 columns = 2 blocks (C = 0..NC-1, K padded to 64 with zero-scale blocks). Lane L of a warp has
g = L // 4, t = L % 4. For block b of chunk C the A registers are (PTX ISA, "Matrix fragments for
mma.m16n8k32", .s8):
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
  every format: sf float16 [NT, NC, 8, 4]: entry g = (scale[g, 2C], scale[g+8, 2C], scale[g, 2C+1],
        scale[g+8, 2C+1]), read by the 4 lanes of that g (stored once: the scales stay 1/16 of
        q4_0's bytes, as in GGUF).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..repack import BLOCK_FORMATS, CODE_OFFSET, QK, PackedWeight

ROWS, COLS = 16, 64  # one row tile x one chunk
SLICE_ROWS = 16384  # rows a layout is built from at once (bounds its int64 temporaries to ~0.4 GB)
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
class Frag8Weight:
    """A block-format matrix in the int8 fragment layout (module docstring). Build with `from_packed`."""

    fmt: str
    shape: tuple[int, int]  # (N_out, K) of the matrix (unpadded)
    qf: torch.Tensor  # int32, see module docstring
    sf: torch.Tensor  # float16 [NT, NC, 8, 4]
    hf: torch.Tensor | None = None  # int32 [NT, NC, 32] (q5_0)
    counters: torch.Tensor | None = None  # int32 [NT]: split-K arrival counters, for a layout held alone (FragMatrix)

    @property
    def tiles(self) -> tuple[int, int]:
        """(NT, NC): row tiles and chunks."""
        return self.sf.shape[0], self.sf.shape[1]

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

    def row_values(self, index: torch.Tensor) -> torch.Tensor:
        """float32 [T, K]: rows `index` (int64 [T], on the layout's device), exact (a block scale times
        an integer), decoded from their row tiles alone with no host sync: embedding rows."""
        tiles = index // ROWS
        pick = (lambda t: None if t is None else t.index_select(0, tiles))
        sub = Frag8Weight(self.fmt, (index.shape[0] * ROWS, self.shape[1]), pick(self.qf), pick(self.sf), pick(self.hf))
        vals = sub.dequantize().reshape(index.shape[0], ROWS, -1)
        return vals[torch.arange(index.shape[0], device=index.device), index % ROWS]

    @staticmethod
    def from_packed(w: PackedWeight, slice_rows: int = SLICE_ROWS) -> "Frag8Weight":
        """The same matrix re-laid (exact: the same integers and scales, padding has scale 0), built
        from slices of at most slice_rows rows (whole row tiles) joined along the tile axis: the
        int64 temporaries of one pass over a 262144-row head took ~5.8 GB of device memory."""
        assert w.fmt in BLOCK_FORMATS, w.fmt
        assert slice_rows % ROWS == 0 and slice_rows > 0, slice_rows
        n, k = w.shape
        if n > slice_rows:
            parts = [Frag8Weight.from_packed(_row_slice(w, r0, min(n, r0 + slice_rows)), slice_rows)
                     for r0 in range(0, n, slice_rows)]
            cat = (lambda ts: None if ts[0] is None else torch.cat(ts, dim=0).contiguous())
            return Frag8Weight(w.fmt, w.shape, cat([p.qf for p in parts]), cat([p.sf for p in parts]),
                               cat([p.hf for p in parts]))
        codes, sc = padded_codes(w)
        nt, nc = codes.shape[0] // ROWS, codes.shape[1] // COLS
        dev = w.device
        v = lane_codes(codes)
        sh8 = 8 * torch.arange(4, device=dev)
        hf = None
        if w.fmt == "q8_0":
            qf = (((v - 128) & 0xFF) << sh8).sum(-1)  # [NT, NC, 2, 32, 4]: bytes = the values
        else:
            qf = nibble_words(v)
            if w.fmt == "q5_0":
                hf = to_i32(((1 - (v >> 4)) << _h_bits(dev)).sum((2, -2, -1)))  # [NT, NC, 32]
        return Frag8Weight(w.fmt, w.shape, to_i32(qf), scale_records(sc, nt, nc), hf)


def lane_codes(codes: torch.Tensor) -> torch.Tensor:
    """int64 [NT, NC, 2 blocks, 32 L, 4 r, 4 i]: the code of lane L's A register r, byte i, of each
    block of each tile and chunk, from codes [NT*16, NC*64] (padded to whole tiles and chunks)."""
    nt, nc = codes.shape[0] // ROWS, codes.shape[1] // COLS
    r, c = lane_rows_cols(codes.device)
    blocks = codes.reshape(nt, ROWS, nc, 2, QK).permute(0, 2, 3, 1, 4).to(torch.int64)  # [NT, NC, 2, 16, 32]
    return blocks[:, :, :, r, c]


def nibble_words(v: torch.Tensor) -> torch.Tensor:
    """int64 [NT, NC, 32, 4] (32-bit patterns) of lane_codes' low 4 bits: word 2 b + h holds in byte
    i register h's nibble (low) and register h + 2's (high) of block b (module docstring, q4_0)."""
    nt, nc = v.shape[0], v.shape[1]
    nib = v & 0xF
    sh8 = 8 * torch.arange(4, device=v.device)
    words = ((nib[..., 0:2, :] | (nib[..., 2:4, :] << 4)) << sh8).sum(-1)  # [NT, NC, 2, 32, h]
    return words.permute(0, 1, 3, 2, 4).reshape(nt, nc, 32, 4)  # word 2 b + h


def _row_slice(w: PackedWeight, r0: int, r1: int) -> PackedWeight:
    """Rows [r0, r1) of w (views: the packed arrays are row-major)."""
    cut = (lambda t: None if t is None else t[r0:r1])
    return PackedWeight(w.fmt, (r1 - r0, w.shape[1]), cut(w.qs), cut(w.scales), cut(w.qh))


def _h_bits(device) -> torch.Tensor:
    """int64 [2 blocks, 1, 4 r, 4 i]: the hf bit of q5_0's register r = 4 b + j, byte i: 8 i + 7 - r."""
    r = 4 * torch.arange(2, device=device)[:, None, None, None] + torch.arange(4, device=device)[None, None, :, None]
    return 8 * torch.arange(4, device=device)[None, None, None, :] + 7 - r


def padded_codes(w: PackedWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int32 [NT*16, NC*64], scales float16 [NT*16, NC*2]) of w, padded to whole tiles and
    chunks: padding codes are the format's zero (CODE_OFFSET), padding scales 0."""
    n, k = w.shape
    nt, nc = -(-n // ROWS), -(-k // COLS)
    codes = torch.full((nt * ROWS, nc * COLS), CODE_OFFSET[w.fmt], dtype=torch.int32, device=w.device)
    codes[:n, :k] = w.codes()
    sc = torch.zeros((nt * ROWS, nc * 2), dtype=torch.float16, device=w.device)
    sc[:n, : k // QK] = w.scales
    return codes, sc


def scale_records(sc: torch.Tensor, nt: int, nc: int) -> torch.Tensor:
    """float16 [NT, NC, 8, 4] from the padded block scales sc [NT*16, NC*2]: entry g of a tile-chunk
    = (scale[g, 2C], scale[g+8, 2C], scale[g, 2C+1], scale[g+8, 2C+1]) (module docstring)."""
    sf = sc.reshape(nt, ROWS, nc, 2).permute(0, 2, 1, 3)  # [NT, NC, 16, 2]
    return torch.stack([sf[:, :, :8, 0], sf[:, :, 8:, 0], sf[:, :, :8, 1], sf[:, :, 8:, 1]], dim=-1).contiguous()


def scales_from_records(sf: torch.Tensor) -> torch.Tensor:
    """float32 [NT, NC, 16 rows, 2 blocks]: scale_records inverted."""
    sf = sf.float()
    return torch.stack([torch.cat([sf[..., 0], sf[..., 1]], -1), torch.cat([sf[..., 2], sf[..., 3]], -1)], -1)


def to_i32(x: torch.Tensor) -> torch.Tensor:
    """int64 holding an unsigned 32-bit pattern -> int32 with the same bits."""
    x = x.to(torch.int64) & 0xFFFFFFFF
    return torch.where(x >= 2**31, x - 2**32, x).to(torch.int32).contiguous()


def for_weight8(w: PackedWeight) -> Frag8Weight:
    """w's int8 fragment layout, built on first use and kept with w (`PackedWeight.derived`), with its
    split counters (`counters`): the same bytes again in device memory, so build it only for
    matrices a frag8 tile runs on."""
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
