"""The fragment layout: a packed weight stored in the order of tensor-core mma operand registers.

Owns: `FragWeight` (one [N_out, K] Q8_0 / Q5_0 / Q4_0 matrix re-laid so that each lane of a warp
loads, in one or two 16-byte loads, exactly the weights of its `mma.m16n8k16` A-operand registers
for a 16-row x 64-column chunk), its construction from a `PackedWeight` (torch ops, on the weight's
device) and the per-lane index maps both the layout and the tests derive from. Ignores: the kernel
(gemv_frag.py), GGUF bytes (repack.py keeps the byte-exact form; this is built from it).

Why: the generic Triton kernels spend their issue slots moving converted weights through shared
memory into the operand layout (bench/RESULTS.md, session 5: 4.9 instructions per weight); here a
lane's bytes are already its operand, so the conversion is a few `lop3` / `prmt` and one f16x2
FMA per register, and the loop has no layout traffic at all.

Geometry. Row tiles of 16 output rows (T = 0..NT-1, N padded to 16 with zero-scale rows), chunks of
64 columns = 2 blocks (C = 0..NC-1, K padded to 64 with zero-scale blocks). Lane L of a warp has
g = L // 4, t = L % 4. In chunk step s (16 columns, s = 0..3; block s // 2) the A registers of
`mma.sync.m16n8k16.row.col` are (PTX ISA, "Matrix fragments for mma.m16n8k16"):
    a0 = (W[g, 2t], W[g, 2t+1])      a1 = (W[g+8, 2t], W[g+8, 2t+1])
    a2 = (W[g, 2t+8], W[g, 2t+9])    a3 = (W[g+8, 2t+8], W[g+8, 2t+9])     (columns + 16 s)
(first element in the low half). Stored per format (codes are the unsigned stored integers:
q4_0 nibble 0..15, value - 8; q5_0 0..31, value - 16; q8_0 byte = value + 128):
  q4_0  qf int32 [NT, NC, 32, 4]: word s of lane L has nibble positions (bits 4p..4p+3)
        p0 a0.lo, p4 a0.hi, p1 a1.lo, p5 a1.hi, p2 a2.lo, p6 a2.hi, p3 a3.lo, p7 a3.hi
        (so `w & 0x000F000F`, `w & 0x00F000F0` and the same of `w >> 8` are a0..a3 under 0x6400);
  q5_0  the same nibbles, plus hf int32 [NT, NC, 32]: the 5th bit of position p in step s at bit
        (0, 2, 8, 10)[s] + (0, 4, 1, 5, 16, 20, 17, 21)[p] (shifted by 4 - (0, 2, 8, 10)[s] they sit
        4 or 8 above the nibbles of a0/a1, and one more shift right does it for a2/a3);
  q8_0  qf int32 [NT, NC, 2, 32, 4]: half h holds steps 2h, 2h+1 as words (A, B) each: A = bytes
        (a0.lo, a0.hi, a1.lo, a1.hi), B = (a2.lo, a2.hi, a3.lo, a3.hi);
  every format: sf float16 [NT, NC, 8, 4]: entry g = (scale[g, 2C], scale[g+8, 2C],
        scale[g, 2C+1], scale[g+8, 2C+1]), read by the 4 lanes of that g (stored once: the
        scales stay 1/16 of q4_0's bytes, as in GGUF).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .repack import BLOCK_FORMATS, CODE_OFFSET, QK, PackedWeight

ROWS, COLS = 16, 64  # one row tile x one chunk
H_BASE = (0, 2, 8, 10)  # q5_0: the 5th bits of step s start at this bit of the lane's word
H_POS = (0, 4, 1, 5, 16, 20, 17, 21)  # ... plus this offset for nibble position p


def lane_rows_cols(device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(row [32, 8], col [32, 8]) within a tile / a 16-column step of the 8 weights of lane L's
    A registers, in the order a0.lo, a0.hi, a1.lo, a1.hi, a2.lo, a2.hi, a3.lo, a3.hi."""
    lane = torch.arange(32, device=device)
    g, t = (lane // 4)[:, None], (lane % 4)[:, None]
    dr = torch.tensor([0, 0, 8, 8, 0, 0, 8, 8], device=device)[None, :]
    dc = torch.tensor([0, 1, 0, 1, 8, 9, 8, 9], device=device)[None, :]
    return g + dr, 2 * t + dc


# nibble position p of a q4_0 / q5_0 word for each entry of lane_rows_cols' order
NIBBLE_POS = (0, 4, 1, 5, 2, 6, 3, 7)


@dataclass(frozen=True, eq=False)
class FragWeight:
    """A block-format matrix in the fragment layout (module docstring). Build with `from_packed`."""

    fmt: str
    shape: tuple[int, int]  # (N_out, K) of the matrix (unpadded)
    qf: torch.Tensor  # int32, see module docstring
    sf: torch.Tensor  # float16 [NT, NC, 8, 4]
    hf: torch.Tensor | None = None  # int32 [NT, NC, 32] (q5_0)

    @property
    def tiles(self) -> tuple[int, int]:
        """(NT, NC): row tiles and chunks."""
        return self.sf.shape[0], self.sf.shape[1]

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K]: the stored words decoded back through lane_rows_cols (exact)."""
        n, k = self.shape
        nt, nc = self.tiles
        dev = self.qf.device
        r, c = lane_rows_cols(dev)
        s = torch.arange(4, device=dev)[:, None, None]
        qf = self.qf.to(torch.int64) & 0xFFFFFFFF
        if self.fmt == "q8_0":
            words = qf.reshape(nt, nc, 2, 32, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(nt, nc, 4, 32, 2)
            v = torch.cat([(words[..., :1] >> (8 * torch.arange(4, device=dev))) & 0xFF,
                           (words[..., 1:] >> (8 * torch.arange(4, device=dev))) & 0xFF], dim=-1)
        else:
            pos = torch.tensor(NIBBLE_POS, device=dev)
            v = (qf.permute(0, 1, 3, 2)[..., None] >> (4 * pos)) & 0xF  # [NT, NC, 4, 32, 8]
            if self.fmt == "q5_0":
                bit = torch.tensor(H_BASE, device=dev)[:, None, None] + torch.tensor(H_POS, device=dev)[pos]
                hf = self.hf.to(torch.int64) & 0xFFFFFFFF
                v = v | (((hf[:, :, None, :, None] >> bit) & 1) << 4)
        codes = torch.zeros(nt, nc, ROWS, COLS, dtype=torch.int64, device=dev)
        codes[:, :, r[None].expand(4, 32, 8), (c[None] + 16 * s)] = v
        vals = (codes - CODE_OFFSET[self.fmt]).float()  # [NT, NC, 16, 64]
        # [NT, NC, 16 rows, 2 blocks, 32]
        vals = vals.reshape(nt, nc, ROWS, 2, QK) * scales_from_records(self.sf)[..., None]
        return vals.reshape(nt, nc, ROWS, COLS).permute(0, 2, 1, 3).reshape(nt * ROWS, nc * COLS)[:n, :k]

    @staticmethod
    def from_packed(w: PackedWeight) -> "FragWeight":
        """The same matrix re-laid (exact: the same codes and scales, padding has scale 0)."""
        assert w.fmt in BLOCK_FORMATS, w.fmt
        n, k = w.shape
        codes, sc = padded_codes(w)
        nt, nc = codes.shape[0] // ROWS, codes.shape[1] // COLS
        dev = w.device
        r, c = lane_rows_cols(dev)  # [32, 8]
        s = torch.arange(4, device=dev)[:, None, None]
        # v[T, C, s, L, e]: code of entry e of lane L's registers in step s of tile T, chunk C
        tiles = codes.reshape(nt, ROWS, nc, COLS).permute(0, 2, 1, 3)  # [NT, NC, 16, 64]
        v = tiles[:, :, r[None].expand(4, 32, 8), (c[None] + 16 * s)].to(torch.int64)  # [NT, NC, 4, 32, 8]
        hf = None
        if w.fmt == "q8_0":
            shift = 8 * torch.arange(4, device=dev)
            a = (v[..., :4] << shift).sum(-1)  # [NT, NC, 4, 32] word A of each step
            b = (v[..., 4:] << shift).sum(-1)
            qf = torch.stack([a, b], dim=-1)  # [NT, NC, 4 steps, 32, 2]
            qf = qf.reshape(nt, nc, 2, 2, 32, 2).permute(0, 1, 2, 4, 3, 5).reshape(nt, nc, 2, 32, 4)
        else:
            pos = torch.tensor(NIBBLE_POS, device=dev)
            qf = ((v & 0xF) << (4 * pos)).sum(-1).permute(0, 1, 3, 2)  # [NT, NC, 32, 4 steps]
            if w.fmt == "q5_0":
                bit = torch.tensor(H_BASE, device=dev)[:, None, None] + torch.tensor(H_POS, device=dev)[pos]
                hf = ((v >> 4) << bit[None, None].expand(1, 1, 4, 32, 8)).sum((-1, -3))  # [NT, NC, 32]
                hf = to_i32(hf)
        return FragWeight(w.fmt, (n, k), with_tail(to_i32(qf)), with_tail(scale_records(sc, nt, nc)),
                          None if hf is None else with_tail(hf))


def padded_codes(w: PackedWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int32 [NT*16, NC*64], scales float16 [NT*16, NC*2]) of w, padded to whole tiles and
    chunks: padding codes are the format's zero (CODE_OFFSET), padding scales 0."""
    assert w.fmt in BLOCK_FORMATS, w.fmt
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


def for_weight(w: PackedWeight) -> FragWeight:
    """w's fragment layout, built on first use and kept with w (`PackedWeight.derived`): the same
    bytes again in device memory, so build it only for matrices a frag tile runs on."""
    if "frag" not in w.derived:
        w.derived["frag"] = FragWeight.from_packed(w)
    return w.derived["frag"]


def with_tail(t: torch.Tensor) -> torch.Tensor:
    """t in a buffer with two more tile-chunk records after it (zeros): a kernel that loads the chunk
    after next ahead of use reads them past the last tile, and never uses what it read."""
    rec = t[0, 0].numel() if t.dim() > 2 else t.shape[-1]
    buf = torch.zeros(t.numel() + 2 * rec, dtype=t.dtype, device=t.device)
    buf[: t.numel()] = t.reshape(-1)
    return buf[: t.numel()].view(t.shape)


def to_i32(x: torch.Tensor) -> torch.Tensor:
    """int64 holding an unsigned 32-bit pattern -> int32 with the same bits."""
    x = x.to(torch.int64) & 0xFFFFFFFF
    return torch.where(x >= 2**31, x - 2**32, x).to(torch.int32).contiguous()
