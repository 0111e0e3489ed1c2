"""Coupled MTP drafts at temp > 0 (set_sampler(..., coupling=True), --draft-coupling): each draft
is the token the verifier's own draw would pick from the head's distribution (whole sampler chain,
penalties over history ++ earlier drafts, inverse CDF in token-id order, uniform u(seed, position
of the draft)), checked against a plain reference over sessions with rollbacks and reduced heads;
greedy samplers keep the argmax; and on the real
model the output stays token-identical to plain sampling with the same seed."""

import dataclasses
import random

import pytest
import torch

from mtp_turbo.models.mtp_head import reference_drafts
from mtp_turbo.spec.drafters.mtp import MTPDrafter
from mtp_turbo.sampling.chain import penalty_counts, probs_from_logits
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.sampling.draw import draw
from mtp_turbo.sampling.rng import uniforms

SINK, WINDOW = 4, 16
CFG = SamplerConfig(temperature=0.9, top_k=12, top_p=0.95, min_p=0.02, repeat_penalty=1.1,
                    presence_penalty=0.3, frequency_penalty=0.1, penalty_last_n=8, seed=77)

# tiny, one_thread, commit_round: tests/spec/drafters/conftest.py
pytestmark = pytest.mark.usefixtures("one_thread")


def reference_coupled(tiny, head, tokens, hidden, drafts, cfg):
    """The drafts the rule asks for given the chain's inputs `drafts` (teacher forced): the head's
    logits scattered into the full vocabulary (-inf elsewhere), the whole chain with penalty counts
    of history ++ drafts[:j] for row j, drawn with u(seed, len(tokens) + j)."""
    k, V = len(drafts), tiny.V
    _, lg = reference_drafts(head, tokens, hidden, k, SINK, WINDOW, forced=drafts)
    full = torch.full((k, V), float("-inf"))
    cols = torch.arange(V) if head.vocab_ids is None else head.vocab_ids
    full[:, cols] = lg
    counts = penalty_counts(torch.tensor(tokens + drafts[: k - 1]), k, V, cfg.penalty_last_n)
    p = probs_from_logits(full.double(), counts.double(), cfg)
    return draw(p, uniforms(cfg.seed, torch.arange(len(tokens), len(tokens) + k))).tolist(), p


@pytest.mark.parametrize("reduced", [False, True])
def test_coupled_drafts_are_the_verifiers_draw_from_the_head(reduced, tiny, commit_round):
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40))) if reduced else None
    head = tiny.head(vocab_ids=ids, seed=2)
    rng = random.Random(5 + reduced)
    main = tiny.main(2)
    drs = [MTPDrafter(head, capacity=400, sink=SINK, window=WINDOW)]
    for d in drs:
        d.set_sampler(CFG, coupling=True)
    tokens = [rng.randrange(tiny.V) for _ in range(30)]
    H = main.hidden(tokens)
    for d in drs:
        d.on_prefill(0, len(tokens) - 1, H[: len(tokens) - 1].clone(), tokens)
        d.begin(tokens)
    not_argmax = drawn_low = 0
    for r in range(25):
        k = rng.choice((1, 3, 4))
        got = drs[0].propose(tokens, k)
        hid = main.hidden(tokens)[: len(tokens) - 1]
        want, p = reference_coupled(tiny, head, tokens, hid, got, CFG)
        assert got == want, (r, got, want)
        not_argmax += sum(int(p[j].argmax()) != got[j] for j in range(k))
        drawn_low += sum(bool(p[j, got[j]] < 0.5 * p[j].max()) for j in range(k))
        tokens = commit_round(rng, drs, main, tokens, got, tiny.V, 0.15, 8)  # with rollbacks
    assert not_argmax > 0 and drawn_low > 0  # the draws really are draws, not the argmax


def test_greedy_or_off_keeps_the_argmax(tiny):
    """coupling with a greedy sampler, or coupling off, drafts exactly the penalised argmax."""
    head = tiny.head(seed=4)
    main = tiny.main(4)
    toks = [random.Random(9).randrange(tiny.V) for _ in range(40)]
    H = main.hidden(toks)[:39]
    outs = []
    for cfg, cpl in ((dataclasses.replace(CFG, temperature=0.0), True), (dataclasses.replace(CFG, temperature=0.0), False),
                     (CFG, False)):
        d = MTPDrafter(head, capacity=200, sink=SINK, window=WINDOW)
        d.set_sampler(cfg, coupling=cpl)
        assert d.sampler.draw is None
        d.on_prefill(0, 39, H.clone(), toks)
        d.begin(toks)
        outs.append(d.propose(toks, 4))
    assert outs[0] == outs[1] == outs[2]  # same penalties: the argmax does not depend on temperature
    with pytest.raises(AssertionError, match="ascending"):
        MTPDrafter(tiny.head(vocab_ids=torch.tensor([5, 3, 9]), seed=4), capacity=50, sink=SINK,
                   window=WINDOW).set_sampler(CFG, coupling=True)


def test_engine_output_is_plain_sampling_with_coupled_mtp(engine):
    """The shipped head with coupled drafts and penalties: the tokens are those of plain sampling
    with the same seed, and drafts get accepted."""
    from mtp_turbo.spec.config import SpecConfig

    s = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                      presence_penalty=0.4, seed=11)
    prompt = "Write a short story about a lighthouse keeper."
    plain = engine.generate_ids(prompt, sampler=s, max_tokens=40)
    spec = SpecConfig(draft="mtp", draft_tokens=3, draft_coupling=True)
    assert engine.generate_ids(prompt, sampler=s, max_tokens=40, spec=spec) == plain
    assert engine.last_stats.spec.accepted > 0
