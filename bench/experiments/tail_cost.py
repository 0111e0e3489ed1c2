"""What a GEMV's norm tail costs (fused_kernels.linear_norm), split into its arrival atomic and its
norm work, on the o / down shapes of Gemma-3-270M (K = 1024 / 2048 -> N = 640), 1 row, random weights.

Four launches of each shape, each timed as 20 launches in a CUDA graph replayed 200 times:
  linear        the GEMV alone (no tail);
  +atomic       linear_norm with its counter preset far below zero: every program's barrier and
                acq_rel atomic run, no program is the last, so no norm is done;
  +tail         linear_norm as the decode step runs it (the last program does the norm);
  +kernel       the GEMV, then residual_norm as its own kernel (the step without tails).
Why: in session 16's round profile linear_norm was 7.0 us a launch (36 a step, 40% of plain's
device time) where the gate|up GEMV, 2-4x the bytes, took 3.9 us.

    python bench/experiments/tail_cost.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mtp_turbo.models import fused_kernels as fk  # noqa: E402
from mtp_turbo.models.fused import MP, NORM_ROWS, FusedTiles  # noqa: E402


def graph_us(fn, per_graph: int = 20, replays: int = 200) -> float:
    """Microseconds a call of fn, from a graph of per_graph calls replayed `replays` times."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(replays):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / (replays * per_graph)


def main() -> int:
    assert torch.cuda.is_available(), "needs CUDA"
    dev, bf = torch.device("cuda"), torch.bfloat16
    t, N, M, eps = FusedTiles(), 640, 1, 1e-6
    for K in (1024, 2048):
        x = torch.randn(MP, K, device=dev, dtype=bf)
        w = (torch.randn(N, K, device=dev) * 0.03).to(bf)
        y, res, hout, xout = (torch.zeros(MP, N, device=dev, dtype=bf) for _ in range(4))
        res.normal_()
        wpost, wpre = torch.rand(N, device=dev) + 0.5, torch.rand(N, device=dev) + 0.5
        cnt = torch.zeros(4, device=dev, dtype=torch.int32)
        bn, bk, launch = t.gemv(K)
        grid = (-(-N // bn), 1)
        np_ = 1 << (N - 1).bit_length()

        def lin():
            fk.linear[grid](x, w, y, x, M, N, K, GATED=False, MP=MP, BN=bn, BK=bk, PREC="tf32", **launch)

        def lin_norm():
            fk.linear_norm[grid](x, w, y, M, N, K, eps, cnt, res, wpost, wpre, hout, xout, MP=MP, NP=np_,
                                 RT=NORM_ROWS, BN=bn, BK=bk, PREC="tf32", TP=2, **launch)

        def lin_kernel():
            lin()
            fk.residual_norm[(1,)](res, y, wpost, wpre, hout, xout, M, N, eps, PRO=2, KP=np_, RT=NORM_ROWS,
                                   num_warps=t.warps)

        r = {"linear": graph_us(lin)}
        cnt.fill_(-(1 << 30))  # no program is ever the last: the atomics alone
        r["+atomic"] = graph_us(lin_norm)
        cnt.zero_()
        r["+tail"] = graph_us(lin_norm)
        assert not cnt.any(), "a tail left its counter set"
        r["+kernel"] = graph_us(lin_kernel)
        print(f"K {K} -> N {N}, {grid[0]} programs (BN {bn}, BK {bk}): " +
              ", ".join(f"{k} {v:.2f} us" for k, v in r.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
