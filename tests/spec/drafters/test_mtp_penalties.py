"""The MTP drafter under sampler penalties: every draft is the argmax of the head's logits after
the sampling chain's own penalty stage, over the window the verifier uses at that row (committed
tokens ++ the earlier drafts of the chain, last penalty_last_n of them), checked against a plain
reference (full-vocab logits, penalty_counts, the greedy chain) over sessions with chained drafts
that repeat window tokens, tokens leaving the window, rollbacks and reduced heads; without
penalties nothing changes."""

import dataclasses
import random

import pytest
import torch

from mtp_turbo.models.mtp_head import reference_drafts
from mtp_turbo.spec.drafters.mtp import RUN_WORDS, MTPDrafter
from mtp_turbo.sampling.chain import penalty_counts, probs_from_logits
from mtp_turbo.sampling.config import SamplerConfig

SINK, WINDOW = 4, 16
PEN = SamplerConfig(temperature=0.6, top_k=0, top_p=0.95, min_p=0.05, repeat_penalty=1.15,
                    presence_penalty=0.3, frequency_penalty=0.1, penalty_last_n=8)
STRONG = dataclasses.replace(PEN, repeat_penalty=1.3, presence_penalty=0.6, frequency_penalty=0.3)


# tiny, one_thread, watch_chain, commit_round: tests/spec/drafters/conftest.py
pytestmark = pytest.mark.usefixtures("one_thread")


def reference_penalised(tiny, head, tokens, hidden, drafts, cfg, use_drafts=True):
    """The drafts the rule asks for, given the chain's inputs `drafts` (teacher forced): the head's
    logits scattered into the full vocabulary (-inf elsewhere), then the sampling chain at temp 0
    with penalty counts of history ++ drafts[:j] for row j (use_drafts=False: the committed
    history only, to show the drafts' counts matter)."""
    k, V = len(drafts), tiny.V
    _, lg = reference_drafts(head, tokens, hidden, k, SINK, WINDOW, forced=drafts)
    full = torch.full((k, V), float("-inf"))
    cols = torch.arange(V) if head.vocab_ids is None else head.vocab_ids
    full[:, cols] = lg
    hist = tokens + (drafts[: k - 1] if use_drafts else [])
    counts = penalty_counts(torch.tensor(hist), k, V, cfg.penalty_last_n) if use_drafts else \
        penalty_counts(torch.tensor(hist), 1, V, cfg.penalty_last_n).expand(k, V)
    p = probs_from_logits(full.double(), counts.double(), dataclasses.replace(cfg, temperature=0.0))
    return p.argmax(-1).tolist()


def session(tiny, commit_round, head, cfg, seed, rounds, ks=(2, 3, 4)):
    """A drafter with the sampler set; every propose is checked against the reference. Returns stats."""
    V = tiny.V
    rng = random.Random(seed)
    main = tiny.main(seed)
    var = MTPDrafter(head, capacity=400, sink=SINK, window=WINDOW)
    drs = [var]
    for d in drs:
        d.set_sampler(cfg)
    tokens = [rng.randrange(V) for _ in range(rng.randrange(20, 50))]
    H = main.hidden(tokens)
    for d in drs:
        d.on_prefill(0, len(tokens) - 1, H[: len(tokens) - 1].clone(), tokens)
        d.begin(tokens)
    st = {"repeats": 0, "drafts_count": 0, "differs_raw": 0}
    for r in range(rounds):
        k = rng.choice(ks)
        got = var.propose(tokens, k)
        hid = main.hidden(tokens)[: len(tokens) - 1]
        want = reference_penalised(tiny, head, tokens, hid, got, cfg)
        assert got == want, (r, got, want)
        assert var.last_drafts.tolist() == got
        # chained drafts that repeat a token of their window (committed or an earlier draft)
        L = cfg.penalty_last_n
        for j in range(1, k):
            win = (tokens + got[:j])[-L:] if L > 0 else tokens + got[:j]
            st["repeats"] += got[j] in win
        st["drafts_count"] += want != reference_penalised(tiny, head, tokens, hid, got, cfg, use_drafts=False)
        raw, _ = reference_drafts(head, tokens, hid, k, SINK, WINDOW, forced=got)
        st["differs_raw"] += raw != got
        tokens = commit_round(rng, drs, main, tokens, got, V, 0.1, 10)  # with rollbacks
    return st


@pytest.mark.parametrize("reduced", [False, True])
def test_drafts_are_argmax_of_penalised_logits(reduced, tiny, commit_round):
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40))) if reduced else None
    st = session(tiny, commit_round, tiny.head(vocab_ids=ids), PEN, seed=1 + reduced, rounds=30)
    assert st["differs_raw"] > 0  # the penalties did move drafts
    assert st["drafts_count"] > 0  # the earlier drafts' counts did matter
    assert st["repeats"] > 0  # chained drafts repeating a window token were checked


@pytest.mark.parametrize("last_n", [-1, 3])
def test_windows_all_history_and_short(last_n, tiny, commit_round):
    """-1: the whole history (nothing leaves); 3: shorter than the chain (drafts leave too)."""
    cfg = dataclasses.replace(PEN, penalty_last_n=last_n, repeat_penalty=1.1, presence_penalty=0.3,
                              frequency_penalty=0.0)
    st = session(tiny, commit_round, tiny.head(seed=1), cfg, seed=5, rounds=20, ks=(3, 4))
    assert st["differs_raw"] > 0


def test_greedy_with_penalties_and_negative_penalties(tiny, commit_round):
    """temp 0 with penalties uses them too; rewarding penalties (r < 1, presence < 0) as well."""
    greedy = SamplerConfig(temperature=0.0, repeat_penalty=1.2, presence_penalty=0.5, penalty_last_n=16)
    assert session(tiny, commit_round, tiny.head(), greedy, seed=7, rounds=12)["differs_raw"] > 0
    reward = dataclasses.replace(PEN, repeat_penalty=0.8, presence_penalty=-0.7, frequency_penalty=-0.2)
    st = session(tiny, commit_round, tiny.head(), reward, seed=8, rounds=12)
    assert st["differs_raw"] > 0 and st["repeats"] > 0


def test_without_penalties_nothing_changes(tiny):
    """No sampler, None, greedy or temp > 0 without penalties (or penalty_last_n 0): the drafts,
    logits and the staged input layout are exactly those of a drafter never told a sampler."""
    head = tiny.head()
    main = tiny.main(3)
    rng = random.Random(4)
    toks = [rng.randrange(tiny.V) for _ in range(40)]
    H = main.hidden(toks)[:39]
    cfgs = [None, SamplerConfig(temperature=0.0), SamplerConfig(temperature=0.6, top_p=0.9),
            dataclasses.replace(PEN, penalty_last_n=0), dataclasses.replace(PEN, order=("top_k", "temperature"))]
    outs = []
    for cfg in [False] + cfgs:
        d = MTPDrafter(head, capacity=200, sink=SINK, window=WINDOW)
        if cfg is not False:
            d.set_sampler(cfg)
            assert d.sampler.pen is None
        d.on_prefill(0, 39, H.clone(), toks)
        d.begin(toks)
        outs.append((d.propose(toks, 4), d.last_logits.clone()))
        d.cells.truncate(36)
        assert d._stage(toks, 36, 38, 3).shape == (2 * 3 + 3 * RUN_WORDS + 3,)
    for drafts, logits in outs[1:]:
        assert drafts == outs[0][0] and torch.equal(logits, outs[0][1])
    # huge penalties over the whole history: no draft may repeat a window token (+), every draft
    # must (-); the raw drafts break one of the two, so one of them moves
    moved = []
    for sign in (1.0, -1.0):
        d = MTPDrafter(head, capacity=200, sink=SINK, window=WINDOW)
        d.set_sampler(dataclasses.replace(PEN, presence_penalty=50.0 * sign, penalty_last_n=-1))
        d.on_prefill(0, 39, H.clone(), toks)
        d.begin(toks)
        got = d.propose(toks, 4)
        assert all((t in toks + got[:j]) == (sign < 0) for j, t in enumerate(got)), (sign, got)
        moved.append(got != outs[0][0])
        d.set_sampler(None)  # and back: unchanged again
        assert d.propose(toks, 4) == outs[0][0]
    assert any(moved)


def test_static_chain_with_penalties_has_no_host_syncs(tiny, watch_chain):
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40)))
    dr = MTPDrafter(tiny.head(vocab_ids=ids), capacity=300, sink=SINK, window=WINDOW)
    dr.set_sampler(PEN)
    ran = watch_chain(dr)  # each _chain call runs under NoSync
    rng = random.Random(1)
    toks = [rng.randrange(tiny.V) for _ in range(40)]
    dr.on_prefill(0, 39, tiny.main(0).hidden(toks)[:39], toks)
    dr.begin(toks)
    for k in (1, 4):
        assert len(dr.propose(toks, k)) == k
    assert len(ran) == 2
