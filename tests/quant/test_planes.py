"""The fused GEMV on the file's own bytes (quant/planes.py, models/weight_tiles.py).

For every format: the planes turn back into the same file bytes; the GEMV's weights are the
loader's values exactly (one-hot input rows pick single columns, a sum with one term: exact on
any device); its result matches gguf's dequantization times the input in float64; and a row's
bits do not depend on the rows beside it. On the CPU (Triton's interpreter, conftest.py, fp32)
the plane GEMV gives the dense GEMV's bits; on the GPU (bf16) its dot may round a rare output
differently (weight_tiles.py), so there it is compared within roundings. Random block bytes with
finite scales are valid blocks of every format, so no quantizer is needed.
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

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def spec(hidden: int) -> BlockSpec:
    return BlockSpec(hidden=hidden, n_heads=2, n_kv_heads=1, head_dim=32, ffn=64, eps=1e-6, query_scale=0.125,
                     qk_norm=False, sandwich_norms=False, activation="gelu_tanh", qkv_bias=False)


def gemv(w, x, dtype, tiles=FusedTiles(), gated=False):
    plan = LayerPlan(spec(x.shape[1]), tiles, dtype, x.device)
    n = w.shape[0] // 2 if gated else w.shape[0]
    y = torch.zeros(16, n, dtype=dtype, device=x.device)
    return plan.gemv(x, w, y, gated=gated).clone()


def one_hot_columns(fw: FusedWeight, dense: torch.Tensor, cols: list[int], dtype, tiles=FusedTiles()):
    """y = e_k . W^T is column k of W: the GEMV's weights, compared exactly, 16 columns a call."""
    for i in range(0, len(cols), 16):
        ks = cols[i:i + 16]
        x = torch.zeros(len(ks), dense.shape[1], dtype=dtype, device=dense.device)
        x[torch.arange(len(ks)), torch.tensor(ks)] = 1
        y = gemv(fw, x, dtype, tiles)[:len(ks)]
        assert torch.equal(y, dense[:, ks].T.to(dtype)), ks


def check_rows_alone(fw, x, dtype, tiles=FusedTiles()):
    y = gemv(fw, x, dtype, tiles)
    for r in sorted({0, x.shape[0] // 2, x.shape[0] - 1}):
        assert torch.equal(gemv(fw, x[r:r + 1], dtype, tiles)[0], y[r])
    return y


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
def test_plane_gemv_values_order_and_rows(t):
    # 40 output rows: not a multiple of the 16-row tile; K = 512: several K steps of every chunk
    n, k = 40, 512
    raw = torch.from_numpy(random_blocks(t, n, k, 2))
    pm = PlaneMatrix.from_gguf(raw, t, (n, k))
    fw, dense = FusedWeight(pm), pm.dequantize()
    # every position in a 256-element super-block, once, spread over the K steps
    one_hot_columns(fw, dense, [(37 * i) % 256 + 256 * (i % 2) for i in range(32)], torch.float32)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(3))
    y = check_rows_alone(fw, x, torch.float32)[:3]
    assert torch.equal(y, gemv(dense, x, torch.float32)[:3])
    want = x.double() @ torch.from_numpy(gguf_dequantize(raw.numpy().reshape(n, -1), t).reshape(n, k)).double().T
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("ta,tb", [(T.Q5_0, T.Q8_0), (T.Q4_K, T.Q6_K)], ids=lambda t: t.name)
def test_two_segments_and_gated(ta, tb):
    # q|k in one format and v in another (Q4_K_M's mix), and gate|up over the same two segments
    k = 256
    pa = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(ta, 32, k, 4)), ta, (32, k))
    pb = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(tb, 32, k, 5)), tb, (32, k))
    fw = FusedWeight(pa, pb)
    dense = fw.dense(torch.float32)
    tiles = FusedTiles(bn_small=16, bn_gated=16)
    one_hot_columns(fw, dense, [0, 17, 40, 63, 64, 100, 130, 255], torch.float32, tiles)
    x = 0.1 * torch.randn(2, k, generator=torch.Generator().manual_seed(6))
    assert torch.equal(gemv(fw, x, torch.float32, tiles), gemv(dense, x, torch.float32, tiles))
    yq = gemv(fw, x, torch.float32, tiles, gated=True)
    yd = gemv(dense, x, torch.float32, tiles, gated=True)
    assert torch.equal(yq, yd) and yq[:2].abs().sum() > 0


def test_k_step_divides_k():
    pm = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(T.Q8_0, 16, 640, 7)), T.Q8_0, (16, 640))
    assert weight_args(FusedWeight(pm), 16, 512)[1] == 128  # 640 = 5 x 128
    with pytest.raises(AssertionError, match="straddles"):
        weight_args(FusedWeight(pm, pm), 32, 128)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("t", FORMATS, ids=lambda t: t.name)
def test_planes_gpu(t):
    # bf16 on the GPU, at the default tiles and smaller K steps: the loader's values exactly, rows
    # independent, and within bf16 roundings of the dense GEMV (1 output in ~8000 one ulp apart on an
    # H200: bench/RESULTS.md session 27)
    n, k = 512, 2048
    raw = torch.from_numpy(random_blocks(t, n, k, 8)).cuda()
    pm = PlaneMatrix.from_gguf(raw, t, (n, k))
    fw, dense = FusedWeight(pm), pm.dequantize().to(torch.bfloat16)
    x = torch.randn(16, k, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).cuda()
    for tiles in (FusedTiles(), FusedTiles(bk_small=64, bk_tall=128, stages_tall=2)):
        one_hot_columns(fw, dense, [(37 * i) % 256 + 256 * (i % 8) for i in range(64)], torch.bfloat16, tiles)
        y = check_rows_alone(fw, x, torch.bfloat16, tiles).float()
        yd = gemv(dense, x, torch.bfloat16, tiles).float()
        assert torch.allclose(y, yd, rtol=2**-6, atol=2**-6 * yd.abs().max().item())
