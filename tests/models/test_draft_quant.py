"""--draft-quant: q5_0/q4_0 requantize exactly the policy's matrices of the MTP head (from the
stored Q8_0 values), K/V, norms and the LM head rows stay as stored; bf16 keeps the stored values;
error ordering q8_0 < q5_0 < q4_0; config validation; the CLI flag; plumbing from SpecConfig."""

from types import SimpleNamespace

import pytest
import torch

from mtp_turbo.cli import main as cli_main
from mtp_turbo.errors import ConfigError
from mtp_turbo.models.gemma3 import Gemma3Config
from mtp_turbo.models.mtp_drafter import (DRAFT_QUANT_KEYS, MTPConfig, apply_draft_quant, load_head,
                                          load_mtp_drafter, tensor_names)
from mtp_turbo.quant.formats import quantize_dequantize
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.train.export import save_head

SHA = "ab" * 32
V, D = 97, 64  # tiny: every matrix dimension a multiple of the 32-wide blocks


# (built here rather than imported from test_mtp_drafter.py: pytest runs with --import-mode=importlib,
# under which test modules cannot import each other)
def fake_main_for_file():
    mc = Gemma3Config(vocab_size=V, hidden=D, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=32, ffn=128,
                      eps=1e-6, rope_global=1e6, rope_local=1e4, sliding_window=16, sliding_pattern=6,
                      query_scale=32 ** -0.5, context_length=512)
    embed = torch.randn(V, D, generator=torch.Generator().manual_seed(1))
    return SimpleNamespace(cfg=mc, device=torch.device("cpu"), dtype=torch.float32, embed=embed)


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
        if k in DRAFT_QUANT_KEYS:
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
    assert SpecConfig().draft_quant == "q8_0"
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
    engine = SimpleNamespace(model=main, gguf=SimpleNamespace(sha256=lambda: SHA), ctx_size=64)
    d8 = load_mtp_drafter(engine, SpecConfig(draft="mtp", drafter=str(p)))
    d4 = load_mtp_drafter(engine, SpecConfig(draft="mtp", drafter=str(p), draft_quant="q4_0"))
    assert torch.equal(d4.head.W["k"], d8.head.W["k"])
    assert torch.equal(d4.head.W["down"], quantize_dequantize(d8.head.W["down"], "q4_0_lloyd"))
