"""The engine's device programs are kept per sampler shape, not per seed or value; drafters are kept
across requests that switch draft modes; both caches are bounded.

CPU: which programs exist (one per shape), that reused programs honour each call's values (same
text as the call made first on a fresh engine), that a switch back to a drafter finds the same
drafter object, the bounds. GPU: the same with CUDA graphs, and no capture after a shape's first
call (a new seed or temperature replays the graphs it captured)."""

import pytest

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig

PROMPT = "The old lighthouse keeper"
CHAIN = dict(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05)


def _texts(eng, samplers, spec=None, n=12):
    return [eng.generate_ids(PROMPT, sampler=s, max_tokens=n, spec=spec) for s in samplers]


def test_seeds_and_values_share_a_program_and_keep_their_text(engine):
    engine.kept.release_drafters()
    a, b = SamplerConfig(**CHAIN, seed=1), SamplerConfig(**CHAIN, seed=2)
    c = SamplerConfig(**{**CHAIN, "temperature": 1.3, "top_p": 0.8, "min_p": 0.1}, seed=3)
    first = _texts(engine, [a])
    before = len(engine.kept.programs)
    got = _texts(engine, [b, c, a, b])
    assert len(engine.kept.programs) == before, "a new seed or value made a program"
    assert got[2] == first[0] and got[0] == got[3] and len({tuple(t) for t in got[:3]}) == 3
    # a program made for c's values on its own gives c's text: reuse changed nothing
    engine.kept.drop(lambda key: True)
    assert _texts(engine, [c]) == [got[1]]
    # a different shape (temperature 1: no temperature stage) is another program
    _texts(engine, [SamplerConfig(**{**CHAIN, "temperature": 1.0})])
    assert len(engine.kept.programs) == 2


def test_switching_draft_modes_keeps_the_drafter(engine):
    engine.kept.release_drafters()
    g = SamplerConfig(temperature=0.0)
    mtp, ngram = SpecConfig(draft="mtp", draft_tokens=2), SpecConfig(draft="ngram", draft_tokens=3)
    plain = _texts(engine, [g])[0]
    assert _texts(engine, [g], mtp)[0] == plain
    head = engine.drafter
    assert _texts(engine, [g])[0] == plain and engine.drafter is None
    assert _texts(engine, [g], ngram)[0] == plain
    assert _texts(engine, [g], mtp)[0] == plain and engine.drafter is head, "the MTP drafter was rebuilt"
    assert engine.last_stats.spec.accepted > 0
    engine.kept.release_drafters()


def test_program_and_drafter_caches_are_bounded(engine):
    from mtp_turbo.spec.programs import MAX_PROGRAMS

    engine.kept.release_drafters()
    for last_n in range(1, MAX_PROGRAMS + 4):  # each window length is its own shape
        _texts(engine, [SamplerConfig(**CHAIN, repeat_penalty=1.1, penalty_last_n=last_n)], n=2)
        assert len(engine.kept.programs) <= MAX_PROGRAMS
    assert len(engine.kept.programs) == MAX_PROGRAMS


@pytest.mark.gpu
def test_cuda_new_seeds_and_values_replay_captured_graphs(model_path):
    """On CUDA a seed or a value not seen before captures no plain step: its program's graphs read the
    values from their device buffer; the text is what a fresh engine gives for that sampler, in
    plain decoding and in MTP rounds (with penalties: the drafter's chain reads them too)."""
    from mtp_turbo.engine import Engine, EngineConfig

    eng, fresh = (Engine(EngineConfig(model=str(model_path), device="cuda", progress=False)) for _ in range(2))
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    pen = dict(repeat_penalty=1.1, presence_penalty=0.3)
    runs = [(SamplerConfig(**CHAIN, seed=s), sp) for s in (1, 2, 3) for sp in (None, spec)]
    runs += [(SamplerConfig(**{**CHAIN, "temperature": t, "top_p": p}, **pen, seed=9), sp)
             for t, p in ((0.6, 0.9), (0.9, 0.7)) for sp in (None, spec)]
    for i, (s, sp) in enumerate(runs):
        got = eng.generate_ids(PROMPT, sampler=s, max_tokens=48, spec=sp)
        if sp is None and i not in (0, 6):  # plain steps of a shape met before (rounds' shapes also
            assert eng.last_stats.captures == 0, (i, s)  # follow the acceptance: checked by text only)
        fresh.kept.release_drafters()
        fresh.kept.drop(lambda key: True)
        assert fresh.generate_ids(PROMPT, sampler=s, max_tokens=48, spec=sp) == got, (i, s, sp)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("poison", ["all nan", "one nan", "one inf", "one -inf"])
def test_non_finite_logits_are_an_error_not_a_token(engine, monkeypatch, temperature, poison):
    import torch

    from mtp_turbo.errors import MtpTurboError

    real = engine.forward

    def nan_forward(n_rows, pad_to=0):
        logits, hidden = real(n_rows, pad_to)
        if poison == "all nan":
            return torch.full_like(logits, float("nan")), hidden
        logits = logits.clone()
        logits[:, 7] = float(poison.split()[1])  # one entry a row, away from the argmax
        return logits, hidden

    monkeypatch.setattr(engine, "forward", nan_forward)
    with pytest.raises(MtpTurboError, match="not finite"):
        engine.generate_ids(PROMPT, sampler=SamplerConfig(**{**CHAIN, "temperature": temperature}), max_tokens=4)
    monkeypatch.undo()
    assert len(engine.generate_ids(PROMPT, sampler=SamplerConfig(temperature=0.0), max_tokens=4)) == 4
