"""GEMV over packed weights: torch fallback and (on CUDA / under Triton's interpreter) the kernels,
against a float64 reference built from gguf's own dequantizer of the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf.quants
import numpy as np
import pytest
import torch

from mtp_turbo.errors import ConfigError
from mtp_turbo.quant.gemv import (
    DEFAULT_TILES, SUPPORTED_TILES, TileConfig, default_tile, gemv, parse_tile, tile_class,
)
from mtp_turbo.quant.repack import BLOCK_FORMATS, GGML_TYPES, PackedWeight, quantize_bytes

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


def _check(y: torch.Tensor, x: torch.Tensor, ref_w: np.ndarray) -> None:
    ref = x.double().cpu().numpy() @ ref_w.T
    got = y.double().cpu().numpy()
    assert np.isfinite(got).all()
    scale = np.abs(ref).max() + 1e-12
    assert np.abs(got - ref).max() / scale < 2e-5, np.abs(got - ref).max() / scale


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
    bpw = {"q8_0": 34 / 32, "q5_0": 22 / 32, "q4_0": 18 / 32, "bf16": 2, "f32": 4}[fmt]
    assert pw.nbytes == round(n * k * bpw)
    assert pw.shape == (n, k) and pw.fmt == fmt
    if fmt in BLOCK_FORMATS:
        assert pw.scales.dtype == torch.float16 and pw.scales.shape == (n, k // 32)
        assert pw.qs.shape == ((n, k) if fmt == "q8_0" else (n, k // 2))
        assert (pw.qh is not None) == (fmt == "q5_0")
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
        assert t.BLOCK_K % 32 == 0
    assert parse_tile(" 8, 128, 2, 2") == TileConfig(8, 128, 2, 2)
    for bad in ("8,128,2", "8,100,2,2", "3,128,2,2", "a,b,c,d", "", "8,128,2,2,1", "1024,512,8,2"):
        with pytest.raises(ConfigError) as e:
            parse_tile(bad)
        assert "4,256,2,2" in str(e.value)  # the message lists the supported combinations


def test_default_tiles_are_supported_and_classes():
    assert set(DEFAULT_TILES.values()) <= set(SUPPORTED_TILES)
    assert tile_class(262144, 640) == "head"
    assert tile_class(32768, 640) == "head"
    assert tile_class(8192, 8192) == "large"
    assert tile_class(640, 2048) == "tall" and tile_class(256, 640) == "tall"
    assert tile_class(2048, 640) == "wide" and tile_class(1024, 640) == "wide"
    assert default_tile(1024, 640) == DEFAULT_TILES["wide"]


def test_gemv_rejects_bad_inputs():
    pw, _, _ = _weights(8, 64, "q8_0", seed=0)
    with pytest.raises(AssertionError):
        gemv(torch.zeros(5, 64), pw)  # more than 4 rows
    with pytest.raises(AssertionError):
        gemv(torch.zeros(1, 32), pw)  # wrong K


# ----------------------------------------------------------------------------- Triton kernels
def _run_kernels(device: str, quick: bool = False) -> None:
    from mtp_turbo.quant import gemv_triton

    g = torch.Generator().manual_seed(11)
    tiles = [DEFAULT_TILES["wide"], DEFAULT_TILES["tall"], TileConfig(16, 128, 4, 2), TileConfig(64, 64, 4, 2)]
    if quick:  # the interpreter is slow: K tails (BLOCK_K > K, K % BLOCK_K != 0) and N tails only
        tiles = [TileConfig(8, 64, 1, 1), TileConfig(4, 128, 1, 1)]
    for fmt in BLOCK_FORMATS:
        for n, k in SHAPES[:2] if quick else SHAPES:
            pw, ref_w, _ = _weights(n, k, fmt, seed=n + k)
            pw = pw.to(device)
            for m in (1, 2, 3, 4):
                for tile in tiles:
                    for dt in (torch.float32, torch.bfloat16):
                        x = torch.randn(m, k, generator=g).to(dt).to(device)
                        out = torch.full((m, n), float("nan"), device=device)
                        gemv_triton.gemv_packed(x, pw, tile, out)
                        _check(out, x, ref_w)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernels_on_cuda():
    from mtp_turbo.quant import gemv_triton

    assert gemv_triton.available()
    _run_kernels("cuda")
    # Through the dispatcher too, with the default tiles, on a head-sized and a large matrix.
    for fmt in BLOCK_FORMATS:
        for n, k in ((40001, 640), (4099, 4096)):
            pw, ref_w, _ = _weights(n, k, fmt, seed=k)
            x = torch.randn(4, k, device="cuda")
            _check(gemv(x, pw.to("cuda")), x, ref_w)


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package (its CPU interpreter)")
def test_triton_kernels_under_interpreter():
    """The same kernel checks on CPU through Triton's interpreter (a subprocess: the interpreter
    is chosen when triton is first imported)."""
    root = Path(__file__).resolve().parents[2]
    code = "import tests.quant.test_gemv as t; t._run_kernels('cpu', quick=True)"
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
