"""Programs launched before the previous one is read (EngineConfig.pipeline, program.launch_after,
the drafters' prepare_after): on the real model and the shipped MTP head, on the CPU (where auto
leaves it off, so "on" forces it), the text is plain decoding's (MTP and n-gram rounds), every MTP
round drafts what it drafts without pipelining (the same acceptance at each position: the
outcome-staged read cells and the device-picked catch-up row are the host's), a stop or a closed
stream inside a pipelined run leaves the session as plain decoding leaves it, and plain decoding's
programs of steps, launched ahead, give the same text."""

import pytest

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig

PROMPT = "The history of the printing press begins in"
GREEDY = SamplerConfig(temperature=0.0)
SAMPLED = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                        presence_penalty=0.4, penalty_last_n=64, seed=7)
N = 24


@pytest.fixture(scope="module")
def engines(model_path, engine):
    from mtp_turbo.engine import Engine, EngineConfig

    cfg = dict(model=str(model_path), device="cpu", ctx_size=2048, progress=False, cpu_weights="f32")  # as `engine`
    on = Engine(EngineConfig(**cfg, pipeline="on", decode_steps=4), gguf=engine.gguf)  # plain: programs of 4 steps
    off = Engine(EngineConfig(**cfg, pipeline="off"), gguf=engine.gguf)
    assert on.pipelined and not off.pipelined and not engine.pipelined  # auto: off on the CPU
    return on, off


@pytest.mark.parametrize("sampler,spec", [
    (GREEDY, SpecConfig(draft="mtp", draft_tokens=3)),
    (SAMPLED, SpecConfig(draft="mtp", draft_tokens=3)),  # the penalty window read on the device
    (SamplerConfig(temperature=0.8, top_p=0.9, seed=3), SpecConfig(draft="mtp", draft_tokens=2, draft_coupling=True)),
    (GREEDY, SpecConfig(draft="mtp", draft_tokens=4, draft_sink=4, draft_window=8)),  # the window slides
], ids=["greedy", "sampled_penalties", "coupled", "small_window"])
def test_pipelined_rounds_give_plain_text_and_the_same_drafts(engines, sampler, spec):
    on, off = engines
    plain = off.generate_ids(PROMPT, sampler=sampler, max_tokens=N)
    ref = off.generate_ids(PROMPT, sampler=sampler, max_tokens=N, spec=spec)
    s_off = off.last_stats.spec
    got = on.generate_ids(PROMPT, sampler=sampler, max_tokens=N, spec=spec)
    s_on = on.last_stats.spec
    assert got == ref == plain
    assert s_off.ahead == 0 and s_on.ahead >= s_on.rounds // 2, (s_on.ahead, s_on.rounds)
    # the same drafts: the same rounds, accepted at the same positions
    assert (s_on.rounds, s_on.accepted_per_position) == (s_off.rounds, s_off.accepted_per_position)
    assert s_on.accepted > 0


@pytest.mark.parametrize("sampler", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_pipelined_ngram_rounds_give_plain_text(engines, sampler):
    # the n-gram drafter looks up on the device (tok_buf, n_dev): its rounds go ahead too, and
    # every round drafts k (no match: the last token repeated)
    on, off = engines
    prompt = "One, two, three, four, five, six, seven. One, two, three,"
    spec = SpecConfig(draft="ngram", draft_tokens=3)
    plain = off.generate_ids(prompt, sampler=sampler, max_tokens=N)
    assert on.generate_ids(prompt, sampler=sampler, max_tokens=N, spec=spec) == plain
    s = on.last_stats.spec
    # k drafts a round but in the budget's last 2k + 2 tokens (a round launched ahead drafts what fits)
    assert s.ahead >= s.rounds // 2 and s.k_counts.get(3, 0) >= s.rounds - 8, (s.ahead, s.k_counts)
    assert s.accepted > 0 or not sampler.greedy


def test_whole_history_penalties_wait_for_the_round_before(engines):
    # window counts over the whole history are staged on the host: those rounds are not launched ahead
    on, off = engines
    s = SamplerConfig(temperature=0.0, repeat_penalty=1.3, penalty_last_n=-1)
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    assert on.generate_ids(PROMPT, sampler=s, max_tokens=24, spec=spec) == off.generate_ids(PROMPT, sampler=s,
                                                                                             max_tokens=24)
    assert on.last_stats.spec.ahead == 0


def test_a_stop_or_a_closed_stream_inside_pipelined_rounds(engines):
    on, off = engines
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    plain = off.generate_ids(PROMPT, sampler=GREEDY, max_tokens=N)
    i = next(j for j in range(8, len(plain)) if plain[j] not in plain[:j])
    on.reset()
    assert on.generate_ids(PROMPT, sampler=GREEDY, max_tokens=N, stop_ids=(plain[i],), spec=spec) == plain[:i]
    assert on.last_stats.finish_reason == "stop" and on.last_stats.spec.ahead > 0
    assert len(on.tokens) == on.last_stats.prompt_tokens + i + 1
    for n in (1, 2, 7):  # budgets that end inside a round, and the round launched ahead of it
        assert on.generate_ids(PROMPT, sampler=GREEDY, max_tokens=n, spec=spec) == plain[:n]
    gen = on.generate(PROMPT, sampler=GREEDY, max_tokens=N, spec=spec)
    got = [t for _, p in zip(range(4), gen) for t in p.token_ids]  # four pieces, then the consumer stops
    gen.close()
    assert got == plain[: len(got)] and on.last_stats.finish_reason == "cancelled"
    assert len(on.tokens) == on.last_stats.prompt_tokens + len(got)
    # the caches continue as plain decoding's: the rest of the text, speculative and plain
    assert on.generate_ids(PROMPT, sampler=GREEDY, max_tokens=N, spec=spec) == plain
    assert on.generate_ids(PROMPT, sampler=GREEDY, max_tokens=N) == plain


def test_plain_programs_launched_ahead(engines, engine):
    on, _ = engines
    for s in (GREEDY, SAMPLED):
        want = engine.generate_ids(PROMPT, sampler=s, max_tokens=N)
        for n in (N, 6, 1):  # whole programs, then single steps for the rest
            assert on.generate_ids(PROMPT, sampler=s, max_tokens=n) == want[:n]
