"""The exact draw the fused sampler is checked against, and how close a uniform came to a boundary.

Owns: `padded_counts` (penalty counts of -1-padded windows), `reference_logits` (the torch
chain's final masked logits for such windows), `exact_draw` (inverse CDF in token order of the
float64 softmax of final logits, with each draw's distance to the nearest CDF boundary). Ignores:
how the logits were made; the kernels.

Why a float64 reference: draw.py accumulates float32 probabilities, whose boundaries sit ~1e-7
(relative) off the exact ones, so comparing two samplers through it can only be exact up to
that. The fused kernels draw from float64 masses of the same float32 final logits; against
`exact_draw` a token may differ only where its uniform lies within ~1e-15 of a boundary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .chain import final_logits
from .config import SamplerConfig

__all__ = ["padded_counts", "reference_logits", "exact_draw"]


def padded_counts(windows: Tensor, vocab: int, dtype=torch.float32) -> Tensor:
    """Counts [R, vocab] of each row's window tokens; entries < 0 are padding."""
    counts = torch.zeros(windows.shape[0], vocab, dtype=dtype, device=windows.device)
    if windows.shape[1] == 0:
        return counts
    return counts.scatter_add_(1, windows.clamp(min=0), (windows >= 0).to(dtype))


def reference_logits(logits: Tensor, windows: Tensor, cfg: SamplerConfig) -> Tensor:
    """The torch chain's final logits [R, V] (chain.final_logits) for -1-padded windows [R, W]."""
    pen = cfg.uses_penalties and "penalties" in cfg.order and windows.shape[1] > 0
    counts = padded_counts(windows, logits.shape[1], logits.dtype) if pen else None
    return final_logits(logits, counts, cfg)


def exact_draw(fl: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """(ids [R], margin [R]) for final logits fl [R, V] (-inf = masked) and uniforms u [R].

    ids: the first token whose cumulative float64 mass exceeds u * total (never a zero-mass
    token, as draw.py). margin: the distance of u to the nearest CDF boundary, relative to the
    total mass (a draw by any correct sampler can differ from ids only if margin is tiny).
    """
    x = fl.to(torch.float64)
    m = x.max(dim=1, keepdim=True).values
    e = torch.where(x > float("-inf"), torch.exp(x - m), 0.0)
    cdf = torch.cumsum(e, dim=1)
    total = cdf[:, -1]
    target = u.to(torch.float64) * total
    idx = torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    v = fl.shape[1]
    last = torch.where(e > 0, torch.arange(v, device=fl.device), -1).amax(dim=1)
    ids = torch.minimum(idx, last)
    hi = cdf.gather(1, ids[:, None]).squeeze(1)
    lo = torch.where(ids > 0, cdf.gather(1, (ids - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
    margin = torch.minimum((target - lo).abs(), (hi - target).abs()) / total
    return ids, margin
