"""Integer-tensor-core GEMV kernels (Q8_0 / Q5_0 / Q4_0 weights, 1-4 input rows) and their launch.

Owns: the int8 kernels and the x operands they need. x is split into int8 pieces per 32-block
with power-of-two scales (4 pieces: 27 bits, past fp32's 24), the weights' small integers go into
the int8 dot as they are loaded, the exact int32 partials become fp32 through a magic-number add,
and the weight and piece scales are applied in fp32. Four variants:

- "dot_i8": one [32, BLOCK_N] tile per 32-block against x_pieces' [16, 32] operand (4 pieces x
  4 rows). Nibble formats are widened and interleaved to int8 in registers.
- "dot_i8w": whole 128-byte lines: a [BLOCK_N, 128] tile (4 q8_0 blocks of each row) and ONE
  K = 128 dot against x_wide's block-diagonal operand (rows = block x piece x row), so the blocks'
  partials come out as separate rows. 86% of copy bandwidth on the H200 head at 1 row; its
  operand grows 16 rows per input row.
- "dot_i8n": dot_i8w for the nibble formats: 128 bytes of each row = 8 blocks; the low and the
  high nibbles are two [BLOCK_N, 128] tiles taken as they lie (no interleave: byte j of a block
  holds elements j and j + 16, so the x operand x_wide_n is permuted instead), kept unsigned
  (0..15) with the offset (-8, or -16 for q5_0) subtracted once per row as OFF * sum(x piece);
  q5_0's 5th bits are one more 0/1 tile [BLOCK_N, 256] in element order (16 * its dot). On CUDA
  the nibble split is one and/shift on 4 bytes at a time (inline PTX).
dot_i8w and dot_i8n take a split over K (program_id(1)): deep matrices with few output tiles
(8192 x 8192: 128 programs for 132 SMs) write per-split partials, summed after.
- "dot_i8x": x-stationary. A program takes ONE K-group (dot_i8w's lines for q8_0, dot_i8n's for
  the nibble formats) of n_tiles output tiles and loads that group's x operand once for all of
  them; per-group partials are summed after. dot_i8w / dot_i8n reload the operand for every
  weight tile, as many bytes as the tile itself at 4 rows (q8_0) or at 1 row (nibbles). On the
  H200 it wins for the q4_0 head at 1 row (46.8 vs 52.6 us) and loses elsewhere (the partials
  it writes per group, fewer steps per program to pipeline).

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

    from .gemv_triton import _nib_block, _q8_block  # noqa: F401  (jit callees resolve in globals)
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
    def x_pieces(X, XQ, XS, K, stride_xm, M: tl.constexpr, INTERLEAVE: tl.constexpr):
        # One 32-block kb of x [M, K] -> XQ int8 [nb, 16, 32] and XS fp32 [nb, 16]: row 4p + m is
        # piece p of x row m, |piece| <= 65, and sum_p XQ[kb, 4p+m, c] * XS[kb, 4p+m] == x[m, e(c)]
        # to 27 bits below the block's max |x| (past fp32's 24). e(c) = c, or with INTERLEAVE
        # (nibble formats: their tile row 2j+h holds element j + 16h) e(c) = c // 2 + 16 (c % 2).
        kb = tl.program_id(0)
        r = tl.arange(0, 16)
        c = tl.arange(0, 32)
        m = r % 4
        p = r // 4
        if INTERLEAVE:
            e = c // 2 + 16 * (c % 2)
        else:
            e = c
        x = tl.load(X + m[:, None] * stride_xm + kb * 32 + e[None, :],
                    mask=(m < M)[:, None] & ((kb * 32 + e) < K)[None, :], other=0.0).to(tl.float32)
        q, xs = _int8_pieces(x, p)
        tl.store(XQ + kb * 512 + r[:, None] * 32 + c[None, :], q)
        tl.store(XS + kb * 16 + r, tl.where(m < M, xs, 0.0))

    @triton.jit
    def gemv_i8(XQ, XS, QS, QH, SC, Y, N, K, stride_ym,
                M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                FMT: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # Integer tensor cores: per 32-block, x's int8 pieces [16, 32] (x_pieces) times the int8
        # weight tile [32, BN] -> exact int32; no per-weight conversion (the cost that bounds the
        # bf16 variant: one int -> float per weight byte). |dot| <= 32 * 65 * 128 < 2^22, so the
        # int32 -> fp32 step is the magic-number add (exact, full-rate ALU instead of I2F).
        BKB: tl.constexpr = BLOCK_K // 32
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        r16 = tl.arange(0, 16)
        c32 = tl.arange(0, 32)
        acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            for b in tl.static_range(BKB):
                kb = kb0 + b
                okn = n_mask & ((rn * 0 + kb) < nb)
                s = tl.load(SC + rn * nb + kb, mask=okn, other=0.0).to(tl.float32)  # [BN]
                if FMT == 0:
                    q = _q8_block(QS, rn, okn, kb, K)  # int8 [32, BN]
                else:  # rows 2j + h = element j + 16h (x_pieces interleaves x the same way)
                    lo, hi = _nib_block(QS, QH, rn, okn, kb, K, FMT == 1)
                    q = tl.reshape(tl.permute(tl.join(lo.to(tl.int8), hi.to(tl.int8)), (0, 2, 1)), [32, BLOCK_N])
                ok16 = (r16 * 0 + kb) < nb
                xq = tl.load(XQ + kb * 512 + r16[:, None] * 32 + c32[None, :], mask=ok16[:, None], other=0)
                xs = tl.load(XS + kb * 16 + r16, mask=ok16, other=0.0)  # [16]
                if F32_OPERANDS:  # interpreter: the same integers in fp32 (exact: |sum| < 2^24)
                    part = tl.dot(xq.to(tl.float32), q.to(tl.float32), input_precision="ieee")
                else:
                    ip = tl.dot(xq, q.to(tl.int8), out_dtype=tl.int32)
                    part = (ip + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
                acc += (part * xs[:, None]) * s[None, :]
        y = tl.sum(tl.reshape(acc, [4, 4, BLOCK_N]), axis=0)  # rows 4p + m: sum the pieces
        rm = tl.arange(0, 4)
        tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])

    @triton.jit
    def x_wide(X, XW, XS, K, stride_xm, M: tl.constexpr, MP: tl.constexpr, INTERLEAVE: tl.constexpr):
        # Group g of 4 blocks (128 columns) of x [M, K] -> XW int8 [ng, R, 128], R = 16 MP: row
        # r = (b * 4 + p) * MP + m holds int8 piece p of x row m in block b's 32 columns and zeros
        # in the other blocks' (block-diagonal), XS fp32 [ng, R] its scale; pieces as x_pieces.
        # Column c of a block is element e(c) (INTERLEAVE: c // 2 + 16 (c % 2), the nibble order).
        g = tl.program_id(0)
        R: tl.constexpr = 16 * MP
        r = tl.arange(0, R)
        c = tl.arange(0, 128)
        m = r % MP
        p = (r // MP) % 4
        if INTERLEAVE:
            e = (c // 32) * 32 + (c % 32) // 2 + 16 * (c % 2)
        else:
            e = c
        x = tl.load(X + m[:, None] * stride_xm + g * 128 + e[None, :],
                    mask=(m < M)[:, None] & ((g * 128 + e) < K)[None, :], other=0.0).to(tl.float32)
        x = tl.where((c // 32)[None, :] == (r // (4 * MP))[:, None], x, 0.0)
        q, xs = _int8_pieces(x, p)
        tl.store(XW + g * R * 128 + r[:, None] * 128 + c[None, :], q)
        tl.store(XS + g * R + r, tl.where(m < M, xs, 0.0))

    @triton.jit
    def _wide_tile(QS, QH, rn, n_mask, g, K, FMT: tl.constexpr):
        # int8 [BN, 128]: 4 blocks of each row, read as whole lines (q8_0: 128 contiguous bytes per
        # row; q5_0/q4_0: 64 bytes, byte c -> columns 2c (low nibble) and 2c + 1 (high))
        if FMT == 0:
            rk = tl.arange(0, 128)
            return tl.load(QS + rn[:, None] * K + g * 128 + rk[None, :],
                           mask=n_mask[:, None] & ((g * 128 + rk) < K)[None, :], other=0)
        rc = tl.arange(0, 64)
        ok = n_mask[:, None] & ((g * 128 + 2 * rc) < K)[None, :]
        b = tl.load(QS + rn[:, None] * (K // 2) + g * 64 + rc[None, :], mask=ok, other=0).to(tl.int32)
        lo = b & 0xF
        hi = b >> 4
        if FMT == 1:
            j = (rc % 16)[None, :]
            h = tl.load(QH + rn[:, None] * (K // 32) + g * 4 + (rc // 16)[None, :], mask=ok, other=0)
            lo = (lo | (((h >> j) & 1) << 4)) - 16
            hi = (hi | (((h >> (j + 16)) & 1) << 4)) - 16
        else:
            lo = lo - 8
            hi = hi - 8
        return tl.reshape(tl.join(lo.to(tl.int8), hi.to(tl.int8)), [rn.shape[0], 128])

    @triton.jit
    def _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb,
                    R: tl.constexpr, NBLK: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr):
        # acc + part * piece scale (per row) * weight scale (per block and output) for group g of
        # NBLK blocks; rows r = (b * 4 + p) * MP + m (x_wide / x_wide_n's order). part [R, BN] fp32.
        xs = tl.load(XS + g * R + tl.arange(0, R))  # [R]
        rb = tl.arange(0, NBLK)
        sb = tl.load(SC + rn[None, :] * nb + g * NBLK + rb[:, None],
                     mask=n_mask[None, :] & ((g * NBLK + rb) < nb)[:, None], other=0.0).to(tl.float32)  # [NBLK, BN]
        s = tl.reshape(tl.broadcast_to(sb[:, None, :], [NBLK, 4 * MP, BLOCK_N]), [R, BLOCK_N])
        return acc + (part * xs[:, None]) * s

    @triton.jit
    def _store_rows(Y, acc, rn, n_mask, stride_ys, stride_ym,
                    M: tl.constexpr, MP: tl.constexpr, NBLK: tl.constexpr, BLOCK_N: tl.constexpr):
        # rows (b, p, m) of acc summed over blocks and pieces -> Y[split, m, n] (split: program_id(1))
        y = tl.sum(tl.reshape(acc, [NBLK * 4, MP, BLOCK_N]), axis=0)  # [MP, BN]
        rm = tl.arange(0, MP)
        tl.store(Y + tl.program_id(1) * stride_ys + rm[:, None] * stride_ym + rn[None, :], y,
                 mask=(rm[:, None] < M) & n_mask[None, :])

    @triton.jit
    def x_wide_n(X, XW, XS, XC, K, stride_xm, M: tl.constexpr, MP: tl.constexpr, HAS_QH: tl.constexpr):
        # Group g of 8 blocks (256 elements) of x [M, K] -> XW int8 [ng, R, W], R = 32 MP: row
        # r = (b * 4 + p) * MP + m holds piece p of x row m over block b only (block-diagonal),
        # arranged as dot_i8n's tiles: columns 0..127 = the low-nibble tile (column 16b + j is
        # element 32b + j), 128..255 = the high-nibble tile (element 32b + 16 + j), and for q5_0
        # (W = 512) columns 256..511 = the 5th-bit tile in element order. XS fp32 [ng, R] the piece
        # scales; XC int32 [ng, R] = OFF * (sum of the row's pieces), OFF = 8 (q4_0) / 16 (q5_0).
        g = tl.program_id(0)
        R: tl.constexpr = 32 * MP
        W: tl.constexpr = 512 if HAS_QH else 256
        r = tl.arange(0, R)
        c = tl.arange(0, W)
        m = r % MP
        p = (r // MP) % 4
        nib = c < 256
        blk = tl.where(nib, (c % 128) // 16, (c - 256) // 32)
        e = tl.where(nib, blk * 32 + c % 16 + 16 * (c // 128), c - 256)
        kk = g * 256 + e
        x = tl.load(X + m[:, None] * stride_xm + kk[None, :],
                    mask=(m < M)[:, None] & (kk < K)[None, :], other=0.0).to(tl.float32)
        x = tl.where(blk[None, :] == (r // (4 * MP))[:, None], x, 0.0)
        q, xs = _int8_pieces(x, p)
        tl.store(XW + g * R * W + r[:, None] * W + c[None, :], q)
        tl.store(XS + g * R + r, tl.where(m < M, xs, 0.0))
        qsum = tl.sum(tl.where(nib[None, :], q.to(tl.int32), 0), axis=1)  # each element once
        tl.store(XC + g * R + r, qsum * (16 if HAS_QH else 8))

    @triton.jit
    def _nibbles(b, ASM: tl.constexpr):
        # uint8 [BN, 128] -> (low, high) nibbles as int8 0..15; PTX: 4 bytes per and/shift
        if ASM:
            return tl.inline_asm_elementwise(
                asm="and.b32 $0, $2, 0x0F0F0F0F;\n\tshr.u32 $1, $2, 4;\n\tand.b32 $1, $1, 0x0F0F0F0F;",
                constraints="=r,=r,r", args=[b], dtype=(tl.int8, tl.int8), is_pure=True, pack=4)
        return (b & 15).to(tl.int8), (b >> 4).to(tl.int8)

    @triton.jit
    def _idot(xq, w, acc, F32_OPERANDS: tl.constexpr):
        # xq int8 [R, C], w int8 [BN, C] -> acc + xq @ w.T (int32; fp32 of the same integers in
        # the interpreter, exact below 2^24)
        if F32_OPERANDS:
            return acc + tl.dot(xq.to(tl.float32), tl.trans(w).to(tl.float32), input_precision="ieee")
        return tl.dot(xq, tl.trans(w), acc=acc, out_dtype=tl.int32)

    @triton.jit
    def _i8w_part(QS, QH, rn, n_mask, g, K, xq, FMT: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # One K = 128 integer dot of the [BN, 128] weight tile of group g against x_wide's
        # block-diagonal operand xq [R, 128]: the 4 blocks' exact partials as separate rows.
        w = _wide_tile(QS, QH, rn, n_mask, g, K, FMT)  # int8 [BN, 128]
        if F32_OPERANDS:  # interpreter: the same integers in fp32 (exact: |sum| < 2^24)
            return tl.dot(xq.to(tl.float32), tl.trans(w).to(tl.float32), input_precision="ieee")
        ip = tl.dot(xq, tl.trans(w), out_dtype=tl.int32)
        return (ip + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0

    @triton.jit
    def _i8n_part(QS, QH, rn, n_mask, g, K, xl, xh, xb, xc, R: tl.constexpr, BLOCK_N: tl.constexpr,
                  HAS_QH: tl.constexpr, F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # Group g (8 blocks) of rows rn: low and high nibble tiles [BN, 128] against x_wide_n's
        # xl / xh [R, 128] (+ q5_0's 5th bits [BN, 256] against xb [R, 256], times 16), minus
        # the offset term xc [R] -> fp32 [R, BN] exact partials (|.| < 2^22, the magic range).
        nb = K // 32
        rk = tl.arange(0, 128)
        ok = n_mask[:, None] & ((g * 128 + rk) < K // 2)[None, :]
        b = tl.load(QS + rn[:, None] * (K // 2) + g * 128 + rk[None, :], mask=ok, other=0)  # uint8 [BN, 128]
        lo, hi = _nibbles(b, ASM)
        if F32_OPERANDS:
            ip = tl.zeros([R, BLOCK_N], dtype=tl.float32)
        else:
            ip = tl.zeros([R, BLOCK_N], dtype=tl.int32)
        ip = _idot(xh, hi, _idot(xl, lo, ip, F32_OPERANDS), F32_OPERANDS)
        if HAS_QH:  # 5th bits as a 0/1 tile in element order
            rb = tl.arange(0, 8)
            okb = n_mask[:, None] & ((g * 8 + rb) < nb)[None, :]  # [BN, 8]
            h = tl.load(QH + rn[:, None] * nb + g * 8 + rb[None, :], mask=okb, other=0)  # int32 [BN, 8]
            j = tl.arange(0, 32)
            hb = tl.reshape(((h[:, :, None] >> j[None, None, :]) & 1).to(tl.int8), [BLOCK_N, 256])
            if F32_OPERANDS:
                hz = tl.zeros([R, BLOCK_N], dtype=tl.float32)
            else:
                hz = tl.zeros([R, BLOCK_N], dtype=tl.int32)
            ip += _idot(xb, hb, hz, F32_OPERANDS) * 16
        if F32_OPERANDS:
            return ip - xc[:, None].to(tl.float32)
        return (ip - xc[:, None] + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0

    @triton.jit
    def gemv_i8w(XW, XS, QS, QH, SC, Y, N, K, stride_ys, stride_ym, GPS,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, FMT: tl.constexpr,
                 F32_OPERANDS: tl.constexpr):
        # Per group of 4 blocks: _i8w_part, scaled per row (x piece) and per (block, output)
        # (weight scale) into the accumulator; rows summed at the end.
        R: tl.constexpr = 16 * MP
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)
        g0 = tl.program_id(1) * GPS  # split over K: this program's groups (Y: its partial slice)
        for g in range(g0, tl.minimum(g0 + GPS, tl.cdiv(nb, 4))):
            xq = tl.load(XW + g * R * 128 + r[:, None] * 128 + rk[None, :])  # int8 [R, 128]
            part = _i8w_part(QS, QH, rn, n_mask, g, K, xq, FMT, F32_OPERANDS)
            acc = _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb, R, 4, MP, BLOCK_N)
        _store_rows(Y, acc, rn, n_mask, stride_ys, stride_ym, M, MP, 4, BLOCK_N)

    @triton.jit
    def gemv_i8n(XW, XS, XC, QS, QH, SC, Y, N, K, stride_ys, stride_ym, GPS,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, HAS_QH: tl.constexpr,
                 F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # Per group of 8 blocks: _i8n_part, then the scales as in gemv_i8w.
        R: tl.constexpr = 32 * MP
        W: tl.constexpr = 512 if HAS_QH else 256
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        acc = tl.zeros([R, BLOCK_N], dtype=tl.float32)
        g0 = tl.program_id(1) * GPS
        for g in range(g0, tl.minimum(g0 + GPS, tl.cdiv(nb, 8))):
            xw = XW + g * R * W + r[:, None] * W
            xb = tl.load(xw + 256 + tl.arange(0, 256)[None, :]) if HAS_QH else rk  # (unused for q4_0)
            part = _i8n_part(QS, QH, rn, n_mask, g, K, tl.load(xw + rk[None, :]), tl.load(xw + 128 + rk[None, :]),
                             xb, tl.load(XC + g * R + r), R, BLOCK_N, HAS_QH, F32_OPERANDS, ASM)
            acc = _scaled_add(acc, part, XS, SC, rn, n_mask, g, nb, R, 8, MP, BLOCK_N)
        _store_rows(Y, acc, rn, n_mask, stride_ys, stride_ym, M, MP, 8, BLOCK_N)

    @triton.jit
    def gemv_i8x(XW, XS, XC, QS, QH, SC, Y, N, K, stride_ys, stride_ym,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, NT: tl.constexpr,
                 FMT: tl.constexpr, F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # x-stationary: program (i, g) takes K-group g (dot_i8w's 4 blocks for q8_0, dot_i8n's 8
        # for nibbles) of NT consecutive output tiles. Its x operand is loaded ONCE and reused for
        # every tile: dot_i8w / dot_i8n reload it per tile, and that operand traffic is as large
        # as the weights' at 4 rows (q8_0) or 1 row (nibbles). Y [ng, M, N]: per-group partials.
        NIB: tl.constexpr = FMT != 0
        NBLK: tl.constexpr = 8 if NIB else 4
        R: tl.constexpr = NBLK * 4 * MP
        W: tl.constexpr = (512 if FMT == 1 else 256) if NIB else 128
        g = tl.program_id(1)
        nb = K // 32
        r = tl.arange(0, R)
        rk = tl.arange(0, 128)
        xw = XW + g * R * W + r[:, None] * W
        xl = tl.load(xw + rk[None, :])  # int8 [R, 128]
        if NIB:
            xh = tl.load(xw + 128 + rk[None, :])
            xb = tl.load(xw + 256 + tl.arange(0, 256)[None, :]) if FMT == 1 else rk  # (unused for q4_0)
            xc = tl.load(XC + g * R + r)
        zero = tl.zeros([R, BLOCK_N], dtype=tl.float32)
        for t in range(NT):
            rn = (tl.program_id(0) * NT + t) * BLOCK_N + tl.arange(0, BLOCK_N)
            n_mask = rn < N
            if NIB:
                part = _i8n_part(QS, QH, rn, n_mask, g, K, xl, xh, xb, xc, R, BLOCK_N, FMT == 1, F32_OPERANDS, ASM)
            else:
                part = _i8w_part(QS, QH, rn, n_mask, g, K, xl, FMT, F32_OPERANDS)
            acc = _scaled_add(zero, part, XS, SC, rn, n_mask, g, nb, R, NBLK, MP, BLOCK_N)
            _store_rows(Y, acc, rn, n_mask, stride_ys, stride_ym, M, MP, NBLK, BLOCK_N)


def _splits(ng: int, split_k: int) -> tuple[int, int]:
    """(groups per split, number of splits) for ng K-groups cut into at most split_k parts."""
    gps = -(-ng // max(1, min(split_k, ng)))
    return gps, -(-ng // gps)


def launch(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor, asm: bool | None = None) -> None:
    """out[M, N] = x @ dequant(w).T with tile.kernel in dot_i8 / dot_i8w / dot_i8n / dot_i8x
    (gemv_packed has checked the arguments; x has unit column stride). dot_i8n on q8_0 runs
    dot_i8w (the nibble kernel has nothing to split there); dot_i8x takes dot_i8w's groups for
    q8_0 and dot_i8n's for the nibble formats. asm: the PTX nibble split (default: on CUDA)."""
    n, k = w.shape
    m = x.shape[0]
    fmt = {"q8_0": 0, "q5_0": 1, "q4_0": 2}[w.fmt]
    qh = w.qh if w.fmt == "q5_0" else w.scales  # an unused pointer unless q5_0
    nb = k // 32
    interp = not x.is_cuda
    grid_n = triton.cdiv(n, tile.BLOCK_N)
    kernel = "dot_i8w" if tile.kernel == "dot_i8n" and fmt == 0 else tile.kernel
    if kernel == "dot_i8":
        xq = torch.empty(nb, 16, 32, dtype=torch.int8, device=x.device)
        xs = torch.empty(nb, 16, dtype=torch.float32, device=x.device)
        x_pieces[(nb,)](x, xq, xs, k, x.stride(0), M=m, INTERLEAVE=fmt != 0, num_warps=1)
        gemv_i8[(grid_n,)](xq, xs, w.qs, qh, w.scales, out, n, k, out.stride(0), M=m, BLOCK_N=tile.BLOCK_N,
                           BLOCK_K=tile.BLOCK_K, FMT=fmt, F32_OPERANDS=interp, num_warps=tile.num_warps,
                           num_stages=tile.num_stages)
        return
    assert tile.BLOCK_K == 128, f"{kernel} reads 128 bytes of each row per step"
    mp = 1 if m == 1 else (2 if m == 2 else 4)
    nib = kernel == "dot_i8n" or (kernel == "dot_i8x" and fmt != 0)
    ng = triton.cdiv(nb, 8 if nib else 4)  # K-groups: 8 blocks (nibble tiles) or 4 (q8_0 lines)
    if kernel == "dot_i8x":  # one group per program: every group writes its partial
        gps, splits = 1, ng
    else:
        gps, splits = _splits(ng, tile.split_k)
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    stride_ys = 0 if splits == 1 else y.stride(0)
    meta = dict(M=m, MP=mp, BLOCK_N=tile.BLOCK_N, F32_OPERANDS=interp, num_warps=tile.num_warps,
                num_stages=tile.num_stages)
    rows = (32 if nib else 16) * mp
    xw = torch.empty(ng, rows, (512 if fmt == 1 else 256) if nib else 128, dtype=torch.int8, device=x.device)
    xs = torch.empty(ng, rows, dtype=torch.float32, device=x.device)
    xc = torch.empty(ng, rows, dtype=torch.int32, device=x.device) if nib else xs  # (xs: an unused pointer)
    if nib:
        x_wide_n[(ng,)](x, xw, xs, xc, k, x.stride(0), M=m, MP=mp, HAS_QH=fmt == 1, num_warps=4)
    else:
        x_wide[(ng,)](x, xw, xs, k, x.stride(0), M=m, MP=mp, INTERLEAVE=fmt != 0, num_warps=4)
    use_asm = x.is_cuda if asm is None else asm
    if kernel == "dot_i8x":
        nt = tile.n_tiles
        gemv_i8x[(triton.cdiv(n, tile.BLOCK_N * nt), ng)](xw, xs, xc, w.qs, qh, w.scales, y, n, k, stride_ys,
                                                           out.stride(0), NT=nt, FMT=fmt, ASM=use_asm, **meta)
    elif kernel == "dot_i8w":
        gemv_i8w[(grid_n, splits)](xw, xs, w.qs, qh, w.scales, y, n, k, stride_ys, out.stride(0), gps,
                                   FMT=fmt, **meta)
    else:
        gemv_i8n[(grid_n, splits)](xw, xs, xc, w.qs, qh, w.scales, y, n, k, stride_ys, out.stride(0), gps,
                                   HAS_QH=fmt == 1, ASM=use_asm, **meta)
    if splits > 1:
        torch.sum(y, dim=0, out=out)
