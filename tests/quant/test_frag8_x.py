"""The int8 x operand (quant/kernels/frag8_x.py): the words are the documented digits of V = trunc(x 2^(28-E))
(2^E: the power of two above the row's largest |x| in the chunk), computed here independently; the
pieces rebuild x to below 2^(E-28), exactly within 5 binades of 2^E; the lane scales are the
documented powers of two; padding stays empty."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")
from mtp_turbo.quant.kernels import frag8_x  # noqa: E402


def _run(x: torch.Tensor, shift: int = 4):
    m, k = x.shape
    nc, mm = -(-k // 64), 1 if m <= 2 else 2
    xf = torch.full((nc, mm, 32, 4), -1, dtype=torch.int32)
    xe = torch.full((nc, 4, 4), float("nan"))
    frag8_x.x_frag8[(nc,)](x, xf, xe, k, x.stride(0), M=m, MM=mm, SHIFT=shift, PDL=False)
    return xf, xe


def _chunk_e(x: torch.Tensor) -> torch.Tensor:
    """E per element: of its row's largest |x| in its 64-column chunk (mx < 2^E <= 2 mx)."""
    m, k = x.shape
    nc = -(-k // 64)
    xp = torch.zeros(m, nc * 64, dtype=torch.float64)
    xp[:, :k] = x.double()
    mx = xp.abs().reshape(m, nc, 64).amax(-1)
    e = torch.floor(torch.log2(mx)) + 1
    return e.repeat_interleave(64, dim=1)[:, :k]


def expected_words(x: torch.Tensor) -> torch.Tensor:
    """XF [NC, MM, 32, 4] by the module's rule, in float64 / int64 torch: lane (g, t), register
    r = 2 b + h, byte i = digit g % 4 of V at row 2 j + g // 4, column 64 c + 32 b + 16 h + 4 t + i."""
    m, k = x.shape
    nc, mm = -(-k // 64), 1 if m <= 2 else 2
    xp = torch.zeros(4, nc * 64, dtype=torch.float64)
    xp[:m, :k] = x.double()
    mx = xp.abs().reshape(4, nc, 64).amax(-1)
    e = torch.where(mx > 0, torch.frexp(mx).exponent.clamp(min=frag8_x.E_MIN), 0)  # mx < 2^e <= 2 mx
    v = torch.trunc(xp * torch.exp2(28.0 - e.double()).repeat_interleave(64, dim=1)).long()
    assert v.abs().max() < 2 ** 28
    words = torch.zeros(nc, mm, 32, 4, dtype=torch.int64)
    for c in range(nc):
        for j in range(mm):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                row, piece = 2 * j + g // 4, g % 4
                for r in range(4):
                    for i in range(4):
                        vv = int(v[row, 64 * c + 32 * (r // 2) + 16 * (r % 2) + 4 * t + i])
                        byte = (vv >> (21 - 7 * piece)) & (0xFF if piece == 0 else 0x7F)
                        words[c, j, lane, r] |= byte << (8 * i)
    return (words - (words >= 2 ** 31).long() * 2 ** 32).to(torch.int32)


@pytest.mark.parametrize("m", [1, 3])
def test_words_follow_the_rule(m):
    """Bit for bit the digits of V (signed top byte, then 7-bit digits), negative values and a K
    tail included; so every piece but the first is in [0, 127]."""
    g = torch.Generator().manual_seed(10 + m)
    x = torch.randn(m, 150, generator=g) * torch.exp2(torch.randint(-20, 20, (m, 150), generator=g).float())
    xf, _ = _run(x)
    assert torch.equal(xf, expected_words(x))


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_pieces_rebuild_x(m):
    k = 200  # a K tail inside the last chunk
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-12, 12, (m, k), generator=g).float())
    xf, xe = _run(x)
    got = frag8_x.x8_values(xf, xe, m, k, shift=4)
    e = _chunk_e(x)
    err = (got - x.double()).abs()
    assert torch.all(err < torch.exp2(e - 28)), (err / torch.exp2(e - 28)).max()
    near = x.double().abs() >= torch.exp2(e - 5)  # ulp >= the last piece's unit: exact
    assert near.any() and torch.equal(got[near], x.double()[near])
    assert (err > 0).any()  # the bound is not vacuous: elements far below the max do lose bits


def test_lane_scales_and_padding():
    """xe[c, t, j] = 2^(E[row 2 j + t // 2] - 14 - 14 (t % 2) - SHIFT) for the groups in use, 0 beyond;
    rows past M and columns past K have zero pieces; an all-zero row stays finite and zero."""
    x = torch.tensor([[3.0] + [0.5] * 99, [0.0] * 100, [-1e-3] * 100])  # M = 3: two groups, row 3 empty
    xf, xe = _run(x, shift=3)
    for c in range(2):
        for t in range(4):
            for j in range(4):
                row = 2 * j + t // 2
                if j >= 2:
                    assert xe[c, t, j] == 0
                elif row == 0:
                    assert xe[c, t, j] == 2.0 ** ((2 if c == 0 else 0) - 14 - 14 * (t % 2) - 3)
                elif row == 2:
                    assert xe[c, t, j] == 2.0 ** (math.floor(math.log2(1e-3)) + 1 - 14 - 14 * (t % 2) - 3)
    assert torch.isfinite(xe).all()
    vals = frag8_x.x8_values(xf, xe, 4, 128, shift=3)
    assert not vals[1].any() and not vals[3].any() and not vals[:, 100:].any()
    assert torch.allclose(vals[:3, :100], x.double(), rtol=0, atol=2.0 ** -26)
