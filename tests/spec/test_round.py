"""Speculative rounds on the real model: temp-0 parity with plain greedy, and token-identical
output to plain sampling with the same seed at temp > 0 with penalties, for several k."""

import pytest

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.spec.drafters.ngram import ScriptedDrafter
from mtp_turbo.spec.round import RoundStats, speculative_tokens

# Real prompts where prompt lookup finds matches (repeated structure, code), ~128 tokens.
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "def div(a, b):\n    return a / b\n\nclass Calculator:\n    def add(self, a, b):\n        return add(a, b)\n"
    "    def sub(self, a, b):\n        return sub(a, b)\n    def mul(self, a, b):\n",
    "Summary of the text below.\nText: The committee met on Monday to discuss the budget. The committee agreed "
    "that the budget for schools would rise, and that the budget for roads would stay the same. The committee "
    "will meet again next Monday to discuss the budget for parks.\nSummary: The committee met on Monday and agreed",
    "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four, five, six, seven, eight, "
    "nine, ten. One, two, three, four, five,",
]
SAMPLED = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                        presence_penalty=0.4, penalty_last_n=64, seed=1234)
N = 40


@pytest.fixture(scope="module")
def plain(engine):
    out = {}
    for i, p in enumerate(PROMPTS):
        out[("greedy", i)] = engine.generate_ids(p, sampler=SamplerConfig(temperature=0.0), max_tokens=N)
        out[("sampled", i)] = engine.generate_ids(p, sampler=SAMPLED, max_tokens=N)
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_greedy_parity_ngram(engine, plain, k):
    spec = SpecConfig(draft="ngram", draft_tokens=k)
    accepted = 0
    for i, p in enumerate(PROMPTS):
        got = engine.generate_ids(p, sampler=SamplerConfig(temperature=0.0), max_tokens=N, spec=spec)
        assert got == plain[("greedy", i)]
        accepted += engine.last_stats.spec.accepted
    assert accepted > 0  # the drafter did real work: rounds emitted more than one token


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_sampled_is_token_identical_to_plain_with_same_seed(engine, plain, k):
    spec = SpecConfig(draft="ngram", draft_tokens=k)
    for i, p in enumerate(PROMPTS):
        got = engine.generate_ids(p, sampler=SAMPLED, max_tokens=N, spec=spec)
        assert got == plain[("sampled", i)]
    # and reproducible run to run
    assert engine.generate_ids(PROMPTS[0], sampler=SAMPLED, max_tokens=N, spec=spec) == plain[("sampled", 0)]


def test_oracle_drafter_with_errors_is_still_exact(engine, plain):
    """A drafter that knows the plain output but corrupts every third draft: accepted/rejected
    paths both occur, the text must still be plain sampling's, and stats must add up."""
    target = plain[("sampled", 1)]
    ids = engine.encode_prompt(PROMPTS[1])

    def fn(tokens, k):
        pos = len(tokens) - len(ids)
        d = target[pos : pos + k]
        return [t if (pos + j) % 3 else (t + 1) % 1000 for j, t in enumerate(d)]

    spec = SpecConfig(draft="ngram", draft_tokens=3)
    sp = RoundStats("scripted", spec.draft_tokens)
    engine.start(ids)
    got = []
    for toks in speculative_tokens(engine, SAMPLED, spec, N, ScriptedDrafter(fn), sp):
        got += toks
    got = got[:N]
    assert got == target
    assert 0 < sp.accepted < sp.drafted
    assert sp.drafted == sum(sp.drafted_per_position)
    assert sp.accepted == sum(sp.accepted_per_position)
    assert sp.tokens_per_round == pytest.approx((sp.accepted + sp.rounds) / sp.rounds)


def test_stop_token_inside_a_round_ends_where_plain_does(engine, plain):
    seq = plain[("greedy", 2)]
    stop = seq[10]  # a token plain greedy emits at index 10 (maybe earlier too)
    first = seq.index(stop)
    spec = SpecConfig(draft="ngram", draft_tokens=4)
    g = SamplerConfig(temperature=0.0)
    a = engine.generate_ids(PROMPTS[2], sampler=g, max_tokens=N, stop_ids=(stop,))
    b = engine.generate_ids(PROMPTS[2], sampler=g, max_tokens=N, stop_ids=(stop,), spec=spec)
    assert a == b == seq[:first]
    assert engine.last_stats.finish_reason == "stop"
    # the cache holds exactly the committed text: continuing gives plain's continuation
    c = engine.generate_ids(PROMPTS[2], sampler=g, max_tokens=7, spec=spec)
    assert c == seq[:7]


def test_max_tokens_inside_a_round(engine, plain):
    spec = SpecConfig(draft="ngram", draft_tokens=4)
    for n in (1, 5, 13):
        got = engine.generate_ids(PROMPTS[2], sampler=SamplerConfig(temperature=0.0), max_tokens=n, spec=spec)
        assert got == plain[("greedy", 2)][:n]


@pytest.mark.parametrize("draft", ["ngram", "mtp"])
def test_plain_step_programs_inside_speculation_keep_text_and_drafts(model_path, plain, draft, monkeypatch):
    """Where the chooser picks k = 0, programs of 4 plain steps run (as plain decoding runs them):
    the text stays plain sampling's, and the rounds that draft afterwards accept what they do after
    1-step k = 0 rounds (the MTP head reads the main model's state of every row the steps ran)."""
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.spec import round as round_mod

    class Script:  # per update (a k = 0 step is one): 8 of k = 0, then 8 rounds of k = 3, ...
        def __init__(self, k_max, adaptive=True):
            self.i = 0

        def choose(self):
            return 3 if (self.i // 8) % 2 else 0

        def update(self, *args, **kw):
            self.i += 1

    monkeypatch.setattr(round_mod, "KChooser", Script)
    spec = SpecConfig(draft=draft, draft_tokens=3, adaptive=True)
    # greedy: drafts made from stale states change what is accepted (29 rounds against 31 when
    # the steps did not store their rows)
    got = {}
    for steps in (1, 4):
        e = Engine(EngineConfig(model=str(model_path), device="cpu", ctx_size=2048, progress=False,
                                decode_steps=steps, cpu_weights="f32"))  # as the fixture's engine (plain's text)
        ids = e.generate_ids(PROMPTS[2], sampler=SamplerConfig(temperature=0.0), max_tokens=N, spec=spec)
        st = e.last_stats.spec
        got[steps] = ids, st.rounds, st.k_counts, st.drafted_per_position, st.accepted_per_position
    assert got[1][0] == got[4][0] == plain[("greedy", 2)]
    assert got[1][1:] == got[4][1:]
    counts = got[4][2]
    assert counts[0] >= 16  # plain-step programs ran
    if draft == "mtp":  # and rounds that draft after them (the n-gram drafter may find no match)
        assert sum(v for k, v in counts.items() if k) >= 4 and sum(got[4][4]) > 0, got[4]


def test_draft_tokens_auto_is_three_at_temp_0_and_two_when_sampling(engine):
    # the default k (0 = auto) becomes the measured best per temperature and device; a k given stays
    assert SpecConfig().draft_tokens == 0
    assert SpecConfig().for_sampler(True).draft_tokens == 3 and SpecConfig().for_sampler(False).draft_tokens == 2
    assert SpecConfig(draft_tokens=4).for_sampler(False).draft_tokens == 4
    assert SpecConfig().for_sampler(True, cpu=True).draft_tokens == SpecConfig().for_sampler(False, cpu=True).draft_tokens == 2
    for s in (SamplerConfig(temperature=0.0), SAMPLED):  # the engine runs on the CPU: 2 at every temperature
        engine.generate_ids(PROMPTS[2], sampler=s, max_tokens=6, spec=SpecConfig(draft="ngram"))
        assert engine.last_stats.spec.k == 2
