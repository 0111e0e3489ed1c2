"""The fused GEMV's products over a weight held as the file's own bytes (quant/planes.py).

Owns: `seg_dot`, one K step of acc[BN, MP] += W[rows, k0:k0 + BK] . X[rows of x, same columns]^T over
a fused weight's one or two segments of rows (planes.FusedWeight), and one step per format: dense,
Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K. Ignores: the GEMV around it (fused_kernels.gemv_tile),
the planes' construction (planes.py).

Values: every weight is the loader's (quant/dequant.py, gguf's numpy order): the code widened to
fp32, times the fp32 block scale (a K-quant's d * scale first), its min subtracted or added, then
rounded to the activation dtype. Each product before an add is exact in fp32 (an fp16 scale's 11
bits times a code of at most 8 bits), so a fused multiply-add rounds once where the loader does;
Q6_K's one inexact product has no add after it.

Order: the weight is the dot's first operand ([BN, C] x [C, MP]: the weights' rows are the MMA's
long side, x's rows its short one), and a format's codes enter as the sub-tiles their bytes hold
(a byte's low nibbles, then its high ones), each against the x columns they belong to: no shuffle
of the weights into K order. The sum over K is then in an order of this kernel's own (not the dense
GEMV's), fixed by the format and the tile: a row's bits depend on nothing but that row and the
weights, whatever the rows beside it (a verify of k+1 rows = k+1 one-row steps).

A step of BK columns is BK / C chunks of the format's C elements (planes.CHUNK); the caller picks
BK dividing K, so there is no column mask. Rows past a segment's end load zeros and are not stored.
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def _mma(acc, w, X, rm, m_mask, cols, K, ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        # acc [BN, MP] += w [BN, C] . X[rm, cols]^T; CG: x read past L1 (another program's stores)
        P = X + rm[:, None] * K + cols[None, :]
        if CG:
            x = tl.load(P, mask=m_mask[:, None], other=0.0, cache_modifier=".cg")
        else:
            x = tl.load(P, mask=m_mask[:, None], other=0.0)
        return tl.dot(w.to(ACT), tl.trans(x.to(ACT)), acc, input_precision=PREC)

    @triton.jit
    def _f16(P, mask):
        return tl.load(P, mask=mask, other=0.0).to(tl.float32)

    @triton.jit
    def _cols(k0, G: tl.constexpr, C: tl.constexpr, SPAN: tl.constexpr, OFF):
        # x columns of a sub-tile: G chunks of C codes, chunk g's at k0 + SPAN g + OFF + 0..C-1
        i = tl.arange(0, G * C)
        return k0 + SPAN * (i // C) + OFF + i % C

    @triton.jit
    def _dense(acc, A, n, nm, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
               ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        rk = k0 + tl.arange(0, BK)
        w = tl.load(A[0] + n[:, None] * K + rk[None, :], mask=nm[:, None] & (rk < K)[None, :], other=0.0)
        return _mma(acc, w, X, rm, m_mask, rk, K, ACT, CG, PREC)

    @triton.jit
    def _q8_0(acc, A, n, nm, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
              ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        G: tl.constexpr = BK // 32
        blk = k0 // 32 + tl.arange(0, G)
        l = tl.arange(0, 32)
        q = tl.load(A[0] + (n * A[4])[:, None, None] + (blk * 32)[None, :, None] + l[None, None, :],
                    mask=nm[:, None, None], other=0)
        d = _f16(A[1] + (n * A[5])[:, None] + blk[None, :], nm[:, None])
        w = tl.reshape(q.to(tl.float32) * d[:, :, None], (BN, BK))
        return _mma(acc, w, X, rm, m_mask, k0 + tl.arange(0, BK), K, ACT, CG, PREC)

    @triton.jit
    def _q32(acc, A, n, nm, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
             ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr, FMT: tl.constexpr):
        # 32-element blocks of 16 code bytes, byte l: elements l (low nibble) and l + 16 (high).
        # FMT 2 Q4_0: (code - 8) d; 3 Q4_1: code d + m; 4 Q5_0: ((code | high bit << 4) - 16) d,
        # the block's uint32 qh holding element i's high bit at bit i
        G: tl.constexpr = BK // 32
        blk = k0 // 32 + tl.arange(0, G)
        l = tl.arange(0, 16)
        q = tl.load(A[0] + (n * A[4])[:, None, None] + (blk * 16)[None, :, None] + l[None, None, :],
                    mask=nm[:, None, None], other=0).to(tl.int32)
        lo = q & 15
        hi = q >> 4
        if FMT == 4:
            qh = tl.load(A[1] + (n * A[5])[:, None] + blk[None, :], mask=nm[:, None], other=0)[:, :, None]
            lo = (lo | (((qh >> l[None, None, :]) & 1) << 4)) - 16
            hi = (hi | (((qh >> (l[None, None, :] + 16)) & 1) << 4)) - 16
            d = _f16(A[2] + (n * A[6])[:, None] + blk[None, :], nm[:, None])[:, :, None]
        else:
            d = _f16(A[1] + (n * A[5])[:, None] + blk[None, :], nm[:, None])[:, :, None]
            if FMT == 2:
                lo = lo - 8
                hi = hi - 8
        if FMT == 3:
            m = _f16(A[2] + (n * A[6])[:, None] + blk[None, :], nm[:, None])[:, :, None]
            wlo = lo.to(tl.float32) * d + m
            whi = hi.to(tl.float32) * d + m
        else:
            wlo = lo.to(tl.float32) * d
            whi = hi.to(tl.float32) * d
        acc = _mma(acc, tl.reshape(wlo, (BN, BK // 2)), X, rm, m_mask, _cols(k0, G, 16, 32, 0), K, ACT, CG, PREC)
        return _mma(acc, tl.reshape(whi, (BN, BK // 2)), X, rm, m_mask, _cols(k0, G, 16, 32, 16), K, ACT, CG, PREC)

    @triton.jit
    def _scale_min_k4(S, mask, j):
        # ggml's get_scale_min_k4 for sub-blocks j of the super-blocks' 12 bytes at S (broadcast)
        lo = j < 4
        ba = tl.load(S + tl.where(lo, j, j + 4), mask=mask, other=0).to(tl.int32)
        bb = tl.load(S + tl.where(lo, j + 4, j - 4), mask=mask, other=0).to(tl.int32)
        bc = tl.load(S + j, mask=mask, other=0).to(tl.int32)
        sc = tl.where(lo, ba & 63, (ba & 15) | ((bb >> 6) << 4))
        mn = tl.where(lo, bb & 63, (ba >> 4) | ((bc >> 6) << 4))
        return sc.to(tl.float32), mn.to(tl.float32)

    @triton.jit
    def _qk45(acc, A, n, nm, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
              ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr, Q5: tl.constexpr):
        # Q4_K / Q5_K (Q5): a 64-element chunk c of super-block c // 4 is sub-blocks 2 (c % 4) (the low
        # nibbles of its 32 code bytes) and 2 (c % 4) + 1 (the high ones); code * (d * scale) - dmin *
        # min; Q5_K's code takes bit 2 (c % 4) (+ 1) of the super-block's qh byte l as its fifth
        G: tl.constexpr = BK // 64
        c = k0 // 64 + tl.arange(0, G)
        sb = c // 4
        l = tl.arange(0, 32)
        nm3 = nm[:, None, None]
        q = tl.load(A[0] + (n * A[4])[:, None, None] + (c * 32)[None, :, None] + l[None, None, :],
                    mask=nm3, other=0).to(tl.int32)
        if Q5:  # planes (qs, qh, scales, d|dmin), else (qs, scales, d|dmin)
            sp = A[2] + (n * A[6])[:, None] + (sb * 12)[None, :]
            dd = A[3] + (n * A[7])[:, None] + (sb * 2)[None, :]
        else:
            sp = A[1] + (n * A[5])[:, None] + (sb * 12)[None, :]
            dd = A[2] + (n * A[6])[:, None] + (sb * 2)[None, :]
        j = 2 * (c % 4)[None, :, None] + tl.arange(0, 2)[None, None, :]
        sc, mn = _scale_min_k4(sp[:, :, None], nm3, j)  # [BN, G, 2]
        dsc = _f16(dd, nm[:, None])[:, :, None] * sc
        dmn = _f16(dd + 1, nm[:, None])[:, :, None] * mn
        dlo, dhi = tl.split(dsc)
        mlo, mhi = tl.split(dmn)
        lo = q & 15
        hi = q >> 4
        if Q5:
            qh = tl.load(A[1] + (n * A[5])[:, None, None] + (sb * 32)[None, :, None] + l[None, None, :],
                         mask=nm3, other=0).to(tl.int32)
            sh = (2 * (c % 4))[None, :, None]
            lo = lo | (((qh >> sh) & 1) << 4)
            hi = hi | (((qh >> (sh + 1)) & 1) << 4)
        wlo = lo.to(tl.float32) * dlo[:, :, None] - mlo[:, :, None]
        whi = hi.to(tl.float32) * dhi[:, :, None] - mhi[:, :, None]
        acc = _mma(acc, tl.reshape(wlo, (BN, BK // 2)), X, rm, m_mask, _cols(k0, G, 32, 64, 0), K, ACT, CG, PREC)
        return _mma(acc, tl.reshape(whi, (BN, BK // 2)), X, rm, m_mask, _cols(k0, G, 32, 64, 32), K, ACT, CG, PREC)

    @triton.jit
    def _q6_k(acc, A, n, nm, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
              ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        # a 128-element half c of super-block c // 2: element 32 jj + l (jj = 2 h + p) is nibble h of
        # ql byte 32 p + l with bits 2 jj.. of qh byte l above it, minus 32, times d * scale[2 jj + l // 16]
        G: tl.constexpr = BK // 128
        c = k0 // 128 + tl.arange(0, G)
        l = tl.arange(0, 32)
        nm2 = nm[:, None]
        nm3 = nm[:, None, None]
        row = (n * A[4])[:, None, None] + (c * 64)[None, :, None] + l[None, None, :]
        qh = tl.load(A[1] + (n * A[5])[:, None, None] + (c * 32)[None, :, None] + l[None, None, :],
                     mask=nm3, other=0).to(tl.int32)
        d = _f16(A[3] + (n * A[7])[:, None] + (c // 2)[None, :], nm2)[:, :, None]
        lh = tl.arange(0, 2)
        for p in tl.static_range(2):
            ql = tl.load(A[0] + row + 32 * p, mask=nm3, other=0).to(tl.int32)
            for h in tl.static_range(2):  # element group jj = 2 h + p
                q = ((ql >> (4 * h)) & 15) | (((qh >> (4 * h + 2 * p)) & 3) << 4)
                sc = tl.load(A[2] + (n * A[6])[:, None, None] + (c * 8)[None, :, None] + (4 * h + 2 * p)
                             + lh[None, None, :], mask=nm3, other=0)
                dsc = d * sc.to(tl.float32)  # [BN, G, 2]
                w = tl.reshape((q - 32).to(tl.float32), (BN, G, 2, 16)) * dsc[:, :, :, None]
                acc = _mma(acc, tl.reshape(w, (BN, BK // 4)), X, rm, m_mask, _cols(k0, G, 32, 128, 64 * h + 32 * p), K,
                           ACT, CG, PREC)
        return acc

    @triton.jit
    def _fmt_dot(acc, A, FMT: tl.constexpr, row0, nseg, k0, K, X, rm, m_mask, BN: tl.constexpr, BK: tl.constexpr,
                 ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        n = row0 + tl.arange(0, BN)
        nm = n < nseg
        if FMT == 0:
            acc = _dense(acc, A, n, nm, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        elif FMT == 1:
            acc = _q8_0(acc, A, n, nm, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        elif FMT <= 4:
            acc = _q32(acc, A, n, nm, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC, FMT)
        elif FMT <= 6:
            acc = _qk45(acc, A, n, nm, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC, FMT == 6)
        else:
            tl.static_assert(FMT == 7, "unknown weight format")
            acc = _q6_k(acc, A, n, nm, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        return acc

    @triton.jit
    def seg_dot(acc, A, B, FA: tl.constexpr, FB: tl.constexpr, SPLIT, N, row0, k0, K, X, rm, m_mask,
                BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, CG: tl.constexpr, PREC: tl.constexpr):
        """acc [BN, MP] += the weight's rows row0.. (of N), columns k0..k0 + BK, times X's rows rm
        (m_mask) at those columns, transposed: rows < SPLIT from segment A, the rest from B (FB < 0:
        one segment). A tile never straddles SPLIT (the caller's BN divides it)."""
        if FB < 0:
            acc = _fmt_dot(acc, A, FA, row0, N, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        elif row0 < SPLIT:
            acc = _fmt_dot(acc, A, FA, row0, SPLIT, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        else:
            acc = _fmt_dot(acc, B, FB, row0 - SPLIT, N - SPLIT, k0, K, X, rm, m_mask, BN, BK, ACT, CG, PREC)
        return acc
