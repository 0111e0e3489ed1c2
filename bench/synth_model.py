"""A synthetic model at a published shape: a real file's metadata and tokenizer, random F16 weights.

Why: speed at 1B-30B is what users meet, and those files do not travel to the GPU machine in a
session; random weights of the right shapes, quantized there by llama.cpp's llama-quantize, move
the same bytes through the same kernels as the real models (the text is noise, the speed is not).

    python bench/synth_model.py --like REAL.gguf --shape gemma3-1b --out /tmp/g1b-f16.gguf
    llama-quantize /tmp/g1b-f16.gguf /tmp/g1b-q4km.gguf Q4_K_M

The metadata (tokenizer, chat template, family keys) is the real file's, with the shape's keys
replaced; the tensors are the ones arch.tensor_shapes lists for that config, F16 (norms F32),
drawn from one pool of Gaussian values (std 0.02; norms near 1) so that writing several GB takes
seconds, not minutes. Shapes from the models' published configs (transformers' config.json).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mtp_turbo.io.gguf_file import GGUFFile  # noqa: E402
from mtp_turbo.io.gguf_write import write_gguf  # noqa: E402
from mtp_turbo.models.arch import ModelConfig, Rope, tensor_shapes  # noqa: E402

# name -> (family, block_count, embedding_length, heads, kv heads, head dim, ffn, sliding window,
#          rope base, linear rope scaling, vocabulary (None: the real file's))
SHAPES = {
    "gemma3-1b": ("gemma3", 26, 1152, 4, 1, 256, 6912, 512, 1e6, 1.0, None),
    "gemma3-4b": ("gemma3", 34, 2560, 8, 4, 256, 10240, 1024, 1e6, 8.0, None),
    "gemma3-12b": ("gemma3", 48, 3840, 16, 8, 256, 15360, 1024, 1e6, 8.0, None),
    "gemma3-27b": ("gemma3", 62, 5376, 32, 16, 128, 21504, 1024, 1e6, 8.0, None),
    "qwen2.5-1.5b": ("qwen2", 28, 1536, 12, 2, 128, 8960, 0, 1e6, 1.0, None),
    "qwen2.5-7b": ("qwen2", 28, 3584, 28, 4, 128, 18944, 0, 1e6, 1.0, None),
    "qwen2.5-14b": ("qwen2", 48, 5120, 40, 8, 128, 13824, 0, 1e6, 1.0, None),
}
F32, F16 = 0, 1


def shape_config(name: str, vocab: int) -> ModelConfig:
    fam, L, D, H, HKV, DH, F, W, base, factor, V = SHAPES[name]
    return ModelConfig(family=fam, vocab_size=V or vocab, hidden=D, n_layers=L, n_heads=H, n_kv_heads=HKV,
                       head_dim=DH, ffn=F, eps=1e-6, rope_global=Rope(base, factor),
                       rope_local=Rope(1e4) if fam == "gemma3" else Rope(base), sliding_window=W,
                       sliding_pattern=6 if fam == "gemma3" else 0, query_scale=DH**-0.5, context_length=32768,
                       qkv_bias=fam == "qwen2", tied_head=True)


def metadata_for(real: dict, cfg: ModelConfig) -> dict:
    arch = cfg.family
    md = {k: v for k, v in real.items() if not k.startswith(f"{arch}.") and not k.startswith("GGUF.")}
    md.update({f"{arch}.block_count": cfg.n_layers, f"{arch}.embedding_length": cfg.hidden,
               f"{arch}.feed_forward_length": cfg.ffn, f"{arch}.attention.head_count": cfg.n_heads,
               f"{arch}.attention.head_count_kv": cfg.n_kv_heads, f"{arch}.attention.key_length": cfg.head_dim,
               f"{arch}.attention.value_length": cfg.head_dim, f"{arch}.context_length": cfg.context_length,
               f"{arch}.rope.freq_base": cfg.rope_global.base, f"{arch}.attention.layer_norm_rms_epsilon": cfg.eps})
    if cfg.sliding_window:
        md[f"{arch}.attention.sliding_window"] = cfg.sliding_window
    if cfg.rope_global.linear_factor != 1.0:
        md[f"{arch}.rope.scaling.type"] = "linear"
        md[f"{arch}.rope.scaling.factor"] = cfg.rope_global.linear_factor
    md["general.name"] = f"synthetic {cfg.family} {cfg.n_layers}x{cfg.hidden}"
    md["general.file_type"] = 1  # F16
    return md


def tensors_for(cfg: ModelConfig, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    P = 1 << 26
    pool = (rng.standard_normal(P, dtype=np.float32) * 0.02).astype(np.float16)
    pool2 = np.concatenate([pool, pool])  # 256 MB: every tensor up to P values is a view into it
    out, at = {}, 0
    for name, shape in tensor_shapes(cfg).items():
        n = int(np.prod(shape))
        if len(shape) == 1:  # norms (Gemma's hold their +1) and biases: F32
            v = (1.0 if name.endswith("norm.weight") else 0.0) + pool[:n].astype(np.float32)
            out[name] = (v.view(np.uint8), F32, shape)
            continue
        at = (at + 7919) % P
        v = pool2[at:at + n] if n <= P else np.resize(pool, n)  # views share the pool: no GBs of copies
        out[name] = (v.view(np.uint8), F16, shape)
    return out


Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 6, 7, 8, 12, 13, 14
# fp16 block scales giving weights of std ~0.02: Q4_K d*scale*code - dmin*min (scale, min < 64,
# code < 16; Q5_K code < 32); Q6_K d*scale*(code - 32) (|scale| < 128); Q5_0 d*(code - 16); Q5_1
# d*code + m; Q8_0 d*code
BLOCK_SCALE = {Q4_K: 1e-4, Q5_K: 5e-5, Q6_K: 2e-5, Q5_0: 2.5e-3, Q5_1: 1.2e-3, Q8_0: 3e-4}
FALLBACK = {Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0}  # llama-quantize's type for rows that are no multiple of 256
MIXES = {"q4_k_m": (Q4_K, 15), "q5_k_m": (Q5_K, 17)}  # the mix's main type, its general.file_type


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the layers whose attn_v / ffn_down Q4_K_M keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def block_pool(t: int, rng, blocks: int) -> np.ndarray:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    _, size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
    b = rng.integers(0, 256, (blocks, size), dtype=np.uint8)
    first, count = (208, 1) if t == Q6_K else (0, 2) if t in (Q4_K, Q5_K, Q5_1) else (0, 1)
    sc = (np.abs(rng.standard_normal((blocks, count))) * BLOCK_SCALE[t]).astype(np.float16)
    b[:, first:first + 2 * count] = sc.view(np.uint8).reshape(blocks, 2 * count)
    return b.reshape(-1)


def block_tensors_for(cfg: ModelConfig, seed: int = 0, mix: str = "q4_k_m") -> dict:
    """Q4_K_M's (or Q5_K_M's) type mix written directly as random blocks (no F16 file, no llama-quantize):
    Q6_K for the embedding and for attn_v / ffn_down of the more_bits layers, Q4_K (Q5_K) elsewhere
    (Q8_0 / Q5_0 (Q5_1) for rows that are no multiple of 256)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    rng = np.random.default_rng(seed)
    main_type = MIXES[mix][0]
    pools = {t: block_pool(t, rng, 1 << 20) for t in (main_type, Q6_K, FALLBACK[main_type], Q8_0)}
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        n = int(np.prod(shape))
        if len(shape) == 1:
            v = (1.0 if name.endswith("norm.weight") else 0.0) + np.zeros(n, np.float32)
            out[name] = (v.view(np.uint8), F32, shape)
            continue
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        six = name == "token_embd.weight" or (name.endswith(("attn_v.weight", "ffn_down.weight"))
                                              and more_bits(layer, cfg.n_layers))
        t = Q6_K if six else main_type
        if shape[-1] % 256:
            t = FALLBACK[t]
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
        nbytes = n // block * size
        pool = pools[t]
        out[name] = (pool[:nbytes] if nbytes <= pool.size else np.resize(pool, nbytes), t, shape)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--like", required=True, help="a real GGUF of the family: its metadata and tokenizer")
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--out", required=True)
    p.add_argument("--blocks", action="store_true",
                   help="write Q4_K_M's type mix as random blocks directly (no llama-quantize step): for the "
                   "speed of the file-bytes kernels; the F16 file + llama-quantize is what llama.cpp is run on")
    p.add_argument("--mix", default="q4_k_m", choices=sorted(MIXES), help="--blocks: the file's type mix")
    a = p.parse_args(argv)
    t0 = time.time()
    real = GGUFFile(a.like).metadata
    vocab = len(real["tokenizer.ggml.tokens"])
    cfg = shape_config(a.shape, vocab)
    if real.get("general.architecture") != cfg.family:
        raise SystemExit(f"--like is a {real.get('general.architecture')} file, --shape {a.shape} a {cfg.family} one")
    tensors = block_tensors_for(cfg, mix=a.mix) if a.blocks else tensors_for(cfg)
    md = metadata_for(real, cfg)
    if a.blocks:
        md["general.file_type"] = MIXES[a.mix][1]  # MOSTLY_Q4_K_M / MOSTLY_Q5_K_M
    write_gguf(a.out, cfg.family, md, tensors)
    size = os.path.getsize(a.out)
    kind = f"{a.mix.upper()} mix (random blocks)" if a.blocks else "F16"
    print(f"{a.out}: {a.shape}, {size / 1e9:.2f} GB {kind} in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
