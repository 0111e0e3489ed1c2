"""The fused GEMV's weight tiles, read from the file's own bytes (quant/planes.py) or a dense matrix.

Owns: `seg_tile`, a [BN, BK] tile of a fused weight (FusedWeight's one or two segments of rows) in
the activation dtype, and one loader per format: dense, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K.
Ignores: the GEMV around the tile (fused_kernels.gemv_tile), the planes' construction (planes.py).

Exactness: every value is the loader's (quant/dequant.py, itself gguf's numpy order): the integer
code widened to fp32, multiplied by the fp32 block scale (a K-quant's d * scale first, then the
code), its min subtracted or added, then rounded to the activation dtype. Each product before an
add is exact in fp32 (an fp16 scale's 11 bits times a code of at most 8 bits), so a fused
multiply-add rounds once where the loader rounds once; Q6_K's one inexact product (d * scale times
a 6-bit code) has no add after it. The tile is then the dense path's tile, bit for bit (the CPU
interpreter's GEMV gives the dense bits). On the GPU, Triton's dot over a tile built in registers
may order a K step's products differently from one over a tile it loads, so an output can differ
from the dense GEMV's by a rounding (1 in ~8000 on an H200); a row's bits still never depend on the
rows beside it.

A tile of BK columns is BK / C chunks of the format's C elements (planes.CHUNK), laid out as R =
BN * (BK / C) rows of chunks, built, then reshaped to [BN, BK]. A segment's K is a multiple of BK
(the caller picks BK so): no column mask. Rows past the segment's n load zeros and are not stored.
"""

from __future__ import annotations

from .triton_env import triton

if triton is not None:
    import triton.language as tl

if triton is not None:

    @triton.jit
    def _rows(row0, nseg, BN: tl.constexpr, G: tl.constexpr):
        # the R = BN * G chunk rows of a tile: matrix row and chunk index within the tile of each
        r = tl.arange(0, BN * G)
        rows = row0 + r // G
        return rows, r % G, rows < nseg

    @triton.jit
    def _f16(P, off, mask):
        return tl.load(P + off, mask=mask, other=0.0).to(tl.float32)

    @triton.jit
    def _halves(lo, hi, R: tl.constexpr, C: tl.constexpr):
        # [R, C/2] + [R, C/2] -> [R, C]: lo's values first, then hi's, per row
        return tl.reshape(tl.permute(tl.join(lo, hi), (0, 2, 1)), (R, C))

    @triton.jit
    def _q8_0(A, row0, nseg, k0, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
        G: tl.constexpr = BK // 32
        rows, g, rm = _rows(row0, nseg, BN, G)
        blk = k0 // 32 + g
        l = tl.arange(0, 32)
        q = tl.load(A[0] + (rows * A[4] + blk * 32)[:, None] + l[None, :], mask=rm[:, None], other=0)
        d = _f16(A[1], rows * A[5] + blk, rm)
        return tl.reshape((q.to(tl.float32) * d[:, None]).to(ACT), (BN, BK))

    @triton.jit
    def _q32(A, row0, nseg, k0, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, FMT: tl.constexpr):
        # 32-element blocks of 16 code bytes, byte l: elements l (low nibble) and l + 16 (high).
        # FMT 2 Q4_0: (code - 8) d; 3 Q4_1: code d + m; 4 Q5_0: ((code | high bit << 4) - 16) d, the
        # block's uint32 qh holding element i's high bit at bit i
        G: tl.constexpr = BK // 32
        rows, g, rm = _rows(row0, nseg, BN, G)
        blk = k0 // 32 + g
        l = tl.arange(0, 16)
        q = tl.load(A[0] + (rows * A[4] + blk * 16)[:, None] + l[None, :], mask=rm[:, None], other=0)
        lo = (q & 15).to(tl.int32)
        hi = (q >> 4).to(tl.int32)
        if FMT == 4:  # planes (qs, qh, d), else (qs, d[, m])
            qh = tl.load(A[1] + rows * A[5] + blk, mask=rm, other=0)[:, None]
            d = _f16(A[2], rows * A[6] + blk, rm)[:, None]
            lo = (lo | (((qh >> l[None, :]) & 1) << 4)) - 16
            hi = (hi | (((qh >> (l[None, :] + 16)) & 1) << 4)) - 16
        else:
            d = _f16(A[1], rows * A[5] + blk, rm)[:, None]
        if FMT == 3:
            m = _f16(A[2], rows * A[6] + blk, rm)[:, None]
            vlo = lo.to(tl.float32) * d + m
            vhi = hi.to(tl.float32) * d + m
        else:
            if FMT == 2:
                lo = lo - 8
                hi = hi - 8
            vlo = lo.to(tl.float32) * d
            vhi = hi.to(tl.float32) * d
        return tl.reshape(_halves(vlo.to(ACT), vhi.to(ACT), BN * G, 32), (BN, BK))

    @triton.jit
    def _scale_min_k4(S, rm, j):
        # ggml's get_scale_min_k4 for sub-blocks j ([R, 2]) from a super-block's 12 bytes at S ([R, 1])
        lo = j < 4
        ba = tl.load(S + tl.where(lo, j, j + 4), mask=rm[:, None], other=0).to(tl.int32)
        bb = tl.load(S + tl.where(lo, j + 4, j - 4), mask=rm[:, None], other=0).to(tl.int32)
        bc = tl.load(S + j, mask=rm[:, None], other=0).to(tl.int32)
        sc = tl.where(lo, ba & 63, (ba & 15) | ((bb >> 6) << 4))
        mn = tl.where(lo, bb & 63, (ba >> 4) | ((bc >> 6) << 4))
        return sc.to(tl.float32), mn.to(tl.float32)

    @triton.jit
    def _qk45(A, row0, nseg, k0, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, Q5: tl.constexpr):
        # Q4_K / Q5_K (Q5): a 64-element chunk c of super-block c // 4 is sub-blocks 2 (c % 4) (the
        # low nibbles of its 32 code bytes) and 2 (c % 4) + 1 (the high ones); value code * (d *
        # scale) - dmin * min; Q5_K's code takes bit 2 (c % 4) (+ 1) of the super-block's qh byte l
        G: tl.constexpr = BK // 64
        rows, g, rm = _rows(row0, nseg, BN, G)
        c = k0 // 64 + g
        sb = c // 4
        l = tl.arange(0, 32)
        q = tl.load(A[0] + (rows * A[4] + c * 32)[:, None] + l[None, :], mask=rm[:, None], other=0)
        if Q5:  # planes (qs, qh, scales, d|dmin), else (qs, scales, d|dmin)
            sp = A[2] + rows * A[6] + sb * 12
            dd = A[3] + rows * A[7] + sb * 2
        else:
            sp = A[1] + rows * A[5] + sb * 12
            dd = A[2] + rows * A[6] + sb * 2
        j = 2 * (c % 4)[:, None] + tl.arange(0, 2)[None, :]
        sc, mn = _scale_min_k4(sp[:, None], rm, j)
        dsc = _f16(dd, 0, rm)[:, None] * sc
        dmn = _f16(dd, 1, rm)[:, None] * mn
        dlo, dhi = tl.split(dsc)
        mlo, mhi = tl.split(dmn)
        lo = (q & 15).to(tl.int32)
        hi = (q >> 4).to(tl.int32)
        if Q5:
            qh = tl.load(A[1] + (rows * A[5] + sb * 32)[:, None] + l[None, :], mask=rm[:, None], other=0)
            sh = (2 * (c % 4))[:, None]
            lo = lo | (((qh.to(tl.int32) >> sh) & 1) << 4)
            hi = hi | (((qh.to(tl.int32) >> (sh + 1)) & 1) << 4)
        vlo = lo.to(tl.float32) * dlo[:, None] - mlo[:, None]
        vhi = hi.to(tl.float32) * dhi[:, None] - mhi[:, None]
        return tl.reshape(_halves(vlo.to(ACT), vhi.to(ACT), BN * G, 64), (BN, BK))

    @triton.jit
    def _q6_k(A, row0, nseg, k0, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
        # a 128-element half c of super-block c // 2: element 32 jj + l (jj = 2 n + p) is nibble n of
        # ql byte 32 p + l with bits 2 jj.. of qh byte l above it, minus 32, times d * scale[2 jj + l // 16]
        G: tl.constexpr = BK // 128
        R: tl.constexpr = BN * G
        rows, g, rm = _rows(row0, nseg, BN, G)
        c = k0 // 128 + g
        p = tl.arange(0, 2)
        l = tl.arange(0, 32)
        ql = tl.load(A[0] + (rows * A[4] + c * 64)[:, None, None] + (32 * p)[None, :, None] + l[None, None, :],
                     mask=rm[:, None, None], other=0).to(tl.int32)  # [R, 2 p, 32 l]
        qh = tl.load(A[1] + (rows * A[5] + c * 32)[:, None] + l[None, :], mask=rm[:, None], other=0)
        qh = qh.to(tl.int32)[:, None, :]
        sh = (2 * p)[None, :, None]
        qlo = ((ql & 15) | (((qh >> sh) & 3) << 4)) - 32
        qhi = ((ql >> 4) | (((qh >> (sh + 4)) & 3) << 4)) - 32
        i8 = tl.arange(0, 8)
        sc = tl.load(A[2] + (rows * A[6] + c * 8)[:, None] + i8[None, :], mask=rm[:, None], other=0)
        dsc = _f16(A[3], rows * A[7] + c // 2, rm)[:, None] * sc.to(tl.float32)  # [R, 8]: 2 jj + lh
        dlo, dhi = tl.split(tl.permute(tl.reshape(dsc, (R, 2, 2, 2)), (0, 2, 3, 1)))  # [R, 2 p, 2 lh] per n
        vlo = tl.reshape(tl.reshape(qlo, (R, 2, 2, 16)).to(tl.float32) * dlo[:, :, :, None], (R, 2, 32))
        vhi = tl.reshape(tl.reshape(qhi, (R, 2, 2, 16)).to(tl.float32) * dhi[:, :, :, None], (R, 2, 32))
        w = tl.permute(tl.join(vlo.to(ACT), vhi.to(ACT)), (0, 3, 1, 2))  # [R, 2 n, 2 p, 32]
        return tl.reshape(w, (BN, BK))

    @triton.jit
    def w_tile(A, row0, nseg, k0, K, FMT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
        """Rows row0.. (those < nseg; others zero or not stored), columns k0.. of one segment A
        (planes.FusedWeight.kernel_args): [BN, BK] in ACT. FMT 0: a dense [n, K] matrix, masked as
        fused_kernels always did; else planes.FORMAT_CODE's formats (BK divides K)."""
        if FMT == 0:
            rn = row0 + tl.arange(0, BN)
            rk = k0 + tl.arange(0, BK)
            msk = (rn < nseg)[:, None] & (rk < K)[None, :]
            w = tl.load(A[0] + rn[:, None] * K + rk[None, :], mask=msk, other=0.0)
        elif FMT == 1:
            w = _q8_0(A, row0, nseg, k0, BN, BK, ACT)
        elif FMT <= 4:
            w = _q32(A, row0, nseg, k0, BN, BK, ACT, FMT)
        elif FMT == 5:
            w = _qk45(A, row0, nseg, k0, BN, BK, ACT, False)
        elif FMT == 6:
            w = _qk45(A, row0, nseg, k0, BN, BK, ACT, True)
        else:
            tl.static_assert(FMT == 7, "unknown weight format")
            w = _q6_k(A, row0, nseg, k0, BN, BK, ACT)
        return w

    @triton.jit
    def seg_tile(A, B, FA: tl.constexpr, FB: tl.constexpr, SPLIT, N, row0, k0, K,
                 BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
        """The [BN, BK] tile at rows row0.. (of N), columns k0.. of a fused weight: rows < SPLIT from
        segment A, the rest from B (FB < 0: one segment). A tile never straddles SPLIT (the caller's
        BN divides it)."""
        if FB < 0:
            w = w_tile(A, row0, N, k0, K, FA, BN, BK, ACT)
        elif row0 < SPLIT:
            w = w_tile(A, row0, SPLIT, k0, K, FA, BN, BK, ACT)
        else:
            w = w_tile(B, row0 - SPLIT, N - SPLIT, k0, K, FB, BN, BK, ACT)
        return w
