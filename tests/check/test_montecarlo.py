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


def test_draft_model_row_is_exact_and_accepts(report):
    row = report["rows"][2]
    assert row["drafter"] == "draft-model"
    assert row["tv_exact"] <= report["limit"] and row["same_seed_identical"] == 1.0 and row["exact_ok"], row
    tprs = {r["drafter"]: r["tokens_per_round_exact"] for r in report["rows"]}
    assert 1.3 < tprs["draft-model"] < tprs["greedy-chain"], tprs  # accepts often, below a perfect-argmax drafter
    assert tprs["draft-model"] > tprs["toy"] + 0.2, tprs
    assert row["tv_greedy"] > 5 * report["tv_floor"]  # greedy-match is biased with it too
    assert "draft-model" in montecarlo.format_report(report)


def test_draft_model_is_its_own_model():
    """Its argmax differs from the target's and from the toy drafter's on some histories (so the
    row tests something the other two do not), but agrees with the target's on most."""
    import torch

    model = montecarlo.ToyModel()
    g = torch.Generator().manual_seed(0)
    hist = torch.randint(0, model.vocab, (4000, 12), generator=g)
    lens = torch.randint(4, 10, (4000,), generator=g)
    d = torch.argmax(model.draft_model().logits(hist, lens), dim=1)
    agree_target = (d == torch.argmax(model.logits(hist, lens), dim=1)).double().mean()
    agree_toy = (d == model.toy_draft(hist, lens)).double().mean()
    assert 0.5 < agree_target < 0.9 and agree_toy < 0.6, (agree_target, agree_toy)
    with pytest.raises(AssertionError):
        montecarlo.spec_run(model, montecarlo.toy_config(0), 10, 2, "draft model", "exact")


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
