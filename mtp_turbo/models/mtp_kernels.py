"""Triton kernels that only the MTP head's fused draft step uses (mtp_step.py).

Owns: `mtp_inputs` (the embedding row gather and both input norms, side by side for the one fc
GEMV), `attn_cells` (one query row over an explicit list of cells: the drafter's sink + window +
chain; a program a chunk of cells, merged by the last). Ignores: the kernels the head's block
shares with the main model (fused_kernels.py: the gating of a packed gate|up GEMV's output too),
buffers and launch order.

Rounding follows fused_kernels.py (norms in fp32 rounded to the activation dtype, matmuls
accumulated in fp32); each row is computed from its own inputs alone.
"""

from __future__ import annotations

from . import fused_kernels as fk

triton = fk.triton
if triton is not None:
    import triton.language as tl

    @triton.jit
    def mtp_inputs(TOK, EMB, scale, H, HIDX, WE, WH, XOUT, D, eps, KP: tl.constexpr):
        """One program per row m: e = EMB[TOK[m]] * scale (rounded to the activation dtype, as
        torch's bf16 product), h = H[HIDX[m]]; XOUT[m] = [rmsnorm(e) * WE | rmsnorm(h) * WH]
        ([M, 2D]: the input of the fused fc_embedding | fc_hidden GEMV)."""
        ACT: tl.constexpr = XOUT.dtype.element_ty
        m = tl.program_id(0)
        rk = tl.arange(0, KP)
        ok = rk < D
        tok = tl.load(TOK + m)
        e = (tl.load(EMB + tok * D + rk, mask=ok, other=0.0).to(tl.float32) * scale).to(ACT).to(tl.float32)
        h = tl.load(H + tl.load(HIDX + m) * D + rk, mask=ok, other=0.0).to(tl.float32)
        re = 1.0 / tl.sqrt(tl.sum(e * e, axis=0) / D + eps)
        rh = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / D + eps)
        we = tl.load(WE + rk, mask=ok, other=0.0).to(tl.float32)
        wh = tl.load(WH + rk, mask=ok, other=0.0).to(tl.float32)
        tl.store(XOUT + m * 2 * D + rk, (e * re * we).to(ACT), mask=ok)
        tl.store(XOUT + m * 2 * D + D + rk, (h * rh * wh).to(ACT), mask=ok)

    @triton.jit
    def attn_cells(Q, KC, VC, RUNS, OUT, OP, MX, LS, CNT, M, scale, H: tl.constexpr, HKV: tl.constexpr,
                   DH: tl.constexpr, QR: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr, PREC: tl.constexpr):
        """Program (s, g) of a (cdiv(M, BS), HKV) grid: the H/HKV query heads of KV group g of one
        row Q [H, DH] against entries s BS .. (s+1) BS of the query's read-cell list (at most M
        cells: the cell runs RUNS [6] int64 = [lo, hi) x 3, ascending, one after another; see
        mtp_step.cells_from_runs) of KC/VC [capacity, HKV, DH]: unnormalised output, row max and
        row sum into OP [HKV S, QR, DH] / MX / LS [HKV S, QR] slot g S + s. The last of the group's S programs (arrival counter CNT
        [HKV] int32, zero before and after) merges the S slots into OUT [H, DH]; SP = a power of
        two >= S. One chunk a program: one program walking 321 cells took 19 us (bench/RESULTS.md).
        P is rounded to the cache dtype for the P.V dot and the row sum is taken over the rounded
        P, as attn_partial does."""
        s = tl.program_id(0)
        g = tl.program_id(1)
        S = tl.num_programs(0)
        REP: tl.constexpr = H // HKV
        rq = tl.arange(0, QR)
        q_ok = rq < REP
        qh = g * REP + rq
        rd = tl.arange(0, DH)
        q = tl.load(Q + qh[:, None] * DH + rd[None, :], mask=q_ok[:, None], other=0.0)
        rs = s * BS + tl.arange(0, BS)  # entries of the read-cell list -> cells, from the runs
        lo0, lo1, lo2 = tl.load(RUNS), tl.load(RUNS + 2), tl.load(RUNS + 4)
        e0 = tl.load(RUNS + 1) - lo0  # the entries each run ends at
        e1 = e0 + tl.load(RUNS + 3) - lo1
        e2 = e1 + tl.load(RUNS + 5) - lo2
        c = tl.where(rs < e0, lo0 + rs, tl.where(rs < e1, lo1 + rs - e0, tl.where(rs < e2, lo2 + rs - e1, -1)))
        ok = (c >= 0) & (rs < M)
        off = (tl.where(ok, c, 0) * HKV + g)[:, None] * DH + rd[None, :]
        k = tl.load(KC + off, mask=ok[:, None], other=0.0)
        sc = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [QR, BS]
        sc = tl.where(ok[None, :], sc, float("-inf"))
        mx = tl.max(sc, axis=1)
        mx_safe = tl.where(mx == float("-inf"), 0.0, mx)
        p = tl.where(ok[None, :], tl.exp(sc - mx_safe[:, None]), 0.0).to(KC.dtype.element_ty)
        v = tl.load(VC + off, mask=ok[:, None], other=0.0)
        o = tl.dot(p, v, input_precision=PREC)  # [QR, DH] fp32
        slot = g * S + s
        tl.store(OP + (slot * QR + rq)[:, None] * DH + rd[None, :], o, mask=q_ok[:, None])
        tl.store(MX + slot * QR + rq, mx, mask=q_ok)
        tl.store(LS + slot * QR + rq, tl.sum(p.to(tl.float32), axis=1), mask=q_ok)
        if fk.last_arrival(CNT + g, S):
            rsl = tl.arange(0, SP)
            s_ok = rsl < S
            for r in tl.static_range(REP):
                at = (g * S + rsl) * QR + r
                mxs = fk.ld(MX + at, s_ok, float("-inf"), True)
                w = tl.exp(mxs - tl.max(mxs, axis=0))  # a chunk without a valid cell (-inf): 0
                ops = fk.ld(OP + at[:, None] * DH + rd[None, :], s_ok[:, None], 0.0, True)  # [SP, DH]
                acc = tl.sum(w[:, None] * ops, axis=0)
                l_all = tl.sum(w * fk.ld(LS + at, s_ok, 0.0, True), axis=0)
                tl.store(OUT + (g * REP + r) * DH + rd, (acc / l_all).to(OUT.dtype.element_ty))

