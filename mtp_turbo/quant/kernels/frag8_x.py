"""The x operand of the int8 frag GEMV: 1-4 rows of x as four int8 pieces in mma B-fragment order.

Owns: `x_frag8` (the Triton kernel, one program per 64-column chunk; it also runs in Triton's CPU
interpreter) and `x8_values` (the pieces decoded back to x, float64: the CPU path and the tests).
Ignores: the weights (frag8.py), the GEMV (frag8_gemv.py), the PTX (ptx.py).

Per chunk c and row m let 2^E be the power of two just above the row's largest |x| in the chunk,
and V = x 2^(28-E) truncated to an integer (|V| < 2^28; the scaling is exact). Its pieces are V's
7-bit digits: p0 = V >> 21 (floor, in [-128, 127]) and p1, p2, p3 = bits 14-20, 7-13, 0-6 (in
[0, 127]), so x = (p0 2^21 + p1 2^14 + p2 2^7 + p3) 2^(E-28) + r with |r| < 2^(E-28): x is kept
below 2^-27 of the chunk's largest element (a sixteenth of fp32's half-ulp there; elements within
5 binades of it exactly). One multiply, one conversion and a shift and mask an element: the GEMV
can make them itself (tile kernel frag8x, frag8_gemv.py: the same bits). mma group j (of 1 or 2)
takes rows 2j, 2j + 1 as B columns n = 4 (m % 2) + piece, so lane (g, t)'s int32 sums are pieces
2 (t % 2), 2 (t % 2) + 1 of row 2j + t // 2: the GEMV joins them as c_even 2^7 + c_odd (exact) and
scales by the lane's power of two 2^(E - 14 - 14 (t % 2) - SHIFT) (SHIFT undoes the weights' int8
multiple, frag8.MULT).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines without Triton: x_frag8 is not available
    triton = None

E_MIN = -90  # E is at least this (x below ~2^-90 loses its pieces): every scale stays a normal fp32


def x8_values(xf: torch.Tensor, xe: torch.Tensor, m: int, k: int, shift: int) -> torch.Tensor:
    """x [m, k] (float64, CPU) rebuilt from x_frag8's output (exact). xf: int32 [NC, MM, 32, 4];
    xe: float32 [NC, 4, 4] (lane t's scale for group j at [c, t, j]); shift: SHIFT of the format."""
    nc, mm = xf.shape[0], xf.shape[1]
    by = (xf.cpu().to(torch.int64)[..., None] >> (8 * torch.arange(4))) & 0xFF  # [NC, MM, 32, 4 r, 4 i]
    p = (by - 256 * (by >= 128)).double()
    lane = torch.arange(32)
    g, t = lane // 4, lane % 4
    x = torch.zeros(4, nc, 64, dtype=torch.float64)
    for j in range(mm):
        for r in range(4):
            for i in range(4):
                row, piece = 2 * j + g // 4, g % 4  # [32]
                col = 32 * (r // 2) + 16 * (r % 2) + 4 * t + i
                # unit of piece q of row m: 2^(E - 7 - 7 q) = (lane t = 2 (m % 2)'s scale) 2^(7 + shift - 7 q)
                unit = xe.cpu().double()[:, 2 * (row % 2), j] * 2.0 ** (7 + shift - 7 * piece)  # [NC, 32]
                x.index_put_((row, torch.arange(nc)[:, None], col), p[:, j, :, r, i] * unit, accumulate=True)
    return x.reshape(4, nc * 64)[:m, :k]


if triton is not None:
    _E_MIN = tl.constexpr(E_MIN)

    @triton.jit
    def x_frag8(X, XF, XE, K, stride_xm, M: tl.constexpr, MM: tl.constexpr, SHIFT: tl.constexpr, PDL: tl.constexpr):
        # Chunk c of x [M, K] -> XF int32 [NC, MM, 32 lanes, 4 registers]: register r = 2 b + h of lane
        # (g, t), byte i = the piece g % 4 of x[2 j + g // 4, 64 c + 32 b + 16 h + 4 t + i] (block b's b_h
        # of group j); XE fp32 [NC, 4, 4]: [c, t, j] = lane t's scale of group j (j >= MM: 0).
        if PDL:  # the GEMV may start now (its weight loads); it waits for this grid before reading XF
            tl.extra.cuda.gdc_launch_dependents()
        c = tl.program_id(0)
        rm = tl.arange(0, 4)
        cols = c * 64 + tl.arange(0, 64)
        xc = tl.load(X + rm[:, None] * stride_xm + cols[None, :], mask=(rm[:, None] < M) & (cols[None, :] < K),
                     other=0.0).to(tl.float32)
        mx = tl.max(tl.abs(xc), axis=1)  # [4]
        # mx = f 2^(ebits - 127), f in [1, 2): mx < 2^E with E = ebits - 126
        ebits = (mx.to(tl.int32, bitcast=True) >> 23) & 0xFF
        e = tl.where(mx > 0, tl.maximum(ebits - 126, _E_MIN), 0)  # [4]
        inv = ((127 + 28 - e) << 23).to(tl.float32, bitcast=True)  # 2^(28 - E), exactly
        # lane scales: [t, j] = 2^(E[2 j + t // 2] - 14 - 14 (t % 2) - SHIFT)
        tt = tl.arange(0, 4)[:, None]
        jj = tl.arange(0, 4)[None, :]
        e_tj = tl.sum(tl.where(rm[None, None, :] == (2 * jj + tt // 2)[:, :, None], e[None, None, :], 0), axis=2)
        sc = ((127 + e_tj - 14 - 14 * (tt % 2) - SHIFT) << 23).to(tl.float32, bitcast=True)
        tl.store(XE + c * 16 + tt * 4 + jj, tl.where(jj < MM, sc, 0.0))
        # per output register [MM, 32, 4]: its row, piece and first column
        j = tl.arange(0, MM)[:, None, None]
        lane = tl.arange(0, 32)[None, :, None]
        r = tl.arange(0, 4)[None, None, :]
        g, t = lane // 4, lane % 4
        row = 2 * j + g // 4
        piece = g % 4
        col0 = c * 64 + 32 * (r // 2) + 16 * (r % 2) + 4 * t
        rinv = tl.sum(tl.where(rm[None, None, None, :] == row[:, :, :, None], inv[None, None, None, :], 0.0), axis=3)
        ok = row < M
        keep = tl.where(piece == 0, 0xFF, 0x7F)  # p0 is V's signed top byte, the others 7-bit digits
        word = tl.zeros([MM, 32, 4], dtype=tl.int32)
        for i in tl.static_range(4):
            v = tl.load(X + row * stride_xm + col0 + i, mask=ok & (col0 + i < K), other=0.0).to(tl.float32) * rinv
            word = word | (((v.to(tl.int32) >> (21 - 7 * piece)) & keep) << (8 * i))  # V truncated toward 0
        tl.store(XF + ((c * MM + j) * 32 + lane) * 4 + r, word)
