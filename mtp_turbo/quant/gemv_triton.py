"""Triton GEMV kernels for Q8_0 / Q5_0 / Q4_0 packed weights and 1-4 input rows.

Owns: the kernels and their launch. Each program owns BLOCK_N output rows and walks K in
BLOCK_K chunks (BLOCK_K/32 whole blocks): it loads each row's quant bytes of a block as one
contiguous 16- or 32-byte vector, unpacks nibbles / high bits in registers, sums quant * x per
32-block, applies the fp16 block scale once per block, and accumulates in fp32 for all M rows
at once, so the matrix is read once whatever M is (a verify of k+1 rows moves about the bytes
of one row). Ignores: dispatch and tile defaults (gemv.py), the layout (repack.py).

Triton is optional: this module imports on a machine without it (gemv.py imports it only for CUDA
tensors); `available()` says whether the kernels can run.
"""

from __future__ import annotations

import torch

from .repack import PackedWeight

try:  # gemv.py imports this module only for CUDA tensors; without Triton it still imports
    import triton
    import triton.language as tl
except ImportError:
    triton = None


def available() -> bool:
    """True when Triton imports (the kernels need it; the caller checks for CUDA)."""
    return triton is not None


if triton is not None:
    # Module level, not a closure: Triton's interpreter resolves called jit functions in globals.
    @triton.jit
    def _load_x(X, stride_xm, row: tl.constexpr, offs, mask):
        return tl.load(X + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)

    @triton.jit
    def _store_y(Y, stride_ym, row: tl.constexpr, rn, n_mask, acc):
        tl.store(Y + row * stride_ym + rn, acc, mask=n_mask)

    @triton.jit
    def gemv_q8_0(X, QS, SC, Y, N, K, stride_xm, stride_ym,
                  M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # QS int8 [N, K]; SC fp16 [N, K/32]; X [M, K] (f32/bf16, row stride stride_xm); Y f32 [M, N].
        BKB: tl.constexpr = BLOCK_K // 32  # blocks per step
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
        n_mask = rn < N
        rb = tl.arange(0, BKB)  # [BKB]
        rj = tl.arange(0, 32)  # [32]
        nb = K // 32
        acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            kb = kb0 + rb  # [BKB] block index
            b_mask = kb < nb
            m2 = n_mask[:, None] & b_mask[None, :]  # [BN, BKB]
            m3 = m2[:, :, None]  # [BN, BKB, 1] (broadcasts over the 32 elements)
            q_off = rn[:, None, None] * K + kb[None, :, None] * 32 + rj[None, None, :]
            q = tl.load(QS + q_off, mask=m3, other=0).to(tl.float32)  # [BN, BKB, 32]
            s = tl.load(SC + rn[:, None] * nb + kb[None, :], mask=m2, other=0.0).to(tl.float32)
            x_off = kb[:, None] * 32 + rj[None, :]  # [BKB, 32]
            x_mask = b_mask[:, None]
            x0 = _load_x(X, stride_xm, 0, x_off, x_mask)
            acc0 += tl.sum(tl.sum(q * x0[None, :, :], axis=2) * s, axis=1)
            if M > 1:
                x1 = _load_x(X, stride_xm, 1, x_off, x_mask)
                acc1 += tl.sum(tl.sum(q * x1[None, :, :], axis=2) * s, axis=1)
            if M > 2:
                x2 = _load_x(X, stride_xm, 2, x_off, x_mask)
                acc2 += tl.sum(tl.sum(q * x2[None, :, :], axis=2) * s, axis=1)
            if M > 3:
                x3 = _load_x(X, stride_xm, 3, x_off, x_mask)
                acc3 += tl.sum(tl.sum(q * x3[None, :, :], axis=2) * s, axis=1)
        _store_y(Y, stride_ym, 0, rn, n_mask, acc0)
        if M > 1:
            _store_y(Y, stride_ym, 1, rn, n_mask, acc1)
        if M > 2:
            _store_y(Y, stride_ym, 2, rn, n_mask, acc2)
        if M > 3:
            _store_y(Y, stride_ym, 3, rn, n_mask, acc3)

    @triton.jit
    def _nib_dot(lo, hi, X, stride_xm, row: tl.constexpr, x_off, x_mask, s):
        # lo/hi: [BN, BKB, 16] f32 values of elements j and j+16 of each block; s: [BN, BKB].
        x_lo = _load_x(X, stride_xm, row, x_off, x_mask)  # [BKB, 16]
        x_hi = _load_x(X, stride_xm, row, x_off + 16, x_mask)
        blk = tl.sum(lo * x_lo[None, :, :] + hi * x_hi[None, :, :], axis=2)  # [BN, BKB]
        return tl.sum(blk * s, axis=1)  # [BN]

    @triton.jit
    def gemv_q4_q5(X, QS, QH, SC, Y, N, K, stride_xm, stride_ym,
                   M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   HAS_QH: tl.constexpr):
        # QS uint8 [N, K/2] (16 bytes per block: element j low nibble, j+16 high nibble);
        # QH int32 [N, K/32] (Q5_0 only: bit j = 5th bit of element j); SC fp16 [N, K/32].
        BKB: tl.constexpr = BLOCK_K // 32
        pid = tl.program_id(0)
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = rn < N
        rb = tl.arange(0, BKB)
        rj = tl.arange(0, 16)
        nb = K // 32
        row_bytes = K // 2
        acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for kb0 in range(0, nb, BKB):
            kb = kb0 + rb
            b_mask = kb < nb
            m2 = n_mask[:, None] & b_mask[None, :]
            m3 = m2[:, :, None]
            q_off = rn[:, None, None] * row_bytes + kb[None, :, None] * 16 + rj[None, None, :]
            b = tl.load(QS + q_off, mask=m3, other=0).to(tl.int32)  # [BN, BKB, 16], zero-extended
            s = tl.load(SC + rn[:, None] * nb + kb[None, :], mask=m2, other=0.0).to(tl.float32)
            lo_i = b & 0xF
            hi_i = b >> 4
            if HAS_QH:
                h = tl.load(QH + rn[:, None] * nb + kb[None, :], mask=m2, other=0)  # [BN, BKB]
                h3 = h[:, :, None]
                # Arithmetic shift of a negative int32 is fine: & 1 keeps only bit j.
                lo_i = lo_i | (((h3 >> rj[None, None, :]) & 1) << 4)
                hi_i = hi_i | (((h3 >> (rj[None, None, :] + 16)) & 1) << 4)
                lo = (lo_i - 16).to(tl.float32)
                hi = (hi_i - 16).to(tl.float32)
            else:
                lo = (lo_i - 8).to(tl.float32)
                hi = (hi_i - 8).to(tl.float32)
            x_off = kb[:, None] * 32 + rj[None, :]  # [BKB, 16]: elements j of each block
            x_mask = b_mask[:, None]
            acc0 += _nib_dot(lo, hi, X, stride_xm, 0, x_off, x_mask, s)
            if M > 1:
                acc1 += _nib_dot(lo, hi, X, stride_xm, 1, x_off, x_mask, s)
            if M > 2:
                acc2 += _nib_dot(lo, hi, X, stride_xm, 2, x_off, x_mask, s)
            if M > 3:
                acc3 += _nib_dot(lo, hi, X, stride_xm, 3, x_off, x_mask, s)
        _store_y(Y, stride_ym, 0, rn, n_mask, acc0)
        if M > 1:
            _store_y(Y, stride_ym, 1, rn, n_mask, acc1)
        if M > 2:
            _store_y(Y, stride_ym, 2, rn, n_mask, acc2)
        if M > 3:
            _store_y(Y, stride_ym, 3, rn, n_mask, acc3)


def gemv_packed(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor) -> None:
    """out[M, N] (float32, contiguous) = x[M, K] @ dequant(w).T. Preconditions checked by gemv()."""
    n, k = w.shape
    m = x.shape[0]
    assert 1 <= m <= 4 and x.shape[1] == k and out.shape == (m, n)
    assert tile.BLOCK_K % 32 == 0 and (tile.BLOCK_K // 32) & (tile.BLOCK_K // 32 - 1) == 0
    if x.stride(1) != 1:
        x = x.contiguous()
    assert triton is not None, "Triton is not available"
    grid = (triton.cdiv(n, tile.BLOCK_N),)
    meta = dict(M=m, BLOCK_N=tile.BLOCK_N, BLOCK_K=tile.BLOCK_K,
                num_warps=tile.num_warps, num_stages=tile.num_stages)
    if w.fmt == "q8_0":
        gemv_q8_0[grid](x, w.qs, w.scales, out, n, k, x.stride(0), out.stride(0), **meta)
    else:
        has_qh = w.fmt == "q5_0"
        qh = w.qh if has_qh else w.scales  # unused pointer when HAS_QH is False
        gemv_q4_q5[grid](x, w.qs, qh, w.scales, out, n, k, x.stride(0), out.stride(0),
                         HAS_QH=has_qh, **meta)
