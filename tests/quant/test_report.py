"""quant-report on real tensors of the default model: error ordering across formats, CLI."""

from __future__ import annotations

import argparse

import pytest

from mtp_turbo.errors import ConfigError
from mtp_turbo.quant import report


def test_error_ordering_on_real_tensors(model_path):
    # Sources Q4_K and Q6_K (a Q5_0 source would re-quantize exactly to Q5_0; see the module doc).
    names = ("blk.3.attn_output.weight", "blk.0.ffn_down.weight")
    rows = report.report_file(model_path, names, rows=64, n_x=8, seed=1)
    assert [r.name for r in rows] == list(names)
    for r in rows:
        e = r.rel_rmse
        assert r.shape[0] == 64 and r.source_type in ("Q4_K", "Q6_K")
        assert 0 < e["q8_0"] < e["q5_0"] < e["q4_0"], (r.name, e)
        assert e["q4_0_lloyd"] <= e["q4_0"], (r.name, e)
        assert e["q8_0"] < 0.02 and e["q4_0"] < 0.25  # sane magnitudes (the report: ~0.6% / ~10%)
    table = report.format_table(rows)
    assert "already quantized" in table and "Q4_0 (Lloyd)" in table
    assert table.count("\n| blk.") == 2


def test_same_format_source_requantizes_exactly(model_path):
    (row,) = report.report_file(model_path, ("blk.0.attn_q.weight",), rows=32, n_x=4, seed=0,
                                formats=("q8_0", "q5_0"))
    assert row.source_type == "Q5_0"
    assert row.rel_rmse["q5_0"] < 1e-6 < row.rel_rmse["q8_0"]


def test_select_and_errors(model_path):
    names = ["blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.0.ffn_up.weight"]
    assert report.select(names, ("blk.*.attn_q.weight", "blk.0.*")) == [
        "blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.0.ffn_up.weight"]
    with pytest.raises(ConfigError):
        report.report_file(model_path, ("no_such_tensor*",), rows=8, n_x=4, seed=0)


def test_cli_registration(model_path, capsys):
    parser = argparse.ArgumentParser(prog="mtp-turbo")
    sub = parser.add_subparsers(dest="cmd")
    report.register(sub)
    args = parser.parse_args(["quant-report", "--model", str(model_path), "--rows", "32", "--n-x", "4",
                              "--tensors", "blk.2.attn_output.weight"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| blk.2.attn_output.weight | Q4_K | 32x1024 |" in out
    with pytest.raises(ConfigError):
        args.func(parser.parse_args(["quant-report", "--rows", "0"]))
