"""The Gemma-3 decoder block, written once: the main model's layers, the MTP drafter's block and
training all compute with these functions.

Owns: Gemma RMSNorm, rotate-half RoPE (tables and application), the q/k/v projection with q/k
norms and RoPE, grouped-query attention over given cells, and the block's second half (output
projection, sandwich norms, residual adds, the gated-GELU MLP). Every function takes any leading
dims ([..., T, D] rows) and its weights as a dict W whose matrices carry their own op: a dense
[out, in] tensor is applied with F.linear, anything else (a PackedLinear, quant/gemv.py) is
called. Ignores: caches (callers write and gather K/V), masks' meaning (callers build them),
the fused Triton kernels (fused.py computes the same math with its own rounding points).

W's keys are LAYER_TENSORS' (gemma3.py), with the fused rows "qkv" (q|k|v) and "gate_up"
(gate|up) allowed in place of their parts: one matrix read per row group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class BlockDims:
    """The shape of one block (the main model's layers and the MTP head share it)."""

    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    query_scale: float

    def __post_init__(self) -> None:
        assert self.n_heads % self.n_kv_heads == 0, (self.n_heads, self.n_kv_heads)


def linear(w, x: torch.Tensor) -> torch.Tensor:
    """x [..., in] @ w.T: F.linear for a dense weight, the layer's own GEMV for a PackedLinear."""
    return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm over the last dim in fp32; `w` is the GGUF weight, which already holds the +1."""
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
    """x [..., T, H, D]; cos/sin [T, D] (the rows' positions)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos[:, None, :] + rot.float() * sin[:, None, :]).to(x.dtype)


def project_qkv(W: dict, d: BlockDims, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Block input h [..., T, D] at positions with RoPE rows cos/sin [T, Dh] -> q [..., T, H, Dh]
    and k, v [..., T, Hkv, Dh]: attention norm, projection, q/k norms, RoPE on q and k."""
    a = rms_norm(h, W["attn_norm"], d.eps)
    qd, kvd = d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim
    if "qkv" in W:  # one GEMV over the fused rows
        q, k, v = linear(W["qkv"], a).split([qd, kvd, kvd], dim=-1)
    else:
        q, k, v = linear(W["q"], a), linear(W["k"], a), linear(W["v"], a)
    lead = h.shape[:-1]
    q = rms_norm(q.reshape(*lead, d.n_heads, d.head_dim), W["q_norm"], d.eps)
    k = rms_norm(k.reshape(*lead, d.n_kv_heads, d.head_dim), W["k_norm"], d.eps)
    v = v.reshape(*lead, d.n_kv_heads, d.head_dim)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attend(d: BlockDims, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None,
           sdpa: bool = False) -> torch.Tensor:
    """q [..., T, H, Dh] against K/V [..., S, Hkv, Dh]; mask [T, S] bool (True = attend; None =
    all) -> [..., T, H*Dh] in q's dtype. The query heads sharing a K/V head are folded into rows
    ([..., Hkv, rep*T, Dh], head h = g*rep + r as HF's GQA), so K/V are never repeated in memory.
    sdpa: torch's fused attention (long prefill chunks); else fp32 scores and softmax."""
    T, Dh = q.shape[-3], d.head_dim
    rep, G = d.n_heads // d.n_kv_heads, d.n_kv_heads
    lead = q.shape[:-3]
    qf = q.reshape(*lead, T, G, rep, Dh).movedim(-4, -2).reshape(*lead, G, rep * T, Dh)
    Kg, Vg = K.transpose(-3, -2), V.transpose(-3, -2)  # [..., G, S, Dh]
    m = None if mask is None else mask.repeat(rep, 1)  # [rep*T, S], row r*T + t
    if sdpa:
        one = qf.dim() == 3  # the fused kernels want a batch dim
        o = F.scaled_dot_product_attention(qf[None] if one else qf, Kg[None] if one else Kg,
                                           Vg[None] if one else Vg, attn_mask=m, scale=d.query_scale)
        o = o[0] if one else o
    else:
        sc = torch.matmul(qf.float(), Kg.transpose(-1, -2).float()) * d.query_scale  # [..., G, rep*T, S]
        if m is not None:
            sc = sc.masked_fill(~m, float("-inf"))
        o = torch.matmul(torch.softmax(sc, dim=-1), Vg.float()).to(q.dtype)
    return o.reshape(*lead, G, rep, T, Dh).movedim(-2, -4).reshape(*lead, T, d.n_heads * Dh)


def mlp(W: dict, d: BlockDims, x: torch.Tensor) -> torch.Tensor:
    """The gated-GELU (tanh) MLP of normed rows x [..., D]."""
    if "gate_up" in W:
        g, u = linear(W["gate_up"], x).split([d.ffn, d.ffn], dim=-1)
    else:
        g, u = linear(W["gate"], x), linear(W["up"], x)
    return linear(W["down"], F.gelu(g, approximate="tanh") * u)


def finish(W: dict, d: BlockDims, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """The residual stream after the block, from its input h [..., D] and the attention output
    before the o-projection attn [..., H*Dh]: sandwich norms around attention and MLP."""
    h = h + rms_norm(linear(W["o"], attn), W["post_attn_norm"], d.eps)
    m = mlp(W, d, rms_norm(h, W["ffn_norm"], d.eps))
    return h + rms_norm(m, W["post_ffn_norm"], d.eps)
