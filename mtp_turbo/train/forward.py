"""Batched forwards for training: the frozen main model's hidden states over [B, T] rows (with an
optional batched KV cache, for sampling the main model's own continuations), and the MTP head's
first and chained draft steps with the attention pattern inference uses.

Owns: the training-time math only. The head's attention is banded: query blocks of `block` rows
read the sink cells plus a band of window + block cells, so memory grows as T * (sink + window +
block), not T^2, and 2k-8k-token rows fit. Cells may carry *virtual* positions (a gap after the
sink, `virtual_positions`): RoPE and the sink + window rule then see the sink as far away as in a
long prompt while the rows stay short. It reuses the main model's weights and the head's math
functions (models/), so a training forward and an inference forward cannot drift apart.
Ignores: optimisation, data, files.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..models.block import attend, finish, project_qkv
from ..models.decoder import Decoder
from ..models.mtp_head import MTPConfig, input_rows

NEG = -1e30  # finite "masked": a fully masked padding row gives a uniform softmax, never NaN


@dataclass
class BatchKV:
    """K/V of B rows for every main layer: k[i], v[i] [B, capacity, Hkv, Dh] (cell = position)."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @classmethod
    def empty(cls, model: Decoder, batch: int, capacity: int) -> "BatchKV":
        c = model.cfg
        shape = (batch, capacity, c.n_kv_heads, c.head_dim)
        mk = lambda: torch.zeros(shape, device=model.device, dtype=model.dtype)  # noqa: E731
        return cls([mk() for _ in range(c.n_layers)], [mk() for _ in range(c.n_layers)])


@torch.no_grad()
def main_hidden(model: Decoder, tokens: torch.Tensor, pos0: int = 0, cache: BatchKV | None = None) -> torch.Tensor:
    """tokens [B, T] at positions pos0.. -> hidden [B, T, D] before the final norm, the same as
    Decoder.forward's second output row by row. Without a cache pos0 must be 0 (rows start at
    position 0); with one, the rows' K/V are written at cells [pos0, pos0+T) and attention reads
    cells [0, pos0+T)."""
    c = model.cfg
    B, T = tokens.shape
    assert cache is not None or pos0 == 0
    h = model.embed_tokens(tokens)
    qp = torch.arange(pos0, pos0 + T, device=tokens.device)
    kp = torch.arange(0, pos0 + T, device=tokens.device)
    causal = kp[None, :] <= qp[:, None]  # [T, S]
    masks = {True: causal, False: causal & (qp[:, None] - kp[None, :] < c.sliding_window)}
    for i, L in enumerate(model.layers):
        g = c.is_global(i)
        cos, sin = model.rope[g][0][pos0: pos0 + T], model.rope[g][1][pos0: pos0 + T]
        q, k, v = project_qkv(L, c.block, h, cos, sin)  # [B, T, H | Hkv, Dh]
        if cache is not None:
            cache.k[i][:, pos0: pos0 + T] = k
            cache.v[i][:, pos0: pos0 + T] = v
            k, v = cache.k[i][:, : pos0 + T], cache.v[i][:, : pos0 + T]
        h = finish(L, c.block, h, attend(c.block, q, k, v, masks[g], sdpa=True))
    return h


def virtual_positions(n: int, sink: int, offset: int, device=None) -> torch.Tensor:
    """Positions [n] of cells 0..n-1 when `offset` unseen cells sit right after the sink: cell i
    is at position i for i < sink, i + offset otherwise. (offset 0 = the plain positions.)"""
    i = torch.arange(n, device=device)
    return torch.where(i < sink, i, i + offset)


def committed_mask(pos: torch.Tensor, t: torch.Tensor, s: torch.Tensor, j: int, sink: int, window: int) -> torch.Tensor:
    """The inference read rule for committed cells (DraftCells.read_cells with everything up to the
    chain start committed): chain start t (its query at position pos[t] + j - 1 on step j) reads
    cell s iff s <= t and (s < sink or pos[s] >= pos[t] + j - 1 - window). t, s broadcast; entries
    of s outside [0, len(pos)) are padding (never read). Assumes virtual positions keep the sink
    cells at their own index (gap after the sink)."""
    n = pos.shape[0]
    ok = (s >= 0) & (s < n)
    sc = s.clamp(0, n - 1)
    tc = t.clamp(0, n - 1)
    return ok & (s <= t) & ((sc < sink) | (pos[sc] >= pos[tc] + (j - 1) - window))


def _qkv(W, cfg: MTPConfig, x: torch.Tensor, cos, sin):
    """x [B, T, D] -> q [B, H, T, Dh], k/v [B, Hkv, T, Dh] with RoPE at the rows' positions."""
    q, k, v = project_qkv(W, cfg.block, x, cos, sin)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _blocked(x: torch.Tensor, m: int, nb: int, C: int) -> torch.Tensor:
    """[B, G, m, Dh] rows -> [B, G, nb, C, Dh] (zero-padded to nb*C rows)."""
    return F.pad(x[:, :, :m], (0, 0, 0, nb * C - m)).view(x.shape[0], x.shape[1], nb, C, x.shape[-1])


def chain_states(W, cfg: MTPConfig, rope, emb: torch.Tensor, hid: torch.Tensor, depth: int,
                 sink: int, window: int, pos: torch.Tensor | None = None, block: int = 256) -> list[torch.Tensor]:
    """Block output states of draft steps 1..depth for every chain start t.

    emb [B, T, D]: scaled embeddings of tokens 0..T-1; hid [B, T, D]: the main hidden (head's
    source); rope: the head's full (cos, sin) tables; pos [T-1]: cell positions (default 0..T-2;
    see virtual_positions). Chain start t (cell t) step 1 reads (h_t, token t+1); step j > 1 reads
    (state of step j-1, true token t+j) at position pos[t] + j - 1. Step j's query attends, as
    inference does, to committed step-1 rows per `committed_mask`, plus its own chain's earlier
    rows within the window. Returns [states_j [B, Tj, D]] with Tj = T-1-(j-1) valid chain starts
    (t + j <= T - 1 so the input token exists)."""
    B, T, D = hid.shape
    n = T - 1
    dev = hid.device
    G, rep, Dh = cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads, cfg.head_dim
    pos = torch.arange(n, device=dev) if pos is None else pos.to(dev)
    assert pos.shape == (n,) and (n < 2 or bool((pos[1:] > pos[:-1]).all()))
    assert bool((pos[: min(sink, n)] == torch.arange(min(sink, n), device=dev)).all()), "sink cells must keep their index"
    C = max(1, min(block, n))
    nb = -(-n // C)
    Wb = window + C  # band width: query block b reads cells [b*C - window, b*C + C)
    S = min(sink, n)
    x = input_rows(W, cfg, emb[:, 1:], hid[:, :n])  # step 1 inputs at cells 0..n-1
    cos, sin = rope[0][pos], rope[1][pos]
    q, k0, v0 = _qkv(W, cfg, x, cos, sin)
    # banded committed keys: [B, G, nb, Dh, Wb] views of the front/back padded K/V
    Kp = F.pad(k0, (0, 0, window, nb * C - n))
    Vp = F.pad(v0, (0, 0, window, nb * C - n))
    Kband = Kp.unfold(2, Wb, C).float()  # [B, G, nb, Dh, Wb]
    Vband = Vp.unfold(2, Wb, C).float()
    Ks, Vs = k0[:, :, :S].float(), v0[:, :, :S].float()  # [B, G, S, Dh]
    tq = (torch.arange(nb, device=dev)[:, None] * C + torch.arange(C, device=dev)[None, :])  # [nb, C]
    sband = tq[:, :1] - window + torch.arange(Wb, device=dev)[None, :]  # [nb, Wb] cell of band column
    out, chain_k, chain_v = [], [], []
    k_cur = v_cur = None
    for j in range(1, depth + 1):
        m = n - (j - 1)  # chain starts t in [0, m)
        if m <= 0:
            break
        tqm = torch.where(tq < m, tq, torch.full_like(tq, n))  # padding query rows -> no valid key
        q6 = _blocked(q, m, nb, C).view(B, G, rep, nb, C, Dh).permute(0, 1, 3, 2, 4, 5).float()  # [B,G,nb,rep,C,Dh]
        m_band = committed_mask(pos, tqm[:, :, None], sband[:, None, :], j, sink, window)  # [nb, C, Wb]
        m_band = m_band & (sband[:, None, :] >= sink)  # sink cells come from the sink part only
        parts = [torch.einsum("bgnrcd,bgndw->bgnrcw", q6, Kband).masked_fill(~m_band[:, None], NEG)]
        if S:
            m_sink = torch.arange(S, device=dev)[None, None, :] <= tqm[:, :, None]  # [nb, C, S]
            parts.insert(0, torch.einsum("bgnrcd,bgsd->bgnrcs", q6, Ks).masked_fill(~m_sink[:, None], NEG))
        # the chain's own rows: steps 2..j-1 at cells t+1..t+j-2, then this step's row at t+j-1
        ck = chain_k + ([k_cur] if j > 1 else [])
        cv = chain_v + ([v_cur] if j > 1 else [])
        dist = list(range(j - 2, -1, -1))  # query cell minus chain cell, per chain row
        for kk, d in zip(ck, dist):
            kb = _blocked(kk, m, nb, C)[:, :, :, None].float()  # [B, G, nb, 1, C, Dh]
            e = (q6 * kb).sum(-1, keepdim=True)
            parts.append(e if d <= window else torch.full_like(e, NEG))
        sc = torch.cat(parts, dim=-1) * cfg.query_scale
        pr = torch.softmax(sc, dim=-1)
        o = 0
        c0 = 0
        if S:
            o = torch.einsum("bgnrcs,bgsd->bgnrcd", pr[..., :S], Vs)
            c0 = S
        o = o + torch.einsum("bgnrcw,bgndw->bgnrcd", pr[..., c0: c0 + Wb], Vband)
        c0 += Wb
        for i, vv in enumerate(cv):
            o = o + pr[..., c0 + i: c0 + i + 1] * _blocked(vv, m, nb, C)[:, :, :, None].float()
        # [B, G, nb, rep, C, Dh] -> [B, nb*C, H*Dh] with head h = g*rep + r
        o = o.permute(0, 2, 4, 1, 3, 5).reshape(B, nb * C, cfg.n_heads * Dh)[:, :m].to(x.dtype)
        h = finish(W, cfg.block, x[:, :m], o)
        out.append(h)
        if j > 1:
            chain_k.append(k_cur)
            chain_v.append(v_cur)
        if j < depth and m - 1 > 0:
            m2 = m - 1  # next step: chain start t needs token t+j+1 <= T-1
            x = input_rows(W, cfg, emb[:, j + 1: j + 1 + m2], h[:, :m2])
            p = pos[:m2] + j  # chain cell of step j+1 sits j cells after its start
            q, k_cur, v_cur = _qkv(W, cfg, x, rope[0][p], rope[1][p])
            chain_k = [c[:, :, :m2] for c in chain_k]
            chain_v = [c[:, :, :m2] for c in chain_v]
    return out
