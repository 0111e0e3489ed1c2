"""CI-sized Monte Carlo: exact verification at the noise floor, greedy-match far above it."""

import argparse

import pytest

from mtp_turbo.check import montecarlo


@pytest.fixture(scope="module")
def report():
    return montecarlo.run_montecarlo(n_seq=60_000, seed=7, k=2, same_seed_seqs=5_000)


def test_exact_at_noise_floor_and_greedy_far_above(report):
    floor = report["tv_floor"]
    assert 0 < floor < 0.03
    for row in report["rows"]:
        assert row["tv_exact"] <= report["limit"], row
        assert row["same_seed_identical"] == 1.0, row  # same seed: same text as plain sampling
    chain = report["rows"][1]
    assert chain["drafter"] == "greedy-chain"
    assert chain["tv_greedy"] > 20 * floor
    assert chain["tokens_per_round_greedy"] == pytest.approx(3.0)  # perfect greedy drafter, k=2
    assert 1.0 < chain["tokens_per_round_exact"] < 3.0
    assert report["ok"]
    text = montecarlo.format_report(report)
    assert "greedy-chain" in text and "PASS" in text


def test_cli_registration(capsys):
    parser = argparse.ArgumentParser(prog="mtp-turbo check")
    sub = parser.add_subparsers(dest="cmd")
    montecarlo.register(sub)
    args = parser.parse_args(["montecarlo", "--sequences", "3000", "--seed", "5"])
    assert args.sequences == 3000 and args.seed == 5
    rc = args.func(args)
    assert rc in (0, 1)  # 3000 sequences: the table prints; pass/fail is statistical here
    assert "TV exact" in capsys.readouterr().out


@pytest.mark.interpret
def test_fused_sampler_draws_the_same_tokens():
    """--sampler fused: the fused kernels (Triton's interpreter here) draw, for the same seeds, the
    very tokens of the torch chain, plain and speculative (both drafters); tokens/round equal."""
    pytest.importorskip("triton")
    import torch

    model, n = montecarlo.ToyModel(), 80
    cfg = montecarlo.toy_config(5)
    assert torch.equal(montecarlo.plain_run(model, cfg, n, "fused"), montecarlo.plain_run(model, cfg, n))
    for drafter in ("toy", "greedy-chain"):
        a, tpr_a = montecarlo.spec_run(model, cfg, n, 2, drafter, "exact", "fused")
        b, tpr_b = montecarlo.spec_run(model, cfg, n, 2, drafter, "exact")
        assert torch.equal(a, b) and tpr_a == tpr_b
    parser = argparse.ArgumentParser(prog="mtp-turbo check")
    montecarlo.register(parser.add_subparsers(dest="cmd"))
    assert parser.parse_args(["montecarlo", "--sampler", "fused"]).sampler == "fused"
    assert parser.parse_args(["montecarlo"]).sampler == "torch"
