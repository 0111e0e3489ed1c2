"""Drawing tokens: inverse CDF in token-id order with a given uniform per row.

Owns: `draw(probs, u)`, `draw_survivors` (the same over the chain's survivors alone) and the convenience `sample(...)` (= sample_dist + uniforms + draw) used
by plain one-token-at-a-time decoding. Ignores: how the probabilities were built.

Inverse CDF in token-id order (not sorted order) keeps the map u -> token a fixed, monotone
function of the distribution, so two callers holding the same distribution and the same u pick
the same token; the cumulative sum is float64 so boundaries move by at most ~1e-16.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .chain import cumsum_rows, sample_dist
from .config import SamplerConfig
from .rng import uniforms

__all__ = ["draw", "draw_survivors", "sample"]


def draw(probs: Tensor, u: Tensor) -> Tensor:
    """Token ids [R] int64 from probs [R, V] (rows need not be normalised) and u [R] in [0, 1).

    Returns the first id whose cumulative mass exceeds u * total; never a zero-probability token
    (cdf is flat across those, and a rounding overshoot at u -> 1 is clamped to the last token
    with positive mass). Rows must have positive total mass. No host sync.
    """
    assert probs.dim() == 2 and u.shape == probs.shape[:1], "probs [R, V], u [R]"
    cdf = cumsum_rows(probs.to(torch.float64))  # [R, V]
    target = (u.to(device=probs.device, dtype=torch.float64) * cdf[:, -1]).unsqueeze(1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(1)  # first cdf > target
    v = probs.shape[1]
    pos = probs > 0
    last = torch.where(pos, torch.arange(v, device=probs.device), -1).amax(dim=1)  # [R]
    return torch.minimum(idx, last)


def draw_survivors(p: Tensor, ids: Tensor | None, u: Tensor) -> Tensor:
    """draw(probs, u) where probs [R, V] is zero but at ids [R, M] (ascending token ids, the
    chain's survivors: chain.survivor_probs) holding p [R, M]; ids None: p is probs. The same
    tokens bit for bit: the cumulative sums in token order meet the same values (adding a zero
    leaves a float64 sum as it is) in M steps instead of V."""
    if ids is None:
        return draw(p, u)
    i = draw(p, u)  # the survivor's column: the first whose sum exceeds u * total (or the last positive)
    return ids.gather(1, i[:, None]).squeeze(1)


def sample(logits: Tensor, tokens: Tensor, cfg: SamplerConfig, positions: Tensor) -> Tensor:
    """draw(sample_dist(logits, tokens, cfg), uniforms(cfg.seed, positions)) -> ids [R] int64."""
    probs = sample_dist(logits, tokens, cfg)
    return draw(probs, uniforms(cfg.seed, positions.to(device=logits.device, dtype=torch.int64)))
