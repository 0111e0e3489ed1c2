"""The sampler chain: logits + penalty counts -> probabilities.

Owns: the math of every stage (top-k, penalties, temperature, min-p, top-p, temp-0 argmax), the
penalty-window counts, and `sample_dist`, THE function plain sampling and speculative verification
share (so they cannot drift). Ignores: drawing (draw.py), random numbers (rng.py), speculation.

Everything is vectorised over rows, stays on the logits' device and never syncs with the host
(no `.item()`, no data-dependent Python branches), so it can live inside a captured CUDA graph.

Definitions (stage by stage; masked tokens carry logit -inf and end with probability exactly 0):
- top-k: keep the k largest logits. Ties at the k-th value are broken toward the LOWEST token id,
  so exactly min(k, V) tokens survive, identically on every device. Every later stage maps -inf to
  -inf, so from here on the chain works on the k survivors only (gathered, then scattered back):
  this is what makes the full chain cheap at V = 262144.
- penalties (llama.cpp): for tokens with count c > 0 in the row's window:
  repeat r: l > 0 -> l / r, else l * r; then l -= c * frequency + presence.
- temperature T: l / T.
- min-p: keep p >= min_p * max(p), p = softmax of the current logits.
- top-p: keep the smallest set of highest-probability tokens whose mass reaches top_p; the token
  that crosses the threshold is kept (llama.cpp). Tokens tied in probability with that crossing
  token are all kept (the rule is then independent of sort order, hence device-independent).
  The cumulative mass is accumulated in float64.
- temp 0 (greedy): one-hot at the argmax of the logits after the penalties (if "penalties" is in
  the order); the other stages cannot change a greedy choice and are skipped; ties -> lowest id.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .config import SamplerConfig

__all__ = ["probs_from_logits", "survivor_probs", "sample_dist", "penalty_counts", "window_counts", "apply_penalties",
           "final_logits", "cumsum_rows"]

_NEG_INF = float("-inf")


# ----------------------------------------------------------------------------- counts

def penalty_counts(tokens: Tensor, rows: int, vocab: int, last_n: int, dtype=torch.float32) -> Tensor:
    """Counts [rows, vocab] for the prefix rows of `tokens` [N].

    Row r's history is tokens[: N - (rows - 1) + r]; its window is the last `last_n` tokens of it
    (-1 = all, 0 = none). Built with one scatter_add on the tokens' device.
    """
    assert tokens.dim() == 1, "tokens must be 1-D [N]"
    n = tokens.shape[0]
    assert n >= rows - 1, f"need at least rows - 1 = {rows - 1} tokens, got {n}"
    counts = torch.zeros(rows, vocab, dtype=dtype, device=tokens.device)
    if last_n == 0 or n == 0:
        return counts
    # Only the union of all windows matters: [N - rows + 1 - last_n, N).
    start = 0 if last_n < 0 else max(0, n - rows + 1 - last_n)
    tail = tokens[start:]  # [M]
    j = torch.arange(start, n, device=tokens.device)  # absolute index of each tail token
    ends = (n - rows + 1) + torch.arange(rows, device=tokens.device)  # [R] history lengths
    inside = j[None, :] < ends[:, None]  # [R, M]
    if last_n > 0:
        inside &= j[None, :] >= (ends - last_n)[:, None]
    counts.scatter_add_(1, tail[None, :].expand(rows, -1), inside.to(dtype))
    return counts


def window_counts(histories: Tensor, lengths: Tensor, vocab: int, last_n: int,
                  dtype=torch.float32) -> Tensor:
    """Batched counts [S, vocab] for S independent padded histories [S, L] of `lengths` [S].

    Same window rule as `penalty_counts` (last `last_n` tokens of each history; -1 all, 0 none);
    used to push many independent sequences through `probs_from_logits` at once.
    """
    assert histories.dim() == 2 and lengths.shape == histories.shape[:1]
    s, l = histories.shape
    counts = torch.zeros(s, vocab, dtype=dtype, device=histories.device)
    if last_n == 0 or l == 0:
        return counts
    j = torch.arange(l, device=histories.device)[None, :]
    inside = j < lengths[:, None]
    if last_n > 0:
        inside &= j >= (lengths - last_n)[:, None]
    counts.scatter_add_(1, histories.clamp(0, vocab - 1), inside.to(dtype))
    return counts


# ----------------------------------------------------------------------------- stages

def apply_penalties(l: Tensor, c: Tensor, cfg: SamplerConfig) -> Tensor:
    seen = c > 0
    if cfg.repeat_penalty != 1.0:
        r = cfg.repeat_penalty
        l = torch.where(seen, torch.where(l > 0, l / r, l * r), l)
    if cfg.frequency_penalty != 0.0 or cfg.presence_penalty != 0.0:
        l = l - (c * cfg.frequency_penalty + seen.to(l.dtype) * cfg.presence_penalty)
    return l


def cumsum_rows(x: Tensor) -> Tensor:
    """torch.cumsum(x, dim=1) of [R, N], on the CPU a row at a time: the same values (each row's
    scan is sequential either way), but torch's CPU scan of several long rows strides across them:
    3 rows of 262144 took 3.6 ms (float64) against 0.15 ms a row (bench/RESULTS.md session 31)."""
    if x.shape[0] == 1 or x.device.type != "cpu":
        return torch.cumsum(x, dim=1)
    out = torch.empty(x.shape, dtype=torch.cumsum(x[:1, :1], dim=1).dtype, device=x.device)
    for r in range(x.shape[0]):
        torch.cumsum(x[r], 0, out=out[r])
    return out


def _top_k_keep(l: Tensor, k: int) -> Tensor:
    """Bool [R, M]: the k largest logits, ties at the k-th value -> lowest ids (exactly k kept)."""
    kth = torch.topk(l, k, dim=1).values[:, -1:]  # [R, 1] the k-th largest value (well defined)
    above = l > kth
    tied = l == kth
    room = k - above.sum(dim=1, keepdim=True)  # how many tied tokens still fit
    return above | (tied & (cumsum_rows(tied.to(torch.int32)) <= room))


def _top_k_cols(l: Tensor, k: int) -> Tensor:
    """Column indices [R, k] (any order) of the set _top_k_keep keeps. On the CPU from one topk:
    its values above the k-th are all kept, and the rest are the lowest ids holding the k-th value
    (a row's ties at the boundary are common: the head's logits are bf16 values), found by one
    comparison a row (shapes that depend on the data: the CPU only). Elsewhere from the mask (no
    host sync: capturable). ~5 ms -> ~1 ms for 3 rows of 262144 (bench/RESULTS.md session 31)."""
    if l.device.type == "cpu":
        vals, cols = torch.topk(l, k, dim=1)
        out = torch.empty_like(cols)
        for r in range(l.shape[0]):
            kth = vals[r, -1]
            above = cols[r][vals[r] > kth]
            out[r] = torch.cat([above, torch.nonzero(l[r] == kth).squeeze(1)[: k - above.shape[0]]])
        return out
    keep = _top_k_keep(l, k)
    return torch.topk(keep.to(torch.int8), k, dim=1, sorted=False).indices  # exactly k kept


def _min_p_keep(l: Tensor, min_p: float) -> Tensor:
    p = torch.softmax(l, dim=1)
    return p >= min_p * p.max(dim=1, keepdim=True).values


def _top_p_keep(l: Tensor, top_p: float) -> Tensor:
    p = torch.softmax(l.to(torch.float64), dim=1)
    ps = torch.sort(p, dim=1, descending=True).values
    before = torch.cumsum(ps, dim=1) - ps  # mass strictly above each sorted token
    n_keep = (before < top_p).sum(dim=1, keepdim=True)  # >= 1 (before[0] = 0)
    crossing = ps.gather(1, n_keep - 1)  # probability of the token that reaches top_p
    return p >= crossing


# ----------------------------------------------------------------------------- chain

def _chain(logits: Tensor, counts: Tensor | None, cfg: SamplerConfig) -> tuple[Tensor, Tensor | None]:
    """Non-greedy chain body: (final logits [R, M] with -inf where masked, column ids [R, M] or
    None when M = V in token order). probs_from_logits is softmax(l) scattered back to [R, V]."""
    l = logits
    pen = counts is not None and cfg.uses_penalties and "penalties" in cfg.order
    c = counts.to(logits.dtype) if pen else None
    ids = None  # [R, K] token ids of the compacted columns once top-k has run
    for stage in cfg.order:
        if stage == "top_k":
            if 0 < cfg.top_k < l.shape[1]:
                cols = _top_k_cols(l, cfg.top_k)  # gathered (their order is set by survivor_probs)
                l = l.gather(1, cols)
                ids = cols if ids is None else ids.gather(1, cols)
                if c is not None:
                    c = c.gather(1, cols)
        elif stage == "penalties":
            if pen:
                l = apply_penalties(l, c, cfg)
        elif stage == "temperature":
            if cfg.temperature != 1.0:
                l = l / cfg.temperature
        elif stage == "min_p":
            if cfg.min_p > 0.0:
                l = l.masked_fill(~_min_p_keep(l, cfg.min_p), _NEG_INF)
        elif stage == "top_p":
            if cfg.top_p < 1.0:
                l = l.masked_fill(~_top_p_keep(l, cfg.top_p), _NEG_INF)
    return l, ids


def survivor_probs(logits: Tensor, counts: Tensor | None, cfg: SamplerConfig) -> tuple[Tensor, Tensor | None]:
    """probs_from_logits without the scatter back to [R, V]: (probabilities [R, M], their token ids
    [R, M] ascending), or (p [R, V], None) where no top-k stage compacted the columns. What a draw
    over few survivors reads (draw.draw_survivors) instead of passes over the vocabulary."""
    assert logits.dim() == 2, "logits must be [R, V]"
    assert counts is None or counts.shape == logits.shape, "counts must match logits [R, V]"
    pen = counts is not None and cfg.uses_penalties and "penalties" in cfg.order

    if cfg.greedy:
        l = apply_penalties(logits, counts.to(logits.dtype), cfg) if pen else logits
        best = torch.argmax(l, dim=1, keepdim=True)  # first maximal index = lowest id on ties
        return torch.ones(best.shape, dtype=logits.dtype, device=logits.device), best

    l, ids = _chain(logits, counts, cfg)
    if ids is not None:  # token order, as a draw walks them (softmax then sums in that order too)
        ids, order = torch.sort(ids, dim=1)
        l = l.gather(1, order)
    return torch.softmax(l, dim=1), ids


def probs_from_logits(logits: Tensor, counts: Tensor | None, cfg: SamplerConfig) -> Tensor:
    """Probabilities [R, V] from logits [R, V] and penalty-window counts [R, V] (or None = none).

    Runs cfg.order; masked tokens get exactly 0. Computes in the logits' dtype (float32 in the
    engine; float64 works too and is used by the exact checks). No host sync.
    """
    p, ids = survivor_probs(logits, counts, cfg)
    if ids is None:
        return p
    return torch.zeros(logits.shape, dtype=p.dtype, device=p.device).scatter_(1, ids, p)


def final_logits(logits: Tensor, counts: Tensor | None, cfg: SamplerConfig) -> Tensor:
    """The chain's last logits [R, V] before its final softmax: -inf where a stage masked the token
    (probs_from_logits = softmax of these, up to the last bit). Greedy: 0 at the penalised argmax,
    -inf elsewhere. The reference the fused kernels are checked against (fused.py)."""
    if cfg.greedy:
        p = probs_from_logits(logits, counts, cfg)
        return torch.where(p > 0, 0.0, _NEG_INF).to(logits.dtype)
    l, ids = _chain(logits, counts, cfg)
    if ids is None:
        return l
    out = torch.full_like(logits, _NEG_INF)
    return out.scatter_(1, ids, l)


def sample_dist(logits: Tensor, tokens: Tensor, cfg: SamplerConfig) -> Tensor:
    """Probabilities [R, V] for logits [R, V] whose row r follows history tokens[: N - (R-1) + r].

    Plain decoding: R = 1, tokens = the whole history. Verifying k drafts: tokens = history ++
    [d1..dk], R = k + 1, and row i's penalties see history ++ d1..di.
    """
    assert logits.dim() == 2 and tokens.dim() == 1
    r, v = logits.shape
    counts = None
    if cfg.uses_penalties and "penalties" in cfg.order:
        counts = penalty_counts(tokens.to(logits.device), r, v, cfg.penalty_last_n, logits.dtype)
    return probs_from_logits(logits, counts, cfg)
