"""A smaller model of the same tokenizer as the drafter (--draft model): the text is plain decoding's
(temperature 0: the greedy text; 0.6 with the chain: the same seed's text), a model drafting for
itself is accepted every time, and a draft model whose vocabulary differs is refused by name. On a
GPU: the real pair (Qwen2.5-Coder-0.5B drafting for 1.5B) gives plain's text, and so does the MTP head
shipped for the 1.5B (the other drafter --draft auto takes for a model of the registry)."""

import pytest

from mtp_turbo.errors import ConfigError
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.spec.drafters.model import check_vocabulary

PROMPT = "def fibonacci(n):\n    "
SAMPLERS = (SamplerConfig(temperature=0.0),
            SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=7))


def _engine(path):
    from mtp_turbo.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=str(path), device="cpu", ctx_size=512, progress=False))


def _speculative_runs(eng, draft_path, ks, max_tokens):
    """For each k and sampler: asserts the draft model's text is plain decoding's, then yields
    (sampler, the speculative run's stats)."""
    for k in ks:
        spec = SpecConfig(draft="model", draft_model=str(draft_path), draft_tokens=k)
        for s in SAMPLERS:
            plain = eng.generate_ids(PROMPT, sampler=s, max_tokens=max_tokens)
            assert eng.generate_ids(PROMPT, sampler=s, max_tokens=max_tokens, spec=spec) == plain, (k, s)
            yield s, eng.last_stats.spec


@pytest.mark.parametrize("which", ["smollm2", "qwen05"])
def test_a_model_drafting_for_itself_gives_plain_text(which, smollm2_path, qwen05_path):
    path = smollm2_path if which == "smollm2" else qwen05_path
    eng = _engine(path)
    for s, st in _speculative_runs(eng, path, (2, 4), 24):
        assert st.drafted > 0
        if s.greedy:  # its own argmax is the target's greedy token at every position
            assert st.accepted == st.drafted, st
    # a new prompt after a long one: the draft's cache keeps only the common prefix
    spec = SpecConfig(draft="model", draft_model=str(path), draft_tokens=3)
    g = SAMPLERS[0]
    other = "Once upon a time, in a small village,"
    assert eng.generate_ids(other, sampler=g, max_tokens=16, spec=spec) == eng.generate_ids(other, sampler=g,
                                                                                             max_tokens=16)


def test_vocabulary_check():
    main = ["<s>", "a", "b", "c"]
    check_vocabulary(main, main[:3], "d.gguf")  # a prefix is fine
    with pytest.raises(ConfigError, match="token 2 is 'x' there and 'b'"):
        check_vocabulary(main, ["<s>", "a", "x"], "d.gguf")
    with pytest.raises(ConfigError, match="more than the main model's"):
        check_vocabulary(main, main + ["d"], "d.gguf")


def test_a_draft_model_of_another_vocabulary_is_refused(smollm2_path, qwen05_path):
    eng = _engine(smollm2_path)
    spec = SpecConfig(draft="model", draft_model=str(qwen05_path), draft_tokens=2)
    with pytest.raises(ConfigError, match="does not share the main model's vocabulary|more than the main model's"):
        eng.generate_ids(PROMPT, sampler=SAMPLERS[0], max_tokens=4, spec=spec)
    with pytest.raises(ConfigError, match="--draft-model"):
        SpecConfig(draft="model")


@pytest.mark.gpu
def test_the_qwen_pair_gives_plain_text_on_the_gpu(qwen05_path, qwen15_path):
    from mtp_turbo.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(qwen15_path), device="cuda", ctx_size=1024, progress=False))
    for _, st in _speculative_runs(eng, qwen05_path, (3, 5), 48):
        assert st.accepted > 0 and st.drafted >= st.accepted, st


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["greedy", "sampled"])
def test_rounds_launched_ahead_give_plain_text(sampler, smollm2_path):
    # the draft's first launch reads rows n-2, n-1 from the device's n, so a round goes ahead of the
    # previous one's read: the same text; drafting for itself at temp 0, every draft is accepted
    # (the drafts made ahead are the target's argmax: the cells they read hold the committed tokens)
    from mtp_turbo.engine import Engine, EngineConfig

    cfg = dict(model=str(smollm2_path), device="cpu", ctx_size=512, progress=False)
    on, off = Engine(EngineConfig(**cfg, pipeline="on")), Engine(EngineConfig(**cfg, pipeline="off"))
    spec = SpecConfig(draft="model", draft_model=str(smollm2_path), draft_tokens=3, adaptive=False)
    plain = off.generate_ids(PROMPT, sampler=sampler, max_tokens=32)
    assert on.generate_ids(PROMPT, sampler=sampler, max_tokens=32, spec=spec) == plain
    s = on.last_stats.spec
    assert s.ahead >= s.rounds // 2 and s.accepted > 0, s.summary()
    if sampler.greedy:
        assert s.accepted == s.drafted, s.summary()


def test_draft_auto_takes_the_draft_model_the_registry_pairs(qwen05_path, monkeypatch, capsys):
    # no MTP head for a Qwen model: --draft auto drafts with the registry's draft model for it (here
    # the 0.5B paired with itself), k = 2, plain decoding's text; which is said once
    import dataclasses

    from mtp_turbo.io import registry

    e = registry.find_entry("qwen2.5-coder-0.5b-instruct")
    monkeypatch.setattr(registry, "MODELS", tuple(dataclasses.replace(x, draft=e.name) if x is e else x
                                                  for x in registry.MODELS))
    eng = _engine(qwen05_path)
    for s in SAMPLERS:
        plain = eng.generate_ids(PROMPT, sampler=s, max_tokens=16, spec=SpecConfig(draft="none"))
        assert eng.generate_ids(PROMPT, sampler=s, max_tokens=16, spec=SpecConfig()) == plain
        st = eng.last_stats.spec
        assert st is not None and st.drafter == "model" and st.k == 2 and st.drafted > 0, st
    err = capsys.readouterr().err
    assert err.count("--draft auto drafts with the draft model qwen2.5-coder-0.5b-instruct") == 1, err
    assert "decodes without a drafter" not in err


@pytest.mark.gpu
def test_the_shipped_qwen_mtp_head_gives_plain_text_on_the_gpu(qwen15_path):
    # the head trained for Qwen2.5-Coder-1.5B (mtp_turbo/data, found through the registry) on the
    # fused MTP step of a Qwen2 block: plain's text, and its drafts are accepted
    from mtp_turbo.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(qwen15_path), device="cuda", ctx_size=1024, progress=False))
    for k in (2, 3):
        for s in SAMPLERS:
            plain = eng.generate_ids(PROMPT, sampler=s, max_tokens=48)
            assert eng.generate_ids(PROMPT, sampler=s, max_tokens=48, spec=SpecConfig(draft="mtp", draft_tokens=k)) == plain
            st = eng.last_stats.spec
            assert st.drafter == "mtp" and st.accepted > 0, st


@pytest.mark.gpu
def test_the_draft_models_rows_are_batch_invariant_on_the_gpu(qwen05_path):
    # a round's first launch forwards the draft's rows n-2 and n-1 together, and every round rewrites
    # cell n-2: its K/V and logits must be the bits one-row steps give, or the cells would drift
    # from round to round (the drafts, never the text, would move)
    import torch

    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.load import load_model
    from mtp_turbo.spec.drafters.model import DraftModelDrafter

    model = load_model(GGUFFile(str(qwen05_path)), torch.device("cuda"), progress=False, max_positions=256)
    chain, steps = (DraftModelDrafter(model, 200, kernels="triton") for _ in range(2))
    tokens = [(i * 7919 + 13) % 5000 for i in range(37)]
    n, k = len(tokens), 4
    drafts = chain.propose(tokens, k)  # rows n-2, n-1 at once, then k-1 one-row steps
    steps._catch_up(tokens, n - 2)
    seq = tokens + drafts
    with torch.inference_mode():
        for p in range(n - 2, n + k - 1):  # the same rows one at a time
            tok = torch.tensor([seq[p]], dtype=torch.int64, device="cuda")
            logits, _ = steps.runner.body(tok, torch.tensor([p], dtype=torch.int64, device="cuda"))
            if p >= n - 1:
                assert int(logits[0].argmax()) == seq[p + 1], p
    for cache in ("k", "v"):
        a, b = getattr(chain.kv, cache), getattr(steps.kv, cache)
        assert torch.equal(a[:, : n + k - 1], b[:, : n + k - 1]), cache
