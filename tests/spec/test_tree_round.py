"""Draft trees through the engine on the real model (CPU, the int8 matrices: batch-invariant, so a
tree row is a one-row step bit for bit): the same seed gives plain decoding's text for trees at
temps 0, 0.3, 0.6 and 1.0 with the sampled chain's penalties; a tree without leaves runs the
chain's rounds exactly; trees are cut near the budget and the context; configurations that cannot
be honoured are refused before anything runs."""

import dataclasses

import pytest
import torch

from mtp_turbo.errors import ConfigError
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.spec.tree import path_windows
from mtp_turbo.spec.tree_round import fit
from mtp_turbo.spec.tree_shape import SpineTree, chain_shape

PROMPT = "Write a short story about a robot who learns to paint."
CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64)
# a window short enough that tokens leave it mid-round, penalties that forbid what is in it
STRONG = dict(top_k=40, presence_penalty=30.0, penalty_last_n=6)


@pytest.fixture(scope="module")
def e8(engine):
    from mtp_turbo.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=str(engine.gguf.path), device="cpu", ctx_size=512, progress=False),
                  gguf=engine.gguf)


def run(e8, sampler, spec, n=24):
    e8.reset()
    return e8.generate_ids(PROMPT, sampler=sampler, max_tokens=n, stop_ids=(), spec=spec)


@pytest.mark.parametrize("temp,trees,chain", [(0.0, ("3:2,1", "5:4,3,2,1"), {}), (0.3, ("2:3",), CHAIN),
                                              (0.6, ("3:2,1", "5:4,3,2,1"), CHAIN), (1.0, ("3:3,2,1",), CHAIN),
                                              (0.6, ("4:2,1",), STRONG)],
                         ids=["t0", "t0.3", "t0.6", "t1", "t0.6-strong"])
def test_trees_give_plain_decodings_text(e8, temp, trees, chain):
    s = SamplerConfig(temperature=temp, seed=11, **chain)
    plain = run(e8, s, SpecConfig(draft="none"))
    for tree in trees:
        assert run(e8, s, SpecConfig(draft="mtp", draft_tree=tree)) == plain, tree
        st = e8.last_stats.spec
        assert st is not None and st.accepted > 0 and st.rounds < len(plain)


def test_a_tree_without_leaves_is_the_chain(e8):
    s = SamplerConfig(temperature=0.6, seed=4, **CHAIN)
    want = run(e8, s, SpecConfig(draft="mtp", draft_tokens=3))
    chain = e8.last_stats.spec
    assert run(e8, s, SpecConfig(draft="mtp", draft_tree="3")) == want
    tree = e8.last_stats.spec
    assert (tree.rounds, tree.accepted_per_position, tree.drafted_per_position) == \
        (chain.rounds, chain.accepted_per_position, chain.drafted_per_position)


def test_leaves_are_the_heads_next_best_and_never_the_spines(e8):
    s = SamplerConfig(temperature=0.6, seed=2, **CHAIN)
    run(e8, s, SpecConfig(draft="mtp", draft_tokens=3), n=6)  # a drafter with the prompt encoded
    d = e8.drafter
    tree = SpineTree(3, (3, 1))
    rows, staged = d.prepare(e8.tokens, tree.depth)
    with torch.inference_mode():
        nodes = d.device_tree(staged, rows, tree).tolist()
    spine, logits = nodes[:3], d.last_logits
    ids = d.head.vocab_ids
    order = [[int(ids[i]) if ids is not None else int(i) for i in row.argsort(descending=True)[:5]]
             for row in logits[:2]]
    assert len(nodes) == tree.shape.nodes - 1
    assert nodes[3:6] == [t for t in order[0] if t != spine[0]][:3]
    assert nodes[6:] == [t for t in order[1] if t != spine[1]][:1]


def test_path_windows_of_a_chain_are_the_sequences_windows():
    g = torch.Generator().manual_seed(0)
    buf = torch.randint(0, 50, (40,), generator=g)
    n, k = 9, 4
    drafts = torch.randint(0, 50, (k,), generator=g)
    seq = buf.clone()
    seq[n: n + k] = drafts
    nodes = torch.cat([buf[n - 1: n], drafts])
    for last_n in (0, 3, 64, -1):
        got = path_windows(buf, n, nodes, chain_shape(k), last_n)
        for r in range(k + 1):
            hist = seq[: n + r]
            want = hist if last_n < 0 else hist[max(0, n + r - last_n):] if last_n else hist[:0]
            row = got[r][got[r] >= 0]
            assert torch.equal(row, want), (last_n, r)


def test_path_windows_of_a_tree_by_hand():
    buf = torch.arange(100, 120)
    tree = SpineTree(3, (2, 1))  # root; spine 1-2-3; leaves 4, 5 under the root, 6 under node 1
    nodes = torch.tensor([-1, 1, 2, 3, 11, 12, 21])
    got = path_windows(buf, 5, nodes, tree.shape, 4)
    assert got.tolist() == [[101, 102, 103, 104], [102, 103, 104, 1], [103, 104, 1, 2], [104, 1, 2, 3],
                            [102, 103, 104, 11], [102, 103, 104, 12], [103, 104, 1, 21]]
    whole = path_windows(buf, 5, nodes, tree.shape, -1)
    assert [r[r >= 0].tolist() for r in whole][6] == [100, 101, 102, 103, 104, 1, 21]
    assert path_windows(buf, 5, nodes, tree.shape, 0).shape == (7, 0)


def test_trees_are_cut_to_the_budget_and_the_context():
    t = SpineTree(5, (4, 3, 2, 1))
    assert fit(t, 9, 99) is t
    assert fit(t, 2, 99) == SpineTree(2, (4, 3))
    assert fit(t, 9, 8) == SpineTree(5, (2,))  # 8 cells: the root, 5 spine nodes, 2 leaves
    assert fit(t, 0, 99) is None and fit(t, 9, 1) is None
    assert 1 + fit(t, 3, 6).depth + sum(fit(t, 3, 6).extra) <= 6


def test_trees_run_to_the_end_of_the_context(engine):
    # the last rounds cut their trees to the cells left (and at one cell a plain step): plain's text
    from mtp_turbo.engine import Engine, EngineConfig

    small = Engine(EngineConfig(model=str(engine.gguf.path), device="cpu", ctx_size=40, progress=False),
                   gguf=engine.gguf)
    s = SamplerConfig(temperature=0.6, seed=5, **CHAIN)
    plain = run(small, s, SpecConfig(draft="none"), n=64)
    assert len(plain) == 40 - len(small.encode_prompt(PROMPT))  # it ran into the context's end
    assert run(small, s, SpecConfig(draft="mtp", draft_tree="5:4,3,2,1"), n=64) == plain


@pytest.mark.parametrize("bad", ["x", "3:a", "0", "3:1,1,1,1", "15:3"])
def test_bad_trees_are_refused(bad):
    with pytest.raises(ConfigError, match="draft-tree"):
        SpecConfig(draft="mtp", draft_tree=bad)


def test_trees_need_the_mtp_drafter_and_the_exact_rule():
    for kw in (dict(draft="ngram"), dict(draft="mtp", spec_sample="greedy")):
        with pytest.raises(ConfigError, match="draft-tree needs"):
            SpecConfig(draft_tree="3:1", **kw)


def test_bench_rows_of_trees():
    from mtp_turbo.benchmark.config import BenchConfig

    cfg = BenchConfig(modes="plain,mtp", draft_trees="3:2,1; 4")
    assert cfg.tree_list == ("3:2,1", "4")
    with pytest.raises(ConfigError, match="draft-trees"):
        dataclasses.replace(cfg, draft_trees="3:q")
    with pytest.raises(ConfigError, match="mtp"):
        BenchConfig(modes="plain,ngram", draft_trees="3:1")


@pytest.mark.gpu
def test_tree_rounds_on_the_gpu_give_plain_decodings_text(model_path):
    # the fused tree rows and the captured round: the same text as plain decoding (itself captured),
    # for two seeds of one sampler shape (the second replays the first one's graphs) and at temp 0
    from mtp_turbo.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(model_path), device="cuda", ctx_size=1024, progress=False))
    for i, s in enumerate((SamplerConfig(temperature=0.6, seed=3, **CHAIN),
                           SamplerConfig(temperature=0.6, seed=9, **CHAIN), SamplerConfig(temperature=0.0))):
        plain = run(eng, s, SpecConfig(draft="none"), n=64)
        for tree in ("3:2,1", "4:2,1"):
            assert run(eng, s, SpecConfig(draft="mtp", draft_tree=tree), n=64) == plain, (s.seed, tree)
            assert eng.last_stats.spec.accepted > 0
            if i < 2:  # a round's graph captured at its shape's first use (a failed capture runs
                # eagerly: none counted), replayed for the next seed of the same sampler shape
                assert (eng.last_stats.captures > 0) == (i == 0), (i, tree, eng.last_stats.captures)
