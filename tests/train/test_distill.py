"""Training: batched main forward == Gemma3.forward, training chain forward == the drafter's
reference (teacher-forced), and a tiny run on real text lowers the held-out loss."""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from mtp_turbo.cache.kv import KVCache
from mtp_turbo.models.mtp_head import reference_drafts
from mtp_turbo.train import data as data_mod
from mtp_turbo.train.config import TrainConfig
from mtp_turbo.train.distill import frequent_ids, train
from mtp_turbo.train.forward import chain_states, main_hidden

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spec" / "drafters"))
from test_mtp_drafter import D, V, make_head  # noqa: E402


def test_main_hidden_matches_forward(engine):
    m = engine.model
    g = torch.Generator().manual_seed(0)
    toks = torch.randint(0, 5000, (2, 24), generator=g)
    H = main_hidden(m, toks)
    c = m.cfg
    for b in range(2):
        kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, m.device, m.dtype)
        _, h = m.forward(toks[b], 0, kv)
        torch.testing.assert_close(H[b], h, rtol=2e-3, atol=2e-3 * float(h.abs().max()))


def test_chain_states_match_teacher_forced_reference():
    head = make_head()
    g = torch.Generator().manual_seed(1)
    B, T, depth, sink, window = 2, 14, 3, 2, 4
    toks = torch.randint(0, V, (B, T), generator=g)
    hid = torch.randn(B, T, D, generator=g) * 3
    emb = head.embed_tokens(toks)
    rope = head.rope_at(torch.arange(T))
    states = chain_states(head.W, head.cfg, rope, emb, hid, depth, sink, window)
    assert [s.shape[1] for s in states] == [T - 1, T - 2, T - 3]
    for b in range(B):
        tl = toks[b].tolist()
        for t in range(0, T - depth):
            _, ref = reference_drafts(head, tl[: t + 2], hid[b, : t + 1], depth, sink, window,
                                      forced=tl[t + 2: t + 1 + depth])
            got = torch.stack([head.logits(states[j][b, t: t + 1])[0] for j in range(depth)])
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_frequent_ids():
    rows = np.array([[5, 5, 5, 2, 2, 9]], dtype=np.uint32)
    assert frequent_ids(rows, 12, 2).tolist() == [2, 5]


def test_tiny_run_lowers_loss(engine, tmp_path):
    text = (Path(__file__).resolve().parent.parent / "data" / "tempest_act1.txt").read_text()
    ids = engine.tokenizer.encode(text, add_bos=False)
    rows = data_mod.pack([ids], 25, engine.tokenizer.bos_id, 8)
    side = {"heldout_rows": 2, "seq_len": 25, "sources": "test"}
    data_mod.save(tmp_path / "d.npy", rows, side)
    tc = TrainConfig(steps=16, batch=2, lr=3e-3, warmup=3, chain=2, vocab_rows=256, sink=4, window=8,
                     eval_every=0, eval_rows=2, ckpt_every=0, eval_offset=0)
    out = tmp_path / "head.gguf"
    res = train(engine.model, engine.gguf.sha256(), str(tmp_path / "d.npy"), str(out), tc, "cpu", progress=False)
    first, last = res["history"][0], res["history"][-1]
    assert res["steps"] == 16 and out.exists()
    assert sum(last["kl"]) < 0.9 * sum(first["kl"]), (first, last)
    recipe = json.loads(__import__("mtp_turbo.io.gguf_file", fromlist=["GGUFFile"]).GGUFFile(out).metadata["mtp.recipe"])
    assert recipe["steps"] == 16 and recipe["chain"] == 2
    # resume continues from the checkpoint and writes the head again
    tc2 = TrainConfig(**{**tc.__dict__, "steps": 17})
    res2 = train(engine.model, engine.gguf.sha256(), str(tmp_path / "d.npy"), str(out), tc2, "cpu",
                 resume=True, progress=False)
    assert res2["steps"] == 17 and res2["history"][0]["step"] == 16


def test_sampled_probs_by_hand():
    from mtp_turbo.train.distill import sampled_probs

    logits = torch.tensor([[1.0, 0.0, -3.0], [0.0, 0.0, 0.0]])
    p = sampled_probs(logits, 0.5, 0.05)
    e = torch.exp(torch.tensor([2.0, 0.0, -6.0]))
    want0 = e / e.sum()
    want0[2] = 0.0  # exp(-8) < 0.05: dropped by min-p, the rest renormalised
    assert torch.allclose(p[0], want0 / want0.sum()) and p[0, 2] == 0
    assert torch.allclose(p[1], torch.full((3,), 1 / 3))


def test_accept_term_trains_and_is_reported(engine, tmp_path):
    """--accept-weight adds the sampled-acceptance term: the run still lowers the KL, the eval
    reports p_s(argmax draft) per chain step in [0, 1] (and it rises), the recipe names the loss."""
    text = (Path(__file__).resolve().parent.parent / "data" / "tempest_act1.txt").read_text()
    ids = engine.tokenizer.encode(text, add_bos=False)
    data_mod.save(tmp_path / "d.npy", data_mod.pack([ids], 25, engine.tokenizer.bos_id, 8),
                  {"heldout_rows": 2, "seq_len": 25, "sources": "test"})
    tc = TrainConfig(steps=16, batch=2, lr=3e-3, warmup=3, chain=2, vocab_rows=256, sink=4, window=8,
                     eval_every=0, eval_rows=2, ckpt_every=0, eval_offset=0, accept_weight=2.0)
    out = tmp_path / "head.gguf"
    res = train(engine.model, engine.gguf.sha256(), str(tmp_path / "d.npy"), str(out), tc, "cpu", progress=False)
    first, last = res["history"][0], res["history"][-1]
    assert len(last["accept"]) == 2 and all(0.0 <= a <= 1.0 for a in first["accept"] + last["accept"])
    assert sum(last["kl"]) < 0.9 * sum(first["kl"]) and sum(last["accept"]) > sum(first["accept"]), (first, last)
    assert "2.0 * (1 - sum_x p_s q_s)" in res["recipe"]["loss"]


def test_a_narrow_head_for_a_qwen2_model_trains_loads_and_drafts(qwen05_path, tmp_path):
    # the head takes the main model's family (a Qwen2 block: pre-norms, SwiGLU, no embedding scale)
    # and --ffn narrower than the model's: training lowers the loss, the file loads at its own width,
    # and its drafts leave the text plain decoding's
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.models.mtp_load import load_head
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec.config import SpecConfig

    eng = Engine(EngineConfig(model=str(qwen05_path), device="cpu", ctx_size=256, progress=False, cpu_weights="f32"))
    text = (Path(__file__).resolve().parent.parent / "data" / "tempest_act1.txt").read_text()
    ids = eng.tokenizer.encode(text, add_bos=False)
    rows = data_mod.pack([ids], 25, eng.tokenizer.bos_id or 0, 8)
    data_mod.save(tmp_path / "d.npy", rows, {"heldout_rows": 2, "seq_len": 25, "sources": "test"})
    tc = TrainConfig(steps=16, batch=2, lr=1e-3, warmup=3, chain=2, vocab_rows=256, sink=4, window=8, ffn=64,
                     eval_every=0, eval_rows=2, ckpt_every=0, eval_offset=0)
    out = tmp_path / "head.gguf"
    res = train(eng.model, eng.gguf.sha256(), str(tmp_path / "d.npy"), str(out), tc, "cpu", progress=False)
    first, last = res["history"][0], res["history"][-1]
    assert sum(last["kl"]) < 0.9 * sum(first["kl"]), (first, last)
    head = load_head(out, eng.model, expect_sha=eng.gguf.sha256())
    assert head.cfg.family == "qwen2" and head.cfg.ffn == 64 and head.cfg.embed_scale == 1.0
    assert "q_norm" not in head.W and "post_attn_norm" not in head.W and head.W["gate"].shape == (64, 896)
    for s in (SamplerConfig(temperature=0.0), SamplerConfig(temperature=0.7, top_k=40, seed=5)):
        plain = eng.generate_ids("def add(a, b):", sampler=s, max_tokens=12, spec=SpecConfig(draft="none"))
        got = eng.generate_ids("def add(a, b):", sampler=s, max_tokens=12,
                               spec=SpecConfig(draft="mtp", drafter=str(out), draft_tokens=2))
        assert got == plain and eng.last_stats.spec.drafted > 0
