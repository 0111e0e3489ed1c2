"""The drafter's one drafting path, static shapes (what CUDA graphs capture): on the CPU its drafts
equal the from-scratch reference, with logits equal to fp32 rounding, over sessions with chunked
prefill, rounds of k = 1..4, random acceptance, rollbacks, new prompts sharing a prefix, and
contexts far past sink + window (the padded, masked read-cell vectors); the staged input vector is
the documented layout; the captured work has no host sync; on CUDA (gpu tests) graph replay equals
the eager run bit for bit over real generates, and speculative temp-0 text equals plain text."""

import random

import pytest
import torch

from mtp_turbo.models.mtp_head import reference_drafts
from mtp_turbo.models.mtp_step import cells_from_runs
from mtp_turbo.spec.drafters.mtp import GRAPH_K, GRAPH_ROWS, RUN_WORDS, MTPDrafter, load_mtp_drafter

# tiny, one_thread, watch_chain, no_sync: tests/spec/drafters/conftest.py
pytestmark = pytest.mark.usefixtures("one_thread")


def checked_session(tiny, head, sink, window, seed, rounds, capacity=1100, prompt=(5, 60), chunk=37,
                    ks=(1, 2, 3, 4)):
    """Drive a drafter like the engine; every propose must give the reference's drafts, logits
    equal to fp32 rounding. Returns (rounds, the longest context seen, the largest read-cell count
    of a query)."""
    rng = random.Random(seed)
    V = tiny.V
    main = tiny.main(seed, n=1200)
    dr = MTPDrafter(head, capacity=capacity, sink=sink, window=window)
    assert not dr.use_graphs  # no graphs without CUDA

    def prefill(tokens, start):
        n_rows = len(tokens) - 1
        H = main.hidden(tokens)
        for c0 in range(start, n_rows, chunk):
            c1 = min(n_rows, c0 + chunk)
            dr.on_prefill(c0, c1, H[c0:c1].clone(), tokens, n_rows=n_rows)

    tokens = [rng.randrange(V) for _ in range(rng.randrange(*prompt))]
    prefill(tokens, 0)
    dr.begin(tokens)
    longest = widest = 0
    for r in range(rounds):
        k = rng.choice(ks)
        got = dr.propose(tokens, k)
        want, want_logits = reference_drafts(head, tokens, main.hidden(tokens)[: len(tokens) - 1], k, sink, window)
        assert got == want, (r, got, want)
        torch.testing.assert_close(dr.last_logits, want_logits, rtol=1e-4, atol=1e-4)
        assert dr.last_drafts.tolist() == got
        longest = max(longest, len(tokens))
        widest = max(widest, dr.cells.read_cells(len(tokens) - 2).size)
        a = rng.randrange(0, k + 1)
        n = len(tokens)
        new = tokens + got[:a] + [rng.randrange(V)]
        dr.observe(new, a, main.hidden(new)[n - 1: n + a].clone())
        tokens = new
        u = rng.random()
        if u < 0.1 and len(tokens) > 4:  # rollback (stop token / checkpoint restore)
            m = rng.randrange(max(2, len(tokens) - 40), len(tokens))
            tokens = tokens[:m]
            dr.truncate(m)
        elif u < 0.15:  # a new prompt sharing a prefix (maybe long: past sink + window)
            keep = rng.randrange(1, len(tokens))
            tokens = tokens[:keep] + [rng.randrange(V) for _ in range(rng.randrange(1, 120))]
            tokens = tokens[: capacity - 40]
            prefill(tokens, keep - 1 if keep > 1 else 0)
            dr.begin(tokens)
    return rounds, longest, widest


@pytest.mark.parametrize("sink,window", [(0, 256), (64, 256)])
def test_drafts_equal_reference_long_context(sink, window, tiny):
    """The engine's two drafter settings, contexts from ~450 tokens past sink + window."""
    _, longest, widest = checked_session(tiny, tiny.head(), sink, window, seed=sink, rounds=60, prompt=(420, 480))
    assert longest > sink + window + 100
    assert widest == sink + window + 1  # queries read the full padded width


@pytest.mark.parametrize("sink,window,seed", [(4, 8, 1), (0, 6, 2), (3, 1, 3), (16, 64, 4)])
def test_drafts_equal_reference_small_windows(sink, window, seed, tiny):
    """Small sinks / windows: chain cells leave the window, sink and run split, repairs."""
    checked_session(tiny, tiny.head(), sink, window, seed=seed, rounds=80, capacity=400, prompt=(5, 60))


def test_reduced_vocab_and_big_batches(tiny):
    """vocab_ids mapping on the device; k and catch-up batches past the graph limits (the
    unstaged eager path) agree too."""
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40)))
    checked_session(tiny, tiny.head(vocab_ids=ids), 4, 16, seed=5, rounds=30, capacity=400)
    checked_session(tiny, tiny.head(seed=2), 8, 32, seed=6, rounds=12, capacity=400, ks=(GRAPH_K + 1, GRAPH_K + 3))


def test_staged_layout(tiny):
    """positions | tokens | read cells per chain step as three [lo, hi) runs, which expand to the
    cells the cell rules say, padded with -1 | the chain's positions p0 .. p0+k-1."""
    head = tiny.head()
    main = tiny.main(0, n=1200)
    dr = MTPDrafter(head, capacity=200, sink=2, window=5)
    toks = [random.Random(0).randrange(tiny.V) for _ in range(30)]
    dr.on_prefill(0, 29, main.hidden(toks)[:29], toks)
    dr.begin(toks)
    p0, c, k = 28, 26, 3
    dr.cells.truncate(c)  # three catch-up rows, draft 0's row last
    M = dr.max_reads
    st = dr._stage(toks, c, p0, k)
    n = p0 - c + 1
    assert st.shape == (2 * n + k * RUN_WORDS + k,) and n <= GRAPH_ROWS
    assert st[:n].tolist() == [26, 27, 28] and st[n: 2 * n].tolist() == toks[27:30]
    assert st[2 * n + k * RUN_WORDS:].tolist() == [p0, p0 + 1, p0 + 2]
    rows = [cells_from_runs(r, M).tolist() for r in st[2 * n: 2 * n + k * RUN_WORDS].view(k, RUN_WORDS)]
    for j, row in enumerate(rows):
        p = p0 + j
        want = [0, 1] + [x for x in range(p - 5, p + 1)]  # sink + window, chain cells p0+1..p included
        assert row[: len(want)] == want and all(v == -1 for v in row[len(want):]), (j, row)
    assert dr.cells.cell1 == p0 + 1


@pytest.mark.parametrize("reduced", [False, True])
def test_chain_has_no_host_syncs(reduced, tiny, watch_chain, no_sync):
    """What the graph captures (_chain) never reads a device value on the host (e.g. indexing
    with a 0-dim id tensor would call .item())."""
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40))) if reduced else None
    dr = MTPDrafter(tiny.head(vocab_ids=ids), capacity=300, sink=4, window=16)
    ran = watch_chain(dr)  # each _chain call runs under NoSync
    main = tiny.main(0, n=1200)
    toks = [random.Random(1).randrange(tiny.V) for _ in range(40)]
    dr.on_prefill(0, 39, main.hidden(toks)[:39], toks)
    dr.begin(toks)
    for k in (1, 3):
        assert len(dr.propose(toks, k)) == k
    assert len(ran) == 2
    with pytest.raises(AssertionError, match="host sync"), torch.no_grad(), no_sync():
        torch.arange(3)[torch.tensor(1)]  # the mode does catch syncs


# ---- CUDA ----------------------------------------------------------------------------------
def cuda_engine(model_path, **kw):
    from mtp_turbo.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=str(model_path), device="cuda", progress=False, **kw))


@pytest.mark.gpu
def test_cuda_round_program_text_is_exact_and_graphs_equal_eager(model_path):
    """The engine's rounds (one CUDA graph each, the drafter's chain inside) give plain greedy's
    text; the same rounds without graphs give the same tokens; the drafter's own graph replay
    equals its eager run bit for bit, and the fused step drafts what the torch step drafts."""
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    eng = cuda_engine(model_path)
    greedy = SamplerConfig(temperature=0.0)
    long_prompt = "The history of the printing press. " * 60 + "Summarize:"  # past sink + window
    prompts = ("Question: Explain in detail how a steam engine works.\nAnswer:", long_prompt)
    for k in (3, 4):
        spec = SpecConfig(draft="mtp", draft_tokens=k, adaptive=False)
        for p in prompts:
            plain = eng.generate_ids(p, sampler=greedy, max_tokens=80)
            assert eng.generate_ids(p, sampler=greedy, max_tokens=80, spec=spec) == plain
            assert eng.last_stats.spec.accepted > 0
    assert any(prog._graphs for prog in eng.kept.programs.values()), "rounds replay graphs"
    eager = cuda_engine(model_path, cuda_graphs=False)
    spec = SpecConfig(draft="mtp", draft_tokens=3, adaptive=False)
    assert eager.generate_ids(prompts[0], sampler=greedy, max_tokens=64, spec=spec) == \
        eng.generate_ids(prompts[0], sampler=greedy, max_tokens=64, spec=spec)

    # the drafter alone: graph replay == eager, fused == torch (to fp32/bf16 rounding)
    g, e, t = (load_mtp_drafter(spec, eng.model, eng.gguf, eng.ctx_size) for _ in range(3))
    e.use_graphs = False
    t.step, t.use_graphs = t.torch_step, False
    toks = eng.encode_prompt(long_prompt)
    hid = torch.randn(len(toks) - 1, eng.model.cfg.hidden, generator=torch.Generator().manual_seed(0))
    hid = hid.to("cuda", eng.model.dtype)
    same = total = 0
    for d in (g, e, t):
        d.on_prefill(0, len(toks) - 1, hid, toks)
        d.begin(toks)
    for r in range(12):
        kk = 1 + r % 4
        dg, de, dt = (d.propose(toks, kk) for d in (g, e, t))
        assert dg == de and torch.equal(g.last_logits, e.last_logits), r
        same += sum(a == b for a, b in zip(dg, dt))
        total += kk
        for d in (g, e, t):
            d.truncate(len(toks) - 1 - r % 3)
        toks = toks[: len(toks) - 1 - r % 3]
    assert g._graphs and same >= 0.9 * total, (same, total)


@pytest.mark.gpu
def test_cuda_rounds_launched_ahead_draft_what_rounds_read_first_draft(model_path):
    """On CUDA rounds are launched before the round before them is read (pipeline auto): the text
    is plain decoding's, most rounds went ahead, and they drafted about what rounds launched after
    the host read the previous one draft, at temp 0 and at temp 0.6 with the chain's penalties
    (the window read on the device). Not the very same drafts: a round launched ahead catches up
    k+1 rows where the other catches up a+1, and the drafter's Q8_0 GEMV takes a tile per row
    count (quant/gemv.py), so a near tie can go the other way (1 of 40 accepted drafts on the
    H200, session 19). On the CPU they are the same (tests/spec/test_pipeline.py)."""
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    on, off = cuda_engine(model_path), cuda_engine(model_path, pipeline="off")
    assert on.pipelined and not off.pipelined
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    prompt = "Question: Explain in detail how a steam engine works.\nAnswer:"
    for s in (SamplerConfig(temperature=0.0), SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05,
                                                            repeat_penalty=1.08, presence_penalty=0.4, seed=2)):
        plain = off.generate_ids(prompt, sampler=s, max_tokens=96)
        assert on.generate_ids(prompt, sampler=s, max_tokens=96) == plain  # plain programs launched ahead
        got = on.generate_ids(prompt, sampler=s, max_tokens=96, spec=spec)
        a = on.last_stats.spec
        assert off.generate_ids(prompt, sampler=s, max_tokens=96, spec=spec) == got == plain
        b = off.last_stats.spec
        assert a.ahead >= a.rounds // 2 and b.ahead == 0, (a.ahead, a.rounds)
        assert abs(a.accepted - b.accepted) <= max(2, b.accepted // 10), (a.accepted_per_position,
                                                                           b.accepted_per_position)


@pytest.mark.gpu
def test_cuda_coupled_and_penalised_rounds_are_plain_sampling(model_path):
    """Coupled MTP drafts at temp 0.6 with penalties (the draw inside the round's graph) and the
    n-gram drafter: the text is plain sampling's with the same seed, for several k."""
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    eng = cuda_engine(model_path)
    s = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                      presence_penalty=0.4, seed=11)
    prompt = "Write a short story about a lighthouse keeper."
    plain = eng.generate_ids(prompt, sampler=s, max_tokens=64)
    for spec in (SpecConfig(draft="mtp", draft_tokens=3, draft_coupling=True),
                 SpecConfig(draft="mtp", draft_tokens=2), SpecConfig(draft="ngram", draft_tokens=4)):
        assert eng.generate_ids(prompt, sampler=s, max_tokens=64, spec=spec) == plain, spec
    assert eng.last_stats.spec.rounds > 5


@pytest.mark.gpu
def test_cuda_capture_failure_falls_back_with_same_text(model_path, monkeypatch, capsys):
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    eng = cuda_engine(model_path)
    g = SamplerConfig(temperature=0.0)
    prompt = "One, two, three, four, five, six, seven,"
    want = eng.generate_ids(prompt, sampler=g, max_tokens=32)

    def boom(*a, **kw):
        raise RuntimeError("no capture today")

    fresh = cuda_engine(model_path)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", boom)
    assert fresh.generate_ids(prompt, sampler=g, max_tokens=32, spec=SpecConfig(draft="mtp")) == want
    assert "capture failed" in capsys.readouterr().err


def test_cells_from_runs_expands_runs_in_order():
    # up to three [lo, hi) runs, any of them empty, -> their cells one run after another, -1 after
    r = torch.tensor([0, 3, 10, 12, 20, 21])
    assert cells_from_runs(r, 8).tolist() == [0, 1, 2, 10, 11, 20, -1, -1]
    assert cells_from_runs(torch.tensor([5, 7, 0, 0, 0, 0]), 4).tolist() == [5, 6, -1, -1]
    assert cells_from_runs(torch.tensor([0, 0, 4, 6, 9, 10]), 3).tolist() == [4, 5, 9]
