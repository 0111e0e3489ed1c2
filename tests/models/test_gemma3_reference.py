"""Our Gemma-3 forward against transformers' Gemma3ForCausalLM built from the same dequantized
weights, in fp32 on the CPU: one long chunk, and the same text fed as chunks + 1-row steps."""

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_reference import build_hf_gemma3  # noqa: E402

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness,",
]


@pytest.fixture(scope="module")
def hf_model(engine):
    return build_hf_gemma3(engine.model)


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
