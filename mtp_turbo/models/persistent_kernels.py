"""One persistent Triton kernel for every layer of a few-row forward (FusedTiles.persistent).

Owns: `decode_layers`, which runs each layer's six stages (qkv GEMV with the q/k norm + RoPE tail,
attention partials over key chunks, their merge, o GEMV with the norm tail, gate|up GEMV, down GEMV
with the next norm's tail) with one grid of resident programs that hand work on through arrival
counters instead of kernel boundaries, and its counter / prefetch helpers. Ignores: the arithmetic
(fused_kernels.py's *_tile functions: the same code on the same tiles, so a row's bits equal the
kernel-per-stage forward's), buffers and the launch (fused.py).

Why: a 1-row step of the 270M model was 112 dependent kernels of 1-5 MB each, bound by each
launch's ramp and its first DRAM round trip rather than by bytes (bench/RESULTS.md, session 16).
Here a program with nothing to do in a stage goes straight on to its item of the next stage,
issues that item's weight lines as L2 prefetches, and only then waits for the stage it reads.
Stage items go to the programs after the previous stage's, round the grid, so the programs that
wait first are the idle ones.

Deadlock freedom needs every program resident at once: fused.py launches at most one program an
SM on CUDA, and one program under Triton's CPU interpreter (which runs programs one by one).
"""

from __future__ import annotations

from . import fused_kernels as fk

triton = fk.triton
if triton is not None:
    import triton.language as tl

    @triton.jit
    def _arrive(CNT):
        # one item done: the barrier puts every thread's stores before the release
        tl.debug_barrier()
        tl.atomic_add(CNT, 1, sem="release", scope="gpu")

    @triton.jit
    def _wait(CNT, target, BACKOFF: tl.constexpr):
        # until CNT counts target arrivals, then an acquire so their stores are visible to every
        # thread of the program (the barrier after it). BACKOFF > 0: that many ns of nanosleep
        # between polls (fewer loads at the counter's L2 line while others arrive there)
        while tl.load(CNT, volatile=True) < target:
            if BACKOFF > 0:
                tl.inline_asm_elementwise("nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r", [target * 0 + BACKOFF],
                                          dtype=tl.int32, is_pure=False, pack=1)
        tl.atomic_add(CNT, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()

    @triton.jit
    def _first(pid, base, P):
        # this program's first item of a stage whose items start at program base % P
        return (pid - base % P + P) % P

    @triton.jit
    def _prefetch(W, row0, N, K, R: tl.constexpr, KL: tl.constexpr, WL: tl.constexpr, PF: tl.constexpr):
        # rows row0.. (R of them, < N) of W [N, K] into L2: one prefetch a 128-byte line (WL
        # elements), KL lines a row; PF False (the CPU interpreter has no PTX) does nothing
        if PF:
            rr = row0 + tl.arange(0, R)
            rk = tl.arange(0, KL) * WL
            ok = (rr < N)[:, None] & (rk < K)[None, :]
            off = tl.where(ok, rr[:, None] * K + rk[None, :], 0)
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [W + off],
                                      dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def _norm_stage(pid, it, P, X, W, Y, M, D, K, eps, TC, RES, WPOST, WPRE, HOUT, XN, WAIT, N_WAIT, ARR, NT,
                    MP: tl.constexpr, KP: tl.constexpr, KPD: tl.constexpr, RT: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, PREC: tl.constexpr, ST: tl.constexpr, KL: tl.constexpr, WL: tl.constexpr,
                    PF: tl.constexpr, BACKOFF: tl.constexpr):
        # an o / down stage: the NT column tiles of Y [M, D] = X [M, K] @ W.T from this program's
        # first item `it`, after the N_WAIT arrivals at WAIT; the last tile's tail (linear_norm_tile)
        # adds the normed Y to RES into HOUT and norms that into XN
        if it < NT:
            _prefetch(W, it * BN, D, K, BN, KL, WL, PF)
            _wait(WAIT, N_WAIT, BACKOFF)
            for j in range(it, NT, P):
                fk.linear_norm_tile(X, W, Y, M, D, K, eps, TC, RES, WPOST, WPRE, HOUT, XN, j, 0, NT, MP, KP, KPD, RT,
                                    BN, BK, PREC, True, ST, 2)
                _arrive(ARR)

    @triton.jit(do_not_specialize=["M", "window", "SG", "SL", "CAP"])
    def decode_layers(XN, QKV, Q, ATT, O, GU, DN, RA, RB, HID,
                      WQKV, WO, WGU, WDN, QN, KN, NPA, NFF, NPF, NNEXT,
                      KC, VC, POS, COSG, SING, COSL, SINL, OP, MX, LS, TCNT, TSTR, TKS, SCNT, EXIT,
                      M, eps, scale, window, SG, SL, CAP,
                      NL: tl.constexpr, D: tl.constexpr, F: tl.constexpr, H: tl.constexpr,
                      HKV: tl.constexpr, DH: tl.constexpr, PATTERN: tl.constexpr, MP: tl.constexpr,
                      RT: tl.constexpr, QR: tl.constexpr, BS: tl.constexpr, CT: tl.constexpr,
                      DS: tl.constexpr, KPD: tl.constexpr, KPH: tl.constexpr, KPF: tl.constexpr,
                      BN_Q: tl.constexpr, BK_Q: tl.constexpr, ST_Q: tl.constexpr,
                      BN_O: tl.constexpr, BK_O: tl.constexpr, ST_O: tl.constexpr,
                      BN_G: tl.constexpr, BK_G: tl.constexpr, ST_G: tl.constexpr,
                      BN_D: tl.constexpr, BK_D: tl.constexpr, ST_D: tl.constexpr,
                      PREC: tl.constexpr, PF: tl.constexpr, WL: tl.constexpr, SCP: tl.constexpr,
                      CS: tl.constexpr, BACKOFF: tl.constexpr):
        """Layers 0..NL-1 of M (<= QR / (H / HKV) and <= MP) rows, as fused.py's tails path
        launches them: XN [M, D] holds layer 0's normed input; on return HID [M, D] the last
        residual and XN its final norm. Weights stacked per layer (WQKV [NL, (H + 2 HKV) DH, D],
        WO [NL, D, H DH], WGU [NL, 2F, D], WDN [NL, D, F]; QN/KN [NL, DH], NPA/NFF/NPF [NL, D],
        NNEXT [NL, D]: layer i + 1's input norm, the final norm last); KC/VC [NL, CAP, HKV, DH].
        Layer i is global when (i + 1) % PATTERN == 0 (COSG/SING, SG key chunks), else sliding
        (COSL/SINL, `window`, SL chunks). TCNT: the tails' counters (layer stride TSTR, kind
        stride TKS), SCNT [NL * 6 * CS] the stages' arrivals (one a CS-int32 line: a counter's polls do
        not queue at the line another one's arrivals go to), EXIT [1]: zero before and after."""
        P = tl.num_programs(0)
        pid = tl.program_id(0)
        NQKV: tl.constexpr = (H + 2 * HKV) * DH
        HD: tl.constexpr = H * DH
        REP: tl.constexpr = H // HKV
        NA: tl.constexpr = (NQKV + BN_Q - 1) // BN_Q
        NO: tl.constexpr = (D + BN_O - 1) // BN_O
        NG: tl.constexpr = (F + BN_G - 1) // BN_G
        ND: tl.constexpr = (D + BN_D - 1) // BN_D
        KL_Q: tl.constexpr = (KPD + WL - 1) // WL
        KL_O: tl.constexpr = (KPH + WL - 1) // WL
        KL_D: tl.constexpr = (KPF + WL - 1) // WL
        NC = tl.minimum(M, QR // REP) * REP * DS * HKV  # merge items: (row, head, slice) x group
        base = 0
        for i in range(NL):
            li = tl.cast(i, tl.int64)
            kc = KC + li * CAP * HKV * DH
            vc = VC + li * CAP * HKV * DH
            wqkv = WQKV + li * NQKV * D
            wo = WO + li * D * HD
            wgu = WGU + li * 2 * F * D
            wdn = WDN + li * D * F
            tc = TCNT + li * TSTR
            sc = SCNT + i * 6 * CS
            if (i + 1) % PATTERN == 0:
                cos = COSG
                sin = SING
                win = window * 0
                S = SG
            else:
                cos = COSL
                sin = SINL
                win = window
                S = SL
            if i == NL - 1:
                hout = HID
            else:
                hout = RA
            # qkv GEMV, the last tile of each head norms + ropes it and writes K/V
            it = _first(pid, base, P)
            if it < NA:
                _prefetch(wqkv, it * BN_Q, NQKV, D, BN_Q, KL_Q, WL, PF)
                if i > 0:
                    _wait(sc - 6 * CS + 5 * CS, ND, BACKOFF)
                for j in range(it, NA, P):
                    fk.linear_rope_tile(XN, wqkv, QKV, M, NQKV, D, eps, tc + 2 * TKS, POS, QN + i * DH,
                                        KN + i * DH, cos, sin, Q, kc, vc, j, 0, H, HKV, DH, MP, KPD, RT,
                                        BN_Q, BK_Q, PREC, True, ST_Q)
                    _arrive(sc)
            base += NA
            # attention partials over the key chunks any row reads
            c0, p_last = fk.first_chunk(POS, M, win, BS)
            nb = tl.cast((p_last // BS - c0 + 1) * HKV, tl.int32)
            it = _first(pid, base, P)
            if it < nb:
                _wait(sc, NA, BACKOFF)
                for j in range(it, nb, P):
                    fk.attn_partial_tile(Q, kc, vc, POS, OP, MX, LS, M, win, scale, j // HKV, j % HKV, 0, S, HKV,
                                         H, HKV, DH, QR, BS, PREC, True)
                    _arrive(sc + CS)
            base += nb
            # their merge
            it = _first(pid, base, P)
            if it < NC:
                _wait(sc + CS, nb, BACKOFF)
                for j in range(it, NC, P):
                    fk.attn_combine_tile(OP, MX, LS, POS, ATT, M, win, S, j // HKV, j % HKV, 0, HKV, H, HKV, DH, QR,
                                         BS, CT, DS, True)
                    _arrive(sc + 2 * CS)
            base += NC
            # o GEMV; the last tile adds the normed output to the residual (RA -> RB) and norms it
            _norm_stage(pid, _first(pid, base, P), P, ATT, wo, O, M, D, HD, eps, tc, RA, NPA + i * D, NFF + i * D, RB,
                        XN, sc + 2 * CS, NC, sc + 3 * CS, NO, MP, KPH, KPD, RT, BN_O, BK_O, PREC, ST_O, KL_O, WL, PF,
                        BACKOFF)
            base += NO
            # gate|up GEMV with the GELU gating
            it = _first(pid, base, P)
            if it < NG:
                _prefetch(wgu, it * BN_G, F, D, BN_G, KL_Q, WL, PF)
                _prefetch(wgu + F * D, it * BN_G, F, D, BN_G, KL_Q, WL, PF)
                _wait(sc + 3 * CS, NO, BACKOFF)
                for j in range(it, NG, P):
                    fk.gemv_tile(XN, XN, XN, XN, XN, XN, wgu, GU, M, F, D, eps, j, 0, 0, True, MP, KPD, BN_G, BK_G,
                                 PREC, True, ST_G)
                    _arrive(sc + 4 * CS)
            base += NG
            # down GEMV; the last tile adds it to the residual (RB -> RA, or HID after the last
            # layer) and norms that for the next layer (or the head)
            _norm_stage(pid, _first(pid, base, P), P, GU, wdn, DN, M, D, F, eps, tc + TKS, RB, NPF + i * D,
                        NNEXT + i * D, hout, XN, sc + 4 * CS, NG, sc + 5 * CS, ND, MP, KPF, KPD, RT, BN_D, BK_D, PREC,
                        ST_D, KL_D, WL, PF, BACKOFF)
            base += ND
        # every program is past its last wait once the last one gets here: the counters go back to zero
        if fk.last_arrival(EXIT, P):
            r = tl.arange(0, SCP)
            tl.store(SCNT + r * CS, 0, mask=r < NL * 6)
