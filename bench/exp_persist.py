"""Experiment (H200): integer GEMV variants aimed at bytes in flight, on the 262144 x 640 head.

Nsight Compute (bench/ncu_gemv.py, RESULTS.md 2026-11-30 session 4) showed dot_i8n at 128
registers per thread (4 blocks per SM, 25% occupancy), DRAM at 40% and warps waiting on global
loads; dot_i8w on q8_0 runs 8 blocks per SM at 80%. With K = 640 a program has only 3 (nibble) or
5 (q8_0) K steps, so little is in flight per program. Variants timed here:

- "p": persistent over output tiles. One flattened loop over (tile, K-group) of NT tiles, so the
  pipeliner prefetches the next tile's lines while the current one finishes; rows are stored
  when a tile's last group is done (no partials pass, unlike dot_i8x).
- dot_i8n / dot_i8x with a register cap (maxnreg) so more blocks fit per SM, and with 3 stages.

Prints one line per variant: us, % of copy bandwidth, max relative error vs fp64 reference.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gemv_bench import packed_copies, time_graph  # noqa: E402
from mtp_turbo.quant import gemv_i8 as gi  # noqa: E402
from mtp_turbo.quant.bytefloor import measure_copy_bandwidth  # noqa: E402
from mtp_turbo.quant.gemv import TileConfig, default_tile, gemv  # noqa: E402
from mtp_turbo.quant.gemv_i8 import _i8n_part, _i8w_part, _scaled_add  # noqa: E402,F401


@triton.jit
def gemv_i8p(XW, XS, XC, QS, QH, SC, Y, N, K, stride_ym, NT,
             M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, FMT: tl.constexpr, ASM: tl.constexpr,
             F32: tl.constexpr):
    NIB: tl.constexpr = FMT != 0
    NBLK: tl.constexpr = 8 if NIB else 4
    R: tl.constexpr = NBLK * 4 * MP
    W: tl.constexpr = (512 if FMT == 1 else 256) if NIB else 128
    nb = K // 32
    ng = tl.cdiv(nb, NBLK)
    r = tl.arange(0, R)
    rk = tl.arange(0, 128)
    rm = tl.arange(0, MP)
    acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)
    t0 = tl.program_id(0) * NT
    for it in range(0, NT * ng):
        t = t0 + it // ng
        g = it % ng
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        xw = XW + g * R * W + r[:, None] * W
        xl = tl.load(xw + rk[None, :])
        if NIB:
            xh = tl.load(xw + 128 + rk[None, :])
            xb = tl.load(xw + 256 + tl.arange(0, 256)[None, :]) if FMT == 1 else rk
            part = _i8n_part(QS, QH, rn, n_mask, g, K, xl, xh, xb, tl.load(XC + g * R + r), R, BLOCK_N,
                             FMT == 1, F32, ASM)
        else:
            part = _i8w_part(QS, QH, rn, n_mask, g, K, xl, FMT, F32)
        acc = _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb, R, NBLK, MP, BLOCK_N)
        if g == ng - 1:
            y = tl.sum(tl.reshape(acc, [NBLK * 4, MP, BLOCK_N]), axis=0)
            tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])
            acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)


def run_p(x, w, out, bn, warps, stages, nt, maxnreg=None):
    n, k = w.shape
    m = x.shape[0]
    fmt = {"q8_0": 0, "q5_0": 1, "q4_0": 2}[w.fmt]
    qh = w.qh if fmt == 1 else w.scales
    nb = k // 32
    nib = fmt != 0
    ng = triton.cdiv(nb, 8 if nib else 4)
    mp = 1 if m == 1 else (2 if m == 2 else 4)
    rows = (32 if nib else 16) * mp
    xw = torch.empty(ng, rows, (512 if fmt == 1 else 256) if nib else 128, dtype=torch.int8, device=x.device)
    xs = torch.empty(ng, rows, dtype=torch.float32, device=x.device)
    xc = torch.empty(ng, rows, dtype=torch.int32, device=x.device) if nib else xs
    if nib:
        gi.x_wide_n[(ng,)](x, xw, xs, xc, k, x.stride(0), M=m, MP=mp, HAS_QH=fmt == 1, num_warps=4)
    else:
        gi.x_wide[(ng,)](x, xw, xs, k, x.stride(0), M=m, MP=mp, INTERLEAVE=False, num_warps=4)
    extra = {} if maxnreg is None else dict(maxnreg=maxnreg)
    gemv_i8p[(triton.cdiv(n, bn * nt),)](xw, xs, xc, w.qs, qh, w.scales, out, n, k, out.stride(0), nt,
                                         M=m, MP=mp, BLOCK_N=bn, FMT=fmt, ASM=x.is_cuda, F32=not x.is_cuda, num_warps=warps,
                                         num_stages=stages, **extra)


class _Capped:
    """gi.<kernel> with maxnreg added to every launch (launch() looks the kernel up at call time)."""

    def __init__(self, fn, maxnreg):
        self.fn, self.maxnreg = fn, maxnreg

    def __getitem__(self, grid):
        f = self.fn[grid]
        return lambda *a, **kw: f(*a, maxnreg=self.maxnreg, **kw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="262144x640")
    ap.add_argument("--formats", default="q4_0,q5_0,q8_0")
    ap.add_argument("--rows", default="1,2,4")
    ap.add_argument("--quick", action="store_true", help="a few persistent configs only")
    args = ap.parse_args(argv)
    n, k = (int(v) for v in args.shape.split("x"))
    copy_bw = measure_copy_bandwidth()
    print(f"copy bandwidth {copy_bw:.0f} GB/s", flush=True)
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(5)) * 0.02
    for fmt in args.formats.split(","):
        ws = packed_copies(w, fmt)
        ref_w = ws[0].dequantize().double()
        for m in (int(v) for v in args.rows.split(",")):
            x = torch.randn(m, k, device="cuda")
            out = torch.empty(m, n, device="cuda")
            ref = x.double() @ ref_w.t()
            moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4

            def timed(name, call):
                try:
                    out.fill_(float("nan"))
                    call(ws[0])
                    torch.cuda.synchronize()
                    err = float((out.double() - ref).abs().max() / ref.abs().max())
                    t = time_graph([(lambda p=p: call(p)) for p in ws])
                    print(f"{fmt} M={m} {name:44s} {t * 1e6:7.1f} us {moved / t / 1e9 / copy_bw:6.1%}  err {err:.1e}",
                          flush=True)
                    return t
                except Exception as e:  # a variant that does not compile: report, go on
                    print(f"{fmt} M={m} {name:44s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:120]}",
                          flush=True)
                    torch.cuda.synchronize()
                    return float("inf")

            d = default_tile(n, k, m, fmt)
            timed(f"default {d}", lambda p: gemv(x, p, d, out))
            if fmt != "q8_0":
                for bn, wp, st in ((64, 4, 2), (32, 4, 2), (64, 4, 3), (128, 8, 2)):
                    t = TileConfig("dot_i8n", bn, 128, wp, st)
                    timed(f"{t}", lambda p, t=t: gi.launch(x, p, t, out))
                    for cap in ((64, 96) if bn == 64 and st == 2 else ()):
                        saved = gi.gemv_i8n
                        gi.gemv_i8n = _Capped(saved, cap)
                        try:
                            timed(f"{t} maxnreg={cap}", lambda p, t=t: gi.launch(x, p, t, out))
                        finally:
                            gi.gemv_i8n = saved
                if m == 1:
                    t = TileConfig("dot_i8x", 128, 128, 4, 3, 1, 16)
                    for cap in (None, 128):
                        saved = gi.gemv_i8x
                        if cap:
                            gi.gemv_i8x = _Capped(saved, cap)
                        try:
                            timed(f"{t} maxnreg={cap}", lambda p, t=t: gi.launch(x, p, t, out))
                        finally:
                            gi.gemv_i8x = saved
            full = not args.quick and fmt == "q4_0" and m == 1
            grid = (tuple(itertools.product((32, 64, 128), (4,), (2, 3, 4), (4, 16, 64))) + ((128, 8, 3, 8),) if full
                    else ((64, 4, 2, 8), (64, 4, 3, 8), (32, 4, 3, 16), (128, 8, 3, 4), (64, 4, 4, 16), (128, 4, 3, 8)))
            for bn, wp, st, nt in grid:
                for cap in ((None, 96) if full and nt == 16 and st == 3 else (None,)):
                    timed(f"p {bn},{wp},{st} nt={nt} maxnreg={cap}",
                          lambda p, a=(bn, wp, st, nt, cap): run_p(x, p, out, *a))
        del ws, ref_w
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
