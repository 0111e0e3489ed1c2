"""formats: ggml-rule Q8_0/Q5_0/Q4_0 bytes identical to gguf.quants.quantize; GGUF write/read."""

import numpy as np
import pytest
import torch
import gguf
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from mtp_turbo.errors import ConfigError
from mtp_turbo.quant import formats as F
from mtp_turbo.quant.dequant import dequantize

GGML = [("q8_0", T.Q8_0), ("q5_0", T.Q5_0), ("q4_0", T.Q4_0)]


def _tricky(rng: np.random.Generator, rows: int = 16, cols: int = 256) -> np.ndarray:
    """Gaussian rows plus blocks that hit ties in rounding and in the max-magnitude sign."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0, :32] = 0.0                                   # all-zero block: d = 0
    x[0, 32:64] = rng.integers(-127, 128, 32) + 0.5   # halves, amax drives d
    x[0, 32] = 127.0                                  # Q8_0: d = 1, x*id lands exactly on .5
    x[1, :32] = rng.integers(-8, 8, 32) + 0.5
    x[1, 0] = -8.0                                    # Q4_0: d = 1, x*id + 8.5 exact integers
    x[1, 32:64] = rng.integers(-16, 16, 32) + 0.5
    x[1, 32] = -16.0                                  # Q5_0: same on its grid
    x[2, 64:96] = rng.standard_normal(32)
    x[2, 70], x[2, 80] = 3.0, -3.0                    # equal magnitudes, + first
    x[3, 64:96] = rng.standard_normal(32)
    x[3, 70], x[3, 80] = -3.0, 3.0                    # equal magnitudes, - first
    x[4, :32] = 1e-30                                 # tiny block (subnormal / zero fp16 scale)
    x[5] *= 1e3
    x[6] *= 1e-4
    return x


def test_format_table():
    assert F.ggml_type_of("q8_0") == T.Q8_0 and F.ggml_type_of("q5_0") == T.Q5_0
    assert F.ggml_type_of("q4_0") == T.Q4_0 == F.ggml_type_of("q4_0_lloyd")
    with pytest.raises(ConfigError, match="q3_x"):
        F.ggml_type_of("q3_x")
    with pytest.raises(ConfigError):
        F.quantize(np.zeros((1, 32), np.float32), "f16")


@pytest.mark.parametrize("fmt,t", GGML, ids=[g[0] for g in GGML])
def test_random_bytes_identical_to_gguf(fmt, t):
    rng = np.random.default_rng(int(t))
    x = _tricky(rng)
    with np.errstate(all="ignore"):
        ref = gguf.quants.quantize(x, t)
    out = F.quantize(x, fmt)
    assert out.dtype == np.uint8 and out.shape == ref.shape
    assert out.shape == (16, 256 // 32 * GGML_QUANT_SIZES[t][1])
    assert np.array_equal(out, ref)
    # same bytes from a torch input and from a float64 array
    assert np.array_equal(F.quantize(torch.from_numpy(x), fmt), ref)
    assert np.array_equal(F.quantize(x.astype(np.float64), fmt), ref)


def _real_weights(reader, names, rows=48):
    """Dequantized weights of a few model tensors, a spread of rows each -> {name: [rows, cols]}."""
    out = {}
    by_name = {t.name: t for t in reader.tensors}
    for name in names:
        t = by_name[name]
        data = np.asarray(t.data)
        pick = np.linspace(0, data.shape[0] - 1, rows).astype(int)
        out[name] = gguf.quants.dequantize(np.ascontiguousarray(data[pick]), t.tensor_type)
    return out


REAL = ["token_embd.weight", "blk.0.attn_q.weight", "blk.5.ffn_down.weight",
        "blk.9.attn_output.weight", "blk.17.ffn_gate.weight"]


@pytest.mark.parametrize("fmt,t", GGML, ids=[g[0] for g in GGML])
def test_real_tensor_bytes_identical_to_gguf(model_reader, fmt, t):
    for name, w in _real_weights(model_reader, REAL).items():
        assert np.array_equal(F.quantize(w, fmt), gguf.quants.quantize(w, t)), name


def test_q8_0_requantize_reproduces_file_bytes(model_reader):
    # Dequantized ggml Q8_0 blocks are fixed points of the ggml rule (d*127 is exact in float32).
    t = next(t for t in model_reader.tensors if t.name == "token_embd.weight")
    assert t.tensor_type == T.Q8_0
    raw = np.ascontiguousarray(np.asarray(t.data)[::4096])
    w = dequantize(torch.from_numpy(raw.reshape(-1)), T.Q8_0, (raw.shape[0], 640))
    assert np.array_equal(F.quantize(w, "q8_0"), raw)


@pytest.mark.parametrize("fmt", list(F.FORMATS))
def test_quantize_dequantize(fmt):
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.standard_normal((4, 3, 64)).astype(np.float32))
    y = F.quantize_dequantize(x, fmt)
    raw = F.quantize(x, fmt)
    assert raw.shape == (4, 3, 2 * GGML_QUANT_SIZES[T(F.ggml_type_of(fmt))][1])
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert torch.equal(y, dequantize(torch.from_numpy(raw.reshape(-1)), F.ggml_type_of(fmt), x.shape))
    rel = ((y - x).norm() / x.norm()).item()
    assert 0 < rel < {"q8_0": 0.01, "q5_0": 0.05, "q4_0": 0.15, "q4_0_lloyd": 0.15}[fmt]


def test_rejects_rows_not_multiple_of_32():
    with pytest.raises(AssertionError):
        F.quantize(np.zeros((2, 48), np.float32), "q8_0")


@pytest.mark.parametrize("fmt", list(F.FORMATS))
def test_gguf_writer_roundtrip(tmp_path, fmt):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((6, 128)).astype(np.float32)
    raw = F.quantize(w, fmt)
    t = T(F.ggml_type_of(fmt))
    path = tmp_path / f"{fmt}.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", raw, raw_dtype=t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    (rt,) = gguf.GGUFReader(str(path)).tensors
    assert rt.name == "w" and rt.tensor_type == t
    assert [int(s) for s in rt.shape] == [128, 6]     # GGUF ne order = reversed torch shape
    data = np.asarray(rt.data)
    assert np.array_equal(data.reshape(-1), raw.reshape(-1))
    ref = gguf.quants.dequantize(data, rt.tensor_type).reshape(6, 128)
    ours = dequantize(torch.from_numpy(raw.reshape(-1)), t, (6, 128))
    assert np.array_equal(ref.view(np.uint32), ours.numpy().view(np.uint32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", list(F.FORMATS))
def test_cuda_bytes_match_cpu(fmt):
    x = torch.from_numpy(_tricky(np.random.default_rng(1), rows=64, cols=512))
    cpu = F.quantize_tensor(x, fmt)
    gpu = F.quantize_tensor(x.cuda(), fmt)
    assert gpu.device.type == "cuda"
    if fmt != "q4_0_lloyd":
        assert torch.equal(cpu, gpu.cpu())
        return
    # Lloyd ranks candidates with float32 sums whose order differs on the GPU: compare errors
    t = F.ggml_type_of(fmt)
    err = [((dequantize(r.reshape(-1), t, x.shape).cpu() - x).double() ** 2).reshape(-1, 32).sum(1)
           for r in (cpu, gpu, F.quantize_tensor(x.cuda(), "q4_0"))]
    assert torch.all(err[1] <= err[2].cpu())
    assert torch.allclose(err[0].sum(), err[1].sum(), rtol=1e-3)
