"""The portable Triton GEMV kernels for Q8_0 / Q5_0 / Q4_0 packed weights and 1-4 input rows.

Owns: the kernels of tiles "dot_bf16x3" and "dot_i8w", their x operands and their launch. Both read
each weight byte once for all M rows (a verify of k+1 rows moves about the bytes of one row) and
accumulate in fp32; they are the defaults before Hopper (gemv.DEFAULT_TILES).

- "dot_bf16x3": per 32-element block, the weight tile [32, BLOCK_N] holds small integers (int8,
  or nibble(+high bit) - offset), which bf16 represents exactly. x is split into three bf16
  pieces (hi + mid + lo = x to ~24 bits) stacked as rows 4p + m of a 16-row operand (12 rows
  used for M = 4), so ONE bf16 tensor-core dot gives all rows x all pieces with exact products
  and fp32 accumulation; the block's fp16 scale multiplies the [16, BLOCK_N] partial, and the
  three pieces are summed at the end. fp32-rounding accuracy at tensor-core cost, flat in M.
- "dot_i8w": integer tensor cores on whole 128-byte lines of each row. x is split into int8
  pieces per 32-block with power-of-two scales (4 pieces: 27 bits, past fp32's 24), stored
  block-diagonally (rows = block x piece x row) so the blocks' partials come out as separate rows;
  the exact int32 partials become fp32 through a magic-number add, then the weight and piece
  scales apply in fp32. q8_0: a line is 4 blocks, the [BLOCK_N, 128] tile the dot's B operand
  (gemv_i8w). q4_0 / q5_0 (stored in block pairs, repack.py): a line is 4 pairs = 8 blocks, its
  low nibbles (blocks 0, 2, 4, 6) and high nibbles (1, 3, 5, 7) two int8 A-operand tiles in element
  order, each against its own operand (x_pair); the nibbles stay unsigned (q5_0's 5th bits ORed
  in) and the offset (8 or 16) is subtracted once per row as OFF * sum(x piece); on CUDA the nibble
  split is one and/shift on 4 bytes at a time (inline PTX). A split over K (program_id(1)) for deep
  matrices with few output tiles writes per-split partials, summed after (no atomics: the result
  does not depend on the order programs finish).

Ignores: tile choice (gemv.py), the layout (repack.py), the Hopper kernels (frag8_gemv.py).
Triton is optional: this module imports without it (`triton` is then None). On CPU tensors the
kernels run only in Triton's interpreter (TRITON_INTERPRET=1 set before triton is first imported,
as tests/conftest.py does without CUDA), where dot operands are replaced by the same values in fp32
(the interpreter multiplies bf16's raw bits as integers; every integer partial is below 2^24) and
the PTX path is off.
"""

from __future__ import annotations

import torch

from ..repack import PackedWeight

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2}
KERNELS = ("dot_bf16x3", "dot_i8w")

if triton is not None:
    # Helpers live at module level, not in closures: the interpreter resolves them in globals.
    @triton.jit
    def _q8_block(QS, rn, okn, kb, K):
        # int8 quants of block kb of rows rn, as a [32, BN] tile (K index down, rows across);
        # okn [BN]: row exists and block kb exists.
        rj = tl.arange(0, 32)
        return tl.load(QS + rn[None, :] * K + kb * 32 + rj[:, None], mask=okn[None, :], other=0)

    @triton.jit
    def _pair_bytes(K):
        # bytes per row of a nibble qs array: ceil(nb / 2) block pairs of 32 bytes (repack.py)
        return (K // 32 + 1) // 2 * 32

    @triton.jit
    def _qh_bit(j):
        # the bit of a block's stored q5_0 qh word that holds element j's 5th bit (repack.qh_bit)
        return 8 * (((j % 4) >> 1) | (((j % 4) & 1) << 1)) + j // 4

    @triton.jit
    def _nib_value(v, h, j, HAS_QH: tl.constexpr):
        # nibbles v (0..15) -> signed values: q4_0 v - 8; q5_0 (v | 5th bit << 4) - 16, element j's
        # bit being bit _qh_bit(j) of the block's stored qh word h (v, h, j broadcast together; h
        # unused for q4_0). An arithmetic shift of a negative int32 is fine: & 1 keeps that bit.
        if HAS_QH:
            return (v | (((h >> _qh_bit(j)) & 1) << 4)) - 16
        return v - 8

    @triton.jit
    def _nib_block(QS, QH, rn, okn, kb, K, HAS_QH: tl.constexpr):
        # Block kb of rows rn -> int32 [32, BN] values in element order: the low (kb even) or high
        # (odd) nibbles of its pair's 32 bytes (repack.py), q5_0's 5th bits ORed in, minus the offset.
        rj = tl.arange(0, 32)
        b = tl.load(QS + rn[None, :] * _pair_bytes(K) + (kb // 2) * 32 + rj[:, None], mask=okn[None, :], other=0)
        v = (b.to(tl.int32) >> (4 * (kb % 2))) & 0xF
        h = v  # (unused for q4_0)
        if HAS_QH:
            h = tl.load(QH + rn * (K // 32) + kb, mask=okn, other=0)[None, :]  # [1, BN]
        return _nib_value(v, h, rj[:, None], HAS_QH)

    @triton.jit
    def _x_rows(X, stride_xm, kidx, K, M: tl.constexpr):
        # [16, len(kidx)] fp32 dot operand: row 4p + m = bf16 piece p (0..2) of x row m, so
        # hi + mid + lo = x to ~24 bits. Rows past M (and 12..15) are 0.
        r = tl.arange(0, 16)
        m = r % 4
        p = r // 4
        row_ok = (m < M) & (p < 3)
        x = tl.load(X + m[:, None] * stride_xm + kidx[None, :], mask=row_ok[:, None] & (kidx < K)[None, :], other=0.0)
        x = x.to(tl.float32)
        hi = x.to(tl.bfloat16).to(tl.float32)
        r1 = x - hi  # exact in fp32
        mid = r1.to(tl.bfloat16).to(tl.float32)
        lo = (r1 - mid).to(tl.bfloat16).to(tl.float32)
        return tl.where(p[:, None] == 0, hi, tl.where(p[:, None] == 1, mid, lo))

    @triton.jit
    def gemv_dot(X, QS, QH, SC, Y, N, K, stride_xm, stride_ym,
                 M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 FMT: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # QS: q8_0 int8 [N, K]; q5_0/q4_0 uint8 [N, pair bytes] (repack.py). QH: q5_0 int32 [N, K/32] (else unused).
        # SC fp16 [N, K/32]; X [M, K] (fp32/bf16, row stride stride_xm); Y fp32 [M, N].
        # FMT 0/1/2 = q8_0/q5_0/q4_0.
        BKB: tl.constexpr = BLOCK_K // 32  # blocks per loop step (unrolled)
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            for b in tl.static_range(BKB):
                kb = kb0 + b
                okn = n_mask & ((rn * 0 + kb) < nb)  # [BN]: the block exists (K tail) in row n
                s = tl.load(SC + rn * nb + kb, mask=okn, other=0.0).to(tl.float32)  # [BN]
                if FMT == 0:
                    q = _q8_block(QS, rn, okn, kb, K)
                else:
                    q = _nib_block(QS, QH, rn, okn, kb, K, FMT == 1)
                xr = _x_rows(X, stride_xm, kb * 32 + tl.arange(0, 32), K, M)
                if F32_OPERANDS:  # interpreter: the same values in fp32 (exact products, fp32 sums)
                    part = tl.dot(xr, q.to(tl.float32), input_precision="ieee")
                else:  # the pieces and the weights' small integers are exact in bf16
                    part = tl.dot(xr.to(tl.bfloat16), q.to(tl.bfloat16))
                acc += part * s[None, :]
        # rows 4p + m -> [p, m, n]; summing over p adds the pieces
        y = tl.sum(tl.reshape(acc, [4, 4, BLOCK_N]), axis=0)
        rm = tl.arange(0, 4)
        tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])

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
    def x_wide(X, XW, XS, K, stride_xm, M: tl.constexpr, MP: tl.constexpr):
        # Group g of 4 blocks (128 columns) of x [M, K] -> XW int8 [ng, R, 128], R = 16 MP: row
        # r = (b * 4 + p) * MP + m holds int8 piece p of x row m in block b's 32 columns and zeros
        # in the other blocks' (block-diagonal), XS fp32 [ng, R] its scale (_int8_pieces).
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
    def gemv_i8w_pairs(XW, XS, XC, QS, QH, SC, Y, N, K, stride_ys, stride_ym, GPS,
                       M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, HAS_QH: tl.constexpr,
                       F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # q4_0 / q5_0: lines of 128 bytes (4 pairs = 8 blocks) as the A operand (_pair_step). Split
        # over K: program_id(1) takes GPS lines and writes its partial slice of Y.
        R: tl.constexpr = 16 * MP
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        g0 = tl.program_id(1) * GPS
        acc = tl.zeros([BLOCK_N, R], dtype=tl.float32)
        for g in range(g0, tl.minimum(g0 + GPS, tl.cdiv(K // 32, 8))):
            acc = _pair_step(QS, QH, XW, XS, XC, SC, rn, n_mask, g, K, acc, MP, BLOCK_N, HAS_QH, F32_OPERANDS, ASM)
        y = tl.sum(tl.reshape(acc, [BLOCK_N, 16, MP]), axis=1)  # [BN, MP]: blocks and pieces summed
        rm = tl.arange(0, MP)
        tl.store(Y + tl.program_id(1) * stride_ys + rm[None, :] * stride_ym + rn[:, None], y,
                 mask=(rm[None, :] < M) & n_mask[:, None])


def _splits(ng: int, split_k: int) -> tuple[int, int]:
    """(groups per split, number of splits) for ng K-groups cut into at most split_k parts."""
    gps = -(-ng // max(1, min(split_k, ng)))
    return gps, -(-ng // gps)


def launch(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor) -> None:
    """out[M, N] = x @ dequant(w).T with tile.kernel in KERNELS (kernels.gemv_packed has checked the
    arguments; x has unit column stride)."""
    n, k = w.shape
    m = x.shape[0]
    fmt = FMT_ID[w.fmt]
    qh = w.qh if w.fmt == "q5_0" else w.scales  # an unused pointer unless q5_0
    interp = not x.is_cuda
    if tile.kernel == "dot_bf16x3":
        gemv_dot[(triton.cdiv(n, tile.BLOCK_N),)](x, w.qs, qh, w.scales, out, n, k, x.stride(0), out.stride(0), M=m,
                                                  BLOCK_N=tile.BLOCK_N, BLOCK_K=tile.BLOCK_K, FMT=fmt,
                                                  F32_OPERANDS=interp, num_warps=tile.num_warps,
                                                  num_stages=tile.num_stages)
        return
    assert tile.kernel == "dot_i8w" and tile.BLOCK_K == 128, f"{tile}: 128 bytes of each row a step"
    mp = 1 if m == 1 else (2 if m == 2 else 4)
    nib = fmt != 0
    nb = k // 32
    ng = triton.cdiv(nb, 8 if nib else 4)  # K-groups: a line of 4 pairs (nibbles) or of 4 q8_0 blocks
    gps, splits = _splits(ng, tile.split_k)
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    stride_ys = 0 if splits == 1 else y.stride(0)
    meta = dict(M=m, MP=mp, BLOCK_N=tile.BLOCK_N, F32_OPERANDS=interp, num_warps=tile.num_warps,
                num_stages=tile.num_stages)
    rows = (32 if nib else 16) * mp
    xw = torch.empty(ng, rows, 128, dtype=torch.int8, device=x.device)
    xs = torch.empty(ng, rows, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, tile.BLOCK_N), splits)
    if nib:
        xc = torch.empty(ng, rows, dtype=torch.int32, device=x.device)
        x_pair[(ng,)](x, xw, xs, xc, k, x.stride(0), M=m, MP=mp, OFF=16 if fmt == 1 else 8, num_warps=4)
        gemv_i8w_pairs[grid](xw, xs, xc, w.qs, qh, w.scales, y, n, k, stride_ys, out.stride(0), gps,
                             HAS_QH=fmt == 1, ASM=x.is_cuda, **meta)
    else:
        x_wide[(ng,)](x, xw, xs, k, x.stride(0), M=m, MP=mp, num_warps=4)
        gemv_i8w[grid](xw, xs, w.qs, w.scales, y, n, k, stride_ys, out.stride(0), gps, **meta)
    if splits > 1:
        torch.sum(y, dim=0, out=out)
