"""The fused sampler's exact top-k selection (sampling/topk.py) in Triton's interpreter.

1. The selection itself (_bound + _select, a probe kernel) on adversarial int32 keys against a sort:
   the same K keys and ids in order, the bound's invariants, and every path reached (the bound
   alone, the bound after search steps, the exact threshold with more ties than M).
2. The SELECT pass's candidates (each chunk's top-k in token order, what the former 32-step
   bisection wrote) against a sort of each chunk, read at the compact launch.
3. Whole chains on adversarial logits (ties across chunks, all-equal rows, fewer finite values
   than k, one candidate a chunk, values a few ulps apart, +-0, huge magnitudes) against the torch
   chain: survivors, final values bit for bit, the token (test_fused.check).
"""

import os
import sys
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs Triton's interpreter (tests/conftest.py sets it without CUDA)", allow_module_level=True)
import triton.language as tl  # noqa: E402

from mtp_turbo.sampling import fused  # noqa: E402
from mtp_turbo.sampling import kernels as K  # noqa: E402
from mtp_turbo.sampling import topk as T  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fused import cfg, check, only  # noqa: E402
from test_fused_gpu import adversarial_rows  # noqa: E402  (the GPU file's rows, here at V = 2000)

pytestmark = pytest.mark.interpret
INF = float("inf")
I32_MIN = -(2**31)


# ----------------------------------------------------------------------------- the selection

@triton.jit
def _probe(KEY, IDS, S, OK, OI, LON, K, G: tl.constexpr, W: tl.constexpr, M: tl.constexpr):
    i = tl.arange(0, G)[:, None] * W + tl.arange(0, W)[None, :]
    key = tl.load(KEY + i)
    lo, n = T._bound(key, K, G, M)
    tl.store(LON, lo)
    tl.store(LON + 1, n.to(tl.int64))
    T._select(key, tl.load(IDS + i), K, lo, n, S, OK, OI, M, False)


def keys_of(x: torch.Tensor) -> torch.Tensor:
    """float32 -> the kernels' signed int32 order keys (_skey), padding stays I32_MIN."""
    x = torch.where(x == 0, 0.0, x)
    b = x.view(torch.int32)
    return torch.where(b >= 0, b, b ^ 0x7FFFFFFF)


def top_positions(key: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest keys' positions (ties: the lowest position), in position order."""
    order = sorted(range(key.numel()), key=lambda p: (-int(key[p]), p))
    return torch.tensor(sorted(order[:k]), dtype=torch.int64)


def adversarial_keys(kind: int, n: int, g: torch.Generator) -> torch.Tensor:
    if kind == 0:  # any int32
        return torch.randint(I32_MIN, 2**31 - 1, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    if kind == 1:  # 6 values: ties everywhere
        return torch.randint(-3, 3, (n,), generator=g).to(torch.int32)
    if kind == 2:  # all equal
        return torch.full((n,), 12345, dtype=torch.int32)
    if kind == 3:  # two clusters 2^30 apart, low bits differing by 0..3
        return (torch.randint(0, 2, (n,), generator=g) * 2**30 + torch.randint(0, 4, (n,), generator=g)).to(torch.int32)
    if kind == 4:  # half padding
        k = torch.randint(-100, 100, (n,), generator=g)
        return torch.where(torch.rand(n, generator=g) < 0.5, torch.tensor(I32_MIN), k).to(torch.int32)
    if kind == 5:  # floats: negative and positive, +-0, +-inf, huge
        x = torch.randn(n, generator=g) * 3
        special = torch.tensor([0.0, -0.0, INF, -INF, 3e38, -3e38, 1e-45, -1e-45])
        x[torch.randint(0, n, (n // 8,), generator=g)] = special[torch.randint(0, 8, (n // 8,), generator=g)]
        return keys_of(x)
    if kind == 6:  # a LM-like tail clustered in two groups (the bound's worst case)
        x = torch.randn(n, generator=g)
        x[: n // 8] += 6 + torch.rand(n // 8, generator=g)
        return keys_of(x)
    # values a few ulps apart around one float: only the low bits differ
    return keys_of(torch.full((n,), 1.5)) + torch.randint(0, 5, (n,), generator=g).to(torch.int32)


def test_selection_against_a_sort_every_path():
    g = torch.Generator().manual_seed(0)
    paths = {"bound": 0, "search": 0, "ties": 0}
    for trial in range(24):
        kind, n = trial % 8, (256, 1024)[trial // 8 % 2]
        key = adversarial_keys(kind, n, g)
        ids = torch.randperm(n, generator=g).to(torch.int32) * 3 + 7  # arbitrary ids: they travel with the keys
        for k in (1, 5, 40):
            for groups in (1, 16, 64):
                for m in (16, 64):
                    s = torch.zeros(m, dtype=torch.int64)
                    ok, oi = torch.full((k,), 99, dtype=torch.int32), torch.full((k,), 99, dtype=torch.int32)
                    lon = torch.zeros(2, dtype=torch.int64)
                    _probe[(1,)](key, ids, s, ok, oi, lon, k, G=groups, W=n // groups, M=m)
                    want = top_positions(key, k)
                    assert torch.equal(ok, key[want]) and torch.equal(oi, ids[want]), (kind, n, k, groups, m)
                    lo, cnt = int(lon[0]), int(lon[1])
                    kth = int(key[want].min())
                    assert cnt == int((key.long() >= lo).sum()) and cnt >= k and lo <= kth
                    assert cnt <= m or lo == kth
                    gm = key.view(groups, -1).max(dim=1).values
                    start = int(gm.topk(k).values[-1]) if groups >= k else I32_MIN
                    n0 = int((key.long() >= start).sum())
                    paths["bound" if n0 <= m else "search" if cnt <= m else "ties"] += 1
    assert min(paths.values()) > 20, paths


# ----------------------------------------------------------------------------- the SELECT pass

class _Capture:
    """Stands in for kernels.compact: keeps its candidate arguments (CK, CI) and runs it."""

    def __init__(self, kernel):
        self.kernel, self.seen = kernel, []

    def __getitem__(self, grid):
        def run(*args, **kw):
            self.seen.append((args[6].clone(), args[7].clone(), kw["KP"]))
            return self.kernel[grid](*args, **kw)
        return run


def chunk_top(logits: torch.Tensor, k: int, block: int, kp: int):
    """Each chunk's top-k (value desc, id asc) in token order, padded to kp slots: [R, NB * kp]."""
    r, v = logits.shape
    nb = -(-v // block)
    ck = torch.full((r, nb * kp), I32_MIN, dtype=torch.int32)
    ci = torch.full((r, nb * kp), -1, dtype=torch.int32)
    for row in range(r):
        key = torch.full((nb * block,), I32_MIN, dtype=torch.int32)
        key[:v] = keys_of(logits[row])
        for c in range(nb):
            part = key[c * block:(c + 1) * block]
            pos = top_positions(part, k)
            ck[row, c * kp:c * kp + k] = part[pos]
            ci[row, c * kp:c * kp + k] = (pos + c * block).to(torch.int32)
    return ck, ci


@pytest.mark.parametrize("k", [1, 5, 40])
def test_select_pass_writes_each_chunks_top_k(monkeypatch, k):
    g = torch.Generator().manual_seed(k)
    v = 1300  # a last chunk with padding past V
    x = torch.randn(4, v, generator=g) * 2
    x[1] = torch.round(x[1])  # ties across chunks
    x[2] = 0.5  # all equal
    x[3, 10:] = -INF  # fewer finite values than k in most chunks
    x[3, 600:603] = torch.tensor([-0.0, 0.0, 1e-45])
    cap = _Capture(K.compact)
    monkeypatch.setattr(K, "compact", cap)
    c = only(top_k=k)
    win = torch.full((4, 1), -1)
    u = torch.rand(4, generator=g, dtype=torch.float64)
    fused.sample_rows(x, win, u, c, backend="triton", block=256)
    ck, ci, kp = cap.seen[0]
    want_k, want_i = chunk_top(x, k, 256, kp)
    assert torch.equal(ck, want_k) and torch.equal(ci, want_i)


# ----------------------------------------------------------------------------- whole chains

CHAINS = {
    "top-k 40": only(top_k=40),
    "top-k 5": only(top_k=5),
    "top-k 128": only(top_k=128),
    "chain": cfg(),
    "greedy + penalties": cfg(temperature=0.0),
    "top-k 1, hot": cfg(top_k=1, temperature=3.0),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_adversarial_rows_match_the_chain(name):
    x = adversarial_rows(2000, list(CHAINS).index(name))
    g = torch.Generator().manual_seed(9)
    top = x.topk(30, dim=1).indices
    win = top.gather(1, torch.randint(0, 30, (8, 24), generator=g))
    win[:, :3] = -1
    u = torch.rand(8, generator=g, dtype=torch.float64)
    check(x, win, u, CHAINS[name], block=256)  # 8 chunks a row


def test_many_chunks_the_bound_and_the_search():
    """Enough chunks (79) for the maxima bound in compact (NBP = 128 >= k = 40); rows where it holds
    (spread), where it needs search steps (clustered) and where ties pass M (equal)."""
    g = torch.Generator().manual_seed(3)
    v = 20000
    x = torch.randn(3, v, generator=g) * 2
    x[1, 4096:4864] += 8  # ~700 strong tokens in 3 chunks: many candidates above the maxima bound
    x[2] = torch.round(x[2] / 4)  # 5 values: ~1300 tokens tie at the top one, more than M
    win = torch.full((3, 1), -1)
    u = torch.rand(3, generator=g, dtype=torch.float64)
    check(x, win, u, only(top_k=40, top_p=0.9), block=256)
    check(x, win, u, cfg(top_k=40), block=256)


def test_plan_of_top_1_chunks():
    g = fused.make_plan(cfg(temperature=0.0), 32768, 64)  # the drafter's penalised argmax
    assert g.k == 1 and g.block == 256 and 32768 // g.block == 128
    assert fused.make_plan(cfg(temperature=0.0), 262144, 64).block == 1024
