"""The CPU's 4-bit matrices (quant/cpu_linear.Int4Linear, cpu_weights="auto"): the file's Q4_0 / Q4_1 /
Q4_K codes and affine per 32 weights give dequantize's values exactly (quant/dequant.int4_groups);
the kernel's products stay within the bf16 roundings of those values, rows do not depend on the
rows beside them or on the thread count; an engine on an all-Q4_1 model keeps plain's text under
speculation and the float32 reference's greedy text where the margin allows, and maps its 4-bit
matrices from the cache on a later load; a file whose 4-bit matrices are a minority stays int8."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T

from mtp_turbo.quant.cpu_linear import GROUP, Int4Linear, Int8Linear
from mtp_turbo.quant.dequant import INT4_TYPES, dequantize, int4_groups
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig


def _blocks(kind, engine):
    """(raw bytes, type, [N, K]) of a 4-bit matrix: Q4_0 / Q4_1 from gguf's quantizer, Q4_K from the
    default model's file (gguf cannot make Q4_K)."""
    if kind == T.Q4_K:
        name = next(n for n, t in engine.gguf.tensors.items() if t.ggml_type == T.Q4_K and len(t.shape) == 2)
        t = engine.gguf.tensors[name]
        return engine.gguf.raw_tensor(name, "cpu").reshape(-1), int(t.ggml_type), tuple(t.shape)
    g = np.random.default_rng(int(kind))
    w = (g.standard_normal((96, 256)) * np.exp2(g.integers(-6, 2, (96, 1)))).astype(np.float32)
    raw = torch.from_numpy(gguf.quants.quantize(w, kind).copy()).reshape(-1)
    return raw, int(kind), (96, 256)


@pytest.mark.parametrize("kind", [T.Q4_0, T.Q4_1, T.Q4_K], ids=["q4_0", "q4_1", "q4_k"])
def test_int4_groups_are_the_files_values_and_the_kernel_multiplies_by_them(kind, engine):
    raw, t, shape = _blocks(kind, engine)
    assert t in INT4_TYPES
    q, scale, offset = int4_groups(raw, t, shape)
    ref = dequantize(raw, t, shape)
    g = torch.arange(shape[1]) // GROUP
    assert q.max() <= 15 and torch.equal(q.float() * scale[:, g] + offset[:, g], ref)  # bit for bit
    op = Int4Linear.from_blocks([(raw, t, shape)])
    x = torch.randn(5, shape[1], generator=torch.Generator().manual_seed(1))
    y = op(x)
    assert y.dtype == torch.float32 and y.shape == (5, shape[0])
    xb = x.bfloat16().double()
    exact = xb @ ref.double().t()
    # the group's scale and offset rounded to bf16 (each within 2^-9 of itself), the sum rounded to bf16
    step = (offset.abs() + 8 * scale.abs()).double()[:, g]
    bound = 2**-8 * (xb.abs() @ step.t()) + 2**-8 * exact.abs() + 1e-30
    assert torch.all((y.double() - exact).abs() <= bound)
    worst = ((y.double() - exact).abs() / (xb.abs() @ ref.double().abs().t() + 1e-30)).max()
    assert worst < 2**-6  # and small against the products' scale: a wrong group would miss by O(1)


def test_int4_rows_do_not_depend_on_their_neighbours_or_the_thread_count(engine):
    op = Int4Linear.from_blocks([_blocks(T.Q4_1, engine), _blocks(T.Q4_0, engine)])  # fused along N
    assert op.shape == (192, 256)
    x = torch.randn(9, 256, generator=torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = op(x)
        torch.set_num_threads(max(2, threads))
        many = op(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)
    for j in range(9):
        assert torch.equal(op(x[j:j + 1])[0], many[j])


@pytest.fixture(scope="module")
def smol_engines(smollm2_path):
    from mtp_turbo.engine import Engine, EngineConfig

    cfg = dict(model=str(smollm2_path), device="cpu", ctx_size=512, progress=False, cpu_cache=False)
    auto = Engine(EngineConfig(**cfg))
    assert EngineConfig(model="x").cpu_weights == "auto"  # the default
    L = auto.model.layers[0]
    assert all(isinstance(L[k], Int4Linear) for k in ("qkv", "o", "gate_up", "down"))  # every matrix is Q4_1
    assert isinstance(auto.model.head_op, Int8Linear)
    return auto, Engine(EngineConfig(**cfg, cpu_weights="f32"))


def test_an_all_q4_1_model_keeps_the_reference_text_where_the_margin_allows(smol_engines, greedy_agrees_where_clear):
    auto, ref_eng = smol_engines
    for prompt in ("The capital of France is", "def fibonacci(n):\n"):
        greedy_agrees_where_clear(ref_eng, auto, prompt)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_speculative_text_equals_plain_on_int4_matrices(smol_engines, temperature):
    auto, _ = smol_engines
    s = SamplerConfig(temperature=temperature, top_p=0.95, seed=3)
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
    plain = auto.generate_ids(prompt, sampler=s, max_tokens=32, stop_ids=())
    spec = auto.generate_ids(prompt, sampler=s, max_tokens=32, stop_ids=(), spec=SpecConfig(draft="ngram", draft_tokens=3))
    assert spec == plain


def test_the_cache_maps_int4_matrices_and_a_minority_of_them_stays_int8(smollm2_path, engine, tmp_path, monkeypatch):
    import threading

    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.models.load import int4_matrices, model_config
    from mtp_turbo.quant import cpu_cache, cpu_linear

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def build(**kw):
        e = Engine(EngineConfig(model=str(smollm2_path), device="cpu", ctx_size=128, progress=False, **kw))
        for th in threading.enumerate():
            if th.name == "mtp-turbo-cpu-cache":
                th.join()
        return e

    stale = cpu_cache.cache_file(smollm2_path).with_name(f"{smollm2_path.stem}-0123456789abcdef.bin")
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"an older format's cache")
    other = stale.with_name(f"{smollm2_path.stem}-x-0123456789abcdef.bin")  # another model's name
    other.write_bytes(b"not this model's")
    first = build()
    assert cpu_cache.cache_file(smollm2_path, "int4").exists() and not stale.exists() and other.exists()

    def no_packing(self, *a):
        raise AssertionError("packed although the cache holds the codes")

    monkeypatch.setattr(cpu_linear.Int4Linear, "__init__", no_packing)
    second = build()
    a, b = first.model.layers[2]["gate_up"], second.model.layers[2]["gate_up"]
    assert isinstance(b, Int4Linear) and torch.equal(a.packed, b.packed) and torch.equal(a.sz, b.sz)
    ids = first.encode_prompt("The old lighthouse keeper climbed")
    assert torch.equal(first.forward_logits(ids, chunk=8), second.forward_logits(ids, chunk=8))
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    build(cpu_weights="int8")  # another variant's cache replaces this model's
    assert cpu_cache.cache_file(smollm2_path).exists() and not cpu_cache.cache_file(smollm2_path, "int4").exists()
    # the default model's Q4_K matrices (o, half the downs) are ~24% of its layers' weights: all int8
    assert int4_matrices(engine.gguf, model_config(engine.gguf)) == {}
