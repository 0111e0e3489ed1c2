"""The frag GEMV's arithmetic for many rows: prefill chunks on the same layouts, each row the frag8 GEMV's bits.

Owns: `x_pieces` (x's int8 pieces, each chunk's exponent and each block's exact piece sums, made once
a chunk of rows: `make_pieces`), `gemm_frag` (a Triton kernel: a [16 TB output rows, BM x rows] tile
of one split per program, int8 tl.dot of the layout's A values against the pieces, then the PTX's
float32 steps in the PTX's order), `sum_splits` (the splits' sums added in the GEMV's order) and
`launch`. Ignores: the layouts (frag8.py, fragk.py), the decode GEMV (frag8_gemv.py) whose bits
it reproduces, which rows go where (frag_matrix.py).

Why: the decode GEMV takes 4 rows a launch, so a 128-row prefill chunk would read every matrix 32
times; and a prompt token's K/V must be the bits a one-row step gives it (DESIGN.md: same text
whatever the chunking), so prefill cannot take another arithmetic. Integer sums are exact in any
order, so the k order inside a block is free (the weights are taken in their stored order, x's
columns gathered to match); the float steps are the PTX's, per output and x row:
  per split s (chunks [s CPS, (s + 1) CPS)), per chunk, per 32-block b, for the lanes' two piece
  pairs (pieces 0, 1: xe = 2^(E - 14 - SHIFT); pieces 2, 3: 2^(E - 28 - SHIFT)):
    f = float(c_first * 128 + c_second)                    (cvt.rn of the exact int32 join)
    acc = fma(f, scale * xe, acc)                          (q4_k: then fma(float(sum x join), (-dmin m) xe, acc);
                                                            q6_k: the two 16-column halves, low then high;
                                                            q5_k: as q4_k)
  P_s = acc_first_pair + acc_second_pair;  y = P_0 (one split) or ((0 + P_0) + P_1) + ...
The x pieces are x_frag8's rule (frag8_x.py): E from the row's largest |x| in the 64-column chunk,
V = trunc(x 2^(28 - E)), p0 = V >> 21, p1..p3 its 7-bit digits.
"""

from __future__ import annotations

import torch

from .frag8_x import E_MIN

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines without Triton
    triton = None

FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2, "q4_k": 3, "q6_k": 4, "q5_k": 5}
# (row tiles of 16 rows, x rows) a program takes: 2 x 64 was the fastest of 8 shapes at three model shapes
# (a 4B model's 128-row chunk: 23.8 ms; 4 x 64 38.3, 2 x 16 59.7; bench/RESULTS.md session 36); fewer rows
# than 64 keep 2 x 16 (less masked work)
TILES, SMALL_TILES = (2, 64), (2, 16)


if triton is not None:
    _EMIN = tl.constexpr(E_MIN)

    @triton.jit
    def _f16(bits):
        # float32 of the fp16 in the low 16 bits of int32 bits
        return (bits & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def _pow2(e):
        # 2^e as float32 (e an int32 tensor in the normal range)
        return ((127 + e) << 23).to(tl.float32, bitcast=True)

    @triton.jit
    def x_pieces(X, P, XEXP, XS, M, K, NC, KP, stride_xm, BM: tl.constexpr):
        """Chunk program_id(0) of BM x rows (program_id(1)): P int8 [4, M, KP] the four pieces, each
        32-block's columns in the weights' k order (t, rk, i) (module docstring: x's column 16 rk + 4 t + i);
        XEXP int32 [M, NC] the chunk's E; XS float32 [2, M, 2 NC] each block's exact piece-pair sums."""
        c = tl.program_id(0)
        rm = tl.program_id(1) * BM + tl.arange(0, BM)
        m_ok = rm < M
        c64 = tl.arange(0, 64)
        xc = tl.load(X + rm[:, None] * stride_xm + (64 * c + c64)[None, :],
                     mask=m_ok[:, None] & ((64 * c + c64) < K)[None, :], other=0.0).to(tl.float32)
        mx = tl.max(tl.abs(xc), axis=1)
        e = tl.where(mx > 0, tl.maximum(((mx.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 126, _EMIN), 0)
        sc = _pow2(28 - e)
        kk = c64 % 32
        col = 64 * c + 32 * (c64 // 32) + 16 * ((kk // 4) % 2) + 4 * (kk // 8) + kk % 4
        xb = tl.load(X + rm[:, None] * stride_xm + col[None, :], mask=m_ok[:, None] & (col < K)[None, :],
                     other=0.0).to(tl.float32)
        v = (xb * sc[:, None]).to(tl.int32)
        p0 = v >> 21
        p1 = (v >> 14) & 0x7F
        p2 = (v >> 7) & 0x7F
        p3 = v & 0x7F
        dst = P + rm[:, None] * KP + (64 * c + c64)[None, :]
        ok = m_ok[:, None]
        tl.store(dst, p0.to(tl.int8), mask=ok)
        tl.store(dst + M * KP, p1.to(tl.int8), mask=ok)
        tl.store(dst + 2 * M * KP, p2.to(tl.int8), mask=ok)
        tl.store(dst + 3 * M * KP, p3.to(tl.int8), mask=ok)
        tl.store(XEXP + rm * NC + c, e, mask=m_ok)
        sa = tl.sum(tl.reshape(p0, [BM, 2, 32]), axis=2) * 128 + tl.sum(tl.reshape(p1, [BM, 2, 32]), axis=2)
        sb = tl.sum(tl.reshape(p2, [BM, 2, 32]), axis=2) * 128 + tl.sum(tl.reshape(p3, [BM, 2, 32]), axis=2)
        b2 = tl.arange(0, 2)
        at = XS + rm[:, None] * (2 * NC) + 2 * c + b2[None, :]
        tl.store(at, sa.to(tl.float32), mask=ok)
        tl.store(at + M * 2 * NC, sb.to(tl.float32), mask=ok)

    @triton.jit
    def _weights(QF, HF, tt, c, NC, b: tl.constexpr, FMT: tl.constexpr, BN: tl.constexpr):
        # int8 [BN, 32]: the A values of block b of chunk c for output rows n = 16 tile + 8 rr + g (tile
        # tt[n], clamped by the caller), the k axis in the order (t, rk, i) (register r = 2 rk + rr,
        # byte i of lane 4 g + t): each lane word loaded once, its bytes / nibbles taken by broadcasting
        n = tl.arange(0, BN)
        half = (n % 16) // 8  # rr of each row
        rr = half[:, None, None, None]
        g = n % 8
        t = tl.arange(0, 4)
        rk = tl.arange(0, 2)[None, None, :, None]
        i = tl.arange(0, 4)[None, None, None, :]
        lane = (4 * g)[:, None] + t[None, :]  # [BN, 4]
        base = (tt * NC + c)[:, None]
        if FMT == 0:  # q8_0: the bytes are the values (register r = 2 rk + rr)
            w = tl.load(QF + (((base * 2 + b) * 32 + lane) * 4)[:, :, None] + 2 * tl.arange(0, 2)[None, None, :]
                        + half[:, None, None])
            a = (w[:, :, :, None] >> (8 * i)) & 0xFF
        else:
            w = tl.load(QF + (base * 32 + lane) * 4 + 2 * b + half[:, None])
            nib = (w[:, :, None, None] >> (8 * i + 4 * rk)) & 0xF
            if FMT == 1:  # q5_0: nibble at bits 3-6, NOT the 5th bit at bit 7: 8 (q - 16)
                h = tl.load(HF + base * 32 + lane)
                a = (nib << 3) | (((h[:, :, None, None] >> (8 * i + 7 - 4 * b - 2 * rk - rr)) & 1) << 7)
            elif FMT == 2:  # q4_0: 16 (q - 8)
                a = (nib << 4) ^ 0x80
            elif FMT == 3:  # q4_k: the code itself
                a = nib
            elif FMT == 5:  # q5_k: the code itself, its 5th bit from hf (byte i, bit 4 b + r)
                h = tl.load(HF + base * 32 + lane)
                a = nib | (((h[:, :, None, None] >> (8 * i + 4 * b + 2 * rk + rr)) & 1) << 4)
            else:  # q6_k: nibble at bits 2-5, the stored high field at 6-7: 4 (q - 32)
                h = tl.load(HF + (base * 32 + lane) * 2 + b)
                a = (nib << 2) | (((h[:, :, None, None] >> (8 * i + 4 * rk + 2 * rr)) & 3) << 6)
        return tl.reshape(a, [BN, 32]).to(tl.int8)

    @triton.jit
    def _dot4(w, p0, p1, p2, p3):
        # the two piece pairs' exact int32 joins of w [BN, 32] against the pieces [32, BM]
        c0 = tl.dot(w, p0, out_dtype=tl.int32)
        c1 = tl.dot(w, p1, out_dtype=tl.int32)
        c2 = tl.dot(w, p2, out_dtype=tl.int32)
        c3 = tl.dot(w, p3, out_dtype=tl.int32)
        return (c0 * 128 + c1).to(tl.float32), (c2 * 128 + c3).to(tl.float32)

    @triton.jit(do_not_specialize=["M"])
    def gemm_frag(P, XEXP, XS, QF, HF, SF, DF, Y, M, N, NT, NC, CPS, KP, stride_ym, stride_ys,
                  FMT: tl.constexpr, SHIFT: tl.constexpr, TB: tl.constexpr, BM: tl.constexpr):
        """Split program_id(2)'s sum P_s for x rows m of program_id(1)'s BM and output rows of
        program_id(0)'s TB row tiles, from x_pieces' output (module docstring); Y [S, M, N] (stride_ys
        apart; one split: y itself)."""
        BN: tl.constexpr = 16 * TB
        tb = tl.program_id(0) * TB
        s = tl.program_id(2)
        rm = tl.program_id(1) * BM + tl.arange(0, BM)
        m_ok = rm < M
        n = tl.arange(0, BN)
        tt = tl.minimum(tb + n // 16, NT - 1)  # a tile past the end is loaded (clamped), never stored
        rr = (n % 16) // 8
        g = n % 8
        k = tl.arange(0, 32)
        acc_a = tl.zeros([BN, BM], dtype=tl.float32)  # pieces 0, 1
        acc_b = tl.zeros([BN, BM], dtype=tl.float32)  # pieces 2, 3
        c0 = s * CPS
        c1 = tl.minimum(c0 + CPS, NC)
        for c in range(c0, c1):
            e = tl.load(XEXP + rm * NC + c, mask=m_ok, other=0)
            xe_a = _pow2(e - 14 - SHIFT)[None, :]
            xe_b = _pow2(e - 28 - SHIFT)[None, :]
            rec = (tt * NC + c) * 8 + g  # this row's scale record (SF: 4 fp16 or 2 words an entry)
            sup = (tt * (NC // 4) + c // 4) * 8 + g  # its super-block's words (DF, the K-quants)
            for b in tl.static_range(2):
                src = P + rm[None, :] * KP + (64 * c + 32 * b + k)[:, None]
                p0 = tl.load(src, mask=m_ok[None, :], other=0)  # int8 [32, BM]
                p1 = tl.load(src + M * KP, mask=m_ok[None, :], other=0)
                p2 = tl.load(src + 2 * M * KP, mask=m_ok[None, :], other=0)
                p3 = tl.load(src + 3 * M * KP, mask=m_ok[None, :], other=0)
                w = _weights(QF, HF, tt, c, NC, b, FMT, BN)
                if FMT == 4:  # q6_k: each 16-column half with its own scale (record word b, byte 2 half + rr)
                    rk = ((k // 4) % 2)[None, :]
                    lo_a, lo_b = _dot4(tl.where(rk == 0, w, 0).to(tl.int8), p0, p1, p2, p3)
                    hi_a, hi_b = _dot4(tl.where(rk == 1, w, 0).to(tl.int8), p0, p1, p2, p3)
                    word = tl.load(SF + rec * 2 + b)
                    d = _f16(tl.load(DF + sup) >> (16 * rr))
                    s_lo = d * ((word >> (8 * rr)) & 0xFF).to(tl.int8).to(tl.float32)
                    s_hi = d * ((word >> (8 * (2 + rr))) & 0xFF).to(tl.int8).to(tl.float32)
                    acc_a = tl.fma(lo_a, s_lo[:, None] * xe_a, acc_a)
                    acc_a = tl.fma(hi_a, s_hi[:, None] * xe_a, acc_a)
                    acc_b = tl.fma(lo_b, s_lo[:, None] * xe_b, acc_b)
                    acc_b = tl.fma(hi_b, s_hi[:, None] * xe_b, acc_b)
                else:
                    fa, fb = _dot4(w, p0, p1, p2, p3)
                    if FMT == 3 or FMT == 5:  # q4_k, q5_k: (d sc) x the codes' sum, then (-dmin m) x sum(x)
                        sh = 8 * (2 * b + rr)
                        dd = tl.load(DF + sup * 2 + rr)
                        al = _f16(dd) * ((tl.load(SF + rec * 2) >> sh) & 0xFF).to(tl.float32)
                        be = -_f16(dd >> 16) * ((tl.load(SF + rec * 2 + 1) >> sh) & 0xFF).to(tl.float32)
                        sa = tl.load(XS + rm * (2 * NC) + 2 * c + b, mask=m_ok, other=0.0)
                        sb = tl.load(XS + M * 2 * NC + rm * (2 * NC) + 2 * c + b, mask=m_ok, other=0.0)
                        acc_a = tl.fma(fa, al[:, None] * xe_a, acc_a)
                        acc_a = tl.fma(sa[None, :] + tl.zeros([BN, BM], dtype=tl.float32), be[:, None] * xe_a, acc_a)
                        acc_b = tl.fma(fb, al[:, None] * xe_b, acc_b)
                        acc_b = tl.fma(sb[None, :] + tl.zeros([BN, BM], dtype=tl.float32), be[:, None] * xe_b, acc_b)
                    else:  # the block's fp16 scale (record entry 2 b + rr)
                        da = tl.load(SF + rec * 4 + 2 * b + rr).to(tl.float32)
                        acc_a = tl.fma(fa, da[:, None] * xe_a, acc_a)
                        acc_b = tl.fma(fb, da[:, None] * xe_b, acc_b)
        row = tb * 16 + n
        ok = ((tb + n // 16) < NT) & (row < N)
        tl.store(Y + s * stride_ys + rm[None, :] * stride_ym + row[:, None], acc_a + acc_b,
                 mask=ok[:, None] & m_ok[None, :])

    @triton.jit
    def sum_splits(PS, Y, M, N, S, stride_ym, BLOCK: tl.constexpr):
        """Y[m, n] = ((0 + P_0) + P_1) + ... over the S split sums PS [S, M, N] (the decode GEMV's order)."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = i < M * N
        tot = tl.zeros([BLOCK], dtype=tl.float32)
        for s in range(S):
            tot += tl.load(PS + s * M * N + i, mask=ok, other=0.0)
        tl.store(Y + (i // N) * stride_ym + i % N, tot, mask=ok)


def launch(x: torch.Tensor, fw, split_k: int, out: torch.Tensor, tb: int | None = None, bm: int | None = None,
           warps: int = 4, pieces: tuple[torch.Tensor, ...] | None = None, stages: int | None = None) -> None:
    """out[M, N] (float32, unit column stride) = x [M, K] @ values.T for a layout fw (Frag8Weight or
    FragKWeight), each row the bits the frag8 GEMV gives it at split_k (the same chunks a split).
    tb, bm, warps: row tiles and x rows a program takes, its warps (any: a row's bits do not depend
    on them; None: TILES, or SMALL_TILES below TILES' rows). pieces: `make_pieces(x)` when several
    matrices read the same x (made here otherwise). stages: the chunk loop's software pipelining
    depth (None: Triton's default; a sweep's knob)."""
    from .frag8_gemv import SHIFT

    n, k = fw.shape
    m = x.shape[0]
    tiles = TILES if m >= TILES[1] else SMALL_TILES
    tb, bm = tb or tiles[0], bm or tiles[1]
    assert x.dim() == 2 and x.shape[1] == k and x.stride(1) == 1 and out.stride(1) == 1, (x.shape, out.stride())
    nt, nc = fw.tiles
    p, xexp, xs = pieces if pieces is not None else make_pieces(x, nc)
    assert p.shape == (4, m, 64 * nc), (p.shape, m, nc)
    cps = -(-nc // split_k)
    splits = -(-nc // cps)
    hf = fw.hf if fw.hf is not None else fw.qf
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    gemm_frag[(triton.cdiv(nt, tb), triton.cdiv(m, bm), splits)](
        p, xexp, xs, fw.qf, hf, fw.sf, getattr(fw, "df", fw.qf), y, m, n, nt, nc, cps, 64 * nc,
        y.stride(-2), 0 if splits == 1 else y.stride(0), FMT=FMT_ID[fw.fmt], SHIFT=SHIFT[fw.fmt], TB=tb, BM=bm,
        num_warps=warps, **({} if stages is None else {"num_stages": stages}))
    if splits > 1:
        block = 1024
        sum_splits[(triton.cdiv(m * n, block),)](y, out, m, n, splits, out.stride(0), BLOCK=block, num_warps=4)


def make_pieces(x: torch.Tensor, nc: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K]'s pieces for gemm_frag, made once a chunk of rows (x_pieces): (P int8 [4, M, 64 NC],
    E int32 [M, NC], sums float32 [2, M, 2 NC])."""
    m, k = x.shape
    p = torch.empty(4, m, 64 * nc, dtype=torch.int8, device=x.device)
    xexp = torch.empty(m, nc, dtype=torch.int32, device=x.device)
    xs = torch.empty(2, m, 2 * nc, dtype=torch.float32, device=x.device)
    bm = 16
    x_pieces[(nc, triton.cdiv(m, bm))](x, p, xexp, xs, m, k, nc, 64 * nc, x.stride(0), BM=bm, num_warps=4)
    return p, xexp, xs
