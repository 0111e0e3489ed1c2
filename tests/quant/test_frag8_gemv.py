"""The int8 frag GEMV (quant/kernels/frag8_gemv.py): through its launch, every row count, whole and split over
K (on CUDA the split partials are summed inside the kernel by the last split to arrive: the result
must be the same bits on every call, the counters back at zero after each). frag8x, which makes x's
words inside the GEMV, must make x_frag8's words bit for bit, and so the same outputs."""

from __future__ import annotations

import pytest
import torch

from mtp_turbo.quant.kernels.frag8 import counters
from mtp_turbo.quant.gemv import TileConfig
from mtp_turbo.quant.repack import PackedWeight

pytest.importorskip("triton")
from mtp_turbo.quant.kernels import frag8_gemv  # noqa: E402


def _case(fmt: str, n: int, k: int, m: int, device: str):
    g = torch.Generator().manual_seed(n + k + m)
    w = PackedWeight.from_dense(torch.randn(n, k, generator=g), fmt).to(device)
    x = torch.randn(m, k, generator=g).to(device)
    ref_w = w.dequantize().double().cpu()
    ref = x.double().cpu() @ ref_w.t()
    bound = 1e-6 * (x.double().cpu().abs() @ ref_w.abs().t())
    return w, x, ref, bound


@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
@pytest.mark.parametrize("kernel", ["frag8", "frag8x"])
def test_launch_cpu_emulation(fmt, kernel):
    """CPU tensors: x_frag8 interpreted, then the exact emulation; split tiles give the same values."""
    for m in (1, 3):
        w, x, ref, bound = _case(fmt, 37, 224, m, "cpu")
        for split in (1, 4):
            out = torch.full((m, 37), float("nan"))
            frag8_gemv.launch(x, w, TileConfig(kernel, 32, 64, 4, 2, split), out)
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
                frag8_gemv.launch(x, w, tile, out)
                first = out.clone()
                assert torch.all((first.double().cpu() - ref).abs() <= bound), (n, k, m, split)
                for _ in range(20):
                    frag8_gemv.launch(x, w, tile, out)
                assert torch.equal(out, first), (n, k, m, split)
                assert not counters(w).any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
def test_x_inside_makes_the_same_words_and_outputs(fmt):
    """frag8x (x's words made by the GEMV's programs; 4 and 8 warps, whole and split, one and two chunks
    ahead) against frag8 (x_frag8 first): XF and the used XE words equal, the outputs the same bits;
    bf16 x too; a K tail and rows of very different sizes."""
    # (warps, stages, split, x dtype); the second shape (K ending inside a chunk) one tile:
    # each combination of constexprs is a compile
    for n, k, tiles in ((300, 2080, ((4, 2, 1, torch.float32), (4, 3, 8, torch.float32), (8, 2, 32, torch.bfloat16))),
                        (1040, 672, ((4, 2, 16, torch.float32),))):
        for m in (1, 2, 3, 4):
            w, x, ref, bound = _case(fmt, n, k, m, "cuda")
            x = x * torch.exp2(torch.randint(-30, 30, (m, 1), device="cuda").float())
            nc, mm = -(-k // 64), 1 if m <= 2 else 2
            for warps, stages, split, dt in tiles:
                outs, words = [], []
                for kernel in ("frag8", "frag8x"):
                    xf = torch.full((nc, mm, 32, 4), -1, dtype=torch.int32, device="cuda")
                    xe = torch.full((nc, 4, 4), float("nan"), device="cuda")
                    out = torch.full((m, n), float("nan"), device="cuda")
                    frag8_gemv.launch(x.to(dt), w, TileConfig(kernel, 32, 64, warps, stages, split), out, scratch=(xf, xe))
                    outs.append(out)
                    words.append((xf, xe[..., :mm]))
                assert torch.equal(words[0][0], words[1][0]), (n, k, m, split)
                assert torch.equal(words[0][1], words[1][1]), (n, k, m, split)
                assert torch.equal(outs[0], outs[1]), (n, k, m, split)
                assert not counters(w).any()
