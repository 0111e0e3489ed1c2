"""GEMV over packed weights: torch fallback and (on CUDA / under Triton's interpreter) the kernels,
against a float64 reference built from gguf's own dequantizer of the same bytes."""

from __future__ import annotations

import gguf.quants
import numpy as np
import pytest
import torch

from mtp_turbo.errors import ConfigError
from mtp_turbo.quant.gemv import (
    DEFAULT_TILES, KERNELS, SUPPORTED_TILES, TileConfig, default_tile, gemv, parse_tile, tile_class,
)
from mtp_turbo.quant.repack import BLOCK_FORMATS, GGML_TYPES, PackedWeight, qh_bit, quantize_bytes

SHAPES = [(37, 96), (5, 32), (129, 640)]  # odd N_out, K a multiple of 32 (incl. one block)


def _weights(n: int, k: int, fmt: str, seed: int):
    """(PackedWeight, float64 dequantized reference [n, k], raw bytes) for a random matrix."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).numpy()
    w[0, :32] *= 50.0  # one block with a large scale, to exercise the fp16 scale range
    if fmt in BLOCK_FORMATS:
        raw = quantize_bytes(w, fmt)
        ref = gguf.quants.dequantize(raw, GGML_TYPES[fmt]).astype(np.float64)
    else:
        t = torch.from_numpy(w).to(torch.bfloat16 if fmt == "bf16" else torch.float32)
        raw = t.view(torch.uint8).numpy()
        ref = t.double().numpy()
    return PackedWeight.from_gguf_bytes(raw, fmt, (n, k)), ref, raw


def _check(y: torch.Tensor, x: torch.Tensor, ref_w: np.ndarray, tol: float = 2e-5) -> None:
    """Max error relative to the output's max magnitude; with a small tol (kernels), elementwise
    against the fp32-rounding bound of a K-term sum: |err| <= tol * sum_k |x_k w_k|."""
    xd = x.double().cpu().numpy()
    ref = xd @ ref_w.T
    got = y.double().cpu().numpy()
    assert np.isfinite(got).all()
    if tol < 1e-5:
        bound = tol * (np.abs(xd) @ np.abs(ref_w).T) + 1e-30
        assert (np.abs(got - ref) <= bound).all(), (np.abs(got - ref) / bound).max()
        return
    scale = np.abs(ref).max() + 1e-12
    assert np.abs(got - ref).max() / scale < tol, np.abs(got - ref).max() / scale


@pytest.mark.parametrize("fmt", BLOCK_FORMATS + ("bf16", "f32"))
@pytest.mark.parametrize("shape", SHAPES)
def test_fallback_matches_float64_reference(fmt, shape):
    n, k = shape
    pw, ref_w, _ = _weights(n, k, fmt, seed=n * 7 + k)
    g = torch.Generator().manual_seed(1)
    for m in (1, 2, 3, 4):
        for dt in (torch.float32, torch.bfloat16):
            x = torch.randn(m, k, generator=g).to(dt)
            out = torch.full((m, n), float("nan"))
            y = gemv(x, pw, out=out)
            assert y.data_ptr() == out.data_ptr() and y.dtype == torch.float32
            _check(y, x, ref_w)
            _check(gemv(x, pw), x, ref_w)  # fresh output buffer


@pytest.mark.parametrize("fmt", BLOCK_FORMATS + ("bf16", "f32"))
def test_repack_round_trip_and_layout(fmt):
    n, k = 7, 96
    pw, ref_w, raw = _weights(n, k, fmt, seed=3)
    back = pw.to_gguf_bytes()
    assert back.dtype == np.uint8
    assert back.tobytes() == np.ascontiguousarray(raw).tobytes()
    assert np.array_equal(pw.dequantize().double().numpy(), ref_w)  # exact: fp16 scale x int
    nb = k // 32  # 3: odd, so the nibble formats' last pair has an empty high half (16 bytes)
    row_bytes = {"q8_0": nb * 34, "q5_0": nb * 6 + 64, "q4_0": nb * 2 + 64, "bf16": 2 * k, "f32": 4 * k}[fmt]
    assert pw.nbytes == n * row_bytes
    assert pw.shape == (n, k) and pw.fmt == fmt
    if fmt in BLOCK_FORMATS:
        assert pw.scales.dtype == torch.float16 and pw.scales.shape == (n, k // 32)
        assert pw.qs.shape == ((n, k) if fmt == "q8_0" else (n, (nb + 1) // 2 * 32))
        if fmt != "q8_0":  # block pairs: byte c of pair i = element c of block 2i (low), of 2i+1 (high)
            ggml = raw.reshape(n, nb, -1)[:, :, -16:]  # ggml's in-block order: byte j = elements j, j+16
            nib = np.concatenate([ggml & 15, ggml >> 4], axis=2)  # [n, nb, 32] element order
            qs = pw.qs.numpy().reshape(n, -1, 32)
            for b in range(nb):
                assert np.array_equal((qs[:, b // 2] >> (4 * (b % 2))) & 15, nib[:, b])
            assert not (qs[:, nb // 2] >> 4).any()  # the empty half
        assert (pw.qh is not None) == (fmt == "q5_0")
        if fmt == "q5_0":  # element j's 5th bit: ggml's bit j, stored at bit qh_bit(j)
            ggml_qh = np.ascontiguousarray(raw.reshape(n, nb, -1)[:, :, 2:6]).view("<u4")[..., 0].astype(np.int64)
            stored = pw.qh.numpy().astype(np.int64) & 0xFFFFFFFF
            for j in range(32):
                assert np.array_equal((stored >> qh_bit(j)) & 1, (ggml_qh >> j) & 1)
            assert (stored != ggml_qh).any()  # the permutation is not the identity on this data
        # Each row's quant bytes start 16-byte aligned relative to the array (wide loads).
        assert (pw.qs.stride(0) * pw.qs.element_size()) % 16 == 0
    moved = pw.to("cpu")
    assert moved.to_gguf_bytes().tobytes() == back.tobytes()


def test_from_gguf_bytes_rejects_wrong_sizes():
    raw = quantize_bytes(np.ones((4, 64), np.float32), "q4_0")
    with pytest.raises(ConfigError):
        PackedWeight.from_gguf_bytes(raw[:, :-1], "q4_0", (4, 64))
    with pytest.raises(ConfigError):
        PackedWeight.from_gguf_bytes(raw, "q4_k", (4, 64))


def test_from_dense_quantizes():
    w = torch.randn(33, 64, generator=torch.Generator().manual_seed(5))
    for fmt in BLOCK_FORMATS:
        pw = PackedWeight.from_dense(w, fmt)
        rel = (pw.dequantize() - w).norm() / w.norm()
        assert 0 < rel < {"q8_0": 0.01, "q5_0": 0.06, "q4_0": 0.12}[fmt]


def test_parse_tile():
    for t in SUPPORTED_TILES:
        assert parse_tile(str(t)) == t
        assert t.BLOCK_K % 32 == 0 and t.kernel in KERNELS
        assert t.BLOCK_N >= 16  # the smallest tl.dot
    assert {t.kernel for t in SUPPORTED_TILES} == set(KERNELS)
    assert KERNELS == ("dot_bf16x3", "dot_i8w", "frag8", "frag8x")
    assert parse_tile(" dot_bf16x3, 32, 64, 4, 3") == TileConfig("dot_bf16x3", 32, 64, 4, 3)
    assert parse_tile("dot_i8w,64,128,4,2,4") == TileConfig("dot_i8w", 64, 128, 4, 2, split_k=4)
    assert parse_tile("frag8x,32,64,4,2,16") == TileConfig("frag8x", 32, 64, 4, 2, 16)
    for bad in ("32,64,4,3", "dot_bf16x3,32,64,4", "dot_bf16x3,32,100,4,3", "dot_bf16x3,3,64,4,3", "a,b,c,d,e", "",
                "dot_bf16x3,32,64,4,3,2", "dot_i8w,64,128,4,2,3", "dot_bf16x3,1024,512,8,2", "dot_bf16x3,4,256,2,2",
                "tf32,64,64,4,3", "frag8,32,64,4,2,16,1", "frag,32,64,2,2", "dot_i8n,64,128,4,2", "reduce,8,128,2,2",
                "dot_bf16n,64,128,4,3", "dot_i8,64,128,4,3", "dot_tf32x3,32,64,4,3"):
        with pytest.raises(ConfigError) as e:
            parse_tile(bad)
        assert "dot_bf16x3,16,128,4,3" in str(e.value) and "frag8x,32,64,8,3,32" in str(e.value)  # the supported tiles


def test_default_tiles_are_supported_and_classes():
    assert set(DEFAULT_TILES.values()) <= set(SUPPORTED_TILES)
    assert tile_class(262144, 640) == "head"
    assert tile_class(32768, 640) == "head"
    assert tile_class(8192, 8192) == "large"
    assert tile_class(640, 2048) == "tall" and tile_class(256, 640) == "tall"
    assert tile_class(2048, 640) == "wide" and tile_class(1024, 640) == "wide"
    # the head and 8192 x 8192: frag8 (x_frag8 first) at every row count; drafter shapes: frag8x split 16
    for fmt in ("q4_0", "q5_0", "q8_0"):
        for m in range(1, 5):
            assert default_tile(262144, 640, m, fmt).kernel == "frag8"
            assert default_tile(8192, 8192, m, fmt).kernel == "frag8" and default_tile(8192, 8192, m, fmt).split_k > 1
            for n, k in ((640, 2048), (1024, 640), (256, 640), (2048, 640)):
                assert default_tile(n, k, m, fmt) == TileConfig("frag8x", 32, 64, 4, 2, 16)
    from mtp_turbo.quant.gemv import MEASURED_TILES

    assert all(len(ts) == 4 for ts in MEASURED_TILES.values())
    assert {t for ts in MEASURED_TILES.values() for t in ts if t} <= set(SUPPORTED_TILES)


def test_hopper_only_kernels_fall_back_or_are_refused():
    """Before compute capability 9.0 the defaults never pick a Gluon / griddepcontrol kernel (the
    class's plain Triton tile instead); a forced one is refused with a message naming the need."""
    from mtp_turbo.quant.gemv import HOPPER_KERNELS, check_tile
    from mtp_turbo.quant.kernels import frag8_gemv, triton_gemv

    # the closed lists agree with the modules that launch them (kernels/ imports neither at import time)
    assert KERNELS == triton_gemv.KERNELS + frag8_gemv.KERNELS and HOPPER_KERNELS == frag8_gemv.KERNELS

    for n, k in ((262144, 640), (8192, 8192), (640, 2048), (2048, 640)):
        for fmt in ("q4_0", "q5_0", "q8_0"):
            for m in range(1, 5):
                old = default_tile(n, k, m, fmt, capability=(8, 6))
                assert old.kernel not in HOPPER_KERNELS and old == DEFAULT_TILES[tile_class(n, k)]
                assert default_tile(n, k, m, fmt, capability=(9, 0)) == default_tile(n, k, m, fmt)
    frag8x = TileConfig("frag8x", 32, 64, 4, 2, 16)
    assert check_tile(frag8x, (9, 0)) == frag8x and check_tile(frag8x, None) == frag8x
    with pytest.raises(ConfigError, match="Hopper.*8.9"):
        check_tile(frag8x, (8, 9))
    assert check_tile(DEFAULT_TILES["wide"], (8, 9)) == DEFAULT_TILES["wide"]


def test_gemv_rejects_bad_inputs():
    pw, _, _ = _weights(8, 64, "q8_0", seed=0)
    with pytest.raises(AssertionError):
        gemv(torch.zeros(5, 64), pw)  # more than 4 rows
    with pytest.raises(AssertionError):
        gemv(torch.zeros(1, 32), pw)  # wrong K


# ----------------------------------------------------------------------------- Triton kernels
def _has_triton() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _kernel_device() -> str:
    """Where the kernels run here: CUDA when present, else CPU tensors in Triton's interpreter."""
    from mtp_turbo.quant import kernels

    if torch.cuda.is_available() and not kernels.interpreting():
        return "cuda"
    assert kernels.interpreting(), "no CUDA and no interpreter: tests/conftest.py sets TRITON_INTERPRET=1"
    return "cpu"


# (N, K, tile): N not a multiple of BLOCK_N (and one N below it), K a multiple of 32 but not of
# BLOCK_K, one K below BLOCK_K; one dot-sized tile per kernel, so each variant covers every tail
_ODD = [(37, 96, 16, 64), (5, 160, 16, 128), (19, 64, 16, 32)]  # (N, K, BLOCK_N, BLOCK_K): K tails, odd nb, 1-4 blocks a step


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_kernel_matches_float64(kernel, fmt):
    """Each kernel variant (in Triton's interpreter without CUDA) == dequantize-then-matmul in
    float64 at fp32 rounding, for 1-4 rows, odd sizes, into a NaN-poisoned output."""
    from mtp_turbo.quant import kernels

    dev = _kernel_device()
    g = torch.Generator().manual_seed(11)
    for n, k, bn, bk in _ODD:
        pw, ref_w, _ = _weights(n, k, fmt, seed=n + k)
        pw = pw.to(dev)
        bk = {"dot_i8w": 128, "frag8": 64, "frag8x": 64}.get(kernel, bk)  # a line / a chunk a step
        bn = 32 if kernel in ("frag8", "frag8x") else bn  # two row tiles a warp
        tile = TileConfig(kernel, bn, bk, 4, 2)
        for m in (1, 2, 3, 4):
            for dt in (torch.float32, torch.bfloat16) if m == 4 else (torch.float32,):
                x = torch.randn(m, k, generator=g).to(dt).to(dev)
                out = torch.full((m, n), float("nan"), device=dev)
                kernels.gemv_packed(x, pw, tile, out)
                _check(out, x, ref_w, tol=1e-6)
    # through the dispatcher, forced onto the kernel (the default tile of this shape's class)
    pw, ref_w, _ = _weights(40, 64, fmt, seed=4)
    x = torch.randn(3, 64, generator=g).to(dev)
    _check(gemv(x, pw.to(dev), backend="triton"), x, ref_w, tol=1e-6)


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_dot_i8w_several_lines_and_split_k(fmt):
    """dot_i8w over several lines and a K tail (23 blocks: odd, so the last pair has an empty half;
    6 q8_0 lines, 3 nibble lines), whole and split over K into 2, 3 and 8 parts (uneven: the last
    part is shorter; 8: more parts than lines), N = 21 rows (the last program's tile runs past N).
    At fp32 rounding; the nibble path's low/high tiles and offset term only cancel out if their x
    columns line up."""
    from mtp_turbo.quant import kernels

    dev = _kernel_device()
    g = torch.Generator().manual_seed(7)
    n, k = 21, 32 * 23
    pw, ref_w, _ = _weights(n, k, fmt, seed=k)
    pw = pw.to(dev)
    for split in (1, 2, 3, 8):
        for m in (1, 2, 3):
            x = torch.randn(m, k, generator=g).to(dev)
            out = torch.full((m, n), float("nan"), device=dev)
            kernels.gemv_packed(x, pw, TileConfig("dot_i8w", 16, 128, 4, 2, split), out)
            _check(out, x, ref_w, tol=1e-6)


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
def test_bf16_split_is_exact():
    """dot_bf16x3's x operand: rows 4p+m are bf16-exact pieces p of row m, summing to x exactly,
    zero past M (the property that makes the bf16 dot fp32-accurate)."""
    import triton
    import triton.language as tl

    from mtp_turbo.quant.kernels.triton_gemv import _x_rows

    @triton.jit
    def split(X, Y, K, M: tl.constexpr):
        r = tl.arange(0, 16)
        c = tl.arange(0, 32)
        tl.store(Y + r[:, None] * 32 + c[None, :], _x_rows(X, 32, c, K, M))

    dev = _kernel_device()
    x = (torch.randn(4, 32, generator=torch.Generator().manual_seed(2)) * 100).to(dev)
    y = torch.full((16, 32), float("nan"), device=dev)
    globals()["_x_rows"] = _x_rows  # the interpreter resolves jit callees in the caller's globals
    split[(1,)](x, y, 32, M=3)
    y, x = y.cpu(), x.cpu()
    assert torch.equal(y.bfloat16().float(), y)  # every piece is a bf16 value
    assert torch.equal(y[0:3] + y[4:7] + y[8:11], x[:3])  # hi + mid + lo == x exactly
    assert (y[4:7] != 0).any() and (y[8:11] != 0).any()  # the pieces carry the low bits
    assert not y[[3, 7, 11, 12, 13, 14, 15]].any()  # row 3 (>= M) and rows 12..15 are zero


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernels_on_cuda():
    """Every supported tile on CUDA (one compile each per format: every tile on the 640-wide shape,
    a split-K tile of each splitting kernel there too, each kernel's default tile for a 1024 x 640
    matrix on the odd ones), and the dispatcher's defaults on a head-sized and a large matrix."""
    from mtp_turbo.quant import kernels

    assert kernels.available()
    wide_defaults = [TileConfig("dot_bf16x3", 32, 64, 4, 3), TileConfig("dot_i8w", 32, 128, 4, 2),
                     TileConfig("frag8", 32, 64, 4, 2, 16), TileConfig("frag8x", 32, 64, 4, 2, 16)]
    g = torch.Generator().manual_seed(11)
    for fmt in BLOCK_FORMATS:
        for n, k in SHAPES:
            pw, ref_w, _ = _weights(n, k, fmt, seed=n + k)
            pw = pw.to("cuda")
            # split-K tiles run the same compiled kernels with other grids: one of each kernel here
            whole = [t for t in SUPPORTED_TILES if t.split_k == 1]
            split = [next(t for t in SUPPORTED_TILES if t.kernel == kn and t.split_k > 1)
                     for kn in ("dot_i8w", "frag8", "frag8x")]
            tiles = whole + split if k == 640 else wide_defaults
            for tile in tiles:
                # 4 rows (the largest operands) on every tile in q8_0; 1 row everywhere: M is a
                # compile-time constant, and compiles are what this test spends its time on
                for m in (1, 4) if (fmt == "q8_0" or k != 640) else (1,):
                    x = torch.randn(m, k, generator=g).cuda()
                    out = torch.full((m, n), float("nan"), device="cuda")
                    kernels.gemv_packed(x, pw, tile, out)
                    _check(out, x, ref_w, tol=1e-6)
        for n, k in ((40001, 640), (4099, 4096)):
            pw, ref_w, _ = _weights(n, k, fmt, seed=k)
            for m in (1, 2, 3, 4):
                x = torch.randn(m, k, device="cuda")
                _check(gemv(x, pw.to("cuda")), x, ref_w, tol=1e-6)


def test_rows_and_cat():
    a, ra, _ = _weights(9, 64, "q5_0", seed=1)
    b, rb, _ = _weights(5, 64, "q5_0", seed=2)
    c = PackedWeight.cat([a, b])
    assert c.shape == (14, 64) and c.fmt == "q5_0"
    assert np.array_equal(c.dequantize().double().numpy(), np.concatenate([ra, rb]))
    idx = torch.tensor([13, 0, 4])
    assert np.array_equal(c.rows(idx).dequantize().double().numpy(), np.concatenate([ra, rb])[[13, 0, 4]])
    with pytest.raises(AssertionError):
        PackedWeight.cat([a, _weights(5, 64, "q8_0", seed=2)[0]])


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=[
    pytest.mark.interpret, pytest.mark.skipif(not _has_triton(), reason="needs the triton package")])])
def test_packed_linear_any_rows(backend):
    """PackedLinear: any leading shape; kernel path in chunks of <= 4 rows, long inputs through
    one dequantized matmul; output dtype follows x unless asked."""
    from mtp_turbo.quant.gemv import PackedLinear

    dev = "cpu" if backend == "torch" else _kernel_device()
    pw, ref_w, _ = _weights(24, 64, "q4_0", seed=9)
    lin = PackedLinear(pw.to(dev), backend=backend, kernel_rows=8)
    assert lin.use_kernel == (backend == "triton") and lin.shape == (24, 64)
    g = torch.Generator().manual_seed(3)
    for shape in ((1, 64), (6, 64), (2, 3, 64), (11, 64)):  # 6: chunks 4 + 2; 11 > kernel_rows
        x = torch.randn(*shape, generator=g).to(dev)
        y = lin(x)
        assert y.shape == (*shape[:-1], 24) and y.dtype == torch.float32
        _check(y.reshape(-1, 24), x.reshape(-1, 64), ref_w, tol=1e-6)
    xb = torch.randn(2, 64, generator=g).to(torch.bfloat16).to(dev)
    assert lin(xb).dtype == torch.bfloat16 and lin(xb, out_dtype=torch.float32).dtype == torch.float32


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
def test_int8_pieces_reconstruct_x():
    """dot_i8w's q8_0 x operand (x_wide): per line of 4 blocks, row (b 4 + p) MP + m holds int8 piece
    p of x row m in block b's columns and zeros in the others'; sum_p piece * scale == x to 2^-26 of
    the block's max |x| (exact for elements within 8x of it); rows past M are zero."""
    from mtp_turbo.quant.kernels import triton_gemv

    dev = _kernel_device()
    g = torch.Generator().manual_seed(5)
    k, m, mp = 160, 3, 4  # 5 blocks: 2 lines, the second half empty
    ng = 2
    x = torch.randn(4, k, generator=g) * torch.logspace(-3, 3, 4)[:, None]  # rows of very different size
    x[1, 32:64] = 0.0  # an all-zero block
    xw = torch.zeros(ng, 16 * mp, 128, dtype=torch.int8, device=dev)
    xs = torch.full((ng, 16 * mp), float("nan"), device=dev)
    triton_gemv.x_wide[(ng,)](x.to(dev), xw, xs, k, x.stride(0), M=m, MP=mp)
    xw, xs = xw.cpu().double().reshape(ng, 4, 4, mp, 128), xs.cpu().double().reshape(ng, 4, 4, mp)  # [g, b, p, m, c]
    assert xw.abs().max() <= 65 and not xs.isnan().any()
    for b in range(4):  # block-diagonal: block b's rows are zero outside its 32 columns
        assert not xw[:, b, :, :, [c for c in range(128) if c // 32 != b]].any()
    recon = torch.stack([(xw[:, b, :, :, 32 * b: 32 * b + 32] * xs[:, b, :, :, None]).sum(1) for b in range(4)], 1)
    recon = recon.permute(2, 0, 1, 3).reshape(mp, ng * 128)[:, :k]  # [m, k]
    xd = x.double()
    assert not recon[m:].any() and not xs[..., m:].any()  # rows >= M are zero
    bmax = xd[:m].reshape(m, -1, 32).abs().amax(-1, keepdim=True).expand(-1, -1, 32).reshape(m, k)
    err = (recon[:m] - xd[:m]).abs()
    assert (err <= bmax * 2.0 ** -26).all(), float((err / bmax.clamp(min=1e-300)).max())
    big = xd[:m].abs() >= bmax / 8
    assert torch.equal(recon[:m][big], xd[:m][big])
    assert (xw[:, :, 1:] != 0).any()  # the lower pieces carry bits


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
def test_head_class_dispatch_per_row_count():
    """A head-sized matrix through the dispatcher at 1 and 3 rows (the frag8 kernel; on the CPU its
    torch emulation after the interpreted x_frag8) at fp32 rounding, the same through PackedLinear,
    whose tile follows the row count per call."""
    from mtp_turbo.quant.gemv import PackedLinear

    dev = _kernel_device()
    pw, ref_w, _ = _weights(32768 + 5, 64, "q8_0", seed=3)
    pw = pw.to(dev)
    g = torch.Generator().manual_seed(4)
    for m in (1, 3):
        x = torch.randn(m, 64, generator=g).to(dev)
        _check(gemv(x, pw, backend="triton"), x, ref_w, tol=1e-6)
    lin = PackedLinear(pw, backend="triton")
    x = torch.randn(5, 64, generator=g).to(dev)  # chunks of 4 + 1 rows
    _check(lin(x, out_dtype=torch.float32), x, ref_w, tol=1e-6)
