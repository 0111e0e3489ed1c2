"""The architecture description: one table row per model family, one config per model file.

Owns: what distinguishes the families we run (gemma3, llama, qwen2): norm placement (Gemma's
sandwich norms around attention and MLP, or plain pre-norm), the MLP's activation (GeGLU / SwiGLU),
q/k norms, QKV biases, the embedding scale, RoPE bases and scaling per layer kind, the sliding-window
pattern, the query scale, and the GGUF tensor names and shapes a file of that family must hold.
`ModelConfig.from_gguf` reads it all from a file's metadata and tensor table and refuses metadata
that contradicts the tensors with one clear ModelFileError. `BlockSpec` is the description of one
block that the block's math (block.py), the fused kernels (fused.py) and the MTP head read.
Ignores: the weights' values (load.py), the math (block.py, decoder.py), tokenizers (io/).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..errors import ModelFileError

GELU_TANH, SILU = "gelu_tanh", "silu"


@dataclass(frozen=True)
class Family:
    """What a model family fixes (its table row, as gpt-fast's config table)."""

    name: str
    sandwich_norms: bool  # norms after attention and MLP outputs too (Gemma), else pre-norm only
    activation: str  # GELU_TANH (GeGLU) or SILU (SwiGLU)
    qk_norm: bool  # RMSNorm over each q / k head before RoPE
    scaled_embedding: bool  # embedding rows times sqrt(hidden)
    # llama.cpp's converter interleaves each q / k head's rows for its pairwise RoPE; load.py undoes
    # it so that every family runs the one rotate-half RoPE (as transformers' GGUF loader does)
    qk_interleaved: bool
    sliding_pattern: int  # every sliding_pattern-th layer is global, the rest sliding (0: all global)
    local_rope_base: float  # RoPE base of sliding layers (GGUF has no key for it)


FAMILIES = {
    "gemma3": Family("gemma3", sandwich_norms=True, activation=GELU_TANH, qk_norm=True, scaled_embedding=True,
                     qk_interleaved=False, sliding_pattern=6, local_rope_base=10_000.0),
    "llama": Family("llama", sandwich_norms=False, activation=SILU, qk_norm=False, scaled_embedding=False,
                    qk_interleaved=True, sliding_pattern=0, local_rope_base=0.0),
    "qwen2": Family("qwen2", sandwich_norms=False, activation=SILU, qk_norm=False, scaled_embedding=False,
                    qk_interleaved=False, sliding_pattern=0, local_rope_base=0.0),
}


@dataclass(frozen=True)
class BlockSpec:
    """One transformer block: its shape and its family's traits (the main model's layers, the MTP
    head and training all build one)."""

    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    query_scale: float
    sandwich_norms: bool
    activation: str
    qk_norm: bool
    qkv_bias: bool

    def __post_init__(self) -> None:
        assert self.n_heads % self.n_kv_heads == 0, (self.n_heads, self.n_kv_heads)
        assert self.activation in (GELU_TANH, SILU), self.activation


@dataclass(frozen=True)
class Rope:
    """Rotate-half RoPE of one layer kind: base, and linear position scaling (positions / factor)."""

    base: float
    linear_factor: float = 1.0


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_global: Rope
    rope_local: Rope
    sliding_window: int  # cells a sliding layer reads (0: no sliding layers)
    sliding_pattern: int  # every sliding_pattern-th layer is global (0: all global)
    query_scale: float
    context_length: int
    qkv_bias: bool = False
    tied_head: bool = True  # the LM head is the embedding (no output.weight)
    rope_freqs: bool = False  # the file's rope_freqs tensor divides the global layers' frequencies

    @property
    def traits(self) -> Family:
        return FAMILIES[self.family]

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.hidden) if self.traits.scaled_embedding else 1.0

    def is_global(self, layer: int) -> bool:
        return self.sliding_window == 0 or self.sliding_pattern == 0 or (layer + 1) % self.sliding_pattern == 0

    @property
    def has_sliding(self) -> bool:
        return any(not self.is_global(i) for i in range(self.n_layers))

    @property
    def block(self) -> BlockSpec:
        t = self.traits
        return BlockSpec(self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.ffn, self.eps,
                         self.query_scale, t.sandwich_norms, t.activation, t.qk_norm, self.qkv_bias)

    @classmethod
    def from_gguf(cls, meta: dict, tensors: dict) -> "ModelConfig":
        """The config of a GGUF file from its metadata and tensor infos ({name: info with .shape,
        torch order}); every contradiction between them is a ModelFileError naming it."""
        arch = meta.get("general.architecture")
        if not isinstance(arch, str) or arch not in FAMILIES:
            raise ModelFileError(f"unsupported architecture {arch!r} (supported: {', '.join(FAMILIES)})")
        fam = FAMILIES[arch]
        emb = tensors.get("token_embd.weight")
        if emb is None or len(emb.shape) != 2:
            raise ModelFileError("no 2-D token_embd.weight tensor")
        vocab, hidden = (int(x) for x in emb.shape)
        if vocab < 1 or hidden < 1:
            raise ModelFileError(f"token_embd.weight has shape {list(emb.shape)}: an empty embedding")

        def get(key, default=None, kind=int):
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise ModelFileError(f"GGUF metadata lacks {arch}.{key}")
            if isinstance(v, (list, tuple)) or hasattr(v, "shape"):
                raise ModelFileError(f"{arch}.{key} is a per-layer array, which this engine does not support")
            # exact kinds: a float where an integer belongs (or a bool, or a string) is a damaged
            # file, not something to round
            ok = isinstance(v, numbers.Integral) if kind is int else isinstance(v, numbers.Real)
            if not ok or isinstance(v, bool):
                raise ModelFileError(f"{arch}.{key} = {v!r} is not {'an integer' if kind is int else 'a number'}")
            v = kind(v)
            if kind is float and not (math.isfinite(v) and v > 0):
                raise ModelFileError(f"{arch}.{key} = {v!r} must be a finite positive number")
            return v

        n_layers, n_heads = get("block_count"), get("attention.head_count")
        n_kv = get("attention.head_count_kv", n_heads)
        d_model = get("embedding_length")
        for key, v in (("block_count", n_layers), ("attention.head_count", n_heads),
                       ("attention.head_count_kv", n_kv), ("embedding_length", d_model)):
            if v < 1:
                raise ModelFileError(f"{arch}.{key} = {v}: must be at least 1")
        # every layer has its own tensors: a count past the tensor table is garbage (and would
        # make the shape table below as long as it says)
        if n_layers > len(tensors):
            raise ModelFileError(f"{arch}.block_count = {n_layers} but the file has only {len(tensors)} tensors")
        if n_heads % n_kv:
            raise ModelFileError(f"{n_heads} attention heads do not divide into {n_kv} K/V heads")
        if d_model != hidden:
            raise ModelFileError(f"{arch}.embedding_length {d_model} but token_embd has {hidden} columns")
        head_dim = get("attention.key_length", hidden // n_heads if hidden % n_heads == 0 else 0)
        if get("attention.value_length", head_dim) != head_dim:
            raise ModelFileError("different key and value head sizes are not supported")
        if not (8 <= head_dim <= 1024 and head_dim & (head_dim - 1) == 0):
            raise ModelFileError(f"head size {head_dim}: this engine runs power-of-two head sizes from 8 to 1024")
        rope_dims = get("rope.dimension_count", head_dim)
        if rope_dims != head_dim:
            raise ModelFileError(f"RoPE over {rope_dims} of {head_dim} head dimensions is not supported")
        scaling = str(meta.get(f"{arch}.rope.scaling.type", "none"))
        if scaling not in ("none", "linear"):
            raise ModelFileError(f"RoPE scaling {scaling!r} is not supported (supported: none, linear)")
        factor = get("rope.scaling.factor", 1.0, float) if scaling == "linear" else 1.0
        rope_global = Rope(get("rope.freq_base", 10_000.0, float), factor)
        # Gemma-3's sliding layers keep base 10k and no scaling (transformers' rope_local_base_freq)
        rope_local = Rope(fam.local_rope_base) if fam.sliding_pattern else rope_global
        window = get("attention.sliding_window", 0) if fam.sliding_pattern else 0
        if fam.sliding_pattern and window < 1:
            raise ModelFileError(f"{arch}.attention.sliding_window must be at least 1, got {window}")
        # Gemma-3 27B scales queries by hidden / heads (query_pre_attn_scalar 168 for head size
        # 128), the other sizes by the head size: llama.cpp tells them apart by its 62 layers
        qs = (hidden / n_heads) ** -0.5 if arch == "gemma3" and n_layers == 62 else head_dim**-0.5
        cfg = cls(family=arch, vocab_size=vocab, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                  head_dim=head_dim, ffn=get("feed_forward_length"), eps=get("attention.layer_norm_rms_epsilon",
                                                                            1e-6, float),
                  rope_global=rope_global, rope_local=rope_local, sliding_window=window,
                  sliding_pattern=fam.sliding_pattern, query_scale=qs, context_length=get("context_length", 4096),
                  qkv_bias="blk.0.attn_q.bias" in tensors, tied_head="output.weight" not in tensors,
                  rope_freqs="rope_freqs.weight" in tensors)
        if cfg.ffn < 1 or cfg.context_length < 1:
            raise ModelFileError(f"{arch}.feed_forward_length and context_length must be at least 1")
        # a norm's epsilon is ~1e-6; one near 1 or past it flattens every activation (garbage text)
        if not cfg.eps < 0.1:
            raise ModelFileError(f"{arch}.attention.layer_norm_rms_epsilon = {cfg.eps!r} is not a small number")
        if not rope_global.base > 1:
            raise ModelFileError(f"{arch}.rope.freq_base = {rope_global.base!r} must be greater than 1")
        # the kernels size their sliding-layer buffers by the window: one past the context is damage
        if window > cfg.context_length:
            raise ModelFileError(f"{arch}.attention.sliding_window = {window} is larger than the context "
                                 f"({cfg.context_length})")
        check_shapes(cfg, tensors)
        return cfg


def layer_tensors(cfg: ModelConfig | Family | BlockSpec) -> dict[str, str]:
    """A layer's weights: our key -> its GGUF tensor name after `blk.{i}.` (with .weight / .bias)."""
    sandwich = cfg.sandwich_norms if isinstance(cfg, (Family, BlockSpec)) else cfg.traits.sandwich_norms
    qk_norm = cfg.qk_norm if isinstance(cfg, (Family, BlockSpec)) else cfg.traits.qk_norm
    bias = getattr(cfg, "qkv_bias", False)
    names = {"attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
             "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    if qk_norm:
        names.update(q_norm="attn_q_norm", k_norm="attn_k_norm")
    if sandwich:
        names.update(post_attn_norm="post_attention_norm", post_ffn_norm="post_ffw_norm")
    out = {k: f"{v}.weight" for k, v in names.items()}
    if bias:
        out.update(q_bias="attn_q.bias", k_bias="attn_k.bias", v_bias="attn_v.bias")
    return out


def tensor_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model reads (full GGUF names) -> its shape in torch order ([out, in])."""
    D, F, Dh = cfg.hidden, cfg.ffn, cfg.head_dim
    nq, nkv = cfg.n_heads * Dh, cfg.n_kv_heads * Dh
    per = {"attn_norm": (D,), "q": (nq, D), "k": (nkv, D), "v": (nkv, D), "o": (D, nq), "ffn_norm": (D,),
           "gate": (F, D), "up": (F, D), "down": (D, F), "q_norm": (Dh,), "k_norm": (Dh,), "post_attn_norm": (D,),
           "post_ffn_norm": (D,), "q_bias": (nq,), "k_bias": (nkv,), "v_bias": (nkv,)}
    shapes = {"token_embd.weight": (cfg.vocab_size, D), "output_norm.weight": (D,)}
    if not cfg.tied_head:
        shapes["output.weight"] = (cfg.vocab_size, D)
    if cfg.rope_freqs:
        shapes["rope_freqs.weight"] = (Dh // 2,)
    for i in range(cfg.n_layers):
        for key, name in layer_tensors(cfg).items():
            shapes[f"blk.{i}.{name}"] = per[key]
    return shapes


def check_shapes(cfg: ModelConfig, tensors: dict) -> None:
    """Every tensor the model needs is in the file with the shape the metadata implies."""
    missing = []
    for name, shape in tensor_shapes(cfg).items():
        t = tensors.get(name)
        if t is None:
            missing.append(name)
        elif tuple(int(x) for x in t.shape) != shape:
            raise ModelFileError(f"tensor {name} has shape {list(t.shape)} where the metadata implies {list(shape)}")
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ModelFileError(f"missing tensor {missing[0]}{more} for a {cfg.family} model of {cfg.n_layers} layers")
