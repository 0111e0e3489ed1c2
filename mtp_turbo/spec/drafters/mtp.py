"""The MTP drafter: the head's own KV cache and the drafting a speculative round drives.

Owns: the drafter's static position-indexed KV cache (cell c = the row built from (h_c, token
c+1), RoPE at position c when K is written) and the main model's hidden rows it keeps; the engine
hooks (on_prefill, truncate, reset); a round's catch-up + chain drafting over the cells DraftCells
allows (sink + window + current chain) with static shapes, replayed from one CUDA graph per
(catch-up rows, k, penalty values) on CUDA and run eagerly elsewhere; building the drafter for an
engine (load_mtp_drafter).
Ignores: the head's math and file (models/mtp_head.py, models/mtp_load.py), the cell rules
(cache/cells.py), cell repairs and the staged vectors' layout (mtp_stage.py), the chain's steps
and how each draft is picked under the verifier's sampler (mtp_sampler.py), verification
(spec/verify.py), training (train/).

Here: the drafter's state and the order of a round's work; the host's staging and the chain's
picks live apart, as they change for reasons of their own (the layout, the sampler). Drafts are
chosen and embedded on the device, and the k ids come back in one sync at the end. Graph replay
and the eager run are the same kernels (equal results), so a capture failure costs only speed.
The index work between the step's kernels (a round staged ahead: picking the previous round's
outcome; the drafts into their slots) is spec/glue.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from ...cache.cells import DraftCells, DraftCellsConfig
from ...errors import ModelFileError
from ...models.fused import available as fused_available
from ...models.greedy import GreedyPick
from ...models.mtp_head import DEFAULT_HEAD, MTPHead, shipped_head
from ...models.mtp_step import MAX_ROWS as MAX_STEP_ROWS
from ...models.mtp_step import FusedMTPStep, TorchMTPStep
from ..glue import RoundGlue
from ..tree import leaf_index
from .base import Drafter
from .mtp_sampler import SEQ_WINDOW_MAX, DraftSampler
from .mtp_stage import RUN_WORDS, RoundStage, needs_repair, repair_cells

# RUN_WORDS and SEQ_WINDOW_MAX stay importable from here (set them where they are defined)
__all__ = ["MTPDrafter", "load_mtp_drafter", "DEFAULT_HEAD", "GRAPH_ROWS", "GRAPH_K", "RUN_WORDS", "SEQ_WINDOW_MAX"]

# captured CUDA graphs exist for catch-up batches of <= GRAPH_ROWS rows (a round catches up
# accepted + 1 rows) and chains of <= GRAPH_K drafts; bigger work runs the same code eagerly
GRAPH_ROWS, GRAPH_K = 8, 8


class MTPDrafter(Drafter):
    """See the module docstring and cache/cells.py for the cell convention; the round with T
    committed tokens drafts from query p0 = T-2."""

    name = "mtp"
    reads_hidden = True
    on_device = True
    drafts_trees = True

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
        self.last_logits: torch.Tensor | None = None  # [k, N] of the last propose or tree (tests)
        self.last_drafts: torch.Tensor | None = None  # int64 [k] on the device
        self.use_graphs = bool(graphs) and dev.type == "cuda"
        self.max_reads = self.cells.config.max_reads  # M: the padded read-cell count of one query
        self.stage = RoundStage(self.capacity, dev, GRAPH_ROWS, GRAPH_K)  # graphs read its buffers
        self._after: int | None = None  # n of the round prepare_after staged, until launched_after
        self._graphs: dict[tuple, tuple] = {}  # (n, k, penalty key) -> (graph, drafts [k], logits [k, N])
        head.rope_at(torch.tensor([self.capacity - 1], device=dev))  # the head's tables, every position
        self.torch_step = TorchMTPStep(head, self.k_cache, self.v_cache, head.rope)
        self.step = self.torch_step
        if kernels == "triton" or (kernels == "auto" and dev.type == "cuda" and fused_available()):
            self.step = FusedMTPStep(head, self.k_cache, self.v_cache, head.rope)
        # sampler (set_sampler): drafts are the argmax of the PENALISED head logits, or the coupled draw
        self.sampler = DraftSampler(head, GRAPH_K)
        # the raw-argmax drafts (its scratch kept here, for the graphs), mapped to token ids in its kernel
        self.pick = GreedyPick("triton" if kernels == "triton" else "auto")
        self.glue = RoundGlue(kernels if kernels in ("triton", "torch") else "auto")

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

    # ---- the sampler (mtp_sampler.py) ------------------------------------------------------------
    def set_sampler(self, sampler, coupling: bool = False) -> None:
        """The SamplerConfig the verifier uses (None = raw argmax drafts) and whether drafts are
        coupled to its draw: DraftSampler.set."""
        self.sampler.set(sampler, coupling)

    def _seq_window(self, tokens: list[int], out: np.ndarray) -> None:
        """Draft 0's penalty window as head indices into out int64 [W] (DraftSampler.seq_window;
        a method here so that bench/experiments/round_host_time.py times it as before)."""
        self.sampler.seq_window(tokens, out)

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

    def hidden_rows_buffer(self) -> torch.Tensor | None:
        """hbuf, where the verified rows' states go in as they are (the round's accept kernel then
        copies them there: store_hidden_rows' launch saved); None where they need the final norm."""
        return None if self.head.cfg.hidden_source == "post_norm" else self.hbuf

    def fall_back_to_torch(self) -> bool:
        """Draft with torch ops from now on (the fused kernels failed); False if it already does."""
        if self.step is self.torch_step and self.sampler.seq_backend == "torch" and self.pick.backend == "torch" \
                and self.glue.backend == "torch":
            return False
        self.step = self.torch_step
        self.sampler.seq_backend = "torch"
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

    def _repair(self, p0: int) -> None:
        """Re-encode cells query p0 reads but that hold nothing (mtp_stage.repair_cells)."""
        repair_cells(self.cells, p0, self.h_lo, lambda c0, n: self._encode(c0, n, self.tokens))

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
                or self.sampler.counts:
            return None
        if self._after is not None or cells.cell1 != n - 1 or not (self.h_lo <= n - 1 <= self.h_hi) \
                or n - 1 + R + k > self.capacity or any(needs_repair(cells, n - 1 + a, self.h_lo) for a in range(R)):
            return None
        if self.sampler.seq is not None:
            self.sampler.device_head_index()  # the window is read on the device
        staged = self.stage.after(n, k_prev, k, cells)
        self._after = n
        return staged

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
            g = self._graphs.get((n, k, self.sampler.key())) or self._capture(staged, n, k)
            if g is not None:
                g[0].replay()
                out = g[1:]
        if out is None:
            out = self._chain(staged, n, k, want_logits=True)
        self.last_drafts, self.last_logits = out
        return [int(t) for t in out[0].tolist()]  # the one host sync per round

    def device_tree(self, staged: torch.Tensor, n: int, tree) -> torch.Tensor:
        """Device: the tokens [nodes - 1] of `tree`'s nodes 1.. for a round prepared with
        prepare(tokens, tree.depth) (capturable). The spine: the chain (its picks under the
        sampler); a depth's leaves: the next best of the head's logits there, the spine's own pick
        left out."""
        spine, logits = self._chain(staged, n, tree.depth, want_logits=True)
        self.last_drafts, self.last_logits = spine, logits
        leaves = tree.leaves()
        if not leaves:
            return spine
        rows, most = len(tree.extra), max(tree.extra)
        top = logits[:rows].topk(most + 1, dim=-1).indices  # head indices, best first
        ids = self.head.vocab_ids
        if ids is not None:
            top = ids[top]
        other = (top == spine[:rows, None]).to(torch.int8)  # the spine's pick sorts last, the rest keep their order
        cand = top.gather(1, other.sort(dim=1, stable=True).indices[:, :most])
        d, r = leaf_index(tree, spine.device)  # (made outside a capture: copied from the host once)
        return torch.cat([spine, cand[d, r]])

    def _stage(self, tokens: list[int], c: int, p0: int, k: int) -> torch.Tensor:
        """Mark the catch-up rows written and return the round's input vector (staged, on the device)."""
        self.cells.wrote(c, p0 - c + 1)
        sp, leave = self.sampler, None
        if sp.counts:  # window counts of draft 0 -> pen_dev (pinned, reused after the round's sync)
            leave = sp.pen_window(tokens, k, sp.pen_host.numpy())
            sp.pen_dev.copy_(sp.pen_host, non_blocking=True)
        elif sp.seq is not None:  # the window's head indices (pinned, reused after the sync)
            seq_host, seq_dev = sp.seq[:2]
            self._seq_window(tokens, seq_host.numpy())
            seq_dev[: seq_host.shape[0]].copy_(seq_host, non_blocking=True)
        return self.stage.round(tokens, c, p0, k, self.cells, self.max_reads, leave)

    def _chain(self, staged: torch.Tensor, n: int, k: int,
               want_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The round's device work from its staged inputs -> (draft ids int64 [k], fp32 logits [k, N]
        or None without want_logits). No host syncs and no shape that depends on positions: capturable."""
        st = self.step if n <= MAX_STEP_ROWS else self.torch_step
        pos, toks, runs, cpos, leave = RoundStage.split(staged, n, k)
        # penalties on: window counts [N] (read only: warm-up runs and replays must all start from it)
        # and the head index leaving the window at each chain step [k]
        counts = self.sampler.counts
        x = st.inputs(toks, self.hbuf, pos)  # catch-up rows c..p0-1 and draft 0's row p0
        q = st.write_qkv(x, pos)[-1:]
        return self.sampler.chain(st, x[-1:], q, cpos, runs, self.sampler.pen_dev if counts else None,
                                  leave if counts else None, k, self.max_reads, self.pick, self.glue, want_logits)

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
        seq = self.sampler.seq
        window = None if seq is None else (self.sampler.vmap_dev, seq[1], seq[0].shape[0], seq[3])
        toks, runs, cpos = self.glue.after_inputs(staged, R, k, a, tok_buf, n_dev, window)
        x = st.inputs(toks, self.hbuf, pos)
        q = st.write_qkv(x, pos)
        xs, qs = self.glue.after_select(a, x, q)  # draft 0's row
        return self.sampler.chain(st, xs, qs, cpos, runs, None, None, k, self.max_reads, self.pick, self.glue)

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
        key = (n, k, self.sampler.key())  # the sampler values are constants of the captured work
        self._graphs[key] = (graph, drafts, logits)
        return self._graphs[key]


def load_mtp_drafter(spec, main, main_gguf, capacity: int) -> MTPDrafter:
    """The drafter for main model `main` (loaded from GGUFFile `main_gguf`, whose sha256 the head
    must name) with a cache of `capacity` cells, per SpecConfig `spec` (spec.drafter path or the
    shipped head; its draft_quant / draft_head_quant / draft_tile / sink / window)."""
    from ...models.mtp_load import load_head
    from ...quant.gemv import parse_tile

    path = Path(spec.drafter) if spec.drafter else shipped_head(main_gguf.path, main.cfg.family)
    if path is None:
        raise ModelFileError(f"no MTP head ships for this {main.cfg.family} model: train one with `mtp-turbo "
                             "train-mtp` and pass it with --drafter, or draft with --draft ngram / model")
    if not path.exists():
        raise ModelFileError(f"MTP head file {path} does not exist" + (
            " (no head is shipped yet: train one with `mtp-turbo train-mtp`)" if not spec.drafter else ""))
    head = load_head(path, main, expect_sha=main_gguf.sha256(), draft_quant=spec.draft_quant,
                     head_quant=spec.draft_head_quant, tile=parse_tile(spec.draft_tile) if spec.draft_tile else None,
                     main_gguf=main_gguf)
    return MTPDrafter(head, capacity, sink=spec.draft_sink, window=spec.draft_window, main=main)
