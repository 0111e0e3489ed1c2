"""Lloyd Q4_0 scale search: never worse than ggml Q4_0 per block, usually better; valid bytes."""

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType as T

from mtp_turbo.quant import formats as F
from mtp_turbo.quant.dequant import dequantize
from mtp_turbo.quant.lloyd import QMAX, QMIN, lloyd_q4_0


def _block_err(x: np.ndarray, fmt: str) -> np.ndarray:
    """Per-block squared error (float64) of x [rows, cols] through fmt's bytes and dequantize."""
    raw = F.quantize(x, fmt)
    y = dequantize(torch.from_numpy(raw.reshape(-1)), T.Q4_0, x.shape).numpy()
    return ((x.astype(np.float64) - y.astype(np.float64)) ** 2).reshape(-1, 32).sum(axis=1)


def _random_weights(rng: np.random.Generator) -> np.ndarray:
    g = rng.standard_normal((32, 256))
    heavy = rng.standard_t(3, size=(32, 256))           # outliers: where the ggml scale is worst
    x = np.concatenate([g, heavy]).astype(np.float32)
    x[0, :32] = 0.0
    x[1, :32] = 1e-30
    return x


def test_random_never_worse_and_mostly_better():
    x = _random_weights(np.random.default_rng(0))
    e_ggml, e_lloyd = _block_err(x, "q4_0"), _block_err(x, "q4_0_lloyd")
    assert np.all(e_lloyd <= e_ggml)
    assert (e_lloyd < e_ggml).mean() > 0.8
    assert e_lloyd.sum() < 0.95 * e_ggml.sum()
    assert e_lloyd[0] == 0.0                            # an all-zero block stays exact


def test_real_tensors_never_worse_and_mostly_better(model_reader):
    by_name = {t.name: t for t in model_reader.tensors}
    for name in ["blk.0.attn_q.weight", "blk.3.ffn_down.weight", "blk.8.attn_output.weight",
                 "token_embd.weight"]:
        t = by_name[name]
        data = np.asarray(t.data)
        pick = np.linspace(0, data.shape[0] - 1, 32).astype(int)
        w = gguf.quants.dequantize(np.ascontiguousarray(data[pick]), t.tensor_type)
        e_ggml, e_lloyd = _block_err(w, "q4_0"), _block_err(w, "q4_0_lloyd")
        assert np.all(e_lloyd <= e_ggml), name
        assert (e_lloyd < e_ggml).mean() > 0.7, name
        assert e_lloyd.sum() < 0.95 * e_ggml.sum(), name


def test_recovers_an_exact_grid_block_ggml_misses():
    # x = 0.125 * q with the max magnitude on +7: ggml maps it to -8 (scale 7/64) and loses.
    rng = np.random.default_rng(2)
    q = rng.integers(-6, 8, size=(8, 32))
    q[:, 3] = 7
    x = (0.125 * q).astype(np.float32)
    assert np.all(_block_err(x, "q4_0") > 0)
    assert np.all(_block_err(x, "q4_0_lloyd") == 0)


def test_bytes_are_valid_q4_0_for_gguf_too():
    x = _random_weights(np.random.default_rng(4))[:8]
    raw = F.quantize(x, "q4_0_lloyd")
    assert raw.dtype == np.uint8 and raw.shape == (8, 256 // 32 * 18)
    d = raw.reshape(-1, 18)[:, :2].copy().view(np.float16)
    assert np.isfinite(d).all()
    ref = gguf.quants.dequantize(raw, T.Q4_0)
    ours = dequantize(torch.from_numpy(raw.reshape(-1)), T.Q4_0, x.shape).numpy()
    assert np.array_equal(ref.view(np.uint32), ours.view(np.uint32))


def test_lloyd_direct_api_contract():
    rng = np.random.default_rng(6)
    x = torch.from_numpy(rng.standard_normal((50, 32)).astype(np.float32))
    d_g, q_g = F.ggml_q4_0_levels(x)
    d16, q = lloyd_q4_0(x, d_g.to(torch.float16).squeeze(1), q_g.to(torch.int8) - 8)
    assert d16.shape == (50,) and d16.dtype == torch.float16
    assert q.shape == (50, 32) and q.dtype == torch.int8
    assert int(q.min()) >= QMIN and int(q.max()) <= QMAX
    # levels are the nearest grid points for the returned scale (no stale assignment)
    best = torch.round(x / d16.float().unsqueeze(1)).clamp(QMIN, QMAX)
    y_best = d16.float().unsqueeze(1) * best
    y = d16.float().unsqueeze(1) * q.float()
    assert torch.all(((x - y) ** 2).sum(1) <= ((x - y_best) ** 2).sum(1) + 1e-12)
    # deterministic
    d16b, qb = lloyd_q4_0(x, d_g.to(torch.float16).squeeze(1), q_g.to(torch.int8) - 8)
    assert torch.equal(d16, d16b) and torch.equal(q, qb)
