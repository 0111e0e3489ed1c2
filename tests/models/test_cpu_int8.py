"""The CPU's int8 matrices (quant/cpu_linear.py, EngineConfig.cpu_weights="int8"; "auto", the default,
holds the same except where the file's blocks are 4-bit: tests/quant/test_cpu_int4.py) against the float32 reference: the kernel's arithmetic, its row independence, the engine's
logits, perplexity and greedy text beside the f32 engine's on the real model, and speculative text
equal to plain text on the int8 engine (verify rows give one-row steps' logits)."""

import pytest
import torch

from mtp_turbo.quant.cpu_linear import Int8Linear
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig


def test_int8_linear_is_the_per_row_grid_and_bf16_rows():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 200, generator=g) * torch.exp2(torch.randint(-8, 4, (300, 1), generator=g).float())
    w[7] = 0.0  # a zero row: scale at its floor, codes 0
    lin = Int8Linear(w)
    assert lin.q.dtype == torch.int8 and lin.scale.dtype == torch.bfloat16 and lin.shape == (300, 200)
    wq = lin.dequantize()
    step = lin.scale.float()[:, None]
    assert torch.all((wq - w).abs() <= step / 2 * (1 + 2**-7)), "each weight within half a step of its row's grid"
    assert lin.q.abs().max() <= 127 and torch.equal(wq[7], torch.zeros(200))
    x = torch.randn(5, 200, generator=g)
    y = lin(x)
    assert y.dtype == torch.float32 and y.shape == (5, 300)
    ref = x.bfloat16().double() @ wq.double().t()  # the rows as the kernel takes them (bf16)
    bound = 2**-7 * (x.bfloat16().double().abs() @ wq.double().abs().t()) + 1e-30
    assert torch.all((y.double() - ref).abs() <= bound)
    for j in range(5):  # a row's output does not depend on the rows beside it
        assert torch.equal(lin(x[j:j + 1])[0], y[j])
    assert lin(x[None]).shape == (1, 5, 300) and lin(x, out_dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def int8_engine(engine):
    from mtp_turbo.engine import Engine, EngineConfig

    cfg = EngineConfig(model=str(engine.gguf.path), device="cpu", ctx_size=2048, progress=False, cpu_weights="int8")
    e = Engine(cfg, gguf=engine.gguf)
    assert isinstance(e.model.layers[0]["qkv"], Int8Linear) and "q" not in e.model.layers[0]
    return e


def test_int8_engine_beside_the_f32_reference(engine, int8_engine):
    # the default model: logits within a few percent of the dequantized float32 values (bf16 rows
    # through 18 layers, per-row int8 grids), the same argmax wherever the reference's is clear, and
    # perplexity within 0.5% (8 chunks of The Tempest: +0.17% when measured)
    text = ("The history of the Roman Empire begins with the founding of the city of Rome, which according "
            "to legend took place in 753 BC, when the twins Romulus and Remus")
    ids = engine.tokenizer.encode(text)
    ref = engine.forward_logits(ids, chunk=len(ids))
    got = int8_engine.forward_logits(ids, chunk=len(ids))
    rms = ((got - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
    assert rms < 0.06, rms
    top2 = ref.topk(2, dim=-1).values
    clear = top2[:, 0] - top2[:, 1] > 0.5  # the reference's pick is clear of the int8 error
    assert clear.sum() >= 20 and torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear])  # 30 of 38 clear
    from pathlib import Path

    tempest = (Path(__file__).resolve().parents[1] / "data" / "tempest_act1.txt").read_text()
    p_ref = engine.perplexity(tempest, ctx=256, max_chunks=3, progress=False)["ppl"]
    p_got = int8_engine.perplexity(tempest, ctx=256, max_chunks=3, progress=False)["ppl"]
    assert abs(p_got / p_ref - 1) < 0.005, (p_got, p_ref)


def test_int8_greedy_text_where_the_margin_allows(engine, int8_engine, greedy_agrees_where_clear):
    # int8's greedy tokens are the reference's up to the first position where the reference's top
    # two logits lie within the int8 error (0.5 here): there the two may part, and do (measured: the
    # same 36 tokens of 40 on the Rome prompt)
    for prompt in ("The capital of France is", "def fibonacci(n):\n", "Once upon a time, in a small village"):
        greedy_agrees_where_clear(engine, int8_engine, prompt)


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_int8_speculative_text_equals_plain(int8_engine, temperature):
    s = SamplerConfig(temperature=temperature, top_p=0.95, min_p=0.05, repeat_penalty=1.08, seed=4)
    e = int8_engine
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
    e.reset()
    plain = e.generate_ids(prompt, sampler=s, max_tokens=32, stop_ids=())
    for draft in ("ngram", "mtp"):
        e.reset()
        assert e.generate_ids(prompt, sampler=s, max_tokens=32, stop_ids=(),
                              spec=SpecConfig(draft=draft, draft_tokens=3)) == plain, draft


def test_int8_cache_maps_the_same_codes_and_is_remade_when_damaged(engine, tmp_path, monkeypatch):
    """The first load (cpu_weights auto: all int8 for this file, its 4-bit matrices being few) saves
    its matrices to the user's cache, the next maps them without quantizing (the same codes and
    scales, the same logits bit for bit); a damaged or foreign cache
    is a miss (quantized and saved again), and --no-cpu-cache neither reads nor writes one."""
    import threading

    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.quant import cpu_cache, cpu_linear

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = str(engine.gguf.path)

    def build(**kw):
        e = Engine(EngineConfig(model=path, device="cpu", ctx_size=256, progress=False, **kw), gguf=engine.gguf)
        for th in threading.enumerate():
            if th.name == "mtp-turbo-cpu-cache":
                th.join()
        return e

    def logits(e):
        return e.forward_logits(e.encode_prompt("The old lighthouse keeper climbed"), chunk=8)

    first = build()
    # its Q4_K matrices are under INT4_MIN_SHARE: the cache holds int8 ops and its key says so (an
    # "int4" key once let a cache of int4 ops made by another rule be mapped for this model)
    where = cpu_cache.cache_file(path)
    assert not cpu_cache.cache_file(path, "int4").exists()
    assert where.parent == tmp_path / "mtp-turbo" / "cpu-int8" and where.stat().st_size > 100e6

    def no_quantizing(self, w):
        raise AssertionError("quantized although the cache holds the codes")

    monkeypatch.setattr(cpu_linear.Int8Linear, "__init__", no_quantizing)
    monkeypatch.setattr(cpu_linear.Int4Linear, "__init__", no_quantizing)
    second = build()
    a, b = first.model.layers[3]["gate_up"], second.model.layers[3]["gate_up"]
    assert torch.equal(a.q, b.q) and torch.equal(a.scale, b.scale) and "q" not in second.model.layers[0]
    assert torch.equal(first.model.head_op.q, second.model.head_op.q)
    assert torch.equal(logits(first), logits(second))
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    for damage in (lambda b: b[: len(b) // 2], lambda b: b"junk" + b[4:], lambda b: b[:20] + b"{" + b[21:]):
        where.write_bytes(damage(where.read_bytes()))
        third = build()  # a miss: quantized again (the same codes), and the cache made again
        assert torch.equal(logits(third), logits(first))
        assert cpu_cache.load(where, cpu_linear.cpu_op_shapes(third.model.cfg)) is not None
    where.unlink()
    build(cpu_cache=False)
    assert not where.exists()


def test_the_embedding_stays_the_files_bytes_and_the_drafter_reads_its_rows(engine, int8_engine):
    """The int8 engine gathers embedding rows from the file's Q8_0 bytes (the dense table's values,
    the f32 engine's rows bit for bit) and never makes the table: not for a step, not for the MTP
    drafter, whose LM head codes are the main head's rows (the same as quantizing those rows again)."""
    m = int8_engine.model
    assert not m.dense_embed and m.embed_file is not None
    ids = torch.tensor([0, 2, 1000, 262143, 2])
    assert torch.equal(m.embedding_rows(ids), engine.model.embed[ids])
    plain = int8_engine.generate_ids("The old lighthouse keeper", sampler=SamplerConfig(temperature=0.0),
                                     max_tokens=12, stop_ids=())
    spec = int8_engine.generate_ids("The old lighthouse keeper", sampler=SamplerConfig(temperature=0.0),
                                    max_tokens=12, stop_ids=(), spec=SpecConfig(draft="mtp", draft_tokens=2))
    assert spec == plain and not m.dense_embed
    head = int8_engine.drafter.head
    rows = engine.model.embed[head.vocab_ids]
    assert torch.equal(head.embed[head.vocab_ids[:7]], rows[:7])
    ref = Int8Linear(rows)
    assert torch.equal(head.ops["head"].q, ref.q) and torch.equal(head.ops["head"].scale, ref.scale)
