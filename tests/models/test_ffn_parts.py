"""The down projection as slices of K (FusedTiles.ffn_parts): gate|up's epilogue products summed by
parts_norm against linear_parts (the prefill chunks' form of the same sum) and a float64 reference.

Runs in Triton's interpreter on the CPU (tests/conftest.py), fp32. Both paths make the same dots on
the same [16, 32] x [32, 32] tiles and add them in the same order, so they agree bit for bit here
too (unlike rows of different row counts, whose BLAS tiles differ: test_fused.py).
"""

import pytest
import torch

pytest.importorskip("triton")

from mtp_turbo.models import fused_kernels as fk  # noqa: E402

pytestmark = pytest.mark.interpret

MP, BN, BK, BND, RT = 16, 32, 32, 32, 4


def _gelu_tanh(g):
    return 0.5 * g * (1.0 + torch.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3)))


@pytest.mark.parametrize("M", [1, 3])
def test_parts_sum_is_linear_parts_bit_for_bit_and_the_reference(M):
    # K (hidden) 48 and F (ffn) 80, N (hidden out) 40: none a multiple of the tiles, so the last
    # part, the last slice and the last column tile are masked
    K, F, N, eps = 48, 80, 40, 1e-6
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.3  # noqa: E731
    x, w, wd = r(M, K), r(2 * F, K), r(N, F)
    res, wpost, wpre = r(M, N), 1 + r(N), 1 + r(N)
    n_parts = -(-F // BN)

    # the decode form: gated_parts' products, then parts_norm (with linear_norm's sandwich tail)
    parts = torch.zeros(n_parts, MP, N)
    fk.gated_parts[(n_parts, 1)](x, w, wd, parts, M, F, K, N, MP, 0.0, MP=MP, KP=64, BN=BN, BK=BK, BND=BND,
                                 PREC="ieee", NDP=64, PF=False)
    y = torch.zeros(M, N)
    hout, xout = torch.zeros(M, N), torch.zeros(M, N)
    cnt = torch.zeros(1, dtype=torch.int32)
    fk.parts_norm[(-(-N // BND), 1)](parts, y, M, N, MP, eps, cnt, res, wpost, wpre, hout, xout,
                                     NPARTS=n_parts, MP=MP, NP=64, RT=RT, BN=BND)
    assert not cnt.any()  # the tail's last program left its counter at zero (a graph replay's start)

    # the prefill form: gate|up stored, then linear_parts over it
    gu = torch.zeros(M, F)
    fk.linear[(-(-F // BN), 1)](x, x, x, x, x, x, w, gu, M, F, K, eps, PRO=0, GATED=True, MP=MP, KP=64, BN=BN,
                                BK=BK, PREC="ieee")
    y2 = torch.zeros(M, N)
    fk.linear_parts[(-(-N // BND), 1)](gu, wd, y2, M, N, F, 0.0, MP=MP, BN=BND, BC=BN, PREC="ieee")
    assert torch.equal(y, y2)

    # against float64: gelu_tanh(x Wg) * (x Wu) @ Wd, then the sandwich norms
    x64 = x.double()
    gu64 = _gelu_tanh(x64 @ w[:F].double().T) * (x64 @ w[F:].double().T)
    ref = gu64 @ wd.double().T
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5

    def rms(t, wt):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * wt

    h_ref = res.double() + rms(y.double(), wpost.double())
    assert ((hout.double() - h_ref).abs().max() / h_ref.abs().max()).item() < 1e-5
    x_ref = rms(hout.double(), wpre.double())
    assert ((xout.double() - x_ref).abs().max() / x_ref.abs().max()).item() < 1e-5
