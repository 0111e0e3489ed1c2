"""Gemma-3 main model: configuration from GGUF metadata, weights, and one forward for any rows.

Owns: the math of the Gemma-3 decoder (embedding scale, sliding-window and global layers with
their two RoPE bases, q/k norms, GELU-tanh MLP, sandwich norms, tied LM head).
Ignores: cache bookkeeping (cache/kv.py owns lengths, rollback, sessions), sampling, speculation.

One forward takes T new rows at absolute positions `pos[T]` (a prefill chunk, a 1-row decode, a
k+1-row verify) and writes their K/V into the static cache at cell = position. Attention reads the
cells named by a `key_pos` vector, so the same code serves the eager prefill path (python bounds)
and the captured decode/verify path (static shapes, positions live on the device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ModelFileError

SUPPORTED_ARCHS = ("gemma3",)


@dataclass(frozen=True)
class Gemma3Config:
    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_global: float
    rope_local: float
    sliding_window: int
    sliding_pattern: int  # every sliding_pattern-th layer is global
    query_scale: float
    context_length: int

    @classmethod
    def from_metadata(cls, meta: dict, vocab_size: int) -> "Gemma3Config":
        arch = meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ModelFileError(f"unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")

        def get(key, default=None):
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise ModelFileError(f"GGUF metadata lacks {arch}.{key}")
            return v

        head_dim = int(get("attention.key_length", 256))
        return cls(
            vocab_size=vocab_size,
            hidden=int(get("embedding_length")),
            n_layers=int(get("block_count")),
            n_heads=int(get("attention.head_count")),
            n_kv_heads=int(get("attention.head_count_kv")),
            head_dim=head_dim,
            ffn=int(get("feed_forward_length")),
            eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_global=float(get("rope.freq_base", 1_000_000.0)),
            # Gemma-3 keeps 10k for local layers; GGUF has no key for it.
            rope_local=10_000.0,
            sliding_window=int(get("attention.sliding_window", 512)),
            sliding_pattern=6,
            query_scale=head_dim**-0.5,  # query_pre_attn_scalar = head_dim for the released sizes
            context_length=int(get("context_length", 32768)),
        )

    def is_global(self, layer: int) -> bool:
        return (layer + 1) % self.sliding_pattern == 0


# GGUF tensor name per layer weight (llama.cpp's names for gemma3).
LAYER_TENSORS = {
    "attn_norm": "attn_norm",
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "q_norm": "attn_q_norm",
    "k_norm": "attn_k_norm",
    "o": "attn_output",
    "post_attn_norm": "post_attention_norm",
    "ffn_norm": "ffn_norm",
    "gate": "ffn_gate",
    "up": "ffn_up",
    "down": "ffn_down",
    "post_ffn_norm": "post_ffw_norm",
}


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm in fp32; `w` is the GGUF weight, which already holds the +1."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.float()).to(x.dtype)


def rope_tables(base: float, head_dim: int, n_pos: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [n_pos, head_dim] for rotate-half (NEOX) RoPE, computed in fp32 like transformers."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    t = torch.arange(n_pos, device=device, dtype=torch.float32)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos/sin [T, D]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos[:, None, :] + rot.float() * sin[:, None, :]).to(x.dtype)


class Gemma3:
    """Weights plus the forward. Linear weights are [out, in] dense tensors in `dtype`."""

    def __init__(self, cfg: Gemma3Config, weights: dict[str, torch.Tensor], device, dtype):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.embed = weights["token_embd"]  # [V, D], also the tied LM head
        self.out_norm = weights["output_norm"]
        self.layers = [
            {k: weights[f"blk.{i}.{name}"] for k, name in LAYER_TENSORS.items()} for i in range(cfg.n_layers)
        ]
        n_pos = cfg.context_length
        self.rope = {
            True: rope_tables(cfg.rope_global, cfg.head_dim, n_pos, self.device),
            False: rope_tables(cfg.rope_local, cfg.head_dim, n_pos, self.device),
        }
        self.embed_scale = torch.tensor(math.sqrt(cfg.hidden), dtype=dtype)  # rounded like HF's

    # ---- pieces -------------------------------------------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [T] -> [T, D] scaled embedding."""
        return self.embed[tokens] * self.embed_scale.to(self.embed.device)

    def lm_head(self, h_normed: torch.Tensor) -> torch.Tensor:
        """[T, D] (after the final norm) -> fp32 logits [T, V]."""
        return F.linear(h_normed, self.embed).float()

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.out_norm, self.cfg.eps)

    def attention(self, i: int, x: torch.Tensor, pos: torch.Tensor, kv, key_pos: torch.Tensor) -> torch.Tensor:
        """x [T, D] normed input rows at absolute positions pos [T]; key_pos [S] the cells to read
        (entries < 0 are padding; None = every cell of the cache). Writes this layer's K/V at cells pos, then attends."""
        c, L = self.cfg, self.layers[i]
        T = x.shape[0]
        q = F.linear(x, L["q"]).view(T, c.n_heads, c.head_dim)
        k = F.linear(x, L["k"]).view(T, c.n_kv_heads, c.head_dim)
        v = F.linear(x, L["v"]).view(T, c.n_kv_heads, c.head_dim)
        q = rms_norm(q, L["q_norm"], c.eps)
        k = rms_norm(k, L["k_norm"], c.eps)
        is_global = c.is_global(i)
        cos_t, sin_t = self.rope[is_global]
        cos, sin = cos_t[pos], sin_t[pos]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        kv.write(i, pos, k, v)
        if key_pos is None:  # every cell (captured global layers): no gather copy
            K, V = kv.k[i], kv.v[i]  # [S = capacity, Hkv, Dh]
            key_pos = kv.cell_ids
        else:
            K = kv.k[i][key_pos.clamp(min=0)]  # [S, Hkv, Dh]
            V = kv.v[i][key_pos.clamp(min=0)]
        # mask [T, S]: causal, inside the window for sliding layers, padding excluded
        qp = pos[:, None]
        kp = key_pos[None, :]
        mask = (kp >= 0) & (kp <= qp)
        if not is_global:
            mask = mask & (qp - kp < c.sliding_window)
        rep = c.n_heads // c.n_kv_heads
        qh = q.transpose(0, 1)  # [H, T, Dh]
        Kh = K.transpose(0, 1).repeat_interleave(rep, dim=0)  # [H, S, Dh]
        Vh = V.transpose(0, 1).repeat_interleave(rep, dim=0)
        if x.is_cuda:
            o = F.scaled_dot_product_attention(
                qh.unsqueeze(0), Kh.unsqueeze(0), Vh.unsqueeze(0), attn_mask=mask, scale=c.query_scale
            )[0]  # [H, T, Dh]
        else:  # CPU SDPA with a mask is slow for few rows; plain math is exact and fast here
            sc = torch.matmul(qh, Kh.transpose(1, 2)) * c.query_scale  # [H, T, S]
            sc = sc.masked_fill(~mask, float("-inf"))
            o = torch.matmul(torch.softmax(sc, dim=-1), Vh)
        o = o.transpose(0, 1).reshape(T, c.n_heads * c.head_dim)
        return F.linear(o, L["o"])

    def mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        L = self.layers[i]
        g = F.gelu(F.linear(x, L["gate"]), approximate="tanh")
        return F.linear(g * F.linear(x, L["up"]), L["down"])

    def key_positions(self, is_global: bool, pos0: int, T: int) -> torch.Tensor:
        """Cells an eager forward of rows [pos0, pos0+T) must read in a global or sliding layer."""
        start = 0 if is_global else max(0, pos0 - self.cfg.sliding_window + 1)
        return torch.arange(start, pos0 + T, device=self.device)

    # ---- whole forward ------------------------------------------------------------------------
    def forward_hidden(self, tokens: torch.Tensor, pos: torch.Tensor, kv, key_pos: dict[bool, torch.Tensor]) -> torch.Tensor:
        """tokens [T], pos [T] absolute positions; key_pos[is_global] -> [S] cells to read.
        Returns the last hidden state [T, D] before the final norm."""
        c = self.cfg
        h = self.embed_tokens(tokens)
        for i in range(c.n_layers):
            L = self.layers[i]
            a = self.attention(i, rms_norm(h, L["attn_norm"], c.eps), pos, kv, key_pos[c.is_global(i)])
            h = h + rms_norm(a, L["post_attn_norm"], c.eps)
            m = self.mlp(i, rms_norm(h, L["ffn_norm"], c.eps))
            h = h + rms_norm(m, L["post_ffn_norm"], c.eps)
        return h

    def forward(self, tokens: torch.Tensor, pos0: int, kv) -> tuple[torch.Tensor, torch.Tensor]:
        """Eager forward of T rows starting at absolute position pos0 (python int).
        Returns (logits [T, V] fp32, hidden [T, D] before the final norm)."""
        T = int(tokens.shape[0])
        assert T >= 1 and pos0 >= 0
        if pos0 + T > kv.capacity:
            raise AssertionError(f"forward past the cache: {pos0}+{T} > {kv.capacity}")
        pos = torch.arange(pos0, pos0 + T, device=self.device)
        key_pos = {g: self.key_positions(g, pos0, T) for g in (False, True)}
        h = self.forward_hidden(tokens, pos, kv, key_pos)
        return self.lm_head(self.final_norm(h)), h
