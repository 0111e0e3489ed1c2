"""GEMV on weights in the fragment layout (frag.py): a warp per 16-row tile, mma.sync in inline PTX.

Owns: the x operand (`x_frag`, plain Triton), the GEMV kernels (Gluon: layouts are explicit, so
lane L of a warp provably holds element L of every per-lane tensor, which the warp-wide `mma.sync`
in the PTX relies on): `gemv_frag2` (two row tiles a warp sharing x), `gemv_frag3` (the same with
loop-invariant pointers, unrolled by 2: fewer instructions, more registers) and `gemv_frag_p`
(persistent, for split-K); the PTX text, the launch and the CPU emulation. Ignores: the layout's
construction (frag.py), dispatch (gemv.py), the other kernels.

Per warp and 64-column chunk, each lane loads its weight words (16 bytes; 32 for q8_0), 4 fp16
block scales (shared by the 4 lanes of a row pair) and its x registers; the PTX turns each word
into four f16x2 A registers (`lop3` of the nibbles under fp16's 0x6400 = 1024, or `prmt` of q8_0's
bytes under 0x64, then one f16x2 FMA that takes off 1024 + the offset: exact small integers), runs
two `mma.m16n8k16` per 16 columns (the x pieces of 1-4 rows are 16 columns of B) with fp32
accumulation, and adds each block's partial times its scale to the lane's fp32 accumulators.
Nothing passes through shared memory. The GEMV is launched as a programmatic dependent of x_frag:
its first weight loads go out before it waits for x.

x: per chunk c and row m, x is scaled by a power of two e[c, m] (its largest element to [2^14,
2^15)) and split into three fp16 pieces hi + mid + lo == the scaled x (to fp16's subnormal step
2^-24, i.e. 2^-38 of the chunk's largest element); B columns (group 0) 2m, 2m + 1 = pieces 0, 1
of row m, (group 1) 2m = piece 2; so lane L = 4 g + t accumulates row m = t only and sums its own
pieces at the end (no shuffles). The scale e multiplies the block scale (exact: a power of two).
Up to 2 rows the three pieces of each fit one group (columns 2m, 2m + 1 = pieces 0, 1; 4 + 2m =
piece 2): one mma a step instead of two, half the x registers and scale FMAs, and one lane shuffle
at the store adds lane t + 2's piece 2 to lane t's sum (H200 head, 1 row: q4_0 32.0 vs 37.7 us).
"""

from __future__ import annotations

import numpy as np
import torch

from .frag import FragWeight, for_weight
from .repack import PackedWeight

try:
    import triton
    import triton.language as tl
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except ImportError:  # CPU machines without Triton (or a Triton without Gluon): not available
    triton = None

FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2}


def available() -> bool:
    return triton is not None


def _f16x2(v: float) -> str:
    """An fp16 value twice in a b32 immediate."""
    h = int(np.array(v, dtype=np.float16).view(np.uint16))
    assert float(np.array(h, dtype=np.uint16).view(np.float16)) == v, v  # exact
    return f"0x{h:04X}{h:04X}"


def frag_asm(fmt: str, groups: int = 2) -> str:
    """The PTX for one chunk of one lane (pack=4 operands: see _mma). Outputs $0..$3 = group 0
    accumulators (rows g, g, g+8, g+8 x columns 2t, 2t+1), $4..$7 = group 1 (groups == 2: 3-4 rows
    of x; 1-2 rows fit one group, module docstring)."""
    assert groups in (1, 2), groups
    n_o = 4 * groups  # output registers
    n_w = {"q4_0": 1, "q5_0": 2, "q8_0": 2}[fmt]  # 4-register input tensors before the scales
    i_s = n_o + 4 * n_w  # scales: 2 registers (f16x2 (block 0: g, g+8), (block 1: g, g+8))
    i_e = i_s + 2  # x scale of the lane's row (4 copies)
    i_x = i_e + 4  # x registers: 2 per step and group (b0, b1)
    i_acc = i_x + 8 * groups
    text = ["{", ".reg .b32 a0, a1, a2, a3, t, hs, hs2, one, mg, ka, kb, c16;",
            ".reg .f32 d0, d1, d2, d3, d4, d5, d6, d7, z, sa, sb;", ".reg .f16 h0, h1;",
            "mov.b32 one, 0x3C003C00; mov.b32 mg, 0x64006400; mov.f32 z, 0f00000000;"]
    if fmt == "q8_0":
        text.append(f"mov.b32 ka, {_f16x2(-1152.0)};")  # bytes are value + 128 under 1024
    else:
        off = 16 if fmt == "q5_0" else 8
        # low-nibble registers: (1024 + q) - (1024 + off); high (1024 + 16 q) / 16 - (64 + off)
        text.append(f"mov.b32 ka, {_f16x2(-1024.0 - off)}; mov.b32 kb, {_f16x2(-64.0 - off)}; "
                    f"mov.b32 c16, {_f16x2(1 / 16)};")
    for s in range(4):
        if fmt == "q8_0":
            base = n_o + 4 * (s // 2) + 2 * (s % 2)
            wa, wb = f"${base}", f"${base + 1}"
            text.append(f"prmt.b32 a0, {wa}, 0x64646464, 0x4140; prmt.b32 a1, {wa}, 0x64646464, 0x4342;")
            text.append(f"prmt.b32 a2, {wb}, 0x64646464, 0x4140; prmt.b32 a3, {wb}, 0x64646464, 0x4342;")
            text.append("".join(f"fma.rn.f16x2 a{i}, a{i}, one, ka; " for i in range(4)))
        else:
            w = f"${n_o + s}"
            text.append(f"lop3.b32 a0, {w}, 0x000F000F, mg, 0xEA; lop3.b32 a1, {w}, 0x00F000F0, mg, 0xEA; "
                        f"shr.b32 t, {w}, 8; lop3.b32 a2, t, 0x000F000F, mg, 0xEA; "
                        f"lop3.b32 a3, t, 0x00F000F0, mg, 0xEA;")
            if fmt == "q5_0":  # this step's 5th bits to 4 / 20 and 8 / 24 (frag.H_BASE / H_POS)
                sh = 4 - (0, 2, 8, 10)[s]
                text.append(f"{'shl' if sh > 0 else 'shr'}.b32 hs, ${n_o + 4}, {abs(sh)}; shr.b32 hs2, hs, 1;")
                text.append("lop3.b32 a0, hs, 0x00100010, a0, 0xEA; lop3.b32 a1, hs, 0x01000100, a1, 0xEA; "
                            "lop3.b32 a2, hs2, 0x00100010, a2, 0xEA; lop3.b32 a3, hs2, 0x01000100, a3, 0xEA;")
            text.append("fma.rn.f16x2 a0, a0, one, ka; fma.rn.f16x2 a1, a1, c16, kb; "
                        "fma.rn.f16x2 a2, a2, one, ka; fma.rn.f16x2 a3, a3, c16, kb;")
        x = i_x + 2 * groups * s
        for grp in range(groups):
            d = ", ".join(f"d{4 * grp + i}" for i in range(4))
            c = "z, z, z, z" if s % 2 == 0 else d
            text.append(f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, {{a0, a1, a2, a3}}, "
                        f"{{${x + 2 * grp}, ${x + 2 * grp + 1}}}, {{{c}}};")
        if s % 2 == 1:  # end of block s // 2: scale the block's partials into the accumulators
            b = s // 2
            text.append(f"mov.b32 {{h0, h1}}, ${i_s + b}; cvt.f32.f16 sa, h0; cvt.f32.f16 sb, h1; "
                        f"mul.f32 sa, sa, ${i_e}; mul.f32 sb, sb, ${i_e};")
            for o in range(n_o):
                acc = f"${i_acc + o}" if b == 0 else f"${o}"
                text.append(f"fma.rn.f32 ${o}, d{o}, {'sa' if o % 4 < 2 else 'sb'}, {acc};")
    text.append("}")
    return "\n".join(text)


def frag_constraints(fmt: str, groups: int = 2) -> str:
    """frag_asm's operand constraints: 4 accumulators a group out; in: the weight words (4, or 8
    for q8_0 and q5_0's qh copies), the scales (2 registers), x scale (4 copies), x registers (8 a
    group), accumulators (4 a group)."""
    n_w = 4 if fmt == "q4_0" else 8
    return "=f," * 4 * groups + "r," * (n_w + 2) + "f," * 4 + "r," * 8 * groups + ",".join("f" * 4 * groups)


if triton is not None:
    _ASM_Q8, _ASM_Q8_1 = gl.constexpr(frag_asm("q8_0")), gl.constexpr(frag_asm("q8_0", 1))
    _ASM_Q5, _ASM_Q5_1 = gl.constexpr(frag_asm("q5_0")), gl.constexpr(frag_asm("q5_0", 1))
    _ASM_Q4, _ASM_Q4_1 = gl.constexpr(frag_asm("q4_0")), gl.constexpr(frag_asm("q4_0", 1))
    _CON_Q8, _CON_Q8_1 = gl.constexpr(frag_constraints("q8_0")), gl.constexpr(frag_constraints("q8_0", 1))
    _CON_Q5, _CON_Q5_1 = _CON_Q8, _CON_Q8_1
    _CON_Q4, _CON_Q4_1 = gl.constexpr(frag_constraints("q4_0")), gl.constexpr(frag_constraints("q4_0", 1))

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

    @gluon.jit
    def _x_ready():
        # programmatic dependent launch: wait until x_frag's grid is done (its XF / XE visible); the
        # weight loads issued before this overlap x_frag and the launch gap
        gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _xloads(XF, XE, c, lane, j, W: gl.constexpr, L4: gl.constexpr, G: gl.constexpr):
        # chunk c's x scale of the lane's row (4 copies) and its 8 G x registers (G = 1: the last two
        # returned again, unused)
        if G == 1:
            xr = (c * 64 + lane[:, None]) * 4 + j  # XF [NC, 2, 32, 4], step pair 0
            xe = gl.load(XE + c * 4 + lane % 2)[:, None] + gl.zeros([32 * W, 4], gl.float32, L4)
            x0 = gl.load(XF + xr)
            x1 = gl.load(XF + xr + 128)
            return xe, x0, x1, x0, x1
        xr = (c * 128 + lane[:, None]) * 4 + j  # XF [NC, 4, 32, 4], step 0
        xe = gl.load(XE + c * 4 + lane % 4)[:, None] + gl.zeros([32 * W, 4], gl.float32, L4)
        return xe, gl.load(XF + xr), gl.load(XF + xr + 128), gl.load(XF + xr + 256), gl.load(XF + xr + 384)

    @gluon.jit
    def _loads(QF, HF, SF, tile, c, lane, j, NC, FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr):
        # The weights of chunk c of this lane's tile: words (w1: q8_0's second half, q5_0's qh
        # copies, else w0 again) and scales. No masks: callers clamp tile and c to existing ones (a
        # chunk loaded past the end is not used).
        rec = ((tile * NC + c) * 32 + lane)[:, None]  # this lane's record in [NT, NC, 32]
        if FMT == 0:
            q8 = ((tile * NC + c) * 64 + lane)[:, None] * 4 + j  # QF [NT, NC, 2, 32, 4]
            w0 = gl.load(QF + q8)
            w1 = gl.load(QF + q8 + 128)
        else:
            w0 = gl.load(QF + rec * 4 + j)
            w1 = w0
            if FMT == 1:
                w1 = gl.load(HF + rec) + gl.zeros([32 * W, 4], gl.int32, L4)
        return w0, w1, gl.load(SF + (((tile * NC + c) * 8 + lane // 4) * 4)[:, None] + j)  # SF [NT, NC, 8, 4]

    @gluon.jit
    def _mma(acc0, acc1, w0, w1, s, xe, x0, x1, x2, x3, FMT: gl.constexpr, G: gl.constexpr):
        # one chunk's PTX (frag_asm) on a lane's weight words, scales and x operand (G = 1: one
        # group, acc0 only; acc1, x2, x3 unused)
        if G == 1:
            if FMT == 0:
                acc0 = gl.inline_asm_elementwise(_ASM_Q8_1, _CON_Q8_1, [w0, w1, s, xe, x0, x1, acc0],
                                                 dtype=gl.float32, is_pure=True, pack=4)
            elif FMT == 1:
                acc0 = gl.inline_asm_elementwise(_ASM_Q5_1, _CON_Q5_1, [w0, w1, s, xe, x0, x1, acc0],
                                                 dtype=gl.float32, is_pure=True, pack=4)
            else:
                acc0 = gl.inline_asm_elementwise(_ASM_Q4_1, _CON_Q4_1, [w0, s, xe, x0, x1, acc0],
                                                 dtype=gl.float32, is_pure=True, pack=4)
        elif FMT == 0:
            acc0, acc1 = gl.inline_asm_elementwise(_ASM_Q8, _CON_Q8, [w0, w1, s, xe, x0, x1, x2, x3, acc0, acc1],
                                                   dtype=(gl.float32, gl.float32), is_pure=True, pack=4)
        elif FMT == 1:
            acc0, acc1 = gl.inline_asm_elementwise(_ASM_Q5, _CON_Q5, [w0, w1, s, xe, x0, x1, x2, x3, acc0, acc1],
                                                   dtype=(gl.float32, gl.float32), is_pure=True, pack=4)
        else:
            acc0, acc1 = gl.inline_asm_elementwise(_ASM_Q4, _CON_Q4, [w0, s, xe, x0, x1, x2, x3, acc0, acc1],
                                                   dtype=(gl.float32, gl.float32), is_pure=True, pack=4)
        return acc0, acc1

    @gluon.jit
    def gemv_frag2(XF, XE, QF, HF, SF, Y, M, N, NT, NC, CPS, stride_ys, stride_ym,
                   FMT: gl.constexpr, W: gl.constexpr, G: gl.constexpr):
        # Two row tiles per warp (2 (i W + w) and + 1) sharing each chunk's x registers: half the x
        # traffic per weight byte. Loads (x too) one chunk ahead.
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        lane = r % 32
        t0 = (gl.program_id(0) * W + r // 32) * 2
        c0 = gl.program_id(1) * CPS
        c1 = gl.minimum(c0 + CPS, NC)
        last = c1 - 1
        ta = gl.minimum(t0, NT - 1)
        tb = gl.minimum(t0 + 1, NT - 1)
        acc0 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc1 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc2 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc3 = gl.zeros([32 * W, 4], gl.float32, L4)
        a = _loads(QF, HF, SF, ta, c0, lane, j, NC, FMT, W, L4)
        b = _loads(QF, HF, SF, tb, c0, lane, j, NC, FMT, W, L4)
        _x_ready()
        x = _xloads(XF, XE, c0, lane, j, W, L4, G)
        for c in range(c0, c1):
            cn = gl.minimum(c + 1, last)
            an = _loads(QF, HF, SF, ta, cn, lane, j, NC, FMT, W, L4)
            bn = _loads(QF, HF, SF, tb, cn, lane, j, NC, FMT, W, L4)
            xn = _xloads(XF, XE, cn, lane, j, W, L4, G)
            acc0, acc1 = _mma(acc0, acc1, a[0], a[1], a[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
            acc2, acc3 = _mma(acc2, acc3, b[0], b[1], b[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
            a = an
            b = bn
            x = xn
        _store(acc0, acc1, Y, t0, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)
        _store(acc2, acc3, Y, t0 + 1, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)

    @gluon.jit
    def _wat(QA, HA, SA, c, QS: gl.constexpr, FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr):
        # chunk c's weight words and scales from a tile's loop-invariant pointers (chunk 0): the
        # loop adds a uniform offset only
        w0 = gl.load(QA + c * QS)
        w1 = w0
        if FMT == 0:
            w1 = gl.load(QA + c * QS + 128)
        elif FMT == 1:
            w1 = gl.load(HA + c * 32) + gl.zeros([32 * W, 4], gl.int32, L4)
        return w0, w1, gl.load(SA + c * 32)

    @gluon.jit
    def _xat(XA, EA, c, W: gl.constexpr, L4: gl.constexpr, G: gl.constexpr):
        # chunk c's x scale (4 copies) and 8 G x registers from loop-invariant pointers (chunk 0)
        xe = gl.load(EA + c * 4)[:, None] + gl.zeros([32 * W, 4], gl.float32, L4)
        if G == 1:
            x0 = gl.load(XA + c * 256)
            x1 = gl.load(XA + c * 256 + 128)
            return xe, x0, x1, x0, x1
        return xe, gl.load(XA + c * 512), gl.load(XA + c * 512 + 128), gl.load(XA + c * 512 + 256), \
            gl.load(XA + c * 512 + 384)

    @gluon.jit
    def _mma2(acc0, acc1, acc2, acc3, a, b, x, FMT: gl.constexpr, G: gl.constexpr):
        acc0, acc1 = _mma(acc0, acc1, a[0], a[1], a[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
        acc2, acc3 = _mma(acc2, acc3, b[0], b[1], b[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
        return acc0, acc1, acc2, acc3

    @gluon.jit
    def gemv_frag3(XF, XE, QF, HF, SF, Y, M, N, NT, NC, CPS, stride_ys, stride_ym,
                   FMT: gl.constexpr, W: gl.constexpr, G: gl.constexpr):
        # gemv_frag2 with fewer instructions a chunk: loop-invariant per-lane pointers plus a uniform
        # chunk offset, and unrolled by 2 so the chunk loaded ahead alternates between two register
        # sets instead of being moved. A chunk loaded past the warp's range is never used; past the
        # end of the arrays it reads their padding (frag.py's two records, launch's two extra x chunks).
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        QS: gl.constexpr = 256 if FMT == 0 else 128  # int32 words of a tile-chunk record
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        lane = r % 32
        t0 = (gl.program_id(0) * W + r // 32) * 2
        c0 = gl.program_id(1) * CPS
        c1 = gl.minimum(c0 + CPS, NC)
        ta = gl.minimum(t0, NT - 1) * NC
        tb = gl.minimum(t0 + 1, NT - 1) * NC
        QA = QF + (ta * QS + lane * 4)[:, None] + j
        QB = QF + (tb * QS + lane * 4)[:, None] + j
        HA = HF + (ta * 32 + lane)[:, None]
        HB = HF + (tb * 32 + lane)[:, None]
        SA = SF + (ta * 32 + (lane // 4) * 4)[:, None] + j
        SB = SF + (tb * 32 + (lane // 4) * 4)[:, None] + j
        XA = XF + (lane * 4)[:, None] + j
        EA = XE + lane % (2 * G)  # the lane's x row: t % 2 (one group) or t
        acc0 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc1 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc2 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc3 = gl.zeros([32 * W, 4], gl.float32, L4)
        a = _wat(QA, HA, SA, c0, QS, FMT, W, L4)
        b = _wat(QB, HB, SB, c0, QS, FMT, W, L4)
        _x_ready()
        x = _xat(XA, EA, c0, W, L4, G)
        for c in range(c0, c1, 2):
            a2 = _wat(QA, HA, SA, c + 1, QS, FMT, W, L4)
            b2 = _wat(QB, HB, SB, c + 1, QS, FMT, W, L4)
            x2 = _xat(XA, EA, c + 1, W, L4, G)
            acc0, acc1, acc2, acc3 = _mma2(acc0, acc1, acc2, acc3, a, b, x, FMT, G)
            a = _wat(QA, HA, SA, c + 2, QS, FMT, W, L4)
            b = _wat(QB, HB, SB, c + 2, QS, FMT, W, L4)
            x = _xat(XA, EA, c + 2, W, L4, G)
            if c + 1 < c1:
                acc0, acc1, acc2, acc3 = _mma2(acc0, acc1, acc2, acc3, a2, b2, x2, FMT, G)
        _store(acc0, acc1, Y, t0, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)
        _store(acc2, acc3, Y, t0 + 1, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)

    @gluon.jit
    def _bfly2(v):
        # v of lane L ^ 2 (lanes t and t ^ 2 of a row group g)
        return gl.inline_asm_elementwise("shfl.sync.bfly.b32 $0, $1, 2, 0x1f, 0xffffffff;", "=f,f", [v],
                                         dtype=gl.float32, is_pure=True, pack=1)

    @gluon.jit
    def _store(acc0, acc1, Y, tile, lane, M, N, NT, split, stride_ys, stride_ym, W: gl.constexpr,
               RL: gl.constexpr, G: gl.constexpr):
        # y[m = t, rows g and g + 8] = pieces 0 + 1 (group 0, columns 2t, 2t + 1) + piece 2 (group 1);
        # one group: lane t < 2 has pieces 0 + 1 of row t, lane t + 2 its piece 2
        a_ev, a_od = gl.split(gl.reshape(acc0, [32 * W, 2, 2]))  # [:, i] = acc0[:, 2i], acc0[:, 2i + 1]
        if G == 1:
            y_g, y_g8 = gl.split(a_ev + a_od)  # rows g, g + 8
            y_g = gl.convert_layout(y_g, RL)
            y_g8 = gl.convert_layout(y_g8, RL)
            y_g = y_g + _bfly2(y_g)
            y_g8 = y_g8 + _bfly2(y_g8)
        else:
            b_ev, b_od = gl.split(gl.reshape(acc1, [32 * W, 2, 2]))
            y_g, y_g8 = gl.split(a_ev + a_od + b_ev)
            y_g = gl.convert_layout(y_g, RL)
            y_g8 = gl.convert_layout(y_g8, RL)
        m = lane % 4  # (one group: lanes t >= 2 hold no row, m >= 2 >= M)
        row = tile * 16 + lane // 4
        ptr = Y + split * stride_ys + m * stride_ym + row
        ok_m = (m < M) & (tile < NT)
        gl.store(ptr, y_g, mask=ok_m & (row < N))
        gl.store(ptr + 8, y_g8, mask=ok_m & (row + 8 < N))

    @gluon.jit
    def _do(acc0, acc1, a, cr, cc, c0, c1, base, stride, warp, XF, XE, Y, lane, j, M, N, NT, stride_ys, stride_ym,
            FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr, RL: gl.constexpr, G: gl.constexpr):
        # chunk cc of round cr (weights a; x loaded here, from L1: every warp reads it); at the end
        # of the chunk range, store the tile and reset
        x = _xloads(XF, XE, cc, lane, j, W, L4, G)
        acc0, acc1 = _mma(acc0, acc1, a[0], a[1], a[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
        if cc == c1 - 1:
            _store(acc0, acc1, Y, base + cr * stride + warp, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym,
                   W, RL, G)
            acc0 = gl.zeros([32 * W, 4], gl.float32, L4)
            acc1 = gl.zeros([32 * W, 4], gl.float32, L4)
        wrap = (cc == c1 - 1).to(gl.int32)
        return acc0, acc1, cr + wrap, cc + 1 - wrap * (c1 - c0)

    @gluon.jit
    def _load_at(QF, HF, SF, lr, lc, c0, c1, base, stride, warp, lane, j, NT, NC,
                 FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr):
        # the loads of round lr, chunk lc (tiles past the end clamped: loaded, never stored), and the
        # next load position
        a = _loads(QF, HF, SF, gl.minimum(base + lr * stride + warp, NT - 1), lc, lane, j, NC, FMT, W, L4)
        wrap = (lc == c1 - 1).to(gl.int32)
        return a, lr + wrap, lc + 1 - wrap * (c1 - c0)

    @gluon.jit
    def gemv_frag_p(XF, XE, QF, HF, SF, Y, M, N, NT, NC, CPS, stride_ys, stride_ym, FMT: gl.constexpr, W: gl.constexpr,
                    G: gl.constexpr):
        # Persistent: program (i, s) walks rounds r = 0, 1, ...: its warp w takes row tile
        # i * W + w + r * W * programs over chunks [s * CPS, (s + 1) * CPS), one stream of chunks with
        # the weights loaded a chunk ahead across tile boundaries (a warp's first loads wait once,
        # not once a tile). Unrolled by 2: a and b alternate without register moves.
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        lane = r % 32
        warp = r // 32
        base = gl.program_id(0) * W
        stride = gl.num_programs(0) * W
        c0 = gl.program_id(1) * CPS
        c1 = gl.minimum(c0 + CPS, NC)
        total = gl.cdiv(NT - base, stride) * (c1 - c0)
        acc0 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc1 = gl.zeros([32 * W, 4], gl.float32, L4)
        lr = 0
        lc = c0
        cr = 0
        cc = c0
        a, lr, lc = _load_at(QF, HF, SF, lr, lc, c0, c1, base, stride, warp, lane, j, NT, NC, FMT, W, L4)
        _x_ready()
        for it in range(0, total, 2):
            b, lr, lc = _load_at(QF, HF, SF, lr, lc, c0, c1, base, stride, warp, lane, j, NT, NC, FMT, W, L4)
            acc0, acc1, cr, cc = _do(acc0, acc1, a, cr, cc, c0, c1, base, stride, warp, XF, XE, Y, lane, j, M, N, NT,
                                     stride_ys, stride_ym, FMT, W, L4, RL, G)
            a, lr, lc = _load_at(QF, HF, SF, lr, lc, c0, c1, base, stride, warp, lane, j, NT, NC, FMT, W, L4)
            if it + 1 < total:
                acc0, acc1, cr, cc = _do(acc0, acc1, b, cr, cc, c0, c1, base, stride, warp, XF, XE, Y, lane, j, M, N,
                                         NT, stride_ys, stride_ym, FMT, W, L4, RL, G)


def launch(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor, groups: int = 0) -> None:
    """out[M, N] (float32, contiguous) = x[M, K] @ dequant(w).T with tile.kernel == "frag", on the
    weight's fragment layout (built on first use, kept on w: `frag.for_weight`). CUDA: the Gluon
    kernels; CPU tensors (Triton's interpreter): x_frag interpreted, then `emulate`.
    Tile fields: BLOCK_N 32 = gemv_frag2 (two row tiles a warp, x loaded a chunk ahead), 16 = the
    persistent gemv_frag_p with n_tiles CTAs per SM; BLOCK_K 64 (a chunk); num_stages 2 (weights
    loaded one chunk ahead; 3: gemv_frag3); split_k parts of K, summed after. groups: mma groups a
    step (0: by the rows and kernel, one up to 2 rows except in gemv_frag3; else only to measure)."""
    assert tile.kernel == "frag" and tile.BLOCK_K == 64 and tile.BLOCK_N in (16, 32) and tile.num_stages in (2, 3), tile
    fw = for_weight(w)
    n, k = fw.shape
    m = x.shape[0]
    assert x.dim() == 2 and 1 <= m <= 4 and x.shape[1] == k and x.stride(1) == 1, x.shape
    nt, nc = fw.tiles
    cps = -(-nc // tile.split_k)
    splits = -(-nc // cps)
    # x's pieces: 3 B columns a row (one mma a step up to 2 rows, two for 3-4). gemv_frag3 keeps two:
    # with one it measured slower (H200 head q4_0, 1 row: 42.3 vs 37.7 us; gemv_frag2 with one 32.0)
    frag3 = tile.BLOCK_N == 32 and tile.num_stages == 3
    groups = groups or (1 if m <= 2 and not frag3 else 2)
    assert groups in (1, 2) and (groups == 2 or m <= 2), (groups, m)
    # two chunks more than written: gemv_frag3 loads up to two chunks ahead and drops them
    xf = torch.empty(nc + 2, 2 * groups, 32, 4, dtype=torch.int32, device=x.device)[:nc]
    xe = torch.empty(nc + 2, 4, dtype=torch.float32, device=x.device)[:nc]
    x_frag[(nc,)](x, xf, xe, k, x.stride(0), M=m, PDL=x.is_cuda, G=groups, num_warps=4)
    if not x.is_cuda:
        out.copy_(emulate(fw, xf, xe, m))
        return
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    hf = fw.hf if fw.hf is not None else fw.qf  # an unused pointer unless q5_0
    args = (xf, xe, fw.qf, hf, fw.sf, y, m, n, nt, nc, cps, 0 if splits == 1 else y.stride(0), out.stride(0))
    w_ = tile.num_warps
    if tile.BLOCK_N == 32 and tile.num_stages == 3:
        gemv_frag3[(triton.cdiv(nt, 2 * w_), splits)](*args, FMT=FMT_ID[fw.fmt], W=w_, G=groups,
                                                        num_warps=w_, launch_pdl=True)
    elif tile.BLOCK_N == 32:
        gemv_frag2[(triton.cdiv(nt, 2 * w_), splits)](*args, FMT=FMT_ID[fw.fmt], W=w_, G=groups, num_warps=w_,
                                                        launch_pdl=True)
    else:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        grid0 = max(1, min(triton.cdiv(nt, w_), sms * tile.n_tiles // splits))
        gemv_frag_p[(grid0, splits)](*args, FMT=FMT_ID[fw.fmt], W=w_, G=groups, num_warps=w_, launch_pdl=True)
    if splits > 1:
        torch.sum(y, dim=0, out=out)


def emulate(fw: FragWeight, xf: torch.Tensor, xe: torch.Tensor, m: int) -> torch.Tensor:
    """What the kernel computes, in torch (the CPU path): the stored weights decoded back to
    values x scales (exact), x rebuilt from its fp16 pieces x 2^e (exact), one float64 matmul.
    xf: x_frag's [NC, 2 groups, 32, 4] (its layout per group count in x_frag)."""
    n, k = fw.shape
    nc = fw.tiles[1]
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
    x = x.permute(0, 2, 1).reshape(4, nc * 64)[:m, :k]
    return (x @ fw.dequantize().double().t()).float().to(xf.device)
