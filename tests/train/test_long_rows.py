"""Long-row training: the banded head attention with sink + window equals the inference reference;
a virtual gap after the sink is exactly the read set of a long sequence; the training mask equals
DraftCells' read set at 3k positions; sampled continuations are the main model's greedy tokens;
warm start reproduces the init head's eval; the data builder holds out the bench's play."""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from mtp_turbo.cache.cells import DraftCells, DraftCellsConfig
from mtp_turbo.cache.kv import KVCache
from mtp_turbo.models.mtp_head import reference_drafts
from mtp_turbo.train import data as data_mod
from mtp_turbo.train.config import TrainConfig
from mtp_turbo.train.distill import train
from mtp_turbo.train.forward import chain_states, committed_mask, virtual_positions
from mtp_turbo.train.generate import GenConfig, sample_rows

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spec" / "drafters"))
from test_mtp_drafter import D, V, make_head  # noqa: E402


def _check_against_reference(head, toks, hid, depth, sink, window, block, off, starts):
    """chain_states with a gap of `off` cells after the sink == reference_drafts on the long
    sequence that has those cells (random filler, never read by the checked chain starts)."""
    g = torch.Generator().manual_seed(5)
    T = toks.shape[0]
    pos = virtual_positions(T - 1, sink, off)
    states = chain_states(head.W, head.cfg, head.rope_at(torch.arange(T + off + 8)), head.embed_tokens(toks[None]),
                          hid[None], depth, sink, window, pos=pos, block=block)
    # cell c = (h_c, token c+1): the gap sits between token `sink` and token `sink + 1`
    vt = torch.cat([toks[: sink + 1], torch.randint(0, V, (off,), generator=g), toks[sink + 1:]]).tolist()
    vh = torch.cat([hid[:sink], torch.randn(off, D, generator=g), hid[sink:]])
    for t in starts:
        vtt = t if t < sink else t + off
        _, ref = reference_drafts(head, vt[: vtt + 2], vh[: vtt + 1], depth, sink, window,
                                  forced=vt[vtt + 2: vtt + 1 + depth])
        got = torch.stack([head.logits(states[j][0, t: t + 1])[0] for j in range(depth)])
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_banded_attention_matches_reference_many_blocks():
    head = make_head()
    g = torch.Generator().manual_seed(2)
    T, depth, sink, window = 90, 3, 5, 12
    toks = torch.randint(0, V, (T,), generator=g)
    hid = torch.randn(T, D, generator=g) * 3
    # blocks of 7 rows (not a divisor of T-1): padding rows and band edges are exercised
    _check_against_reference(head, toks, hid, depth, sink, window, block=7, off=0, starts=range(0, T - depth, 3))
    # sink 0 and a window wider than the rows (one block: plain causal attention)
    _check_against_reference(head, toks, hid, depth, 0, 500, block=256, off=0, starts=range(0, T - depth, 11))


def test_virtual_gap_is_the_long_sequence_read_set():
    head = make_head()
    g = torch.Generator().manual_seed(3)
    T, depth, sink, window, off = 80, 3, 4, 10, 300
    toks = torch.randint(0, V, (T,), generator=g)
    hid = torch.randn(T, D, generator=g) * 3
    # chain starts past sink + window never read gap cells: exact against the 380-token sequence;
    # chains that end inside the sink are unaffected by the gap
    _check_against_reference(head, toks, hid, depth, sink, window, block=16, off=off,
                             starts=[0, 1] + list(range(sink + window, T - depth, 5)))


def test_training_mask_equals_draft_cells_read_set():
    """At 3k positions with the default sink 64 / window 256: committed_mask for chain start t and
    step j == DraftCells.read_cells(t + j - 1) restricted to committed cells <= t, with every cell
    up to t committed (as in a long prompt's prefill + catch-up); also through a 10k gap."""
    sink, window, n = 64, 256, 3000
    s = torch.arange(n)
    for off in (0, 10_000):
        pos = virtual_positions(n, sink, off)
        for t in (0, 63, 64, 300, 320, 321, 1000, 2999):
            for j in (1, 2, 3):
                m = committed_mask(pos, torch.tensor(t), s, j, sink, window)
                got = (pos[m] if off else s[m]).numpy()
                # inference on the long sequence: cells [0, pos[t]] committed, query at pos[t] + j - 1
                dc = DraftCells(DraftCellsConfig(sink=sink, window=window))
                dc.wrote(0, int(pos[t]) + 1)
                want = dc.read_cells(int(pos[t]) + j - 1)
                if off:  # the gap cells do not exist in the training row
                    want = want[(want < sink) | (want >= sink + off)]
                np.testing.assert_array_equal(got, want, err_msg=f"off {off} t {t} j {j}")


def test_sampled_rows_are_the_model_greedy_tokens(engine):
    m, tok = engine.model, engine.tokenizer
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": q}]), add_bos=False)
               for q in ("Name a colour.", "Count to three, please, slowly and with words.")]
    gc = GenConfig(rows=3, length=28, batch=2, temps=(0.0,), time_budget=0, seed=1)
    blocks, masks = sample_rows(m, prompts, gc, tok.bos_id, tuple(tok.stop_ids), tok.encode("\n", add_bos=False),
                                progress=False)
    assert [b.shape for b in blocks] == [(2, 28), (1, 28)]
    rows, sampled = np.concatenate(blocks), np.concatenate(masks)
    for r, smp in zip(rows, sampled):
        assert r[0] == tok.bos_id and not smp[0]
        first = next(i for i in range(1, 28) if smp[i])
        assert r[1:first].tolist() in prompts  # a whole prompt is forced first
        assert smp[first:].sum() > 5
        kv = KVCache(m.cfg.n_layers, 64, m.cfg.n_kv_heads, m.cfg.head_dim, m.device, m.dtype)
        logits, _ = m.forward(torch.from_numpy(r), 0, kv)
        am = logits.argmax(-1).numpy()
        idx = np.nonzero(smp)[0]
        assert (r[idx] == am[idx - 1]).all(), (r[idx], am[idx - 1])


def test_warm_start_reproduces_init_eval_and_mixes_gen_rows(engine, tmp_path):
    tok = engine.tokenizer
    text = (Path(__file__).resolve().parent.parent / "data" / "tempest_act1.txt").read_text()
    ids = tok.encode(text, add_bos=False)
    rows = data_mod.pack([ids], 33, tok.bos_id, 8)
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": "Hi there."}]), add_bos=False)]
    data_mod.save(tmp_path / "d.npy", rows, {"heldout_rows": 2, "seq_len": 33}, prompts)
    base = dict(batch=2, lr=3e-3, warmup=2, chain=2, vocab_rows=200, sink=4, window=8, eval_every=0, eval_rows=2,
                ckpt_every=0, block=8, eval_offset=500)
    a = train(engine.model, engine.gguf.sha256(), str(tmp_path / "d.npy"), str(tmp_path / "a.gguf"),
              TrainConfig(steps=8, **base), "cpu", progress=False)
    fin = a["history"][-1]
    # warm start from the written head (Q8_0): step-0 eval == the first run's last eval, and the
    # run mixes in sampled rows and virtual gaps
    tc = TrainConfig(steps=2, init=str(tmp_path / "a.gguf"), pos_offset=400, offset_frac=1.0, gen_rows=2, gen_len=33,
                     gen_batch=2, gen_time=0, gen_frac=1.0, seed=3, **base)
    b = train(engine.model, engine.gguf.sha256(), str(tmp_path / "d.npy"), str(tmp_path / "b.gguf"), tc, "cpu",
              progress=False, tokenizer=tok)
    st = b["history"][0]
    assert st["step"] == 0
    for key in ("kl", "kl_far"):
        np.testing.assert_allclose(st[key], fin[key], rtol=0.03, err_msg=key)
    assert a["history"][0]["kl"][0] > 1.5 * st["kl"][0]  # far from a fresh head
    assert b["recipe"]["gen_rows"] == 2 and b["recipe"]["init"] == str(tmp_path / "a.gguf")
    from mtp_turbo.io.gguf_file import GGUFFile

    ga, gb = GGUFFile(tmp_path / "a.gguf"), GGUFFile(tmp_path / "b.gguf")
    assert np.array_equal(np.asarray(ga.metadata["mtp.vocab_ids"]), np.asarray(gb.metadata["mtp.vocab_ids"]))
    assert json.loads(gb.metadata["mtp.recipe"])["pos_offset"] == 400


def test_build_holds_out_the_bench_play_and_saves_prompts(engine, tmp_path):
    tok = engine.tokenizer
    plays = tmp_path / "texts"
    plays.mkdir()
    (plays / "tempest_gut.txt").write_text("Zyxwv quorble " * 300)
    (plays / "hamlet_gut.txt").write_text("To be, or not to be, that is the question. " * 200)
    (plays / "hamlet_gut_f.txt").write_text("folio copy " * 100)
    (plays / "metadata.txt").write_text("not a play " * 100)
    recs = [{"conversations": [{"from": "human", "value": f"Question number {i} about apples?"},
                               {"from": "gpt", "value": f"Answer {i}: apples are fruit. " * 20}]} for i in range(400)]
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps(recs))
    cfg = data_mod.DataConfig(seq_len=64, target_tokens=64 * 60, heldout_rows=8, shakespeare_frac=0.3, prompts=5)
    rows, side, prompts = data_mod.build(tok, cfg, plays, str(sg), progress=False)
    assert side["heldout_play"] == "tempest_gut" and side["prompts"] == 5
    marker = tok.encode("Zyxwv quorble", add_bos=False)[0]
    n_tr = side["train_rows"]
    assert not (rows[:n_tr] == marker).any() and (rows[n_tr:] == marker).any()
    data_mod.save(tmp_path / "x.npy", rows, side, prompts)
    back = data_mod.load_prompts(tmp_path / "x.npy")
    assert back == prompts and all(tok.decode(p).endswith("<start_of_turn>model\n") for p in back)


def test_gen_draw_follows_the_sampler_chain():
    """Sampled training rows are drawn from the engine's chain with penalties over each row's own
    history (checked against a hand computation); temperature-0 rows take the plain argmax."""
    from mtp_turbo.train.generate import draw

    logits = torch.tensor([2.0, 1.5, 1.2, -0.5, 0.3, -3.0])
    hist = torch.tensor([2, 1, 4, 3])  # token 2 falls outside the 3-token penalty window
    from mtp_turbo.sampling.config import SamplerConfig

    gc = GenConfig(temps=(0.6,), chain=SamplerConfig(temperature=1.0, top_k=0, top_p=0.85, min_p=0.05,
                                                     repeat_penalty=1.1, presence_penalty=0.4,
                                                     frequency_penalty=0.1, penalty_last_n=3))
    # by hand: the window is the last 3 tokens [1, 4, 3]
    l = logits.double().clone()
    for t in (1, 4, 3):
        l[t] = (l[t] / 1.1 if l[t] > 0 else l[t] * 1.1) - 0.4 - 0.1
    p = torch.softmax(l / 0.6, 0)
    p[p < 0.05 * p.max()] = 0
    p /= p.sum()
    order = torch.argsort(p, descending=True)
    keep = (torch.cumsum(p[order], 0) - p[order]) < 0.85
    q = torch.zeros_like(p)
    q[order[keep]] = p[order[keep]]
    q /= q.sum()
    n = 40000
    temps = [0.0] + [0.6] * n
    out = draw(logits.repeat(n + 1, 1), hist.repeat(n + 1, 1), temps, gc, torch.Generator().manual_seed(3))
    assert int(out[0]) == 0  # greedy row: argmax of the raw logits, no penalties
    freq = torch.bincount(out[1:], minlength=6).double() / n
    assert (freq[q == 0] == 0).all() and (q > 0).sum() == 2  # min-p and top-p both cut here
    assert torch.allclose(freq, q, atol=4 * (0.25 / n) ** 0.5), (freq, q)
