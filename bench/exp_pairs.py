"""Experiment (H200): the nibble formats in a block-PAIR layout, timed against the shipped kernels.

Layout: blocks 2i and 2i + 1 of a row share 32 bytes; byte c holds element c of block 2i (low
nibble) and element c of block 2i + 1 (high nibble), so both nibble tiles are in element order.
A 128-byte step (8 blocks) then splits into a low tile (blocks 0, 2, 4, 6) and a high tile (1, 3,
5, 7), each against its own block-diagonal operand of 16 rows per input row (4 blocks x 4 pieces),
half of dot_i8n's 32 (which pairs elements j and j + 16 of one block, as GGUF stores them).
Q5_0's 5th bits are ORed into the nibbles (values 0..31) before the dot: no third tile.

Prints us, % of copy bandwidth and max relative error for each variant.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mtp_turbo.quant.gemv_i8 import _int8_pieces, _nibbles  # noqa: E402,F401
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402


def to_pairs(qs: torch.Tensor, nb: int) -> torch.Tensor:
    """GGUF-order nibble bytes uint8 [n, nb * 16] -> pair layout uint8 [n, ceil(nb / 2) * 32]."""
    n = qs.shape[0]
    b = qs.view(n, nb, 16)
    e = torch.cat([b & 15, b >> 4], dim=2)  # [n, nb, 32] element order, 0..15
    if nb % 2:
        e = torch.cat([e, torch.zeros_like(e[:, :1])], dim=1)
    e = e.view(n, -1, 2, 32)
    return (e[:, :, 0] | (e[:, :, 1] << 4)).reshape(n, -1).contiguous()


@triton.jit
def x_pair(X, XW, XS, XC, K, stride_xm, M: tl.constexpr, MP: tl.constexpr, OFF: tl.constexpr):
    # group g (8 blocks, 256 elements) of x [M, K] -> XW int8 [ng, 2R, 128], R = 16 MP: row
    # h * R + (j * 4 + p) * MP + m holds piece p of x row m over block 8g + 2j + h, at columns
    # 32j..32j+31 (zeros elsewhere: block-diagonal); XS its scale, XC = OFF * sum of its pieces.
    g = tl.program_id(0)
    R: tl.constexpr = 16 * MP
    rr = tl.arange(0, 2 * R)
    h = rr // R
    r = rr % R
    m = r % MP
    p = (r // MP) % 4
    j = r // (4 * MP)
    c = tl.arange(0, 128)
    e = g * 256 + 64 * (c // 32)[None, :] + 32 * h[:, None] + (c % 32)[None, :]
    x = tl.load(X + m[:, None] * stride_xm + e, mask=(m < M)[:, None] & (e < K), other=0.0).to(tl.float32)
    x = tl.where((c // 32)[None, :] == j[:, None], x, 0.0)
    q, xs = _int8_pieces(x, p)
    tl.store(XW + g * 2 * R * 128 + rr[:, None] * 128 + c[None, :], q)
    tl.store(XS + g * 2 * R + rr, tl.where(m < M, xs, 0.0))
    tl.store(XC + g * 2 * R + rr, tl.sum(q.to(tl.int32), axis=1) * OFF)


@triton.jit
def _half(b_half, QH, rn, n_mask, g, nb, h: tl.constexpr, HAS_QH: tl.constexpr, BLOCK_N: tl.constexpr):
    # nibbles of blocks 8g + 2j + h (j < 4) [BN, 128] -> with q5_0's 5th bits ORed in (0..31)
    if HAS_QH:
        jb = 8 * g + 2 * tl.arange(0, 4) + h
        q5 = tl.load(QH + rn[:, None] * nb + jb[None, :], mask=n_mask[:, None] & (jb < nb)[None, :], other=0)
        c = tl.arange(0, 32)
        bits = tl.reshape(((q5[:, :, None] >> c[None, None, :]) & 1).to(tl.int8), [BLOCK_N, 128])
        return b_half | (bits << 4)
    return b_half


@triton.jit
def _dot(xq, w, F32: tl.constexpr):
    if F32:
        return tl.dot(xq.to(tl.float32), tl.trans(w).to(tl.float32), input_precision="ieee")
    return tl.dot(xq, tl.trans(w), out_dtype=tl.int32)


@triton.jit
def gemv_i8q(XW, XS, XC, QS, QH, SC, Y, N, K, RB, stride_ym,
             M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, HAS_QH: tl.constexpr,
             F32: tl.constexpr, ASM: tl.constexpr):
    R: tl.constexpr = 16 * MP
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = rn < N
    nb = K // 32
    r = tl.arange(0, R)
    rk = tl.arange(0, 128)
    j = tl.arange(0, 4)
    acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)
    for g in range(0, tl.cdiv(nb, 8)):
        b = tl.load(QS + rn[:, None] * RB + g * 128 + rk[None, :],
                    mask=n_mask[:, None] & ((g * 128 + rk) < RB)[None, :], other=0)  # uint8 [BN, 128]
        lo, hi = _nibbles(b, ASM)
        lo = _half(lo, QH, rn, n_mask, g, nb, 0, HAS_QH, BLOCK_N)
        hi = _half(hi, QH, rn, n_mask, g, nb, 1, HAS_QH, BLOCK_N)
        xw = XW + g * 2 * R * 128 + r[:, None] * 128 + rk[None, :]
        pl = _dot(tl.load(xw), lo, F32)
        ph = _dot(tl.load(xw + R * 128), hi, F32)
        xcl = tl.load(XC + g * 2 * R + r)
        xch = tl.load(XC + g * 2 * R + R + r)
        if F32:
            pl = pl - xcl[:, None].to(tl.float32)
            ph = ph - xch[:, None].to(tl.float32)
        else:
            pl = (pl - xcl[:, None] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
            ph = (ph - xch[:, None] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
        xsl = tl.load(XS + g * 2 * R + r)
        xsh = tl.load(XS + g * 2 * R + R + r)
        jb = 8 * g + 2 * j
        sl = tl.load(SC + rn[None, :] * nb + jb[:, None], mask=n_mask[None, :] & (jb < nb)[:, None],
                     other=0.0).to(tl.float32)  # [4, BN]
        sh = tl.load(SC + rn[None, :] * nb + jb[:, None] + 1, mask=n_mask[None, :] & ((jb + 1) < nb)[:, None],
                     other=0.0).to(tl.float32)
        sl = tl.reshape(tl.broadcast_to(sl[:, None, :], [4, 4 * MP, BLOCK_N]), [R, BLOCK_N])
        sh = tl.reshape(tl.broadcast_to(sh[:, None, :], [4, 4 * MP, BLOCK_N]), [R, BLOCK_N])
        acc += (pl * xsl[:, None]) * sl + (ph * xsh[:, None]) * sh
    y = tl.sum(tl.reshape(acc, [16, MP, BLOCK_N]), axis=0)
    rm = tl.arange(0, MP)
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])


@triton.jit
def _dot_t(w, xq, F32: tl.constexpr):
    # weights as the A operand: w int8 [BN, 128] @ xq.T [128, R] -> [BN, R]
    if F32:
        return tl.dot(w.to(tl.float32), tl.trans(xq).to(tl.float32), input_precision="ieee")
    return tl.dot(w, tl.trans(xq), out_dtype=tl.int32)


@triton.jit
def _pair_step_t(QS, QH, XW, XS, XC, SC, rn, n_mask, g, nb, RB, acc, R: tl.constexpr, MP: tl.constexpr,
                 BLOCK_N: tl.constexpr, HAS_QH: tl.constexpr, F32: tl.constexpr, ASM: tl.constexpr):
    # one 128-byte step of rows rn in the transposed orientation: acc [BN, R] += both halves' scaled partials
    r = tl.arange(0, R)
    rk = tl.arange(0, 128)
    j = tl.arange(0, 4)
    b = tl.load(QS + rn[:, None] * RB + g * 128 + rk[None, :],
                mask=n_mask[:, None] & ((g * 128 + rk) < RB)[None, :], other=0)
    lo, hi = _nibbles(b, ASM)
    lo = _half(lo, QH, rn, n_mask, g, nb, 0, HAS_QH, BLOCK_N)
    hi = _half(hi, QH, rn, n_mask, g, nb, 1, HAS_QH, BLOCK_N)
    xw = XW + g * 2 * R * 128 + r[:, None] * 128 + rk[None, :]
    pl = _dot_t(lo, tl.load(xw), F32)
    ph = _dot_t(hi, tl.load(xw + R * 128), F32)
    xcl = tl.load(XC + g * 2 * R + r)
    xch = tl.load(XC + g * 2 * R + R + r)
    if F32:
        pl = pl - xcl[None, :].to(tl.float32)
        ph = ph - xch[None, :].to(tl.float32)
    else:
        pl = (pl - xcl[None, :] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
        ph = (ph - xch[None, :] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
    xsl = tl.load(XS + g * 2 * R + r)
    xsh = tl.load(XS + g * 2 * R + R + r)
    jb = 8 * g + 2 * j
    sl = tl.load(SC + rn[:, None] * nb + jb[None, :], mask=n_mask[:, None] & (jb < nb)[None, :],
                 other=0.0).to(tl.float32)  # [BN, 4]
    sh = tl.load(SC + rn[:, None] * nb + jb[None, :] + 1, mask=n_mask[:, None] & ((jb + 1) < nb)[None, :],
                 other=0.0).to(tl.float32)
    sl = tl.reshape(tl.broadcast_to(sl[:, :, None], [BLOCK_N, 4, 4 * MP]), [BLOCK_N, R])
    sh = tl.reshape(tl.broadcast_to(sh[:, :, None], [BLOCK_N, 4, 4 * MP]), [BLOCK_N, R])
    return acc + (pl * xsl[None, :]) * sl + (ph * xsh[None, :]) * sh


@triton.jit
def gemv_i8qt(XW, XS, XC, QS, QH, SC, Y, N, K, RB, stride_ym, NT,
              M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, HAS_QH: tl.constexpr,
              F32: tl.constexpr, ASM: tl.constexpr):
    # transposed orientation (weights = A operand, maybe kept in registers); NT output tiles per
    # program, one flattened loop over (tile, group)
    R: tl.constexpr = 16 * MP
    nb = K // 32
    ng = tl.cdiv(nb, 8)
    rm = tl.arange(0, MP)
    acc = tl.zeros([BLOCK_N, R], dtype=tl.float32)
    for it in range(0, NT * ng):
        g = it % ng
        rn = (tl.program_id(0) * NT + it // ng) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        acc = _pair_step_t(QS, QH, XW, XS, XC, SC, rn, n_mask, g, nb, RB, acc, R, MP, BLOCK_N, HAS_QH, F32, ASM)
        if g == ng - 1:
            y = tl.sum(tl.reshape(acc, [BLOCK_N, 16, MP]), axis=1)  # [BN, MP]
            tl.store(Y + rm[None, :] * stride_ym + rn[:, None], y, mask=(rm[None, :] < M) & n_mask[:, None])
            acc = tl.zeros([BLOCK_N, R], dtype=tl.float32)


def run_q(x, w: PackedWeight, pairs: torch.Tensor, out, bn=64, warps=4, stages=2, nt=0):
    """nt = 0: gemv_i8q; nt >= 1: gemv_i8qt with nt tiles per program."""
    n, k = w.shape
    m = x.shape[0]
    q5 = w.fmt == "q5_0"
    nb = k // 32
    ng = triton.cdiv(nb, 8)
    mp = 1 if m == 1 else (2 if m == 2 else 4)
    rows = 32 * mp
    xw = torch.empty(ng, rows, 128, dtype=torch.int8, device=x.device)
    xs = torch.empty(ng, rows, dtype=torch.float32, device=x.device)
    xc = torch.empty(ng, rows, dtype=torch.int32, device=x.device)
    x_pair[(ng,)](x, xw, xs, xc, k, x.stride(0), M=m, MP=mp, OFF=16 if q5 else 8, num_warps=4)
    meta = dict(M=m, MP=mp, BLOCK_N=bn, HAS_QH=q5, F32=not x.is_cuda, ASM=x.is_cuda, num_warps=warps,
                num_stages=stages)
    qh = w.qh if q5 else w.scales
    if nt == 0:
        gemv_i8q[(triton.cdiv(n, bn),)](xw, xs, xc, pairs, qh, w.scales, out, n, k, pairs.shape[1], out.stride(0),
                                        **meta)
    else:
        gemv_i8qt[(triton.cdiv(n, bn * nt),)](xw, xs, xc, pairs, qh, w.scales, out, n, k, pairs.shape[1],
                                              out.stride(0), nt, **meta)


# (BLOCK_N, warps, stages, nt): nt = 0 the plain kernel, else the transposed one with nt tiles per program
VARIANTS = ((64, 4, 2, 0), (64, 4, 3, 0), (64, 4, 2, 1), (64, 4, 3, 1), (128, 4, 2, 1), (128, 4, 3, 1),
            (64, 4, 3, 4), (128, 4, 3, 4), (128, 8, 3, 2), (32, 4, 3, 1), (256, 8, 2, 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="262144x640,8192x8192")
    ap.add_argument("--formats", default="q4_0,q5_0")
    ap.add_argument("--rows", default="1,2,3,4")
    ap.add_argument("--profile", default=None, help="'BN,W,S,NT;...': one launch each inside cudaProfilerStart/Stop "
                    "(for ncu --profile-from-start off), first shape and format, each row count")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():  # interpreter: correctness on small shapes only
        for fmt in args.formats.split(","):
            for n, k in ((37, 640), (70, 96), (19, 32), (33, 288)):
                pw = PackedWeight.from_dense(torch.randn(n, k), fmt)
                pairs = to_pairs(pw.qs, k // 32)
                for m in (1, 2, 3, 4):
                    x = torch.randn(m, k)
                    out = torch.full((m, n), float("nan"))
                    run_q(x, pw, pairs, out, bn=16, nt=m % 3)
                    ref = x.double() @ pw.dequantize().double().t()
                    err = float((out.double() - ref).abs().max() / ref.abs().max())
                    print(f"{fmt} {n}x{k} M={m} err {err:.1e}", flush=True)
                    assert err < 1e-6
        return 0
    if args.profile:
        n, k = (int(v) for v in args.shapes.split(",")[0].split("x"))
        fmt = args.formats.split(",")[0]
        from mtp_turbo.quant.formats import quantize_tensor
        w = torch.randn(n, k, device="cuda")
        pw = PackedWeight.from_gguf_bytes(quantize_tensor(w, fmt).cpu(), fmt, (n, k)).to("cuda")
        pairs = to_pairs(pw.qs, k // 32)
        runs = []
        for m in (int(v) for v in args.rows.split(",")):
            x = torch.randn(m, k, device="cuda")
            out = torch.empty(m, n, device="cuda")
            for v in args.profile.split(";"):
                a = tuple(int(t) for t in v.split(","))
                run_q(x, pw, pairs, out, *a)
                runs.append((x, out, a))
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for x, out, a in runs:
            run_q(x, pw, pairs, out, *a)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 0
    from gemv_bench import packed_copies, time_graph
    from mtp_turbo.quant.bytefloor import measure_copy_bandwidth
    from mtp_turbo.quant.gemv import default_tile, gemv
    copy_bw = measure_copy_bandwidth()
    print(f"copy bandwidth {copy_bw:.0f} GB/s", flush=True)
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(5)) * 0.02
        for fmt in args.formats.split(","):
            ws = packed_copies(w, fmt)
            ps = [to_pairs(p.qs, k // 32) for p in ws]
            ref_w = ws[0].dequantize().double()
            for m in (int(v) for v in args.rows.split(",")):
                x = torch.randn(m, k, device="cuda")
                out = torch.empty(m, n, device="cuda")
                ref = x.double() @ ref_w.t()
                moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4

                def timed(name, call):
                    try:
                        out.fill_(float("nan"))
                        call(0)
                        torch.cuda.synchronize()
                        err = float((out.double() - ref).abs().max() / ref.abs().max())
                        t = time_graph([(lambda i=i: call(i)) for i in range(len(ws))])
                        print(f"{shape} {fmt} M={m} {name:34s} {t * 1e6:7.1f} us {moved / t / 1e9 / copy_bw:6.1%}"
                              f"  err {err:.1e}", flush=True)
                    except Exception as e:  # report, go on
                        print(f"{shape} {fmt} M={m} {name:34s} FAILED {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:120]}", flush=True)
                        torch.cuda.synchronize()

                d = default_tile(n, k, m, fmt)
                timed(f"default {d}", lambda i: gemv(x, ws[i], d, out))
                for bn, wp, st, nt in VARIANTS:
                    timed(f"pairs {bn},{wp},{st} nt={nt}", lambda i, a=(bn, wp, st, nt): run_q(x, ws[i], ps[i], out, *a))
            del ws, ps, ref_w
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
