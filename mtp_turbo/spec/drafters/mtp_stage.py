"""The MTP drafter's host side of a round's read cells: repairing them and staging them.

Owns: keeping the cells a query reads filled (needs_repair, repair_cells: holes a rollback into
skipped prompt rows leaves, re-encoded through the drafter's encode); `RoundStage`, the layout of
a round's input vector (round) and of a round staged before the previous one is read (after),
their pinned host and device buffers and the one upload each, every query's read runs written
into them from the cell bookkeeping, and the layout read back on the device (split). Ignores: the
cell rules themselves (cache/cells.py), the K/V and hidden rows (mtp.py), the penalty window's
contents (mtp_sampler.py), the device work that reads the vectors (mtp.py, models/mtp_step.py,
spec/glue.py).

Why its own module: this is the host's static-shape bookkeeping of a round, GPU idle time kept
apart from the drafter's cache and chain; the layout is written in one place and read back in one
place (split; spec/glue.py's after_inputs for the vector `after` stages). The cells decide the
values; this decides where they go.

Static shapes: the round's inputs live in one int64 vector staged on the host and uploaded with
one copy: positions c..p0 [n] | tokens c+1..p0+1 [n] | for each draft step j its read cells as
three [lo, hi) runs [k, 6] (sink, window, chain; at most M = sink + window + 1 cells; the
attention expands them) | the chain's positions p0 .. p0+k-1 [k] | with penalties over a
whole-history window only: for each step j the head index leaving the penalty window [k] (-1
none), next to draft 0's window counts [N] (mtp_sampler.py's pen_dev). A bounded penalty window
goes up apart, as its head indices [W] (mtp_sampler.py). The read cells follow from the cell
bookkeeping alone (never from the drafts), so the host knows them up front.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ...cache.cells import DraftCells

RUN_WORDS = 6  # a query's read cells as staged: three [lo, hi) runs (sink, window, chain)


def _sink_gap(cells: DraftCells, p0: int, h_lo: int) -> bool:
    """Sink cells query p0 reads hold nothing but their hidden rows are kept (re-encode them);
    h_lo: the first position whose hidden row the drafter keeps."""
    s_need = min(cells.config.sink, max(p0 - cells.config.window, 0))
    return cells.sink_valid < s_need and h_lo <= cells.sink_valid


def needs_repair(cells: DraftCells, p0: int, h_lo: int) -> bool:
    """Whether repair_cells(cells, p0, h_lo, ...) would re-encode anything."""
    need = max(p0 - cells.config.window, 0, h_lo)
    return _sink_gap(cells, p0, h_lo) or (need < p0 and not (cells.cell0 <= need <= cells.cell1))


def repair_cells(cells: DraftCells, p0: int, h_lo: int, encode: Callable[[int, int], None]) -> None:
    """Re-encode cells query p0 reads but that hold nothing (a rollback into prompt rows the
    prefill plan skipped): sink cells below the window, then the window from its first cell, with
    encode(c0, n) (the drafter's: K/V of cells [c0, c0+n) from the kept hidden rows, marked
    written). Uses the kept hidden rows (from h_lo on); without them the drafter just sees less
    context."""
    lo = max(p0 - cells.config.window, 0)
    force = _sink_gap(cells, p0, h_lo)
    if force:
        s_need = min(cells.config.sink, lo)
        encode(cells.sink_valid, s_need - cells.sink_valid)
    need = max(lo, h_lo)
    if need < p0 and (force or not (cells.cell0 <= need <= cells.cell1)):
        cells.truncate(need)
        encode(need, p0 - need)


class RoundStage:
    """The staging buffers of one MTPDrafter (see the module docstring)."""

    def __init__(self, capacity: int, device: torch.device, max_rows: int, max_k: int):
        """capacity: the drafter's cells; max_rows / max_k: the largest catch-up and chain staged
        into the kept buffers (the drafter's graph limits: captured graphs read these); bigger
        rounds stage into a fresh tensor."""
        self.device, self.max_rows, self.max_k = device, max_rows, max_k
        pin = device.type == "cuda"
        self._cell_ids = np.arange(capacity, dtype=np.int64)  # staged cell runs are slices of it
        self._stage_len = 2 * max_rows + max_k * RUN_WORDS + 2 * max_k
        self._stage_dev = torch.zeros(self._stage_len, dtype=torch.int64, device=device)  # graphs read these
        self._stage_host = torch.zeros(self._stage_len, dtype=torch.int64,
                                       pin_memory=pin)  # one non_blocking upload a round
        # kept views (a round's host work is GPU idle time: no tensor slicing in it)
        self._stage_np = self._stage_host.numpy()
        self._stage_views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # length -> (host, device)
        # a round staged before the previous one is read (after): cells [R] | every outcome's read
        # runs [R, k, 6], R = the previous round's k + 1; two pinned slots, as the previous round's
        # own upload may still be queued when the next one's is written
        pipe_len = max_rows + max_rows * max_k * RUN_WORDS
        self._pipe_host = [torch.zeros(pipe_len, dtype=torch.int64, pin_memory=pin) for _ in range(2)]
        self._pipe_np = [t.numpy() for t in self._pipe_host]
        self._pipe_dev = torch.zeros(pipe_len, dtype=torch.int64, device=device)
        self._pipe_slot = 0

    def round(self, tokens: list[int], c: int, p0: int, k: int, cells: DraftCells, max_reads: int,
              leave: np.ndarray | None) -> torch.Tensor:
        """The input vector of a round that catches up cells c..p0-1 and drafts k from query p0
        (`cells`: DraftCells with the catch-up rows already marked written; max_reads: M, a
        query's most read cells; leave: int64 [k] the head index leaving the penalty window at
        each step, or None when the window is not staged as counts) -> the vector on the device."""
        n, M, R = p0 - c + 1, max_reads, RUN_WORDS
        L = 2 * n + k * R + k + (0 if leave is None else k)
        fits = n <= self.max_rows and k <= self.max_k
        if fits:
            if L not in self._stage_views:
                self._stage_views[L] = (self._stage_host[:L], self._stage_dev[:L])
            host, dev = self._stage_views[L]
            a = self._stage_np[:L]
        else:
            host = torch.empty(L, dtype=torch.int64)
            a = host.numpy()
        a[:n] = self._cell_ids[c: p0 + 1]
        a[n: 2 * n] = tokens[c + 1: p0 + 2]
        runs = a[2 * n: 2 * n + k * R].reshape(k, R)
        runs.fill(0)
        a[2 * n + k * R: 2 * n + k * R + k] = self._cell_ids[p0: p0 + k]  # the chain's positions
        if leave is not None:
            a[2 * n + k * R + k:] = leave
        for j in range(k):  # draft j's query at p0 + j: committed cells and the chain p0+1 .. p0+j
            o = 0
            for i, (lo, hi) in enumerate(cells.read_runs(p0 + j, p0 + 1)):
                runs[j, 2 * i], runs[j, 2 * i + 1] = lo, hi
                o += hi - lo
            assert o <= M, (o, M)
        if not fits:
            return host.to(self.device)
        dev.copy_(host, non_blocking=True)  # pinned: the host buffer is reused only after the round's sync
        return dev

    @staticmethod
    def split(staged: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, ...]:
        """A round's vector (round) -> views (positions [n], tokens [n], read runs [k, 6], chain
        positions [k], leaving head indices [k] (empty unless the window is staged as counts))."""
        km = k * RUN_WORDS
        return (staged[:n], staged[n: 2 * n], staged[2 * n: 2 * n + km].view(k, RUN_WORDS),
                staged[2 * n + km: 2 * n + km + k], staged[2 * n + km + k:])

    def after(self, n: int, k_prev: int, k: int, cells: DraftCells) -> torch.Tensor:
        """The vector of a round of k drafts staged before the previous one (k_prev drafts, n
        committed tokens before it) is read: cells n-1 .. n-1+k_prev [R] and, for each outcome a
        in 0..k_prev, the read runs after a catch-up of a + 1 rows from cell n-1 [R, k, 6]
        (R = k_prev + 1 <= max_rows, k <= max_k; `cells` as before that catch-up, left as it
        is) -> the vector on the device (spec/glue.py's after_inputs picks outcome a's)."""
        R = k_prev + 1
        slot, L = self._pipe_slot, R + R * k * RUN_WORDS
        self._pipe_slot ^= 1
        buf = self._pipe_np[slot]
        buf[:R] = self._cell_ids[n - 1: n - 1 + R]
        runs = buf[R: L].reshape(R, k, RUN_WORDS)
        runs.fill(0)
        for a in range(R):  # the cells after this round's catch-up of a + 1 rows, as prepare marks them
            sim = cells.copy()
            sim.wrote(n - 1, a + 1)
            p0 = n - 1 + a
            for j in range(k):
                for i, (lo, hi) in enumerate(sim.read_runs(p0 + j, p0 + 1)):
                    runs[a, j, 2 * i], runs[a, j, 2 * i + 1] = lo, hi
        dev = self._pipe_dev[:L]
        dev.copy_(self._pipe_host[slot][:L], non_blocking=True)  # pinned, this slot's last upload has run
        return dev
