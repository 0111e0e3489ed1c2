"""Lloyd scale search for Q4_0 blocks: the best fp16 scale on the fixed integer grid -8..7.

Owns: per block of 32 weights, choosing the scale d (stored as fp16) and levels q in -8..7 that
minimise sum (x - d*q)^2, by alternating assignment (q = clamp(round(x/d))) and the least-squares
scale (d = sum(x q) / sum(q q)) from several starts, evaluating every iterate with d rounded to
fp16 and levels re-assigned for it. A caller-given base (the ggml rule's block) is a candidate
too, so the result is never worse than it. Vectorized over blocks in torch (any device).
Ignores: byte layout and the ggml rule (formats.py), dequantization (dequant.py).
"""

from __future__ import annotations

import torch

QMIN, QMAX = -8, 7
# Start scales as multiples of the block's signed max-magnitude element m: m/-8 (ggml's,
# m on level -8) and m/7 (m on level +7), each also shrunk so more weights land on inner levels.
START_DIVISORS = (-8.0, -7.5, -7.0, -6.5, -6.0, -5.5, 7.0, 6.5, 6.0, 5.5)
ITERS = 6


def assign(x: torch.Tensor, inv_d: torch.Tensor) -> torch.Tensor:
    """Grid levels for inverse scale inv_d: x [N, 32], inv_d [N, 1] float32 -> q [N, 32] float32.

    For a uniform grid, clamp(round(x/d)) is the nearest level of the clamped set; inv_d = 0
    (scale 0) gives level 0.
    """
    return torch.round(x * inv_d).clamp_(QMIN, QMAX)


def _inv(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / d)


def sq_err(x: torch.Tensor, d16: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Squared error of blocks as dequant.py reconstructs them (float32 d*q), summed in float64.

    x [N, 32] float32, d16 [N, 1] float16, q [N, 32] float levels -> [N] float64; inf for a
    non-finite scale.
    """
    y = d16.to(torch.float32) * q
    e = ((x.to(torch.float64) - y.to(torch.float64)) ** 2).sum(dim=-1)
    return torch.where(torch.isfinite(d16.squeeze(-1)), e, torch.full_like(e, float("inf")))


def lloyd_q4_0(x: torch.Tensor, base_d16: torch.Tensor, base_q: torch.Tensor,
               divisors: tuple[float, ...] = START_DIVISORS, iters: int = ITERS
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Search the Q4_0 scale of every block.

    x: [N, 32] float32 weights. base_d16: [N] float16 and base_q: [N, 32] integer levels in -8..7
    (the ggml block, kept unless something is strictly better in float64 squared error).
    Returns (d16 [N] float16, q [N, 32] int8 in -8..7), on x's device.
    """
    assert x.ndim == 2 and x.shape[1] == 32 and x.dtype == torch.float32, (x.shape, x.dtype)
    assert base_d16.shape == (x.shape[0],) and base_d16.dtype == torch.float16
    assert base_q.shape == x.shape
    x = x.contiguous()
    m = x.gather(1, x.abs().argmax(dim=1, keepdim=True))  # [N, 1] signed max-magnitude
    sxx = (x * x).sum(dim=1, keepdim=True)
    best_d = torch.zeros_like(m, dtype=torch.float16)
    best_e = torch.full_like(m, float("inf"))

    # One start at a time ([N, 32] temporaries stay cache-sized on the CPU). Each step rounds the
    # scale to fp16, assigns levels for that rounded scale, scores it from the block sums
    # (e = sxx - 2 d sxq + d^2 sqq, float32, good enough to rank), then takes the LS scale.
    for div in divisors:
        d = m / div
        for _ in range(iters + 1):
            d16 = d.to(torch.float16)
            df = d16.to(torch.float32)
            q = assign(x, _inv(df))
            sxq = (x * q).sum(dim=1, keepdim=True)
            sqq = (q * q).sum(dim=1, keepdim=True)
            e = sxx - 2 * df * sxq + df * df * sqq
            better = torch.isfinite(df) & (e < best_e)
            best_e = torch.where(better, e, best_e)
            best_d = torch.where(better, d16, best_d)
            d = torch.where(sqq > 0, sxq / sqq.clamp_min(1), d)

    # levels are a function of the scale; the float64 check makes "never worse" exact
    best_q = assign(x, _inv(best_d.to(torch.float32)))
    base_d16 = base_d16.reshape(-1, 1)
    base_q = base_q.to(torch.float32)
    keep = (sq_err(x, best_d, best_q) < sq_err(x, base_d16, base_q)).unsqueeze(1)
    d16 = torch.where(keep, best_d, base_d16)
    q = torch.where(keep, best_q, base_q)
    return d16.reshape(-1), q.to(torch.int8)
