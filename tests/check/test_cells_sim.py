"""The cell-bookkeeping simulator: the new logic reads no invalid cell, the original rule and
deliberately broken variants of DraftCells do (so the simulator really tests something)."""

import argparse

import numpy as np
import pytest

from mtp_turbo.cache.cells import DraftCells, DraftCellsConfig
from mtp_turbo.check import cells_sim
from mtp_turbo.check.cells_sim import register, run_cells_sim

ROUNDS = 3000
SMALL = dict(config=DraftCellsConfig(sink=4, window=16), max_ctx=3000, long_prompt=400)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_new_has_no_invalid_reads_original_has_many(seed):
    new = run_cells_sim(ROUNDS, seed, "new")
    orig = run_cells_sim(ROUNDS, seed, "original")
    assert new["rounds"] == orig["rounds"] == ROUNDS
    assert new["draft_queries"] >= ROUNDS and new["cells_read"] > 0
    assert (new["invalid_reads"], new["malformed_reads"], new["over_budget"]) == (0, 0, 0)
    assert new["max_cells_read"] <= 64 + 256 + 1
    # the scenario mix actually happened
    for key in ("prompts", "rollbacks", "checkpoint_restores", "resets", "session_loads", "plain_steps",
                "short_last_chunks"):
        assert new[key] > 0, key
    assert new["max_prompt"] > 4 * 256  # prompts much longer than the window
    assert new["prefill_rows_encoded"] < new["prefill_rows"]  # long prompts are not fully encoded
    assert orig["invalid_reads"] > 0 and orig["invalid_queries"] > 0


@pytest.mark.parametrize("sink", [0, 4])
def test_small_window_configs(sink):
    cfg = DraftCellsConfig(sink=sink, window=16)
    r = run_cells_sim(ROUNDS, 7, "new", config=cfg, max_ctx=3000, long_prompt=400)
    assert r["invalid_reads"] == 0 and r["malformed_reads"] == 0 and r["over_budget"] == 0
    assert r["max_cells_read"] <= cfg.max_reads
    assert run_cells_sim(ROUNDS, 7, "original", config=cfg, max_ctx=3000, long_prompt=400)["invalid_reads"] > 0


def test_same_seed_same_run():
    a = run_cells_sim(300, 5, "new")
    b = run_cells_sim(300, 5, "new")
    a.pop("seconds"), b.pop("seconds")
    assert a == b


# ---- broken variants: the simulator must catch each ------------------------------------------
class NoGapRestart(DraftCells):
    """A gap does not restart the run: the cells in the gap are claimed valid."""

    def wrote(self, c0, n):
        if n and c0 > self._cell1:
            self._cell1 = c0 + n
            return
        super().wrote(c0, n)


class IgnoresRunStart(DraftCells):
    """Reads the whole window [p - window, p] up to cell1, ignoring cell0 (the original's mistake)."""

    def read_cells(self, p):
        lo = max(p - self._cfg.window, 0)
        return np.union1d(np.arange(self._sink_valid), np.arange(lo, min(p + 1, self._cell1)))


class NoStaleMarking(DraftCells):
    """Rollbacks and checkpoint restores mark nothing stale."""

    def truncate(self, n):
        pass


class ClaimsRowBefore(DraftCells):
    """Off by one: every write also claims the cell just before it."""

    def wrote(self, c0, n):
        super().wrote(max(c0 - 1, 0), n + (c0 > 0))


@pytest.mark.parametrize("broken", [NoGapRestart, IgnoresRunStart, ClaimsRowBefore])
def test_broken_variants_are_caught(broken):
    bad = sum(run_cells_sim(ROUNDS, s, "new", cells_cls=broken, **SMALL)["invalid_reads"] for s in (0, 1))
    assert bad > 0


class NoStaleMarkingUnguarded(NoStaleMarking):
    """NoStaleMarking with the guards that would trip on it bypassed, so only the ground truth can tell."""

    def prefill_plan(self, n_prompt, chunk_start, chunk_len, streaming=True):
        saved = (self._sink_valid, self._cell0, self._cell1)
        self._sink_valid = min(self._sink_valid, chunk_start)
        self._cell1 = min(self._cell1, chunk_start)
        self._cell0 = min(self._cell0, self._cell1)
        try:
            return super().prefill_plan(n_prompt, chunk_start, chunk_len, streaming)
        finally:
            self._sink_valid, self._cell0, self._cell1 = saved

    @classmethod
    def from_state(cls, state, config=None, *, limit=None):
        return super().from_state(state, config)


def test_missing_stale_marking_is_caught_by_the_ground_truth():
    assert run_cells_sim(ROUNDS, 0, "new", cells_cls=NoStaleMarkingUnguarded, **SMALL)["invalid_reads"] > 0
    assert run_cells_sim(ROUNDS, 0, "new", cells_cls=NoStaleMarkingUnguarded)["invalid_reads"] > 0


def test_missing_stale_marking_trips_the_prefill_precondition():
    with pytest.raises(AssertionError):
        run_cells_sim(ROUNDS, 0, "new", cells_cls=NoStaleMarking, **SMALL)


# ---- CLI ---------------------------------------------------------------------------------------
def parse(argv):
    ap = argparse.ArgumentParser(prog="mtp-turbo check")
    register(ap.add_subparsers(dest="check", required=True))
    return ap.parse_args(argv)


def test_cli_defaults_and_pass(capsys):
    d = parse(["cells"])
    assert (d.rounds, d.runs, d.seed, d.sink, d.window) == (36000, 3, 0, 64, 256)
    args = parse(["cells", "--rounds", "200", "--runs", "2", "--seed", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "new: 2 x 200 rounds, 0 invalid reads" in out and "original:" in out


def test_cli_fails_when_new_reads_invalid_or_original_reads_none(monkeypatch, capsys):
    real = cells_sim.run_cells_sim

    def fake_new_bad(rounds, seed, policy, **kw):
        r = real(rounds, seed, policy, **kw)
        r["invalid_reads"] += policy == "new"
        return r

    monkeypatch.setattr(cells_sim, "run_cells_sim", fake_new_bad)
    args = parse(["cells", "--rounds", "100", "--runs", "1"])
    assert args.func(args) == 1
    assert "FAIL" in capsys.readouterr().out

    def fake_orig_clean(rounds, seed, policy, **kw):
        r = real(rounds, seed, policy, **kw)
        r["invalid_reads"] = 0 if policy == "original" else r["invalid_reads"]
        return r

    monkeypatch.setattr(cells_sim, "run_cells_sim", fake_orig_clean)
    assert args.func(args) == 1


def test_bad_policy():
    with pytest.raises(ValueError):
        run_cells_sim(10, 0, "newest")
