"""--draft-quant: q5_0/q4_0 requantize exactly the policy's matrices of the MTP head (from the
stored Q8_0 values), K/V, norms and the LM head rows stay as stored; bf16 keeps the stored values;
error ordering q8_0 < q5_0 < q4_0; config validation; the CLI flag; plumbing from SpecConfig."""

from types import SimpleNamespace

import pytest
import torch

from mtp_turbo.cli import main as cli_main
from mtp_turbo.errors import ConfigError
from mtp_turbo.models.arch import ModelConfig, Rope
from mtp_turbo.models.mtp_head import DRAFT_QUANT_KEYS, MTPConfig, tensor_names
from mtp_turbo.models.mtp_load import apply_draft_quant, load_head
from mtp_turbo.spec.drafters.mtp import MTPDrafter, load_mtp_drafter
from mtp_turbo.quant.formats import quantize_dequantize
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.train.export import save_head

SHA = "ab" * 32
V, D = 97, 64  # tiny: every matrix dimension a multiple of the 32-wide blocks


# (built here rather than imported from test_mtp_drafter.py: pytest runs with --import-mode=importlib,
# under which test modules cannot import each other)
def fake_main_for_file():
    mc = ModelConfig(family="gemma3", vocab_size=V, hidden=D, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=32, ffn=128,
                      eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=16, sliding_pattern=6,
                      query_scale=32 ** -0.5, context_length=512)
    embed = torch.randn(V, D, generator=torch.Generator().manual_seed(1))
    return fake_main(cfg=mc, device=torch.device("cpu"), dtype=torch.float32, embed=embed)


def fake_main(**kw) -> SimpleNamespace:
    """A stand-in for a main Decoder: what load_head reads of one (its dense table as embedding_table)."""
    ns = SimpleNamespace(**kw)
    ns.embedding_table = lambda: ns.embed
    return ns


def random_weights(cfg: MTPConfig, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes = {"fc_e": (cfg.hidden, cfg.hidden), "fc_h": (cfg.hidden, cfg.hidden), "q": (qd, cfg.hidden),
              "k": (kvd, cfg.hidden), "v": (kvd, cfg.hidden), "o": (cfg.hidden, qd),
              "gate": (cfg.ffn, cfg.hidden), "up": (cfg.ffn, cfg.hidden), "down": (cfg.hidden, cfg.ffn)}
    W = {}
    for k in tensor_names(cfg):
        if k.endswith("norm"):
            W[k] = 1.0 + 0.1 * torch.randn(cfg.head_dim if k in ("q_norm", "k_norm") else cfg.hidden, generator=g)
        else:
            W[k] = torch.randn(*shapes[k], generator=g) / shapes[k][1] ** 0.5
    return W
REQUANT = {"q5_0": "q5_0", "q4_0": "q4_0_lloyd"}


@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    """A tiny head GGUF (Q8_0 matrices) with a gathered vocabulary, its source weights and main."""
    main = fake_main_for_file()
    cfg = MTPConfig.for_main(main.cfg)
    W = random_weights(cfg, 11)
    p = tmp_path_factory.mktemp("dq") / "head.gguf"
    save_head(p, W, cfg, SHA, torch.tensor([2, 3, 5, 7, 11, 13, 17, 19, 23, 29]), {})
    return p, W, main


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_policy_keys_cover_the_design_groups():
    cfg = MTPConfig.for_main(fake_main_for_file().cfg)
    keys = set(tensor_names(cfg))
    assert set(DRAFT_QUANT_KEYS) <= keys
    assert {"k", "v"}.isdisjoint(DRAFT_QUANT_KEYS)
    assert not any(k.endswith("norm") for k in DRAFT_QUANT_KEYS)


@pytest.mark.parametrize("dq", ["q5_0", "q4_0"])
def test_low_bit_changes_exactly_the_policy_matrices(head_file, dq):
    p, _, main = head_file
    h8 = load_head(p, main, expect_sha=SHA)  # default q8_0: the stored values
    hq = load_head(p, main, expect_sha=SHA, draft_quant=dq)
    assert set(hq.W) == set(h8.W)
    for k, w8 in h8.W.items():
        wq = hq.W[k]
        assert wq.dtype == w8.dtype and wq.shape == w8.shape, k
        if k == "fc":  # fc_embedding | fc_hidden joined along K, for the one fc GEMV
            assert torch.equal(wq, torch.cat([hq.W["fc_e"], hq.W["fc_h"]], dim=1))
        elif k in DRAFT_QUANT_KEYS:
            assert not torch.equal(wq, w8), k  # really requantized
            # exactly the low-bit values of the stored Q8_0 matrix (q4_0 through the Lloyd search)
            assert torch.equal(wq, quantize_dequantize(w8, REQUANT[dq])), k
        else:  # K/V (Q8_0) and norms (float) bit-identical
            assert torch.equal(wq, w8), k
    assert {"k", "v"} <= set(h8.W) - set(DRAFT_QUANT_KEYS)
    # the gathered LM head rows keep the main model's values
    assert torch.equal(hq.head_rows, main.embed[hq.vocab_ids])
    assert torch.equal(hq.vocab_ids, h8.vocab_ids)


def test_bf16_keeps_the_stored_values(head_file):
    p, _, main = head_file
    h8 = load_head(p, main)
    hb32 = load_head(p, main, draft_quant="bf16")  # float32 compute: identical to q8_0
    for k in h8.W:
        assert torch.equal(hb32.W[k], h8.W[k]), k
    hb = load_head(p, main, dtype=torch.bfloat16, draft_quant="bf16")
    for k, w in h8.W.items():
        if k.endswith("norm"):
            assert hb.W[k].dtype == torch.float32 and torch.equal(hb.W[k], w), k
        else:  # only the cast to the compute dtype, no requantization
            assert hb.W[k].dtype == torch.bfloat16 and torch.equal(hb.W[k], w.to(torch.bfloat16)), k


def test_error_ordering(head_file):
    p, W, main = head_file
    heads = {dq: load_head(p, main, draft_quant=dq) for dq in ("q8_0", "q5_0", "q4_0")}
    for k in ("gate", "o"):
        stored = heads["q8_0"].W[k]
        e = {dq: rel(h.W[k], stored) for dq, h in heads.items()}
        assert e["q8_0"] == 0.0 < e["q5_0"] < e["q4_0"], (k, e)
        # against the trained float weights too
        e0 = {dq: rel(h.W[k], W[k]) for dq, h in heads.items()}
        assert 0.0 < e0["q8_0"] < e0["q5_0"] < e0["q4_0"], (k, e0)
        assert e0["q4_0"] < 0.2, (k, e0)  # still the same matrix, not noise


def test_config_and_apply_reject_bad_values():
    assert SpecConfig().draft_quant == "bf16"  # the measured default (bench/RESULTS.md session 21)
    for ok in ("q8_0", "q5_0", "q4_0", "bf16"):
        assert SpecConfig(draft_quant=ok).draft_quant == ok
    for bad in ("q4_1", "Q8_0", "fp16", ""):
        with pytest.raises(ConfigError, match="draft-quant"):
            SpecConfig(draft_quant=bad)
    with pytest.raises(ConfigError, match="draft-quant"):
        apply_draft_quant({}, "q3_k")


def test_cli_lists_draft_quant(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["generate", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--draft-quant" in out and "q4_0" in out
    # a bad value is refused with the flag named, before any model loads
    assert cli_main(["generate", "--draft-quant", "q2", "hello"]) == 1
    assert "draft-quant" in capsys.readouterr().err


def test_load_mtp_drafter_plumbs_draft_quant(head_file):
    p, _, main = head_file
    gguf = SimpleNamespace(sha256=lambda: SHA)
    d8 = load_mtp_drafter(SpecConfig(draft="mtp", drafter=str(p)), main, gguf, 64)
    d4 = load_mtp_drafter(SpecConfig(draft="mtp", drafter=str(p), draft_quant="q4_0"), main, gguf, 64)
    assert torch.equal(d4.head.W["k"], d8.head.W["k"])
    assert torch.equal(d4.head.W["down"], quantize_dequantize(d8.head.W["down"], "q4_0_lloyd"))


# ---- the packed path: the same drafter on PackedLinear layers (torch fallback / Triton kernels) --
def _drive(head, seed: int = 3, rounds: int = 3, k: int = 3):
    """A short engine-like session: prefill, then rounds with random acceptance. -> (drafts, logits)."""
    import random

    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    tokens = [rng.randrange(V) for _ in range(21)]
    H = torch.randn(200, D, generator=g) * 2
    dr = MTPDrafter(head, capacity=128, sink=4, window=8)
    dr.on_prefill(0, len(tokens) - 1, H[: len(tokens) - 1].clone(), tokens)
    drafts, logits = [], []
    for _ in range(rounds):
        d = dr.propose(tokens, k)
        drafts.append(d)
        logits.append(dr.last_logits.clone())
        acc = rng.randrange(k + 1)
        tokens = tokens + d[:acc] + [rng.randrange(V)]
        dr.observe(tokens, acc, H[len(tokens) - acc - 2: len(tokens) - 1].clone())
    return drafts, torch.cat(logits)


def _has_triton() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


@pytest.mark.parametrize("dq", ["q8_0", "q4_0", "bf16"])
def test_packed_path_matches_value_path(head_file, dq):
    """On CPU the packed layers (torch fallback over the packed arrays) give the value-only path's
    drafts and logits at fp32 rounding; layers are fused where formats match; K/V packed Q8_0."""
    from mtp_turbo.quant.gemv import PackedLinear

    p, _, main = head_file
    dense = load_head(p, main, draft_quant=dq, head_quant="q8_0", gemv_backend="dense")
    packed = load_head(p, main, draft_quant=dq, head_quant="q8_0", gemv_backend="torch")
    assert dense.ops is dense.W and "head" not in dense.ops
    for k in dense.W:  # the same values in both
        assert torch.equal(dense.W[k], packed.W[k]), k
    ops = packed.ops
    assert isinstance(ops["head"], PackedLinear) and ops["head"].w.fmt == "q8_0"
    if dq == "bf16":  # dense matrices, packed head only
        assert all(isinstance(ops[k], torch.Tensor) for k in DRAFT_QUANT_KEYS + ("k", "v"))
    else:
        assert isinstance(ops["gate_up"], PackedLinear) and ops["gate_up"].w.fmt == dq
        assert "gate" not in ops and "up" not in ops
        if dq == "q8_0":  # q, k, v all Q8_0: one fused layer
            assert ops["qkv"].w.fmt == "q8_0" and "q" not in ops
        else:  # q in the low-bit format, K/V Q8_0
            assert ops["q"].w.fmt == dq and ops["k"].w.fmt == "q8_0" and ops["v"].w.fmt == "q8_0"
        assert "fc_e" not in ops and "fc_h" not in ops  # joined along K into one layer
        for k in ("o", "fc", "down"):
            assert ops[k].w.fmt == dq, k
            assert torch.equal(ops[k].w.dequantize(), dense.W[k]), k  # packed bytes = policy values
    d0, l0 = _drive(dense)
    d1, l1 = _drive(packed)
    assert d0 == d1
    assert (l1 - l0).abs().max() <= 1e-5 * l0.abs().max(), float((l1 - l0).abs().max())


@pytest.mark.interpret
@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
@pytest.mark.parametrize("dq", ["q8_0", "q5_0"])
def test_kernel_path_matches_value_path(head_file, dq, monkeypatch):
    """The drafter on the Triton kernels (Triton's interpreter without CUDA) == the value path."""
    from mtp_turbo.quant import kernels

    if not kernels.interpreting():
        pytest.skip("CUDA present: the kernels are checked on the GPU (tests/quant, gpu marks)")
    calls = []
    real = kernels.gemv_packed
    monkeypatch.setattr(kernels, "gemv_packed", lambda x, w, t, o: (calls.append(x.shape[0]), real(x, w, t, o)))
    p, _, main = head_file
    dense = load_head(p, main, draft_quant=dq, head_quant="q8_0", gemv_backend="dense")
    kern = load_head(p, main, draft_quant=dq, head_quant="q8_0", gemv_backend="triton")
    assert kern.ops["head"].use_kernel and kern.ops["down"].use_kernel
    d0, l0 = _drive(dense, rounds=2)
    d1, l1 = _drive(kern, rounds=2)
    assert calls and max(calls) <= 4  # the kernels ran, on chunks of at most 4 rows
    assert d0 == d1
    assert (l1 - l0).abs().max() <= 1e-5 * l0.abs().max(), float((l1 - l0).abs().max())


def test_head_keeps_the_main_models_format(head_file):
    """head_quant "main": the gathered LM head rows are the main file's own Q8_0 blocks (packed,
    not requantized), equal to the main model's dequantized embedding rows."""
    from mtp_turbo.quant.formats import quantize
    from mtp_turbo.quant.repack import PackedWeight

    p, _, main = head_file
    raw = quantize(main.embed, "q8_0")  # the "main file's" token_embd bytes
    q8_embed = PackedWeight.from_gguf_bytes(raw, "q8_0", tuple(main.embed.shape)).dequantize()
    info = SimpleNamespace(ggml_type=8, shape=tuple(main.embed.shape))
    gguf_file = SimpleNamespace(tensors={"token_embd.weight": info}, raw=lambda name: raw.reshape(-1))
    main_q8 = fake_main(**{**vars(main), "embed": q8_embed})
    hp = load_head(p, main_q8, gemv_backend="torch", main_gguf=gguf_file)
    head = hp.ops["head"]
    assert head.w.fmt == "q8_0" and head.w.shape == (len(hp.vocab_ids), D)
    assert (head.w.to_gguf_bytes() == raw[hp.vocab_ids.numpy()]).all()
    assert torch.equal(head.w.dequantize(), hp.head_rows)  # = main's embedding rows
    # the same rows from the codes a CUDA main model keeps (models/load.py), without the file
    from mtp_turbo.quant.repack import split_q8_0

    main_kept = fake_main(**{**vars(main_q8), "head_q8": split_q8_0(torch.from_numpy(raw.reshape(-1)),
                                                                          tuple(main.embed.shape))})
    main_kept.head_packed = lambda: PackedWeight("q8_0", tuple(main.embed.shape), *main_kept.head_q8)  # as Gemma3's
    kept = load_head(p, main_kept, gemv_backend="torch").ops["head"]
    assert (kept.w.to_gguf_bytes() == raw[hp.vocab_ids.numpy()]).all()
    # without the file (or on the dense path) the head is the dense rows, as before
    assert "head" not in load_head(p, main_q8, gemv_backend="torch").ops
    assert "head" not in load_head(p, main_q8, gemv_backend="dense", main_gguf=gguf_file).ops
    with pytest.raises(ConfigError, match="head format"):
        load_head(p, main, head_quant="q3")
