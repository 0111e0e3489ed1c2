"""byte-floor: reproduces the report's per-step figures; the Gemma drafter's table is consistent."""

from __future__ import annotations

import argparse

import pytest

from mtp_turbo.errors import ConfigError
from mtp_turbo.check import bytefloor as bf


def _total_mb(desc, variant, quant, head_rows=None):
    return sum(bf.step_bytes(desc, variant, quant, head_rows).values()) / 1e6


def test_report_figures():
    d = bf.model_descs()["report"]
    # The report: before ~186 MB, patch default ~163, MTP_Q5 ~139, MTP_Q4 ~131.
    assert abs(_total_mb(d, "before", "q8_0") - 186) < 1.0
    assert abs(_total_mb(d, "patch", "q8_0") - 163) < 1.0
    assert abs(_total_mb(d, "patch", "q5_0") - 139) < 1.0
    assert abs(_total_mb(d, "patch", "q4_0") - 131) < 1.0
    # Its ms at ~120 GB/s: 1.55 -> 1.36 / 1.16 / 1.09.
    for (v, q), ms in {("before", "q8_0"): 1.55, ("patch", "q8_0"): 1.36,
                       ("patch", "q5_0"): 1.16, ("patch", "q4_0"): 1.09}.items():
        assert abs(_total_mb(d, v, q) / 120 - ms) < 0.01
    # Per-tensor figures of the report (MB).
    b = {k: x / 1e6 for k, x in bf.step_bytes(d, "before", "q8_0").items()}
    for name, mb in {"fc_embedding": 7.0, "fc_hidden": 27.9, "indexer": 1.74, "attn_q": 33.4,
                     "attn_output": 16.7, "router": 1.4, "head": 55.1}.items():
        assert abs(b[name] - mb) < 0.06, (name, b[name])
    assert abs(sum(b[f"hc_block{i}"] for i in range(3)) - 21) < 0.2
    assert abs(b["attn_k"] + b["attn_v"] - 2.8) < 0.05
    assert abs(sum(b[f"shared_{p}"] for p in ("gate", "up", "down")) - 5.2) < 0.05
    assert abs(sum(b[f"expert_{p}"] for p in ("gate", "up", "down")) - 13.8) < 0.05
    assert "indexer" not in bf.step_bytes(d, "patch", "q8_0")


def test_gemma_drafter_policy():
    d = bf.model_descs()["gemma3-270m-mtp"]
    t = {q: bf.step_bytes(d, "mtp", q) for q in bf.QUANT_CHOICES}
    assert sum(t["q4_0"].values()) < sum(t["q5_0"].values()) < sum(t["q8_0"].values()) < sum(t["bf16"].values())
    assert t["q4_0"]["attn_q"] == 1024 * 640 // 32 * 18
    assert t["q5_0"]["ffn_down"] == 640 * 2048 // 32 * 22
    assert t["bf16"]["fc_hidden"] == 640 * 640 * 2
    for q in bf.QUANT_CHOICES:  # the drafter's policy: K/V Q8_0 under every packed choice (bf16:
        # every matrix dense), the head in the main file's Q8_0, norms f32
        assert t[q]["attn_k"] == t[q]["attn_v"] == (256 * 640 * 2 if q == "bf16" else 256 * 640 // 32 * 34)
        assert t[q]["head"] == 32768 * 640 // 32 * 34
        assert t[q]["attn_norm"] == 640 * 4
    # the matrix bytes the drafter really read a step (bench/RESULTS.md, session 9: 35.06 / 29.07 /
    # 26.80 / 26.04 MB, counted from the loaded drafter's weights)
    mats = [sum(b for n, b in t[q].items() if not n.endswith("norm")) / 1e6 for q in bf.QUANT_CHOICES]
    assert [round(m, 2) for m in mats] == [35.06, 29.07, 26.8, 26.04]
    full = bf.step_bytes(d, "mtp", "q8_0", head_rows=262144)
    assert full["head"] == 262144 * 680


def test_cli(capsys):
    parser = argparse.ArgumentParser(prog="mtp-turbo")
    sub = parser.add_subparsers(dest="cmd")
    bf.register(sub)
    args = parser.parse_args(["byte-floor", "--model-desc", "report", "--bandwidth", "120"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    total = next(line for line in out.splitlines() if line.startswith("| **total MB**"))
    assert [c.strip() for c in total.split("|")[4:8]] == ["185.9", "163.3", "138.8", "130.7"]
    assert "| **ms at 120 GB/s** | | | 1.549 | 1.361 | 1.157 | 1.089 |" in out
    args = parser.parse_args(["byte-floor", "--quant", "q4_0", "--head-rows", "1000", "--bandwidth", "100"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| head | 1000x640 | q8_0 | 0.680 |" in out
    for bad in (["--quant", "q3"], ["--model-desc", "nope"], ["--head-rows", "0"], ["--bandwidth", "-1"]):
        with pytest.raises(ConfigError):
            a = parser.parse_args(["byte-floor", *bad])
            a.func(a)
