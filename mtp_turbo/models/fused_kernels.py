"""Triton kernels of the fused few-row decode step (decode 1 row, verify k+1 rows).

Owns: the kernels of the fused few-row steps and nothing else: `linear` (GEMV for up to 16 rows,
a bias or the MLP's gating (GeGLU or SwiGLU) in its epilogue), `residual_norm` (the residual add,
with Gemma's sandwich norm of the sub-block's output or without it, and the next RMSNorm),
`qk_rope_write` (q/k RMSNorm where the family has it, RoPE, K/V written into the cache),
`linear_norm` / `linear_rope` (a GEMV whose last program per row block then runs residual_norm's /
qk_rope_write's work on its output: FusedTiles.tails), `attn_partial` (one chunk of keys per
program, flash-decoding style) and `attn_combine`; each kernel's body as a `*_tile` function with
explicit program ids. The family's traits are compile-time switches (POST: sandwich norms; QKN:
q/k norms; SILU: SwiGLU; HAS_BIAS), so each family's kernels compile to its own straight-line code.
Ignores: buffers, shapes and launch order (fused.py, mtp_step.py), the MTP head's own kernels
(mtp_kernels.py).

Batch invariance: every kernel computes each row from that row's inputs alone, in an order that
does not depend on how many rows are present (rows are padded to a fixed 16 / 32 and the row
count is never specialised), so a k+1-row verify gives bit-identical logits to k+1 one-row
decodes. That is what makes the speculative output equal the plain output on the GPU too.

Launch order: a kernel launched with programmatic dependent launch (FusedTiles.pdl) waits for the
kernel before it in pdl_enter, before it reads anything a forward writes; only constant weights
(gemv_tile's W0) are read ahead of that.

Rounding follows the torch forward (block.py): norms in fp32 rounded to the activation dtype,
residual adds rounded to it, matmuls accumulated in fp32 (a bias added there before the rounding).
"""

from __future__ import annotations

import torch

from .triton_env import gdc_launch_dependents, gdc_wait, triton

if triton is not None:
    import triton.language as tl


def pdl_supported(device) -> bool:
    """True when the kernels here can be launched with programmatic dependent launch on `device`
    (FusedTiles.pdl): CUDA of compute capability 9.0 or more, and a Triton with grid dependency control."""
    return (triton is not None and gdc_wait is not None and device.type == "cuda"
            and torch.cuda.get_device_capability(device)[0] >= 9)


if triton is not None:
    from .weight_tiles import seg_tile

    @triton.jit
    def tanh(z):
        # tl has no tanh in every backend (the interpreter included): 1 - 2 / (e^{2z} + 1) saturates
        # correctly at both ends in fp32
        return 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)

    @triton.jit
    def pdl_enter(PDL: tl.constexpr):
        # Launched with programmatic dependent launch a kernel may start before the one before it
        # ends; nothing it reads or writes before this is written by that kernel. PDL 1: wait for it
        # (its writes and its producers' visible), then let the next kernel launch, so that one is
        # resident and waiting while this one runs; 2: let the next launch first, then wait.
        if PDL == 1:
            gdc_wait()
            gdc_launch_dependents()
        elif PDL == 2:
            gdc_launch_dependents()
            gdc_wait()

    @triton.jit
    def ld(P, mask, other, CG: tl.constexpr):
        """tl.load; CG: bypassing L1 (.cg), for what other programs of the same launch stored (L1
        is not coherent between SMs)."""
        if CG:
            return tl.load(P, mask=mask, other=other, cache_modifier=".cg")
        else:
            return tl.load(P, mask=mask, other=other)

    @triton.jit
    def _norm_rows(H, DELTA, WPOST, WPRE, HOUT, XOUT, rm, m_mask, h_mask, K, eps,
                   PRO: tl.constexpr, KP: tl.constexpr, ACT: tl.constexpr, STORE_X: tl.constexpr,
                   POST: tl.constexpr = True):
        # Rows rm ([R], m_mask) of the residual norm over K columns: PRO 1: x = rmsnorm(H) * WPRE;
        # PRO 2: h = H + rmsnorm(DELTA) * WPOST (POST: Gemma's sandwich norm) or h = H + DELTA
        # (pre-norm families), stored into HOUT where h_mask, x = rmsnorm(h) * WPRE; STORE_X: x
        # stored into XOUT. -> (rd, rstd) [R] fp32: the inverse RMS of DELTA (POST) and of the norm
        # input. Loads bypass L1 (.cg): a tail reads what other programs just stored.
        rka = tl.arange(0, KP)
        ka_mask = rka < K
        msk = m_mask[:, None] & ka_mask[None, :]
        off = rm[:, None] * K + rka[None, :]
        rd = tl.zeros(rm.shape, dtype=tl.float32)
        # Every load first: they are independent of one another, and a row sum below is a barrier
        # that no load is moved across, so loads after it would be memory round trips of their own
        # in a tail's chain (one here instead of three).
        if PRO == 1:
            hf = tl.load(H + off, mask=msk, other=0.0, cache_modifier=".cg").to(tl.float32)
        else:
            d = tl.load(DELTA + off, mask=msk, other=0.0, cache_modifier=".cg").to(tl.float32)
            hin = tl.load(H + off, mask=msk, other=0.0, cache_modifier=".cg").to(tl.float32)
            if POST:
                wpost = tl.load(WPOST + rka, mask=ka_mask, other=0.0).to(tl.float32)
        if STORE_X:
            wpre = tl.load(WPRE + rka, mask=ka_mask, other=0.0).to(tl.float32)
        if PRO == 2:
            if POST:
                rd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / K + eps)
                dn = (d * rd[:, None] * wpost[None, :]).to(ACT).to(tl.float32)
            else:
                dn = d
            h = (hin + dn).to(ACT)
            tl.store(HOUT + off, h, mask=msk & h_mask[:, None])
            hf = h.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, axis=1) / K + eps)
        if STORE_X:
            tl.store(XOUT + off, (hf * rstd[:, None] * wpre[None, :]).to(ACT), mask=msk)
        return rd, rstd

    @triton.jit
    def _x_rows(X, rm, m_mask, rk, k_mask, K, ACT: tl.constexpr, CG: tl.constexpr):
        # The GEMV input for columns rk of rows rm, [MP, BK] in ACT (CG: see ld). A function of its
        # own: written inline, Triton 3.6 gave the 512-wide tile 255 registers and 424 bytes of
        # spills where this takes 216 and none (bench/offline_compile.py, sm_90)
        msk = m_mask[:, None] & k_mask[None, :]
        off = rm[:, None] * K + rk[None, :]
        return ld(X + off, msk, 0.0, CG).to(ACT)

    @triton.jit
    def silu(z):
        # z * sigmoid(z) as torch computes it in fp32: z / (1 + e^-z)
        return z / (1.0 + tl.exp(-z))

    @triton.jit
    def gemv_tile(X, WA, WB, SPLIT, Y, BIAS, M, N, K, pid, b,
                  GATED: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  PREC: tl.constexpr, CG: tl.constexpr, ST: tl.constexpr, PDL: tl.constexpr = 0,
                  W0: tl.constexpr = False, HAS_BIAS: tl.constexpr = False, SILU: tl.constexpr = False,
                  FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """linear's body (its docstring): the tile of output columns pid of row block b. CG: X read
        past L1 (ld); ST: the K loop's pipelining depth (None: the launch's num_stages); PDL: see
        pdl_enter, which this runs before its first input is read; W0: the first BK columns of the
        weight tile loaded before that (constant: the launch's DRAM round trip overlaps the kernel
        before it), their product taken before the loop (the same products in the same order).
        WA, WB, SPLIT, FA, FB: the weight's segments (weight_tiles.seg_tile)."""
        ACT: tl.constexpr = X.dtype.element_ty
        NT = 2 * N if GATED else N  # the weight's rows: gate rows n, up rows N + n
        row0 = pid * BN
        if W0:
            w0 = seg_tile(WA, WB, FA, FB, SPLIT, NT, row0, 0, K, BN, BK, ACT)  # [BN, BK]
            wu0 = w0
            if GATED:
                wu0 = seg_tile(WA, WB, FA, FB, SPLIT, NT, row0 + N, 0, K, BN, BK, ACT)
        pdl_enter(PDL)
        rm = b * MP + tl.arange(0, MP)
        m_mask = rm < M
        rn = row0 + tl.arange(0, BN)
        n_mask = rn < N
        acc = tl.zeros([MP, BN], dtype=tl.float32)
        acc_u = tl.zeros([MP, BN], dtype=tl.float32)
        K0: tl.constexpr = BK if W0 else 0
        if W0:  # the loop's first step, on the weights loaded above
            rk0 = tl.arange(0, BK)
            x = _x_rows(X, rm, m_mask, rk0, rk0 < K, K, ACT, CG)
            acc = tl.dot(x, tl.trans(w0), acc, input_precision=PREC)
            if GATED:
                acc_u = tl.dot(x, tl.trans(wu0), acc_u, input_precision=PREC)
        for k0 in tl.range(K0, K, BK, num_stages=ST):
            rk = k0 + tl.arange(0, BK)
            x = _x_rows(X, rm, m_mask, rk, rk < K, K, ACT, CG)
            w = seg_tile(WA, WB, FA, FB, SPLIT, NT, row0, k0, K, BN, BK, ACT)  # [BN, BK]
            acc = tl.dot(x, tl.trans(w), acc, input_precision=PREC)
            if GATED:
                wu = seg_tile(WA, WB, FA, FB, SPLIT, NT, row0 + N, k0, K, BN, BK, ACT)
                acc_u = tl.dot(x, tl.trans(wu), acc_u, input_precision=PREC)
        if HAS_BIAS:
            acc += tl.load(BIAS + rn, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        if GATED:
            g = acc.to(ACT).to(tl.float32)
            u = acc_u.to(ACT).to(tl.float32)
            if SILU:
                gl = silu(g)
            else:
                gl = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
            acc = gl.to(ACT).to(tl.float32) * u
        y_msk = m_mask[:, None] & n_mask[None, :]
        tl.store(Y + rm[:, None] * N + rn[None, :], acc.to(Y.dtype.element_ty), mask=y_msk)

    @triton.jit(do_not_specialize=["M"])
    def linear(X, WA, WB, SPLIT, Y, BIAS, M, N, K,
               GATED: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
               PDL: tl.constexpr = 0, W0: tl.constexpr = False, HAS_BIAS: tl.constexpr = False,
               SILU: tl.constexpr = False, FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """Y[M, N] = X[M, K] @ W[:N].T (+ BIAS[N] with HAS_BIAS); GATED: act(X @ W[:N].T) * (X @
        W[N:2N].T), act GELU (tanh) or SiLU (SILU), each product rounded to the activation dtype
        first. The weight W [N or 2N, K]: segments WA (rows < SPLIT) and WB in formats FA / FB
        (weight_tiles.seg_tile; FA 0: a dense matrix in the activation dtype, X's); Y [M, N].
        Program (n, b): output columns n * BN.. of rows b * MP.. (MP >= 16 rows computed, those < M
        stored): a row's arithmetic is the same whatever b and M.
        PREC: the dot's input precision ("ieee" for fp32 weights, as tf32 would lose bits).
        PDL, W0: see gemv_tile (FusedTiles.pdl, pdl_w0)."""
        gemv_tile(X, WA, WB, SPLIT, Y, BIAS, M, N, K, tl.program_id(0), tl.program_id(1), GATED, MP, BN, BK, PREC,
                  False, None, PDL, W0, HAS_BIAS, SILU, FA, FB)

    @triton.jit
    def last_arrival(CNT, n):
        # True in the last of the n programs that share the int32 counter CNT to get here (it resets
        # it for the next launch). The barrier puts every thread's stores before the release; the
        # acq_rel atomic makes the others' stores visible to the last one (as a grid sync does).
        tl.debug_barrier()
        last = tl.atomic_add(CNT, 1, sem="acq_rel", scope="gpu") == n - 1
        if last:
            tl.store(CNT, 0)
        return last

    @triton.jit(do_not_specialize=["M"])
    def linear_norm(X, WA, WB, SPLIT, Y, M, N, K, eps, CNT, RES, WPOST, WPRE, HOUT, XOUT,
                    MP: tl.constexpr, NP: tl.constexpr, RT: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, TP: tl.constexpr,
                    PDL: tl.constexpr = 0, W0: tl.constexpr = False, POST: tl.constexpr = True,
                    FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """Y = X @ W.T (linear), then the norm after it in the program of each row block that
        finishes last (FusedTiles.tails). TP 2, the residual norm: HOUT = RES + rmsnorm(Y) * WPOST
        (POST: Gemma's sandwich norm; else RES + Y), XOUT = rmsnorm(HOUT) * WPRE; TP 1 (the MTP
        head's fc, whose output is the residual itself): XOUT = rmsnorm(Y) * WPRE (RES, WPOST, HOUT
        unused). Over the block's rows, RT rows a pass (residual_norm's arithmetic on the same [RT,
        NP] tiles, so a row's bits do not depend on which kernel or block ran it). CNT: int32 [row
        blocks], zero before the launch and after it. Y/RES/HOUT/XOUT [M, N]. PDL, W0: see gemv_tile."""
        linear_norm_tile(X, WA, WB, SPLIT, Y, M, N, K, eps, CNT, RES, WPOST, WPRE, HOUT, XOUT, tl.program_id(0),
                         tl.program_id(1), tl.num_programs(0), MP, NP, RT, BN, BK, PREC, False, None, TP,
                         PDL, W0, POST, FA, FB)

    @triton.jit
    def linear_norm_tile(X, WA, WB, SPLIT, Y, M, N, K, eps, CNT, RES, WPOST, WPRE, HOUT, XOUT, pid, b, n_tiles,
                         MP: tl.constexpr, NP: tl.constexpr, RT: tl.constexpr,
                         BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, CG: tl.constexpr,
                         ST: tl.constexpr, TP: tl.constexpr, PDL: tl.constexpr = 0, W0: tl.constexpr = False,
                         POST: tl.constexpr = True, FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """linear_norm's body: column tile pid (of n_tiles) of row block b, then the tail (TP)."""
        ACT: tl.constexpr = X.dtype.element_ty
        gemv_tile(X, WA, WB, SPLIT, Y, X, M, N, K, pid, b, False, MP, BN, BK, PREC, CG, ST, PDL, W0, FA=FA, FB=FB)
        if last_arrival(CNT + b, n_tiles):
            for r0 in range(b * MP, tl.minimum(b * MP + MP, M), RT):
                rm = r0 + tl.arange(0, RT)
                m_mask = rm < M
                if TP == 1:
                    _norm_rows(Y, Y, WPRE, WPRE, XOUT, XOUT, rm, m_mask, m_mask, N, eps, 1, NP, ACT, True)
                else:
                    _norm_rows(RES, Y, WPOST, WPRE, HOUT, XOUT, rm, m_mask, m_mask, N, eps, 2, NP, ACT, True, POST)

    @triton.jit(do_not_specialize=["M"])
    def linear_rope(X, WA, WB, SPLIT, Y, BIAS, M, N, K, eps, CNT, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC,
                    H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr, MP: tl.constexpr,
                    RT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
                    PDL: tl.constexpr = 0, W0: tl.constexpr = False, HAS_BIAS: tl.constexpr = False,
                    QKN: tl.constexpr = True, FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """The qkv GEMV (linear, + BIAS with HAS_BIAS; Y [M, (H + 2 HKV) DH]), then qk_rope_write's
        work for each head in the program that finishes that head's DH / BN column tiles of a row
        block last (FusedTiles.tails): query heads (normed with QKN) + roped into QOUT, K heads
        (normed) + roped and V heads copied into the cache cells at CELLS (= POS but for a draft
        tree's rows: qk_rope_write), RT rows a pass (_rope_rows:
        the same arithmetic as qk_rope_write). CNT: int32 [row blocks, H + 2 HKV], zero before and
        after. PDL, W0: see gemv_tile."""
        linear_rope_tile(X, WA, WB, SPLIT, Y, BIAS, M, N, K, eps, CNT, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC,
                         tl.program_id(0), tl.program_id(1), H, HKV, DH, MP, RT, BN, BK, PREC, False, None, PDL, W0,
                         HAS_BIAS, QKN, FA, FB)

    @triton.jit
    def linear_rope_tile(X, WA, WB, SPLIT, Y, BIAS, M, N, K, eps, CNT, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC, pid, b,
                         H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr, MP: tl.constexpr,
                         RT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         PREC: tl.constexpr, CG: tl.constexpr, ST: tl.constexpr, PDL: tl.constexpr = 0,
                         W0: tl.constexpr = False, HAS_BIAS: tl.constexpr = False, QKN: tl.constexpr = True,
                         FA: tl.constexpr = 0, FB: tl.constexpr = -1):
        """linear_rope's body: column tile pid of row block b, then the tail of its head."""
        ACT: tl.constexpr = KC.dtype.element_ty
        gemv_tile(X, WA, WB, SPLIT, Y, BIAS, M, N, K, pid, b, False, MP, BN, BK, PREC, CG, ST, PDL, W0, HAS_BIAS,
                  FA=FA, FB=FB)
        j = pid * BN // DH
        if last_arrival(CNT + b * (H + 2 * HKV) + j, DH // BN):
            for r0 in range(b * MP, tl.minimum(b * MP + MP, M), RT):
                _rope_rows(Y, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC, r0 + tl.arange(0, RT), M, j, eps,
                           H, HKV, DH, ACT, QKN)

    @triton.jit(do_not_specialize=["M"])
    def gated_act(Y2, GU, N, BN: tl.constexpr, SILU: tl.constexpr = False, PDL: tl.constexpr = 0):
        """Row program_id(1), columns program_id(0) * BN..: GU = act(g) * u of Y2's gate half g = Y2[:, :N]
        and up half u = Y2[:, N:] (float32 GEMV outputs, the frag GEMV's), with linear's GATED
        arithmetic: g, u rounded to the activation dtype, act(g) rounded, times u."""
        pdl_enter(PDL)
        ACT: tl.constexpr = GU.dtype.element_ty
        m = tl.program_id(1)
        rn = tl.program_id(0) * BN + tl.arange(0, BN)
        msk = rn < N
        g = tl.load(Y2 + m * 2 * N + rn, mask=msk, other=0.0).to(ACT).to(tl.float32)
        u = tl.load(Y2 + m * 2 * N + N + rn, mask=msk, other=0.0).to(ACT).to(tl.float32)
        if SILU:
            a = silu(g)
        else:
            a = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
        tl.store(GU + m * N + rn, (a.to(ACT).to(tl.float32) * u).to(ACT), mask=msk)

    @triton.jit(do_not_specialize=["M"])
    def residual_norm(H, DELTA, WPOST, WPRE, HOUT, XOUT, M, K, eps, PRO: tl.constexpr, KP: tl.constexpr,
                      RT: tl.constexpr, PDL: tl.constexpr = 0, POST: tl.constexpr = True):
        """Program b: rows b * RT.. (< M) of the norm before a GEMV: PRO 1: XOUT = rmsnorm(H) *
        WPRE; PRO 2: HOUT = H + rmsnorm(DELTA) * WPOST (POST) or H + DELTA, then XOUT =
        rmsnorm(HOUT) * WPRE. The same [RT, KP] tiles as linear_norm's tail. PDL: see pdl_enter."""
        pdl_enter(PDL)
        ACT: tl.constexpr = XOUT.dtype.element_ty
        rm = tl.program_id(0) * RT + tl.arange(0, RT)
        m_mask = rm < M
        _norm_rows(H, DELTA, WPOST, WPRE, HOUT, XOUT, rm, m_mask, m_mask, K, eps, PRO, KP, ACT, True, POST)

    @triton.jit
    def _norm_rope(lo, hi, wlo, whi, cos, sin, eps, DH: tl.constexpr, ACT: tl.constexpr, QKN: tl.constexpr):
        # RMSNorm over heads of DH values (halves lo, hi [..., DH/2] fp32; the last axis; QKN: the
        # family has q/k norms), rounded to ACT, then rotate-half RoPE (cos, sin broadcast to lo's shape).
        if QKN:
            ss = tl.sum(lo * lo, axis=-1, keep_dims=True) + tl.sum(hi * hi, axis=-1, keep_dims=True)
            rstd = 1.0 / tl.sqrt(ss / DH + eps)
            nlo = (lo * rstd * wlo).to(ACT).to(tl.float32)
            nhi = (hi * rstd * whi).to(ACT).to(tl.float32)
        else:
            nlo = lo
            nhi = hi
        return (nlo * cos - nhi * sin).to(ACT), (nhi * cos + nlo * sin).to(ACT)

    @triton.jit
    def _rope_rows(QKV, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC, rm, M, j, eps,
                   H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr, ACT: tl.constexpr, QKN: tl.constexpr):
        # Head j of rows rm [R] (< M) of QKV [M, (H + 2 HKV) DH]: j < H a query head into QOUT
        # [M, H, DH] (normed with QKN, roped at POS); j < H + HKV a K head (normed, roped) into KC's
        # cells at CELLS (POS itself but for a draft tree's rows); else a V head copied into VC's.
        # Loads bypass L1 (.cg): linear_rope's tail reads what other programs just stored.
        ok = rm < M
        rh = tl.arange(0, DH // 2)
        p = tl.load(POS + rm, mask=ok, other=0)
        cell = tl.load(CELLS + rm, mask=ok, other=0)
        src = QKV + (rm * (H + 2 * HKV) + j)[:, None] * DH + rh[None, :]
        lo = tl.load(src, mask=ok[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
        hi = tl.load(src + DH // 2, mask=ok[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
        if j < H + HKV:
            cos = tl.load(COS + p[:, None] * DH + rh[None, :], mask=ok[:, None], other=0.0)
            sin = tl.load(SIN + p[:, None] * DH + rh[None, :], mask=ok[:, None], other=0.0)
            if j < H:
                wn = QN
                out = QOUT + (rm * H + j)[:, None] * DH + rh[None, :]
            else:
                wn = KN
                out = KC + (cell * HKV + j - H)[:, None] * DH + rh[None, :]
            wlo = tl.zeros([1, DH // 2], dtype=tl.float32)
            whi = wlo
            if QKN:
                wlo = tl.load(wn + rh)[None, :].to(tl.float32)
                whi = tl.load(wn + DH // 2 + rh)[None, :].to(tl.float32)
            olo, ohi = _norm_rope(lo, hi, wlo, whi, cos, sin, eps, DH, ACT, QKN)
            tl.store(out, olo, mask=ok[:, None])
            tl.store(out + DH // 2, ohi, mask=ok[:, None])
        else:
            out = VC + (cell * HKV + j - H - HKV)[:, None] * DH + rh[None, :]
            tl.store(out, lo.to(ACT), mask=ok[:, None])
            tl.store(out + DH // 2, hi.to(ACT), mask=ok[:, None])

    @triton.jit(do_not_specialize=["M"])
    def qk_rope_write(QKV, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC, M, eps,
                      H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr, RT: tl.constexpr,
                      PDL: tl.constexpr = 0, QKN: tl.constexpr = True):
        """Program (b, j) of a (row tiles, H + 2 HKV) grid: rows b * RT.. (< M) of QKV [M, (H + 2 HKV)
        DH] -> for j < H query head j into QOUT [M, H, DH] (normed, roped); else K head j - H
        (normed, roped) or V head j - H - HKV into cache cells KC/VC [capacity, HKV, DH] at CELLS
        (= POS, but for a draft tree's rows: node n's cell, its position its depth's).
        One head a program, so the heads' loads go out together (4 us a launch one head after
        another: bench/RESULTS.md); the same [RT]-row tiles as linear_rope's tail. COS/SIN [n_pos,
        DH] fp32 tables (both halves equal: rotate-half RoPE). PDL: see pdl_enter."""
        pdl_enter(PDL)
        rm = tl.program_id(0) * RT + tl.arange(0, RT)
        _rope_rows(QKV, POS, CELLS, QN, KN, COS, SIN, QOUT, KC, VC, rm, M, tl.program_id(1), eps, H, HKV, DH,
                   KC.dtype.element_ty, QKN)

    @triton.jit
    def first_chunk(POS, M, window, BS: tl.constexpr):
        # First key chunk any row reads, and the last position: the chunks [c0, p_last // BS].
        p_first = tl.load(POS)
        p_last = tl.load(POS + M - 1)
        lo = tl.where(window > 0, tl.maximum(p_first - window + 1, 0), 0)
        return lo // BS, p_last

    @triton.jit(do_not_specialize=["M"])
    def attn_partial(Q, KC, VC, POS, OP, MX, LS, M, window, scale,
                     H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr,
                     QR: tl.constexpr, BS: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr = 0,
                     ANC=None, AW: tl.constexpr = 1, TREE: tl.constexpr = False):
        """Program (s, g, b): key chunk c0 + s (BS cells) against the query rows of KV group g of
        row block b (rows b * QR/REP.., at most QR/REP of the M; c0 from the block's first row).
        Q [M, H, DH]; KC/VC [capacity, HKV, DH]; window 0 = global layer. Writes unnormalised
        O [QR, DH], row max and row sum into OP/MX/LS slot ((b * S + s) * G + g).
        P is rounded to the cache dtype for the P.V dot (tensor cores, as flash attention does) and
        the row sum is taken over the rounded P, so the weights stay normalised. PDL: see pdl_enter.
        TREE: a draft tree's rows (POS: the root's position + each node's depth), one a block; row m
        reads keys as a one-row step at its position does, those past the root's position from its
        ancestors' cells: key p0 + j from cell p0 + ANC[m, j] (ANC [M, AW] int64: node m's ancestor at
        depth j). The same tiles as that one-row step, so the same bits."""
        pdl_enter(PDL)
        attn_partial_tile(Q, KC, VC, POS, OP, MX, LS, M, window, scale, tl.program_id(0), tl.program_id(1),
                          tl.program_id(2), tl.num_programs(0), tl.num_programs(1), H, HKV, DH, QR, BS, PREC, False,
                          ANC, AW, TREE)

    @triton.jit
    def attn_partial_tile(Q, KC, VC, POS, OP, MX, LS, M, window, scale, s, g, b, S, G,
                          H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr,
                          QR: tl.constexpr, BS: tl.constexpr, PREC: tl.constexpr, CG: tl.constexpr,
                          ANC=None, AW: tl.constexpr = 1, TREE: tl.constexpr = False):
        """attn_partial's body: chunk s of S, KV group g of G, row block b (CG: see ld; ANC, AW,
        TREE: see attn_partial)."""
        REP: tl.constexpr = H // HKV
        RB: tl.constexpr = 1 if TREE else QR // REP  # rows a block
        p0 = 0
        if TREE:
            p0 = tl.load(POS)  # the root's position
        POS += b * RB
        Q += b * RB * H * DH
        M = tl.minimum(M - b * RB, RB)
        c0, p_last = first_chunk(POS, M, window, BS)
        start = (c0 + s) * BS
        if start <= p_last:
            rq = tl.arange(0, QR)  # query row r = m * REP + i: row m of the block, head g * REP + i
            q_ok = rq < M * REP
            qm = rq // REP
            qh = g * REP + rq % REP
            qpos = tl.load(POS + qm, mask=q_ok, other=0)
            rd = tl.arange(0, DH)
            q = ld(Q + (qm * H + qh)[:, None] * DH + rd[None, :], q_ok[:, None], 0.0, CG)
            rs = start + tl.arange(0, BS)
            k_ok = rs <= p_last
            cells = rs
            if TREE:  # keys past the root's position: this row's path (one row a block)
                up = k_ok & (rs >= p0)
                cells = tl.where(up, p0 + tl.load(ANC + b * AW + (rs - p0), mask=up, other=0), rs)
            kv_off = (cells * HKV + g)[:, None] * DH + rd[None, :]
            k = ld(KC + kv_off, k_ok[:, None], 0.0, CG)
            # V beside K: after the softmax's row max (a barrier) its load would wait a round trip more
            v = ld(VC + kv_off, k_ok[:, None], 0.0, CG)
            sc = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [QR, BS]
            ok = q_ok[:, None] & k_ok[None, :] & (rs[None, :] <= qpos[:, None])
            ok = ok & ((window == 0) | (qpos[:, None] - rs[None, :] < window))
            sc = tl.where(ok, sc, float("-inf"))
            mx = tl.max(sc, axis=1)
            mx_safe = tl.where(mx == float("-inf"), 0.0, mx)
            p = tl.where(ok, tl.exp(sc - mx_safe[:, None]), 0.0).to(KC.dtype.element_ty)
            o = tl.dot(p, v, input_precision=PREC)  # [QR, DH] fp32
            slot = (b * S + s) * G + g
            # only the block's rows: the padding rows would write 8x the bytes of a 1-row decode
            tl.store(OP + (slot * QR + rq)[:, None] * DH + rd[None, :], o, mask=q_ok[:, None])
            tl.store(MX + slot * QR + rq, mx, mask=q_ok)
            tl.store(LS + slot * QR + rq, tl.sum(p.to(tl.float32), axis=1), mask=q_ok)

    @triton.jit(do_not_specialize=["M"])
    def attn_combine(OP, MX, LS, POS, OUT, M, window, S,
                     H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr,
                     QR: tl.constexpr, BS: tl.constexpr, CT: tl.constexpr, DS: tl.constexpr,
                     PDL: tl.constexpr = 0, TREE: tl.constexpr = False):
        """Program (r * DS + d, g, b): merge query row r of group g of row block b (attn_partial's
        blocks) over the chunks into OUT [M, H, DH] (activation dtype), its d-th of DS slices of
        DH (the same weights in every slice: more programs for a deep context, each reading 1/DS of
        the partials). S: attn_partial's chunk programs.
        Chunks go CT at a time, in tiles aligned to absolute chunk index 0 (a block's first chunk
        c0 depends on its first row; the tiles do not): a chunk with no key for a row, or outside
        the block's range, adds exact zeros, so a row's sum has the same terms in the same tree
        whatever its block. CT chunks a load: at 7000 cells a global layer's 219 chunks are 14
        loads instead of 219 dependent ones (bench/RESULTS.md). PDL: see pdl_enter. TREE: one row a
        block (attn_partial's)."""
        pdl_enter(PDL)
        attn_combine_tile(OP, MX, LS, POS, OUT, M, window, S, tl.program_id(0), tl.program_id(1), tl.program_id(2),
                          tl.num_programs(1), H, HKV, DH, QR, BS, CT, DS, False, TREE)

    @triton.jit
    def attn_combine_tile(OP, MX, LS, POS, OUT, M, window, S, rd_id, g, b, G,
                          H: tl.constexpr, HKV: tl.constexpr, DH: tl.constexpr, QR: tl.constexpr,
                          BS: tl.constexpr, CT: tl.constexpr, DS: tl.constexpr, CG: tl.constexpr,
                          TREE: tl.constexpr = False):
        """attn_combine's body: (row, slice) rd_id = r * DS + d of group g (of G), row block b."""
        r = rd_id // DS
        d0 = (rd_id % DS) * (DH // DS)
        REP: tl.constexpr = H // HKV
        RB: tl.constexpr = 1 if TREE else QR // REP
        if b * RB + r // REP < M:  # a row of the block (the grid covers whole blocks)
            POS += b * RB
            OUT += b * RB * H * DH
            M = tl.minimum(M - b * RB, RB)
            c0, p_last = first_chunk(POS, M, window, BS)
            c1 = p_last // BS
            base = b * S * G
            t0 = (c0 // CT) * CT
            rt = tl.arange(0, CT)
            rd = d0 + tl.arange(0, DH // DS)
            # The first tile's partials load beside its maxima: a context of one tile (<= CT
            # chunks) waits one memory round trip here, not two (its max is a barrier).
            j = t0 + rt
            ok = (j >= c0) & (j <= c1)
            slot = base + (j - c0) * G + g
            mx0 = ld(MX + slot * QR + r, ok, float("-inf"), CG)
            op0 = ld(OP + (slot * QR + r)[:, None] * DH + rd[None, :], ok[:, None], 0.0, CG)
            ls0 = ld(LS + slot * QR + r, ok, 0.0, CG)
            m_all = tl.maximum(float("-inf"), tl.max(mx0, axis=0))
            for t in range(t0 + CT, c1 + 1, CT):
                j = t + rt
                ok = (j >= c0) & (j <= c1)
                slot = base + (j - c0) * G + g
                m_all = tl.maximum(m_all, tl.max(ld(MX + slot * QR + r, ok, float("-inf"), CG), axis=0))
            w0 = tl.exp(mx0 - m_all)
            # zero plus the first tile, as the loop before 43deda1 summed it (0 + -0 is +0: same bits)
            acc = tl.zeros([DH // DS], dtype=tl.float32)
            acc += tl.sum(w0[:, None] * op0, axis=0)
            l_all = 0.0
            l_all += tl.sum(w0 * ls0, axis=0)
            for t in range(t0 + CT, c1 + 1, CT):
                j = t + rt
                ok = (j >= c0) & (j <= c1)
                slot = base + (j - c0) * G + g
                # a chunk with no key for r (or none of the block's): exp(-inf) = 0
                w = tl.exp(ld(MX + slot * QR + r, ok, float("-inf"), CG) - m_all)
                op = ld(OP + (slot * QR + r)[:, None] * DH + rd[None, :], ok[:, None], 0.0, CG)
                acc += tl.sum(w[:, None] * op, axis=0)
                l_all += tl.sum(w * ld(LS + slot * QR + r, ok, 0.0, CG), axis=0)
            m = r // REP
            h = g * REP + r % REP
            tl.store(OUT + (m * H + h) * DH + rd, (acc / l_all).to(OUT.dtype.element_ty))
