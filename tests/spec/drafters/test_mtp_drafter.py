"""MTP drafter: cached drafting == from-scratch reference over rounds with catch-up, chains,
rollbacks and small sink/window; reduced-vocab head; GGUF round trip; base-model identity check."""

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mtp_turbo.errors import ModelFileError
from mtp_turbo.models.arch import ModelConfig, Rope
from mtp_turbo.models.mtp_head import MTPConfig, MTPHead, reference_drafts, tensor_names
from mtp_turbo.models.mtp_load import load_head
from mtp_turbo.spec.drafters.mtp import MTPDrafter

# V, D, tiny_main_cfg, random_weights and make_head stay here although tests/models/conftest.py
# builds the same head (tiny.head): tests/train import D, V, make_head from this file by path
V, D = 97, 64


def tiny_main_cfg():
    return ModelConfig(family="gemma3", vocab_size=V, hidden=D, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=32, ffn=128,
                        eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=16, sliding_pattern=6,
                        query_scale=32 ** -0.5, context_length=512)


def random_weights(cfg: MTPConfig, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = {}
    shapes = {"fc_e": (cfg.hidden, cfg.hidden), "fc_h": (cfg.hidden, cfg.hidden),
              "q": (cfg.n_heads * cfg.head_dim, cfg.hidden), "k": (cfg.n_kv_heads * cfg.head_dim, cfg.hidden),
              "v": (cfg.n_kv_heads * cfg.head_dim, cfg.hidden), "o": (cfg.hidden, cfg.n_heads * cfg.head_dim),
              "gate": (cfg.ffn, cfg.hidden), "up": (cfg.ffn, cfg.hidden), "down": (cfg.hidden, cfg.ffn)}
    for k in tensor_names(cfg):
        if k.endswith("norm"):
            n = cfg.head_dim if k in ("q_norm", "k_norm") else cfg.hidden
            W[k] = 1.0 + 0.1 * torch.randn(n, generator=g)
        else:
            W[k] = torch.randn(*shapes[k], generator=g) / shapes[k][1] ** 0.5
    return W


def make_head(vocab_ids=None, seed=0):
    cfg = MTPConfig.for_main(tiny_main_cfg())
    embed = torch.randn(V, D, generator=torch.Generator().manual_seed(seed + 1))
    return MTPHead(cfg, random_weights(cfg, seed), embed, vocab_ids, "cpu", torch.float32)


def run_session(tiny, head, sink, window, chunk, seed, rounds=25, k=3):
    """Drive the drafter like the engine (chunked prefill, rounds with random acceptance, rollbacks,
    a new prompt sharing a prefix) and check every propose against the reference."""
    rng = random.Random(seed)
    main = tiny.main(seed)  # tests/models/conftest.py
    dr = MTPDrafter(head, capacity=512, sink=sink, window=window)
    checked = 0

    def prefill(tokens, start):
        n_rows = len(tokens) - 1
        H = main.hidden(tokens)
        for c0 in range(start, n_rows, chunk):
            c1 = min(n_rows, c0 + chunk)
            dr.on_prefill(c0, c1, H[c0:c1].clone(), tokens, n_rows=n_rows)

    tokens = [rng.randrange(V) for _ in range(rng.randrange(5, 60))]
    prefill(tokens, 0)
    dr.begin(tokens)
    for r in range(rounds):
        kk = rng.randrange(1, k + 1)
        drafts = dr.propose(tokens, kk)
        ref, ref_logits = reference_drafts(head, tokens, main.hidden(tokens)[: len(tokens) - 1], kk, sink, window)
        assert drafts == ref, (r, drafts, ref)
        torch.testing.assert_close(dr.last_logits, ref_logits, rtol=1e-4, atol=1e-4)
        checked += 1
        a = rng.randrange(0, kk + 1)
        n = len(tokens)
        new = tokens + drafts[:a] + [rng.randrange(V)]
        hid = main.hidden(new)[n - 1: n + a].clone()
        dr.observe(new, a, hid)
        hid.fill_(float("nan"))  # the engine's static buffer is overwritten: the drafter must have copied
        tokens = new
        if rng.random() < 0.15 and len(tokens) > 4:  # rollback (stop token / checkpoint restore)
            m = rng.randrange(2, len(tokens))
            tokens = tokens[:m]
            dr.truncate(m)
        if rng.random() < 0.1:  # a new prompt sharing a prefix: prefill from the common part
            keep = rng.randrange(1, len(tokens))
            tokens = tokens[:keep] + [rng.randrange(V) for _ in range(rng.randrange(1, 40))]
            prefill(tokens, keep - 1 if keep > 1 else 0)
            dr.begin(tokens)
    return checked


@pytest.mark.parametrize("sink,window,chunk", [(4, 8, 5), (0, 6, 16), (16, 64, 7), (3, 1, 4)])
def test_cached_equals_reference(sink, window, chunk, tiny):
    head = make_head()
    for seed in range(2):
        assert run_session(tiny, head, sink, window, chunk, seed, rounds=20) == 20


def test_reduced_vocab_cached_equals_reference(tiny):
    ids = torch.tensor(sorted(random.Random(3).sample(range(V), 40)))
    assert run_session(tiny, make_head(vocab_ids=ids), 4, 8, 6, seed=11) == 25


def test_reduced_head_argmax_is_full_head_restricted():
    ids = torch.tensor(sorted(random.Random(5).sample(range(V), 30)))
    full, red = make_head(), make_head(vocab_ids=ids)
    h = torch.randn(50, D)
    lf = full.logits(h)
    want = ids[lf[:, ids].argmax(-1)]
    assert torch.equal(red.argmax_ids(h), want)
    torch.testing.assert_close(red.logits(h), lf[:, ids])
    assert not torch.equal(full.argmax_ids(h), want)  # the restriction matters for some rows


def test_without_prefill_hook_drafter_warms_up(tiny):
    head = make_head()
    main = tiny.main(1)
    dr = MTPDrafter(head, capacity=256, sink=2, window=4)
    toks = [1, 2, 3, 4, 5]
    dr.begin(toks)
    assert dr.propose(toks, 3) == []  # no hidden rows yet
    new = toks + [9]
    dr.observe(new, 0, main.hidden(new)[4:5])
    d = dr.propose(new, 2)
    assert len(d) == 2


def fake_main_for_file():
    mc = tiny_main_cfg()
    embed = torch.randn(V, D, generator=torch.Generator().manual_seed(1))
    ns = SimpleNamespace(cfg=mc, device=torch.device("cpu"), dtype=torch.float32, embed=embed)
    ns.embedding_table = lambda: ns.embed  # what load_head reads of a main Decoder
    return ns


def test_gguf_round_trip_and_identity_check(tmp_path):
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.train.export import save_head

    main = fake_main_for_file()
    cfg = MTPConfig.for_main(main.cfg)
    W = random_weights(cfg, 4)
    ids = torch.tensor([3, 5, 8, 13, 21, 34, 55, 89])
    p = tmp_path / "head.gguf"
    save_head(p, W, cfg, "ab" * 32, ids, {"steps": 1})
    gf = GGUFFile(p)
    assert gf.metadata["mtp.hidden_source"] == "pre_norm"
    assert "blk.3.nextn.fc_embedding.weight" in gf.tensors and "blk.3.attn_q.weight" in gf.tensors
    head = load_head(p, main, expect_sha="ab" * 32)
    assert torch.equal(head.vocab_ids, ids)
    for k, w in W.items():
        tol = 0 if k.endswith("norm") else 0.02 * float(w.abs().max())  # Q8_0 matrices
        assert (head.W[k] - w).abs().max() <= tol, k
    with pytest.raises(ModelFileError, match="sha256"):
        load_head(p, main, expect_sha="cd" * 32)
    save_head(tmp_path / "full.gguf", W, cfg, "ab" * 32, None, {})
    assert load_head(tmp_path / "full.gguf", main).vocab_ids is None


def _real_head(engine, path, sha):
    from mtp_turbo.train.distill import frequent_ids, init_head
    from mtp_turbo.train.export import save_head

    m = engine.model
    cfg = MTPConfig.for_main(m.cfg)
    ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 3 + "def f(x):\n    return x")
    vocab = torch.from_numpy(frequent_ids(np.array([ids], dtype=np.uint32), m.cfg.vocab_size, 2048))
    save_head(path, init_head(m, cfg, 0), cfg, sha, vocab, {"test": True})


def test_engine_with_mtp_drafter_is_exact_and_checks_identity(engine, tmp_path):
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.drafters.mtp import load_mtp_drafter
    from mtp_turbo.spec.config import SpecConfig

    p = tmp_path / "head.gguf"
    _real_head(engine, p, engine.gguf.sha256())
    greedy = SamplerConfig(temperature=0.0)
    prompt = "Once upon a time, in a small village by the sea,"
    plain = engine.generate_ids(prompt, sampler=greedy, max_tokens=20)
    spec = SpecConfig(draft="mtp", draft_tokens=3, drafter=str(p), draft_sink=4, draft_window=16)
    got = engine.generate_ids(prompt, sampler=greedy, max_tokens=20, spec=spec)
    assert got == plain
    assert engine.last_stats.spec.drafter == "mtp" and engine.last_stats.spec.drafted > 0
    # the prefill hook (as the engine will call it) feeds the drafter: drafts from the first round
    dr = load_mtp_drafter(spec, engine.model, engine.gguf, engine.ctx_size)
    ids = engine.encode_prompt(prompt)
    engine.start(ids)
    from mtp_turbo.cache.kv import KVCache
    c = engine.model.cfg
    kv = KVCache(c.n_layers, 128, c.n_kv_heads, c.head_dim, engine.device, engine.model.dtype)
    n_rows = len(ids) - 1
    for c0 in range(0, n_rows, 5):
        c1 = min(n_rows, c0 + 5)
        _, h = engine.model.forward(torch.tensor(ids[c0:c1]), c0, kv)
        dr.on_prefill(c0, c1, h, ids)
    dr.begin(engine.tokens)
    assert len(dr.propose(engine.tokens, 3)) == 3
    assert dr.cells.sink_valid == 4 and dr.cells.cell1 == n_rows
    bad = tmp_path / "other.gguf"
    _real_head(engine, bad, "0" * 64)
    with pytest.raises(ModelFileError, match="sha256"):
        load_mtp_drafter(SpecConfig(draft="mtp", drafter=str(bad)), engine.model, engine.gguf, engine.ctx_size)


def test_shipped_head_belongs_to_the_default_model_and_is_exact(engine):
    """The head committed in mtp_turbo/data loads for the default model (identity checked against
    the model file's sha256), drafts real tokens, and temp-0 output equals plain greedy."""
    from mtp_turbo.models.mtp_head import DEFAULT_HEAD
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig
    from mtp_turbo.spec.drafters.mtp import load_mtp_drafter

    assert DEFAULT_HEAD.exists()
    spec = SpecConfig(draft="mtp", draft_tokens=3)
    load_mtp_drafter(spec, engine.model, engine.gguf, engine.ctx_size)  # raises ModelFileError if the identity does not match
    prompt = "Question: What is the capital of France?\nAnswer: The capital of France is"
    g = SamplerConfig(temperature=0.0)
    plain = engine.generate_ids(prompt, sampler=g, max_tokens=24)
    spec_out = engine.generate_ids(prompt, sampler=g, max_tokens=24, spec=spec)
    assert spec_out == plain
    assert engine.last_stats.spec.accepted > 0  # a trained head gets drafts accepted


def test_a_stop_or_a_closed_stream_leaves_the_mtp_session_as_plain_leaves_it(engine):
    """Rounds are launched one ahead of the tokens handed on (spec/round.py): at a stop, and when
    the consumer closes the stream early, the round in flight is drained, nothing of it is kept,
    and the drafter's and the model's caches continue exactly as plain decoding's would."""
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    spec = SpecConfig(draft="mtp", draft_tokens=3)
    g = SamplerConfig(temperature=0.0)
    prompt = "The history of the printing press begins"
    engine.reset()
    plain = engine.generate_ids(prompt, sampler=g, max_tokens=20)
    i = next(j for j in range(3, len(plain)) if plain[j] not in plain[:j])
    engine.reset()
    assert engine.generate_ids(prompt, sampler=g, max_tokens=20, stop_ids=(plain[i],), spec=spec) == plain[:i]
    assert engine.last_stats.finish_reason == "stop" and len(engine.tokens) == engine.last_stats.prompt_tokens + i + 1
    assert engine.generate_ids(prompt, sampler=g, max_tokens=20, spec=spec) == plain  # the prefix reused
    assert engine.last_stats.prompt_cached > 0
    gen = engine.generate(prompt, sampler=g, max_tokens=20, spec=spec)
    got = [t for _, p in zip(range(2), gen) for t in p.token_ids]  # two pieces, then the consumer stops
    gen.close()
    assert got == plain[: len(got)] and engine.last_stats.finish_reason == "cancelled"
    assert len(engine.tokens) == engine.last_stats.prompt_tokens + len(got)
    assert engine.generate_ids(prompt, sampler=g, max_tokens=20, spec=spec) == plain


def test_a_long_catch_up_is_encoded_ahead_of_the_round(tiny):
    # after a stretch of plain steps (the adaptive chooser at k = 0: each step stores its row's
    # state, nothing drafts) the catch-up is longer than the round's graphs take: prepare encodes
    # those rows itself, leaves the round one row (draft 0's), and the drafts are the reference's
    from mtp_turbo.spec.drafters.mtp import GRAPH_ROWS

    head, main = make_head(), tiny.main(3)
    sink, window = 4, 32
    dr = MTPDrafter(head, capacity=512, sink=sink, window=window)
    rng = random.Random(3)
    tokens = [rng.randrange(V) for _ in range(30)]
    dr.on_prefill(0, 29, main.hidden(tokens)[:29].clone(), tokens)
    dr.begin(tokens)
    assert len(dr.propose(tokens, 3)) == 3 and dr.caught_up == 0
    for _ in range(GRAPH_ROWS + 12):  # plain steps: one token each, its row's state observed
        n = len(tokens)
        tokens = tokens + [rng.randrange(V)]
        dr.observe(tokens, 0, main.hidden(tokens)[n - 1: n].clone())
    p0 = len(tokens) - 2
    c = dr.cells.cell1
    staged = []
    prepare = dr.prepare
    dr.prepare = lambda *a: staged.append(prepare(*a)) or staged[-1]  # what propose stages
    drafts = dr.propose(tokens, 3)
    assert staged[0][0] == 1 and dr.caught_up == p0 - c > GRAPH_ROWS and dr.cells.cell1 == p0 + 1
    ref, ref_logits = reference_drafts(head, tokens, main.hidden(tokens)[: len(tokens) - 1], 3, sink, window)
    assert drafts == ref
    torch.testing.assert_close(dr.last_logits, ref_logits, rtol=1e-4, atol=1e-4)
