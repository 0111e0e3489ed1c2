"""GEMV on weights in the fragment layout (frag.py): a warp per 16-row tile, mma.sync in inline PTX.

Owns: the GEMV kernels (Gluon: layouts are explicit, so lane L of a warp provably holds element L
of every per-lane tensor, which the warp-wide `mma.sync` in the PTX relies on): `gemv_frag2` (two
row tiles a warp sharing x), `gemv_frag3` (the same with loop-invariant pointers, unrolled by 2:
fewer instructions, more registers) and `gemv_frag_p` (persistent, for split-K); the launch and
the CPU emulation. Ignores: the layout's construction (frag.py), the PTX text (frag_ptx.py), the x
operand (frag_x.py), dispatch (gemv.py), the other kernels.

Per warp and 64-column chunk, each lane loads its weight words (16 bytes; 32 for q8_0), 4 fp16
block scales (shared by the 4 lanes of a row pair) and its x registers, and runs one PTX block on
them (frag_ptx.py). Nothing passes through shared memory. The GEMV is launched as a programmatic
dependent of x_frag: its first weight loads go out before it waits for x. 1-2 rows of x take one
mma group a step (except in gemv_frag3, measured slower with one), 3-4 rows two; with one group
the store adds lane t + 2's piece 2 to lane t's sum by a shuffle (H200 head, 1 row: q4_0 32.0 vs
37.7 us with two groups; bench/RESULTS.md, session 7).
"""

from __future__ import annotations

import torch

from . import frag_x
from .frag import FragWeight, for_weight
from .frag_ptx import frag_asm, frag_constraints
from .frag_x import x_values
from .repack import PackedWeight

try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except ImportError:  # CPU machines without Triton (or a Triton without Gluon): not available
    triton = None

FMT_ID = {"q8_0": 0, "q5_0": 1, "q4_0": 2}


def available() -> bool:
    return triton is not None


if triton is not None:
    _ASM_Q8, _ASM_Q8_1 = gl.constexpr(frag_asm("q8_0")), gl.constexpr(frag_asm("q8_0", 1))
    _ASM_Q5, _ASM_Q5_1 = gl.constexpr(frag_asm("q5_0")), gl.constexpr(frag_asm("q5_0", 1))
    _ASM_Q4, _ASM_Q4_1 = gl.constexpr(frag_asm("q4_0")), gl.constexpr(frag_asm("q4_0", 1))
    _CON_Q8, _CON_Q8_1 = gl.constexpr(frag_constraints("q8_0")), gl.constexpr(frag_constraints("q8_0", 1))
    _CON_Q5, _CON_Q5_1 = _CON_Q8, _CON_Q8_1
    _CON_Q4, _CON_Q4_1 = gl.constexpr(frag_constraints("q4_0")), gl.constexpr(frag_constraints("q4_0", 1))

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
    def _pair_range(CPS, NC, W: gl.constexpr, L4: gl.constexpr, RL: gl.constexpr):
        # what gemv_frag2 / gemv_frag3 share: register index j [1, 4], each row's lane [32 W], the
        # first of its warp's two row tiles t0 = 2 (i W + w), and the chunk range [c0, c1) of split
        # program_id(1)
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        t0 = (gl.program_id(0) * W + r // 32) * 2
        c0 = gl.program_id(1) * CPS
        return j, r % 32, t0, c0, gl.minimum(c0 + CPS, NC)

    @gluon.jit
    def _pair_tiles(CPS, NC, NT, W: gl.constexpr, L4: gl.constexpr, RL: gl.constexpr):
        # _pair_range plus the range's last chunk and the warp's two tiles clamped to existing ones
        # (a clamped tile is loaded, never stored): the preamble of gemv_frag2 and gemv_frag8
        j, lane, t0, c0, c1 = _pair_range(CPS, NC, W, L4, RL)
        return j, lane, t0, c0, c1, c1 - 1, gl.minimum(t0, NT - 1), gl.minimum(t0 + 1, NT - 1)

    @gluon.jit
    def gemv_frag2(XF, XE, QF, HF, SF, Y, M, N, NT, NC, CPS, stride_ys, stride_ym,
                   FMT: gl.constexpr, W: gl.constexpr, G: gl.constexpr):
        # Two row tiles per warp (2 (i W + w) and + 1) sharing each chunk's x registers: half the x
        # traffic per weight byte. Loads (x too) one chunk ahead.
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        j, lane, t0, c0, c1, last, ta, tb = _pair_tiles(CPS, NC, NT, W, L4, RL)
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
        j, lane, t0, c0, c1 = _pair_range(CPS, NC, W, L4, RL)
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


def geometry(fw: FragWeight, x: torch.Tensor, split_k: int) -> tuple[int, ...]:
    """(N, K, M, NT, NC, chunks a split, splits) of x [M, K] against a fragment layout (either one:
    frag.py's or frag8.py's), x checked: 1-4 rows of K, unit column stride."""
    n, k = fw.shape
    m = x.shape[0]
    assert x.dim() == 2 and 1 <= m <= 4 and x.shape[1] == k and x.stride(1) == 1, x.shape
    nt, nc = fw.tiles
    cps = -(-nc // split_k)
    return n, k, m, nt, nc, cps, -(-nc // cps)


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
    n, k, m, nt, nc, cps, splits = geometry(fw, x, tile.split_k)
    # x's pieces: 3 B columns a row (one mma a step up to 2 rows, two for 3-4). gemv_frag3 keeps two:
    # with one it measured slower (H200 head q4_0, 1 row: 42.3 vs 37.7 us; gemv_frag2 with one 32.0)
    frag3 = tile.BLOCK_N == 32 and tile.num_stages == 3
    groups = groups or (1 if m <= 2 and not frag3 else 2)
    assert groups in (1, 2) and (groups == 2 or m <= 2), (groups, m)
    # two chunks more than written: gemv_frag3 loads up to two chunks ahead and drops them
    xf = torch.empty(nc + 2, 2 * groups, 32, 4, dtype=torch.int32, device=x.device)[:nc]
    xe = torch.empty(nc + 2, 4, dtype=torch.float32, device=x.device)[:nc]
    frag_x.x_frag[(nc,)](x, xf, xe, k, x.stride(0), M=m, PDL=x.is_cuda, G=groups, num_warps=4)
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
    values x scales (exact), x rebuilt from its fp16 pieces x 2^e (exact), one float64 matmul."""
    x = x_values(xf, xe, m, fw.shape[1])
    return (x @ fw.dequantize().double().t()).float().to(xf.device)
