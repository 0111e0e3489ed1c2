"""Exact enumeration: speculative output distribution == one-at-a-time distribution to 1e-12."""

import argparse

import pytest

from mtp_turbo.check import enumerate as en


def test_enumeration_matches_reference_to_1e12():
    rep = en.enumerate_check(ks=(1, 2, 3), horizon=3)
    assert rep["outcomes"] > 20 and abs(rep["ref_mass"] - 1.0) < 1e-12
    assert [(r["drafter"], r["k"]) for r in rep["rows"]] == [(d, k) for d in ("toy", "draft-model") for k in (1, 2, 3)]
    for row in rep["rows"]:
        assert row["closed"] <= 1e-12 and row["verify"] <= 1e-12, row
        assert row["greedy"] > 1e-3, row  # the legacy rule is measurably biased
    assert rep["ok"]
    assert "draft-model" in en.format_report(rep)


def test_draft_model_drafter_is_its_own_and_accepts():
    """The draft-model chain differs from the target's argmax and from the toy drafter on some
    histories, and its drafts are accepted often: E[tokens/round] > 1 (closed form, per history)."""
    import itertools

    import torch

    model, cfg = en.EnumModel(), en.enum_config()
    hs = [list(h) for h in itertools.product(range(model.vocab), repeat=4)]
    dm, toy = en.drafter_fn(model, "draft-model"), en.drafter_fn(model, "toy")
    d = [dm(h) for h in hs]
    agree_target = sum(x == int(torch.argmax(model.logits(h))) for x, h in zip(d, hs)) / len(hs)
    agree_toy = sum(x == toy(h) for x, h in zip(d, hs)) / len(hs)
    assert 0.5 < agree_target < 0.95 and agree_toy < 0.5, (agree_target, agree_toy)

    def tokens_per_round(draft, h, k=3):
        drafts: list[int] = []
        for _ in range(k):
            drafts.append(draft(h + drafts))
        p, _ = en._rows(model, h, drafts, cfg)
        reach = torch.cumprod(p[:k].gather(1, torch.tensor(drafts)[:, None]).squeeze(1), 0)  # P(accept >= a)
        return 1.0 + float(reach.sum())

    tpr_dm = sum(tokens_per_round(dm, h) for h in hs[::7]) / len(hs[::7])
    tpr_toy = sum(tokens_per_round(toy, h) for h in hs[::7]) / len(hs[::7])
    assert tpr_dm > 1.3 and tpr_dm > tpr_toy + 0.2, (tpr_dm, tpr_toy)


def test_enumeration_horizon4_with_temp0_and_window():
    cfg = en.SamplerConfig(temperature=0.0, repeat_penalty=1.5, presence_penalty=0.4, penalty_last_n=2)
    rep = en.enumerate_check(ks=(2,), horizon=4, cfg=cfg)
    assert rep["outcomes"] == 1 and rep["ok"]
    rep = en.enumerate_check(ks=(3,), horizon=4)
    assert rep["rows"][0]["verify"] <= 1e-12 and rep["rows"][0]["closed"] <= 1e-12


def test_cli_registration(capsys):
    parser = argparse.ArgumentParser(prog="mtp-turbo check")
    sub = parser.add_subparsers(dest="cmd")
    en.register(sub)
    args = parser.parse_args(["enumerate", "--horizon", "2"])
    assert args.func(args) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.interpret
def test_enumeration_through_the_fused_sampler():
    """--sampler fused: the kernels' distributions (plain rows alone, verify rows k+1 at once) obey
    the same identities to 1e-12, and equal the torch chain's up to float32 logits."""
    pytest.importorskip("triton")
    rep = en.enumerate_check(ks=(1, 3), horizon=3, sampler="fused")
    assert rep["ok"] and rep["outcomes"] == en.enumerate_check(ks=(1,), horizon=3)["outcomes"]
    assert 0 < rep["vs_torch"] < 1e-6
    assert all(row["greedy"] > 1e-3 for row in rep["rows"])
    cfg = en.SamplerConfig(temperature=0.0, repeat_penalty=1.5, presence_penalty=0.4, penalty_last_n=2)
    rep = en.enumerate_check(ks=(2,), horizon=4, cfg=cfg, sampler="fused")
    assert rep["outcomes"] == 1 and rep["ok"] and rep["vs_torch"] == 0.0
    assert "fused sampler" in en.format_report(rep)
