"""Triton kernels of the fused sampler (fused.py plans and launches them; the algorithm and its
exactness argument are in fused.py's docstring).

Owns: the kernel bodies. Ignores: which kernels a configuration needs (fused.py), the torch chain
(chain.py), what the tokens are for.

Three kernels and one helper kernel:
- `full_pass`: one pass over a row's vocabulary in chunks of B tokens, grid (rows, chunks), of kind
  STATS (per chunk max and sum of exp), RADIX (per chunk 16-bin histogram of one 4-bit digit of
  the order key, of counts (top-k) or float64 masses (top-p)), TIES (per chunk count of tokens tied
  at a top-k threshold), SELECT (per chunk exact top-k candidates, in token order) or FINAL (grid
  (rows,): the inverse-CDF draw over the whole vocabulary). Every program first resolves the
  previous pass's partial results itself (all programs the same way; chunk 0 stores them in the
  row's state), so no pass needs a separate reduction launch.
- `compact`: one program per row holding at most KP tokens in registers (the top-k candidates, or
  the whole row when V <= KP): the global top-k selection, every later stage, and the draw.
- `count_table`: window counts into a [rows, V] int32 table (long penalty windows only).

Bitwise batch invariance: a program reads only its own row (pid 0 = row); nothing depends on the
number of rows, which is passed nowhere but in the grid.

Every kernel is launched with enable_fp_fusion=False: the penalties and temperature then round
exactly as torch's separate CPU ops do (no fused multiply-add), divisions are IEEE (div_rn).
"""

from __future__ import annotations

import triton
import triton.language as tl

# stage codes (fused.py: STAGE_CODE) and pass kinds (fused.py: passes)
PEN = tl.constexpr(1)
TEMP = tl.constexpr(2)
MINP = tl.constexpr(3)
TOPP = tl.constexpr(4)
TOPK = tl.constexpr(5)
STATS = tl.constexpr(1)
RADIX = tl.constexpr(2)
TIES = tl.constexpr(3)
SELECT = tl.constexpr(4)
FINAL = tl.constexpr(5)
# per-row state: 32 float64 slots per stage position: +0 max, +1 sum of exp, +2+2d / +3+2d the
# radix prefix / mass-or-count above it after digit d (d = 0..7; +16 / +17 = the final threshold)
NSLOT = tl.constexpr(192)
SLOTS = tl.constexpr(32)
# count modes
SCAN = tl.constexpr(1)
# Reductions and scans call tl.reduce / tl.associative_scan with Triton's own combine functions:
# the same code as tl.sum / tl.max / tl.min / tl.cumsum (which are @jit wrappers of them), without
# a nested jit call, which costs ~3 ms each in Triton's interpreter (the CPU tests).
# Runtime ints Triton must not turn into constants when they equal 1 (they feed .to(), masks and
# conditions); compact takes the last five.
_RUNTIME_INTS = ["ME", "PQ", "DIGIT", "PD", "NB", "LAST_N", "K", "TOPP_BITS", "KA", "KB"]
_ADD = tl.standard._sum_combine
_MAX = tl.standard._elementwise_max
_MIN = tl.standard._elementwise_min
TABLE = tl.constexpr(2)


# ----------------------------------------------------------------------------- elementwise helpers

@triton.jit
def _key(v):
    """float32 -> int64 order key in [0, 2^32): a < b <=> key(a) < key(b); -0.0 and +0.0 share one
    key (they tie, as in torch); -inf -> 0x7FFFFF; 0 is below every float (padding)."""
    v = tl.where(v == 0.0, 0.0, v)
    b = v.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF).to(tl.int64) + 2147483648


@triton.jit
def _unkey(u):
    s = (u - 2147483648).to(tl.int32)
    return tl.where(s >= 0, s, s ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _mix(z):
    z = z ^ (z >> 30)
    z = z * 0xBF58476D1CE4E5B9
    z = z ^ (z >> 27)
    z = z * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _uniform(p, KA, KB):
    """rng.uniforms for one int64 position p, keys (a, b) as signed int64 bit patterns."""
    a = KA.to(tl.int64).to(tl.uint64, bitcast=True)
    b = KB.to(tl.int64).to(tl.uint64, bitcast=True)
    z = _mix(p.to(tl.int64).to(tl.uint64, bitcast=True) * 0x9E3779B97F4A7C15 + a)
    z = _mix(z ^ b)
    return (z >> 11).to(tl.float64) * 1.1102230246251565e-16  # 2^-53, exact in fp32 too


@triton.jit
def _pen(v, c, REP, FREQ, PRES, HAS_REP: tl.constexpr, HAS_FP: tl.constexpr):
    """chain.apply_penalties, op for op in float32 (c = window count, int)."""
    seen = c > 0
    if HAS_REP:
        v = tl.where(seen, tl.where(v > 0, tl.math.div_rn(v, REP), v * REP), v)
    if HAS_FP:
        v = v - (c.to(tl.float32) * FREQ + seen.to(tl.float32) * PRES)
    return v


@triton.jit
def _window(POS, TOK_ROW, r, LAST_N, END_FROM_POS: tl.constexpr):
    """(base, lo, hi): the row's window is TOK[base + lo : base + hi], entries < 0 ignored."""
    if END_FROM_POS:  # sample_tokens: one shared sequence, the row's history ends at pos[r]
        hi = tl.load(POS + r).to(tl.int64)
        base = r * 0
    else:  # sample_rows: row r's own window row of TOK_ROW entries
        hi = r * 0 + TOK_ROW
        base = r * TOK_ROW
    lo = tl.where(LAST_N < 0, 0, tl.maximum(hi - LAST_N, 0))
    return base, lo, hi


@triton.jit
def _row_u(U, POS, r, KA, KB, U_FROM_POS: tl.constexpr):
    if U_FROM_POS:
        return _uniform(tl.load(POS + r), KA, KB)
    else:
        return tl.load(U + r)


@triton.jit
def _scan_counts(ids, TOK, base, lo, hi, WS: tl.constexpr):
    """Window count of each id, by one pass over the <= WS window tokens, 4 at a time (no table;
    int32 compares: a [B, 4] tile stays small in registers)."""
    c = tl.zeros(ids.shape, tl.int32)
    i32 = ids.to(tl.int32)
    j = tl.arange(0, 4)
    for j0 in range(0, WS, 4):
        p = lo + j0 + j
        t = tl.load(TOK + base + p, mask=p < hi, other=-1).to(tl.int32)
        c += tl.reduce((i32[:, None] == t[None, :]).to(tl.int32), 1, _ADD)
    return c


@triton.jit
def _counts(ids, ok, CNT, TOK, POS, TOK_ROW, r, V, LAST_N, COUNT_MODE: tl.constexpr,
            WS: tl.constexpr, END_FROM_POS: tl.constexpr):
    if COUNT_MODE == TABLE:
        c = tl.load(CNT + r * V + ids, mask=ok, other=0)
    else:
        base, lo, hi = _window(POS, TOK_ROW, r, LAST_N, END_FROM_POS)
        c = _scan_counts(ids, TOK, base, lo, hi, WS)
    return c


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
        rank = tl.associative_scan(tied.to(tl.int32), 0, _ADD)
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
        ties = tl.load(PART + ((r * NPASS + TQ) * NBP + ci) * 16, mask=ci < chunk, other=0.0)
        lim = K - above - tl.reduce(ties, 0, _ADD).to(tl.int64)
    return m, thr, lim


@triton.jit
def _resolve_stats(PART, r, q, NPASS, NB, NBP: tl.constexpr):
    """Row max m and per-chunk (max, exp mass relative to m) of STATS pass q."""
    ci = tl.arange(0, NBP)
    base = PART + ((r * NPASS + q) * NBP + ci) * 16
    cm = tl.load(base, mask=ci < NB, other=float("-inf"))
    cs = tl.load(base + 1, mask=ci < NB, other=0.0)
    m = tl.reduce(cm, 0, _MAX)
    w = tl.where(cm > float("-inf"), cs * tl.exp(cm - m), 0.0)
    return m, cm, w


@triton.jit
def _resolve_radix(PART, STATE, r, q, NPASS, NB, PD, target, AT: tl.constexpr, NBP: tl.constexpr):
    """Digit PD of the threshold search of stage AT from RADIX pass q: the largest digit whose
    bucket keeps the quantity at or above the current one >= target. Returns (prefix, above)."""
    ci = tl.arange(0, NBP)
    j = tl.arange(0, 16)
    h = tl.load(PART + ((r * NPASS + q) * NBP + ci[:, None]) * 16 + j[None, :],
                mask=(ci < NB)[:, None], other=0.0)
    h = tl.reduce(h, 0, _ADD)  # [16]
    st = STATE + r * NSLOT + AT * SLOTS
    p0 = tl.load(st + 2 * PD, mask=PD > 0, other=0.0)  # prefix / above after digit PD - 1
    a0 = tl.load(st + 1 + 2 * PD, mask=PD > 0, other=0.0)
    suf = tl.reduce(tl.where(j[None, :] >= j[:, None], h[None, :], 0.0), 1, _ADD)  # suf[i] = sum_{>= i} h
    d = tl.reduce(tl.where(a0 + suf >= target, j, 0), 0, _MAX)
    above = a0 + tl.reduce(tl.where(j > d, h, 0.0), 0, _ADD)
    return p0.to(tl.int64) * 16 + d, above


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def full_pass(L, L_STRIDE, TOK, TOK_ROW, POS, CNT, STATE, PART, CK, CI, U, OUT, FL,
              V, NB, NPASS, ME, PQ, DIGIT, PD, LAST_N, K, REP, FREQ, PRES, T, MIN_P, TOPP_BITS, KA, KB,
              S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr, S4: tl.constexpr,
              TQ0: tl.constexpr, TQ1: tl.constexpr, TQ2: tl.constexpr, TQ3: tl.constexpr, TQ4: tl.constexpr,
              KIND: tl.constexpr, AT: tl.constexpr, AT_CODE: tl.constexpr,
              PREV_KIND: tl.constexpr, PREV_AT: tl.constexpr, PREV_CODE: tl.constexpr,
              NEED_C: tl.constexpr, COUNT_MODE: tl.constexpr, WS: tl.constexpr,
              END_FROM_POS: tl.constexpr, U_FROM_POS: tl.constexpr, DEBUG: tl.constexpr,
              HAS_REP: tl.constexpr, HAS_FP: tl.constexpr,
              B: tl.constexpr, NBP: tl.constexpr, KP: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    top_p = TOPP_BITS.to(tl.int64).to(tl.float64, bitcast=True)
    first = tl.program_id(1) == 0
    # ---- resolve the previous pass (every program alike; chunk 0 keeps it in the state)
    fm = tl.zeros([], tl.float32)
    fm64 = tl.zeros([], tl.float64)
    fS = tl.zeros([], tl.float64)
    fP = tl.zeros([], tl.int64)
    fA = tl.zeros([], tl.float64)
    if PREV_KIND == STATS:
        fm64, cm, w = _resolve_stats(PART, r, PQ, NPASS, NB, NBP)
        fS = tl.reduce(w, 0, _ADD)
        fm = fm64.to(tl.float32)
        if KIND != FINAL:
            st = STATE + r * NSLOT + PREV_AT * SLOTS
            tl.store(st, fm64, mask=first)
            tl.store(st + 1, fS, mask=first)
    if PREV_KIND == RADIX:
        if PREV_CODE == TOPK:
            target = K.to(tl.float64)
        else:
            target = top_p * tl.load(STATE + r * NSLOT + PREV_AT * SLOTS + 1)
        fP, fA = _resolve_radix(PART, STATE, r, PQ, NPASS, NB, PD, target, PREV_AT, NBP)
        st = STATE + r * NSLOT + PREV_AT * SLOTS
        tl.store(st + 2 + 2 * PD, fP.to(tl.float64), mask=first)  # PD: the digit it searched
        tl.store(st + 3 + 2 * PD, fA, mask=first)
    # ---- which chunk
    u = tl.zeros([], tl.float64)
    target = tl.zeros([], tl.float64)
    excl = tl.zeros([], tl.float64)
    scale = tl.zeros([], tl.float64)
    cmc = tl.zeros([], tl.float64)
    if KIND == FINAL:  # the chunk whose cumulative mass crosses u * total (token order)
        ci = tl.arange(0, NBP)
        incl = tl.associative_scan(w, 0, _ADD)
        total = tl.reduce(tl.where(ci == NB - 1, incl, 0.0), 0, _ADD)
        u = _row_u(U, POS, r, KA, KB, U_FROM_POS)
        target = u * total
        chunk = tl.reduce(tl.where((incl > target) & (ci < NB), ci, NBP), 0, _MIN)
        chunk = tl.minimum(chunk, tl.reduce(tl.where((w > 0) & (ci < NB), ci, -1), 0, _MAX))
        excl = tl.reduce(tl.where(ci == chunk - 1, incl, 0.0), 0, _ADD)
        cmc = tl.reduce(tl.where(ci == chunk, cm, 0.0), 0, _ADD)
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
        c = _counts(ids, valid, CNT, TOK, POS, TOK_ROW, r, V, LAST_N, COUNT_MODE, WS, END_FROM_POS)
    v = _values(raw, valid, c, AT, S0, S1, S2, S3, S4, m0, t0, l0, m1, t1, l1, m2, t2, l2, m3, t3, l3,
                m4, t4, l4, REP, FREQ, PRES, T, MIN_P, HAS_REP, HAS_FP)
    out = PART + ((r * NPASS + ME) * NBP + chunk) * 16
    if KIND == STATS:
        mx = tl.reduce(tl.where(valid, v, float("-inf")), 0, _MAX)
        mx0 = tl.where(mx > float("-inf"), mx, 0.0).to(tl.float64)  # a chunk may be all -inf
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - mx0), 0.0)
        tl.store(out, mx.to(tl.float64))
        tl.store(out + 1, tl.reduce(e, 0, _ADD))
        if DEBUG:
            tl.store(FL + r * V + ids, v, mask=valid)
    elif KIND == RADIX:
        key = tl.where(valid, _key(v), 0)
        if AT_CODE == TOPK:
            wt = tl.where(valid, 1.0, 0.0).to(tl.float64)
        else:  # top-p: float64 mass relative to the stage's max
            if PREV_KIND == STATS and PREV_AT == AT:
                m_at = fm64
            else:
                m_at = tl.load(STATE + r * NSLOT + AT * SLOTS)
            wt = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - m_at), 0.0)
        shift = 28 - 4 * DIGIT
        if PREV_KIND == RADIX and PREV_AT == AT:  # digits > 0: inside the bucket chosen so far
            pre = fP
        else:
            pre = tl.zeros([], tl.int64)
        inb = (key >> (shift + 4)) == pre
        dig = (key >> shift) & 15
        j = tl.arange(0, 16)
        hist = tl.zeros([16], tl.float64)
        for i in tl.static_range(16):
            hist = tl.where(j == i, tl.reduce(tl.where(inb & (dig == i), wt, 0.0), 0, _ADD), hist)
        tl.store(out + j, hist)
    elif KIND == TIES:
        key = _key(v)
        tl.store(out, tl.reduce((valid & (key == fP)).to(tl.float64), 0, _ADD))
    elif KIND == SELECT:  # the chunk's top-K by (value desc, id asc), written in token order
        key = tl.where(valid, _key(v), 0)
        t = _kth(key, K)
        above = tl.reduce((key > t).to(tl.int32), 0, _ADD)
        tied = key == t
        sel = (key > t) | (tied & (tl.associative_scan(tied.to(tl.int32), 0, _ADD) <= K - above))
        slot = tl.associative_scan(sel.to(tl.int32), 0, _ADD) - 1
        dst = r * NB * KP + chunk * KP
        tl.store(CK + dst + slot, (key - 2147483648).to(tl.int32), mask=sel)
        tl.store(CI + dst + slot, ids.to(tl.int32), mask=sel)
        s = tl.arange(0, KP)
        n = tl.reduce(sel.to(tl.int32), 0, _ADD)
        tl.store(CK + dst + s, tl.full([KP], -2147483648, tl.int32), mask=s >= n)
        tl.store(CI + dst + s, tl.full([KP], -1, tl.int32), mask=s >= n)
    elif KIND == FINAL:
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - cmc), 0.0)
        cdf = excl + scale * tl.associative_scan(e, 0, _ADD)
        jr = tl.arange(0, B)
        pick = tl.reduce(tl.where(cdf > target, jr, B), 0, _MIN)
        pick = tl.minimum(pick, tl.reduce(tl.where(e > 0, jr, -1), 0, _MAX))
        tl.store(OUT + r, chunk.to(tl.int64) * B + pick)


@triton.jit
def _kth(u, K):
    """The K-th largest of int64 keys u in [0, 2^32) (K >= 1; padding keys are 0): 32 bisection
    steps on the count of keys >= a candidate."""
    t = tl.zeros([], tl.int64)
    for b in tl.static_range(32):
        cand = t + (tl.full([], 1, tl.int64) << (31 - b))
        t = tl.where(tl.reduce((u >= cand).to(tl.int32), 0, _ADD) >= K, cand, t)
    return t


# ----------------------------------------------------------------------------- compact rows

@triton.jit
def _cstage(v, ids, kept, c, CODE: tl.constexpr, K, REP, FREQ, PRES, T, MIN_P, top_p,
            HAS_REP: tl.constexpr, HAS_FP: tl.constexpr):
    """One stage on <= KP tokens in registers (token order; dropped tokens -inf, kept False)."""
    if CODE == PEN:
        v = _pen(v, c, REP, FREQ, PRES, HAS_REP, HAS_FP)
    elif CODE == TEMP:
        v = tl.math.div_rn(v, T)
    elif CODE == MINP:
        m = tl.reduce(v, 0, _MAX)
        kept = kept & (tl.exp(v - m) >= MIN_P)
    elif CODE == TOPP:  # keep iff the mass of strictly larger tokens < top_p * total (float64)
        m = tl.reduce(v, 0, _MAX).to(tl.float64)
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - m), 0.0)
        above = tl.reduce(tl.where(v[None, :] > v[:, None], e[None, :], 0.0), 1, _ADD)
        kept = kept & (above < top_p * tl.reduce(e, 0, _ADD))
    elif CODE == TOPK:  # rank in (value desc, id asc) < K
        better = (v[None, :] > v[:, None]) | ((v[None, :] == v[:, None]) & (ids[None, :] < ids[:, None]))
        kept = kept & (tl.reduce(better.to(tl.int32), 1, _ADD) < K)
    v = tl.where(kept, v, float("-inf"))
    return v, kept


@triton.jit(do_not_specialize=_RUNTIME_INTS[5:])
def compact(L, L_STRIDE, TOK, TOK_ROW, POS, CNT, CK, CI, SCR, U, OUT, FL,
            V, NC, LAST_N, K, REP, FREQ, PRES, T, MIN_P, TOPP_BITS, KA, KB,
            S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr, S4: tl.constexpr,
            FIRST: tl.constexpr, FROM_CAND: tl.constexpr, GREEDY: tl.constexpr, NEED_C: tl.constexpr,
            COUNT_MODE: tl.constexpr, WS: tl.constexpr, WSP: tl.constexpr, END_FROM_POS: tl.constexpr,
            U_FROM_POS: tl.constexpr, DEBUG: tl.constexpr, HAS_REP: tl.constexpr, HAS_FP: tl.constexpr,
            NCP: tl.constexpr, KP: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    top_p = TOPP_BITS.to(tl.int64).to(tl.float64, bitcast=True)
    s = tl.arange(0, KP)
    if FROM_CAND:  # exact top-K of the chunks' candidates (token order), compacted through SCR
        ci = tl.arange(0, NCP)
        key = tl.load(CK + r * NC + ci, mask=ci < NC, other=-2147483648).to(tl.int64) + 2147483648
        cid = tl.load(CI + r * NC + ci, mask=ci < NC, other=-1)
        t = _kth(key, K)
        above = tl.reduce((key > t).to(tl.int32), 0, _ADD)
        tied = key == t
        sel = (key > t) | (tied & (tl.associative_scan(tied.to(tl.int32), 0, _ADD) <= K - above))
        slot = tl.associative_scan(sel.to(tl.int32), 0, _ADD) - 1
        tl.store(SCR + r * 2 * KP + slot, key, mask=sel)
        tl.store(SCR + r * 2 * KP + KP + slot, cid.to(tl.int64), mask=sel)
        tl.debug_barrier()
        valid = s < K
        kk = tl.load(SCR + r * 2 * KP + s, mask=valid, other=0, cache_modifier=".cg")
        ids = tl.load(SCR + r * 2 * KP + KP + s, mask=valid, other=0, cache_modifier=".cg")
        ids = tl.where(valid, ids, V + s)
        v = tl.where(valid, _unkey(kk), float("-inf"))
    else:  # the whole row (V <= KP)
        valid = s < V
        ids = s.to(tl.int64)
        v = tl.load(L + r * L_STRIDE + s, mask=valid, other=float("-inf"))
    kept = valid
    c = tl.zeros([KP], tl.int32)
    if NEED_C:
        if COUNT_MODE == TABLE:
            c = tl.load(CNT + r * V + ids, mask=valid, other=0)
        else:
            base, lo, hi = _window(POS, TOK_ROW, r, LAST_N, END_FROM_POS)
            jw = tl.arange(0, WSP)
            wt = tl.load(TOK + base + lo + jw, mask=(lo + jw < hi) & (jw < WS), other=-1)
            c = tl.reduce((ids[:, None] == wt[None, :]).to(tl.int32), 1, _ADD)
    if FIRST <= 0:
        v, kept = _cstage(v, ids, kept, c, S0, K, REP, FREQ, PRES, T, MIN_P, top_p, HAS_REP, HAS_FP)
    if FIRST <= 1:
        v, kept = _cstage(v, ids, kept, c, S1, K, REP, FREQ, PRES, T, MIN_P, top_p, HAS_REP, HAS_FP)
    if FIRST <= 2:
        v, kept = _cstage(v, ids, kept, c, S2, K, REP, FREQ, PRES, T, MIN_P, top_p, HAS_REP, HAS_FP)
    if FIRST <= 3:
        v, kept = _cstage(v, ids, kept, c, S3, K, REP, FREQ, PRES, T, MIN_P, top_p, HAS_REP, HAS_FP)
    if FIRST <= 4:
        v, kept = _cstage(v, ids, kept, c, S4, K, REP, FREQ, PRES, T, MIN_P, top_p, HAS_REP, HAS_FP)
    if DEBUG:
        tl.store(FL + r * V + ids, v, mask=valid)
    if GREEDY:  # the one token top-1 kept
        tok = tl.reduce(tl.where(kept, ids, V + KP), 0, _MIN)
    else:  # inverse CDF in token order, float64
        m = tl.reduce(v, 0, _MAX).to(tl.float64)
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - m), 0.0)
        cdf = tl.associative_scan(e, 0, _ADD)
        total = tl.reduce(tl.where(s == KP - 1, cdf, 0.0), 0, _ADD)
        target = _row_u(U, POS, r, KA, KB, U_FROM_POS) * total
        pick = tl.reduce(tl.where(cdf > target, s, KP), 0, _MIN)
        pick = tl.minimum(pick, tl.reduce(tl.where(e > 0, s, -1), 0, _MAX))
        tok = tl.reduce(tl.where(s == pick, ids, 0), 0, _ADD)
    tl.store(OUT + r, tok.to(tl.int64))


@triton.jit(do_not_specialize=["LAST_N"])
def count_table(TOK, TOK_ROW, POS, CNT, V, LAST_N, END_FROM_POS: tl.constexpr, BLK: tl.constexpr):
    """CNT[r, t] += 1 for every token t of row r's window (CNT zeroed by the caller)."""
    r = tl.program_id(0).to(tl.int64)
    base, lo, hi = _window(POS, TOK_ROW, r, LAST_N, END_FROM_POS)
    p = lo + tl.program_id(1).to(tl.int64) * BLK + tl.arange(0, BLK)
    t = tl.load(TOK + base + p, mask=p < hi, other=-1)
    ok = (p < hi) & (t >= 0) & (t < V)
    tl.atomic_add(CNT + r * V + t, tl.full([BLK], 1, tl.int32), mask=ok)
