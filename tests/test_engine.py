"""Engine: rollback, checkpoints, sessions, chunked prefill, context limits (real model, CPU)."""

import dataclasses

import pytest
import torch

from mtp_turbo.errors import CacheError, ConfigError
from mtp_turbo.sampling.config import SamplerConfig

GREEDY = SamplerConfig(temperature=0.0)
PROMPT = "The history of the printing press begins"


def _next_logits(engine):
    logits, _ = engine.forward(1)
    return logits.clone()


def test_rollback_gives_the_logits_of_never_having_gone_further(engine):
    ids = engine.encode_prompt(PROMPT)
    engine.start(ids)
    before = _next_logits(engine)
    for _ in range(6):  # go further, then come back
        tok = int(engine.sample_next(_next_logits(engine), GREEDY).item())
        engine.commit([tok])
    assert engine.kv.length == len(ids) + 5
    engine.rollback(len(ids))
    assert engine.kv.length == len(ids) - 1
    assert torch.equal(_next_logits(engine), before)


def test_checkpoint_restore_and_refusal(engine):
    ids = engine.encode_prompt(PROMPT)
    engine.start(ids)
    cp = engine.kv.checkpoint()
    ref = _next_logits(engine)
    engine.commit([100])
    engine.forward(1)
    engine.commit([200])
    engine.kv.restore(cp)
    del engine.tokens[len(ids):]
    assert torch.equal(_next_logits(engine), ref)
    with pytest.raises(CacheError, match="past the current length"):
        engine.kv.restore(type(cp)(engine.kv.length + 5))
    with pytest.raises(CacheError, match="only"):
        engine.kv.rollback(engine.kv.length + 1)


def test_chunked_prefill_matches_one_chunk(engine):
    ids = engine.encode_prompt("In the beginning of the eighteenth century, the city grew quickly and " * 4)
    engine.kv.reset(); engine.tokens = []
    engine.start(ids)
    one = _next_logits(engine)
    engine.kv.reset(); engine.tokens = []
    old = engine.cfg
    engine.cfg = dataclasses.replace(old, prefill_chunk=7)
    try:
        engine.start(ids)
        chunked = _next_logits(engine)
    finally:
        engine.cfg = old
    assert ((one - chunked).abs().max() / one.abs().max()).item() < 1e-5
    assert one.argmax() == chunked.argmax()


def test_prompt_cache_reuse_gives_the_same_text(engine):
    a = engine.generate_ids(PROMPT, sampler=GREEDY, max_tokens=12)
    b = engine.generate_ids(PROMPT, sampler=GREEDY, max_tokens=12)
    assert engine.last_stats.prompt_cached > 0
    assert a == b


def test_session_save_load_continues_identically(engine, tmp_path):
    ids = engine.encode_prompt("A short note about rivers:")
    engine.start(ids)
    for _ in range(5):
        engine.commit([int(engine.sample_next(_next_logits(engine), GREEDY).item())])
    path = tmp_path / "s.session"
    engine.save_session(path)
    saved_tokens = list(engine.tokens)
    cont = []
    for _ in range(8):
        t = int(engine.sample_next(_next_logits(engine), GREEDY).item())
        engine.commit([t]); cont.append(t)
    engine.start(engine.encode_prompt("Something else entirely, to overwrite the cache."))
    engine.load_session(path)
    assert engine.tokens == saved_tokens
    again = []
    for _ in range(8):
        t = int(engine.sample_next(_next_logits(engine), GREEDY).item())
        engine.commit([t]); again.append(t)
    assert again == cont


def test_session_refuses_other_model_and_damage(engine, tmp_path):
    engine.start(engine.encode_prompt("Hello there"))
    path = tmp_path / "s.session"
    engine.save_session(path)
    data = path.read_bytes()
    # another model: the identity in the header differs
    other = data.replace(engine.gguf.sha256().encode(), b"0" * 64)
    (tmp_path / "other").write_bytes(other)
    with pytest.raises(CacheError, match="another model"):
        engine.load_session(tmp_path / "other")
    (tmp_path / "trunc").write_bytes(data[: len(data) - 100])
    with pytest.raises(CacheError, match="corrupt or truncated"):
        engine.load_session(tmp_path / "trunc")
    (tmp_path / "junk").write_bytes(b"not a session at all")
    with pytest.raises(CacheError, match="not an mtp-turbo session"):
        engine.load_session(tmp_path / "junk")
    with pytest.raises(CacheError, match="cannot read"):
        engine.load_session(tmp_path / "missing")


def test_prompt_longer_than_context(engine):
    with pytest.raises(ConfigError, match="context holds"):
        engine.generate_text(list(range(10, 10 + engine.ctx_size + 1)), max_tokens=1)


def test_generation_stops_at_context_end(engine):
    ids = [2] + [1000 + i for i in range(engine.ctx_size - 4)]  # ctx - 3 tokens: room for 3 more
    out = engine.generate_ids(ids, sampler=GREEDY, max_tokens=50, stop_ids=())
    assert len(out) == 3
    assert engine.last_stats.finish_reason == "context"


def test_draft_auto_on_the_cpu(engine):
    """--draft auto (the default) on the CPU: with int8 matrices (the default there) the MTP head,
    k = 2 with adaptive k, giving plain decoding's text; with --cpu-weights f32 (the fixture's
    engine) plain decoding, no speculative rounds."""
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.spec.config import SpecConfig

    assert SpecConfig().draft == "auto"
    want = engine.generate_ids("The capital of France is", max_tokens=8)
    assert engine.generate_ids("The capital of France is", max_tokens=8, spec=SpecConfig()) == want
    assert engine.last_stats.spec is None and engine.drafter is None
    e8 = Engine(EngineConfig(model=str(engine.gguf.path), device="cpu", ctx_size=256, progress=False), gguf=engine.gguf)
    assert e8._auto_spec(SpecConfig()) == SpecConfig(draft="mtp", adaptive=True)
    s = SamplerConfig(temperature=0.6, seed=3)
    for sampler in (GREEDY, s):
        e8.reset()
        plain = e8.generate_ids("The capital of France is", sampler=sampler, max_tokens=24, stop_ids=(),
                                spec=SpecConfig(draft="none"))
        e8.reset()
        assert e8.generate_ids("The capital of France is", sampler=sampler, max_tokens=24, stop_ids=(),
                               spec=SpecConfig()) == plain
        st = e8.last_stats.spec
        assert st is not None and st.rounds >= 1 and e8.drafter is not None and e8.drafter.name == "mtp"


def test_draft_auto_on_cuda_without_a_usable_head_decodes_plainly_and_says_so_once(engine, monkeypatch, capsys):
    """On CUDA, --draft auto takes the MTP head; a head that is missing or made for another model
    (ModelFileError) gives plain decoding, said once on stderr, not an error."""
    import torch

    import mtp_turbo.spec.drafters as drafters
    from mtp_turbo.errors import ModelFileError
    from mtp_turbo.spec.config import SpecConfig

    calls = []

    def no_head(spec, *a):
        calls.append(spec.draft)
        raise ModelFileError("MTP head file x.gguf does not exist")

    monkeypatch.setattr(drafters, "make_drafter", no_head)
    monkeypatch.setattr(engine, "device", torch.device("cuda"))
    spec = SpecConfig(draft="auto", draft_tokens=2)
    assert engine._auto_spec(spec) is None and engine._auto_spec(spec) is None
    assert calls == ["mtp"]  # tried once, as mtp
    err = capsys.readouterr().err
    assert err.count("--draft auto decodes without a drafter") == 1 and "x.gguf" in err


def test_draft_auto_on_cuda_takes_the_mtp_head(engine, monkeypatch):
    import torch

    import mtp_turbo.spec.drafters as drafters
    from mtp_turbo.spec.config import SpecConfig
    from mtp_turbo.spec.drafters.base import Drafter

    class Head(Drafter):
        name = "mtp"

    monkeypatch.setattr(drafters, "make_drafter", lambda spec, *a: Head())
    monkeypatch.setattr(engine, "device", torch.device("cuda"))
    got = engine._auto_spec(SpecConfig(draft="auto", draft_tokens=3))
    assert got == SpecConfig(draft="mtp", draft_tokens=3) and isinstance(engine.drafter, Head)
    engine.kept.release_drafters()


def test_plain_steps_in_one_program_give_the_single_steps_text(engine):
    # --decode-steps 4: the same tokens as single steps (greedy, and the sampled chain with its
    # penalty window), a budget that is no multiple of 4 (single steps for the tail), a stop in the
    # middle of a program (the rest discarded, the cache rolled back so the next call continues
    # as if never gone further)
    chain = SamplerConfig(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                          presence_penalty=0.4, penalty_last_n=64, seed=3)
    old = engine.cfg
    assert engine.decode_steps == 1  # auto on the CPU
    ref = {s: engine.generate_ids(PROMPT, sampler=s, max_tokens=10) for s in (GREEDY, chain)}
    try:
        engine.cfg = dataclasses.replace(old, decode_steps=4)
        for s, want in ref.items():
            engine.reset()
            assert engine.generate_ids(PROMPT, sampler=s, max_tokens=10) == want
        want = ref[GREEDY]
        i = next(j for j in range(2, len(want)) if want[j] not in want[:j])
        pieces = list(engine.generate(PROMPT, sampler=GREEDY, max_tokens=10, stop_ids=(want[i],)))
        assert [t for p in pieces for t in p.token_ids] == want[:i]
        assert engine.last_stats.finish_reason == "stop"
        n_prompt = engine.last_stats.prompt_tokens
        assert len(engine.tokens) == n_prompt + i + 1 and engine.kv.length == n_prompt + i
        assert engine.generate_ids(PROMPT, sampler=GREEDY, max_tokens=10) == want
        assert engine.last_stats.prompt_cached > 0
    finally:
        engine.cfg = old
    with pytest.raises(ConfigError, match="decode-steps"):
        dataclasses.replace(old, decode_steps=9)


def test_draft_auto_takes_the_k_the_registry_measured_for_a_shipped_head(engine, monkeypatch):
    import dataclasses

    import torch

    import mtp_turbo.spec.drafters as drafters
    from mtp_turbo.io import registry
    from mtp_turbo.spec.config import SpecConfig
    from mtp_turbo.spec.drafters.base import Drafter

    class Head(Drafter):
        name = "mtp"

    gemma = registry.find_entry(registry.DEFAULT_MODEL)
    assert registry.entry_of_file(engine.gguf.path) == gemma
    monkeypatch.setattr(registry, "MODELS", tuple(dataclasses.replace(e, mtp_k=4) if e is gemma else e
                                                  for e in registry.MODELS))
    monkeypatch.setattr(drafters, "make_drafter", lambda spec, *a: Head())
    monkeypatch.setattr(engine, "device", torch.device("cuda"))
    monkeypatch.setattr(engine, "_auto", {})  # choices other tests' fakes left behind
    assert engine._auto_spec(SpecConfig()) == SpecConfig(draft="mtp", draft_tokens=4)  # fixed k, not adaptive
    assert engine._auto_spec(SpecConfig(draft_tokens=2)) == SpecConfig(draft="mtp", draft_tokens=2)  # asked for
    engine.kept.release_drafters()
