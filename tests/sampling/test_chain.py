"""Each sampler stage against distributions computed by hand (plain Python math) on tiny vocabs."""

import math

import torch

from mtp_turbo.sampling.chain import penalty_counts, probs_from_logits, sample_dist, window_counts
from mtp_turbo.sampling.config import SamplerConfig

OFF = dict(top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, presence_penalty=0.0,
           frequency_penalty=0.0, temperature=1.0)


def cfg(**kw):
    return SamplerConfig(**{**OFF, **kw})


def softmax_py(ls):
    fin = [l for l in ls if l != -math.inf]
    m = max(fin)
    e = [math.exp(l - m) if l != -math.inf else 0.0 for l in ls]
    s = sum(e)
    return [x / s for x in e]


def run(logits, c, counts=None, dtype=torch.float64):
    lt = torch.tensor([logits], dtype=dtype)
    ct = None if counts is None else torch.tensor([counts], dtype=dtype)
    return probs_from_logits(lt, ct, c)[0].tolist()


def close(a, b, tol=1e-12):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert abs(x - y) <= tol, (a, b)


def test_plain_softmax_and_temperature():
    l = [1.0, 2.0, -0.5, 0.3]
    close(run(l, cfg()), softmax_py(l))
    close(run(l, cfg(temperature=0.5)), softmax_py([x / 0.5 for x in l]))


def test_top_k_keeps_k_largest_and_ties_go_to_lowest_id():
    l = [0.5, 2.0, 1.0, 1.0, -1.0]
    # k=2: 2.0 (id 1) then the tie at 1.0 between ids 2 and 3 -> id 2 kept
    close(run(l, cfg(top_k=2)), softmax_py([-math.inf, 2.0, 1.0, -math.inf, -math.inf]))
    close(run(l, cfg(top_k=3)), softmax_py([-math.inf, 2.0, 1.0, 1.0, -math.inf]))
    p = run(l, cfg(top_k=2))
    assert p[0] == 0.0 and p[3] == 0.0 and p[4] == 0.0  # masked tokens are exactly 0
    close(run(l, cfg(top_k=10)), softmax_py(l))  # k >= V: off


def test_penalties_llama_cpp_rule():
    l = [2.0, -1.0, 0.5, 1.5]
    counts = [2, 1, 0, 0]
    c = cfg(repeat_penalty=2.0, frequency_penalty=0.25, presence_penalty=0.5)
    # token 0: 2/2 - 2*0.25 - 0.5 = 0.0 ; token 1 (negative logit): -1*2 - 0.25 - 0.5 = -2.75
    close(run(l, c, counts), softmax_py([0.0, -2.75, 0.5, 1.5]))


def test_min_p():
    l = [0.0, math.log(0.5), math.log(0.04), math.log(0.06)]
    p = softmax_py(l)
    keep = [x >= 0.05 * max(p) for x in p]  # p = (.625, .3125, .025, .0375), cut at .03125
    assert keep == [True, True, False, True]
    close(run(l, cfg(min_p=0.05)), softmax_py([x if k else -math.inf for x, k in zip(l, keep)]))


def test_top_p_keeps_the_crossing_token():
    probs = [0.1, 0.4, 0.3, 0.2]
    l = [math.log(x) for x in probs]
    # sorted: 0.4, 0.3 (cum 0.7), 0.2 (cum 0.9 crosses 0.75) -> keep ids 1, 2, 3
    close(run(l, cfg(top_p=0.75)), [0.0, 0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9])
    # exactly reaching the threshold: 0.4 + 0.3 = 0.7 >= 0.7 -> the 0.3 token is the crossing one
    close(run(l, cfg(top_p=0.7)), [0.0, 0.4 / 0.7, 0.3 / 0.7, 0.0], tol=1e-9)
    close(run(l, cfg(top_p=0.3)), [0.0, 1.0, 0.0, 0.0])


def test_top_p_keeps_ties_with_the_crossing_token():
    l = [math.log(x) for x in (0.4, 0.2, 0.2, 0.2)]
    close(run(l, cfg(top_p=0.5)), [0.4 / 1.0, 0.2, 0.2, 0.2])  # all 0.2s tie with the crossing one


def test_full_default_chain_by_hand():
    l = [3.0, 2.5, 1.0, 0.2, -1.0, 2.9]
    counts = [1, 0, 0, 3, 0, 0]
    c = cfg(top_k=4, repeat_penalty=1.5, presence_penalty=0.2, frequency_penalty=0.1,
            temperature=0.7, min_p=0.1, top_p=0.8)
    x = list(l)
    # top-k 4: keeps 3.0, 2.9, 2.5, 1.0
    x = [v if v >= 1.0 else -math.inf for v in x]
    # penalties: id 0 (count 1): 3/1.5 - 0.1 - 0.2 = 1.7 ; id 3 already masked
    x[0] = 3.0 / 1.5 - 0.1 - 0.2
    x = [v / 0.7 for v in x]
    p = softmax_py(x)
    x = [v if pv >= 0.1 * max(p) else -math.inf for v, pv in zip(x, p)]
    p = softmax_py(x)
    order = sorted(range(6), key=lambda i: -p[i])
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += p[i]
        if mass >= 0.8:
            break
    expected = softmax_py([v if i in kept else -math.inf for i, v in enumerate(x)])
    close(run(l, c, counts), expected)
    close(run(l, c, counts, dtype=torch.float32), expected, tol=1e-6)


def test_order_matters():
    # top-k 1 then penalties keeps token 0; penalties first make token 1 the top-1.
    l = [2.0, 1.9, 0.0]
    counts = [1, 0, 0]
    a = cfg(top_k=1, repeat_penalty=2.0)
    b = cfg(top_k=1, repeat_penalty=2.0, order=("penalties", "top_k", "temperature", "min_p", "top_p"))
    close(run(l, a, counts), [1.0, 0.0, 0.0])
    close(run(l, b, counts), [0.0, 1.0, 0.0])
    # temperature before vs after min-p changes the kept set
    l2 = [0.0, -2.0, -4.0]
    t_first = cfg(temperature=3.0, min_p=0.1, order=("temperature", "min_p", "top_k", "penalties", "top_p"))
    t_last = cfg(temperature=3.0, min_p=0.1, order=("min_p", "temperature", "top_k", "penalties", "top_p"))
    p_raw = softmax_py(l2)
    keep_last = [x >= 0.1 * max(p_raw) for x in p_raw]  # [T, T, F]
    close(run(l2, t_last), softmax_py([v / 3 if k else -math.inf for v, k in zip(l2, keep_last)]))
    close(run(l2, t_first), softmax_py([v / 3 for v in l2]))  # all pass min-p at temp 3
    assert run(l2, t_first) != run(l2, t_last)


def test_temp0_is_argmax_after_penalties_lowest_id_on_ties():
    c = cfg(temperature=0.0, repeat_penalty=2.0, top_k=1, top_p=0.5)
    assert run([2.0, 1.5, 0.0], c, [1, 0, 0]) == [0.0, 1.0, 0.0]  # 2/2 = 1 < 1.5
    assert run([2.0, 1.5, 0.0], c, [0, 0, 0]) == [1.0, 0.0, 0.0]
    assert run([1.0, 3.0, 3.0], cfg(temperature=0.0)) == [0.0, 1.0, 0.0]
    # negative logit: repeat multiplies -> more negative
    assert run([-1.0, -1.5], cfg(temperature=0.0, repeat_penalty=2.0), [1, 0]) == [0.0, 1.0]


def test_penalty_window_semantics():
    toks = torch.tensor([0, 1, 1, 2, 0, 3])
    v = 5
    def expect(hist, n):
        w = hist if n < 0 else (hist[len(hist) - n:] if n > 0 else [])
        return [float(w.count(i)) for i in range(v)]
    for n in (-1, 0, 1, 3, 4, 100):
        got = penalty_counts(toks, 3, v, n).tolist()
        for r in range(3):
            hist = toks.tolist()[: 6 - 2 + r]
            assert got[r] == expect(hist, n), (n, r)
    # window_counts on padded batched histories agrees with penalty_counts
    hist = torch.tensor([[0, 1, 1, 2, 0, 3], [4, 4, 2, 9, 9, 9]])
    lens = torch.tensor([6, 3])
    for n in (-1, 0, 2, 4):
        w = window_counts(hist, lens, v, n).tolist()
        assert w[0] == penalty_counts(hist[0], 1, v, n)[0].tolist()
        assert w[1] == penalty_counts(hist[1, :3], 1, v, n)[0].tolist()


def test_sample_dist_rows_see_their_own_prefix():
    c = cfg(presence_penalty=1.0, penalty_last_n=2)
    logits = torch.zeros(3, 4, dtype=torch.float64)
    toks = torch.tensor([0, 1, 2, 3])  # rows see [0,1], [0,1,2], [0,1,2,3]
    p = sample_dist(logits, toks, c).tolist()
    for r, window in enumerate(([0, 1], [1, 2], [2, 3])):
        close(p[r], softmax_py([-1.0 if i in window else 0.0 for i in range(4)]))
    # penalty_last_n = 0: no penalties at all
    close(sample_dist(logits, toks, cfg(presence_penalty=1.0, penalty_last_n=0))[0].tolist(), [0.25] * 4)


def test_vectorized_rows_equal_single_rows_and_no_nan():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 300, generator=g) * 3
    toks = torch.randint(0, 300, (40,), generator=g)
    c = SamplerConfig(top_k=20, repeat_penalty=1.2, presence_penalty=0.5, frequency_penalty=0.1,
                      penalty_last_n=16, temperature=0.7, min_p=0.05, top_p=0.9)
    full = sample_dist(logits, toks, c)
    assert torch.isfinite(full).all() and torch.allclose(full.sum(1), torch.ones(5))
    assert ((full > 0).sum(1) <= 20).all()
    for r in range(5):
        one = sample_dist(logits[r:r + 1], toks[: 40 - 4 + r], c)
        assert torch.equal(one[0], full[r])


def test_top_k_columns_are_the_masks_set_with_ties_at_the_boundary():
    """_top_k_cols (one topk on the CPU where no tie crosses the k-th value, the mask otherwise) keeps
    exactly _top_k_keep's set: random rows, ties inside the kept set, ties across the boundary
    (lowest ids kept), -0.0 beside 0.0."""
    from mtp_turbo.sampling.chain import _top_k_cols, _top_k_keep

    g = torch.Generator().manual_seed(3)
    rows = [torch.randn(3, 5000, generator=g),
            torch.randint(-4, 5, (3, 5000), generator=g).float(),  # many ties everywhere
            torch.cat([torch.full((1, 50), 2.0), torch.randn(1, 4950, generator=g) - 10], dim=1)]
    z = torch.randn(1, 5000, generator=g) - 10
    z[0, [7, 11, 900]] = torch.tensor([0.0, -0.0, 0.0])
    rows.append(z)
    for l in rows:
        for k in (1, 3, 40, 49, 50, 51):
            keep = _top_k_keep(l, k)
            cols = _top_k_cols(l, k)
            got = torch.zeros_like(keep).scatter_(1, cols, True)
            assert torch.equal(got, keep), k


def test_a_draw_over_the_survivors_is_the_draw_over_the_vocabulary():
    """draw_survivors(survivor_probs(...)) gives draw(probs_from_logits(...))'s tokens for every u,
    with and without top-k, penalties and greedy; cumsum_rows is torch.cumsum."""
    from mtp_turbo.sampling.chain import cumsum_rows, survivor_probs
    from mtp_turbo.sampling.draw import draw, draw_survivors

    g = torch.Generator().manual_seed(4)
    V, R = 3000, 4
    logits = torch.randn(R, V, generator=g) * 3
    counts = penalty_counts(torch.randint(0, V, (80,), generator=g), R, V, 64)
    u = torch.rand(500, dtype=torch.float64, generator=g)
    u[:2] = torch.tensor([0.0, 1.0 - 2**-53])
    for cfg in (SamplerConfig(seed=1), SamplerConfig(temperature=1.3, top_k=0, top_p=0.9, min_p=0.0),
                SamplerConfig(temperature=0.6, repeat_penalty=1.1, presence_penalty=0.4),
                SamplerConfig(temperature=0.0, repeat_penalty=1.3), SamplerConfig(top_k=7, top_p=1.0, min_p=0.0)):
        full = probs_from_logits(logits, counts, cfg)
        p, ids = survivor_probs(logits, counts, cfg)
        for uu in u.split(R)[:-1]:
            assert torch.equal(draw_survivors(p, ids, uu), draw(full, uu)), cfg
    x = torch.rand(3, V, dtype=torch.float64, generator=g)
    assert torch.equal(cumsum_rows(x), torch.cumsum(x, dim=1))
    b = torch.rand(3, V, generator=g) > 0.5
    assert torch.equal(cumsum_rows(b.to(torch.int32)), torch.cumsum(b.to(torch.int32), dim=1))
