"""Triton kernels of the fused sampler (fused.py plans and launches them; the algorithm and its
exactness argument are in fused.py's docstring).

Owns: the kernel bodies. Ignores: which kernels a configuration needs (fused.py), the torch chain
(chain.py), what the tokens are for.

Three kernels and one helper kernel (full_pass lives in passes.py):
- `full_pass`: one pass over a row's vocabulary in chunks of B tokens, grid (rows, chunks), of kind
  STATS (per chunk max and sum of exp), RADIX (per chunk 16-bin histogram of one 4-bit digit of
  the order key, of counts (top-k) or float64 masses (top-p)), TIES (per chunk count of tokens tied
  at a top-k threshold), SELECT (per chunk exact top-k candidates, in token order) or FINAL (grid
  (rows,): the inverse-CDF draw over the whole vocabulary). Every program first resolves the
  previous pass's partial results itself (all programs the same way; chunk 0 stores them in the
  row's state), so no pass needs a separate reduction launch.
- `compact`: one program per row holding at most KP tokens in registers (the top-k candidates, or
  the whole row when V <= KP): the global top-k selection (topk.py), every later stage, the draw.
- `count_table`: window counts into a [rows, V] int32 table (long penalty windows only).

Bitwise batch invariance: a program reads only its own row (pid 0 = row); nothing depends on the
number of rows, which is passed nowhere but in the grid.

Every kernel is launched with enable_fp_fusion=False: the penalties and temperature then round
exactly as torch's separate CPU ops do (no fused multiply-add), divisions are IEEE (div_rn).
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import codes as _f
from .topk import _bound, _select, _top1

# stage codes, pass kinds, count modes and the state layout: codes.py defines them (one place)
PEN = tl.constexpr(_f.PEN)
TEMP = tl.constexpr(_f.TEMP)
MINP = tl.constexpr(_f.MINP)
TOPP = tl.constexpr(_f.TOPP)
TOPK = tl.constexpr(_f.TOPK)
STATS = tl.constexpr(_f.STATS)
RADIX = tl.constexpr(_f.RADIX)
TIES = tl.constexpr(_f.TIES)
SELECT = tl.constexpr(_f.SELECT)
FINAL = tl.constexpr(_f.FINAL)
SCAN = tl.constexpr(_f.SCAN)
TABLE = tl.constexpr(_f.TABLE)
NSLOT = tl.constexpr(_f.NSLOT)  # per-row float64 state slots
PART_W = tl.constexpr(_f.PART_W)  # float64 partial results per (row, pass, chunk)
SLOTS = tl.constexpr(_f.SLOTS)  # per stage position: +0 max, +1 sum of exp, +2+2d / +3+2d the radix
#   prefix / the mass or count above it after digit d (d = 0..7; +16 / +17: the final threshold)
# Runtime ints Triton must not turn into constants when they equal 1 (they feed .to(), masks and
# conditions); compact takes the last five.
RUNTIME_INTS = ["ME", "PQ", "DIGIT", "PD", "NB", "LAST_N"]
# Reductions and scans call tl.reduce / tl.associative_scan with Triton's own combine functions:
# the same code as tl.sum / tl.max / tl.min / tl.cumsum (which are @jit wrappers of them), without
# a nested jit call, which costs ~3 ms each in Triton's interpreter (the CPU tests).
ADD = tl.standard._sum_combine
MAX = tl.standard._elementwise_max
MIN = tl.standard._elementwise_min


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
def _read_values(PRM):
    """The sampler's values from its device buffer (fused.sampler_values: int64 words, float32
    and float64 as their bit patterns), so one captured program serves every seed and value."""
    K = tl.load(PRM).to(tl.int32)
    REP = tl.load(PRM + 1).to(tl.int32).to(tl.float32, bitcast=True)
    FREQ = tl.load(PRM + 2).to(tl.int32).to(tl.float32, bitcast=True)
    PRES = tl.load(PRM + 3).to(tl.int32).to(tl.float32, bitcast=True)
    T = tl.load(PRM + 4).to(tl.int32).to(tl.float32, bitcast=True)
    MIN_P = tl.load(PRM + 5).to(tl.int32).to(tl.float32, bitcast=True)
    top_p = tl.load(PRM + 6).to(tl.float64, bitcast=True)
    return K, REP, FREQ, PRES, T, MIN_P, top_p, tl.load(PRM + 7), tl.load(PRM + 8)


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
def _scan_counts(ids, TOK, base, lo, hi, WS: tl.constexpr, U: tl.constexpr):
    """Window count of each id: one compare a window token, its load a scalar, U loads unrolled
    (issued together: one latency per U tokens; no [B, WS] tile, whose reduction cost layout
    conversions and barriers; U < WS where many ids a thread would make U registers too many)."""
    c = tl.zeros(ids.shape, tl.int32)
    i32 = ids.to(tl.int32)
    for j0 in range(0, WS, U):
        for j in tl.static_range(U):
            t = tl.load(TOK + base + lo + j0 + j, mask=lo + j0 + j < hi, other=-1).to(tl.int32)
            c += (i32 == t).to(tl.int32)
    return c


@triton.jit
def _counts(ids, ok, CNT, TOK, POS, TOK_ROW, r, V, LAST_N, COUNT_MODE: tl.constexpr,
            WS: tl.constexpr, END_FROM_POS: tl.constexpr, U: tl.constexpr):
    if COUNT_MODE == TABLE:
        c = tl.load(CNT + r * V + ids, mask=ok, other=0)
    else:
        base, lo, hi = _window(POS, TOK_ROW, r, LAST_N, END_FROM_POS)
        c = _scan_counts(ids, TOK, base, lo, hi, WS, U)
    return c


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
        m = tl.reduce(v, 0, MAX)
        kept = kept & (tl.exp(v - m) >= MIN_P)
    elif CODE == TOPP:  # keep iff the mass of strictly larger tokens < top_p * total (float64)
        m = tl.reduce(v, 0, MAX).to(tl.float64)
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - m), 0.0)
        vj = v[None, :]  # e of token j made in the [KP, KP] tile itself (triton 3.6 fails on e[None, :])
        ej = tl.where(vj > float("-inf"), tl.exp(vj.to(tl.float64) - m), 0.0)
        above = tl.reduce(tl.where(vj > v[:, None], ej, 0.0), 1, ADD)
        kept = kept & (above < top_p * tl.reduce(e, 0, ADD))
    elif CODE == TOPK:  # rank in (value desc, id asc) < K
        better = (v[None, :] > v[:, None]) | ((v[None, :] == v[:, None]) & (ids[None, :] < ids[:, None]))
        kept = kept & (tl.reduce(better.to(tl.int32), 1, ADD) < K)
    v = tl.where(kept, v, float("-inf"))
    return v, kept


@triton.jit(do_not_specialize=RUNTIME_INTS[5:])
def compact(L, L_STRIDE, TOK, TOK_ROW, POS, CNT, CK, CI, SCR, SM, U, OUT, FL,
            V, NC, LAST_N, PRM,
            S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr, S4: tl.constexpr,
            FIRST: tl.constexpr, FROM_CAND: tl.constexpr, GREEDY: tl.constexpr, NEED_C: tl.constexpr,
            COUNT_MODE: tl.constexpr, WS: tl.constexpr, WSP: tl.constexpr, END_FROM_POS: tl.constexpr,
            U_FROM_POS: tl.constexpr, DEBUG: tl.constexpr, HAS_REP: tl.constexpr, HAS_FP: tl.constexpr,
            NCP: tl.constexpr, KP: tl.constexpr, M: tl.constexpr, TOP1: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    K, REP, FREQ, PRES, T, MIN_P, top_p, KA, KB = _read_values(PRM)
    s = tl.arange(0, KP)
    if FROM_CAND:  # exact top-K of the chunks' candidates (token order): rows = the NCP // KP chunks
        c2 = tl.arange(0, NCP // KP)[:, None] * KP + s[None, :]
        key = tl.load(CK + r * NC + c2, mask=c2 < NC, other=-2147483648)
        cid = tl.load(CI + r * NC + c2, mask=c2 < NC, other=-1)
        valid = s < K
        if TOP1:  # one token: its values need no scratch (every later sum has one term)
            t, i1 = _top1(key, cid)
            kk = tl.where(s == 0, t.to(tl.int64) + 2147483648, 0)
            ids = tl.where(s == 0, i1.to(tl.int64), 0)
        else:  # compacted through SCR: [2, KP] int64 keys, ids (SM: _select's [M] int64)
            lo, n = _bound(key, K, NCP // KP, M)
            _select(key, cid, K, lo, n, SM + r * M, SCR + r * 2 * KP, SCR + r * 2 * KP + KP, M, True)
            tl.debug_barrier()
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
            c = tl.reduce((ids[:, None] == wt[None, :]).to(tl.int32), 1, ADD)
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
        tok = tl.reduce(tl.where(kept, ids, V + KP), 0, MIN)
    else:  # inverse CDF in token order, float64
        m = tl.reduce(v, 0, MAX).to(tl.float64)
        e = tl.where(v > float("-inf"), tl.exp(v.to(tl.float64) - m), 0.0)
        cdf = tl.associative_scan(e, 0, ADD)
        total = tl.reduce(tl.where(s == KP - 1, cdf, 0.0), 0, ADD)
        target = _row_u(U, POS, r, KA, KB, U_FROM_POS) * total
        pick = tl.reduce(tl.where(cdf > target, s, KP), 0, MIN)
        pick = tl.minimum(pick, tl.reduce(tl.where(e > 0, s, -1), 0, MAX))
        tok = tl.reduce(tl.where(s == pick, ids, 0), 0, ADD)
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
