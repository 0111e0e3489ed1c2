"""Batched no-cache forwards for training: the frozen main model's hidden states over [B, T] rows,
and the MTP head's first and chained draft steps with the masks inference uses.

Owns: the training-time math only (full-sequence attention with causal / sliding / sink + window
masks). It reuses the main model's weights and the head's math functions (models/), so a training
forward and an inference forward cannot drift apart. Ignores: optimisation, data, files.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.gemma3 import Gemma3, rms_norm
from ..models.mtp_drafter import MTPConfig, block_out, input_rows


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, Dh]; cos/sin [T, Dh]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos[None, :, None, :] + rot.float() * sin[None, :, None, :]).to(x.dtype)


@torch.no_grad()
def main_hidden(model: Gemma3, tokens: torch.Tensor) -> torch.Tensor:
    """tokens [B, T] (rows start at position 0) -> hidden [B, T, D] before the final norm, the
    same as Gemma3.forward's second output row by row."""
    c = model.cfg
    B, T = tokens.shape
    h = model.embed_tokens(tokens)
    pos = torch.arange(T, device=tokens.device)
    causal = pos[None, :] <= pos[:, None]
    sliding = causal & (pos[:, None] - pos[None, :] < c.sliding_window)
    for i, L in enumerate(model.layers):
        g = c.is_global(i)
        a = rms_norm(h, L["attn_norm"], c.eps)
        q = rms_norm(F.linear(a, L["q"]).view(B, T, c.n_heads, c.head_dim), L["q_norm"], c.eps)
        k = rms_norm(F.linear(a, L["k"]).view(B, T, c.n_kv_heads, c.head_dim), L["k_norm"], c.eps)
        v = F.linear(a, L["v"]).view(B, T, c.n_kv_heads, c.head_dim)
        cos, sin = model.rope[g][0][:T], model.rope[g][1][:T]
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        rep = c.n_heads // c.n_kv_heads
        qh = q.transpose(1, 2)
        kh = k.transpose(1, 2).repeat_interleave(rep, dim=1)
        vh = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=causal if g else sliding, scale=c.query_scale)
        o = o.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim)
        h = h + rms_norm(F.linear(o, L["o"]), L["post_attn_norm"], c.eps)
        m = rms_norm(h, L["ffn_norm"], c.eps)
        m = F.linear(F.gelu(F.linear(m, L["gate"]), approximate="tanh") * F.linear(m, L["up"]), L["down"])
        h = h + rms_norm(m, L["post_ffn_norm"], c.eps)
    return h


def _qkv(W, cfg: MTPConfig, x: torch.Tensor, cos, sin):
    """x [B, T, D] -> q [B, H, T, Dh], k/v [B, Hkv, T, Dh] with RoPE at the rows' positions."""
    B, T, _ = x.shape
    a = rms_norm(x, W["attn_norm"], cfg.eps)
    q = rms_norm(F.linear(a, W["q"]).view(B, T, cfg.n_heads, cfg.head_dim), W["q_norm"], cfg.eps)
    k = rms_norm(F.linear(a, W["k"]).view(B, T, cfg.n_kv_heads, cfg.head_dim), W["k_norm"], cfg.eps)
    v = F.linear(a, W["v"]).view(B, T, cfg.n_kv_heads, cfg.head_dim)
    return _rope(q, cos, sin).transpose(1, 2), _rope(k, cos, sin).transpose(1, 2), v.transpose(1, 2)


def chain_states(W, cfg: MTPConfig, rope, emb: torch.Tensor, hid: torch.Tensor, depth: int,
                 sink: int, window: int) -> list[torch.Tensor]:
    """Block output states of draft steps 1..depth for every chain start t.

    emb [B, T, D]: scaled embeddings of tokens 0..T-1; hid [B, T, D]: the main hidden (head's
    source). Chain start t (cell t) step 1 reads (h_t, token t+1); step j > 1 reads (state of step
    j-1, true token t+j) at cell t+j-1. Step j's query attends, as inference does, to committed
    step-1 rows s <= t with s < sink or s >= (t+j-1) - window, plus its own chain's earlier rows
    (cells t+1 .. t+j-1) within the window. Returns [states_j [B, Tj, D]] with Tj = T-1-(j-1)
    valid chain starts (t + j <= T - 1 so the input token exists)."""
    B, T, D = hid.shape
    n = T - 1
    rep = cfg.n_heads // cfg.n_kv_heads
    x = input_rows(W, cfg, emb[:, 1:], hid[:, :n])  # step 1 inputs at cells 0..n-1
    cos, sin = rope[0][:n], rope[1][:n]
    q, k0, v0 = _qkv(W, cfg, x, cos, sin)
    K0 = k0.repeat_interleave(rep, dim=1)  # [B, H, n, Dh]
    V0 = v0.repeat_interleave(rep, dim=1)
    t = torch.arange(n, device=hid.device)
    s = t[None, :]
    out, ks, vs = [], [], []
    for j in range(1, depth + 1):
        m = n - (j - 1)  # chain starts t in [0, m)
        if m <= 0:
            break
        tq = t[:m, None]
        p = tq + (j - 1)  # query cell
        mask = (s <= tq) & ((s < sink) | (s >= p - window))  # [m, n]
        sc = torch.matmul(q[:, :, :m].float(), K0.float().transpose(2, 3)) * cfg.query_scale
        sc = sc.masked_fill(~mask, float("-inf"))
        extra = []
        for i, (ki, vi) in enumerate(zip(ks, vs), start=2):  # chain rows of steps 2..j-1 at cell t+i-1
            e = (q[:, :, :m].float() * ki[:, :, :m].float()).sum(-1, keepdim=True) * cfg.query_scale
            if (j - i) > window:
                e = torch.full_like(e, float("-inf"))
            extra.append(e)
        if j > 1:  # the query's own row (this step's K/V at cell t+j-1)
            kj = k_cur.repeat_interleave(rep, dim=1)
            extra.append((q[:, :, :m].float() * kj.float()).sum(-1, keepdim=True) * cfg.query_scale)
        allsc = torch.cat([sc] + extra, dim=-1)
        pr = torch.softmax(allsc, dim=-1)
        o = torch.matmul(pr[..., :n], V0.float())
        vals = vs[: len(extra) - (1 if j > 1 else 0)] + ([v_cur.repeat_interleave(rep, dim=1)] if j > 1 else [])
        for c_i, vi in enumerate(vals):
            o = o + pr[..., n + c_i: n + c_i + 1] * vi[:, :, :m].float()
        o = o.to(x.dtype).transpose(1, 2).reshape(B, m, cfg.n_heads * cfg.head_dim)
        h = block_out(W, cfg, x[:, :m], o)
        out.append(h)
        if j > 1:
            ks.append(k_cur.repeat_interleave(rep, dim=1))
            vs.append(v_cur.repeat_interleave(rep, dim=1))
        if j < depth and m - 1 > 0:
            m2 = m - 1  # next step: chain start t needs token t+j+1 <= T-1
            x = input_rows(W, cfg, emb[:, j + 1: j + 1 + m2], h[:, :m2])
            cos, sin = rope[0][j: j + m2], rope[1][j: j + m2]
            q, k_cur, v_cur = _qkv(W, cfg, x, cos, sin)
    return out
