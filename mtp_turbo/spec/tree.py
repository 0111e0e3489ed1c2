"""Draft trees: their shape, and the exact acceptance walk over one verified tree.

Owns: `TreeShape` (a fixed tree of draft nodes: node 0 is the round's pending token t0, every other
node one draft whose parent comes before it; depths, the ancestor table) and `accept_tree` (the device rule). Ignores: how the drafts are made, the forward that
verifies them (tree rows attend to the committed cells plus their own ancestors), committing K/V.

The rule (the chain rule of verify.py, generalised): t_n is the token the target draws from node
n's row with the uniform of node n's position (pos0 + depth n), exactly as plain decoding would
after the path to n. Walk from the root: at node n, if a child of n holds the token t_n, accept
that child and go on from it; else emit t_n and stop. The emitted tokens are always the target's
own draws along the path plain decoding takes, so a tree gives the same text as plain decoding for
a seed, for any drafts; acceptance at a depth is the mass of the target's distribution on the
children there instead of on one draft. Two siblings with one token would both match: the first
(lowest node index) is the one taken, the other never is.

Shape-static and sync-free: a loop over the tree's depth (a constant), gathers and compares.
Leading batch dims run many sequences through the same rule (the Monte Carlo checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

__all__ = ["TreeShape", "accept_tree", "chain_shape"]

MAX_NODES = 16  # the fused forward's verify rows


@dataclass(frozen=True)
class TreeShape:
    """parents[n] is node n's parent (parents[0] = -1: the root, the pending token t0); every
    parent index is below its child's. A chain of k drafts is parents (-1, 0, 1, .., k-1)."""

    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        p = self.parents
        if not p or p[0] != -1:
            raise ValueError("a draft tree's node 0 is its root (parent -1)")
        if len(p) > MAX_NODES:
            raise ValueError(f"a draft tree holds at most {MAX_NODES} nodes (verify rows), got {len(p)}")
        for n, q in enumerate(p[1:], 1):
            if not 0 <= q < n:
                raise ValueError(f"node {n}'s parent must be an earlier node, got {q}")

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        d = [0]
        for q in self.parents[1:]:
            d.append(d[q] + 1)
        return tuple(d)

    @property
    def depth(self) -> int:
        """The longest path's drafts (a chain of k drafts: k)."""
        return max(self.depths)

    @cached_property
    def ancestors(self) -> tuple[tuple[int, ...], ...]:
        """ancestors[n][j]: node n's ancestor at depth j (itself at its own depth), -1 below it."""
        rows = []
        for n in range(self.nodes):
            row, m = [-1] * (self.depth + 1), n
            while m >= 0:
                row[self.depths[m]] = m
                m = self.parents[m]
            rows.append(tuple(row))
        return tuple(rows)


def chain_shape(k: int) -> TreeShape:
    """The chain of k drafts as a tree."""
    return TreeShape(tuple(range(-1, k)))


def accept_tree(t: Tensor, tokens: Tensor, shape: TreeShape) -> tuple[Tensor, Tensor, Tensor]:
    """The walk from the target's draws t [..., N] at each node and the nodes' tokens [..., N]
    (tokens[..., 0], the root's, is not read). Returns (accepted [...]: the drafts accepted, the
    depth of the last accepted node; emitted [..., depth + 1]: the accepted drafts then t at the
    last accepted node, -1 after; last [...]: that node's index, whose path's K/V the round keeps).
    For a chain this is verify.accept_exact."""
    n = shape.nodes
    assert t.shape[-1] == n and tokens.shape == t.shape, "t and tokens [..., nodes]"
    dev = t.device
    up = torch.tensor(shape.parents, device=dev)
    parents = up.clamp(min=0)
    match = tokens == t[..., parents]  # the child holds its parent's draw
    # a sibling of the same token after the first never matches (at most one child is accepted);
    # the root (parent -1) is no one's sibling
    same = (up[:, None] == up[None, :]) & torch.ones(n, n, dtype=torch.bool, device=dev).tril(-1)
    dup = (same & (tokens[..., :, None] == tokens[..., None, :])).any(dim=-1)
    match &= ~dup
    match[..., 0] = True
    acc = match
    for _ in range(shape.depth):  # accepted: the node and all its ancestors match
        acc = match & acc[..., parents]
    depths = torch.tensor(shape.depths, device=dev)
    score = torch.where(acc, depths * n + (n - 1 - torch.arange(n, device=dev)), -1)  # the deepest; one a depth
    last = score.argmax(dim=-1)
    accepted = depths[last]
    anc = torch.tensor(shape.ancestors, device=dev)[last]  # [..., depth + 1]
    path = tokens.gather(-1, anc[..., 1:].clamp(min=0))  # the path's drafts at depths 1..depth
    j = torch.arange(shape.depth + 1, device=dev)
    a = accepted.unsqueeze(-1)
    padded = torch.cat([path, torch.full_like(path[..., :1], -1)], dim=-1)
    emitted = torch.where(j < a, padded, torch.where(j == a, t.gather(-1, last.unsqueeze(-1)), -1))
    return accepted, emitted, last
