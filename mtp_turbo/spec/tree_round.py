"""Draft-tree rounds: the drafter's spine tree, one verify forward of all its nodes, the target's
draw at every node, the exact walk (tree.accept_tree), the accepted path's K/V moved into place.

Owns: `TreeRound` (one round's device work, replayed from a CUDA graph per (tree, catch-up rows,
sampler shape) on CUDA, eager elsewhere; one host read a round) and `tree_tokens` (the loop of tree
rounds, as round.speculative_tokens is for chains, with the same RoundStats: per depth).
Ignores: the tree rule and the shapes (tree.py, tree_shape.py), how the target forwards a tree
(the engine: models/fused.py's tree mode, decoder.forward_tree), how the drafter ranks its
candidates (drafters/mtp.py's device_tree).

Why it gives plain decoding's text: node m's row is a one-row step after the path to m (its K/V in
cell p0 + m, its attention over the committed cells and its ancestors'), and its token is drawn
with the sampler chain plain decoding uses, over the penalty window of that path (path_windows)
and the uniform of its position. The walk only ever emits those draws along the path plain
decoding takes, so the text is plain decoding's for a seed whatever the drafts.

After a round that accepted a drafts: cells p0 .. p0 + a hold the path's K/V (moved from the
nodes' cells; the others are stale, rewritten before anything reads them), tok_buf[n : n + a + 1]
the emitted tokens, and a drafter that reads hidden states has the path rows' states at their
positions (stored here, marked by observe).
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Iterator

import torch

from ..errors import MtpTurboError
from ..models.greedy import GreedyPick
from ..sampling.config import SamplerConfig
from ..sampling.fused import PARAM_WORDS, sample_rows, sampler_values
from .drafters.base import Drafter
from .drafters.mtp import GRAPH_ROWS
from .program import program_shape
from .round import RoundStats, drafter_sampler
from .target import Target
from .tree import accept_tree, path_windows, tables
from .tree_shape import MAX_NODES, SpineTree, TreeShape

ROOT = TreeShape((-1,))  # a plain step: the pending token's row alone


class TreeRound:
    """One target + drafter (+ the sampler of set_sampler). run(tree) -> (accepted, emitted tokens,
    tree drafted). The round's device work (drafts, forward, draws, walk, the path's K/V, tokens and
    states into place) reads the committed count from the device and is replayed from one CUDA
    graph per (tree, catch-up rows, sampler shape) on CUDA, run eagerly elsewhere (the same ops: a
    capture failure costs speed only)."""

    def __init__(self, target: Target, drafter: Drafter, vocab: int | None = None, graphs: bool = True):
        self.target, self.drafter, self.vocab = target, drafter, vocab
        dev = target.device
        self.cuda = dev.type == "cuda"
        self.graphs = graphs and self.cuda
        self.pick = GreedyPick()  # the temp-0 token of each row without penalties, as plain steps pick it
        # the sampler's values where the draw kernels read them (set_sampler; as RoundProgram keeps them)
        self.params = torch.zeros(PARAM_WORDS, dtype=torch.int64, device=dev)
        self.sampler: SamplerConfig | None = None
        self.n_host = torch.zeros(1, dtype=torch.int64, pin_memory=self.cuda)
        self.n_dev = torch.zeros(1, dtype=torch.int64, device=dev)
        self.out_dev = torch.zeros(MAX_NODES + 1, dtype=torch.int64, device=dev)
        self.out_host = torch.zeros(MAX_NODES + 1, dtype=torch.int64, pin_memory=self.cuda)
        self._graphs: dict[tuple, object] = {}
        self.captures = 0

    def set_sampler(self, sampler: SamplerConfig) -> None:
        """The sampler of the rounds that follow: its values where the draws read them (graphs are
        kept per sampler shape, so a new seed or temperature replays them)."""
        self.sampler = sampler
        self.params.copy_(torch.tensor(sampler_values(sampler), dtype=torch.int64))

    @torch.inference_mode()
    def run(self, tree: SpineTree | None) -> tuple[int, list[int], SpineTree | None]:
        """A round of `tree`'s drafts after the committed tokens (None, or nothing drafted yet: a
        plain step) -> (accepted, emitted, the tree drafted or None). Commits nothing: the caller
        commits `emitted` (tok_buf holds it already)."""
        tg = self.target
        n = len(tg.tokens)
        prep = self.drafter.prepare(tg.tokens, tree.depth) if tree is not None else None
        if prep is None:
            tree, n_catch, staged = None, 0, None
        else:
            n_catch, staged = prep
        self.n_host[0] = n
        self.n_dev.copy_(self.n_host, non_blocking=True)

        def work():
            self._work(tree, n_catch, staged)

        s = self.sampler
        key = (tree, n_catch, program_shape(s, self.vocab or 0, tg.tok_buf.shape[0]))
        graph = self._graphs.get(key) if self.graphs and n_catch <= GRAPH_ROWS else None
        if graph is None and self.graphs and n_catch <= GRAPH_ROWS:
            graph = self._capture(key, work)
        if graph is not None:
            graph.replay()
        else:
            work()
        self.out_host.copy_(self.out_dev)  # the round's one host sync
        a = int(self.out_host[0])
        out = self.out_host[1: a + 2].tolist()
        if self.vocab is not None and not all(0 <= t < self.vocab for t in out):
            raise MtpTurboError(f"no token could be drawn after position {n}: the model's logits are not "
                                "finite (NaN or infinite; a damaged model file?)")
        return a, out, tree

    def _work(self, tree: SpineTree | None, n_catch: int, staged) -> None:
        """The round's device work from n_dev (see the module docstring); out_dev = [a, emitted..]."""
        tg, tb, n = self.target, self.target.tok_buf, self.n_dev
        shape = tree.shape if tree is not None else ROOT
        dev = tb.device
        nodes = tb[n - 1]  # the pending token, then the drafts
        if tree is not None:
            nodes = torch.cat([nodes, self.drafter.device_tree(staged, n_catch, tree)])
        p0 = n - 1
        logits, hidden = tg.forward_tree(nodes, shape, p0)
        t = self._draw(logits, nodes, shape, n)
        acc, emitted, last = accept_tree(t, nodes, shape)
        path = tables(shape, dev).ancestors[last.view(1)][0].clamp(min=0)  # the accepted path's nodes (then the root)
        j = torch.arange(shape.depth + 1, device=dev)
        tg.move_cells(p0 + path, p0 + j)  # past the path: stale cells, rewritten before they are read
        keep = tb[n + j]
        tb.index_copy_(0, n + j, torch.where(j <= acc, emitted, keep))
        if self.drafter.reads_hidden:  # the host marks the path's rows valid (observe)
            self.drafter.store_hidden_rows(p0 + j, hidden[path])
        self.out_dev[:1].copy_(acc.view(1))
        self.out_dev[1: shape.depth + 2].copy_(emitted)

    def _draw(self, logits: torch.Tensor, toks: torch.Tensor, shape: TreeShape, n) -> torch.Tensor:
        """The target's token at each node: row m's at position n + depth(m), after the path to m."""
        s = self.sampler
        if not self.cuda and self.vocab is not None and not bool(torch.stack(torch.aminmax(logits)).isfinite().all()):
            self.out_dev[0] = -1  # (the CPU's argmax would pick a NaN's id; a GPU's ids are checked on read)
            raise MtpTurboError("no token could be drawn: the model's logits are not finite (NaN or infinite; "
                                "a damaged model file?)")
        if s.greedy and not s.uses_penalties:
            return self.pick(logits)
        pos = n + tables(shape, logits.device).depths
        windows = path_windows(self.target.tok_buf, n, toks, shape, s.penalty_last_n)
        return sample_rows(logits, windows, None, s, pos=pos, params=self.params)

    def _capture(self, key, work):
        """A CUDA graph of the round's work (warm-up runs on a side stream first: they do this
        round's work, the same writes); None, and eager rounds from now on, on failure."""
        keep = self.n_dev.clone()
        try:
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(2):
                    self.n_dev.copy_(keep)
                    work()
            torch.cuda.current_stream().wait_stream(st)
            self.n_dev.copy_(keep)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                work()
        except Exception as e:  # a failure costs speed, never the answer
            torch.cuda.synchronize()
            self.n_dev.copy_(keep)
            at = [f for f in traceback.extract_tb(e.__traceback__) if "mtp_turbo" in f.filename][-1:]
            where = f" at {Path(at[0].filename).name}:{at[0].lineno}" if at else ""
            print(f"mtp-turbo: a tree round's CUDA graph failed{where} ({type(e).__name__}: {str(e)[:300]}); "
                  "running tree rounds eagerly", file=sys.stderr)
            self.graphs = False
            return None
        self._graphs[key] = g
        self.captures += 1
        return g


def tree_tokens(target: Target, sampler: SamplerConfig, spec, tree: SpineTree, budget: int, drafter: Drafter,
                stats: RoundStats, vocab: int | None = None,
                tree_round: TreeRound | None = None) -> Iterator[list[int]]:
    """Yield the tokens each tree round emits (accepted drafts + the target's draw after them).
    Near the budget or the context's end a round drafts a shallower tree (none: a plain step).
    tree_round: the TreeRound to run them with (the engine keeps one, so its graphs outlive a call)."""
    drafter.set_sampler(drafter_sampler(sampler, spec), coupling=spec.draft_coupling)
    drafter.begin(target.tokens)
    rnd = tree_round if tree_round is not None else TreeRound(target, drafter, vocab)
    rnd.set_sampler(sampler)
    produced = 0
    while produced < budget:
        t0 = time.perf_counter()
        n = len(target.tokens)
        room = min(budget - produced - 1, target.ctx_size - n)  # drafts that fit both limits
        t = fit(tree, room, target.ctx_size - n + 1)
        a, emitted, t = rnd.run(t)
        target.commit(emitted, a, on_device=True)
        drafter.observe(target.tokens, a, None, stored=True)
        k = t.depth if t is not None else 0
        stats.add(k, a, len(emitted))
        stats.k_counts[k] = stats.k_counts.get(k, 0) + 1
        stats.round_s += time.perf_counter() - t0
        produced += len(emitted)
        yield emitted


def fit(tree: SpineTree, depth: int, cells: int) -> SpineTree | None:
    """`tree` cut to at most `depth` drafts and `cells` nodes (None: not one draft fits)."""
    depth = min(tree.depth, depth, cells - 1)
    if depth < 1:
        return None
    extra = list(tree.extra[:depth])
    while extra and 1 + depth + sum(extra) > cells:
        extra[-1] -= 1
        if extra[-1] <= 0:
            extra.pop()
    cut = SpineTree(depth, tuple(extra))
    return tree if cut == tree else cut
