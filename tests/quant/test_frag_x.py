"""The x operand (quant/frag_x.py): x_frag in Triton's CPU interpreter, decoded by x_values.

x_values is what the CPU path of the frag GEMV multiplies (gemv_frag.emulate), so the pieces must
sum back to x exactly, for either mma group count, with the rows past M and the zero columns empty.
test_frag.py decodes the same output independently, through the mma fragment tables."""

import pytest
import torch

from mtp_turbo.quant import frag_x

pytestmark = pytest.mark.skipif(frag_x.triton is None, reason="Triton is not installed")


def _run(x: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    nc = -(-x.shape[1] // 64)
    xf = torch.full((nc, 2 * groups, 32, 4), -1, dtype=torch.int32)  # poisoned: every word must be written
    xe = torch.zeros(nc, 4, dtype=torch.float32)
    frag_x.x_frag[(nc,)](x, xf, xe, x.shape[1], x.stride(0), M=x.shape[0], PDL=False, G=groups)
    return xf, xe


@pytest.mark.parametrize("m,groups", [(1, 1), (2, 1), (1, 2), (3, 2), (4, 2)])
def test_pieces_sum_back_to_x(m, groups):
    gen = torch.Generator().manual_seed(10 * m + groups)
    k = 150  # a partial last chunk
    # |x| in [2^-6, 2^6) within a chunk: the per-chunk scale and all three pieces at work, and every
    # bit of every value within the 38 binades below its chunk's largest that the pieces hold exactly
    sign = torch.randint(0, 2, (m, k), generator=gen).float() * 2 - 1
    x = sign * (1 + torch.rand(m, k, generator=gen)) * torch.exp2(torch.randint(-6, 6, (m, k), generator=gen).float())
    xf, xe = _run(x, groups)
    assert torch.equal(frag_x.x_values(xf, xe, m, k), x.double())


@pytest.mark.parametrize("groups", [1, 2])
def test_wide_chunks_lose_only_below_the_documented_step(groups):
    # 2^-20 .. 2^20 in one chunk: bits below 2^-38 of the chunk's largest |x| may go (fp16's
    # subnormal step under the scale), nothing above
    gen = torch.Generator().manual_seed(groups)
    x = torch.randn(2, 128, generator=gen) * torch.exp2(torch.randint(-20, 20, (2, 128), generator=gen).float())
    xf, xe = _run(x, groups)
    err = (frag_x.x_values(xf, xe, 2, 128) - x.double()).abs().reshape(2, 2, 64)
    step = x.double().abs().reshape(2, 2, 64).amax(dim=2, keepdim=True) * 2.0**-38
    assert (err <= step).all()


def test_columns_past_k_and_rows_past_m_are_zero():
    x = torch.randn(1, 100)
    xf, xe = _run(x, 1)
    full = frag_x.x_values(xf, xe, 4, 128)
    assert torch.equal(full[0, :100], x[0].double())
    assert not full[0, 100:].any() and not full[1:].any()


def test_an_all_zero_chunk_decodes_to_zeros():
    # an all-zero chunk (e = 0 by the kernel's rule) decodes to zeros, not to NaN or garbage
    x = torch.zeros(2, 64)
    x[1, :] = 3.0
    xf, xe = _run(x, 1)
    assert torch.equal(frag_x.x_values(xf, xe, 2, 64), x.double())
