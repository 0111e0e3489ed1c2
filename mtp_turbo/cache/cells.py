"""The MTP drafter's KV cell bookkeeping: which of its cells hold committed K/V (sink + valid run).

Owns: `DraftCellsConfig` (sink, window) and `DraftCells`, the record of which cells of the
drafter's own KV cache hold K/V computed from committed tokens, which cells a draft query may
read, and which prompt rows a chunked prefill must encode. Pure bookkeeping: it never touches
tensors, and knows nothing of the drafter's math or of the main model's cache.

Cell convention (the one the engine must follow, and the simulator in `check/cells_sim.py`
checks): cell c holds the drafter row of absolute position c, i.e. the K/V computed from the main
model's hidden state h_c and the embedding of token c+1 (RoPE at position c). So:
- the row of cell c depends on tokens [0, c+1]; with T committed tokens the committed rows are
  cells [0, T-1), and rolling back to a prefix of T tokens is `truncate(T - 1)`;
- a prompt of n tokens gives rows [0, n-1) during prefill; row n-1 needs the first sampled token
  and is the first draft's own row ("draft 0"), written (as committed) by the first draft;
- in a decode round with T committed tokens, draft 0 is the query at p0 = T-2: the engine first
  encodes the catch-up rows plus draft 0's row, [c, T-1), and calls `wrote(c, T-1-c)`; draft i
  (i >= 1) is the query at p0 + i and writes chain K/V at cell p0 + i, which is never committed
  (it was computed from the drafter's own state, not from h): the engine passes those cells as
  `chain_cells` and never as `wrote`.

State: `sink_valid` (cells [0, sink_valid) hold committed K/V; at most `sink`) and one valid run
[cell0, cell1). Invariant: 0 <= sink_valid <= sink, 0 <= cell0 <= cell1, sink_valid <= cell1.
Cells outside [0, sink_valid) and [cell0, cell1) may hold anything (zeros, chain garbage, an
earlier branch or conversation) and are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..errors import CacheError, ConfigError

SINK_MAX = 1024
STATE_VERSION = 1
_STATE_KEYS = ("version", "sink", "window", "sink_valid", "cell0", "cell1")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass(frozen=True)
class DraftCellsConfig:
    sink: int = 64  # first cells every draft reads; 0 = off, at most SINK_MAX
    window: int = 256  # a draft at position p reads [p - window, p] besides the sink

    def __post_init__(self) -> None:
        if not _is_int(self.sink) or not (0 <= self.sink <= SINK_MAX):
            raise ConfigError(f"draft sink must be an integer in [0, {SINK_MAX}] (0 = off), got {self.sink!r}")
        if not _is_int(self.window) or self.window < 1:
            raise ConfigError(f"draft window must be an integer >= 1, got {self.window!r}")
        object.__setattr__(self, "sink", int(self.sink))
        object.__setattr__(self, "window", int(self.window))

    @property
    def max_reads(self) -> int:
        """Upper bound on the cells one draft query reads, chain included (static attention shape)."""
        return self.sink + self.window + 1


class DraftCells:
    """Which drafter KV cells hold committed K/V; see the module docstring for the cell convention."""

    __slots__ = ("_cfg", "_sink_valid", "_cell0", "_cell1")

    def __init__(self, config: DraftCellsConfig | None = None) -> None:
        self._cfg = config if config is not None else DraftCellsConfig()
        assert isinstance(self._cfg, DraftCellsConfig)
        self._sink_valid = 0
        self._cell0 = 0
        self._cell1 = 0

    # ---- read-only views -------------------------------------------------------------------
    @property
    def config(self) -> DraftCellsConfig:
        return self._cfg

    @property
    def sink_valid(self) -> int:
        return self._sink_valid

    @property
    def cell0(self) -> int:
        return self._cell0

    @property
    def cell1(self) -> int:
        return self._cell1

    # ---- updates ---------------------------------------------------------------------------
    def wrote(self, c0: int, n: int) -> None:
        """Committed K/V were written at cells [c0, c0+n); everything at or past c0 from before is stale.

        The run continues ([cell0, c0+n)) when c0 lies in [cell0, cell1], else restarts as
        [c0, c0+n) (a gap, or a write before cell0). The sink grows the same way when c0 <= sink_valid
        (capped at `sink`); a write past sink_valid leaves it alone. n == 0 is `truncate(c0)`.
        """
        assert _is_int(c0) and _is_int(n) and c0 >= 0 and n >= 0, (c0, n)
        c0, n = int(c0), int(n)
        if n == 0:
            self.truncate(c0)
            return
        end = c0 + n
        if self._cell0 <= c0 <= self._cell1:
            self._cell1 = end
        else:
            self._cell0, self._cell1 = c0, end
        if c0 <= self._sink_valid:
            self._sink_valid = min(self._cfg.sink, end)

    def truncate(self, n: int) -> None:
        """Cells at or past n become stale (rollback, or restoring a checkpoint of a shorter prefix).

        With T committed tokens left, call truncate(T - 1) (cell c depends on token c+1).
        """
        assert _is_int(n) and n >= 0, n
        n = int(n)
        self._sink_valid = min(self._sink_valid, n)
        self._cell1 = min(self._cell1, n)
        self._cell0 = min(self._cell0, self._cell1)

    def copy(self) -> "DraftCells":
        """An independent copy (to work out what updates would give without making them)."""
        other = DraftCells(self._cfg)
        other._sink_valid, other._cell0, other._cell1 = self._sink_valid, self._cell0, self._cell1
        return other

    def reset(self) -> None:
        """Nothing is valid (new conversation, or a session loaded without the drafter's KV).

        The KV tensors are not cleared and need not be: nothing marked invalid is ever read.
        """
        self._sink_valid = self._cell0 = self._cell1 = 0

    # ---- reads -----------------------------------------------------------------------------
    def read_cells(self, p: int) -> np.ndarray:
        """Committed cells a draft query at position p reads: int64, ascending, unique.

        = [0, min(sink_valid, p+1)) U [max(first, cell0), min(p, cell1-1)], first = max(p - window, 0).
        Guaranteed: every cell returned lies in [0, sink_valid) or [cell0, cell1) (so holds committed
        K/V if the caller kept the convention) and in [0, sink) U [first, p]; at most
        sink + window + 1 cells; the window part is the whole of [first, p] that the run covers.
        This is DESIGN's `[0, min(sink_valid, first)) ++ [max(first, cell0), p]` except that valid
        sink cells inside the window are also read when the run starts after `first` (after a gap).
        The query's own cell p is included only if it is committed (draft 0 after `wrote`).
        """
        assert _is_int(p) and p >= 0, p
        runs = self._committed_runs(int(p))
        if len(runs) == 1:
            return np.arange(*runs[0], dtype=np.int64)
        return np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in runs])

    def _committed_runs(self, p: int) -> list[tuple[int, int]]:
        """read_cells(p) as ascending disjoint [lo, hi) runs (one or two; the first may be empty)."""
        first = max(p - self._cfg.window, 0)
        s_hi = min(self._sink_valid, p + 1)
        w_lo = max(first, self._cell0)
        w_hi = min(p + 1, self._cell1)
        if w_lo >= w_hi:
            return [(0, s_hi)]
        if s_hi >= w_lo:  # sink and window part touch: one interval
            return [(0, max(s_hi, w_hi))]
        return [(0, s_hi), (w_lo, w_hi)]

    def read_runs(self, p: int, chain_lo: int) -> list[tuple[int, int]]:
        """`read_cells_with_chain(p, range(chain_lo, p + 1))` as ascending disjoint [lo, hi) runs
        (at most 3), in Python ints: what a drafting round stages each step without building
        arrays (the host work of a round is GPU idle time). chain_lo >= cell1 (the chain lies past
        the committed run); chain_lo > p: no chain cells."""
        runs = self._committed_runs(p)
        c_lo = max(chain_lo, p - self._cfg.window)
        if c_lo <= p:
            assert chain_lo >= self._cell1, (chain_lo, self._cell1)
            runs.append((c_lo, p + 1))
        return [r for r in runs if r[1] > r[0]]

    def read_cells_with_chain(self, p: int, chain_cells: Iterable[int]) -> np.ndarray:
        """`read_cells(p)` followed by the current draft chain's cells that fall in the window.

        chain_cells: the cells the current chain wrote, ascending, each in [cell1, p] (the chain
        lies past the committed run; with draft 0 written via `wrote` it is [p0+1, p]). Cells below
        p - window are dropped. Result: int64, ascending, unique, at most sink + window + 1 cells.
        """
        chain = np.asarray(list(chain_cells) if not isinstance(chain_cells, np.ndarray) else chain_cells,
                           dtype=np.int64).reshape(-1)
        committed = self.read_cells(p)
        if chain.size == 0:
            return committed
        assert chain[0] >= self._cell1 and chain[-1] <= p, (chain[0], chain[-1], self._cell1, p)
        assert chain.size == 1 or bool(np.all(np.diff(chain) > 0)), "chain cells must be ascending"
        chain = chain[chain >= p - self._cfg.window]
        return np.concatenate((committed, chain))

    # ---- prefill ---------------------------------------------------------------------------
    def prefill_plan(self, n_prompt: int, chunk_start: int, chunk_len: int,
                     streaming: bool = True) -> list[tuple[int, int]]:
        """Rows of a prefill chunk the drafter must encode now, as ascending disjoint (c0, n) runs.

        n_prompt: tokens known when the prefill ends (absolute; history + new prompt). The chunk
        holds main rows [chunk_start, chunk_start + chunk_len) whose hidden states the caller has
        now. Rows that can be encoded are those of the chunk below n_prompt - 1 (row n_prompt - 1 is
        the first draft's own row, written by the first draft). Of those it returns the rows some
        later draft can read: the last `window` rows before the first draft's query (p = n_prompt-1
        reads [p - window, p]), and the rows below `sink` when they extend the contiguous sink.
        Later queries sit further right, so nothing else of the prompt is ever read.

        streaming=True: call once per chunk, in order, as each chunk's hidden states exist; they
        are gone afterwards, so e.g. the first chunk's sink rows are returned when it passes.
        streaming=False: the caller kept every chunk's hidden states and calls once, at the end,
        with the whole prefill as the chunk (asserted: it reaches n_prompt).
        Protocol: encode each returned run, then call `wrote(c0, n)` for it, in order, before the
        next chunk's plan. Precondition: nothing at or past chunk_start is marked valid (the engine
        truncated on every rollback; a prefill only appends).
        """
        assert _is_int(n_prompt) and _is_int(chunk_start) and _is_int(chunk_len)
        assert n_prompt >= 1 and chunk_start >= 0 and chunk_len >= 1, (n_prompt, chunk_start, chunk_len)
        assert chunk_start + chunk_len <= n_prompt, (chunk_start, chunk_len, n_prompt)
        assert streaming or chunk_start + chunk_len == n_prompt, "non-streaming: one call covering the prefill"
        assert self._cell1 <= chunk_start and self._sink_valid <= chunk_start, (repr(self), chunk_start)
        lo = int(chunk_start)
        hi = min(lo + int(chunk_len), int(n_prompt) - 1)
        if lo >= hi:
            return []
        runs: list[tuple[int, int]] = []
        # Sink rows are useful only if they extend the contiguous prefix [0, sink_valid).
        if lo == self._sink_valid and lo < self._cfg.sink:
            runs.append((lo, min(hi, self._cfg.sink)))
        w_lo = max(lo, int(n_prompt) - 1 - self._cfg.window)
        if w_lo < hi:
            if runs and w_lo <= runs[-1][1]:
                runs[-1] = (runs[-1][0], hi)
            else:
                runs.append((w_lo, hi))
        return [(a, b - a) for a, b in runs]

    # ---- persistence -----------------------------------------------------------------------
    def state(self) -> dict[str, int]:
        """JSON-safe snapshot (for session files). Only meaningful saved together with the KV it describes."""
        return {"version": STATE_VERSION, "sink": self._cfg.sink, "window": self._cfg.window,
                "sink_valid": self._sink_valid, "cell0": self._cell0, "cell1": self._cell1}

    @classmethod
    def from_state(cls, state: Any, config: DraftCellsConfig | None = None, *,
                   limit: int | None = None) -> "DraftCells":
        """Rebuild from `state()`. Raises CacheError if the state is malformed, breaks the invariant,
        was saved under a different config than `config`, or marks cells at or past `limit` (the
        committed rows the caller has, T - 1 for T tokens). On a config mismatch an engine should
        `reset()` instead: the drafter loses context, never correctness.
        """
        if not isinstance(state, dict):
            raise CacheError(f"drafter cell state must be a mapping, got {type(state).__name__}")
        missing = [k for k in _STATE_KEYS if k not in state]
        extra = sorted(set(state) - set(_STATE_KEYS))
        if missing or extra:
            raise CacheError(f"drafter cell state: missing keys {missing}, unknown keys {extra}")
        bad = [k for k in _STATE_KEYS if not _is_int(state[k])]
        if bad:
            raise CacheError(f"drafter cell state: non-integer values for {bad}")
        if state["version"] != STATE_VERSION:
            raise CacheError(f"drafter cell state version {state['version']} unsupported (expected {STATE_VERSION})")
        try:
            saved = DraftCellsConfig(sink=int(state["sink"]), window=int(state["window"]))
        except ConfigError as e:
            raise CacheError(f"drafter cell state has a bad config: {e}") from None
        if config is not None and config != saved:
            raise CacheError(f"drafter cell state was saved with sink={saved.sink}, window={saved.window}; "
                             f"this engine uses sink={config.sink}, window={config.window}")
        sv, c0, c1 = int(state["sink_valid"]), int(state["cell0"]), int(state["cell1"])
        if not (0 <= sv <= saved.sink and 0 <= c0 <= c1 and sv <= c1):
            raise CacheError(f"drafter cell state is inconsistent: sink_valid={sv} (sink {saved.sink}), "
                             f"run [{c0}, {c1})")
        if limit is not None and c1 > limit:
            raise CacheError(f"drafter cell state marks cells up to {c1} valid but the session has only {limit} rows")
        cells = cls(saved)
        cells._sink_valid, cells._cell0, cells._cell1 = sv, c0, c1
        return cells

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DraftCells):
            return NotImplemented
        return self.state() == other.state()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (f"DraftCells(sink={self._cfg.sink}, window={self._cfg.window}, "
                f"sink_valid={self._sink_valid}, run=[{self._cell0}, {self._cell1}))")
