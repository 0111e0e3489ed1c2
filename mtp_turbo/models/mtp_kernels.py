"""Triton kernels that only the MTP head's fused draft step uses (mtp_step.py).

Owns: `mtp_inputs` (the embedding row gather and both input norms, side by side for the one fc
GEMV), `attn_cells` (one query row over an explicit list of cells: the drafter's sink + window +
chain) and `gelu_gate` (the gating of a packed gate|up GEMV's output). Ignores: the kernels the
head's block shares with the main model (fused_kernels.py), buffers and launch order.

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
    def attn_cells(Q, KC, VC, CELLS, OUT, M, scale, H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr,
                   QR: tl.constexpr, BS: tl.constexpr, PREC: tl.constexpr):
        """Program g: the H/HKV query heads of KV group g of one row Q [H, DH] against the cells
        CELLS[:M] (int64, -1 = padding) of KC/VC [capacity, HKV, DH]; softmax over the valid
        cells, chunk by chunk (online), into OUT [H, DH]. P is rounded to the cache dtype for the
        P.V dot and the row sum is taken over the rounded P, as attn_partial does."""
        g = tl.program_id(0)
        REP: tl.constexpr = H // HKV
        rq = tl.arange(0, QR)
        q_ok = rq < REP
        qh = g * REP + rq
        rd = tl.arange(0, DH)
        q = tl.load(Q + qh[:, None] * DH + rd[None, :], mask=q_ok[:, None], other=0.0)
        m_i = tl.full([QR], float("-inf"), tl.float32)
        l_i = tl.zeros([QR], dtype=tl.float32)
        acc = tl.zeros([QR, DH], dtype=tl.float32)
        for s0 in range(0, M, BS):
            rs = s0 + tl.arange(0, BS)
            c = tl.load(CELLS + rs, mask=rs < M, other=-1)
            ok = c >= 0
            off = (tl.where(ok, c, 0) * HKV + g)[:, None] * DH + rd[None, :]
            k = tl.load(KC + off, mask=ok[:, None], other=0.0)
            sc = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [QR, BS]
            sc = tl.where(ok[None, :], sc, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(sc, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.where(ok[None, :], tl.exp(sc - m_safe[:, None]), 0.0).to(KC.dtype.element_ty)
            v = tl.load(VC + off, mask=ok[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PREC)
            l_i = l_i * alpha + tl.sum(p.to(tl.float32), axis=1)
            m_i = m_new
        out = acc / l_i[:, None]
        tl.store(OUT + qh[:, None] * DH + rd[None, :], out.to(OUT.dtype.element_ty), mask=q_ok[:, None])

    @triton.jit
    def gelu_gate(GU, Y, F, BLOCK: tl.constexpr):
        """Program (m, b): Y[m, j] = gelu_tanh(g) * u for g = GU[m, j], u = GU[m, F + j] (a packed
        gate|up GEMV's fp32 output), with linear's GATED rounding points (activation dtype = Y's)."""
        ACT: tl.constexpr = Y.dtype.element_ty
        m = tl.program_id(0)
        rj = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = rj < F
        g = tl.load(GU + m * 2 * F + rj, mask=ok, other=0.0).to(ACT).to(tl.float32)
        u = tl.load(GU + m * 2 * F + F + rj, mask=ok, other=0.0).to(ACT).to(tl.float32)
        gl = 0.5 * g * (1.0 + fk.tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
        tl.store(Y + m * F + rj, (gl.to(ACT).to(tl.float32) * u).to(ACT), mask=ok)

