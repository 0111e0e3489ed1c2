"""Small random main models of every family (arch.FAMILIES) for the interpreter and CPU tests.

Owns: `tiny_model(family, ...)`, a Decoder with random weights and the family's traits (Gemma-3's
sandwich norms, q/k norms and sliding layers; Qwen2's QKV biases; Llama's plain pre-norm), shapes
deliberately not powers of two nor multiples of the kernels' tiles. Ignores: files (load.py).
Imported by path (tests run with --import-mode=importlib): tests put this folder on sys.path.
"""

from __future__ import annotations

import torch

from mtp_turbo.models.arch import FAMILIES, ModelConfig, Rope, tensor_shapes
from mtp_turbo.models.decoder import Decoder


def tiny_config(family="gemma3", layers=6, window=16, heads=4, kv_heads=1, head_dim=32, hidden=48, ffn=80,
                vocab=300, tied=None) -> ModelConfig:
    fam = FAMILIES[family]
    sliding = fam.sliding_pattern > 0
    return ModelConfig(family=family, vocab_size=vocab, hidden=hidden, n_layers=layers, n_heads=heads,
                       n_kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, eps=1e-6, rope_global=Rope(1e6),
                       rope_local=Rope(1e4) if sliding else Rope(1e6), sliding_window=window if sliding else 0,
                       sliding_pattern=3 if sliding else 0, query_scale=head_dim**-0.5, context_length=256,
                       qkv_bias=family == "qwen2", tied_head=family != "qwen2" if tied is None else tied)


def tiny_weights(cfg: ModelConfig, seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in tensor_shapes(cfg).items():
        t = torch.randn(*shape, generator=g)
        if name.endswith("norm.weight"):
            w[name] = 1 + 0.2 * t
        elif name == "token_embd.weight":
            w[name] = t
        else:  # matrices and biases
            w[name] = 0.2 * t
    return w


def tiny_model(family="gemma3", seed=0, head_q8=False, dtype=torch.float32, device="cpu", **shape) -> Decoder:
    """head_q8: the LM head through Q8_0, kept as codes and scales (as load.py does on CUDA;
    hidden a multiple of 32), the dense head their dequantization."""
    cfg = tiny_config(family, **shape)
    w = tiny_weights(cfg, seed)
    q8 = None
    if head_q8:
        from mtp_turbo.quant.repack import PackedWeight

        name = "token_embd.weight" if cfg.tied_head else "output.weight"
        pw = PackedWeight.from_dense(w[name], "q8_0")
        q8, w[name] = (pw.qs, pw.scales), pw.dequantize()
    w = {k: (v if v.dim() == 1 else v.to(dtype)).to(device) for k, v in w.items()}  # Decoder keeps them where they are
    return Decoder(cfg, w, device, dtype, head_q8=q8)
