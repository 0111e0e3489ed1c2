"""Randomized ground-truth simulator for the drafter's cell bookkeeping (`mtp-turbo check cells`).

Owns: a toy engine that drives a bookkeeping policy through streamed prompts of random length
and chunking (streaming or whole-prefill), decode rounds with k drafts and random acceptance,
plain decode steps, rollbacks, checkpoint restores (prefix or divergent branch), resets and
session save/load, while tracking separately, per drafter cell, what the KV really holds: the
id of the committed row it was computed from, a chain tag, or zeros / an older branch or
conversation. Every draft query's read set is checked against that truth: a read is valid iff
the cell holds the committed row of the current tokens at that position (cell c = row (h_c,
token c+1), see `cache/cells.py`) or the current chain's K/V. Ignores model math entirely.

Policies: "new" = `DraftCells`; "original" = the report's pre-fix rule (reads [max(cell0,
p - window), p] whatever was encoded, prefill moves cell0 only when a chunk has >= window rows,
streamed prefill encodes only the last chunk, no stale marking, no sink) as a negative control.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import numpy as np

from ..cache.cells import DraftCells, DraftCellsConfig

_CHUNKS = (1, 7, 32, 64, 100, 128, 255, 256, 257, 512, 1000)
_KMAX = 6


class _NewPolicy:
    """DraftCells as the engine would drive it."""

    def __init__(self, cfg: DraftCellsConfig, cells_cls: type[DraftCells]) -> None:
        self.cfg = cfg
        self.cells = cells_cls(cfg)

    def reset(self) -> None:
        self.cells.reset()

    def rolled_back(self, n_rows: int) -> None:
        self.cells.truncate(n_rows)

    def chunk_runs(self, n_prompt: int, s: int, ln: int, streaming: bool, start: int) -> list[tuple[int, int]]:
        if streaming:
            return self.cells.prefill_plan(n_prompt, s, ln, True)
        if s + ln < n_prompt:  # hidden states kept; one call at the end
            return []
        return self.cells.prefill_plan(n_prompt, start, n_prompt - start, False)

    def wrote(self, c0: int, n: int) -> None:
        self.cells.wrote(c0, n)

    def reads(self, p: int, p0: int) -> np.ndarray:
        return self.cells.read_cells_with_chain(p, np.arange(p0 + 1, p + 1, dtype=np.int64))

    def save(self) -> str:
        return json.dumps(self.cells.state())

    def load(self, blob: str, with_kv: bool, limit: int) -> None:
        if with_kv:
            self.cells = type(self.cells).from_state(json.loads(blob), self.cfg, limit=limit)
        else:  # the drafter's KV is not in the file: nothing it holds is ours
            self.cells.reset()


class _OriginalPolicy:
    """The report's rule before the fix (negative control)."""

    def __init__(self, cfg: DraftCellsConfig) -> None:
        self.window = cfg.window
        self.cell0 = 0

    def reset(self) -> None:
        self.cell0 = 0

    def rolled_back(self, n_rows: int) -> None:
        pass  # no stale marking

    def chunk_runs(self, n_prompt: int, s: int, ln: int, streaming: bool, start: int) -> list[tuple[int, int]]:
        if streaming and s + ln < n_prompt:  # streamed prefill: the drafter only sees the last chunk
            return []
        hi = min(s + ln, n_prompt - 1)
        if hi <= s:
            return []
        if hi - s >= self.window:
            self.cell0 = hi - self.window
            return [(self.cell0, self.window)]
        return [(s, hi - s)]

    def wrote(self, c0: int, n: int) -> None:
        pass

    def reads(self, p: int, p0: int) -> np.ndarray:
        return np.arange(max(self.cell0, p - self.window, 0), p + 1, dtype=np.int64)

    def save(self) -> str:
        return json.dumps({"cell0": self.cell0})

    def load(self, blob: str, with_kv: bool, limit: int) -> None:
        self.cell0 = json.loads(blob)["cell0"]


class _Sim:
    def __init__(self, policy: Any, cfg: DraftCellsConfig, rng: random.Random, max_ctx: int, long_prompt: int) -> None:
        self.pol, self.cfg, self.rng = policy, cfg, rng
        self.max_ctx, self.long_prompt = max_ctx, long_prompt
        size = max_ctx + _KMAX + 8
        self.kv = np.zeros(size, dtype=np.int64)  # what each drafter cell holds: row id, chain tag (<0), 0
        self.tok = np.zeros(size, dtype=np.int64)  # id of the committed token at each position (< L)
        self.L = 0  # committed tokens; the main model's KV covers [0, L-1)
        self.pend: int | None = None  # rows [pend, L-1) have hidden states and are not encoded yet
        self.n_known = 0  # tokens known to the engine (rows below n_known - 1 can be encoded)
        self.next_id = 1
        self.next_chain = 1
        self.accept = 0.7
        self.ckpts: list[np.ndarray] = []
        self.sessions: list[tuple[np.ndarray, str, np.ndarray | None]] = []
        self.st = dict(rounds=0, draft_queries=0, cells_read=0, invalid_reads=0, invalid_queries=0,
                       malformed_reads=0, over_budget=0, valid_unread=0, max_cells_read=0, prompts=0,
                       prompt_tokens=0, max_prompt=0, prefill_rows=0, prefill_rows_encoded=0,
                       short_last_chunks=0, catchup_rows=0, plain_steps=0, rollbacks=0, checkpoint_restores=0, resets=0,
                       session_saves=0, session_loads=0)

    # ---- truth helpers ---------------------------------------------------------------------
    def _fresh(self, pos: int, n: int) -> None:
        self.tok[pos:pos + n] = np.arange(self.next_id, self.next_id + n)
        self.next_id += n

    def _encode(self, c0: int, n: int) -> None:
        """The drafter encodes committed rows [c0, c0+n) and the policy is told."""
        assert n >= 1 and c0 >= 0 and c0 + n <= self.n_known - 1, (c0, n, self.n_known)
        self.kv[c0:c0 + n] = self.tok[c0 + 1:c0 + n + 1]
        self.pol.wrote(c0, n)

    def _flush_pending(self) -> None:
        if self.pend is not None and self.pend < self.L - 1:
            n = self.L - 1 - self.pend
            self.n_known = self.L
            self._encode(self.pend, n)
            self.st["catchup_rows"] += n
        self.pend = None

    # ---- events ----------------------------------------------------------------------------
    def new_conversation(self) -> None:
        self.st["resets"] += 1
        self.pol.reset()  # the KV is NOT cleared
        self.L, self.pend = 0, None
        self.accept = self.rng.uniform(0.2, 0.95)
        self.prompt()

    def _prompt_len(self, room: int) -> int:
        w, r = self.cfg.window, self.rng.random()
        if r < 0.4:
            u = self.rng.randint(1, w + 2)
        elif r < 0.7:
            u = self.rng.randint(w, 4 * w + 8)
        else:
            u = self.rng.randint(4 * w, max(4 * w, self.long_prompt))
        return max(1, min(u, room))

    def prompt(self) -> None:
        room = self.max_ctx - _KMAX - 4 - self.L
        if room < 2:
            return self.new_conversation() if self.L else None
        if self.L and self.rng.random() < 0.5:
            self._flush_pending()  # else the pending rows' hidden states are simply lost (a gap)
        self.pend = None
        u = self._prompt_len(room)
        start = max(self.L - 1, 0)  # the main model has [0, L-1); it encodes from there
        self._fresh(self.L, u)
        n = self.n_known = self.L + u
        streaming = self.rng.random() < 0.5
        chunk = self.rng.choice(_CHUNKS) if self.rng.random() < 0.8 else self.rng.randint(1, 2 * self.cfg.window)
        s = start
        while s < n:
            ln = min(chunk, n - s)
            for c0, m in self.pol.chunk_runs(n, s, ln, streaming, start):
                lo = s if streaming else start  # rows whose hidden states the engine still has
                assert lo <= c0 and m >= 1 and c0 + m <= min(s + ln, n - 1), ("plan out of chunk", c0, m, s, ln, n)
                self._encode(c0, m)
                self.st["prefill_rows_encoded"] += m
            s += ln
        if n - start > self.cfg.window and ln < self.cfg.window:  # the report's streaming bug case
            self.st["short_last_chunks"] += 1
        self.st["prompts"] += 1
        self.st["prompt_tokens"] += u
        self.st["max_prompt"] = max(self.st["max_prompt"], u)
        self.st["prefill_rows"] += max(n - 1 - start, 0)
        self._fresh(n, 1)  # the first sampled token
        self.L = n + 1
        self.pend = n - 1  # draft 0's row

    def plain_step(self) -> None:
        if self.rng.random() < 0.8:  # else the pending rows are dropped: a gap
            self._flush_pending()
        self._fresh(self.L, 1)
        self.pend = self.L - 1
        self.L += 1
        self.st["plain_steps"] += 1

    def decode_round(self) -> None:
        k = self.rng.randint(1, _KMAX)
        if self.L + k + 2 > self.max_ctx:
            return self.new_conversation()
        if self.pend is None:  # no hidden state for draft 0's row (after rollback/restore/load)
            self.plain_step()
        L = self.L
        c0, n = self.pend, L - 1 - self.pend
        self.n_known = L
        self._encode(c0, n)  # catch-up rows + draft 0's row: committed
        self.st["catchup_rows"] += n
        p0 = L - 2
        tag = -self.next_chain
        self.next_chain += 1
        st, kv, tok = self.st, self.kv, self.tok
        sink, win, budget = self.cfg.sink, self.cfg.window, self.cfg.max_reads
        for i in range(k):
            p = p0 + i
            if i:
                kv[p] = tag  # the chain's K/V: never committed
            r = self.pol.reads(p, p0)
            nr = r.size
            if nr:
                kvr = kv[r]
                ok = ((r < L - 1) & (kvr == tok[r + 1])) | ((r > p0) & (kvr == tag))
                ok &= r <= p
                nok = int(np.count_nonzero(ok))
                if nr > 1 and not bool(np.all(r[1:] > r[:-1])):
                    st["malformed_reads"] += 1
            else:
                nok = 0
            first = max(p - win, 0)
            # valid cells the ideal read set ([0, sink) U [first, p]) holds: diagnostic only
            hi = min(p, L - 2) + 1
            good = int(np.count_nonzero(kv[first:hi] == tok[first + 1:hi + 1])) if hi > first else 0
            sh = min(sink, first, L - 1)
            if sh > 0:
                good += int(np.count_nonzero(kv[:sh] == tok[1:sh + 1]))
            good += int(np.count_nonzero(kv[max(p0 + 1, first):p + 1] == tag))
            st["valid_unread"] += max(good - nok, 0)
            st["draft_queries"] += 1
            st["cells_read"] += nr
            st["invalid_reads"] += nr - nok
            st["invalid_queries"] += nr != nok
            st["over_budget"] += nr > budget
            st["max_cells_read"] = max(st["max_cells_read"], nr)
        j = 0
        while j < k and self.rng.random() < self.accept:
            j += 1
        self._fresh(L, j + 1)  # accepted drafts + the bonus
        self.pend = L - 1
        self.L = L + j + 1
        st["rounds"] += 1

    def rollback(self) -> None:
        if self.L < 2:
            return
        m = self.rng.randint(1, self.L - 1) if self.rng.random() < 0.5 else max(1, self.L - self.rng.randint(1, 8))
        # rows of the last main forward below m-1 keep their hidden states (e.g. a trimmed stop string)
        self.L = m
        self.pend = self.pend if self.pend is not None and self.pend <= m - 2 else None
        self.pol.rolled_back(m - 1)
        self.st["rollbacks"] += 1

    def checkpoint_save(self) -> None:
        self.ckpts = (self.ckpts + [self.tok[:self.L].copy()])[-4:]

    def checkpoint_restore(self) -> None:
        if not self.ckpts:
            return
        ck = self.rng.choice(self.ckpts)
        m = min(self.L, ck.size)
        diff = np.nonzero(self.tok[:m] != ck[:m])[0]
        common = int(diff[0]) if diff.size else m
        self.pol.rolled_back(max(common - 1, 0))  # the drafter's rows past the common prefix are stale
        self.tok[:ck.size] = ck
        self.L, self.pend = ck.size, None
        self.st["checkpoint_restores"] += 1

    def session_save(self) -> None:
        with_kv = self.rng.random() < 0.5
        kv = self.kv[:self.L - 1].copy() if with_kv else None  # the drafter's rows < L-1, as they are
        self.sessions = (self.sessions + [(self.tok[:self.L].copy(), self.pol.save(), kv)])[-3:]
        self.st["session_saves"] += 1

    def session_load(self) -> None:
        if not self.sessions:
            return
        toks, blob, kv = self.rng.choice(self.sessions)
        if self.rng.random() < 0.5:
            self.kv[:] = 0  # a fresh drafter: zeros ...
        # ... or whatever the buffer held (another conversation's K/V)
        if kv is not None:
            self.kv[:kv.size] = kv
        self.tok[:toks.size] = toks
        self.L, self.pend = toks.size, None
        self.pol.load(blob, kv is not None, self.L - 1)
        self.st["session_loads"] += 1

    def step(self) -> None:
        if self.L == 0:
            return self.new_conversation()
        r = self.rng.random()
        if r < 0.86:
            self.decode_round()
        elif r < 0.89:
            self.prompt()
        elif r < 0.915:
            self.rollback()
        elif r < 0.93:
            self.checkpoint_save()
        elif r < 0.945:
            self.checkpoint_restore()
        elif r < 0.96:
            self.new_conversation()
        elif r < 0.97:
            self.session_save()
        elif r < 0.98:
            self.session_load()
        else:
            self.plain_step()


def run_cells_sim(rounds: int = 36_000, seed: int = 0, policy: str = "new", *,
                  config: DraftCellsConfig | None = None, cells_cls: type[DraftCells] = DraftCells,
                  max_ctx: int = 32_768, long_prompt: int = 12_000) -> dict[str, Any]:
    """Run `rounds` decode rounds (plus the prompts, rollbacks, ... in between) and count bad reads.

    policy: "new" (DraftCells, or `cells_cls`, a subclass under test) or "original".
    Returns the counters: rounds, draft_queries, cells_read, invalid_reads (cells read that hold
    neither the committed row of the current tokens nor the current chain), malformed_reads /
    over_budget (read sets not ascending-unique / larger than sink + window + 1), valid_unread
    (valid cells in [0, sink) U [p - window, p] left unread: lost context, not an error), event
    counts, seconds.
    """
    assert rounds >= 0 and max_ctx > 64 and long_prompt >= 1
    cfg = config if config is not None else DraftCellsConfig()
    if policy == "new":
        pol: Any = _NewPolicy(cfg, cells_cls)
    elif policy == "original":
        pol = _OriginalPolicy(cfg)
    else:
        raise ValueError(f"policy must be 'new' or 'original', got {policy!r}")
    sim = _Sim(pol, cfg, random.Random(seed), max_ctx, min(long_prompt, max_ctx // 2))
    t0 = time.perf_counter()
    while sim.st["rounds"] < rounds:
        sim.step()
    out: dict[str, Any] = dict(sim.st)
    out.update(policy=policy, seed=seed, sink=cfg.sink, window=cfg.window, seconds=time.perf_counter() - t0)
    return out


def run_check(args: argparse.Namespace) -> int:
    """`mtp-turbo check cells`: print the table; 0 iff new has no bad read and original has some."""
    cfg = DraftCellsConfig(sink=args.sink, window=args.window)
    rows = []
    for i in range(args.runs):
        for policy in ("new", "original"):
            rows.append(run_cells_sim(args.rounds, args.seed + i, policy, config=cfg))
    print(f"drafter cell bookkeeping: sink={cfg.sink} window={cfg.window}, {args.runs} runs x {args.rounds} rounds")
    hdr = ("policy", "seed", "rounds", "queries", "cells_read", "invalid", "bad_shape", "prompts", "max_prompt", "s")
    print("{:<9}{:>6}{:>9}{:>10}{:>13}{:>10}{:>10}{:>9}{:>11}{:>7}".format(*hdr))
    for r in rows:
        print("{:<9}{:>6}{:>9}{:>10}{:>13}{:>10}{:>10}{:>9}{:>11}{:>7.1f}".format(
            r["policy"], r["seed"], r["rounds"], r["draft_queries"], r["cells_read"], r["invalid_reads"],
            r["malformed_reads"] + r["over_budget"], r["prompts"], r["max_prompt"], r["seconds"]))
    new = [r for r in rows if r["policy"] == "new"]
    orig = [r for r in rows if r["policy"] == "original"]
    new_bad = sum(r["invalid_reads"] + r["malformed_reads"] + r["over_budget"] for r in new)
    orig_bad = sum(r["invalid_reads"] for r in orig)
    print(f"new: {len(new)} x {args.rounds} rounds, {new_bad} invalid reads; "
          f"original: {orig_bad} invalid reads ({orig_bad / max(len(orig), 1):.0f} per run)")
    ok = new_bad == 0 and orig_bad > 0
    if ok:
        print("PASS: every cell a draft read held committed K/V of the right token (the original rule, "
              "the negative control, read invalid cells)")
    else:
        print("FAIL: " + ("the new bookkeeping read invalid cells" if new_bad else
                          "the original rule shows no invalid reads: the simulator is not testing anything"))
    return 0 if ok else 1


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `cells` to the `mtp-turbo check` subcommands; its handler is `args.func(args) -> exit code`."""
    p = subparsers.add_parser("cells", help="randomized simulator of the drafter's sink + window cell bookkeeping")
    p.add_argument("--rounds", type=int, default=36_000, help="decode rounds per run (default 36000)")
    p.add_argument("--runs", type=int, default=3, help="independent runs, seeds seed..seed+runs-1 (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--sink", type=int, default=DraftCellsConfig.sink, help="draft sink cells (default 64)")
    p.add_argument("--window", type=int, default=DraftCellsConfig.window, help="draft window cells (default 256)")
    p.set_defaults(func=run_check)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mtp-turbo check")
    register(ap.add_subparsers(dest="check", required=True))
    args = ap.parse_args(["cells"] + (argv if argv is not None else sys.argv[1:]))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
