"""The int8 fragment layout (quant/kernels/frag8.py): exact round trip, and the stored words turned into mma
A registers by the very bit operations the PTX runs (written here from the module docstring, in
numpy) give MULT x (the block's integer) at the PTX ISA's m16n8k32 .s8 positions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtp_turbo.quant.kernels.frag8 import MULT, Frag8Weight, counters, for_weight8
from mtp_turbo.quant.repack import CODE_OFFSET, PackedWeight

FORMATS = ("q4_0", "q5_0", "q8_0")


def _weight(n: int, k: int, fmt: str, seed: int = 0) -> PackedWeight:
    return PackedWeight.from_dense(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(16, 64), (37, 96), (5, 160), (40, 640)])
def test_round_trip_is_exact(fmt, shape):
    """Tiles and chunks padded (N not a multiple of 16, K of 64): the decoded matrix is the packed one."""
    w = _weight(*shape, fmt, seed=shape[0])
    fw = Frag8Weight.from_packed(w)
    assert fw.tiles == (-(-shape[0] // 16), -(-shape[1] // 64))
    assert torch.equal(fw.dequantize(), w.dequantize())


@pytest.mark.parametrize("fmt", FORMATS)
def test_built_in_row_slices_is_the_same_layout(fmt):
    """A layout built from slices of whole row tiles (the last one partial) = the one-pass layout,
    word for word (how a 262144-row head is built without gigabytes of temporaries)."""
    w = _weight(75, 192, fmt, seed=3)
    whole = Frag8Weight.from_packed(w, slice_rows=1024)
    for rows in (16, 32, 48):
        sliced = Frag8Weight.from_packed(w, slice_rows=rows)
        assert sliced.shape == whole.shape and sliced.tiles == whole.tiles
        assert torch.equal(sliced.qf, whole.qf) and torch.equal(sliced.sf, whole.sf)
        assert (sliced.hf is None) == (whole.hf is None) and (whole.hf is None or torch.equal(sliced.hf, whole.hf))
    with pytest.raises(AssertionError):
        Frag8Weight.from_packed(w, slice_rows=24)  # not whole tiles


def _u32(t: torch.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint32).astype(np.uint64)


def _s8(words: np.ndarray) -> np.ndarray:
    """[..., 4 bytes] int8 values of uint32 words [...]"""
    b = (words[..., None] >> (8 * np.arange(4, dtype=np.uint64))) & 0xFF
    return b.astype(np.int64) - 256 * (b >= 128)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bit_operations_give_the_a_registers(fmt):
    """For every tile, chunk, block b, lane (g, t), register r, byte i: the PTX's bit operations on the
    stored words == MULT * (code - offset) of W[16 T + g + 8 (r % 2), 64 C + 32 b + 16 (r // 2) + 4 t + i]."""
    n, k = 40, 192
    w = _weight(n, k, fmt, seed=3)
    fw = Frag8Weight.from_packed(w)
    nt, nc = fw.tiles
    codes = np.full((nt * 16, nc * 64), CODE_OFFSET[fmt], dtype=np.int64)
    codes[:n, :k] = w.codes().numpy()
    qf = _u32(fw.qf)
    m32 = np.uint64(0xFFFFFFFF)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for b in range(2):
        if fmt == "q8_0":
            regs = [qf[:, :, b, :, r] for r in range(4)]
        else:
            regs = []
            for r in range(4):
                wd = qf[:, :, :, 2 * b + r % 2]  # [NT, NC, 32]
                if fmt == "q4_0":  # low: ((w << 4) & 0xF0F0F0F0) ^ 0x80808080, high: (w & 0xF0F0F0F0) ^ ...
                    src = ((wd << np.uint64(4)) & m32) if r < 2 else wd
                    regs.append((src & np.uint64(0xF0F0F0F0)) ^ np.uint64(0x80808080))
                else:  # nibble at bits 3..6 | (hf << (4 b + r)) & 0x80808080
                    src = ((wd << np.uint64(3)) & m32) if r < 2 else (wd >> np.uint64(1))
                    hs = (_u32(fw.hf) << np.uint64(4 * b + r)) & m32
                    regs.append((src & np.uint64(0x78787878)) | (hs & np.uint64(0x80808080)))
        for r, reg in enumerate(regs):
            got = _s8(reg)  # [NT, NC, 32, 4]
            for i in range(4):
                rows = np.arange(nt)[:, None, None] * 16 + (g + 8 * (r % 2))[None, None, :]
                cols = np.arange(nc)[None, :, None] * 64 + 32 * b + 16 * (r // 2) + 4 * t[None, None, :] + i
                want = MULT[fmt] * (codes[rows, cols] - CODE_OFFSET[fmt])
                assert np.array_equal(got[..., i], want), (b, r, i)


def test_counters_start_at_zero_and_cover_every_program():
    w = _weight(50, 64, "q4_0")
    fw = for_weight8(w)
    c = counters(w)
    assert c.dtype == torch.int32 and c.numel() == fw.tiles[0] and not c.any()
    assert for_weight8(w) is fw and counters(w) is c  # built once, kept with the weight


def test_padding():
    """Padded rows and blocks carry scale 0, real ones the packed scales (scale records, module docstring)."""
    w = _weight(20, 96, "q4_0")
    fw = Frag8Weight.from_packed(w)
    nt, nc = fw.tiles
    assert fw.qf.shape == (nt, nc, 32, 4) and fw.sf.shape == (nt, nc, 8, 4) and fw.hf is None
    sf = fw.sf.float()
    assert float(sf[1, :, 4:].abs().sum()) == 0.0  # tile 1, g >= 4: rows 20.. and 28.. (N = 20)
    assert float(sf[1, :, :4, 0].abs().min()) > 0.0  # rows 16..19 are real
    assert float(sf[:, 1, :, 2:].abs().sum()) == 0.0  # chunk 1's second block (K = 96: 3 blocks)
    assert torch.equal(sf[0, 0, :, 0], w.scales[:8, 0].float())  # entry g: (scale[g, 2C], scale[g+8, 2C], ..)
    assert torch.equal(sf[0, 0, :, 1], w.scales[8:16, 0].float())
    assert torch.equal(sf[0, 1, :, 0], w.scales[:8, 2].float())
