"""Our forward against transformers' model of the same family built from the same dequantized
weights, in fp32 on the CPU: the real Gemma-3 file (one long chunk, and the same text fed as chunks +
1-row steps) and small random models of every family."""

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_reference import build_hf  # noqa: E402

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness,",
]


@pytest.fixture(scope="module")
def hf_model(engine):
    return build_hf(engine.model)


def _rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_logits_one_chunk_and_streamed(engine, hf_model, prompt):
    ids = engine.tokenizer.encode(prompt)
    assert len(ids) > 12
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0].float()
    # one chunk
    ours = engine.forward_logits(ids, chunk=len(ids))
    assert _rel_err(ours, ref) < 1e-4
    # chunks of 5 rows, then the last 3 tokens one row at a time
    ours2 = engine.forward_logits(ids, chunk=5, tail_single=3)
    assert _rel_err(ours2, ref) < 1e-4
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_sliding_window_matters(engine, hf_model):
    """A prompt longer than the 512-token window: sliding layers must drop old cells exactly as HF."""
    text = " ".join(f"item {i} is {i * 7 % 13}." for i in range(140))
    ids = engine.tokenizer.encode(text)
    assert len(ids) > 600
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0].float()
    ours = engine.forward_logits(ids, chunk=256)
    assert _rel_err(ours[-64:], ref[-64:]) < 1e-4


# ---- small random models of every family (arch.py) against transformers' model of the family ----
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_models import tiny_model  # noqa: E402


@pytest.mark.parametrize("family,shape", [
    ("gemma3", dict(heads=4, kv_heads=2, head_dim=16, window=8)),
    ("llama", dict(heads=6, kv_heads=2, head_dim=16)),
    ("qwen2", dict(heads=7, kv_heads=1, head_dim=16)),  # biases, an untied head, 7 heads a K/V head
    ("qwen2", dict(heads=4, kv_heads=4, head_dim=16, tied=True)),
])
def test_tiny_model_of_each_family_matches_transformers(family, shape):
    model = tiny_model(family, seed=4, layers=4, **shape)
    hf = build_hf(model)
    ids = torch.randint(0, model.cfg.vocab_size, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    from mtp_turbo.cache.kv import KVCache

    c = model.cfg
    for chunk in (40, 7):  # one forward, and chunks crossing the sliding window
        kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
        ours = torch.cat([model.forward(torch.tensor(ids[i:i + chunk]), i, kv)[0] for i in range(0, 40, chunk)])
        assert _rel_err(ours, ref) < 1e-4, (family, chunk, _rel_err(ours, ref))
