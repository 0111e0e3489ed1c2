"""The drafter's round on the fused Triton kernels (models/mtp_step.FusedMTPStep, CUDA's default),
run in Triton's CPU interpreter in fp32: the same drafts as the from-scratch reference and logits
equal to fp32 rounding, over sessions with chunked prefill, catch-up batches, chains of k = 1..4,
rollbacks, a reduced head, sampler penalties, and contexts past sink + window (attention over more than one chunk of read cells); the same K/V cells
as the torch step; and no host sync in the captured work."""

import random

import pytest
import torch

pytest.importorskip("triton")

from mtp_turbo.models.mtp_head import reference_drafts  # noqa: E402
from mtp_turbo.models.mtp_step import FusedMTPStep  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.drafters.mtp import MTPDrafter  # noqa: E402

pytestmark = [pytest.mark.interpret, pytest.mark.usefixtures("one_thread")]


def session(tiny, head, sink, window, seed, rounds, prompt=(20, 60), capacity=400, sampler=None):
    rng = random.Random(seed)
    V = tiny.V
    main = tiny.main(seed, n=1200)
    fused = MTPDrafter(head, capacity=capacity, sink=sink, window=window, kernels="triton")
    plain = MTPDrafter(head, capacity=capacity, sink=sink, window=window, kernels="torch")
    assert isinstance(fused.step, FusedMTPStep) and not isinstance(plain.step, FusedMTPStep)
    both = (fused, plain)
    for d in both:
        d.set_sampler(sampler)
    tokens = [rng.randrange(V) for _ in range(rng.randrange(*prompt))]
    n_rows = len(tokens) - 1
    H = main.hidden(tokens)
    for c0 in range(0, n_rows, 17):
        for d in both:
            d.on_prefill(c0, min(n_rows, c0 + 17), H[c0: min(n_rows, c0 + 17)].clone(), tokens)
    for d in both:
        d.begin(tokens)
    for r in range(rounds):
        k = rng.choice((1, 2, 3, 4))
        got = fused.propose(tokens, k)
        assert plain.propose(tokens, k) == got, r
        torch.testing.assert_close(fused.last_logits, plain.last_logits, rtol=1e-4, atol=1e-4)
        n = len(tokens) - 1  # committed cells of both caches agree (chain cells past them may differ)
        torch.testing.assert_close(fused.k_cache[:n], plain.k_cache[:n], rtol=1e-4, atol=1e-5)
        if sampler is None:
            want, want_logits = reference_drafts(head, tokens, main.hidden(tokens)[:n], k, sink, window)
            assert got == want, (r, got, want)
            torch.testing.assert_close(fused.last_logits, want_logits, rtol=1e-4, atol=1e-4)
        a = rng.randrange(0, k + 1)
        m = len(tokens)
        new = tokens + got[:a] + [rng.randrange(V)]
        for d in both:
            d.observe(new, a, main.hidden(new)[m - 1: m + a].clone())
        tokens = new
        if rng.random() < 0.15:
            cut = rng.randrange(max(2, len(tokens) - 20), len(tokens))
            tokens = tokens[:cut]
            for d in both:
                d.truncate(cut)
    # attention over the read cells runs a program a chunk of cells, merged by the last to arrive:
    # its arrival counters end every launch at zero (a graph replay finds them as the first did)
    assert fused.step.cell_scratch and not any(s[3].any() for s in fused.step.cell_scratch.values())
    return len(tokens)


def test_fused_drafts_equal_reference(tiny):
    session(tiny, tiny.head(), 4, 16, seed=1, rounds=12)


def test_a_head_on_a_qwen2_block_drafts_the_reference_drafts(tiny_qwen):
    # pre-norms only, SwiGLU, no embedding scale, RoPE at the model's base: the fused step's plan and
    # the torch step follow the head's family as the reference does
    session(tiny_qwen, tiny_qwen.head(), 4, 16, seed=4, rounds=10)
    ids = torch.tensor(sorted(random.Random(5).sample(range(tiny_qwen.V), 40)))
    session(tiny_qwen, tiny_qwen.head(vocab_ids=ids, seed=5), 8, 64, seed=5, rounds=6, prompt=(90, 130))


def test_fused_reduced_head_long_context_and_penalties(tiny):
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40)))
    # sink + window + chain past CELL_CHUNK (64) cells: attention over more than one chunk, merged
    assert session(tiny, tiny.head(vocab_ids=ids, seed=2), 8, 64, seed=2, rounds=8, prompt=(90, 130)) > 8 + 64
    pen = SamplerConfig(temperature=0.7, repeat_penalty=1.3, presence_penalty=0.5, penalty_last_n=8)
    session(tiny, tiny.head(seed=3), 4, 16, seed=3, rounds=6, sampler=pen)


def test_fused_chain_has_no_host_syncs(tiny, watch_chain):
    dr = MTPDrafter(tiny.head(), capacity=300, sink=4, window=16, kernels="triton")
    ran = watch_chain(dr)
    toks = [random.Random(1).randrange(tiny.V) for _ in range(40)]
    dr.on_prefill(0, 39, tiny.main(0).hidden(toks)[:39], toks)
    dr.begin(toks)
    assert len(dr.propose(toks, 3)) == 3 and len(ran) == 1
