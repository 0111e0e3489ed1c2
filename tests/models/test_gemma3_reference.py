"""Our Gemma-3 forward against transformers' Gemma3ForCausalLM built from the same dequantized
weights, in fp32 on the CPU: one long chunk, and the same text fed as chunks + 1-row steps."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness,",
]


@pytest.fixture(scope="module")
def hf_model(engine):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    m = engine.model
    c = m.cfg
    cfg = Gemma3TextConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden, intermediate_size=c.ffn,
        num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
        head_dim=c.head_dim, sliding_window=c.sliding_window, query_pre_attn_scalar=c.head_dim,
        rms_norm_eps=c.eps, max_position_embeddings=c.context_length,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": c.rope_local},
                         "full_attention": {"rope_type": "default", "rope_theta": c.rope_global}},
    )
    cfg._attn_implementation = "eager"
    hf = Gemma3ForCausalLM(cfg).eval()
    sd = {"model.embed_tokens.weight": m.embed, "model.norm.weight": m.out_norm - 1.0}
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
             "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
    norms = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm",
             "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
    for i, L in enumerate(m.layers):
        for ours, theirs in names.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours]
        for ours, theirs in norms.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours] - 1.0  # HF adds the +1 itself
    sd["lm_head.weight"] = m.embed
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k or "embed_scale" in k for k in missing), (missing, unexpected)
    return hf


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
