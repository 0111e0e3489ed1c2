"""The MTP drafter: the head's own KV cache and the drafting a speculative round drives.

Owns: the drafter's static position-indexed KV cache (cell c = the row built from (h_c, token
c+1), RoPE at position c when K is written) and the main model's hidden rows it keeps; the engine
hooks (on_prefill, truncate, reset); a round's catch-up + chain drafting over the cells DraftCells
allows (sink + window + current chain) with static shapes, replayed from one CUDA graph per
(catch-up rows, k, penalty values) on CUDA and run eagerly elsewhere; how a draft is picked from
the head's logits (set_sampler): the argmax after the sampler's penalty stage over the verifier's
penalty window, or at temp > 0 with coupling the verifier's own draw from the head's
distribution; building the drafter for an engine (load_mtp_drafter).
Ignores: the head's math and file (models/mtp_head.py, models/mtp_load.py), the cell rules
(cache/cells.py), verification (spec/verify.py), training (train/).

Static shapes: the round's inputs live in one int64 vector staged on the host and uploaded with
one copy: positions c..p0 [n] | tokens c+1..p0+1 [n] | for each draft step j its read cells as
three [lo, hi) runs [k, 6] (sink, window, chain; at most M = sink + window + 1 cells; the
attention expands them) | the chain's positions p0 .. p0+k-1 [k] | with penalties over a
whole-history window only:
for each step j the head index leaving the penalty window [k] (-1 none), next to draft 0's window
counts [N] uploaded to _pen_dev. A bounded penalty window goes up apart, as its head indices [W],
and each draft is picked by the fused sampler over that window ++ the chain's earlier drafts. The read cells follow from the cell bookkeeping alone (never from the drafts), so the
host knows them up front; drafts are chosen and embedded on the device, and the k ids come back
in one sync at the end. Graph replay and the eager run are the same kernels (equal results), so a
capture failure costs only speed. The index work between the step's kernels (a round staged
ahead: picking the previous round's outcome; the drafts into their slots) is spec/glue.py's.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from ...cache.cells import DraftCells, DraftCellsConfig
from ...errors import ModelFileError
from ...models.fused import available as fused_available
from ...models.greedy import GreedyPick
from ...models.mtp_head import DEFAULT_HEAD, MTPHead
from ...models.mtp_step import MAX_ROWS as MAX_STEP_ROWS
from ...models.mtp_step import FusedMTPStep, TorchMTPStep
from ...sampling.chain import apply_penalties, probs_from_logits
from ...sampling.draw import draw
from ...sampling.fused import sample_tokens
from ...sampling.rng import uniforms
from ..glue import RoundGlue
from .base import Drafter

# captured CUDA graphs exist for catch-up batches of <= GRAPH_ROWS rows (a round catches up
# accepted + 1 rows) and chains of <= GRAPH_K drafts; bigger work runs the same code eagerly
GRAPH_ROWS, GRAPH_K = 8, 8
RUN_WORDS = 6  # a query's read cells as staged: three [lo, hi) runs (sink, window, chain)
# penalty windows of up to this many tokens are staged as the window's head indices and the drafts
# picked by the fused sampler (one launch a draft); longer or whole-history windows (-1) as counts
SEQ_WINDOW_MAX = 4096


class MTPDrafter(Drafter):
    """See the module docstring and cache/cells.py for the cell convention; the round with T
    committed tokens drafts from query p0 = T-2."""

    name = "mtp"
    reads_hidden = True
    on_device = True

    def __init__(self, head: MTPHead, capacity: int, sink: int = 64, window: int = 256, main=None,
                 graphs: bool = True, kernels: str = "auto"):
        """main: the main model, for its final norm when the head reads post-norm hidden states;
        graphs: replay the round's work from CUDA graphs (CUDA only); kernels: the round's device
        work on the fused Triton kernels ("triton"), torch ops ("torch"), or "auto" (Triton on
        CUDA when it imports)."""
        c = head.cfg
        self.head, self.main = head, main
        self.capacity = capacity + 16  # chain cells may run k-1 past the committed rows
        self.cells = DraftCells(DraftCellsConfig(sink=sink, window=window))
        dev, dt = head.device, head.dtype
        self.k_cache = torch.zeros(self.capacity, c.n_kv_heads, c.head_dim, device=dev, dtype=dt)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.hbuf = torch.zeros(self.capacity, c.hidden, device=dev, dtype=dt)  # main hidden by position
        self.h_lo = self.h_hi = 0  # positions [h_lo, h_hi) of hbuf hold current hidden rows
        self.tokens: list[int] = []
        self._prefill_next: int | None = None
        self.caught_up = 0  # rows the last prepare encoded ahead of its round (see prepare)
        self.last_logits: torch.Tensor | None = None  # [k, N] of the last propose (tests)
        self.last_drafts: torch.Tensor | None = None  # int64 [k] on the device
        self.use_graphs = bool(graphs) and dev.type == "cuda"
        self.max_reads = self.cells.config.max_reads  # M: the padded read-cell count of one query
        self._cell_ids = np.arange(self.capacity, dtype=np.int64)  # staged cell runs are slices of it
        self._stage_len = 2 * GRAPH_ROWS + GRAPH_K * RUN_WORDS + 2 * GRAPH_K
        self._stage_dev = torch.zeros(self._stage_len, dtype=torch.int64, device=dev)  # graphs read these
        self._stage_host = torch.zeros(self._stage_len, dtype=torch.int64,
                                       pin_memory=dev.type == "cuda")  # one non_blocking upload a round
        # kept views (a round's host work is GPU idle time: no tensor slicing in it)
        self._stage_np = self._stage_host.numpy()
        self._stage_views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # length -> (host, device)
        # a round staged before the previous one is read (prepare_after): cells [R] | every
        # outcome's read runs [R, k, 6], R = the previous round's k + 1; two pinned slots, as the
        # previous round's own upload may still be queued when the next one's is written
        pipe_len = GRAPH_ROWS + GRAPH_ROWS * GRAPH_K * RUN_WORDS
        self._pipe_host = [torch.zeros(pipe_len, dtype=torch.int64, pin_memory=dev.type == "cuda") for _ in range(2)]
        self._pipe_np = [t.numpy() for t in self._pipe_host]
        self._pipe_dev = torch.zeros(pipe_len, dtype=torch.int64, device=dev)
        self._pipe_slot = 0
        self._after: int | None = None  # n of the round prepare_after staged, until launched_after
        self._vmap_dev: torch.Tensor | None = None  # _head_index() on the device (windows read there)
        self._graphs: dict[tuple, tuple] = {}  # (n, k, penalty key) -> (graph, drafts [k], logits [k, N])
        head.rope_at(torch.tensor([self.capacity - 1], device=dev))  # the head's tables, every position
        self.torch_step = TorchMTPStep(head, self.k_cache, self.v_cache, head.rope)
        self.step = self.torch_step
        if kernels == "triton" or (kernels == "auto" and dev.type == "cuda" and fused_available()):
            self.step = FusedMTPStep(head, self.k_cache, self.v_cache, head.rope)
        # sampler (set_sampler): drafts are the argmax of the PENALISED head logits, or the coupled draw
        self._pen = None  # SamplerConfig whose penalty stage runs, or None (raw argmax)
        self._draw = None  # SamplerConfig whose whole chain + draw picks the drafts (coupling), or None
        self._vmap: np.ndarray | None = None  # full token id -> head index (-1: not a head row)
        n_rows = head.head_rows.shape[0]
        self._pen_dev = torch.zeros(n_rows, dtype=torch.float32, device=dev)  # window counts [N]
        self._pen_host = torch.zeros(n_rows, dtype=torch.float32, pin_memory=dev.type == "cuda")
        # the window-sequence path (set_sampler): per window length W, host [W] / device [W +
        # GRAPH_K] head-index sequences (window, then the chain's drafts), the draft positions
        # [GRAPH_K] and the window's offsets from n [W] (-W .. -1, for a window read on the device)
        self._seq_bufs: dict[int, tuple[torch.Tensor, ...]] = {}
        self._seq: tuple[torch.Tensor, ...] | None = None
        self._seq_cfg = None  # the verifier's penalty stage at temperature 0: the drafts' pick
        self._seq_backend = "auto"  # sample_tokens' ("torch" after a failure of the fused kernels)
        # the raw-argmax drafts (its scratch kept here, for the graphs), mapped to token ids in its kernel
        self.pick = GreedyPick("triton" if kernels == "triton" else "auto")
        self.glue = RoundGlue(kernels if kernels in ("triton", "torch") else "auto")
        self._drafts = torch.zeros(GRAPH_K, dtype=torch.int64, device=dev)  # a captured chain's draft slots
        self._zero = torch.zeros(1, dtype=torch.int64, device=dev)  # a chained row's state index (its only row)

    # ---- engine hooks --------------------------------------------------------------------------
    def reset(self) -> None:
        self.cells.reset()
        self.h_lo = self.h_hi = 0
        self.tokens = []
        self._prefill_next = self._after = None

    def truncate(self, n: int) -> None:
        """Keep the first n committed tokens (rollback): cells >= n-1 and hidden rows >= n are stale."""
        self.cells.truncate(max(n - 1, 0))
        self.h_hi = max(min(self.h_hi, n), 0)
        self.h_lo = min(self.h_lo, self.h_hi)
        del self.tokens[n:]

    def _source(self, h: torch.Tensor) -> torch.Tensor:
        """Main hidden rows as the head reads them (before or after the final norm)."""
        h = h.to(self.hbuf.dtype)
        return self.main.final_norm(h) if self.head.cfg.hidden_source == "post_norm" else h

    def _store_hidden(self, c0: int, h: torch.Tensor) -> None:
        n = h.shape[0]
        self.hbuf[c0: c0 + n].copy_(self._source(h))  # copy: the caller's buffers are overwritten next
        self._mark_hidden(c0, n)

    def _mark_hidden(self, c0: int, n: int) -> None:
        """hbuf rows [c0, c0+n) now hold current hidden states."""
        if self.h_lo <= c0 <= self.h_hi:
            self.h_hi = c0 + n
        else:
            self.h_lo, self.h_hi = c0, c0 + n

    def _encode(self, c0: int, n: int, toks: list[int]) -> None:
        """Write committed K/V for cells [c0, c0+n) from hbuf and tokens c0+1..c0+n, all rows in
        one pass (each matrix read once per <= 4 rows)."""
        dev, st = self.head.device, self.torch_step
        pos = torch.arange(c0, c0 + n, device=dev)
        st.write_qkv(st.inputs(torch.tensor(toks[c0 + 1: c0 + n + 1], device=dev), self.hbuf, pos), pos)
        self.cells.wrote(c0, n)

    @torch.inference_mode()
    def on_prefill(self, c0: int, c1: int, hidden: torch.Tensor, tokens: list[int], n_rows: int | None = None) -> None:
        """Main rows [c0, c1) of `tokens` (the committed sequence, the whole prompt) were just
        encoded with hidden [c1-c0, D] (a static buffer: copied). n_rows: main rows the whole
        prefill encodes (default len(tokens) - 1), for the sink + window plan."""
        n_rows = len(tokens) - 1 if n_rows is None else n_rows
        assert hidden.shape[0] == c1 - c0 and c1 <= n_rows < len(tokens), (c0, c1, n_rows, len(tokens))
        if self._prefill_next != c0:  # a new prefill: everything depending on token c0 or later is stale
            self.truncate(c0)
            self.tokens = list(tokens)
            # row c0-1 pairs the kept h_{c0-1} with the (new) token c0: encode it now, else the
            # run and the sink would have a hole there
            if c0 >= 1 and self.h_lo <= c0 - 1 < self.h_hi and self.cells.cell1 == c0 - 1:
                self._encode(c0 - 1, 1, self.tokens)
        self.tokens = list(tokens)
        self._store_hidden(c0, hidden)
        self._prefill_next = c1
        for a, n in self.cells.prefill_plan(n_rows, c0, c1 - c0):
            if n > 0:
                self._encode(a, n, self.tokens)

    # ---- the sampler ---------------------------------------------------------------------------
    # Under the exact rule a draft is accepted with probability p_i(draft), p_i the main model's
    # distribution after the whole sampler chain, so the best draft is that distribution's argmax.
    # Temperature / top-p / min-p keep the argmax; the penalties move it. So the head's logits get
    # the same penalty stage (sampling/chain.py) over the window the verifier will use at that row:
    # the committed tokens plus the drafts before it in the chain. Drafts are proposals only:
    # exactness does not depend on this, acceptance does.
    def set_sampler(self, sampler, coupling: bool = False) -> None:
        """The SamplerConfig the verifier uses (None = raw argmax drafts). Its penalty stage moves
        the argmax (without penalties the drafts are exactly the unpenalised ones). coupling (temp
        > 0 only): draft the token the verifier's own draw would pick if the head's distribution
        were the main model's: the whole chain on the head's logits, inverse CDF in token-id order
        with the verifier's uniform for that position (sampling/draw.py, rng.py). The output does
        not depend on the drafts (every emitted token is the verifier's draw), so this stays exact;
        acceptance becomes the chance the two draws agree, which can pass max p (the ceiling of
        any fixed draft)."""
        on = (sampler is not None and sampler.uses_penalties and "penalties" in sampler.order)
        self._pen = sampler if on else None
        self._draw = sampler if (coupling and sampler is not None and not sampler.greedy) else None
        # penalised argmax drafts over a bounded window: the window's head indices go up (not a
        # [N] count array filled and uploaded a round) and one fused sampler launch picks each
        # draft, its window the sequence window ++ earlier drafts (what the verifier's row sees)
        self._seq = self._seq_cfg = None
        if self._pen is not None and self._draw is None and 0 < self._pen.penalty_last_n <= SEQ_WINDOW_MAX:
            w = self._pen.penalty_last_n
            if w not in self._seq_bufs:  # kept per W: captured graphs read these buffers
                dev = self.head.device
                self._seq_bufs[w] = (torch.full((w,), -1, dtype=torch.int64, pin_memory=dev.type == "cuda"),
                                     torch.full((w + GRAPH_K,), -1, dtype=torch.int64, device=dev),
                                     torch.arange(w, w + GRAPH_K, dtype=torch.int64, device=dev),
                                     torch.arange(-w, 0, dtype=torch.int64, device=dev))
            self._seq = self._seq_bufs[w]
            self._seq_cfg = dataclasses.replace(self._pen, temperature=0.0)
        ids = self.head.vocab_ids
        if self._draw is not None and ids is not None and ids.numel() > 1:
            # the head's rows must run in token-id order for its CDF to line up with the verifier's
            assert bool((ids[1:] > ids[:-1]).all()), "head vocab ids must be ascending for coupled drafts"

    def _pen_key(self):
        """The sampler values a captured chain bakes in (part of its graph key)."""
        p, d = self._pen, self._draw
        pen = None if p is None else (p.repeat_penalty, p.presence_penalty, p.frequency_penalty)
        if self._seq is not None:  # the window length shapes the work (and its buffers)
            pen = (pen, self._pen.penalty_last_n)
        return pen if d is None else (pen, d)

    def _head_index(self) -> np.ndarray:
        """full token id -> head row index (-1 where the head has no row for it)."""
        if self._vmap is None:
            v = self.head.embed.shape[0]
            ids = self.head.vocab_ids
            if ids is None:
                self._vmap = np.arange(v, dtype=np.int64)
            else:
                self._vmap = np.full(v, -1, dtype=np.int64)
                self._vmap[ids.cpu().numpy()] = np.arange(ids.shape[0], dtype=np.int64)
        return self._vmap

    def _pen_window(self, tokens: list[int], k: int, counts: np.ndarray) -> np.ndarray:
        """Penalty window of draft 0 (the last penalty_last_n committed tokens; -1 = all) as head
        counts, written into counts float32 [N]; returns for each chain step j the head index of
        the committed token that leaves the window when draft j-1 enters it, int64 [k] (-1 = none;
        entry 0 is always -1). Tokens without a head row are left out: they cannot change the
        head's argmax."""
        last_n, T = self._pen.penalty_last_n, len(tokens)
        vmap = self._head_index()
        lo = 0 if last_n < 0 else max(0, T - last_n)
        win = vmap[np.asarray(tokens[lo:], dtype=np.int64)]
        counts.fill(0.0)
        np.add.at(counts, win[win >= 0], 1.0)
        leave = np.full(k, -1, dtype=np.int64)
        if last_n > 0:
            for j in range(1, k):
                t = T - last_n + j - 1  # history T + j tokens, window [T + j - last_n, T + j)
                if t >= 0:
                    leave[j] = vmap[tokens[t]]
        return leave

    def _seq_window(self, tokens: list[int], out: np.ndarray) -> None:
        """The verifier's penalty window of draft 0 (the last W committed tokens) as head indices
        (-1: no head row, or before the sequence's start) into out int64 [W]."""
        w = out.shape[0]
        win = self._head_index()[np.asarray(tokens[max(0, len(tokens) - w):], dtype=np.int64)]
        out[: w - win.shape[0]] = -1
        out[w - win.shape[0]:] = win

    def _pick(self, lg: torch.Tensor, c: torch.Tensor | None, i_prev: torch.Tensor | None,
              leave: torch.Tensor | None, cpos: torch.Tensor):
        """Head logits lg [1, N] -> (head index [1] of the draft, counts [N] used). c: counts of
        the previous step (None = penalties off); i_prev [1]: the previous draft's head index
        (enters the window), leave [1]: the index leaving it (-1 = none); cpos [1]: the chain
        step's query position (the draft is the token at cpos + 2: coupled draws). Out of place,
        no sync ([1]-shaped ids: indexing with a 0-dim tensor would call .item(), a sync that
        breaks capture)."""
        if c is not None and i_prev is not None:
            c = c.index_add(0, i_prev, torch.ones(1, dtype=c.dtype, device=c.device))
            c = c.index_add(0, leave.clamp(min=0), -(leave >= 0).to(c.dtype))
        if self._draw is not None:
            probs = probs_from_logits(lg.float(), None if c is None else c[None], self._draw)
            return draw(probs, uniforms(self._draw.seed, cpos + 2)), c
        if c is None:
            return self.pick(lg), None
        return apply_penalties(lg, c[None], self._pen).argmax(-1), c

    # ---- drafting ------------------------------------------------------------------------------
    def begin(self, tokens: list[int]) -> None:
        m = 0
        lim = min(len(tokens), len(self.tokens))
        while m < lim and tokens[m] == self.tokens[m]:
            m += 1
        self.truncate(m)
        self.tokens = list(tokens)
        self._prefill_next = self._after = None

    def _follow(self, tokens: list[int]) -> None:
        """Make self.tokens equal `tokens` at a round's cost, not the context's: between begin()
        and the rounds the sequence only grows by what rounds commit (rollbacks come through
        truncate), so a matching tail means a matching prefix (a copy of a 12k-token list and a
        compare cost ~0.1 ms of host time a round, with the GPU idle). Anything else: begin()."""
        m = len(self.tokens)
        tail = max(0, m - 64)
        if len(tokens) >= m and tokens[tail:m] == self.tokens[tail:]:
            self.tokens.extend(tokens[m:])
        else:
            self.begin(tokens)

    def observe(self, tokens: list[int], accepted: int, hidden: torch.Tensor | None, stored: bool = False) -> None:
        """hidden: the verified rows' states [accepted + 1, D], or stored: the round's program
        already put them in hbuf (store_hidden_rows)."""
        self._prefill_next = None
        n_new = len(tokens)
        pos = n_new - accepted - 2  # = n - 1, n = tokens before the round
        self.truncate(min(len(self.tokens), pos + 1))  # cells of the rejected part of the chain
        self._follow(tokens)
        if pos >= 0 and stored:
            self._mark_hidden(pos, accepted + 1)
        elif hidden is not None and pos >= 0:
            assert hidden.shape[0] == accepted + 1, (hidden.shape, accepted)
            self._store_hidden(pos, hidden)

    # ---- the round's device program (spec/program.py) ------------------------------------------
    def store_hidden_rows(self, pos: torch.Tensor, hidden: torch.Tensor) -> None:
        """Device: the verified rows' main states hidden [T, D] into hbuf at positions pos [T].
        Capturable; the host marks the committed ones with observe(..., stored=True)."""
        self.hbuf.index_copy_(0, pos, self._source(hidden))

    def fall_back_to_torch(self) -> bool:
        """Draft with torch ops from now on (the fused kernels failed); False if it already does."""
        if self.step is self.torch_step and self._seq_backend == "torch" and self.pick.backend == "torch" \
                and self.glue.backend == "torch":
            return False
        self.step = self.torch_step
        self._seq_backend = "torch"
        self.pick = GreedyPick("torch")
        self.glue.backend = "torch"
        self._graphs.clear()
        return True

    def glue_to_torch(self) -> bool:
        """The index work between the step's kernels with torch ops from now on; False if it already is."""
        if self.glue.backend == "torch":
            return False
        self.glue.backend = "torch"
        self._graphs.clear()
        return True

    def device_drafts(self, staged: torch.Tensor, n: int, k: int, tok_buf: torch.Tensor | None = None,
                      n_dev: torch.Tensor | None = None) -> torch.Tensor:
        """Device: the k draft ids [k] of a round prepared with prepare() (capturable). tok_buf /
        n_dev: the round's token buffer and committed count (the interface's; staged holds all
        this drafter reads). The drafts are a view of the drafter's slots, rewritten by its next chain."""
        return self._chain(staged, n, k)[0]

    def _sink_gap(self, p0: int) -> bool:
        """Sink cells query p0 reads hold nothing but their hidden rows are kept (re-encode them)."""
        cells = self.cells
        s_need = min(cells.config.sink, max(p0 - cells.config.window, 0))
        return cells.sink_valid < s_need and self.h_lo <= cells.sink_valid

    def _repairs(self, p0: int) -> bool:
        """Whether _repair(p0) would re-encode anything."""
        need, cells = max(p0 - self.cells.config.window, 0, self.h_lo), self.cells
        return self._sink_gap(p0) or (need < p0 and not (cells.cell0 <= need <= cells.cell1))

    def _repair(self, p0: int) -> None:
        """Re-encode cells query p0 reads but that hold nothing (a rollback into prompt rows the
        prefill plan skipped): sink cells below the window, then the window from its first cell.
        Uses the kept hidden rows; without them the drafter just sees less context."""
        cells = self.cells
        lo = max(p0 - cells.config.window, 0)
        force = self._sink_gap(p0)
        if force:
            s_need = min(cells.config.sink, lo)
            self._encode(cells.sink_valid, s_need - cells.sink_valid, self.tokens)
        need = max(lo, self.h_lo)
        if need < p0 and (force or not (cells.cell0 <= need <= cells.cell1)):
            self.cells.truncate(need)
            self._encode(need, p0 - need, self.tokens)

    def prepare(self, tokens: list[int], k: int) -> tuple[int, torch.Tensor] | None:
        """Host half of a round of k drafts after `tokens`: repair and mark the cells, stage the
        inputs on the device. -> (catch-up rows n, staged vector), or None when nothing can be
        drafted yet (no hidden state for the query). caught_up: the rows it encoded itself, ahead
        of the round (a catch-up longer than the round's graphs take)."""
        self._prefill_next = None
        self.caught_up = 0
        self._follow(tokens)
        p0 = len(tokens) - 2
        if k <= 0 or p0 < 0 or self.h_hi <= p0:
            return None
        self._repair(p0)
        c = max(min(self.cells.cell1, p0), self.h_lo)
        self.cells.truncate(c)
        if p0 - c + 1 > GRAPH_ROWS:
            # after a stretch of plain steps (the adaptive chooser at k = 0) or a rollback: the
            # rows before p0 in one batch now, so the round itself replays its graph (a round
            # with a long catch-up ran eagerly: milliseconds of host launches)
            self._encode(c, p0 - c, self.tokens)
            self.caught_up, c = p0 - c, p0
        # catch-up rows c..p0-1 and draft 0's row p0 (committed too: h_p0 and token p0+1 are) in
        # one batch: each matrix is read once for all of them
        return p0 - c + 1, self._stage(tokens, c, p0, k)

    def prepare_after(self, n: int, k_prev: int, k: int) -> torch.Tensor | None:
        """Host half of a round of k drafts launched before the previous round (k_prev drafts, n
        committed tokens before it) is read. Whatever that round accepts (a in 0..k_prev), this
        one catches up from cell n-1 and drafts from p0 = n-1+a: the cells n-1 .. n-1+k_prev and
        each outcome's read runs are staged (-> the staged vector on the device; the device picks
        a's, device_drafts_after). None where an outcome would need host work first (a repair,
        the window counts of a whole-history penalty window): that round waits for the previous
        one's result. launched_after(a) then marks the cells, as prepare would have."""
        R, cells = k_prev + 1, self.cells
        if not (1 <= k <= GRAPH_K and 1 <= k_prev and R <= min(GRAPH_ROWS, MAX_STEP_ROWS)) or n < 2 \
                or (self._pen is not None and self._seq is None):
            return None
        if self._after is not None or cells.cell1 != n - 1 or not (self.h_lo <= n - 1 <= self.h_hi) \
                or n - 1 + R + k > self.capacity or any(self._repairs(n - 1 + a) for a in range(R)):
            return None
        if self._seq is not None and self._vmap_dev is None:
            self._vmap_dev = torch.from_numpy(self._head_index()).to(self.head.device)
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
        self._after = n
        return dev

    def launched_after(self, accepted: int) -> None:
        """The previous round accepted `accepted`: the round prepare_after staged caught up
        accepted + 1 rows from cell n-1 (call after observe of the previous round)."""
        n, self._after = self._after, None
        assert n is not None and len(self.tokens) == n + accepted + 1, (n, accepted, len(self.tokens))
        self._prefill_next = None
        self.caught_up = 0
        self.cells.truncate(n - 1)
        self.cells.wrote(n - 1, accepted + 1)

    def device_drafts_after(self, staged: torch.Tensor, k_prev: int, k: int, accepted: torch.Tensor,
                            tok_buf: torch.Tensor, n_dev: torch.Tensor) -> torch.Tensor:
        """Device: the k draft ids [k] of a round prepared with prepare_after, the previous round's
        accepted count [1] and the committed count n_dev [1] on the device (capturable)."""
        return self._chain_after(staged, k_prev, k, accepted, tok_buf, n_dev)[0]

    @torch.inference_mode()
    def propose(self, tokens: list[int], k: int) -> list[int]:
        prep = self.prepare(tokens, k)
        if prep is None:
            return []
        n, staged = prep
        out = None
        if self.use_graphs and n <= GRAPH_ROWS and k <= GRAPH_K:
            g = self._graphs.get((n, k, self._pen_key())) or self._capture(staged, n, k)
            if g is not None:
                g[0].replay()
                out = g[1:]
        if out is None:
            out = self._chain(staged, n, k, want_logits=True)
        self.last_drafts, self.last_logits = out
        return [int(t) for t in out[0].tolist()]  # the one host sync per round

    def _stage(self, tokens: list[int], c: int, p0: int, k: int) -> torch.Tensor:
        """Mark the catch-up rows written and return the round's input vector (staged, on the device)."""
        n, M, R = p0 - c + 1, self.max_reads, RUN_WORDS
        self.cells.wrote(c, n)
        pen = self._pen is not None and self._seq is None  # penalties as staged counts
        L = 2 * n + k * R + k + (k if pen else 0)
        fits = n <= GRAPH_ROWS and k <= GRAPH_K
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
        if pen:  # window counts of draft 0 -> _pen_dev (pinned, reused after the round's sync)
            a[2 * n + k * R + k:] = self._pen_window(tokens, k, self._pen_host.numpy())
            self._pen_dev.copy_(self._pen_host, non_blocking=True)
        elif self._seq is not None:  # the window's head indices (pinned, reused after the sync)
            seq_host, seq_dev = self._seq[:2]
            self._seq_window(tokens, seq_host.numpy())
            seq_dev[: seq_host.shape[0]].copy_(seq_host, non_blocking=True)
        for j in range(k):  # draft j's query at p0 + j: committed cells and the chain p0+1 .. p0+j
            o = 0
            for i, (lo, hi) in enumerate(self.cells.read_runs(p0 + j, p0 + 1)):
                runs[j, 2 * i], runs[j, 2 * i + 1] = lo, hi
                o += hi - lo
            assert o <= M, (o, M)
        if not fits:
            return host.to(self.head.device)
        dev.copy_(host, non_blocking=True)  # pinned: the host buffer is reused only after the round's sync
        return dev

    def _chain(self, staged: torch.Tensor, n: int, k: int,
               want_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The round's device work from its staged inputs -> (draft ids int64 [k], fp32 logits [k, N]
        or None without want_logits). No host syncs and no shape that depends on positions: capturable."""
        st = self.step if n <= MAX_STEP_ROWS else self.torch_step
        pos, toks = staged[:n], staged[n: 2 * n]
        km = k * RUN_WORDS
        runs = staged[2 * n: 2 * n + km].view(k, RUN_WORDS)
        cpos = staged[2 * n + km: 2 * n + km + k]
        # penalties on: window counts [N] (read only: warm-up runs and replays must all start from it)
        # and the head index leaving the window at each chain step [k]
        counts = self._pen is not None and self._seq is None
        x = st.inputs(toks, self.hbuf, pos)  # catch-up rows c..p0-1 and draft 0's row p0
        q = st.write_qkv(x, pos)[-1:]
        return self._draft_chain(st, x[-1:], q, cpos, runs, self._pen_dev if counts else None,
                                 staged[2 * n + km + k:] if counts else None, k, want_logits)

    def _chain_after(self, staged: torch.Tensor, k_prev: int, k: int, a: torch.Tensor, tok_buf: torch.Tensor,
                     n_dev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """_chain for a round staged by prepare_after: the previous round's accepted count a [1]
        (on the device) picks draft 0's row among the k_prev + 1 catch-up rows (rows past it hold
        rejected rows' states; their K/V land in chain cells, rewritten before anything reads
        them) and its outcome's read runs; tokens come from tok_buf, the penalty window from
        tok_buf[:n_dev]."""
        R = k_prev + 1
        st = self.step if R <= MAX_STEP_ROWS else self.torch_step
        pos = staged[:R]  # cells n-1 .. n-1+k_prev
        # the catch-up rows' tokens, outcome a's read runs and chain positions; with the window
        # sequence, the verifier's window of draft 0 (head indices of tok_buf[n-W:n])
        seq = self._seq
        window = None if seq is None else (self._vmap_dev, seq[1], seq[0].shape[0], seq[3])
        toks, runs, cpos = self.glue.after_inputs(staged, R, k, a, tok_buf, n_dev, window)
        x = st.inputs(toks, self.hbuf, pos)
        q = st.write_qkv(x, pos)
        xs, qs = self.glue.after_select(a, x, q)  # draft 0's row
        return self._draft_chain(st, xs, qs, cpos, runs, None, None, k)

    def _draft_chain(self, st, x: torch.Tensor, q: torch.Tensor, cpos: torch.Tensor, runs: torch.Tensor,
                     cnt: torch.Tensor | None, leave: torch.Tensor | None, k: int,
                     want_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """k drafts from draft 0's block input x [1, D] and query q [1, H, Dh], step j at position
        cpos[j] (p0 + j) reading runs[j] [6]; cnt / leave: the staged penalty counts (None: off or
        the window sequence). -> (draft ids int64 [k]: the drafter's slots (k <= GRAPH_K), valid
        until its next chain; fp32 logits [k, N] with want_logits, else None)."""
        head, seq, ids = self.head, self._seq, self.head.vocab_ids
        drafts = self._drafts[:k] if k <= GRAPH_K else torch.empty(k, dtype=torch.int64, device=head.device)
        i = None
        logits = []
        for j in range(k):
            if j > 0:  # chain cell p0 + j: a draft's K/V, not committed
                q = st.write_qkv(x, cpos[j: j + 1])
            h = st.attend(x, q, runs[j], self.max_reads)
            lg = st.logits(h, j)
            if want_logits:
                logits.append(lg[0])
            slot = drafts[j: j + 1]  # the draft's token id (the next step's input)
            if seq is not None:  # the penalised argmax; the draft then enters the next one's window
                w = seq[0].shape[0]
                i = sample_tokens(lg, seq[1], seq[2][j: j + 1], self._seq_cfg, backend=self._seq_backend)
                self.glue.draft_store(i, ids, slot, seq[1][w + j: w + j + 1])
            elif cnt is None and self._draw is None:  # the raw argmax, mapped and stored by its kernel
                self.pick(lg, out=slot, ids=ids)
            else:  # staged counts, or coupled draws (draft j: the token at sequence position p0 + 2 + j)
                i, cnt = self._pick(lg, cnt, i if j > 0 else None, None if leave is None else leave[j: j + 1],
                                    cpos[j: j + 1])
                self.glue.draft_store(i, ids, slot)
            if j + 1 < k:
                x = st.inputs(slot, h, self._zero)
        return drafts, (torch.stack(logits) if want_logits else None)

    def _capture(self, staged: torch.Tensor, n: int, k: int):
        """Warm up on a side stream and capture the (n, k) work; None (and no more graphs) on
        failure. The warm-up runs are this round's work done early: they write the same K/V."""
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._chain(staged, n, k, want_logits=True)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                drafts, logits = self._chain(staged, n, k, want_logits=True)
        except Exception as e:  # a capture failure costs speed, never the answer
            print(f"mtp-turbo: drafter CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); "
                  "drafting eagerly", file=sys.stderr)
            self.use_graphs = False
            return None
        key = (n, k, self._pen_key())  # the sampler values are constants of the captured work
        self._graphs[key] = (graph, drafts, logits)
        return self._graphs[key]


def load_mtp_drafter(spec, main, main_gguf, capacity: int) -> MTPDrafter:
    """The drafter for main model `main` (loaded from GGUFFile `main_gguf`, whose sha256 the head
    must name) with a cache of `capacity` cells, per SpecConfig `spec` (spec.drafter path or the
    shipped head; its draft_quant / draft_head_quant / draft_tile / sink / window)."""
    from ...models.mtp_load import load_head
    from ...quant.gemv import parse_tile

    path = Path(spec.drafter) if spec.drafter else DEFAULT_HEAD
    if not path.exists():
        raise ModelFileError(f"MTP head file {path} does not exist" + (
            " (no head is shipped yet: train one with `mtp-turbo train-mtp`)" if not spec.drafter else ""))
    head = load_head(path, main, expect_sha=main_gguf.sha256(), draft_quant=spec.draft_quant,
                     head_quant=spec.draft_head_quant, tile=parse_tile(spec.draft_tile) if spec.draft_tile else None,
                     main_gguf=main_gguf)
    return MTPDrafter(head, capacity, sink=spec.draft_sink, window=spec.draft_window, main=main)
