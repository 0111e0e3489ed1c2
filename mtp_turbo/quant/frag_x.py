"""The x operand of the frag GEMV: 1-4 rows of x as exact fp16 pieces in mma B-fragment order.

Owns: `x_frag` (the Triton kernel that writes them, one program per 64-column chunk; it also runs
in Triton's CPU interpreter) and `x_values` (the pieces decoded back to x, float64: the CPU path and
the tests). Ignores: the weights (frag.py), the GEMV (gemv_frag.py), the PTX (frag_ptx.py).

Per chunk c and row m, x is scaled by a power of two e[c, m] (its largest element to [2^14, 2^15))
and split into three fp16 pieces hi + mid + lo == the scaled x (to fp16's subnormal step 2^-24,
i.e. 2^-38 of the chunk's largest element). Two mma groups (3-4 rows): B columns (group 0) 2m,
2m + 1 = pieces 0, 1 of row m, (group 1) 2m = piece 2, so lane L = 4 g + t accumulates row m = t
only. One group (1-2 rows): columns 2m, 2m + 1 = pieces 0, 1 and 4 + 2m = piece 2 of row m: half
the mma, x registers and scale FMAs; lane t + 2 holds row t's piece 2 (the GEMV adds it by one
shuffle at the store). The scale e multiplies the block scale in the GEMV (exact: a power of two).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines without Triton: x_frag is not available
    triton = None


def x_values(xf: torch.Tensor, xe: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """x [m, k] (float64, CPU) rebuilt from x_frag's output: the pieces times 2^e, added up (exact).
    xf: [NC, 2 groups, 32, 4] int32 (its layout per group count in x_frag); xe: [NC, 4]."""
    nc = xf.shape[0]
    groups = xf.shape[1] // 2
    g, t = torch.arange(32) // 4, torch.arange(32) % 4
    if groups == 1:  # [chunk, step pair, lane, (step % 2, half)] -> [chunk, step, lane, half]
        regs = xf.cpu().reshape(nc, 2, 32, 2, 2).permute(0, 1, 3, 2, 4).reshape(nc, 4, 32, 2)
    else:  # [chunk, step, lane, register q (group q // 2, half q % 2)]
        regs = xf.cpu().reshape(nc, 4, 32, 4)
    pieces = regs.reshape(nc, 4, 32, 2 * groups, 1).view(torch.int16).view(torch.float16).double()  # [.., 2]
    x = torch.zeros(4, 64, nc, dtype=torch.float64)  # [row, column in chunk, chunk]
    for s in range(4):
        for q in range(2 * groups):  # register q: group q // 2, half q % 2; column g
            if groups == 1:  # columns 0-3: pieces 0, 1 of rows 0, 1; 4, 6: piece 2 of rows 0, 1
                row, keep = (g % 4) // 2, (g < 4) | (g % 2 == 0)
            else:
                row, keep = g // 2, (q < 2) | (g % 2 == 0)  # group 1, odd column: zero
            for h in range(2):
                col = 16 * s + 2 * t + 8 * (q % 2) + h
                v = pieces[:, s, :, q, h] * xe.cpu().double()[:, row]  # [nc, 32]
                x.index_put_((row[keep], col[keep]), v[:, keep].t(), accumulate=True)  # pieces add up
    return x.permute(0, 2, 1).reshape(4, nc * 64)[:m, :k]


if triton is not None:

    @triton.jit
    def x_frag(X, XF, XE, K, stride_xm, M: tl.constexpr, PDL: tl.constexpr, G: tl.constexpr):
        # Chunk c of x [M, K] -> XF int32 [NC, 4 steps, 32 lanes, 4] (G = 2 groups): lane L = 4 g + t,
        # register (group q // 2, half q % 2) = f16x2 of x columns 64 c + 16 s + 2 t + 8 (q % 2) + (0, 1)
        # of B column g (group 0: row g // 2, piece g % 2; group 1: row g // 2, piece 2 if g even,
        # else zero). G = 1 (M <= 2): XF [NC, 2 step pairs, 32 lanes, 4], register 2 (s % 2) + half of
        # step s, one group: column g < 4 = row g // 2, piece g % 2; 4, 6 = piece 2 of row 0, 1; 5, 7
        # zero. XE fp32 [NC, 4]: 2^e of each row (module docstring).
        if PDL:  # the GEMV may start now (its weight loads); it waits for this grid before reading XF
            tl.extra.cuda.gdc_launch_dependents()
        c = tl.program_id(0)
        rm = tl.arange(0, 4)
        kk = tl.arange(0, 64)
        cols = c * 64 + kk
        xc = tl.load(X + rm[:, None] * stride_xm + cols[None, :], mask=(rm[:, None] < M) & (cols[None, :] < K),
                     other=0.0).to(tl.float32)
        mx = tl.max(tl.abs(xc), axis=1)  # [4]
        # exponent of mx (mx = f * 2^E, f in [1, 2)): E from the float bits; e = E - 14
        ebits = ((mx.to(tl.int32, bitcast=True) >> 23) & 0xFF)
        e = tl.where(mx > 0, tl.maximum(ebits - 127 - 14, -100), 0)  # (-100: x below ~2^-86)
        xe = ((e + 127) << 23).to(tl.float32, bitcast=True)  # 2^e, exactly (e in [-100, 113])
        inv = ((127 - e) << 23).to(tl.float32, bitcast=True)  # 2^-e
        tl.store(XE + c * 4 + rm, xe)
        # per output register: its two columns, row, piece
        s = tl.arange(0, 4)[:, None, None]
        lane = tl.arange(0, 32)[None, :, None]
        q = tl.arange(0, 2 * G)[None, None, :]
        g, t = lane // 4, lane % 4
        if G == 1:
            row = (g % 4) // 2
            piece = tl.where(g < 4, g % 2, tl.where(g % 2 == 0, 2, 3))  # 3: a zero column
            dst = ((c * 2 + s // 2) * 32 + lane) * 4 + 2 * (s % 2) + q
        else:
            row = g // 2
            piece = tl.where(q // 2 == 0, g % 2, tl.where(g % 2 == 0, 2, 3))
            dst = ((c * 4 + s) * 32 + lane) * 4 + q
        col = c * 64 + s * 16 + 2 * t + 8 * (q % 2)  # [4, 32, 2 G]
        ok = (row < M) & (piece < 3)
        # 1 / 2^e of each register's row: [4, 32, 4] from the 4 rows' [4]
        sc = tl.sum(tl.where(rm[None, None, None, :] == row[:, :, :, None], inv[None, None, None, :], 0.0), axis=3)
        lo = _x_piece(X, stride_xm, row, col, K, ok, sc, piece)
        hi = _x_piece(X, stride_xm, row, col + 1, K, ok, sc, piece)
        word = (lo.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) | (hi.to(tl.int16, bitcast=True).to(tl.int32) << 16)
        tl.store(XF + dst, word)

    @triton.jit
    def _x_piece(X, stride_xm, row, col, K, ok, sc, piece):
        # fp16 piece `piece` (0..2) of x[row, col] * sc (sc a power of two); 0 where not ok
        v = tl.load(X + row * stride_xm + col, mask=ok & (col < K), other=0.0).to(tl.float32) * sc
        p0 = v.to(tl.float16)
        r1 = v - p0.to(tl.float32)  # exact
        p1 = r1.to(tl.float16)
        p2 = (r1 - p1.to(tl.float32)).to(tl.float16)
        return tl.where(piece == 0, p0, tl.where(piece == 1, p1, p2))
