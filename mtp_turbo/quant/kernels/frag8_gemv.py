"""GEMV on weights in the int8 fragment layout (frag8.py): integer tensor cores, a warp per 16-row tile.

Owns: the kernel `gemv_frag8` (Gluon: layouts are explicit, so lane L of a warp provably holds element
L of every per-lane tensor, which the warp-wide `mma.sync` in the PTX relies on; two row tiles a warp
sharing each chunk's x, loads one or two chunks ahead, split-K partials summed by the last split to
arrive), frag8x's in-kernel copy of the x operand's rule (`_x_make`: the same words as x_frag8), the
launch and the CPU emulation. Ignores: the layout (frag8.py), the PTX text (ptx.py), the x operand's
separate kernel and decoding (frag8_x.py), tile choice (gemv.py).

Per warp and 64-column chunk each lane loads its weight words (16 bytes; 32 for q8_0), 4 fp16 block
scales (shared by the 4 lanes of a row pair) and its x registers, and runs one PTX block on them: one
mma.m16n8k32 per 32-block and group of 2 x rows, the weights made operands by 0 (q8_0), 1.5 (q4_0) or
~4 (q5_0) bit operations per register. Nothing passes through shared memory. frag8 is launched as a
programmatic dependent of x_frag8: its first weight loads go out before it waits for x.
"""

from __future__ import annotations

import torch

from ..repack import PackedWeight
from . import frag8_x
from . import fragk
from .frag8 import SHIFT as SHIFT8, Frag8Weight, counters, for_weight8
from .frag8_x import x8_values
from .fragk import FragKWeight
from .ptx import frag8_asm, frag8_constraints, fragk_asm, fragk_constraints

try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except ImportError:  # CPU machines without Triton (or a Triton without Gluon): not available
    triton = None

FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2, "q4_k": 3, "q6_k": 4, "q5_k": 5}
SHIFT = {**SHIFT8, **fragk.SHIFT}  # log2 of the int8 multiple an A register holds, per format
KERNELS = ("frag8", "frag8x")  # frag8x: the same GEMV making x's words itself (one launch, not two)


def available() -> bool:
    """True when Triton with Gluon imports."""
    return triton is not None


if triton is not None:
    _A8_1 = {f: gl.constexpr(frag8_asm(f, 1)) for f in SHIFT8}
    _A8_2 = {f: gl.constexpr(frag8_asm(f, 2)) for f in SHIFT8}
    _Q8_1, _Q8_2, _Q5_1, _Q5_2 = _A8_1["q8_0"], _A8_2["q8_0"], _A8_1["q5_0"], _A8_2["q5_0"]
    _Q4_1, _Q4_2 = _A8_1["q4_0"], _A8_2["q4_0"]
    _C8_1, _C8_2 = gl.constexpr(frag8_constraints("q8_0", 1)), gl.constexpr(frag8_constraints("q8_0", 2))
    _C4_1, _C4_2 = gl.constexpr(frag8_constraints("q4_0", 1)), gl.constexpr(frag8_constraints("q4_0", 2))
    _K4_1, _K4_2 = gl.constexpr(fragk_asm("q4_k", 1)), gl.constexpr(fragk_asm("q4_k", 2))
    _K6_1, _K6_2 = gl.constexpr(fragk_asm("q6_k", 1)), gl.constexpr(fragk_asm("q6_k", 2))
    _K5_1, _K5_2 = gl.constexpr(fragk_asm("q5_k", 1)), gl.constexpr(fragk_asm("q5_k", 2))
    _CK4_1, _CK4_2 = gl.constexpr(fragk_constraints("q4_k", 1)), gl.constexpr(fragk_constraints("q4_k", 2))
    _CK6_1, _CK6_2 = gl.constexpr(fragk_constraints("q6_k", 1)), gl.constexpr(fragk_constraints("q6_k", 2))
    _CK5_1, _CK5_2 = gl.constexpr(fragk_constraints("q5_k", 1)), gl.constexpr(fragk_constraints("q5_k", 2))
    _E_MIN = gl.constexpr(frag8_x.E_MIN)

    @gluon.jit
    def _x_ready():
        # programmatic dependent launch: wait until x_frag8's grid is done (its XF / XE visible); the
        # weight loads issued before this overlap x_frag8 and the launch gap
        gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _loads(QF, HF, SF, DF, tile, c, lane, j, NC, FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr):
        # The weights of chunk c of this lane's tile: words (w1: q8_0's second half, q5_0's qh
        # copies, q6_k's high fields (word j % 2), q5_k's 5th-bit word copies, else w0 again) and scales (the K-quants' int32
        # record: words 0-1 from SF [NT, NC, 8, 2], 2-3 from the super-block's DF [NT, NC / 4, 8, DW]).
        # No masks: callers clamp tile and c to existing ones (a chunk loaded past the end is not used).
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
            if FMT == 4:
                w1 = gl.load(HF + rec * 2 + j % 2)
            if FMT == 5:
                w1 = gl.load(HF + rec) + gl.zeros([32 * W, 4], gl.int32, L4)
        if FMT >= 3:
            DW: gl.constexpr = 1 if FMT == 4 else 2
            g8 = (tile * NC + c) * 8 + lane // 4
            d8 = (tile * (NC // 4) + c // 4) * 8 + lane // 4
            s = gl.load(SF + (g8 * 2)[:, None] + j, mask=j < 2, other=0) + \
                gl.load(DF + (d8 * DW)[:, None] + (j - 2) % DW, mask=j >= 2, other=0)
            return w0, w1, s
        return w0, w1, gl.load(SF + (((tile * NC + c) * 8 + lane // 4) * 4)[:, None] + j)  # SF [NT, NC, 8, 4]

    @gluon.jit
    def _pair_tiles(CPS, NC, NT, W: gl.constexpr, L4: gl.constexpr, RL: gl.constexpr):
        # register index j [1, 4], each row's lane [32 W], the first of its warp's two row tiles
        # t0 = 2 (i W + w), the chunk range [c0, c1) of split program_id(1) and its last chunk, and the
        # warp's two tiles clamped to existing ones (a clamped tile is loaded, never stored)
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        t0 = (gl.program_id(0) * W + r // 32) * 2
        c0 = gl.program_id(1) * CPS
        c1 = gl.minimum(c0 + CPS, NC)
        return j, r % 32, t0, c0, c1, c1 - 1, gl.minimum(t0, NT - 1), gl.minimum(t0 + 1, NT - 1)

    @gluon.jit
    def _xloads8(XF, XE, c, lane, j, MM: gl.constexpr):
        # chunk c's lane scales (group 0, group 1, -, -) and x registers per group (MM = 1: group 0 again)
        xe = gl.load(XE + (c * 4 + lane % 4)[:, None] * 4 + j)
        x0 = gl.load(XF + ((c * MM) * 32 + lane)[:, None] * 4 + j)
        x1 = x0
        if MM == 2:
            x1 = gl.load(XF + ((c * 2 + 1) * 32 + lane)[:, None] * 4 + j)
        return xe, x0, x1

    @gluon.jit
    def _mma8(acc, w0, w1, s, x, FMT: gl.constexpr, MM: gl.constexpr):
        # one chunk's PTX (frag8_asm, fragk_asm) on a lane's weight words, scales, x scales and registers
        if FMT == 3:
            if MM == 1:
                acc = gl.inline_asm_elementwise(_K4_1, _CK4_1, [w0, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
            else:
                acc = gl.inline_asm_elementwise(_K4_2, _CK4_2, [w0, s, x[0], x[1], x[2], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
        elif FMT == 4:
            if MM == 1:
                acc = gl.inline_asm_elementwise(_K6_1, _CK6_1, [w0, w1, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
            else:
                acc = gl.inline_asm_elementwise(_K6_2, _CK6_2, [w0, w1, s, x[0], x[1], x[2], acc],
                                                dtype=gl.float32, is_pure=True, pack=4)
        elif FMT == 5:
            if MM == 1:
                acc = gl.inline_asm_elementwise(_K5_1, _CK5_1, [w0, w1, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
            else:
                acc = gl.inline_asm_elementwise(_K5_2, _CK5_2, [w0, w1, s, x[0], x[1], x[2], acc],
                                                dtype=gl.float32, is_pure=True, pack=4)
        elif MM == 1:
            if FMT == 0:
                acc = gl.inline_asm_elementwise(_Q8_1, _C8_1, [w0, w1, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
            elif FMT == 1:
                acc = gl.inline_asm_elementwise(_Q5_1, _C8_1, [w0, w1, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
            else:
                acc = gl.inline_asm_elementwise(_Q4_1, _C4_1, [w0, s, x[0], x[1], acc], dtype=gl.float32,
                                                is_pure=True, pack=4)
        elif FMT == 0:
            acc = gl.inline_asm_elementwise(_Q8_2, _C8_2, [w0, w1, s, x[0], x[1], x[2], acc], dtype=gl.float32,
                                            is_pure=True, pack=4)
        elif FMT == 1:
            acc = gl.inline_asm_elementwise(_Q5_2, _C8_2, [w0, w1, s, x[0], x[1], x[2], acc], dtype=gl.float32,
                                            is_pure=True, pack=4)
        else:
            acc = gl.inline_asm_elementwise(_Q4_2, _C4_2, [w0, s, x[0], x[1], x[2], acc], dtype=gl.float32,
                                            is_pure=True, pack=4)
        return acc

    @gluon.jit
    def _bfly1(v):
        # v of lane L ^ 1 (lanes t and t ^ 1 of a row group g: the two piece pairs of one x row)
        return gl.inline_asm_elementwise("shfl.sync.bfly.b32 $0, $1, 1, 0x1f, 0xffffffff;", "=f,f", [v],
                                         dtype=gl.float32, is_pure=True, pack=1)

    @gluon.jit
    def _store8(acc, Y, tile, lane, M, N, NT, split, stride_ys, stride_ym, W: gl.constexpr, RL: gl.constexpr):
        # lane (g, t) even t: y[row 2 j + t // 2, output rows g, g + 8] = its pair + lane t + 1's
        v = acc + _bfly1(acc)
        ev, od = gl.split(gl.reshape(v, [32 * W, 2, 2]))  # ev[:, j] = (group j, row g); od: row g + 8
        y0, y1 = gl.split(ev)
        y08, y18 = gl.split(od)
        t = lane % 4
        row = tile * 16 + lane // 4
        ok = (t % 2 == 0) & (tile < NT)
        base = Y + split * stride_ys + row
        _put(base, y0, y08, t // 2, stride_ym, ok, M, row, N, RL)
        _put(base, y1, y18, 2 + t // 2, stride_ym, ok, M, row, N, RL)

    @gluon.jit
    def _put(base, yg, yg8, m, stride_ym, ok, M, row, N, RL: gl.constexpr):
        # x row m's outputs at rows g and g + 8 of the tile
        ptr = base + m * stride_ym
        gl.store(ptr, gl.convert_layout(yg, RL), mask=ok & (m < M) & (row < N))
        gl.store(ptr + 8, gl.convert_layout(yg8, RL), mask=ok & (m < M) & (row + 8 < N))

    @gluon.jit
    def _fence():
        gl.inline_asm_elementwise("fence.acq_rel.gpu; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _sum_splits(P, OUT, CNT, M, N, S, stride_ys, stride_ym, W: gl.constexpr):
        # After this program's partials are in P[split]: the last of the S programs of this row range
        # to arrive (counter CNT[program_id(0)]) adds P[0], .., P[S - 1] in that order (whichever
        # program is last: the same sums) into OUT and resets the counter for the next call.
        _fence()  # this thread's partial stores before the count
        gl.thread_barrier()  # every thread's, before the one atomic
        cnt = gl.atomic_add(CNT + gl.program_id(0), 1, sem="acq_rel", scope="gpu")
        if cnt == S - 1:
            _fence()
            LR: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, W], [1, 0])
            m = gl.arange(0, 4, layout=gl.SliceLayout(1, LR))[:, None]
            rows = (gl.program_id(0) * 32 * W + gl.arange(0, 32 * W, layout=gl.SliceLayout(0, LR)))[None, :]
            ok = (m < M) & (rows < N)
            off = m * stride_ym + rows
            acc = gl.zeros([4, 32 * W], gl.float32, LR)
            for s in range(S):  # .cg: from L2, where the other programs' stores are (not a stale L1 line)
                acc += gl.load(P + s * stride_ys + off, mask=ok, other=0.0, cache_modifier=".cg")
            gl.store(OUT + off, acc, mask=ok)
            gl.atomic_xchg(CNT + gl.program_id(0), 0)

    @gluon.jit
    def _max_t(v):
        # the max of v over the 4 lanes t of a row group g (lane bits 0 and 1)
        v = gl.maximum(v, gl.inline_asm_elementwise("shfl.sync.bfly.b32 $0, $1, 1, 0x1f, 0xffffffff;", "=f,f", [v],
                                                     dtype=gl.float32, is_pure=True, pack=1))
        return gl.maximum(v, gl.inline_asm_elementwise("shfl.sync.bfly.b32 $0, $1, 2, 0x1f, 0xffffffff;", "=f,f",
                                                        [v], dtype=gl.float32, is_pure=True, pack=1))

    @gluon.jit
    def _from_lane(v, src):
        # v of lane src (per lane)
        return gl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, 0x1f, 0xffffffff;", "=r,r,r", [v, src],
                                         dtype=gl.int32, is_pure=True, pack=1)

    @gluon.jit
    def _x_make(X, XF, XE, c0, c1, K, M, stride_xm, MM: gl.constexpr, SHIFT: gl.constexpr, W: gl.constexpr):
        # frag8x: x_frag8's XF / XE words for chunks [c0, c1), made by this program's warps (warp w: chunks
        # c0 + w, c0 + w + W, ..), lane (g, t) its own B registers: the same rule (frag8_x.py), the same bits.
        # The programs of one split write the same words (the same bits: harmless); the caller's barrier
        # makes them visible to all its warps.
        L3: gl.constexpr = gl.BlockedLayout([1, 4, 4], [32, 1, 1], [W, 1, 1], [2, 1, 0])  # [32 W, 4 r, 4 i]
        LW: gl.constexpr = gl.SliceLayout(2, L3)
        LR: gl.constexpr = gl.SliceLayout(1, LW)
        rows = gl.arange(0, 32 * W, layout=LR)
        lane = rows % 32
        g = lane // 4
        t = lane % 4
        r = gl.arange(0, 4, layout=gl.SliceLayout(0, LW))[None, :]
        i = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3)))[None, None, :]
        sh = (21 - 7 * (g % 4))[:, None, None]  # this lane's piece: V >> 21 (signed byte), then 7-bit digits
        keep = gl.where(g % 4 == 0, 0xFF, 0x7F)[:, None, None]
        for cw in range(c0, c1, W):
            c = cw + rows // 32
            ok = c < c1
            col = (c * 64 + 4 * t)[:, None] + 16 * r  # register r = 2 b + h: columns 32 b + 16 h + 4 t + i
            for jj in gl.static_range(MM):
                m = 2 * jj + g // 4
                cols = col[:, :, None] + i
                v = gl.load(X + (m * stride_xm)[:, None, None] + cols,
                            mask=(ok & (m < M))[:, None, None] & (cols < K), other=0.0).to(gl.float32)
                mx = _max_t(gl.max(gl.max(gl.abs(v), axis=2), axis=1))  # the row's max |x| in the chunk
                e = gl.where(mx > 0, gl.maximum(((mx.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 126, _E_MIN), 0)
                s = ((127 + 28 - e) << 23).to(gl.float32, bitcast=True)  # 2^(28 - E)
                byte = ((v * s[:, None, None]).to(gl.int32) >> sh) & keep
                word = gl.sum(byte << (8 * i), axis=2)  # disjoint bytes: the sum is their OR
                gl.store(XF + (((c * MM + jj) * 32 + lane) * 4)[:, None] + r, word, mask=ok[:, None])
                # lane t's scale: E of row 2 jj + t // 2, made by lanes g = 4 (t // 2) .. (lane 16 (t // 2) + t)
                et = _from_lane(e, 16 * (t // 2) + t)
                sc = ((127 + et - 14 - 14 * (t % 2) - SHIFT) << 23).to(gl.float32, bitcast=True)
                gl.store(XE + (c * 4 + t) * 4 + jj, sc, mask=ok & (g == 0))

    @gluon.jit
    def gemv_frag8(XF, XE, QF, HF, SF, DF, Y, OUT, CNT, X, M, N, NT, NC, CPS, K, stride_xm, stride_ys, stride_ym,
                   FMT: gl.constexpr, W: gl.constexpr, MM: gl.constexpr, FUSE: gl.constexpr,
                   AHEAD: gl.constexpr, XIN: gl.constexpr, SHIFT: gl.constexpr):
        # Two row tiles per warp (2 (i W + w) and + 1) sharing each chunk's x registers; loads (x too)
        # AHEAD (1 or 2) chunks ahead; split program_id(1) walks chunks [c0, c1) and stores its partials
        # to Y[split]; FUSE (split into more than one): the last split of a row range sums them into OUT.
        # XIN (frag8x): the program makes its chunks' x words from X itself (into XF / XE) after the
        # first weight loads are out, instead of a separate x_frag8 launch before it.
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        j, lane, t0, c0, c1, last, ta, tb = _pair_tiles(CPS, NC, NT, W, L4, RL)
        acc_a = gl.zeros([32 * W, 4], gl.float32, L4)
        acc_b = gl.zeros([32 * W, 4], gl.float32, L4)
        a = _loads(QF, HF, SF, DF, ta, c0, lane, j, NC, FMT, W, L4)
        b = _loads(QF, HF, SF, DF, tb, c0, lane, j, NC, FMT, W, L4)
        c_1 = gl.minimum(c0 + 1, last)
        a1 = _loads(QF, HF, SF, DF, ta, c_1, lane, j, NC, FMT, W, L4)
        b1 = _loads(QF, HF, SF, DF, tb, c_1, lane, j, NC, FMT, W, L4)
        _x_ready()
        if XIN:
            _x_make(X, XF, XE, c0, c1, K, M, stride_xm, MM, SHIFT, W)
            gl.thread_barrier()
        x = _xloads8(XF, XE, c0, lane, j, MM)
        x1 = _xloads8(XF, XE, c_1, lane, j, MM)
        for c in range(c0, c1):
            cn = gl.minimum(c + AHEAD, last)
            an = _loads(QF, HF, SF, DF, ta, cn, lane, j, NC, FMT, W, L4)
            bn = _loads(QF, HF, SF, DF, tb, cn, lane, j, NC, FMT, W, L4)
            xn = _xloads8(XF, XE, cn, lane, j, MM)
            acc_a = _mma8(acc_a, a[0], a[1], a[2], x, FMT, MM)
            acc_b = _mma8(acc_b, b[0], b[1], b[2], x, FMT, MM)
            if AHEAD == 2:
                a = a1
                b = b1
                x = x1
                a1 = an
                b1 = bn
                x1 = xn
            else:
                a = an
                b = bn
                x = xn
        _store8(acc_a, Y, t0, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL)
        _store8(acc_b, Y, t0 + 1, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL)
        if FUSE:
            _sum_splits(Y, OUT, CNT, M, N, gl.num_programs(1), stride_ys, stride_ym, W)


def launch(x: torch.Tensor, w: PackedWeight | Frag8Weight | FragKWeight, tile, out: torch.Tensor,
           scratch: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """out[M, N] (float32, contiguous) = x[M, K] @ dequant(w).T with tile.kernel "frag8" or "frag8x",
    on the weight's int8 fragment layout (a PackedWeight's built on first use, kept on w:
    `frag8.for_weight8`; a FragKWeight is its own). CUDA:
    the Gluon kernel; CPU tensors (Triton's interpreter): x_frag8 interpreted, then `emulate`.
    frag8: x's int8 words made by x_frag8, launched before; frag8x: by the GEMV's own programs (one
    launch, not two; the same bits). Tile: BLOCK_N 32 (two row tiles a warp), BLOCK_K 64, num_stages
    2 or 3 (weights and x loaded one or two chunks ahead), split_k parts of K: their partials summed
    by the kernel's last program of each row range. The split counters live with the layout
    (`frag8.counters`): one GEMV on a weight at a time. scratch: the (XF, XE) buffers to use (tests
    read the x words back)."""
    assert tile.kernel in KERNELS and tile.BLOCK_N == 32 and tile.BLOCK_K == 64, tile
    assert tile.num_stages in (2, 3), tile
    if isinstance(w, PackedWeight):
        fw, cnt = for_weight8(w), counters(w)
    else:  # a layout held alone, with its counters (a FragKWeight, or a Frag8Weight of a FragMatrix)
        fw, cnt = w, w.counters
    n, k, m, nt, nc, cps, splits = geometry(fw, x, tile.split_k)
    mm = 1 if m <= 2 else 2  # mma groups: 2 rows x 4 pieces fill the 8 B columns of one
    xf, xe = scratch or (torch.empty(nc, mm, 32, 4, dtype=torch.int32, device=x.device),
                         torch.empty(nc, 4, 4, dtype=torch.float32, device=x.device))
    assert xf.shape == (nc, mm, 32, 4) and xe.shape == (nc, 4, 4), (xf.shape, xe.shape)
    x_inside = tile.kernel == "frag8x" and x.is_cuda
    if not x_inside:
        frag8_x.x_frag8[(nc,)](x, xf, xe, k, x.stride(0), M=m, MM=mm, SHIFT=SHIFT[fw.fmt], PDL=x.is_cuda,
                               num_warps=4)
    if not x.is_cuda:
        out.copy_(emulate(fw, xf, xe, m))
        return
    # the partials take out's row stride: the kernel addresses both with it (out may be a column slice)
    y = out if splits == 1 else torch.empty(splits, m, out.stride(0), dtype=torch.float32, device=x.device)
    hf = fw.hf if fw.hf is not None else fw.qf  # an unused pointer unless q5_0
    w_ = tile.num_warps
    grid0 = triton.cdiv(nt, 2 * w_)
    assert cnt.numel() >= grid0, (cnt.numel(), grid0)
    gemv_frag8[(grid0, splits)](
        xf, xe, fw.qf, hf, fw.sf, getattr(fw, "df", fw.qf), y, out, cnt, x, m, n, nt, nc, cps, k, x.stride(0),
        0 if splits == 1 else y.stride(0), out.stride(0), FMT=FMT_ID[fw.fmt], W=w_, MM=mm, FUSE=splits > 1,
        AHEAD=tile.num_stages - 1, XIN=x_inside, SHIFT=SHIFT[fw.fmt], num_warps=w_, launch_pdl=True)


def geometry(fw: Frag8Weight | FragKWeight, x: torch.Tensor, split_k: int) -> tuple[int, ...]:
    """(N, K, M, NT, NC, chunks a split, splits) of x [M, K] against the layout, x checked: 1-4 rows
    of K, unit column stride."""
    n, k = fw.shape
    m = x.shape[0]
    assert x.dim() == 2 and 1 <= m <= 4 and x.shape[1] == k and x.stride(1) == 1, x.shape
    nt, nc = fw.tiles
    cps = -(-nc // split_k)
    return n, k, m, nt, nc, cps, -(-nc // cps)


def emulate(fw: Frag8Weight | FragKWeight, xf: torch.Tensor, xe: torch.Tensor, m: int) -> torch.Tensor:
    """What the kernel computes, in torch (the CPU path): the stored weights decoded (exact), x rebuilt
    from its int8 pieces (exact), one float64 matmul."""
    x = x8_values(xf, xe, m, fw.shape[1], SHIFT[fw.fmt])
    w = fw.dequantize().double()
    # row by row: a float64 matmul's blocking (so its rounding) depends on the row count
    return torch.stack([w @ x[i] for i in range(m)]).float().to(xf.device)
