"""The drafter's penalised drafts over a bounded window (spec/drafters/mtp.py): the window staged as
head indices and each draft picked by sample_tokens over window ++ earlier drafts gives the drafts
the staged-counts path gives (a [N] count array, updated per chain step by the draft entering and
the committed token leaving), over rounds with random acceptance and rollbacks, a full and a
reduced head (tokens without a head row in the window), windows shorter and longer than the
sequence. And the penalties do move drafts here, so the comparison means something."""

import random

import pytest
import torch

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.drafters import mtp as mtp_mod
from mtp_turbo.spec.drafters import mtp_sampler
from mtp_turbo.spec.drafters.mtp import MTPDrafter

pytestmark = pytest.mark.usefixtures("one_thread")


def run(tiny, commit_round, head, sampler, seed, rounds=40, capacity=400):
    rng = random.Random(seed)
    V, main = tiny.V, tiny.main(seed, n=1200)
    seq = MTPDrafter(head, capacity=capacity, sink=4, window=16, kernels="torch")
    seq.set_sampler(sampler)
    old = mtp_sampler.SEQ_WINDOW_MAX
    mtp_sampler.SEQ_WINDOW_MAX = 0  # this one stages counts
    try:
        cnt = MTPDrafter(head, capacity=capacity, sink=4, window=16, kernels="torch")
        cnt.set_sampler(sampler)
    finally:
        mtp_sampler.SEQ_WINDOW_MAX = old
    raw = MTPDrafter(head, capacity=capacity, sink=4, window=16, kernels="torch")  # no penalties
    assert seq.sampler.seq is not None and cnt.sampler.seq is None
    ds = (seq, cnt, raw)
    # a repetitive prompt: the window holds the likely tokens, so the penalties bite
    tokens = [rng.randrange(12) for _ in range(rng.randrange(10, 30))]
    H = main.hidden(tokens)
    for d in ds:
        d.on_prefill(0, len(tokens) - 1, H[: len(tokens) - 1].clone(), tokens)
        d.begin(tokens)
    moved = 0
    for r in range(rounds):
        k = rng.choice((1, 2, 3, 4))
        got = seq.propose(tokens, k)
        assert cnt.propose(tokens, k) == got, r
        moved += raw.propose(tokens, k) != got
        tokens = commit_round(rng, ds, main, tokens, got, V, p_rollback=0.15, span=20)
    return moved


@pytest.mark.parametrize("last_n", [6, 64])
def test_window_sequence_drafts_equal_staged_counts(tiny, commit_round, last_n):
    pen = SamplerConfig(temperature=0.7, repeat_penalty=1.6, presence_penalty=0.8, frequency_penalty=0.3,
                        penalty_last_n=last_n, seed=1)
    assert run(tiny, commit_round, tiny.head(seed=5), pen, seed=2) > 0
    ids = torch.tensor(sorted(random.Random(4).sample(range(tiny.V), 50)))  # tokens 12.. mostly rowless
    run(tiny, commit_round, tiny.head(vocab_ids=ids, seed=6), pen, seed=3)  # equal drafts (asserted inside)


def test_whole_history_windows_stage_counts(tiny):
    d = MTPDrafter(tiny.head(), capacity=100, sink=4, window=16, kernels="torch")
    d.set_sampler(SamplerConfig(temperature=0.7, repeat_penalty=1.3, penalty_last_n=-1))
    assert d.sampler.seq is None  # -1: the whole history, as counts
    d.set_sampler(SamplerConfig(temperature=0.7, repeat_penalty=1.3, penalty_last_n=32))
    assert d.sampler.seq is not None and d.sampler.seq[1].shape[0] == 32 + mtp_mod.GRAPH_K
