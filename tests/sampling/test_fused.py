"""The fused sampler kernels, run by Triton's interpreter on CPU tensors, against the torch chain.

Every check compares, row by row: the survivor set (finite final logits), the final logits bit for
bit (the kernels do torch's float32 operations in torch's order), and the drawn token against the
exact float64 inverse CDF of the torch chain's final logits (exact.exact_draw), counting the
draws whose uniform lies within 1e-9 of a CDF boundary (those alone may differ; 0 in these cases).
Rows: random logits, rows with many exact ties (on a 0.5 grid), rows with -inf logits, a row with
fewer finite logits than top-k; windows full of each row's top tokens, repeated, with -1 padding.
Small vocabularies and chunks keep the interpreter fast; several chunks a row everywhere.
"""

import itertools
import os

import pytest
import torch

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":  # CPU tensors: a CUDA host runs test_fused_gpu.py instead
    pytest.skip("needs Triton's interpreter (tests/conftest.py sets it without CUDA)", allow_module_level=True)
import triton.language as tl  # noqa: E402

from mtp_turbo.sampling import fused  # noqa: E402
from mtp_turbo.sampling import kernels as K  # noqa: E402
from mtp_turbo.sampling.chain import probs_from_logits, sample_dist  # noqa: E402
from mtp_turbo.sampling.config import STAGES, SamplerConfig  # noqa: E402
from mtp_turbo.sampling.draw import draw  # noqa: E402
from mtp_turbo.sampling.exact import exact_draw, padded_counts, reference_logits  # noqa: E402
from mtp_turbo.sampling.rng import uniforms  # noqa: E402

pytestmark = pytest.mark.interpret

INF = float("inf")
CHAIN = dict(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4,
             frequency_penalty=0.1, penalty_last_n=64, seed=3)
OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, presence_penalty=0.0,
           frequency_penalty=0.0)


def cfg(**kw):
    return SamplerConfig(**{**CHAIN, **kw})


def only(**kw):
    return SamplerConfig(**{**CHAIN, **OFF, **kw})


def make_rows(seed, rows, vocab, width=24, scale=3.0):
    """(logits [rows, vocab] float32, windows [rows, width] int64, u [rows] float64)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    logits[1::2] = torch.round(logits[1::2] * 2) / 2  # a 0.5 grid: many exact ties, also at the cuts
    if rows > 2:
        logits[2, torch.rand(vocab, generator=g) < 0.5] = -INF
    if rows > 3:
        logits[3, 20:] = -INF  # fewer finite tokens than top-k 40
    top = logits.topk(min(30, vocab), dim=1).indices
    win = top.gather(1, torch.randint(0, top.shape[1], (rows, width), generator=g))
    pick = torch.rand(rows, width, generator=g) < 0.3
    win = torch.where(pick, torch.randint(0, vocab, (rows, width), generator=g), win)
    win[:, :3] = -1  # padding
    win[0] = -1  # a row without history
    u = torch.rand(rows, generator=g, dtype=torch.float64)
    return logits, win, u


def check(logits, win, u, c, block=None):
    """Kernel == torch chain (survivors, values, token); returns the kernel's ids."""
    ids, fl = fused.sample_rows(logits, win, u, c, backend="triton", block=block, return_logits=True)
    ref = reference_logits(logits, win, c)
    fin = torch.isfinite(ref)
    bad = (torch.isfinite(fl) != fin).any(dim=1).nonzero().flatten().tolist()
    assert not bad, f"survivor sets differ in rows {bad}: {c}"
    if c.greedy:
        want = torch.where(fin, 0.0, -INF).argmax(dim=1)
    else:
        assert torch.equal(fl[fin], ref[fin]), "final logits differ"
        want, margin = exact_draw(ref, u)
        assert int((margin < 1e-9).sum()) == 0  # near-boundary draws: none in these cases
    assert torch.equal(ids, want), (ids.tolist(), want.tolist(), c)
    return ids


# ----------------------------------------------------------------------------- building blocks

@triton.jit
def _probe(P, X, U, Y, KEY, KA, KB, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(U + i, K._uniform(tl.load(P + i), KA, KB))
    key = K._key(tl.load(X + i))
    tl.store(KEY + i, key)
    tl.store(Y + i, K._unkey(key))


def test_in_kernel_uniforms_and_order_keys_bit_exact():
    pos = torch.tensor([0, 1, 2, 63, 64, 1000, 2**31 - 1, 2**31, 2**40 + 7, 2**62 + 12345, 5, 6, 7, 8, 9, 10])
    x = torch.tensor([-INF, INF, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 3.5, -3.5, 1e38, -1e38, 2.0, 2.0000002,
                      -2.0, -2.0000002])
    for seed in (0, 1, 2**63 - 1, 0xDEADBEEF):
        got = torch.empty(16, dtype=torch.float64)
        y, key = torch.empty(16), torch.empty(16, dtype=torch.int64)
        ka, kb = (fused._signed(k) for k in fused._keys(seed))
        _probe[(1,)](pos, x, got, y, key, ka, kb, N=16)
        assert torch.equal(got, uniforms(seed, pos))
    assert torch.equal(y, torch.where(x == 0, 0.0, x))  # round trip (-0 -> +0)
    order = torch.argsort(x, stable=True)
    assert (key[order].diff() >= 0).all() and key[2] == key[3]  # monotone, +-0 tie
    assert int(key.min()) > 0 and int(key.max()) < 2**32


def test_plan_shapes():
    v = 262144
    p = fused.make_plan(cfg(), v, 64)
    assert p.mode == "cand" and p.passes == () and p.block == 2048 and p.kp == 64  # 2 launches
    p = fused.make_plan(cfg(top_k=0), v, 64)
    assert p.mode == "full" and len(p.passes) == 9  # min-p max, 8 top-p digits (then FINAL: 10 launches)
    assert len(fused.make_plan(only(top_p=0.95), v, 0).passes) == 8  # top-p alone: 9 launches
    assert fused.make_plan(cfg(top_k=129), v, 64).mode == "full"
    assert fused.make_plan(cfg(), 100, 64).mode == "row"
    g = fused.make_plan(cfg(temperature=0.0), v, 64)
    assert g.stages == (fused.PEN, fused.TOPK) and g.k == 1 and g.mode == "cand"


# ----------------------------------------------------------------------------- the compact path (top-k <= 128)

COMPACT = {
    "chain": cfg(),
    "top_k": only(top_k=40),
    "top_k 1": only(top_k=1),
    "top_k 128 + chain": cfg(top_k=128),
    "penalties": only(top_k=40, repeat_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.25),
    "sharp": cfg(temperature=0.05, top_p=0.99, min_p=0.0),
    "hot": cfg(temperature=5.0, top_p=0.6, min_p=0.2),
    "boost": cfg(repeat_penalty=0.7, presence_penalty=-0.5),  # penalties that raise logits
    "penalties first": cfg(order=("penalties", "top_k", "temperature", "min_p", "top_p")),
    "temperature first, top-p before min-p": cfg(order=("temperature", "top_k", "top_p", "penalties", "min_p")),
    "greedy": cfg(temperature=0.0),
    "greedy no penalties": cfg(temperature=0.0, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0),
}


@pytest.mark.parametrize("name", list(COMPACT))
def test_compact_path_matches_chain(name):
    logits, win, u = make_rows(list(COMPACT).index(name), 6, 1500)
    check(logits, win, u, COMPACT[name], block=512)  # 3 chunks a row


# ----------------------------------------------------------------------------- the full-vocabulary path

FULL = {
    "chain top-k 0": cfg(top_k=0),
    "top-p only": only(top_p=0.9),
    "min-p only, hot": only(min_p=0.1, temperature=2.0),
    "top-k 200 + top-p": only(top_k=200, top_p=0.97),  # k > KMAX: radix on counts + a ties pass
    "top-k V-1": only(top_k=1199),
    "masks before top-k": cfg(order=("min_p", "top_p", "top_k", "temperature", "penalties")),
    "top-k 300 between": cfg(top_k=300, order=("penalties", "min_p", "top_k", "top_p", "temperature")),
    "whole-history penalties": cfg(top_k=0, penalty_last_n=-1, repeat_penalty=1.5, order=(
        "penalties", "temperature", "top_k", "top_p", "min_p")),
}


@pytest.mark.parametrize("name", list(FULL))
def test_full_vocab_path_matches_chain(name):
    logits, win, u = make_rows(100 + list(FULL).index(name), 4, 1200, width=80)  # 80 > 64: a count table
    check(logits, win, u, FULL[name], block=512)


def test_row_path_every_order():
    """V <= 128: one program a row runs every stage in registers; all 120 orders."""
    logits, win, u = make_rows(7, 4, 100)
    for order in itertools.permutations(STAGES):
        check(logits[:2], win[:2], u[:2], cfg(order=order))
    check(logits, win, u, cfg(top_k=0))
    check(logits, win, u, cfg(order=("top_p", "min_p")))  # stages left out are not applied
    check(logits, win, u, cfg(temperature=0.0, order=("top_k",)))  # greedy without penalties in order


# ----------------------------------------------------------------------------- sample_tokens

@pytest.mark.parametrize("last_n", [64, 8, 0, 100, -1])
def test_sample_tokens_is_the_definition(last_n):
    """Row r = draw(sample_dist(logits[r], tok_buf[:pos[r]]), uniforms(seed, pos[r])), u in-kernel."""
    g = torch.Generator().manual_seed(last_n + 10)
    v, n = 1000, 150
    logits = torch.randn(4, v, generator=g) * 2.5
    tok = torch.randint(0, v, (n + 3,), generator=g)
    tok[::3] = logits[0].topk(5).indices[torch.randint(0, 5, (len(tok[::3]),), generator=g)]
    pos = torch.arange(n, n + 4)
    c = cfg(penalty_last_n=last_n, repeat_penalty=1.3, top_p=0.9)
    ids, fl = fused.sample_tokens(logits, tok, pos, c, backend="triton", block=256, return_logits=True)
    win = fused.window_rows(tok, pos, last_n)
    ref = reference_logits(logits, win, c)
    assert torch.equal(fl.isfinite(), ref.isfinite()) and torch.equal(fl[ref.isfinite()], ref[ref.isfinite()])
    want, margin = exact_draw(ref, uniforms(c.seed, pos))
    assert (margin > 1e-9).all() and torch.equal(ids, want)
    for r in range(4):  # the literal definition (float32 draw: equal away from its ~1e-7 boundaries)
        one = draw(sample_dist(logits[r:r + 1], tok[: int(pos[r])], c), uniforms(c.seed, pos[r:r + 1]))
        assert int(one) == int(ids[r]) or float(margin[r]) < 1e-6


def test_batch_invariance_and_one_function_for_plain_and_verify():
    """16 rows at once == 16 calls of one row (what makes verify pick what plain decoding picks)."""
    g = torch.Generator().manual_seed(5)
    v = 700
    logits = torch.randn(16, v, generator=g) * 3
    tok = torch.randint(0, v, (300,), generator=g)
    pos = torch.arange(200, 216)
    c = cfg()
    ids, fl = fused.sample_tokens(logits, tok, pos, c, backend="triton", block=256, return_logits=True)
    for r in range(16):
        one, f1 = fused.sample_tokens(logits[r:r + 1], tok, pos[r:r + 1], c, backend="triton", block=256,
                                      return_logits=True)
        assert torch.equal(one, ids[r:r + 1]) and torch.equal(f1, fl[r:r + 1])


def test_one_params_buffer_serves_every_value_of_a_shape():
    """sampler_shape ignores the values (seed, temperature, top-p, min-p, top-k within its capacity,
    penalty strengths) and sees every stage switch; one params buffer rewritten between calls gives
    what a fresh call with those values gives (a captured program reused for every request)."""
    g = torch.Generator().manual_seed(9)
    v = 700
    logits = torch.randn(4, v, generator=g) * 3
    tok = torch.randint(0, v, (300,), generator=g)
    pos = torch.arange(200, 204)
    same = [cfg(), cfg(seed=77), cfg(temperature=1.7, top_p=0.5, min_p=0.2), cfg(top_k=50, seed=2**62),
            cfg(repeat_penalty=0.7, presence_penalty=-1.5, frequency_penalty=2.0)]
    shape = fused.sampler_shape(same[0], v, 300)
    assert all(fused.sampler_shape(c, v, 300) == shape for c in same)
    for other in (cfg(temperature=1.0), cfg(top_k=100), cfg(top_p=1.0), cfg(min_p=0.0), cfg(penalty_last_n=32),
                  cfg(repeat_penalty=1.0), cfg(temperature=0.0), cfg(top_k=1)):
        assert fused.sampler_shape(other, v, 300) != shape, other
    buf = torch.zeros(fused.PARAM_WORDS, dtype=torch.int64)
    for c in same + same[::-1]:
        buf.copy_(torch.tensor(fused.sampler_values(c)))
        got, gl = fused.sample_tokens(logits, tok, pos, c, backend="triton", block=256, return_logits=True,
                                      params=buf)
        ref = reference_logits(logits, fused.window_rows(tok, pos, c.penalty_last_n), c)
        assert torch.equal(gl.isfinite(), ref.isfinite()) and torch.equal(gl[ref.isfinite()], ref[ref.isfinite()])
        want, margin = exact_draw(ref, uniforms(c.seed, pos))
        assert (margin > 1e-9).all() and torch.equal(got, want)
    assert len({tuple(fused.sampler_values(c)) for c in same}) == len(same)


class _ToyLM:
    """Deterministic logits as a function of the history (a fixed random table on the last two tokens)."""

    def __init__(self, vocab, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.v = vocab
        self.table = torch.randn(61, vocab, generator=g) * 3

    def logits(self, hist):
        return self.table[(hist[-1] * 7 + hist[-2] * 3 + len(hist)) % 61]


@pytest.mark.parametrize("vocab", [100, 600])
def test_plain_and_speculative_text_equal_same_seed(vocab):
    """Plain decoding (1 row) and verification of k drafts (k+1 rows) through sample_tokens give
    the same text for a seed, whatever the drafts (here a drafter right about half the time)."""
    lm, c, k, n_new = _ToyLM(vocab), cfg(top_k=20, seed=11), 3, 10
    prompt = [1, 2, 3]
    plain = list(prompt)
    for _ in range(n_new):
        ids = fused.sample_tokens(lm.logits(plain)[None], torch.tensor(plain), torch.tensor([len(plain)]), c,
                                  backend="triton", block=256)
        plain.append(int(ids[0]))
    spec, g = list(prompt), torch.Generator().manual_seed(1)
    while len(spec) < len(prompt) + n_new:
        drafts = [int(x) for x in torch.randint(0, vocab, (k,), generator=g)]
        for i in range(k):  # half of the drafts are the plain text's token (a good drafter)
            j = len(spec) + i
            if j < len(plain) and torch.rand(1, generator=g) < 0.5:
                drafts[i] = plain[j]
        seq = spec + drafts
        rows = torch.stack([lm.logits(seq[: len(spec) + i]) for i in range(k + 1)])
        pos = torch.arange(len(spec), len(spec) + k + 1)
        t = fused.sample_tokens(rows, torch.tensor(seq), pos, c, backend="triton", block=256).tolist()
        acc = 0
        while acc < k and t[acc] == drafts[acc]:
            acc += 1
        spec += t[: acc + 1]
    assert spec[: len(plain)] == plain


# ----------------------------------------------------------------------------- the torch path

def test_torch_backend_is_the_chain():
    logits, win, u = make_rows(2, 5, 300)
    for c in (cfg(), cfg(temperature=0.0), cfg(top_k=0)):
        ids, fl = fused.sample_rows(logits, win, u, c, backend="torch", return_logits=True)
        assert torch.equal(fl, reference_logits(logits, win, c))
        assert torch.equal(ids, draw(probs_from_logits(logits, padded_counts(win, 300), c), u))
    tok = torch.randint(0, 300, (40,))
    pos = torch.tensor([30, 31])
    got = fused.sample_tokens(logits[:2], tok, pos, cfg())  # CPU tensors, auto: the torch chain
    for r in range(2):
        assert int(got[r]) == int(draw(sample_dist(logits[r:r + 1], tok[: 30 + r], cfg()), uniforms(3, pos[r:r + 1])))


@pytest.mark.parametrize("c", [cfg(), cfg(temperature=0.0), cfg(penalty_last_n=-1), only(), cfg(penalty_last_n=0)],
                         ids=["chain", "greedy-penalised", "whole-history", "plain", "no-window"])
def test_rows_of_their_own_windows_keyed_by_position_are_sample_tokens(c):
    # a draft tree's rows (spec/tree_round.py): each row's window given, its uniform from its position
    # and the params buffer; the same tokens as sample_tokens cutting those windows from one sequence
    g = torch.Generator().manual_seed(7)
    vocab = 300
    logits = torch.randn(5, vocab, generator=g) * 3
    seq = torch.randint(0, vocab, (90,), generator=g)
    seq[40:80] = logits[0].topk(40).indices  # the top tokens in the windows: the penalties bite
    pos = torch.tensor([70, 71, 72, 72, 80])
    win = fused.window_rows(seq, pos, c.penalty_last_n)
    params = torch.tensor(fused.sampler_values(c), dtype=torch.int64)
    want = fused.sample_tokens(logits, seq, pos, c, backend="triton")
    for backend in ("triton", "torch"):
        got = fused.sample_rows(logits, win, None, c, backend=backend, pos=pos, params=params)
        assert torch.equal(got, want), (backend, got.tolist(), want.tolist())
    if c == only():  # no truncation: other positions' uniforms draw other tokens
        other = fused.sample_rows(logits, win, None, c, backend="triton", pos=pos + 1, params=params)
        assert not torch.equal(other, want)
