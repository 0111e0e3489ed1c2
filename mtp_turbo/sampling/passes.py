"""The full-vocabulary passes of the fused sampler (kernels.py has the shared helpers, the compact
program and the count table; fused.py the plan and the algorithm).

Owns: `full_pass` and the stage / parameter / resolution helpers it alone uses. Ignores: which
passes a configuration needs (fused.make_plan).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernels import (  # noqa: F401  (jit callees and constants resolve in this module's globals)
    ADD,
    FINAL,
    PART_W,
    MAX,
    MIN,
    MINP,
    NSLOT,
    PEN,
    RADIX,
    RUNTIME_INTS,
    SELECT,
    SLOTS,
    STATS,
    TEMP,
    TIES,
    TOPK,
    TOPP,
    _counts,
    _key,
    _pen,
    _read_values,
    _row_u,
)
from .topk import _bound, _select, _skey, _top1

# ----------------------------------------------------------------------------- full-vocabulary stages

@triton.jit
def _stage(v, valid, c, CODE: tl.constexpr, m, thr, lim, REP, FREQ, PRES, T, MIN_P,
           HAS_REP: tl.constexpr, HAS_FP: tl.constexpr):
    """One stage on a chunk of the vocabulary (token order); masked tokens become -inf.
    m: the stage's max (min-p); thr: its threshold key (top-p, top-k); lim: how many tokens tied
    at a top-k threshold this chunk may keep, counted from its first (room - ties before it)."""
    if CODE == PEN:
        v = _pen(v, c, REP, FREQ, PRES, HAS_REP, HAS_FP)
    elif CODE == TEMP:
        v = tl.math.div_rn(v, T)
    elif CODE == MINP:
        v = tl.where(tl.exp(v - m) >= MIN_P, v, float("-inf"))
    elif CODE == TOPP:
        v = tl.where(_key(v) >= thr, v, float("-inf"))
    elif CODE == TOPK:
        u = _key(v)
        tied = valid & (u == thr)
        rank = tl.associative_scan(tied.to(tl.int32), 0, ADD)
        v = tl.where((u > thr) | (tied & (rank <= lim)), v, float("-inf"))
    return v


@triton.jit
def _values(raw, valid, c, UPTO: tl.constexpr, S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
            S3: tl.constexpr, S4: tl.constexpr, m0, t0, l0, m1, t1, l1, m2, t2, l2, m3, t3, l3,
            m4, t4, l4, REP, FREQ, PRES, T, MIN_P, HAS_REP: tl.constexpr, HAS_FP: tl.constexpr):
    """The chunk's values at stage position UPTO: stages 0..UPTO-1 applied."""
    v = raw
    if UPTO > 0:
        v = _stage(v, valid, c, S0, m0, t0, l0, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    if UPTO > 1:
        v = _stage(v, valid, c, S1, m1, t1, l1, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    if UPTO > 2:
        v = _stage(v, valid, c, S2, m2, t2, l2, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    if UPTO > 3:
        v = _stage(v, valid, c, S3, m3, t3, l3, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    if UPTO > 4:
        v = _stage(v, valid, c, S4, m4, t4, l4, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    return v


@triton.jit
def _params(STATE, PART, r, chunk, NPASS, NB, K, POSN: tl.constexpr, CODE: tl.constexpr,
            TQ: tl.constexpr, NBP: tl.constexpr, PREV_KIND: tl.constexpr, PREV_AT: tl.constexpr,
            fm, fP):
    """(m, thr, lim) of the stage at position POSN, from the row's state, or fresh (fm, fP) when
    the previous pass resolved them in this program."""
    m = tl.zeros([], tl.float32)
    thr = tl.zeros([], tl.int64)
    lim = tl.zeros([], tl.int64)
    st = STATE + r * NSLOT + POSN * SLOTS
    if CODE == MINP:
        if PREV_KIND == STATS and PREV_AT == POSN:
            m = fm
        else:
            m = tl.load(st).to(tl.float32)
    elif CODE == TOPP:
        if PREV_KIND == RADIX and PREV_AT == POSN:
            thr = fP
        else:
            thr = tl.load(st + 16).to(tl.int64)
    elif CODE == TOPK:
        thr = tl.load(st + 16).to(tl.int64)
        above = tl.load(st + 17).to(tl.int64)
        ci = tl.arange(0, NBP)
        ties = tl.load(PART + ((r * NPASS + TQ) * NBP + ci) * PART_W, mask=ci < chunk, other=0.0)
        lim = K - above - tl.reduce(ties, 0, ADD).to(tl.int64)
    return m, thr, lim


@triton.jit
def _resolve_stats(PART, r, q, NPASS, NB, NBP: tl.constexpr):
    """Row max m and per-chunk (max, exp mass relative to m) of STATS pass q."""
    ci = tl.arange(0, NBP)
    base = PART + ((r * NPASS + q) * NBP + ci) * PART_W
    cm = tl.load(base, mask=ci < NB, other=float("-inf"))
    cs = tl.load(base + 1, mask=ci < NB, other=0.0)
    m = tl.reduce(cm, 0, MAX)
    w = tl.where(cm > float("-inf"), cs * tl.exp(cm - m), 0.0)
    return m, cm, w


@triton.jit
def _resolve_radix(PART, STATE, r, q, NPASS, NB, PD, K, top_p, AT: tl.constexpr, CODE: tl.constexpr,
                   NBP: tl.constexpr):
    """Digit PD of the threshold search of stage AT (top-k: counts, target K; top-p: masses,
    target top_p * S) from RADIX pass q: the largest digit whose bucket keeps the quantity at or
    above the current one >= target. Top-p chunks histogram exp(l - their own max): rescaled here
    by exp(chunk max - row max); at digit 0 the bucket is the whole row, so S is the sum.
    Returns (prefix, above, per-chunk histograms [NBP, 16] and masses above the bucket [NBP]
    (rescaled), chunk maxima [NBP], row max, S)."""
    ci = tl.arange(0, NBP)
    j = tl.arange(0, 16)
    base = PART + ((r * NPASS + q) * NBP + ci) * PART_W
    hc = tl.load(base[:, None] + j[None, :], mask=(ci < NB)[:, None], other=0.0)
    ac = tl.load(base + 17, mask=ci < NB, other=0.0)
    cm = tl.full([NBP], float("-inf"), tl.float64)
    m = tl.zeros([], tl.float64)
    if CODE == TOPP:
        cm = tl.load(base + 16, mask=ci < NB, other=float("-inf"))
        m = tl.reduce(cm, 0, MAX)
        f = tl.where(cm > float("-inf"), tl.exp(cm - m), 0.0)
        hc = hc * f[:, None]
        ac = ac * f
    h = tl.reduce(hc, 0, ADD)  # [16]
    st = STATE + r * NSLOT + AT * SLOTS
    p0 = tl.load(st + 2 * PD, mask=PD > 0, other=0.0)  # prefix / above after digit PD - 1
    a0 = tl.load(st + 1 + 2 * PD, mask=PD > 0, other=0.0)
    S = tl.zeros([], tl.float64)
    if CODE == TOPK:
        target = K.to(tl.float64)
    else:
        S = tl.where(PD == 0, tl.reduce(h, 0, ADD), tl.load(st + 1, mask=PD > 0, other=0.0))
        target = top_p * S
    suf = tl.reduce(tl.where(j[None, :] >= j[:, None], h[None, :], 0.0), 1, ADD)  # suf[i] = sum_{>= i} h
    d = tl.reduce(tl.where(a0 + suf >= target, j, 0), 0, MAX)
    above = a0 + tl.reduce(tl.where(j > d, h, 0.0), 0, ADD)
    return p0.to(tl.int64) * 16 + d, above, hc, ac, cm, m, S


@triton.jit(do_not_specialize=RUNTIME_INTS)
def full_pass(L, L_STRIDE, TOK, TOK_ROW, POS, CNT, STATE, PART, CK, CI, SM, U, OUT, FL,
              V, NB, NPASS, ME, PQ, DIGIT, PD, LAST_N, PRM,
              S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr, S4: tl.constexpr,
              TQ0: tl.constexpr, TQ1: tl.constexpr, TQ2: tl.constexpr, TQ3: tl.constexpr, TQ4: tl.constexpr,
              KIND: tl.constexpr, AT: tl.constexpr, AT_CODE: tl.constexpr,
              PREV_KIND: tl.constexpr, PREV_AT: tl.constexpr, PREV_CODE: tl.constexpr,
              NEED_C: tl.constexpr, COUNT_MODE: tl.constexpr, WS: tl.constexpr,
              END_FROM_POS: tl.constexpr, U_FROM_POS: tl.constexpr, DEBUG: tl.constexpr,
              HAS_REP: tl.constexpr, HAS_FP: tl.constexpr,
              B: tl.constexpr, NBP: tl.constexpr, KP: tl.constexpr, M: tl.constexpr, TOP1: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    K, REP, FREQ, PRES, T, MIN_P, top_p, KA, KB = _read_values(PRM)
    first = tl.program_id(1) == 0
    # ---- resolve the previous pass (every program alike; chunk 0 keeps it in the state)
    fm = tl.zeros([], tl.float32)
    fm64 = tl.zeros([], tl.float64)
    fS = tl.zeros([], tl.float64)
    fP = tl.zeros([], tl.int64)
    fA = tl.zeros([], tl.float64)
    if PREV_KIND == STATS:
        fm64, cm, w = _resolve_stats(PART, r, PQ, NPASS, NB, NBP)
        fS = tl.reduce(w, 0, ADD)
        fm = fm64.to(tl.float32)
        if KIND != FINAL:
            st = STATE + r * NSLOT + PREV_AT * SLOTS
            tl.store(st, fm64, mask=first)
            tl.store(st + 1, fS, mask=first)
    if PREV_KIND == RADIX:
        fP, fA, hc, ac, cm, fm64, fS = _resolve_radix(PART, STATE, r, PQ, NPASS, NB, PD, K, top_p, PREV_AT,
                                                      PREV_CODE, NBP)
        st = STATE + r * NSLOT + PREV_AT * SLOTS
        tl.store(st + 2 + 2 * PD, fP.to(tl.float64), mask=first)  # PD: the digit it searched
        tl.store(st + 3 + 2 * PD, fA, mask=first)
        if PREV_CODE == TOPP:
            tl.store(st + 1, fS, mask=first & (PD == 0))
        if KIND == FINAL:  # top-p was the last stage: each chunk's kept mass, from its histograms
            w = ac + tl.reduce(tl.where(tl.arange(0, 16)[None, :] >= (fP & 15), hc, 0.0), 1, ADD)
    # ---- which chunk
    u = tl.zeros([], tl.float64)
    target = tl.zeros([], tl.float64)
    excl = tl.zeros([], tl.float64)
    scale = tl.zeros([], tl.float64)
    cmc = tl.zeros([], tl.float64)
    if KIND == FINAL:  # the chunk whose cumulative mass crosses u * total (token order)
        ci = tl.arange(0, NBP)
        incl = tl.associative_scan(w, 0, ADD)
        total = tl.reduce(tl.where(ci == NB - 1, incl, 0.0), 0, ADD)
        u = _row_u(U, POS, r, KA, KB, U_FROM_POS)
        target = u * total
        chunk = tl.reduce(tl.where((incl > target) & (ci < NB), ci, NBP), 0, MIN)
        chunk = tl.minimum(chunk, tl.reduce(tl.where((w > 0) & (ci < NB), ci, -1), 0, MAX))
        excl = tl.reduce(tl.where(ci == chunk - 1, incl, 0.0), 0, ADD)
        cmc = tl.reduce(tl.where(ci == chunk, cm, 0.0), 0, ADD)
        scale = tl.exp(cmc - fm64)
    else:
        chunk = tl.program_id(1)
    # ---- parameters of the stages before AT
    m0, t0, l0 = fm, fP, fP  # (placeholders where a stage has no parameters)
    m1, t1, l1 = fm, fP, fP
    m2, t2, l2 = fm, fP, fP
    m3, t3, l3 = fm, fP, fP
    m4, t4, l4 = fm, fP, fP
    if AT > 0 and S0 >= MINP:
        m0, t0, l0 = _params(STATE, PART, r, chunk, NPASS, NB, K, 0, S0, TQ0, NBP, PREV_KIND, PREV_AT, fm, fP)
    if AT > 1 and S1 >= MINP:
        m1, t1, l1 = _params(STATE, PART, r, chunk, NPASS, NB, K, 1, S1, TQ1, NBP, PREV_KIND, PREV_AT, fm, fP)
    if AT > 2 and S2 >= MINP:
        m2, t2, l2 = _params(STATE, PART, r, chunk, NPASS, NB, K, 2, S2, TQ2, NBP, PREV_KIND, PREV_AT, fm, fP)
    if AT > 3 and S3 >= MINP:
        m3, t3, l3 = _params(STATE, PART, r, chunk, NPASS, NB, K, 3, S3, TQ3, NBP, PREV_KIND, PREV_AT, fm, fP)
    if AT > 4 and S4 >= MINP:
        m4, t4, l4 = _params(STATE, PART, r, chunk, NPASS, NB, K, 4, S4, TQ4, NBP, PREV_KIND, PREV_AT, fm, fP)
    # ---- the chunk's values at stage AT
    ids = chunk.to(tl.int64) * B + tl.arange(0, B)
    valid = ids < V
    raw = tl.load(L + r * L_STRIDE + ids, mask=valid, other=float("-inf"))
    c = tl.zeros([B], tl.int32)
    if NEED_C:
        # a whole window unrolled where a thread holds <= 4 ids (B <= 512: the top-1 chunks), else 16 tokens
        c = _counts(ids, valid, CNT, TOK, POS, TOK_ROW, r, V, LAST_N, COUNT_MODE, WS, END_FROM_POS,
                    WS if B <= 512 else min(WS, 16))
    v = _values(raw, valid, c, AT, S0, S1, S2, S3, S4, m0, t0, l0, m1, t1, l1, m2, t2, l2, m3, t3, l3,
                m4, t4, l4, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    out = PART + ((r * NPASS + ME) * NBP + chunk) * PART_W
    if KIND == STATS:
        mx = tl.reduce(tl.where(valid, v, float("-inf")), 0, MAX)
        mx0 = tl.where(mx > float("-inf"), mx, 0.0).to(tl.float64)  # a chunk may be all -inf
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - mx0), 0.0)
        tl.store(out, mx.to(tl.float64))
        tl.store(out + 1, tl.reduce(e, 0, ADD))
        if DEBUG:
            tl.store(FL + r * V + ids, v, mask=valid)
    elif KIND == RADIX:
        key = tl.where(valid, _key(v), 0)
        if AT_CODE == TOPK:
            wt = tl.where(valid, 1.0, 0.0).to(tl.float64)
        else:  # top-p: float64 mass relative to the chunk's max (kept beside the histogram)
            mx = tl.reduce(tl.where(valid, v, float("-inf")), 0, MAX)
            tl.store(out + 16, mx.to(tl.float64))
            mx0 = tl.where(mx > float("-inf"), mx, 0.0).to(tl.float64)
            wt = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - mx0), 0.0)
        shift = 28 - 4 * DIGIT
        if PREV_KIND == RADIX and PREV_AT == AT:  # digits > 0: inside the bucket chosen so far
            pre = fP
        else:
            pre = tl.zeros([], tl.int64)
        inb = (key >> (shift + 4)) == pre
        tl.store(out + 17, tl.reduce(tl.where((key >> (shift + 4)) > pre, wt, 0.0), 0, ADD))  # above the bucket
        dig = (key >> shift) & 15
        j = tl.arange(0, 16)
        hist = tl.zeros([16], tl.float64)
        for i in tl.static_range(16):
            hist = tl.where(j == i, tl.reduce(tl.where(inb & (dig == i), wt, 0.0), 0, ADD), hist)
        tl.store(out + j, hist)
    elif KIND == TIES:
        key = _key(v)
        tl.store(out, tl.reduce((valid & (key == fP)).to(tl.float64), 0, ADD))
    elif KIND == SELECT:  # the chunk's top-K by (value desc, id asc), written in token order
        key = tl.reshape(tl.where(valid, _skey(v), -2147483648), [KP, B // KP])  # rows: KP runs (KP >= K)
        i2 = tl.reshape(ids.to(tl.int32), [KP, B // KP])
        dst = r * NB * KP + chunk * KP
        s = tl.arange(0, KP)
        if TOP1:
            t, i1 = _top1(key, i2)
            tl.store(CK + dst + s, tl.where(s == 0, t, -2147483648))
            tl.store(CI + dst + s, tl.where(s == 0, i1, -1))
        else:  # SM: this chunk's [M] scratch
            lo, n = _bound(key, K, KP, M)
            _select(key, i2, K, lo, n, SM + (r * NB + chunk) * M, CK + dst, CI + dst, M, False)
            tl.store(CK + dst + s, tl.full([KP], -2147483648, tl.int32), mask=s >= K)
            tl.store(CI + dst + s, tl.full([KP], -1, tl.int32), mask=s >= K)
    elif KIND == FINAL:
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - cmc), 0.0)
        cdf = excl + scale * tl.associative_scan(e, 0, ADD)
        jr = tl.arange(0, B)
        pick = tl.reduce(tl.where(cdf > target, jr, B), 0, MIN)
        pick = tl.minimum(pick, tl.reduce(tl.where(e > 0, jr, -1), 0, MAX))
        tl.store(OUT + r, chunk.to(tl.int64) * B + pick)
