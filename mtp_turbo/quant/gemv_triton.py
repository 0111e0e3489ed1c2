"""Triton GEMV kernels for Q8_0 / Q5_0 / Q4_0 packed weights and 1-4 input rows.

Owns: the kernels and their launch. Every kernel reads each weight byte once for all M rows (a
verify of k+1 rows moves about the bytes of one row) and accumulates in fp32. Eight variants,
picked by `TileConfig.kernel` (gemv.py), so the GPU benchmark can decide between them:

- "dot_bf16x3": per 32-element block, the weight tile [32, BLOCK_N] holds small integers (int8,
  or nibble(+high bit) - offset), which bf16 represents exactly. x is split into three bf16
  pieces (hi + mid + lo = x to ~24 bits) stacked as rows 4p + m of a 16-row operand (12 rows
  used for M = 4), so ONE bf16 tensor-core dot gives all rows x all pieces with exact products
  and fp32 accumulation; the block's fp16 scale multiplies the [16, BLOCK_N] partial, and the
  three pieces are summed at the end. fp32-rounding accuracy at tensor-core cost, flat in M.
- "dot_tf32x3": the same block structure, x rows unsplit (padded to 16 rows), Triton's 3-pass
  tf32 dot (input_precision="tf32x3") on fp32 operands.
- "reduce": no tensor cores: the weight tile is dequantized once ([BLOCK_N, BLOCK_K/32, 32]
  fp32 = int * scale), each row keeps an elementwise fp32 accumulator of the tile's shape
  (one FMA per weight per row, no per-step reduction), reduced once after the K loop. The M = 1
  candidate (a padded dot wastes 15/16 of its rows there; here nothing is wasted).
- "dot_i8", "dot_i8w", "dot_i8n": integer tensor cores, in gemv_i8.py (launched from here).
- "dot_bf16n": nibble formats as the bf16 dot's A operand, converted by PTX, in gemv_bf16n.py;
  on q8_0 it runs dot_i8n (the int8 kernels take its bytes as they are).
- "frag": the weight re-laid in mma operand order (frag.py), one warp per 16-row tile, in
  gemv_frag.py (Gluon + PTX `mma.sync`; on CPU tensors an exact torch emulation).
- "frag8": the same with integer tensor cores (frag8.py layout, x as int8 pieces), gemv_frag8.py;
  "frag8x": the same kernel making x's int8 pieces itself (one launch instead of two).

Ignores: dispatch and tile defaults (gemv.py), the layout (repack.py).

Triton is optional: this module imports on a machine without it; `available()` says whether the
kernels can run. On CPU tensors they run only in Triton's interpreter (TRITON_INTERPRET=1 set
before triton is first imported, as tests/conftest.py does without CUDA), where bf16 dot operands
are replaced by the same values in fp32 (the interpreter multiplies bf16's raw bits as integers)
and int -> bf16 casts go through fp32.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .gemv import KERNELS
from .repack import PackedWeight

try:  # gemv.py imports this module lazily; without Triton it still imports
    import triton
    import triton.language as tl
except ImportError:
    triton = None

_FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2}


def available() -> bool:
    """True when Triton imports (the caller checks for CUDA or the interpreter)."""
    return triton is not None


def interpreting() -> bool:
    """True when the kernels were built by Triton's interpreter (they then run on CPU tensors)."""
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(gemv_dot, InterpretedFunction)


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
    def _x_rows(X, stride_xm, kidx, K, M: tl.constexpr, SPLIT: tl.constexpr):
        # [16, len(kidx)] fp32 dot operand. SPLIT: row 4p + m = bf16 piece p (0..2) of x row m,
        # so hi + mid + lo = x to ~24 bits; else row m = x row m. Rows past M (and 12..15) are 0.
        r = tl.arange(0, 16)
        if SPLIT:
            m = r % 4
            p = r // 4
            row_ok = (m < M) & (p < 3)
        else:
            m = r
            p = r * 0
            row_ok = r < M
        x = tl.load(X + m[:, None] * stride_xm + kidx[None, :], mask=row_ok[:, None] & (kidx < K)[None, :], other=0.0)
        x = x.to(tl.float32)
        if SPLIT:
            hi = x.to(tl.bfloat16).to(tl.float32)
            r1 = x - hi  # exact in fp32
            mid = r1.to(tl.bfloat16).to(tl.float32)
            lo = (r1 - mid).to(tl.bfloat16).to(tl.float32)
            x = tl.where(p[:, None] == 0, hi, tl.where(p[:, None] == 1, mid, lo))
        return x

    @triton.jit
    def _bdot(a, qi, PREC: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # a: [16, KB] fp32 (bf16-exact pieces when PREC == 0); qi: integer tile [KB, BN].
        if PREC == 0:
            if F32_OPERANDS:  # interpreter: same values, fp32 (exact products, fp32 sums)
                return tl.dot(a, qi.to(tl.float32), input_precision="ieee")
            return tl.dot(a.to(tl.bfloat16), qi.to(tl.bfloat16))  # integers are exact in bf16
        return tl.dot(a, qi.to(tl.float32), input_precision="tf32x3")

    @triton.jit
    def gemv_dot(X, QS, QH, SC, Y, N, K, stride_xm, stride_ym,
                 M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 FMT: tl.constexpr, PREC: tl.constexpr, F32_OPERANDS: tl.constexpr):
        # QS: q8_0 int8 [N, K]; q5_0/q4_0 uint8 [N, pair bytes] (repack.py). QH: q5_0 int32 [N, K/32] (else unused).
        # SC fp16 [N, K/32]; X [M, K] (fp32/bf16, row stride stride_xm); Y fp32 [M, N].
        # FMT 0/1/2 = q8_0/q5_0/q4_0; PREC 0 = bf16x3 split, 1 = tf32x3.
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
                xr = _x_rows(X, stride_xm, kb * 32 + tl.arange(0, 32), K, M, PREC == 0)
                part = _bdot(xr, q, PREC, F32_OPERANDS)
                acc += part * s[None, :]
        # rows 4p + m -> [p, m, n]; summing over p adds the pieces (or zero rows when unsplit)
        y = tl.sum(tl.reshape(acc, [4, 4, BLOCK_N]), axis=0)
        rm = tl.arange(0, 4)
        tl.store(Y + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm[:, None] < M) & n_mask[None, :])

    @triton.jit
    def _fma_row(acc, X, stride_xm, row: tl.constexpr, kidx, x_ok, w):
        # acc, w: [BN, BKB, 32]; kidx: [BKB, 32] element indices of this row's x.
        x = tl.load(X + row * stride_xm + kidx, mask=x_ok, other=0.0).to(tl.float32)
        return acc + w * x[None, :, :]

    @triton.jit
    def gemv_reduce(X, QS, QH, SC, Y, N, K, stride_xm, stride_ym,
                    M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    FMT: tl.constexpr):
        # Same arguments as gemv_dot; every format's block is 32 values in element order.
        BKB: tl.constexpr = BLOCK_K // 32
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        nb = K // 32
        rb = tl.arange(0, BKB)
        rj = tl.arange(0, 32)
        acc0 = tl.zeros([BLOCK_N, BKB, 32], dtype=tl.float32)
        acc1 = tl.zeros([BLOCK_N, BKB, 32], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N, BKB, 32], dtype=tl.float32)
        acc3 = tl.zeros([BLOCK_N, BKB, 32], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            kb = kb0 + rb
            b_ok = kb < nb
            m2 = n_mask[:, None] & b_ok[None, :]  # [BN, BKB]
            s = tl.load(SC + rn[:, None] * nb + kb[None, :], mask=m2, other=0.0).to(tl.float32)[:, :, None]
            kidx = kb[:, None] * 32 + rj[None, :]  # [BKB, 32]
            x_ok = b_ok[:, None]
            if FMT == 0:
                q = tl.load(QS + rn[:, None, None] * K + kidx[None, :, :], mask=m2[:, :, None], other=0).to(tl.int32)
            else:  # block kb: the low (even kb) or high (odd) nibbles of its pair's 32 bytes (repack.py)
                off = rn[:, None, None] * _pair_bytes(K) + (kb // 2)[None, :, None] * 32 + rj[None, None, :]
                q = (tl.load(QS + off, mask=m2[:, :, None], other=0).to(tl.int32) >> (4 * (kb % 2))[None, :, None]) & 0xF
                h = q  # (unused for q4_0)
                if FMT == 1:
                    h = tl.load(QH + rn[:, None] * nb + kb[None, :], mask=m2, other=0)[:, :, None]
                q = _nib_value(q, h, rj[None, None, :], FMT == 1)
            w = q.to(tl.float32) * s  # dequantized once for all rows
            acc0 = _fma_row(acc0, X, stride_xm, 0, kidx, x_ok, w)
            if M > 1:
                acc1 = _fma_row(acc1, X, stride_xm, 1, kidx, x_ok, w)
            if M > 2:
                acc2 = _fma_row(acc2, X, stride_xm, 2, kidx, x_ok, w)
            if M > 3:
                acc3 = _fma_row(acc3, X, stride_xm, 3, kidx, x_ok, w)
        tl.store(Y + rn, tl.sum(tl.sum(acc0, axis=2), axis=1), mask=n_mask)
        if M > 1:
            tl.store(Y + stride_ym + rn, tl.sum(tl.sum(acc1, axis=2), axis=1), mask=n_mask)
        if M > 2:
            tl.store(Y + 2 * stride_ym + rn, tl.sum(tl.sum(acc2, axis=2), axis=1), mask=n_mask)
        if M > 3:
            tl.store(Y + 3 * stride_ym + rn, tl.sum(tl.sum(acc3, axis=2), axis=1), mask=n_mask)


def gemv_packed(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor) -> None:
    """out[M, N] (float32, contiguous) = x[M, K] @ dequant(w).T with the kernel `tile.kernel`.
    x, w, out on one device: CUDA, or CPU under Triton's interpreter."""
    assert triton is not None, "Triton is not available"
    n, k = w.shape
    m = x.shape[0]
    assert w.fmt in _FMT_ID, w.fmt
    assert 1 <= m <= 4 and x.shape[1] == k and out.shape == (m, n) and out.dtype == torch.float32
    assert out.is_contiguous() and x.device == w.device == out.device, (x.device, w.device, out.device)
    assert x.dtype in (torch.float32, torch.bfloat16), x.dtype
    assert tile.kernel in KERNELS, tile.kernel
    assert tile.BLOCK_K % 32 == 0 and (tile.BLOCK_K // 32) & (tile.BLOCK_K // 32 - 1) == 0
    assert n * k < 2 ** 31, "int32 offsets"
    if not x.is_cuda:
        assert interpreting(), "Triton kernels on CPU tensors need the interpreter (TRITON_INTERPRET=1 before importing triton)"
    if x.stride(1) != 1:
        x = x.contiguous()
    fmt = _FMT_ID[w.fmt]
    qh = w.qh if w.fmt == "q5_0" else w.scales  # an unused pointer unless q5_0
    grid = (triton.cdiv(n, tile.BLOCK_N),)
    args = (x, w.qs, qh, w.scales, out, n, k, x.stride(0), out.stride(0))
    meta = dict(M=m, BLOCK_N=tile.BLOCK_N, BLOCK_K=tile.BLOCK_K, FMT=fmt,
                num_warps=tile.num_warps, num_stages=tile.num_stages)
    if tile.kernel == "frag":
        from . import gemv_frag

        if not gemv_frag.available():
            raise RuntimeError("the frag kernel needs Triton with Gluon (triton.experimental.gluon)")
        gemv_frag.launch(x, w, tile, out)
    elif tile.kernel in ("frag8", "frag8x"):
        from . import gemv_frag8

        if not gemv_frag8.available():
            raise RuntimeError(f"the {tile.kernel} kernel needs Triton with Gluon (triton.experimental.gluon)")
        gemv_frag8.launch(x, w, tile, out)
    elif tile.kernel == "reduce":
        gemv_reduce[grid](*args, **meta)
    elif tile.kernel == "dot_bf16n" and w.fmt != "q8_0":
        from . import gemv_bf16n

        gemv_bf16n.launch(x, w, tile, out)
    elif tile.kernel in ("dot_i8", "dot_i8w", "dot_i8n", "dot_bf16n"):
        from . import gemv_i8

        if tile.kernel == "dot_bf16n":  # q8_0: its int8 line kernel, same tile shape
            tile = replace(tile, kernel="dot_i8n", BLOCK_K=128)
        gemv_i8.launch(x, w, tile, out)
    else:
        gemv_dot[grid](*args, PREC=0 if tile.kernel == "dot_bf16x3" else 1,
                       F32_OPERANDS=not x.is_cuda, **meta)
