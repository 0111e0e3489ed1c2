"""The exact top-k selection the fused sampler's SELECT pass (passes.py) and compact program
(kernels.py) share: the K largest of [G, W] int32 order keys (ties: the first in row-major order,
which is token order) with their ids, stored in order. Triton device functions only.

Owns: the selection. Ignores: where the keys come from (a chunk of the vocabulary, the chunks'
candidates), what follows it (the later stages).

Why not a bisection: the previous code found the K-th largest key by 32 dependent block-wide
counts (one per key bit). Each count is a reduction across the program's warps (barriers), so its
cost was latency, not work. Here:
1. A bound (`_bound`, 2 + a few reductions): the K-th largest of the G row maxima is a lower bound
   lo of the K-th largest key (those K maxima are keys); n = #keys >= lo >= K. While n > M, three
   thresholds split [lo, max] in four, one reduction counts the keys above each (21-bit fields of
   an int64), and the highest part whose lower end keeps >= K keys becomes [lo, hi]. The loop ends
   when n <= M or when lo is the K-th largest key itself (then more than M keys tie there). On
   Gemma-3-270M logits (207 rows, top-k 40, M = 128): 99% of SELECT's chunks need no step;
   compact needs 0.8 steps on average, at most 4.
2. n <= M (`_select`): the n keys >= lo (a superset of the top K) are compacted in order through a
   scratch of M slots; each one's rank (#keys before it in (key desc, position asc)) is counted in
   [M, 32] tiles, and rank < K is kept: one reduction, no search.
   Else lo = t is the K-th largest: every key > t and the first K - #(> t) keys equal to t.
Both are exact integer computations: the same survivors as any exact top-K with ties to the
lowest position. Row-major positions come from a scan along the rows plus the rows' exclusive
prefix: a scan over the flat keys in their load layout (4 a thread, repeated) costs ~700
instructions of cross-warp partials in triton 3.6's lowering; along rows of <= 64 keys it stays
inside a warp.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Triton's own combine functions (a nested @jit combine costs ~3 ms a call in the interpreter)
ADD = tl.standard._sum_combine
MAX = tl.standard._elementwise_max
MIN = tl.standard._elementwise_min


@triton.jit
def _skey(v):
    """float32 -> int32 order key, signed (= kernels._key(v) - 2^31): a < b <=> skey(a) < skey(b);
    -0.0 and +0.0 share one key; -inf -> -2139095041; INT_MIN is below every float (padding)."""
    v = tl.where(v == 0.0, 0.0, v)
    b = v.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


@triton.jit
def _total(x):
    """Sum of a [G, W] integer tensor (along the rows first)."""
    return tl.reduce(tl.reduce(x, 1, ADD), 0, ADD)


@triton.jit
def _upto(take):
    """[G, W] int1 -> int32: #take at or before each element in row-major order."""
    t = take.to(tl.int32)
    rows = tl.reduce(t, 1, ADD)
    return (tl.associative_scan(rows, 0, ADD) - rows)[:, None] + tl.associative_scan(t, 1, ADD)


@triton.jit
def _bound(key, K, G: tl.constexpr, M: tl.constexpr):
    """(lo, n) for int32 keys [G, W] (1 <= K <= G * W): n = #keys >= lo >= K, and n <= M unless lo
    is the K-th largest key (more than M keys tie at it). lo int64, n int32 (module docstring)."""
    gm = tl.reduce(key, 1, MAX)
    hi = tl.reduce(gm, 0, MAX).to(tl.int64)
    rank = tl.reduce((gm[None, :] > gm[:, None]).to(tl.int32), 1, ADD)
    lo = tl.reduce(tl.where(rank < K, gm, 2147483647), 0, MIN)
    lo = tl.where(K <= G, lo, -2147483648)  # fewer maxima than K: no bound
    n = _total((key >= lo).to(tl.int32))
    lo = lo.to(tl.int64)
    while (n > M) & (lo < hi):  # invariants: #keys >= lo = n >= K, #keys > hi < K
        w = (hi - lo) // 4 + 1
        t1 = tl.minimum(lo + w, hi)
        t2 = tl.minimum(lo + 2 * w, hi)
        t3 = tl.minimum(lo + 3 * w, hi)
        c = _total((key >= t1.to(tl.int32)).to(tl.int64) + ((key >= t2.to(tl.int32)).to(tl.int64) << 21)
                   + ((key >= t3.to(tl.int32)).to(tl.int64) << 42))
        c1 = (c & 0x1FFFFF).to(tl.int32)
        c2 = ((c >> 21) & 0x1FFFFF).to(tl.int32)
        c3 = (c >> 42).to(tl.int32)
        up1 = c1 >= K
        up2 = c2 >= K
        up3 = c3 >= K
        n = tl.where(up3, c3, tl.where(up2, c2, tl.where(up1, c1, n)))
        hi = tl.where(up3, hi, tl.where(up2, t3 - 1, tl.where(up1, t2 - 1, t1 - 1)))
        lo = tl.where(up3, t3, tl.where(up2, t2, tl.where(up1, t1, lo)))
    return lo, n


@triton.jit
def _put(OK, OI, slot, k, i, take, WIDE: tl.constexpr):
    if WIDE:  # compact's scratch: int64 order keys in [0, 2^32), int64 ids
        tl.store(OK + slot, k.to(tl.int64) + 2147483648, mask=take)
        tl.store(OI + slot, i.to(tl.int64), mask=take)
    else:
        tl.store(OK + slot, k, mask=take)
        tl.store(OI + slot, i, mask=take)


@triton.jit
def _select(key, ids, K, lo, n, S, OK, OI, M: tl.constexpr, WIDE: tl.constexpr, CB: tl.constexpr = 32):
    """Store the K largest of int32 keys [G, W] with their ids at OK / OI [0, K), in order; (lo, n)
    from _bound; S: int64 scratch of M slots (module docstring)."""
    if n <= M:  # one int64 store a key: (key << 32) | id
        ins = key >= lo.to(tl.int32)
        tl.store(S + _upto(ins) - 1, (key.to(tl.int64) << 32) | (ids.to(tl.int64) & 0xFFFFFFFF), mask=ins)
        tl.debug_barrier()
        j = tl.arange(0, M)
        ok = j < n
        p2 = tl.load(S + j, mask=ok, other=-9223372036854775808, cache_modifier=".cg")
        k2 = (p2 >> 32).to(tl.int32)
        i2 = p2.to(tl.int32)
        rank = tl.zeros([M], tl.int32)
        for j0 in tl.static_range(0, M, CB):  # [M, CB] tiles: registers
            jb = j0 + tl.arange(0, CB)
            kb = (tl.load(S + jb, mask=jb < n, other=-9223372036854775808, cache_modifier=".cg") >> 32).to(tl.int32)
            better = (kb[None, :] > k2[:, None]) | ((kb[None, :] == k2[:, None]) & (jb[None, :] < j[:, None]))
            rank += tl.reduce(better.to(tl.int32), 1, ADD)
        sel = ok & (rank < K)
        _put(OK, OI, tl.associative_scan(sel.to(tl.int32), 0, ADD) - 1, k2, i2, sel, WIDE)
    else:  # lo is the K-th largest key
        t = lo.to(tl.int32)
        above = _total((key > t).to(tl.int32))
        take = (key > t) | ((key == t) & (_upto(key == t) <= K - above))
        _put(OK, OI, _upto(take) - 1, key, ids, take, WIDE)


@triton.jit
def _top1(key, ids):
    """(the largest key, the lowest id holding it) of [G, W] keys (ids increase with position)."""
    t = tl.reduce(tl.reduce(key, 1, MAX), 0, MAX)
    return t, tl.reduce(tl.reduce(tl.where(key == t, ids, 2147483647), 1, MIN), 0, MIN)
