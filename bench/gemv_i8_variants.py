"""Experiment: access patterns for the Q8_0 integer-tensor-core GEMV on the 262144 x 640 head.

Run from the repo root: python bench/gemv_i8_variants.py [--out results.json]

The package's dot_i8 (quant/gemv_triton.py) loads each 32-block as its own [32, BLOCK_N] tile:
32 bytes of each of BLOCK_N rows 640 bytes apart, so every load instruction touches many cache
lines. Two candidates read whole 128-byte lines of each row instead ([BLOCK_N, 128] tiles):
  nat:  split the [BLOCK_N, 128] tile into its four 32-blocks in registers, one dot per block;
  wide: one K=128 dot per tile against a block-diagonal x operand (rows = block x piece x M),
        so no split at all; the four blocks' partials come out as separate rows. It won (86% of
        copy bandwidth at 1 row, bench/RESULTS.md) and is now the package's dot_i8w, which this
        script times under that name.
Each is checked against dequantize-then-matmul (float64) and timed the way gemv_bench.py times
(CUDA-graph replay over rotating weight copies). Without CUDA: correctness only, in Triton's
interpreter, on a small shape. q8_0 only: the point is the access pattern.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mtp_turbo.quant import gemv_i8, gemv_triton  # noqa: E402
from mtp_turbo.quant.gemv import TileConfig  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402


@triton.jit
def _magic(ip, F32: tl.constexpr):
    if F32:
        return ip
    return (ip + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0


@triton.jit
def _idot(xq, w, F32: tl.constexpr):
    # xq [R, 32k] int8, w [32k, BN] int8 -> exact partial sums ([R, BN]; fp32 in the interpreter)
    if F32:
        return tl.dot(xq.to(tl.float32), w.to(tl.float32), input_precision="ieee")
    return tl.dot(xq, w, out_dtype=tl.int32)


@triton.jit
def gemv_nat(XQ, XS, QS, SC, Y, N, K, stride_ym, M: tl.constexpr, BLOCK_N: tl.constexpr, F32: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = rn < N
    nb = K // 32
    rk = tl.arange(0, 128)
    r16 = tl.arange(0, 16)
    c32 = tl.arange(0, 32)
    acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
    for kb0 in range(0, nb, 4):
        w = tl.load(QS + rn[:, None] * K + kb0 * 32 + rk[None, :],
                    mask=n_mask[:, None] & ((kb0 * 32 + rk) < K)[None, :], other=0)  # [BN, 128]
        w4 = tl.permute(tl.reshape(w, [BLOCK_N, 2, 2, 32]), (0, 3, 1, 2))  # [BN, 32, i, j]: block 2i + j
        wa, wb = tl.split(w4)  # j = 0, 1: [BN, 32, i]
        w0, w2 = tl.split(wa)
        w1, w3 = tl.split(wb)
        for b in tl.static_range(4):
            if b == 0:
                wt = w0
            elif b == 1:
                wt = w1
            elif b == 2:
                wt = w2
            else:
                wt = w3
            kb = kb0 + b
            ok16 = (r16 * 0 + kb) < nb
            xq = tl.load(XQ + kb * 512 + r16[:, None] * 32 + c32[None, :], mask=ok16[:, None], other=0)
            xs = tl.load(XS + kb * 16 + r16, mask=ok16, other=0.0)
            s = tl.load(SC + rn * nb + kb, mask=n_mask & ((rn * 0 + kb) < nb), other=0.0).to(tl.float32)
            part = _magic(_idot(xq, tl.trans(wt), F32), F32)
            acc += (part * xs[:, None]) * s[None, :]
    y = tl.sum(tl.reshape(acc, [4, 4, BLOCK_N]), axis=0)
    rm = tl.arange(0, 4)
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])


def run_nat(x, w: PackedWeight, out, bn, warps, stages):
    n, k = w.shape
    m = x.shape[0]
    nb = k // 32
    xq = torch.empty(nb, 16, 32, dtype=torch.int8, device=x.device)
    xs = torch.empty(nb, 16, dtype=torch.float32, device=x.device)
    gemv_i8.x_pieces[(nb,)](x, xq, xs, k, x.stride(0), M=m, num_warps=1)
    gemv_nat[(triton.cdiv(n, bn),)](xq, xs, w.qs, w.scales, out, n, k, out.stride(0), M=m, BLOCK_N=bn,
                                    F32=not x.is_cuda, num_warps=warps, num_stages=stages)


def run_pkg(kernel):
    def run(x, w, out, bn, warps, stages):
        gemv_triton.gemv_packed(x, w, TileConfig(kernel, bn, 128, warps, stages), out)
    return run


# "wide" was this script's prototype of what is now the package's dot_i8w (same kernel)
VARIANTS = {"dot_i8": run_pkg("dot_i8"), "nat": run_nat, "dot_i8w": run_pkg("dot_i8w")}
TILES = [(32, 4, 2), (64, 4, 2), (64, 4, 3), (64, 8, 3), (128, 4, 2), (128, 4, 3), (128, 8, 3), (256, 8, 2)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    n, k = (262144, 640) if cuda else (200, 320)
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(1)) * 0.02
    if cuda:
        from bench_gemv import packed_copies, time_graph  # noqa: F401 (bench/ on sys.path below)
        ws = packed_copies(w, "q8_0")
        copy_bw = __import__("mtp_turbo.check.bytefloor", fromlist=["x"]).measure_copy_bandwidth()
    else:
        ws = [PackedWeight.from_dense(w, "q8_0")]
        copy_bw = float("nan")
    ref_w = ws[0].dequantize().double()
    rows, bad = [], 0
    for name, fn in VARIANTS.items():
        for bn, warps, stages in TILES if cuda else [(32, 4, 2)]:
            for m in (1, 4) if cuda else (1, 2, 3, 4):
                x = torch.randn(m, k, device=dev)
                out = torch.full((m, n), float("nan"), device=dev)
                row = dict(variant=name, BN=bn, warps=warps, stages=stages, M=m)
                try:
                    fn(x, ws[0], out, bn, warps, stages)
                    ref = x.double() @ ref_w.t().to(dev)
                    row["err"] = float((out.double() - ref).abs().max() / ref.abs().max())
                    if cuda:
                        t = time_graph([(lambda p=p: fn(x, p, out, bn, warps, stages)) for p in ws])
                        moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4
                        row.update(us=t * 1e6, frac=moved / t / 1e9 / copy_bw)
                except Exception as e:  # report and go on
                    row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
                bad += not (row.get("err", 1.0) <= 1e-5)
                rows.append(row)
                print(row, flush=True)
    if cuda:
        print(f"\ncopy bandwidth {copy_bw:.0f} GB/s; best per variant and M:")
        for name in VARIANTS:
            for m in (1, 4):
                ok = [r for r in rows if r["variant"] == name and r["M"] == m and "us" in r]
                if ok:
                    b = min(ok, key=lambda r: r["us"])
                    print(f"  {name:7s} M={m}: {b['us']:.2f} us, {100 * b['frac']:.1f}% of copy bw "
                          f"(BN {b['BN']}, warps {b['warps']}, stages {b['stages']})")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(copy_bw_gbs=copy_bw, rows=rows), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gemv", Path(__file__).resolve().parent / "gemv_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["bench_gemv"] = mod
    raise SystemExit(main())
