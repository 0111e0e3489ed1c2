"""The drafter's static-shape propose path: the work CUDA graphs capture and replay.

Owns: staging a round's inputs in one int64 vector (one upload a round), the capturable catch-up +
chain (`_chain`: no host syncs, no shape that depends on positions), capturing and replaying one
graph per (catch-up rows, k, penalty values), and running the same work eagerly where no graph
fits or capture failed. StaticPropose is a mixin of MTPDrafter (mtp_drafter.py) and reads its
state: cells, K/V cache, hidden rows, the penalty window and the shared chain step (_next_draft).
Ignores: the variable-shape path, the engine hooks and the penalty rules (mtp_drafter.py), the
head's math (mtp_head.py), the cell rules (cache/cells.py).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from .mtp_head import attend, block_out, input_rows, qkv

# static path: captured CUDA graphs exist for catch-up batches of <= GRAPH_ROWS rows (a round
# catches up accepted + 1 rows) and chains of <= GRAPH_K drafts; bigger work runs the same code eagerly
GRAPH_ROWS, GRAPH_K = 8, 8


class StaticPropose:
    """Mixin of MTPDrafter: propose's catch-up + chain with static shapes, replayed from CUDA
    graphs where captured."""

    def _init_static(self, dev: torch.device, static: bool | None, graphs: bool) -> None:
        """The static path's settings and buffers (MTPDrafter.__init__ calls this once its cells exist)."""
        # static path (see _propose_static): on CUDA by default; the CPU keeps the variable-shape path
        self.static = dev.type == "cuda" if static is None else bool(static)
        self.use_graphs = bool(graphs) and self.static and dev.type == "cuda"
        self.max_reads = self.cells.config.max_reads  # M: the padded read-cell count of one query
        # + GRAPH_K: per chain step, the head index of the token leaving the penalty window (penalties on)
        self._stage_len = 2 * GRAPH_ROWS + GRAPH_K * self.max_reads + GRAPH_K
        self._stage_dev = torch.zeros(self._stage_len, dtype=torch.int64, device=dev)  # graphs read these
        self._stage_host = torch.zeros(self._stage_len, dtype=torch.int64,
                                       pin_memory=dev.type == "cuda")  # one non_blocking upload a round
        self._graphs: dict[tuple, tuple] = {}  # (n, k, penalty key) -> (graph, drafts [k], logits [k, N])
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # the head's tables, >= capacity rows
        self.last_drafts: torch.Tensor | None = None  # int64 [k] on the device (static path)

    # The same math as MTPDrafter.propose's variable-shape path, with shapes that depend only on
    # (n, k): catch-up rows [c, p0] (n of them, draft 0's row last) and k chain steps. Inputs live in
    # one int64 vector, staged on the host and uploaded with one copy: positions c..p0 [n] | tokens
    # c+1..p0+1 [n] | for each draft step j its read cells padded with -1 to M = sink + window + 1
    # [k, M] | with sampler penalties only: for each step j the head index leaving the penalty window
    # [k] (-1 none), next to draft 0's window counts [N] uploaded to _pen_dev (drafts update a copy
    # on the device). The read cells follow from the cell bookkeeping alone (never from the drafts),
    # so the host knows them up front; drafts are chosen and embedded on the device, and the k ids
    # come back in one sync at the end. Attention over M masked cells sums in another order than over
    # the exact cells, so logits differ from the variable-shape path by fp32 rounding; graph replay
    # and the eager run of the static path are the same kernels (equal results), so a capture
    # failure costs only speed.
    def _stage(self, tokens: list[int], c: int, p0: int, k: int) -> torch.Tensor:
        """Mark the catch-up rows written and return the round's input vector (staged, on the device)."""
        n, M = p0 - c + 1, self.max_reads
        self.cells.wrote(c, n)
        pen = self._pen is not None
        L = 2 * n + k * M + (k if pen else 0)
        fits = n <= GRAPH_ROWS and k <= GRAPH_K
        host = self._stage_host[:L] if fits else torch.empty(L, dtype=torch.int64)
        a = host.numpy()
        a[:n] = np.arange(c, p0 + 1)
        a[n: 2 * n] = tokens[c + 1: p0 + 2]
        idx = a[2 * n: 2 * n + k * M].reshape(k, M)
        idx.fill(-1)
        if pen:  # window counts of draft 0 -> _pen_dev (pinned, reused after the round's sync)
            counts, a[2 * n + k * M:] = self._pen_window(tokens, k)
            self._pen_host.numpy()[:] = counts
            self._pen_dev.copy_(self._pen_host, non_blocking=True)
        for j in range(k):
            r = self.cells.read_cells_with_chain(p0 + j, range(p0 + 1, p0 + j + 1))
            assert r.size <= M, (r.size, M)
            idx[j, : r.size] = r
        if not fits:
            return host.to(self.head.device)
        dev = self._stage_dev[:L]
        dev.copy_(host, non_blocking=True)  # pinned: the host buffer is reused only after the round's sync
        return dev

    def _chain(self, staged: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The round's device work from its staged inputs -> (draft ids int64 [k], fp32 logits [k, N]).
        No host syncs and no shape that depends on positions: capturable."""
        head, W, cfg = self.head, self.head.ops, self.head.cfg
        cos_t, sin_t = self._rope
        pos, toks = staged[:n], staged[n: 2 * n]
        km = k * self.max_reads
        raw = staged[2 * n: 2 * n + km].view(k, self.max_reads)
        # penalties on: window counts [N] (read only: warm-up runs and replays must all start from it)
        # and the head index leaving the window at each chain step [k]
        cnt = None if self._pen is None else self._pen_dev
        leave = None if self._pen is None else staged[2 * n + km:]
        i = None
        valid, idx = raw >= 0, raw.clamp(min=0)
        x = input_rows(W, cfg, head.embed[toks] * head.embed_scale, self.hbuf[pos])
        q, kk, vv = qkv(W, cfg, x, cos_t[pos], sin_t[pos])
        self.k_cache.index_copy_(0, pos, kk.to(self.k_cache.dtype))
        self.v_cache.index_copy_(0, pos, vv.to(self.v_cache.dtype))
        x, q = x[-1:], q[-1:]
        drafts, logits = [], []
        for j in range(k):
            if j > 0:  # chain cell p0 + j
                pj = pos[-1:] + j
                q, kk, vv = qkv(W, cfg, x, cos_t[pj], sin_t[pj])
                self.k_cache.index_copy_(0, pj, kk.to(self.k_cache.dtype))
                self.v_cache.index_copy_(0, pj, vv.to(self.v_cache.dtype))
            o = attend(cfg, q, self.k_cache[idx[j]], self.v_cache[idx[j]], valid[j: j + 1])
            h = block_out(W, cfg, x, o)
            lg = head.logits(h)
            logits.append(lg[0])
            # coupled draws: draft j is the token at sequence position p0 + 2 + j (on the device)
            d, i, cnt, x = self._next_draft(lg, h, cnt, i, j, k, leave, pos[-1:] + 2 + j)
            drafts.append(d)
        return torch.cat(drafts), torch.stack(logits)

    def _propose_static(self, tokens: list[int], c: int, p0: int, k: int) -> list[int]:
        if self._rope is None:  # grow the head's tables to every position once (same values)
            self.head.rope_at(torch.tensor([self.capacity - 1], device=self.head.device))
            self._rope = self.head.rope
        n = p0 - c + 1
        staged = self._stage(tokens, c, p0, k)
        out = None
        if self.use_graphs and n <= GRAPH_ROWS and k <= GRAPH_K:
            g = self._graphs.get((n, k, self._pen_key())) or self._capture(staged, n, k)
            if g is not None:
                g[0].replay()
                out = g[1:]
        if out is None:
            out = self._chain(staged, n, k)
        self.last_drafts, self.last_logits = out
        return [int(t) for t in out[0].tolist()]  # the one host sync per round

    def _capture(self, staged: torch.Tensor, n: int, k: int):
        """Warm up on a side stream and capture the (n, k) work; None (and no more graphs) on
        failure. The warm-up runs are this round's work done early: they write the same K/V."""
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._chain(staged, n, k)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                drafts, logits = self._chain(staged, n, k)
        except Exception as e:  # a capture failure costs speed, never the answer
            print(f"mtp-turbo: drafter CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); "
                  "drafting eagerly", file=sys.stderr)
            self.use_graphs = False
            return None
        key = (n, k, self._pen_key())  # the sampler values are constants of the captured work
        self._graphs[key] = (graph, drafts, logits)
        return self._graphs[key]
