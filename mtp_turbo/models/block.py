"""The decoder block, written once over its description (arch.BlockSpec): the main model's layers
of every family, the MTP drafter's block and training all compute with these functions.

Owns: RMSNorm, rotate-half RoPE (tables and application), the q/k/v projection with its biases,
q/k norms and RoPE, grouped-query attention over given cells, and the block's second half (output
projection, residual adds with Gemma's sandwich norms or plain pre-norm, the gated MLP: GeGLU or
SwiGLU). Every function takes any leading dims ([..., T, D] rows) and its weights as a dict W
whose matrices carry their own op: a dense [out, in] tensor is applied with F.linear, anything
else (a PackedLinear, quant/gemv.py) is called. Ignores: caches (callers write and gather K/V),
masks' meaning (callers build them), the fused Triton kernels (fused.py computes the same math
with its own rounding points).

W's keys are arch.layer_tensors', with the fused rows "qkv" (q|k|v, and "qkv_bias") and "gate_up"
(gate|up) allowed in place of their parts: one matrix read per row group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..quant.frag_matrix import FragMatrix
from ..quant.planes import FusedWeight

from .arch import GELU_TANH, BlockSpec


def linear(w, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] @ w.T (+ bias, added in fp32 before the rounding): F.linear for a dense weight,
    the layer's own GEMV for a PackedLinear; a matrix held as the file's bytes (quant/planes.py,
    quant/frag_matrix.py) dequantized for the call (the loader's values: the torch forward off the fused step's path)."""
    if isinstance(w, (FusedWeight, FragMatrix)):
        w = w.dense(x.dtype)
    if bias is None:
        return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)
    y = F.linear(x, w).float() if isinstance(w, torch.Tensor) else w(x, out_dtype=torch.float32)
    return (y + bias.float()).to(x.dtype)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim in fp32 (the GGUF weight; Gemma's files already hold its +1)."""
    if x.dtype == torch.float32 and w.dtype == torch.float32 and not x.is_cuda:  # the same math in one op
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.float()).to(x.dtype)


def rope_tables(base: float, head_dim: int, n_pos: int, device, linear_factor: float = 1.0,
                freq_factors: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [n_pos, head_dim] for rotate-half (NEOX) RoPE, computed in fp32 like transformers;
    linear_factor divides the frequencies (linear scaling), as do freq_factors [head_dim / 2] (a
    file's rope_freqs: Llama-3's scaling)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    if linear_factor != 1.0:
        inv = inv / linear_factor
    if freq_factors is not None:
        inv = inv / freq_factors.to(device, torch.float32)
    t = torch.arange(n_pos, device=device, dtype=torch.float32)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, H, D]; cos/sin [T, D] (the rows' positions)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos[:, None, :] + rot.float() * sin[:, None, :]).to(x.dtype)


def project_qkv(W: dict, d: BlockSpec, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Block input h [..., T, D] at positions with RoPE rows cos/sin [T, Dh] -> q [..., T, H, Dh]
    and k, v [..., T, Hkv, Dh]: attention norm, projection (+ biases), q/k norms, RoPE on q and k."""
    a = rms_norm(h, W["attn_norm"], d.eps)
    qd, kvd = d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim
    if "qkv" in W and d.qk_norm and h.dtype == torch.float32 and not h.is_cuda:
        return _project_qk_rows(W, d, linear(W["qkv"], a, W.get("qkv_bias")), h.shape[:-1], cos, sin)
    if "qkv" in W:  # one GEMV over the fused rows
        q, k, v = linear(W["qkv"], a, W.get("qkv_bias")).split([qd, kvd, kvd], dim=-1)
    else:
        q, k, v = (linear(W[n], a, W.get(f"{n}_bias")) for n in ("q", "k", "v"))
    lead = h.shape[:-1]
    q = q.reshape(*lead, d.n_heads, d.head_dim)
    k = k.reshape(*lead, d.n_kv_heads, d.head_dim)
    if d.qk_norm:
        q, k = rms_norm(q, W["q_norm"], d.eps), rms_norm(k, W["k_norm"], d.eps)
    v = v.reshape(*lead, d.n_kv_heads, d.head_dim)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def _project_qk_rows(W: dict, d: BlockSpec, y: torch.Tensor, lead, cos: torch.Tensor, sin: torch.Tensor):
    """project_qkv's tail on the CPU in float32: the q and k heads of the fused rows y normed and
    rotated as one tensor (q|k heads: one norm, one rotation, with sin's first half negated instead
    of x's), the same values bit for bit as the per-part path in ~8 ops instead of ~20 (the CPU's
    eager step is bound by op count: bench/RESULTS.md session 28)."""
    H, G, Dh = d.n_heads, d.n_kv_heads, d.head_dim
    half = Dh // 2
    qk = F.rms_norm(y[..., : (H + G) * Dh].reshape(*lead, H + G, Dh), (Dh,), None, d.eps)
    qk[..., :H, :].mul_(W["q_norm"])
    qk[..., H:, :].mul_(W["k_norm"])
    rs = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)[:, None, :]  # (-x2) * s == x2 * (-s), exactly
    qk = qk * cos[:, None, :] + qk.roll(half, -1) * rs
    return qk[..., :H, :], qk[..., H:, :], y[..., (H + G) * Dh:].reshape(*lead, G, Dh)


def attend(d: BlockSpec, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None,
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


def mlp(W: dict, d: BlockSpec, x: torch.Tensor) -> torch.Tensor:
    """The gated MLP of normed rows x [..., D]: GeGLU (tanh GELU) or SwiGLU (SiLU) per d."""
    if "gate_up" in W:
        g, u = linear(W["gate_up"], x).split([d.ffn, d.ffn], dim=-1)
    else:
        g, u = linear(W["gate"], x), linear(W["up"], x)
    act = F.gelu(g, approximate="tanh") if d.activation == GELU_TANH else F.silu(g)
    return linear(W["down"], act * u)


def finish(W: dict, d: BlockSpec, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """The residual stream after the block, from its input h [..., D] and the attention output
    before the o-projection attn [..., H*Dh]: sandwich norms around attention and MLP (Gemma) or
    plain residual adds (pre-norm)."""
    o = linear(W["o"], attn)
    h = h + (rms_norm(o, W["post_attn_norm"], d.eps) if d.sandwich_norms else o)
    m = mlp(W, d, rms_norm(h, W["ffn_norm"], d.eps))
    return h + (rms_norm(m, W["post_ffn_norm"], d.eps) if d.sandwich_norms else m)
