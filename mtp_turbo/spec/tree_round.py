"""Draft-tree rounds: the drafter's spine tree, one verify forward of all its nodes, the target's
draw at every node, the exact walk (tree.accept_tree), the accepted path's K/V moved into place.

Owns: `TreeRound` (one round's work, eager: a host read per round) and `tree_tokens` (the loop of
tree rounds, as round.speculative_tokens is for chains, with the same RoundStats: per depth).
Ignores: the tree rule and the shapes (tree.py), how the target forwards a tree (the engine and
models/decoder.forward_tree), how the drafter ranks its candidates (drafters/mtp.py).

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

import time
from typing import Iterator

import torch

from ..errors import MtpTurboError
from ..models.greedy import GreedyPick
from ..sampling.config import SamplerConfig
from ..sampling.fused import sample_rows, sampler_values
from .drafters.base import Drafter
from .round import RoundStats, drafter_sampler
from .target import Target
from .tree import accept_tree, path_windows
from .tree_shape import SpineTree, TreeShape

ROOT = TreeShape((-1,))  # a plain step: the pending token's row alone


class TreeRound:
    """One target + sampler + drafter. run(tree) -> (accepted, emitted tokens)."""

    def __init__(self, target: Target, sampler: SamplerConfig, drafter: Drafter, vocab: int | None = None):
        self.target, self.sampler, self.drafter, self.vocab = target, sampler, drafter, vocab
        self.pick = GreedyPick()  # the temp-0 token of each row without penalties, as plain steps pick it
        # the sampler's values where the draw kernels read them (as RoundProgram keeps them)
        self.params = torch.tensor(sampler_values(sampler), dtype=torch.int64, device=target.device)

    @torch.inference_mode()
    def run(self, tree: SpineTree | None) -> tuple[int, list[int]]:
        """A round of `tree`'s drafts after the committed tokens (None, or nothing drafted: a plain
        step). Commits nothing: the caller commits `emitted` (tok_buf holds it already)."""
        tg = self.target
        n = len(tg.tokens)
        drafts = self.drafter.propose_tree(tg.tokens, tree) if tree is not None else None
        shape = tree.shape if drafts is not None else ROOT
        dev = tg.device
        toks = torch.tensor([tg.tokens[-1]] + (drafts or []), dtype=torch.int64, device=dev)
        logits, hidden = tg.forward_tree(toks, shape)
        t = self._draw(logits, toks, shape, n)
        acc, emitted, last = accept_tree(t, toks, shape)
        a = int(acc)  # the round's host read
        out = emitted[: a + 1]
        path = [m for m in shape.ancestors[int(last)] if m >= 0]  # nodes at depths 0..a
        cells = torch.tensor(path, dtype=torch.int64, device=dev)
        moved = [d for d in range(a + 1) if path[d] != d]
        if moved:
            tg.move_cells(n - 1 + cells[moved], n - 1 + torch.tensor(moved, dtype=torch.int64, device=dev))
        tg.tok_buf[n: n + a + 1] = out
        if self.drafter.reads_hidden:
            self.drafter.store_hidden_rows(torch.arange(n - 1, n + a, device=dev), hidden[cells])
        return a, out.tolist()

    def _draw(self, logits: torch.Tensor, toks: torch.Tensor, shape: TreeShape, n: int) -> torch.Tensor:
        """The target's token at each node: row m's at position n + depth(m), after the path to m."""
        s = self.sampler
        if self.vocab is not None and not bool(torch.stack(torch.aminmax(logits)).isfinite().all()):
            raise MtpTurboError(f"no token could be drawn after position {n}: the model's logits are not "
                                "finite (NaN or infinite; a damaged model file?)")
        if s.greedy and not s.uses_penalties:
            return self.pick(logits)
        pos = n + torch.tensor(shape.depths, dtype=torch.int64, device=logits.device)
        windows = path_windows(self.target.tok_buf, n, toks, shape, s.penalty_last_n)
        return sample_rows(logits, windows, None, s, pos=pos, params=self.params)


def tree_tokens(target: Target, sampler: SamplerConfig, spec, tree: SpineTree, budget: int, drafter: Drafter,
                stats: RoundStats, vocab: int | None = None) -> Iterator[list[int]]:
    """Yield the tokens each tree round emits (accepted drafts + the target's draw after them).
    Near the budget or the context's end a round drafts a shallower tree (none: a plain step)."""
    drafter.set_sampler(drafter_sampler(sampler, spec), coupling=spec.draft_coupling)
    drafter.begin(target.tokens)
    rnd = TreeRound(target, sampler, drafter, vocab)
    produced = 0
    while produced < budget:
        t0 = time.perf_counter()
        n = len(target.tokens)
        room = min(budget - produced - 1, target.ctx_size - n)  # drafts that fit both limits
        t = fit(tree, room, target.ctx_size - n + 1)
        a, emitted = rnd.run(t)
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
