"""dequant.dequantize: bit-exact with gguf.quants.dequantize on random blocks and on the model."""

import numpy as np
import pytest
import torch
import gguf
from gguf import GGML_QUANT_SIZES, QK_K, GGMLQuantizationType as T

from mtp_turbo.errors import ModelFileError
from mtp_turbo.quant.dequant import SUPPORTED_TYPES, dequantize

# byte offsets of the fp16 scale fields per block type (randomised to finite values below)
_F16_FIELDS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q2_K: [80, 82],
               T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
# gguf 0.19 quantizes Q4_1 / Q5_1 but not Q2_K / Q3_K / Q5_K (dequantize only): those get random blocks
_GGUF_QUANTIZES = [T.Q4_1, T.Q5_1]
_GGUF_DEQUANT_ONLY = [T.Q2_K, T.Q3_K, T.Q5_K]


def _random_blocks(t: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """[n_blocks, type_size] random bytes with finite fp16 scales (incl. zero, subnormal, negative)."""
    _, size = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in _F16_FIELDS[t]:
        mag = np.ldexp(rng.random(n_blocks), rng.integers(-26, 6, n_blocks))
        d = (mag * rng.choice([-1.0, 1.0], n_blocks)).astype(np.float16)
        d[:3] = np.array([0.0, -0.0, 6e-8], dtype=np.float16)  # zero, -zero, subnormal
        raw[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return raw


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("t", sorted(_F16_FIELDS, key=int), ids=lambda t: t.name)
def test_random_blocks_bit_exact(t):
    rng = np.random.default_rng(int(t))
    block, _ = GGML_QUANT_SIZES[t]
    rows, per_row = 24, 3
    raw = _random_blocks(t, rows * per_row, rng)
    ref = gguf.quants.dequantize(raw.reshape(rows, -1), t)
    out = dequantize(torch.from_numpy(raw.reshape(-1)), t, (rows, per_row * block))
    assert out.dtype == torch.float32 and out.shape == (rows, per_row * block)
    assert np.isfinite(ref).all()
    assert _bits_equal(out.numpy(), ref)


def _assert_torch_bits_equal(out: torch.Tensor, ref: np.ndarray) -> None:
    ref_t = torch.from_numpy(ref)
    assert out.dtype == torch.float32 and out.shape == ref_t.shape
    assert torch.equal(out, ref_t)
    assert torch.equal(out.view(torch.int32), ref_t.view(torch.int32))  # signed zeros too


@pytest.mark.parametrize("shape", [(2, 64), (5, 160), (16, 512)], ids=str)
@pytest.mark.parametrize("t", _GGUF_QUANTIZES, ids=lambda t: t.name)
def test_gguf_quantized_bit_exact(t, shape):
    """Bytes from gguf's own quantizer: mixed-sign rows over several decades, an all-positive
    row, an all-negative block and a block of zeros."""
    rng = np.random.default_rng(int(t) * 1000 + shape[1])
    rows, cols = shape
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 3, (rows, 1))
    x[0, :32] = 0.0
    x[0, 32:64] = -np.abs(x[0, 32:64]) - 2.0
    x[1] = np.abs(x[1]) + 0.5
    raw = gguf.quants.quantize(x.astype(np.float32), t)
    assert raw.dtype == np.uint8 and raw.shape == (rows, cols // 32 * GGML_QUANT_SIZES[t][1])
    ref = gguf.quants.dequantize(raw, t)
    out = dequantize(torch.from_numpy(raw.reshape(-1)), t, shape)
    assert (ref[0, :32] == 0).all() and (ref[0, 32:64] < 0).all() and (ref[1] > 0).all()
    _assert_torch_bits_equal(out, ref)


@pytest.mark.parametrize("shape", [(2, 512), (3, 768), (6, 1024)], ids=str)
@pytest.mark.parametrize("t", _GGUF_DEQUANT_ONLY, ids=lambda t: t.name)
def test_k_random_blocks_torch_equal(t, shape):
    """Random valid blocks of the K types gguf cannot quantize, one of them all zero bytes."""
    rng = np.random.default_rng(int(t) * 1000 + shape[1])
    rows, cols = shape
    raw = _random_blocks(t, rows * cols // QK_K, rng)
    raw[3] = 0  # a block of zeros (blocks 0-2 already have scales 0, -0 and a subnormal)
    raw = raw.reshape(rows, -1)
    ref = gguf.quants.dequantize(raw, t)
    out = dequantize(torch.from_numpy(raw.reshape(-1)), t, shape)
    assert np.isfinite(ref).all() and (ref < 0).any() and (ref > 0).any()
    assert (ref.reshape(-1, QK_K)[3] == 0).all()
    _assert_torch_bits_equal(out, ref)


@pytest.mark.parametrize("t", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_float_types_bit_exact(t):
    rng = np.random.default_rng(7)
    nbytes = {T.F32: 4, T.F16: 2, T.BF16: 2}[t]
    raw = rng.integers(0, 256, size=(5, 64 * nbytes), dtype=np.uint8)  # includes NaN/inf patterns
    ref = gguf.quants.dequantize(raw.copy(), t).reshape(5, 64)
    out = dequantize(torch.from_numpy(raw.reshape(-1)), t, (5, 64))
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(out.numpy()))
    assert _bits_equal(out.numpy()[fin], ref[fin])


def test_every_model_tensor_bit_exact(model_reader):
    seen = set()
    for t in model_reader.tensors:
        shape = tuple(int(s) for s in reversed(t.shape.tolist()))
        data = np.asarray(t.data)
        rows = data.reshape(shape[0], -1) if len(shape) > 1 else data.reshape(1, -1)
        cols = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        step = 16384  # chunk rows of the embedding to bound memory; rows are independent
        for r0 in range(0, rows.shape[0], step):
            part = np.array(rows[r0:r0 + step])  # writable copy of the read-only memmap
            ref = gguf.quants.dequantize(part, t.tensor_type).reshape(part.shape[0], cols)
            raw = torch.from_numpy(part.view(np.uint8).reshape(-1))
            out = dequantize(raw, t.tensor_type, (part.shape[0], cols))
            assert _bits_equal(out.numpy(), ref), t.name
        seen.add(t.tensor_type)
    assert {T.F32, T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K} <= seen


def test_full_shape_roundtrip_1d_and_3d():
    rng = np.random.default_rng(11)
    raw = _random_blocks(T.Q8_0, 12, rng)
    ref = gguf.quants.dequantize(raw.reshape(-1, 34), T.Q8_0).reshape(-1)
    out3 = dequantize(torch.from_numpy(raw.reshape(-1)), T.Q8_0, (2, 3, 64))
    out1 = dequantize(torch.from_numpy(raw.reshape(-1)), T.Q8_0, (384,))
    assert _bits_equal(out3.numpy().reshape(-1), ref) and _bits_equal(out1.numpy(), ref)


def test_unaligned_raw_slices():
    buf = torch.arange(40, dtype=torch.uint8)
    raw = buf[1:33]  # storage offset 1: not a valid float32/float16 view as is
    for t, shape in [(T.F32, (2, 4)), (T.F16, (4, 4)), (T.BF16, (16,))]:
        ref = gguf.quants.dequantize(raw.numpy().copy(), t).reshape(shape)
        out = dequantize(raw, t, shape)
        fin = np.isfinite(ref)
        assert np.array_equal(fin, np.isfinite(out.numpy()))
        assert _bits_equal(out.numpy()[fin], ref[fin])
    q = buf[3:37]  # one Q8_0 block at an odd offset
    ref = gguf.quants.dequantize(q.numpy().copy().reshape(1, 34), T.Q8_0)
    assert _bits_equal(dequantize(q, T.Q8_0, (1, 32)).numpy(), ref)


def test_supported_types_are_the_loaders():
    """Exactly the types the model loader accepts; others (Q8_1, Q8_K, TQ1_0, IQ4_NL, ...) are refused."""
    from mtp_turbo.models.load import SUPPORTED_TYPES as LOADER_TYPES

    assert isinstance(SUPPORTED_TYPES, frozenset)
    assert SUPPORTED_TYPES == {T.F32, T.F16, T.BF16, T.Q8_0, T.Q5_0, T.Q5_1, T.Q4_0, T.Q4_1, T.Q2_K, T.Q3_K,
                               T.Q4_K, T.Q5_K, T.Q6_K}
    assert SUPPORTED_TYPES == set(LOADER_TYPES)
    for t in (T.Q8_1, T.Q8_K, T.TQ1_0, T.IQ4_NL):
        _, size = GGML_QUANT_SIZES[t]
        with pytest.raises(ModelFileError, match=t.name):
            dequantize(torch.zeros(size, dtype=torch.uint8), t, (1, GGML_QUANT_SIZES[t][0]))


def test_unsupported_type_raises_naming_it():
    assert T.IQ2_XS not in SUPPORTED_TYPES
    with pytest.raises(ModelFileError, match="IQ2_XS"):
        dequantize(torch.zeros(74, dtype=torch.uint8), T.IQ2_XS, (1, 256))
    with pytest.raises(ModelFileError, match="9999"):
        dequantize(torch.zeros(4, dtype=torch.uint8), 9999, (1, 1))


def test_byte_count_mismatch_is_asserted():
    with pytest.raises(AssertionError):
        dequantize(torch.zeros(35, dtype=torch.uint8), T.Q8_0, (1, 32))
    with pytest.raises(AssertionError):
        dequantize(torch.zeros(34, dtype=torch.uint8), T.Q8_0, (1, 64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("t", sorted(_F16_FIELDS, key=int), ids=lambda t: t.name)
def test_cuda_matches_cpu(t):
    rng = np.random.default_rng(int(t) + 100)
    block, _ = GGML_QUANT_SIZES[t]
    raw = torch.from_numpy(_random_blocks(t, 256, rng).reshape(-1))
    cpu = dequantize(raw, t, (16, 16 * block))
    gpu = dequantize(raw.cuda(), t, (16, 16 * block))
    assert gpu.device.type == "cuda"
    assert torch.equal(cpu.view(torch.int32), gpu.cpu().view(torch.int32))
