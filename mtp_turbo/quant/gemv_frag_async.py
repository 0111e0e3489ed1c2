"""gemv_frag2 with its weights fed through shared memory by cp.async: a ring of S chunk stages.

Owns: the kernel `gemv_frag2a` (selected by a frag tile with num_stages >= 4; gemv_frag.launch).
Ignores: the PTX, the x operand, the store and the launch (gemv_frag.py), the layout (frag.py).

Why: Nsight Compute on the head matrix (bench/RESULTS.md, session 7) shows the frag kernels waiting
on their weight loads, with time following occupancy: a chunk loaded ahead into registers costs
registers, so loads in flight and resident warps trade against each other. cp.async copies the
next S - 1 chunks of each of the warp's two row tiles into shared memory without holding a register
for them. Each lane copies exactly the bytes it later reads (its weight words, its row pair's
scales, q5_0's fifth bits), so a wait on its own copy groups is enough before reading a stage.
"""

from __future__ import annotations

from .gemv_frag import triton

if triton is not None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

    from .gemv_frag import _mma, _store, _x_ready, _xloads

    @gluon.jit
    def _stage(QS_, SS_, HS_, st, QF, HF, SF, tile, c, lane, j, NC, FMT: gl.constexpr):
        # chunk c of `tile` ([32 W] per lane) into stage st: QS_ [S NQ, 32 W, 4] int32 (q8_0: two
        # halves a stage), SS_ [S, 32 W, 4] fp16, HS_ [S, 32 W] int32 (q5_0 only)
        rec = (tile * NC + c) * 32 + lane  # the lane's record in [NT, NC, 32]
        if FMT == 0:
            q8 = ((tile * NC + c) * 64 + lane)[:, None] * 4 + j  # QF [NT, NC, 2, 32, 4]
            cp.async_copy_global_to_shared(QS_.index(2 * st), QF + q8)
            cp.async_copy_global_to_shared(QS_.index(2 * st + 1), QF + q8 + 128)
        else:
            cp.async_copy_global_to_shared(QS_.index(st), QF + rec[:, None] * 4 + j)
        if FMT == 1:
            cp.async_copy_global_to_shared(HS_.index(st), HF + rec)
        cp.async_copy_global_to_shared(SS_.index(st), SF + ((tile * NC + c) * 8 + lane // 4)[:, None] * 4 + j)

    @gluon.jit
    def _read(QS_, SS_, HS_, st, FMT: gl.constexpr, W: gl.constexpr, L4: gl.constexpr, RL: gl.constexpr):
        # stage st back into the registers gemv_frag's _mma takes: (w0, w1, scales)
        if FMT == 0:
            w0 = QS_.index(2 * st).load(L4)
            w1 = QS_.index(2 * st + 1).load(L4)
        else:
            w0 = QS_.index(st).load(L4)
            w1 = w0
            if FMT == 1:
                w1 = HS_.index(st).load(RL)[:, None] + gl.zeros([32 * W, 4], gl.int32, L4)
        return w0, w1, SS_.index(st).load(L4)

    @gluon.jit
    def gemv_frag2a(XF, XE, QF, HF, SF, Y, M, N, NT, NC, CPS, stride_ys, stride_ym,
                    FMT: gl.constexpr, W: gl.constexpr, G: gl.constexpr, S: gl.constexpr):
        # gemv_frag2 (two row tiles a warp sharing x) with chunk c + S - 1 copied while chunk c is
        # computed. Stages past the warp's last chunk copy that chunk again (never read).
        L4: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [W, 1], [1, 0])
        RL: gl.constexpr = gl.SliceLayout(1, L4)
        NQ: gl.constexpr = 2 if FMT == 0 else 1
        r = gl.arange(0, 32 * W, layout=RL)
        j = gl.arange(0, 4, layout=gl.SliceLayout(0, L4))[None, :]
        lane = r % 32
        t0 = (gl.program_id(0) * W + r // 32) * 2
        c0 = gl.program_id(1) * CPS
        c1 = gl.minimum(c0 + CPS, NC)
        last = c1 - 1
        ta = gl.minimum(t0, NT - 1)
        tb = gl.minimum(t0 + 1, NT - 1)
        # unswizzled, row-major: a lane's 16 (8, 4) bytes are contiguous, a warp's 512 are one run
        # (layouts are of one stage; .index(stage) takes it out)
        L2S: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        L1S: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        QA = gl.allocate_shared_memory(gl.int32, [S * NQ, 32 * W, 4], L2S)
        QB = gl.allocate_shared_memory(gl.int32, [S * NQ, 32 * W, 4], L2S)
        SA = gl.allocate_shared_memory(gl.float16, [S, 32 * W, 4], L2S)
        SB = gl.allocate_shared_memory(gl.float16, [S, 32 * W, 4], L2S)
        HA = gl.allocate_shared_memory(gl.int32, [S, 32 * W], L1S)
        HB = gl.allocate_shared_memory(gl.int32, [S, 32 * W], L1S)
        for p in gl.static_range(S - 1):
            cc = gl.minimum(c0 + p, last)
            _stage(QA, SA, HA, p, QF, HF, SF, ta, cc, lane, j, NC, FMT)
            _stage(QB, SB, HB, p, QF, HF, SF, tb, cc, lane, j, NC, FMT)
            cp.commit_group()
        acc0 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc1 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc2 = gl.zeros([32 * W, 4], gl.float32, L4)
        acc3 = gl.zeros([32 * W, 4], gl.float32, L4)
        _x_ready()
        x = _xloads(XF, XE, c0, lane, j, W, L4, G)
        for c in range(c0, c1):
            k = c - c0
            sn = (k + S - 1) % S
            cn = gl.minimum(c + S - 1, last)
            _stage(QA, SA, HA, sn, QF, HF, SF, ta, cn, lane, j, NC, FMT)
            _stage(QB, SB, HB, sn, QF, HF, SF, tb, cn, lane, j, NC, FMT)
            cp.commit_group()
            cp.wait_group(S - 1)  # chunk c's copies (this lane's own) have landed
            st = k % S
            a = _read(QA, SA, HA, st, FMT, W, L4, RL)
            b = _read(QB, SB, HB, st, FMT, W, L4, RL)
            xn = _xloads(XF, XE, gl.minimum(c + 1, last), lane, j, W, L4, G)
            acc0, acc1 = _mma(acc0, acc1, a[0], a[1], a[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
            acc2, acc3 = _mma(acc2, acc3, b[0], b[1], b[2], x[0], x[1], x[2], x[3], x[4], FMT, G)
            x = xn
        cp.wait_group(0)
        _store(acc0, acc1, Y, t0, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)
        _store(acc2, acc3, Y, t0 + 1, lane, M, N, NT, gl.program_id(1), stride_ys, stride_ym, W, RL, G)
