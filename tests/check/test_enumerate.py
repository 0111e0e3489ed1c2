"""Exact enumeration: speculative output distribution == one-at-a-time distribution to 1e-12."""

import argparse

import pytest

from mtp_turbo.check import enumerate as en


def test_enumeration_matches_reference_to_1e12():
    rep = en.enumerate_check(ks=(1, 2, 3), horizon=3)
    assert rep["outcomes"] > 20 and abs(rep["ref_mass"] - 1.0) < 1e-12
    for row in rep["rows"]:
        assert row["closed"] <= 1e-12 and row["verify"] <= 1e-12, row
        assert row["greedy"] > 1e-3, row  # the legacy rule is measurably biased
    assert rep["ok"]


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
