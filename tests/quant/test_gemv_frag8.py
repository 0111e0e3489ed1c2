"""The int8 frag GEMV (quant/gemv_frag8.py): through its launch, every row count, whole and split over
K (on CUDA the split partials are summed inside the kernel by the last split to arrive: the result
must be the same bits on every call, the counters back at zero after each)."""

from __future__ import annotations

import pytest
import torch

from mtp_turbo.quant.frag8 import counters
from mtp_turbo.quant.gemv import TileConfig
from mtp_turbo.quant.repack import PackedWeight

pytest.importorskip("triton")
from mtp_turbo.quant import gemv_frag8  # noqa: E402


def _case(fmt: str, n: int, k: int, m: int, device: str):
    g = torch.Generator().manual_seed(n + k + m)
    w = PackedWeight.from_dense(torch.randn(n, k, generator=g), fmt).to(device)
    x = torch.randn(m, k, generator=g).to(device)
    ref_w = w.dequantize().double().cpu()
    ref = x.double().cpu() @ ref_w.t()
    bound = 1e-6 * (x.double().cpu().abs() @ ref_w.abs().t())
    return w, x, ref, bound


@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
def test_launch_cpu_emulation(fmt):
    """CPU tensors: x_frag8 interpreted, then the exact emulation; split tiles give the same values."""
    for m in (1, 3):
        w, x, ref, bound = _case(fmt, 37, 224, m, "cpu")
        for split in (1, 4):
            out = torch.full((m, 37), float("nan"))
            gemv_frag8.launch(x, w, TileConfig("frag8", 32, 64, 4, 2, split), out)
            assert torch.all((out.double() - ref).abs() <= bound)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
def test_fused_split_sum_is_exact_and_repeatable(fmt):
    """Split into 2..32 parts (more parts than K has chunks too: empty parts), 1-4 rows, N with a
    partial last program: within fp32 rounding, the same bits on 20 calls, the counters zero after."""
    for n, k in ((300, 2080), (1040, 640)):
        for m in (1, 2, 3, 4):
            w, x, ref, bound = _case(fmt, n, k, m, "cuda")
            for split in (2, 8, 32):
                tile = TileConfig("frag8", 32, 64, 4, 2, split)
                out = torch.full((m, n), float("nan"), device="cuda")
                gemv_frag8.launch(x, w, tile, out)
                first = out.clone()
                assert torch.all((first.double().cpu() - ref).abs() <= bound), (n, k, m, split)
                for _ in range(20):
                    gemv_frag8.launch(x, w, tile, out)
                assert torch.equal(out, first), (n, k, m, split)
                assert not counters(w).any()
