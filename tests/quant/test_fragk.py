"""The K-quant int8 fragment layout (quant/kernels/fragk.py) and the frag8 GEMV on it: the stored words
decode to the file's exact values (k_fields, checked against gguf's dequantization), and the GEMV's
launch (CPU: x_frag8 interpreted, then the exact emulation; CUDA: the Gluon kernel with fragk_asm)
is within fp32 rounding of x @ those values, a row's outputs the same bits whatever rows are beside it."""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T

from mtp_turbo.quant.dequant import k_fields
from mtp_turbo.quant.gemv import TileConfig
from mtp_turbo.quant.kernels.fragk import FragKWeight

sys.path.insert(0, str(Path(__file__).parent))
from blocks import random_blocks  # noqa: E402

TYPES = [T.Q4_K, T.Q5_K, T.Q6_K]


def exact_values(raw: torch.Tensor, t: T, shape) -> torch.Tensor:
    """float64 [N, K]: the file's values from its integer fields, in exact arithmetic."""
    f = k_fields(raw, t, shape)
    if t in (T.Q4_K, T.Q5_K):
        d = (f["d"].double().repeat_interleave(8, 1) * f["sc"].double()).repeat_interleave(32, 1)
        m = (f["dmin"].double().repeat_interleave(8, 1) * f["m"].double()).repeat_interleave(32, 1)
        return d * f["q"].double() - m
    d = (f["d"].double().repeat_interleave(16, 1) * f["sc"].double()).repeat_interleave(16, 1)
    return d * (f["q"].double() - 32)


@pytest.mark.parametrize("t", TYPES)
def test_fields_are_the_file_values(t):
    """k_fields' exact values round to gguf's float32 dequantization (which rounds each product)."""
    n, k = 7, 512
    raw = random_blocks(t, n, k, seed=3, scale=0.05)
    ref = gguf.quants.dequantize(raw, t).reshape(n, k).astype(np.float64)
    v = exact_values(torch.from_numpy(raw), t, (n, k)).numpy()
    assert np.all(np.abs(v - ref) <= np.abs(ref) * 2.0 ** -23 + 1e-30)
    assert np.any(v != 0)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("n", [16, 37])
def test_layout_decodes_to_the_file_values(t, n):
    """The stored words, decoded as the PTX reads them, are the file's values exactly (padding rows
    are zeros); every byte of the record and words takes part (a changed word changes the values)."""
    k = 768
    raw = torch.from_numpy(random_blocks(t, n, k, seed=n, scale=0.05))
    fw = FragKWeight.from_gguf(raw, t, (n, k))
    want = exact_values(raw, t, (n, k))
    assert torch.equal(fw.dequantize(), want)
    assert fw.tiles == (-(-n // 16), k // 64)
    qf = fw.qf.clone()
    qf[0, 1, 5, 2] ^= 0x10  # one code's bit
    assert not torch.equal(FragKWeight(fw.fmt, fw.shape, qf, fw.sf, fw.df, fw.hf).dequantize(), want)
    df = fw.df.clone()
    df[0, 0, 3, 0] ^= 1 << 3  # a super-block scale's mantissa bit
    assert not torch.equal(FragKWeight(fw.fmt, fw.shape, fw.qf, fw.sf, df, fw.hf).dequantize(), want)
    if fw.hf is not None:
        hf = fw.hf.clone()
        hf.view(-1)[2 * hf[0, 0].numel() + 9 * hf.shape[-1]] ^= 1 << 8  # tile 0, chunk 2, lane 9: a high bit
        assert not torch.equal(FragKWeight(fw.fmt, fw.shape, fw.qf, fw.sf, fw.df, hf).dequantize(), want)


def test_resident_bytes():
    """The layout's size against the file's (n a multiple of 16): Q4_K 4.625 bits a weight (the
    file 4.5), Q5_K 5.625 (the file 5.5), Q6_K 6.5625 (the file's)."""
    n, k = 64, 1024
    for t, bits in ((T.Q4_K, 4.625), (T.Q5_K, 5.625), (T.Q6_K, 6.5625)):
        raw = torch.from_numpy(random_blocks(t, n, k, seed=1))
        fw = FragKWeight.from_gguf(raw, t, (n, k))
        assert fw.nbytes * 8 / (n * k) == bits


pytest.importorskip("triton")
from mtp_turbo.quant.kernels import frag8_gemv  # noqa: E402


def _case(t, n, k, m, device):
    raw = torch.from_numpy(random_blocks(t, n, k, seed=n + m, scale=0.05))
    fw = FragKWeight.from_gguf(raw.to(device), t, (n, k))
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g)
    w = exact_values(raw, t, (n, k))
    ref = x.double() @ w.t()
    f = k_fields(raw, t, (n, k))
    mag = w.abs()
    if t in (T.Q4_K, T.Q5_K):  # the offsets' share is summed apart
        mag = mag + 2 * (f["dmin"].double().repeat_interleave(8, 1) * f["m"].double()).abs().repeat_interleave(32, 1)
    return fw, x.to(device), ref, 1e-6 * (x.double().abs() @ mag.t())


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("kernel", ["frag8", "frag8x"])
def test_launch_cpu_emulation(t, kernel):
    """CPU: within fp32 rounding of the exact product, whole and split; one row alone equals the
    same row among three."""
    for m in (1, 3):
        fw, x, ref, bound = _case(t, 37, 512, m, "cpu")
        for split in (1, 4):
            out = torch.full((m, 37), float("nan"))
            frag8_gemv.launch(x, fw, TileConfig(kernel, 32, 64, 4, 2, split), out)
            assert torch.all((out.double() - ref).abs() <= bound)
            if m == 3:
                one = torch.full((1, 37), float("nan"))
                frag8_gemv.launch(x[1:2].contiguous(), fw, TileConfig(kernel, 32, 64, 4, 2, split), one)
                assert torch.equal(one[0], out[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("t", TYPES)
def test_gpu_kernel_is_exact_repeatable_and_row_invariant(t):
    """The Gluon kernel with fragk_asm: 1-4 rows, whole and split into 2..16 parts, frag8 and frag8x:
    within fp32 rounding of the exact product, the same bits on 10 calls, a row's bits the same
    whatever rows are beside it and whichever of frag8 / frag8x made x's words (FragMatrix picks by
    row count), the counters back at zero."""
    for n, k in ((300, 2048), (1040, 512)):
        fw4, x4, ref4, bound4 = _case(t, n, k, 4, "cuda")
        seen = {}
        for kernel, split in (("frag8", 1), ("frag8x", 1), ("frag8", 8), ("frag8x", 16), ("frag8", 16)):
            tile = TileConfig(kernel, 32, 64, 4, 2, split)
            rows = {}
            for m in (1, 2, 3, 4):
                out = torch.full((m, n), float("nan"), device="cuda")
                frag8_gemv.launch(x4[:m].contiguous(), fw4, tile, out)
                first = out.clone()
                assert torch.all((first.double().cpu() - ref4[:m]).abs() <= bound4[:m]), (n, k, m, kernel, split)
                for _ in range(10):
                    frag8_gemv.launch(x4[:m].contiguous(), fw4, tile, out)
                assert torch.equal(out, first)
                assert not fw4.counters.any()
                rows[m] = first
            for m in (2, 3, 4):
                assert torch.equal(rows[m][: m - 1], rows[m - 1]), (n, k, m, kernel, split)
            if split in seen:  # x's words made inside the GEMV (frag8x) or before it: the same bits
                assert all(torch.equal(rows[m], seen[split][m]) for m in rows), (n, k, split)
            seen[split] = rows


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("t", TYPES)
def test_gpu_prefill_gemm_rows_are_the_gemv_s_bits(t):
    """CUDA: frag_gemm (x's pieces made once, splits on their own programs, summed in order) gives each
    of 70 rows the bits the decode GEMV gives it alone, whole and split, at the default and other tiles."""
    from mtp_turbo.quant.kernels import frag_gemm

    n, k, m = 300, 2048, 70
    fw, x, _, _ = _case(t, n, k, m, "cuda")
    for split in (1, 4, 16):
        one = torch.stack([_row(fw, x[i:i + 1].contiguous(), split) for i in range(m)])
        for tiles in ((None, None), (2, 16), (4, 64), (8, 32)):
            out = torch.full((m, n), float("nan"), device="cuda")
            frag_gemm.launch(x, fw, split, out, *tiles)
            assert torch.equal(out, one), (split, tiles, int((out != one).sum()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_gemv_into_a_column_slice_of_a_wider_output():
    """CUDA: a run's columns of a wider output (a FragMatrix of two formats writes out[:, r0:r1]), split
    over K, 2-4 rows: the same bits as into an output of its own (the split partials once took the
    wide output's row stride in a buffer of the run's width, and rows past the first overwrote them)."""
    from mtp_turbo.quant.kernels import frag8_gemv

    n, k = 300, 2048
    fw, x, _, _ = _case(T.Q4_K, n, k, 4, "cuda")
    for m in (2, 3, 4):
        for kernel in ("frag8", "frag8x"):
            tile = TileConfig(kernel, 32, 64, 4, 2, 8)
            own = torch.full((m, n), float("nan"), device="cuda")
            frag8_gemv.launch(x[:m].contiguous(), fw, tile, own)
            wide = torch.full((m, n + 200), float("nan"), device="cuda")
            frag8_gemv.launch(x[:m].contiguous(), fw, tile, wide[:, 100:100 + n])
            assert torch.equal(wide[:, 100:100 + n], own), (m, kernel)
            assert wide[:, :100].isnan().all() and wide[:, 100 + n:].isnan().all()


def _row(fw, x1, split):
    from mtp_turbo.quant.kernels import frag8_gemv

    out = torch.full((1, fw.shape[0]), float("nan"), device="cuda")
    frag8_gemv.launch(x1, fw, TileConfig("frag8x", 32, 64, 4, 2, split), out)
    return out[0]


@pytest.mark.parametrize("t", TYPES)
def test_a_layout_built_in_row_slices_is_the_same(t):
    """Built from slices of 32 rows (the loader uses 16384: bounded temporaries) with a short last
    slice: the same words, records and counters' size as one pass."""
    n, k = 100, 512
    raw = torch.from_numpy(random_blocks(t, n, k, seed=9, scale=0.05))
    whole = FragKWeight.from_gguf(raw, t, (n, k))
    sliced = FragKWeight.from_gguf(raw, t, (n, k), slice_rows=32)
    for a, b in ((whole.qf, sliced.qf), (whole.sf, sliced.sf), (whole.df, sliced.df), (whole.hf, sliced.hf)):
        assert (a is None and b is None) or torch.equal(a, b)
    assert sliced.counters.shape == whole.counters.shape
    assert torch.equal(sliced.row_values(torch.tensor([0, 99, 33, 16])),
                       exact_values(raw, t, (n, k))[[0, 99, 33, 16]].float())


def test_the_default_models_matrices_in_the_layouts(model_reader):
    """Every 2-D tensor of the default model (Gemma-3-270M Q4_K_M: Q8_0, Q5_0, Q4_K, Q6_K) that has a
    layout, as FragMatrix: its values are gguf's dequantization bit for bit, and the GEMV (the launch's
    CPU emulation) is within fp32 rounding of x times them. The embedding: its first 4096 rows."""
    from mtp_turbo.quant.frag_matrix import FRAG_TYPES, frag_matrix

    seen = set()
    g = torch.Generator().manual_seed(0)
    for t in model_reader.tensors:
        if len(t.shape) != 2 or int(t.tensor_type) not in FRAG_TYPES:
            continue
        n, k = (int(s) for s in reversed(t.shape.tolist()))
        data = np.asarray(t.data).reshape(n, -1)[:4096]
        n = data.shape[0]
        part = np.array(data)
        ref = gguf.quants.dequantize(part, t.tensor_type).reshape(n, k)
        fm = frag_matrix([(torch.from_numpy(part.view(np.uint8).reshape(-1)), t.tensor_type, (n, k))])
        assert fm is not None and np.array_equal(fm.dequantize().numpy().view(np.uint32),
                                                 ref.astype(np.float32).view(np.uint32)), t.name
        if t.tensor_type not in seen or t.name.startswith("token_embd"):  # one GEMV a type (the emulation is float64)
            x = torch.randn(2, k, generator=g)
            out = torch.full((2, n), float("nan"))
            fm.gemv(x, out)
            w = torch.from_numpy(ref).double()
            mag = w.abs()
            if t.tensor_type == T.Q4_K:  # the offsets' share is summed apart: its terms bound the rounding too
                f = k_fields(torch.from_numpy(part.view(np.uint8).reshape(-1)), t.tensor_type, (n, k))
                mag = mag + 2 * (f["dmin"].double().repeat_interleave(8, 1) * f["m"].double()).abs().repeat_interleave(32, 1)
            bound = 1e-6 * (x.double().abs() @ mag.t())
            assert torch.all((out.double() - x.double() @ w.t()).abs() <= bound), t.name
        seen.add(t.tensor_type)
    assert {T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K} <= seen
