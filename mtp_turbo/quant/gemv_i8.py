"""Integer-tensor-core GEMV kernels (Q8_0 / Q5_0 / Q4_0 weights, 1-4 input rows) and their launch.

Owns: the int8 kernels and the x operands they need. x is split into int8 pieces per 32-block
with power-of-two scales (4 pieces: 27 bits, past fp32's 24), the weights' small integers go into
the int8 dot as they are loaded, the exact int32 partials become fp32 through a magic-number add,
and the weight and piece scales are applied in fp32. Three variants:

- "dot_i8": one [32, BLOCK_N] tile per 32-block against x_pieces' [16, 32] operand (4 pieces x
  4 rows). A nibble block is the low or high half of its pair's 32 bytes, in element order.
- "dot_i8w" (q8_0): whole 128-byte lines: a [BLOCK_N, 128] tile (4 blocks of each row) and ONE
  K = 128 dot against x_wide's block-diagonal operand (rows = block x piece x row), so the blocks'
  partials come out as separate rows. 86% of copy bandwidth on the H200 head at 1 row; its
  operand grows 16 rows per input row.
- "dot_i8n": lines of 128 bytes as the tensor cores' A operand (dot_i8w's orientation swapped),
  n_tiles output tiles per program walked in one loop, so the next tile's lines are in flight
  (the head's K = 640 is only 3-5 lines per tile). For q8_0 a line is dot_i8w's 4 blocks. For
  q4_0 / q5_0 (stored in block pairs, repack.py) a line is 4 pairs = 8 blocks: its low nibbles
  (blocks 0, 2, 4, 6) and high nibbles (1, 3, 5, 7) are two int8 tiles in element order, each
  against its own 16-row-per-input-row operand (x_pair). The nibbles stay unsigned (0..15, q5_0's
  5th bits ORed in: 0..31) and the offset (8 or 16) is subtracted once per row as OFF * sum(x
  piece). On CUDA the nibble split is one and/shift on 4 bytes at a time (inline PTX).
Both line kernels take a split over K (program_id(1)): deep matrices with few output tiles
(8192 x 8192: 128 programs for 132 SMs) write per-split partials, summed after (no atomics: the
result does not depend on the order programs finish).

Ignores: the float kernels and dispatch (gemv_triton.py), tile defaults (gemv.py), the layout
(repack.py). Without CUDA they run in Triton's interpreter, where the int8 dots become fp32 dots
of the same integers (exact: every partial is below 2^24) and the PTX path is off.
"""

from __future__ import annotations

import torch

from .repack import PackedWeight

try:  # imported by gemv_triton.py only when Triton is there; this guard keeps imports cheap
    import triton
    import triton.language as tl

    from .gemv_triton import _nib_block, _nib_value, _pair_bytes, _q8_block, _qh_bit  # noqa: F401  (jit callees resolve in globals)
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def _int8_pieces(x, p):
        # x fp32 [R, C]: each row one block of one x row (zeros outside it), p [R]: the piece the
        # row holds -> (int8 [R, C] piece p of x, fp32 [R] its scale), |piece| <= 65, the 4 pieces
        # of a row summing (times their scales) to x to 27 bits below the row's max |x|.
        # a < 2^(ef - 126) (ef: a's biased exponent), so v = x * 2^(132 - ef) has |v| < 64; the
        # scale is built from its bits (exact); ef >= 5 keeps it finite (tinier rows lose bits only)
        a = tl.max(tl.abs(x), axis=1)
        ef = tl.maximum((a.to(tl.int32, bitcast=True) >> 23) & 0xFF, 5)
        sc = ((259 - ef) << 23).to(tl.float32, bitcast=True)
        v = x * sc[:, None]
        q = tl.zeros_like(v)
        for i in tl.static_range(4):  # nearest integer, then the exact remainder scaled by 2^7
            pi = tl.floor(v + 0.5)
            q = tl.where(p[:, None] == i, pi, q)
            v = (v - pi) * 128.0
        step = tl.where(p == 0, 1.0, tl.where(p == 1, 1.0 / 128, tl.where(p == 2, 1.0 / 16384, 1.0 / 2097152)))
        return q.to(tl.int8), step / sc

    @triton.jit
    def x_pieces(X, XQ, XS, K, stride_xm, M: tl.constexpr):
        # One 32-block kb of x [M, K] -> XQ int8 [nb, 16, 32] and XS fp32 [nb, 16]: row 4p + m is
        # piece p of x row m, |piece| <= 65, and sum_p XQ[kb, 4p+m, c] * XS[kb, 4p+m] == x[m, kb*32+c]
        # to 27 bits below the block's max |x| (past fp32's 24).
        kb = tl.program_id(0)
        r = tl.arange(0, 16)
        c = tl.arange(0, 32)
        m = r % 4
        p = r // 4
        x = tl.load(X + m[:, None] * stride_xm + kb * 32 + c[None, :],
                    mask=(m < M)[:, None] & ((kb * 32 + c) < K)[None, :], other=0.0).to(tl.float32)
        q, xs = _int8_pieces(x, p)
        tl.store(XQ + kb * 512 + r[:, None] * 32 + c[None, :], q)
        tl.store(XS + kb * 16 + r, tl.where(m < M, xs, 0.0))

    @triton.jit
    def _block_add(acc, q, XQ, XS, SC, rn, n_mask, kb, nb, F32_OPERANDS: tl.constexpr):
        # acc [16, BN] + block kb's partial: x_pieces' int8 operand [16, 32] times the integer
        # weight tile q [32, BN], then piece scale (per row) x weight scale (per output). A block
        # past the row's end (kb >= nb) adds 0 (scale and operand masked).
        r16 = tl.arange(0, 16)
        c32 = tl.arange(0, 32)
        okn = n_mask & ((rn * 0 + kb) < nb)
        s = tl.load(SC + rn * nb + kb, mask=okn, other=0.0).to(tl.float32)  # [BN]
        ok16 = (r16 * 0 + kb) < nb
        xq = tl.load(XQ + kb * 512 + r16[:, None] * 32 + c32[None, :], mask=ok16[:, None], other=0)
        xs = tl.load(XS + kb * 16 + r16, mask=ok16, other=0.0)  # [16]
        if F32_OPERANDS:  # interpreter: the same integers in fp32 (exact: |sum| < 2^24)
            part = tl.dot(xq.to(tl.float32), q.to(tl.float32), input_precision="ieee")
        else:
            ip = tl.dot(xq, q.to(tl.int8), out_dtype=tl.int32)
            part = (ip + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
        return acc + (part * xs[:, None]) * s[None, :]

    @triton.jit
    def gemv_i8(XQ, XS, QS, QH, SC, Y, N, K, stride_ym,
                M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                FMT: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # Integer tensor cores: per 32-block, x's int8 pieces [16, 32] (x_pieces) times the int8
        # weight tile [32, BN] -> exact int32; no per-weight conversion (the cost that bounds the
        # bf16 variant: one int -> float per weight byte). |dot| <= 32 * 65 * 128 < 2^22, so the
        # int32 -> fp32 step is the magic-number add (exact, full-rate ALU instead of I2F).
        # Nibble formats with 2+ blocks a step read each pair's 32 bytes once for both its blocks.
        BKB: tl.constexpr = BLOCK_K // 32
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        c32 = tl.arange(0, 32)
        acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            if FMT == 0 or BKB == 1:
                for b in tl.static_range(BKB):
                    kb = kb0 + b
                    okn = n_mask & ((rn * 0 + kb) < nb)
                    if FMT == 0:
                        q = _q8_block(QS, rn, okn, kb, K)  # int8 [32, BN]
                    else:
                        q = _nib_block(QS, QH, rn, okn, kb, K, FMT == 1)  # int32 [32, BN], element order
                    acc = _block_add(acc, q, XQ, XS, SC, rn, n_mask, kb, nb, F32_OPERANDS)
            else:
                for pp in tl.static_range(BKB // 2):
                    kb = kb0 + 2 * pp  # even: the pair's low half; kb + 1 its high half (maybe past nb)
                    okn = n_mask & ((rn * 0 + kb) < nb)
                    pair = tl.load(QS + rn[None, :] * _pair_bytes(K) + (kb // 2) * 32 + c32[:, None],
                                   mask=okn[None, :], other=0).to(tl.int32)  # [32, BN]
                    hl = pair  # (unused for q4_0)
                    hh = pair
                    if FMT == 1:  # q5_0's 5th bits of both blocks
                        hl = tl.load(QH + rn * nb + kb, mask=okn, other=0)[None, :]
                        hh = tl.load(QH + rn * nb + kb + 1, mask=okn & ((rn * 0 + kb + 1) < nb), other=0)[None, :]
                    lo = _nib_value(pair & 0xF, hl, c32[:, None], FMT == 1)
                    hi = _nib_value(pair >> 4, hh, c32[:, None], FMT == 1)
                    acc = _block_add(acc, lo, XQ, XS, SC, rn, n_mask, kb, nb, F32_OPERANDS)
                    acc = _block_add(acc, hi, XQ, XS, SC, rn, n_mask, kb + 1, nb, F32_OPERANDS)
        y = tl.sum(tl.reshape(acc, [4, 4, BLOCK_N]), axis=0)  # rows 4p + m: sum the pieces
        rm = tl.arange(0, 4)
        tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])

    @triton.jit
    def x_wide(X, XW, XS, K, stride_xm, M: tl.constexpr, MP: tl.constexpr):
        # Group g of 4 blocks (128 columns) of x [M, K] -> XW int8 [ng, R, 128], R = 16 MP: row
        # r = (b * 4 + p) * MP + m holds int8 piece p of x row m in block b's 32 columns and zeros
        # in the other blocks' (block-diagonal), XS fp32 [ng, R] its scale; pieces as x_pieces.
        g = tl.program_id(0)
        R: tl.constexpr = 16 * MP
        r = tl.arange(0, R)
        c = tl.arange(0, 128)
        m = r % MP
        p = (r // MP) % 4
        x = tl.load(X + m[:, None] * stride_xm + g * 128 + c[None, :],
                    mask=(m < M)[:, None] & ((g * 128 + c) < K)[None, :], other=0.0).to(tl.float32)
        x = tl.where((c // 32)[None, :] == (r // (4 * MP))[:, None], x, 0.0)
        q, xs = _int8_pieces(x, p)
        tl.store(XW + g * R * 128 + r[:, None] * 128 + c[None, :], q)
        tl.store(XS + g * R + r, tl.where(m < M, xs, 0.0))

    @triton.jit
    def _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb,
                    R: tl.constexpr, NBLK: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr):
        # acc + part * piece scale (per row) * weight scale (per block and output) for group g of
        # NBLK blocks; rows r = (b * 4 + p) * MP + m (x_wide's order). part [R, BN] fp32.
        xs = tl.load(XS + g * R + tl.arange(0, R))  # [R]
        rb = tl.arange(0, NBLK)
        sb = tl.load(SC + rn[None, :] * nb + g * NBLK + rb[:, None],
                     mask=n_mask[None, :] & ((g * NBLK + rb) < nb)[:, None], other=0.0).to(tl.float32)  # [NBLK, BN]
        s = tl.reshape(tl.broadcast_to(sb[:, None, :], [NBLK, 4 * MP, BLOCK_N]), [R, BLOCK_N])
        return acc + (part * xs[:, None]) * s

    @triton.jit
    def _q8_line(QS, rn, n_mask, g, K):
        # q8_0 line g of rows rn: int8 [BN, 128] (4 blocks, 128 contiguous bytes per row)
        rk = tl.arange(0, 128)
        return tl.load(QS + rn[:, None] * K + g * 128 + rk[None, :],
                       mask=n_mask[:, None] & ((g * 128 + rk) < K)[None, :], other=0)

    @triton.jit
    def _i8w_part(QS, rn, n_mask, g, K, xq, F32_OPERANDS: tl.constexpr):
        # One K = 128 integer dot of q8_0 rows rn's 128 bytes of group g (4 blocks, int8 [BN, 128])
        # against x_wide's block-diagonal operand xq [R, 128]: the 4 blocks' exact partials as
        # separate rows [R, BN].
        w = _q8_line(QS, rn, n_mask, g, K)
        if F32_OPERANDS:  # interpreter: the same integers in fp32 (exact: |sum| < 2^24)
            return tl.dot(xq.to(tl.float32), tl.trans(w).to(tl.float32), input_precision="ieee")
        ip = tl.dot(xq, tl.trans(w), out_dtype=tl.int32)
        return (ip + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0

    @triton.jit
    def gemv_i8w(XW, XS, QS, SC, Y, N, K, stride_ys, stride_ym, GPS,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # q8_0. Per group of 4 blocks: _i8w_part, scaled per row (x piece) and per (block, output)
        # (weight scale) into the accumulator; rows summed at the end. Split over K: program_id(1)
        # takes GPS groups and writes its partial slice of Y.
        R: tl.constexpr = 16 * MP
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)
        g0 = tl.program_id(1) * GPS
        for g in range(g0, tl.minimum(g0 + GPS, tl.cdiv(nb, 4))):
            xq = tl.load(XW + g * R * 128 + r[:, None] * 128 + rk[None, :])  # int8 [R, 128]
            part = _i8w_part(QS, rn, n_mask, g, K, xq, F32_OPERANDS)
            acc = _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb, R, 4, MP, BLOCK_N)
        y = tl.sum(tl.reshape(acc, [16, MP, BLOCK_N]), axis=0)  # rows (b, p, m): sum blocks and pieces
        rm = tl.arange(0, MP)
        tl.store(Y + tl.program_id(1) * stride_ys + rm[:, None] * stride_ym + rn[None, :], y,
                 mask=(rm[:, None] < M) & n_mask[None, :])

    @triton.jit
    def x_pair(X, XW, XS, XC, K, stride_xm, M: tl.constexpr, MP: tl.constexpr, OFF: tl.constexpr):
        # Group g of 8 blocks (256 elements, one 128-byte line of pairs) of x [M, K] -> XW int8
        # [ng, 2R, 128], R = 16 MP: row h R + (j 4 + p) MP + m holds piece p of x row m over block
        # 8g + 2j + h at columns 32j..32j+31 and zeros elsewhere (block-diagonal; h = 0: the
        # line's low-nibble blocks, 1: its high ones). XS fp32 [ng, 2R] the piece scales; XC
        # int32 [ng, 2R] = OFF * (sum of the row's piece), OFF = 8 (q4_0) / 16 (q5_0).
        g = tl.program_id(0)
        R: tl.constexpr = 16 * MP
        rr = tl.arange(0, 2 * R)
        h = rr // R
        r = rr % R
        m = r % MP
        p = (r // MP) % 4
        c = tl.arange(0, 128)
        e = g * 256 + 64 * (c // 32)[None, :] + 32 * h[:, None] + (c % 32)[None, :]  # [2R, 128]
        x = tl.load(X + m[:, None] * stride_xm + e, mask=(m < M)[:, None] & (e < K), other=0.0).to(tl.float32)
        x = tl.where((c // 32)[None, :] == (r // (4 * MP))[:, None], x, 0.0)
        q, xs = _int8_pieces(x, p)
        tl.store(XW + g * 2 * R * 128 + rr[:, None] * 128 + c[None, :], q)
        tl.store(XS + g * 2 * R + rr, tl.where(m < M, xs, 0.0))
        tl.store(XC + g * 2 * R + rr, tl.sum(q.to(tl.int32), axis=1) * OFF)

    @triton.jit
    def _nibbles(b, ASM: tl.constexpr):
        # uint8 [BN, 128] -> (low, high) nibbles as int8 0..15; PTX: 4 bytes per and/shift
        if ASM:
            return tl.inline_asm_elementwise(
                asm="and.b32 $0, $2, 0x0F0F0F0F;\n\tshr.u32 $1, $2, 4;\n\tand.b32 $1, $1, 0x0F0F0F0F;",
                constraints="=r,=r,r", args=[b], dtype=(tl.int8, tl.int8), is_pure=True, pack=4)
        return (b & 15).to(tl.int8), (b >> 4).to(tl.int8)

    @triton.jit
    def _bit5(nib, QH, rn, n_mask, g, nb, H: tl.constexpr, BLOCK_N: tl.constexpr):
        # q5_0: nibbles [BN, 128] of blocks 8g + 2j + H (j < 4) with their 5th bits ORed in (0..31)
        jb = 8 * g + 2 * tl.arange(0, 4) + H
        q5 = tl.load(QH + rn[:, None] * nb + jb[None, :], mask=n_mask[:, None] & (jb < nb)[None, :], other=0)
        c = tl.arange(0, 32)  # element c's bit (repack.qh_bit); & 1 keeps it after an arithmetic shift
        bits = tl.reshape(((q5[:, :, None] >> _qh_bit(c)[None, None, :]) & 1).to(tl.int8), [BLOCK_N, 128])
        return nib | (bits << 4)

    @triton.jit
    def _wdot(w, xq, xc, F32_OPERANDS: tl.constexpr):
        # weights as the A operand: w int8 [BN, 128] @ xq.T [128, R] minus the offset term xc [R]
        # -> fp32 [BN, R] exact partials (|.| < 2^22: the magic-number range)
        if F32_OPERANDS:  # interpreter: the same integers in fp32 (exact below 2^24)
            return tl.dot(w.to(tl.float32), tl.trans(xq).to(tl.float32), input_precision="ieee") - xc[None, :].to(tl.float32)
        ip = tl.dot(w, tl.trans(xq), out_dtype=tl.int32)
        return (ip - xc[None, :] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0

    @triton.jit
    def _col_scales(SC, rn, n_mask, jb, nb, MP: tl.constexpr, BLOCK_N: tl.constexpr):
        # fp16 weight scales of blocks jb [4] of rows rn (0 past nb) -> fp32 [BN, 16 MP], broadcast
        # to the partial's columns (j 4 + p) MP + m
        s = tl.load(SC + rn[:, None] * nb + jb[None, :], mask=n_mask[:, None] & (jb < nb)[None, :], other=0.0)
        return tl.reshape(tl.broadcast_to(s.to(tl.float32)[:, :, None], [BLOCK_N, 4, 4 * MP]), [BLOCK_N, 16 * MP])

    @triton.jit
    def _pair_step(QS, QH, XW, XS, XC, SC, rn, n_mask, g, K, acc, MP: tl.constexpr, BLOCK_N: tl.constexpr,
                   HAS_QH: tl.constexpr, F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # Line g (8 blocks = 4 pairs, 128 bytes) of rows rn: the low nibbles (blocks 8g + 2j) and
        # the high ones (8g + 2j + 1) are two int8 tiles in element order, each against its own
        # 16 MP-row operand of x_pair; partials scaled per piece (column) and per (output, block).
        # acc, returned: fp32 [BN, R], R = 16 MP, column (j 4 + p) MP + m.
        R: tl.constexpr = 16 * MP
        nb = K // 32
        pb = _pair_bytes(K)
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        b = tl.load(QS + rn[:, None] * pb + g * 128 + rk[None, :],
                    mask=n_mask[:, None] & ((g * 128 + rk) < pb)[None, :], other=0)  # uint8 [BN, 128]
        lo, hi = _nibbles(b, ASM)
        if HAS_QH:
            lo = _bit5(lo, QH, rn, n_mask, g, nb, 0, BLOCK_N)
            hi = _bit5(hi, QH, rn, n_mask, g, nb, 1, BLOCK_N)
        xw = XW + g * 2 * R * 128 + r[:, None] * 128 + rk[None, :]
        pl = _wdot(lo, tl.load(xw), tl.load(XC + g * 2 * R + r), F32_OPERANDS)
        ph = _wdot(hi, tl.load(xw + R * 128), tl.load(XC + g * 2 * R + R + r), F32_OPERANDS)
        jb = 8 * g + 2 * tl.arange(0, 4)
        sl = _col_scales(SC, rn, n_mask, jb, nb, MP, BLOCK_N)
        sh = _col_scales(SC, rn, n_mask, jb + 1, nb, MP, BLOCK_N)
        xsl = tl.load(XS + g * 2 * R + r)
        xsh = tl.load(XS + g * 2 * R + R + r)
        return acc + (pl * xsl[None, :]) * sl + (ph * xsh[None, :]) * sh

    @triton.jit
    def _q8_step(QS, XW, XS, SC, rn, n_mask, g, K, acc, MP: tl.constexpr, BLOCK_N: tl.constexpr,
                 F32_OPERANDS: tl.constexpr):
        # q8_0 line g (4 blocks, 128 bytes) of rows rn as the A operand against x_wide's operand
        # [R, 128]; scaled like _pair_step. acc, returned: fp32 [BN, R], column (j 4 + p) MP + m.
        R: tl.constexpr = 16 * MP
        nb = K // 32
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        xq = tl.load(XW + g * R * 128 + r[:, None] * 128 + rk[None, :])  # x_wide's int8 [R, 128]
        part = _wdot(_q8_line(QS, rn, n_mask, g, K), xq, tl.zeros([R], dtype=tl.int32), F32_OPERANDS)
        sb = _col_scales(SC, rn, n_mask, 4 * g + tl.arange(0, 4), nb, MP, BLOCK_N)
        return acc + (part * tl.load(XS + g * R + r)[None, :]) * sb

    @triton.jit
    def gemv_i8n(XW, XS, XC, QS, QH, SC, Y, N, K, stride_ys, stride_ym, GPS, NT,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, FMT: tl.constexpr,
                 F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # Lines of 128 bytes as the A operand: q4_0 / q5_0 in block pairs (_pair_step, 8 blocks a
        # line), q8_0 (_q8_step, 4 blocks). Program (i, s) takes NT consecutive output tiles over
        # split s's lines (GPS of them), in ONE flattened loop over (tile, line) so the pipeliner
        # prefetches across tiles (K = 640 is 3 lines: one tile alone has little in flight); a
        # tile's rows are stored after its last line.
        R: tl.constexpr = 16 * MP
        g0 = tl.program_id(1) * GPS
        cnt = tl.minimum(GPS, tl.cdiv(K // 32, 8 if FMT != 0 else 4) - g0)  # this split's lines
        rm = tl.arange(0, MP)
        acc = tl.zeros([BLOCK_N, R], dtype=tl.float32)
        for it in range(0, NT * cnt):
            g = g0 + it % cnt
            rn = (tl.program_id(0) * NT + it // cnt) * BLOCK_N + tl.arange(0, BLOCK_N)
            n_mask = rn < N
            if FMT == 0:
                acc = _q8_step(QS, XW, XS, SC, rn, n_mask, g, K, acc, MP, BLOCK_N, F32_OPERANDS)
            else:
                acc = _pair_step(QS, QH, XW, XS, XC, SC, rn, n_mask, g, K, acc, MP, BLOCK_N, FMT == 1, F32_OPERANDS,
                                 ASM)
            if it % cnt == cnt - 1:
                y = tl.sum(tl.reshape(acc, [BLOCK_N, 16, MP]), axis=1)  # [BN, MP]: blocks and pieces summed
                tl.store(Y + tl.program_id(1) * stride_ys + rm[None, :] * stride_ym + rn[:, None], y,
                         mask=(rm[None, :] < M) & n_mask[:, None])
                acc = tl.zeros([BLOCK_N, R], dtype=tl.float32)


def _splits(ng: int, split_k: int) -> tuple[int, int]:
    """(groups per split, number of splits) for ng K-groups cut into at most split_k parts."""
    gps = -(-ng // max(1, min(split_k, ng)))
    return gps, -(-ng // gps)


def launch(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor, asm: bool | None = None) -> None:
    """out[M, N] = x @ dequant(w).T with tile.kernel in dot_i8 / dot_i8w / dot_i8n (gemv_packed
    has checked the arguments; x has unit column stride). dot_i8w is q8_0's: on q4_0 / q5_0 it
    runs dot_i8n. asm: the PTX nibble split (default: on CUDA)."""
    n, k = w.shape
    m = x.shape[0]
    fmt = {"q8_0": 0, "q5_0": 1, "q4_0": 2}[w.fmt]
    qh = w.qh if w.fmt == "q5_0" else w.scales  # an unused pointer unless q5_0
    nb = k // 32
    interp = not x.is_cuda
    if tile.kernel == "dot_i8":
        xq = torch.empty(nb, 16, 32, dtype=torch.int8, device=x.device)
        xs = torch.empty(nb, 16, dtype=torch.float32, device=x.device)
        x_pieces[(nb,)](x, xq, xs, k, x.stride(0), M=m, num_warps=1)
        gemv_i8[(triton.cdiv(n, tile.BLOCK_N),)](xq, xs, w.qs, qh, w.scales, out, n, k, out.stride(0), M=m,
                                                 BLOCK_N=tile.BLOCK_N, BLOCK_K=tile.BLOCK_K, FMT=fmt,
                                                 F32_OPERANDS=interp, num_warps=tile.num_warps,
                                                 num_stages=tile.num_stages)
        return
    assert tile.kernel in ("dot_i8w", "dot_i8n") and tile.BLOCK_K == 128, f"{tile}: 128 bytes of each row a step"
    mp = 1 if m == 1 else (2 if m == 2 else 4)
    nib = fmt != 0
    ng = triton.cdiv(nb, 8 if nib else 4)  # K-groups: a line of 4 pairs (nibbles) or of 4 q8_0 blocks
    gps, splits = _splits(ng, tile.split_k)
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    stride_ys = 0 if splits == 1 else y.stride(0)
    meta = dict(M=m, MP=mp, BLOCK_N=tile.BLOCK_N, F32_OPERANDS=interp, num_warps=tile.num_warps,
                num_stages=tile.num_stages)
    rows = (32 if nib else 16) * mp
    xw = torch.empty(ng, rows, 128, dtype=torch.int8, device=x.device)
    xs = torch.empty(ng, rows, dtype=torch.float32, device=x.device)
    xc = torch.empty(ng, rows, dtype=torch.int32, device=x.device) if nib else xs  # (xs: an unused pointer)
    if nib:
        x_pair[(ng,)](x, xw, xs, xc, k, x.stride(0), M=m, MP=mp, OFF=16 if fmt == 1 else 8, num_warps=4)
    else:
        x_wide[(ng,)](x, xw, xs, k, x.stride(0), M=m, MP=mp, num_warps=4)
    if tile.kernel == "dot_i8n" or nib:
        nt = tile.n_tiles
        gemv_i8n[(triton.cdiv(n, tile.BLOCK_N * nt), splits)](
            xw, xs, xc, w.qs, qh, w.scales, y, n, k, stride_ys, out.stride(0), gps, nt, FMT=fmt,
            ASM=x.is_cuda if asm is None else asm, **meta)
    else:
        gemv_i8w[(triton.cdiv(n, tile.BLOCK_N), splits)](xw, xs, w.qs, w.scales, y, n, k, stride_ys, out.stride(0),
                                                         gps, **meta)
    if splits > 1:
        torch.sum(y, dim=0, out=out)
