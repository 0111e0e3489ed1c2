"""transformers' model of each family built from our loaded weights: the independent reference for
logits tests (tiny random models and the real Gemma file) and the peer in benchmarks.

Owns: the name map from our weights to transformers' (Gemma3ForCausalLM, LlamaForCausalLM,
Qwen2ForCausalLM), the +1 convention of Gemma's norms (GGUF stores 1 + w; transformers adds the 1
itself), and the config translation. Ignores: everything else. Needs `transformers` (a test
extra), imported lazily. Imported by path (tests run with --import-mode=importlib): the tests and
bench/decode_bench.py put this folder on sys.path. The real Llama / Qwen2 files are compared
against transformers' own GGUF loader instead (tests/models/test_family_reference.py).
"""

from __future__ import annotations

from mtp_turbo.models.decoder import Decoder

LINEAR = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
          "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
GEMMA_NORMS = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm",
               "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
BIASES = {"q_bias": "self_attn.q_proj", "k_bias": "self_attn.k_proj", "v_bias": "self_attn.v_proj"}


def _config(m: Decoder):
    import transformers

    c = m.cfg
    common = dict(vocab_size=c.vocab_size, hidden_size=c.hidden, intermediate_size=c.ffn, num_hidden_layers=c.n_layers,
                  num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim,
                  rms_norm_eps=c.eps, max_position_embeddings=c.context_length, tie_word_embeddings=c.tied_head)
    if c.family == "gemma3":
        return transformers.Gemma3ForCausalLM, transformers.Gemma3TextConfig(
            **common, sliding_window=c.sliding_window, query_pre_attn_scalar=round(c.query_scale**-2),
            layer_types=["full_attention" if c.is_global(i) else "sliding_attention" for i in range(c.n_layers)],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": c.rope_local.base},
                             "full_attention": {"rope_type": "default", "rope_theta": c.rope_global.base}})
    rope = {"rope_type": "default", "rope_theta": c.rope_global.base}
    if c.family == "llama":
        return transformers.LlamaForCausalLM, transformers.LlamaConfig(**common, rope_parameters=rope,
                                                                      attention_bias=c.qkv_bias)
    return transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**common, rope_parameters=rope)


def build_hf(m: Decoder, attn_implementation: str | None = "eager"):
    """transformers' model of m's family on m's device and dtype holding exactly m's weights.
    attn_implementation None keeps the library's default."""
    cls, cfg = _config(m)
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    hf = cls(cfg).to(m.device, m.dtype).eval()
    gemma = m.cfg.family == "gemma3"
    one = 1.0 if gemma else 0.0
    sd = {"model.embed_tokens.weight": m.embed, "model.norm.weight": m.out_norm - one, "lm_head.weight": m.head_weight}
    for i, L in enumerate(m.layers):
        for ours, theirs in LINEAR.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours]
        for ours, theirs in (GEMMA_NORMS if gemma else NORMS).items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours] - one
        if m.cfg.qkv_bias:
            for ours, theirs in BIASES.items():
                sd[f"model.layers.{i}.{theirs}.bias"] = L[ours]
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k or "embed_scale" in k for k in missing), (missing, unexpected)
    return hf


