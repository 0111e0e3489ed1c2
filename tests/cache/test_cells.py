"""DraftCells / DraftCellsConfig on hand-worked cases (expected cell lists written out by hand)."""

import json

import numpy as np
import pytest

from mtp_turbo.cache.cells import DraftCells, DraftCellsConfig
from mtp_turbo.errors import CacheError, ConfigError


def cells(sink=4, window=8):
    return DraftCells(DraftCellsConfig(sink=sink, window=window))


def at(c, sink_valid, cell0, cell1):
    """Assert the whole state at once."""
    assert (c.sink_valid, c.cell0, c.cell1) == (sink_valid, cell0, cell1), repr(c)


def ids(a):
    assert a.dtype == np.int64
    return a.tolist()


# ---- config ------------------------------------------------------------------------------------
def test_config_defaults_and_bounds():
    cfg = DraftCellsConfig()
    assert (cfg.sink, cfg.window, cfg.max_reads) == (64, 256, 321)
    assert DraftCellsConfig(sink=0).sink == 0 and DraftCellsConfig(sink=1024).sink == 1024
    for bad in (-1, 1025, 4096, 2.0, True, "64"):
        with pytest.raises(ConfigError, match="sink"):
            DraftCellsConfig(sink=bad)
    for bad in (0, -3, 1.5):
        with pytest.raises(ConfigError, match="window"):
            DraftCellsConfig(window=bad)
    with pytest.raises(Exception):
        cfg.sink = 3  # frozen


# ---- wrote -------------------------------------------------------------------------------------
def test_wrote_extends_restarts_and_marks_stale():
    c = cells()
    at(c, 0, 0, 0)
    c.wrote(0, 3)
    at(c, 3, 0, 3)
    c.wrote(3, 5)  # contiguous: run grows, sink capped at 4
    at(c, 4, 0, 8)
    c.wrote(20, 2)  # gap: run restarts, sink untouched
    at(c, 4, 20, 22)
    c.wrote(21, 3)  # inside the run: 22.. stale, then [21, 24) written
    at(c, 4, 20, 24)
    c.wrote(22, 1)  # shrinks the run: 23 is stale now
    at(c, 4, 20, 23)
    c.wrote(10, 1)  # before cell0: restart
    at(c, 4, 10, 11)
    c.wrote(2, 1)  # below sink_valid: the sink shrinks to [0, 3)
    at(c, 3, 2, 3)
    c.wrote(5, 0)  # n == 0 past everything: a truncate at 5, nothing lost
    at(c, 3, 2, 3)
    c.wrote(1, 0)  # n == 0: truncate(1)
    at(c, 1, 1, 1)


def test_wrote_sink_only_grows_from_a_contiguous_prefix():
    c = cells(sink=4)
    c.wrote(1, 5)  # cell 0 never written: no sink
    at(c, 0, 1, 6)
    c.wrote(0, 1)  # restart at 0 (before cell0): cells >= 0 from before are stale
    at(c, 1, 0, 1)
    c.wrote(1, 2)
    at(c, 3, 0, 3)


def test_sink_off():
    c = cells(sink=0, window=4)
    c.wrote(0, 10)
    at(c, 0, 0, 10)
    assert ids(c.read_cells(9)) == [5, 6, 7, 8, 9]
    assert ids(c.read_cells(2)) == [0, 1, 2]


# ---- read_cells --------------------------------------------------------------------------------
def test_read_cells_sink_plus_window():
    c = cells(sink=4, window=8)
    c.wrote(0, 4)
    c.wrote(20, 10)
    at(c, 4, 20, 30)
    assert ids(c.read_cells(29)) == [0, 1, 2, 3, 21, 22, 23, 24, 25, 26, 27, 28, 29]
    assert ids(c.read_cells(25)) == [0, 1, 2, 3, 20, 21, 22, 23, 24, 25]  # window [17, 25] clipped at cell0
    assert ids(c.read_cells(35)) == [0, 1, 2, 3, 27, 28, 29]  # query past the run: only up to cell1 - 1
    assert ids(c.read_cells(10)) == [0, 1, 2, 3]  # window [2, 10] holds nothing valid but the sink
    assert ids(c.read_cells(50)) == [0, 1, 2, 3]  # the run is outside [42, 50]


def test_read_cells_short_context_and_merge():
    c = cells(sink=4, window=8)
    c.wrote(0, 8)
    assert ids(c.read_cells(0)) == [0]
    assert ids(c.read_cells(3)) == [0, 1, 2, 3]
    assert ids(c.read_cells(7)) == list(range(8))
    assert ids(c.read_cells(9)) == list(range(8))  # first = 1: sink [0, 4) and window [1, 7] merge
    assert ids(c.read_cells(13)) == [0, 1, 2, 3, 5, 6, 7]  # first = 5


def test_read_cells_valid_sink_inside_window_after_a_gap():
    # DESIGN's formula would give [0] ++ [6..9]; valid sink cells 1..3 inside the window are read too
    c = cells(sink=4, window=8)
    c.wrote(0, 4)
    c.wrote(6, 6)
    at(c, 4, 6, 12)
    assert ids(c.read_cells(9)) == [0, 1, 2, 3, 6, 7, 8, 9]


def test_read_cells_bound_and_order_on_a_sweep():
    cfg = DraftCellsConfig(sink=4, window=8)
    for sink_valid_end, c0, c1 in [(4, 0, 40), (2, 0, 2), (4, 10, 40), (0, 3, 9), (4, 4, 5)]:
        c = DraftCells(cfg)
        c.wrote(0, sink_valid_end) if sink_valid_end else None
        c.wrote(c0, c1 - c0)
        for p in range(0, 50):
            r = c.read_cells(p)
            assert r.size <= cfg.max_reads
            assert np.all(np.diff(r) > 0)
            valid = (r < c.sink_valid) | ((r >= c.cell0) & (r < c.cell1))
            assert valid.all() and (r <= p).all()
            assert ((r < cfg.sink) | (r >= p - cfg.window)).all()


def test_read_cells_with_chain():
    c = cells(sink=4, window=8)
    c.wrote(0, 10)  # catch-up + draft 0 at p0 = 9
    assert ids(c.read_cells_with_chain(9, [])) == list(range(10))
    assert ids(c.read_cells_with_chain(12, [10, 11, 12])) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert ids(c.read_cells_with_chain(14, np.arange(10, 15))) == [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    n = cells(sink=0, window=2)
    n.wrote(0, 10)
    assert ids(n.read_cells_with_chain(12, [10, 11, 12])) == [10, 11, 12]  # committed part out of window
    assert ids(n.read_cells_with_chain(13, [10, 11, 12, 13])) == [11, 12, 13]  # chain cell 10 < first
    with pytest.raises(AssertionError):
        c.read_cells_with_chain(12, [9, 10])  # chain inside the committed run
    with pytest.raises(AssertionError):
        c.read_cells_with_chain(12, [10, 13])  # chain past the query
    with pytest.raises(AssertionError):
        c.read_cells_with_chain(12, [11, 10])


# ---- truncate / reset --------------------------------------------------------------------------
def test_truncate():
    c = cells(sink=4, window=8)
    c.wrote(0, 20)
    at(c, 4, 0, 20)
    c.truncate(25)  # nothing past 20 claimed: no change
    at(c, 4, 0, 20)
    c.truncate(10)
    at(c, 4, 0, 10)
    assert ids(c.read_cells(12)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    c.truncate(2)
    at(c, 2, 0, 2)
    c.truncate(0)
    at(c, 0, 0, 0)
    d = cells(sink=4, window=8)
    d.wrote(0, 4)
    d.wrote(20, 10)
    d.truncate(15)  # rollback to before the run: run empty, sink kept
    at(d, 4, 15, 15)
    assert ids(d.read_cells(16)) == [0, 1, 2, 3]
    d.wrote(15, 2)  # continues from the empty run's position
    at(d, 4, 15, 17)


def test_reset_and_repr():
    c = cells()
    c.wrote(0, 30)
    c.reset()
    at(c, 0, 0, 0)
    assert ids(c.read_cells(5)) == []
    c.wrote(3, 4)
    assert repr(c) == "DraftCells(sink=4, window=8, sink_valid=0, run=[3, 7))"


def test_preconditions_asserted():
    c = cells()
    for bad in ((-1, 1), (0, -1), (1.0, 1)):
        with pytest.raises(AssertionError):
            c.wrote(*bad)
    with pytest.raises(AssertionError):
        c.truncate(-1)
    with pytest.raises(AssertionError):
        c.read_cells(-1)


# ---- prefill_plan ------------------------------------------------------------------------------
def run_prefill(c, n_prompt, start, chunk, streaming=True):
    """Drive the plan as an engine does; return the runs written."""
    written = []
    if not streaming:
        plan = c.prefill_plan(n_prompt, start, n_prompt - start, False)
        for c0, n in plan:
            c.wrote(c0, n)
        return plan
    s = start
    while s < n_prompt:
        ln = min(chunk, n_prompt - s)
        plan = c.prefill_plan(n_prompt, s, ln, True)
        for c0, n in plan:
            assert s <= c0 and c0 + n <= s + ln
            c.wrote(c0, n)
        written += plan
        s += ln
    return written


def test_prefill_plan_streaming_long_prompt():
    c = cells(sink=4, window=8)
    assert c.prefill_plan(30, 0, 10) == [(0, 4)]
    c.wrote(0, 4)
    assert c.prefill_plan(30, 10, 10) == []
    assert c.prefill_plan(30, 20, 10) == [(21, 8)]  # rows [21, 29): row 29 is draft 0's
    c.wrote(21, 8)
    at(c, 4, 21, 29)
    c.wrote(29, 1)  # draft 0 at p = 29
    assert ids(c.read_cells(29)) == [0, 1, 2, 3] + list(range(21, 30))


def test_prefill_plan_last_chunk_shorter_than_window():
    c = cells(sink=4, window=8)
    assert run_prefill(c, 30, 0, 12) == [(0, 4), (21, 3), (24, 5)]
    at(c, 4, 21, 29)


def test_prefill_plan_window_straddles_three_chunks():
    c = cells(sink=4, window=8)
    assert run_prefill(c, 30, 0, 3) == [(0, 3), (3, 1), (21, 3), (24, 3), (27, 2)]
    at(c, 4, 21, 29)


def test_prefill_plan_non_streaming_and_short_prompts():
    c = cells(sink=4, window=8)
    assert run_prefill(c, 30, 0, 30, streaming=False) == [(0, 4), (21, 8)]
    d = cells(sink=4, window=8)
    assert run_prefill(d, 6, 0, 6) == [(0, 5)]  # all rows; sink and window merge
    assert cells().prefill_plan(1, 0, 1) == []  # the only row is draft 0's
    e = cells(sink=4, window=8)
    assert run_prefill(e, 12, 0, 5) == [(0, 5), (5, 5), (10, 1)]  # window [3, 11) + sink: all rows
    at(e, 4, 0, 11)


def test_prefill_plan_continuation_and_gaps():
    c = cells(sink=4, window=8)
    c.wrote(0, 2)  # a 3-token history: rows [0, 2) committed
    assert c.prefill_plan(8, 2, 6) == [(2, 5)]  # grows the sink from 2 and fills the window
    f = cells(sink=4, window=8)
    assert f.prefill_plan(40, 3, 6) == []  # nothing at [0, 3) valid: rows 3..5 cannot extend the sink
    g = cells(sink=4, window=8)
    g.wrote(0, 4)
    g.wrote(10, 5)  # history up to row 15; continuation from 16 after a gap (rows 15 lost)
    assert g.prefill_plan(20, 16, 4) == [(16, 3)]
    g.wrote(16, 3)
    at(g, 4, 16, 19)


def test_prefill_plan_preconditions():
    c = cells()
    c.wrote(0, 10)
    with pytest.raises(AssertionError):
        c.prefill_plan(30, 5, 10)  # cells past the chunk start still marked valid: truncate first
    with pytest.raises(AssertionError):
        c.prefill_plan(30, 10, 10, streaming=False)  # non-streaming covers the rest of the prompt
    with pytest.raises(AssertionError):
        c.prefill_plan(30, 25, 10)  # chunk past the prompt
    with pytest.raises(AssertionError):
        c.prefill_plan(30, 10, 0)


# ---- state -------------------------------------------------------------------------------------
def test_state_round_trip():
    cfg = DraftCellsConfig(sink=4, window=8)
    c = DraftCells(cfg)
    c.wrote(0, 4)
    c.wrote(20, 10)
    st = json.loads(json.dumps(c.state()))
    assert st == {"version": 1, "sink": 4, "window": 8, "sink_valid": 4, "cell0": 20, "cell1": 30}
    d = DraftCells.from_state(st, cfg, limit=30)
    assert d == c and d is not c and d.config == cfg
    assert ids(d.read_cells(29)) == ids(c.read_cells(29))
    assert DraftCells.from_state(st) == c  # config taken from the state

    class Sub(DraftCells):
        pass

    assert type(Sub.from_state(st)) is Sub


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s.pop("cell1"), "missing"),
        (lambda s: s.update(extra=1), "unknown"),
        (lambda s: s.update(cell0=True), "non-integer"),
        (lambda s: s.update(cell0="20"), "non-integer"),
        (lambda s: s.update(version=2), "version"),
        (lambda s: s.update(sink=2000), "bad config"),
        (lambda s: s.update(window=0), "bad config"),
        (lambda s: s.update(sink_valid=5), "inconsistent"),
        (lambda s: s.update(cell0=31), "inconsistent"),
        (lambda s: s.update(cell0=-1), "inconsistent"),
        (lambda s: s.update(sink_valid=3, cell0=0, cell1=2), "inconsistent"),
    ],
)
def test_from_state_rejects_bad_states(change, match):
    st = {"version": 1, "sink": 4, "window": 8, "sink_valid": 4, "cell0": 20, "cell1": 30}
    change(st)
    with pytest.raises(CacheError, match=match):
        DraftCells.from_state(st)


def test_from_state_rejects_mismatch_and_overreach():
    st = {"version": 1, "sink": 4, "window": 8, "sink_valid": 4, "cell0": 20, "cell1": 30}
    with pytest.raises(CacheError, match="saved with sink=4"):
        DraftCells.from_state(st, DraftCellsConfig(sink=64, window=8))
    with pytest.raises(CacheError, match="only 29 rows"):
        DraftCells.from_state(st, limit=29)
    for bad in (None, [1, 2], "state"):
        with pytest.raises(CacheError, match="mapping"):
            DraftCells.from_state(bad)


def test_read_runs_are_read_cells_with_chain():
    # the runs a drafting round stages, against the array form, over random states of the
    # bookkeeping (writes, gaps, truncations) and every chain length
    rng = np.random.default_rng(3)
    for sink, window in ((0, 8), (4, 8), (6, 20), (64, 256)):
        c = DraftCells(DraftCellsConfig(sink=sink, window=window))
        n = 0
        for _ in range(300):
            op = rng.integers(4)
            if op == 0:
                n = max(0, n - int(rng.integers(1, 12)))
                c.truncate(n)
            elif op == 1 and n > 3:
                c.wrote(int(rng.integers(0, n)), int(rng.integers(1, 6)))  # a rewrite or a gap
            else:
                c.wrote(n, int(rng.integers(1, 9)))
                n += int(rng.integers(1, 9))
            p0 = max(c.cell1 - 1, 0)
            if c.cell1 != p0 + 1:
                continue
            for j in range(5):
                p = p0 + j
                ref = c.read_cells_with_chain(p, range(p0 + 1, p + 1))
                runs = c.read_runs(p, p0 + 1)
                got = [x for lo, hi in runs for x in range(lo, hi)]
                assert got == ids(ref), (sink, window, p0, j, runs)
