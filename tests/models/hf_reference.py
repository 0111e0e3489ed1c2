"""transformers' Gemma3ForCausalLM built from our loaded weights: the independent reference for
logits tests and the peer in benchmarks.

Owns: the name map from our weights to transformers' and the +1 convention of the norms (GGUF
stores 1 + w; transformers adds the 1 itself). Ignores: everything else. Needs `transformers`
(a test extra), imported lazily. Imported by path (tests run with --import-mode=importlib): the
tests and bench/decode_bench.py put this folder on sys.path.
"""

from __future__ import annotations

from mtp_turbo.models.gemma3 import Gemma3

LINEAR = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
          "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
NORMS = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
         "ffn_norm": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm",
         "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}


def build_hf_gemma3(m: Gemma3, attn_implementation: str | None = "eager"):
    """A Gemma3ForCausalLM on m's device and dtype holding exactly m's weights.
    attn_implementation None keeps the library's default."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    c = m.cfg
    cfg = Gemma3TextConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden, intermediate_size=c.ffn, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim,
        sliding_window=c.sliding_window, query_pre_attn_scalar=c.head_dim, rms_norm_eps=c.eps,
        max_position_embeddings=c.context_length,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": c.rope_local},
                         "full_attention": {"rope_type": "default", "rope_theta": c.rope_global}},
    )
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    hf = Gemma3ForCausalLM(cfg).to(m.device, m.dtype).eval()
    sd = {"model.embed_tokens.weight": m.embed, "model.norm.weight": m.out_norm - 1.0, "lm_head.weight": m.embed}
    for i, L in enumerate(m.layers):
        for ours, theirs in LINEAR.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours]
        for ours, theirs in NORMS.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = L[ours] - 1.0
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k or "embed_scale" in k for k in missing), (missing, unexpected)
    return hf
