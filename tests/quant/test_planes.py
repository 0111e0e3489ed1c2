"""The fused GEMV on the file's own bytes (quant/planes.py, models/weight_tiles.py).

For every format: the planes turn back into the same file bytes; the GEMV over the planes gives
the same bits as the GEMV over the loader's dense matrix (the tile the kernel builds is the
loader's tile); and its result matches gguf's own dequantization times the input in float64.
Random block bytes with finite scales are valid blocks of every format, so no quantizer is
needed. On the CPU the kernels run in Triton's interpreter (conftest.py), in fp32 (the loader's
values exactly); test_planes_gpu below checks bf16 on CUDA, where the dot's rounding may differ.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize

pytest.importorskip("triton")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from mtp_turbo.models.arch import BlockSpec  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan, weight_args  # noqa: E402
from mtp_turbo.quant.planes import PLANES, FusedWeight, PlaneMatrix  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from blocks import FORMATS, random_blocks  # noqa: E402

def spec(hidden: int) -> BlockSpec:
    return BlockSpec(hidden=hidden, n_heads=2, n_kv_heads=1, head_dim=32, ffn=64, eps=1e-6, query_scale=0.125, qk_norm=False,
                     sandwich_norms=False, activation="gelu_tanh", qkv_bias=False)


def gemv(w, x, dtype, tiles=FusedTiles()):
    plan = LayerPlan(spec(x.shape[1]), tiles, dtype, x.device)
    y = torch.zeros(16, w.shape[0], dtype=dtype, device=x.device)
    return plan.gemv(x, w, y).clone()


@pytest.mark.parametrize("t", FORMATS, ids=lambda t: t.name)
def test_planes_round_trip(t):
    n, k = 5, 512
    raw = torch.from_numpy(random_blocks(t, n, k, 1))
    pm = PlaneMatrix.from_gguf(raw, t, (n, k))
    assert torch.equal(pm.gguf_bytes(), raw)
    assert pm.nbytes == raw.numel()  # the file's bytes, no more
    want = gguf_dequantize(raw.numpy().reshape(n, -1), t).reshape(n, k)
    assert np.array_equal(pm.dequantize().numpy(), want)
    assert len(pm.planes) == len(PLANES[t])


@pytest.mark.parametrize("t", FORMATS, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 3])
def test_plane_gemv_matches_dense_and_gguf(t, rows):
    # 40 output rows: not a multiple of the 16-row tile; K = 512: several K steps of every chunk
    n, k = 40, 512
    raw = torch.from_numpy(random_blocks(t, n, k, 2))
    pm = PlaneMatrix.from_gguf(raw, t, (n, k))
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(3))
    y_q = gemv(FusedWeight(pm), x, torch.float32)[:rows]
    y_d = gemv(pm.dequantize(), x, torch.float32)[:rows]
    assert torch.equal(y_q, y_d)
    want = x.double() @ torch.from_numpy(gguf_dequantize(raw.numpy().reshape(n, -1), t).reshape(n, k)).double().T
    assert torch.allclose(y_q.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("ta,tb", [(T.Q5_0, T.Q8_0), (T.Q4_K, T.Q6_K)], ids=lambda t: t.name)
def test_two_segments_and_gated(ta, tb):
    # q|k in one format and v in another (Q4_K_M's mix), and gate|up over the same two segments
    k = 256
    pa = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(ta, 32, k, 4)), ta, (32, k))
    pb = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(tb, 32, k, 5)), tb, (32, k))
    fw = FusedWeight(pa, pb)
    dense = fw.dense(torch.float32)
    x = 0.1 * torch.randn(2, k, generator=torch.Generator().manual_seed(6))
    tiles = FusedTiles(bn_small=16, bn_gated=16)
    assert torch.equal(gemv(fw, x, torch.float32, tiles), gemv(dense, x, torch.float32, tiles))
    plan = LayerPlan(spec(k), tiles, torch.float32, x.device)
    yq = torch.zeros(16, 32)
    yd = torch.zeros(16, 32)
    plan.gemv(x, fw, yq, gated=True)
    plan.gemv(x, dense, yd, gated=True)
    assert torch.equal(yq, yd) and yq[:2].abs().sum() > 0


def test_k_step_divides_k():
    pm = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(T.Q8_0, 16, 640, 7)), T.Q8_0, (16, 640))
    assert weight_args(FusedWeight(pm), 16, 512)[1] == 128  # 640 = 5 x 128
    with pytest.raises(AssertionError, match="straddles"):
        weight_args(FusedWeight(pm, pm), 32, 128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("t", FORMATS, ids=lambda t: t.name)
def test_planes_gpu(t):
    # bf16 on the GPU. A row's bits do not depend on the rows beside it (a verify of k+1 rows = k+1
    # one-row steps, what speculation's exactness rests on). Against the dense bf16 GEMV: the tiles
    # hold the same values, but Triton's dot over a tile built in registers may order a K step's
    # products differently from one over a loaded tile (H200, session 27: 1 output in ~8000 one
    # bf16 ulp apart), so the check there is closeness, not bits.
    n, k = 512, 2048
    raw = torch.from_numpy(random_blocks(t, n, k, 8)).cuda()
    pm = PlaneMatrix.from_gguf(raw, t, (n, k))
    dense = pm.dequantize().to(torch.bfloat16)
    x = torch.randn(16, k, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).cuda()
    for tiles in (FusedTiles(), FusedTiles(bk_small=64, bk_tall=128, stages_tall=2)):
        y = gemv(FusedWeight(pm), x, torch.bfloat16, tiles)
        for r in (0, 5, 15):
            assert torch.equal(gemv(FusedWeight(pm), x[r:r + 1], torch.bfloat16, tiles)[0], y[r])
        assert torch.equal(gemv(FusedWeight(pm), x[:4], torch.bfloat16, tiles)[:4], y[:4])
        yd = gemv(dense, x, torch.bfloat16, tiles).float()
        d = (y.float() - yd).abs()
        assert int((d > 0).sum()) <= d.numel() // 1000
        assert bool((d <= yd.abs() * 2**-7 + 1e-6).all())  # at most a bf16 ulp or so
