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

__all__ = ["SpineTree", "TreeShape", "accept_tree", "chain_shape", "path_windows"]

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


@dataclass(frozen=True)
class SpineTree:
    """A chain of `depth` drafts (the spine: the drafter's own chain) with extra[d-1] more children
    of the spine's node at depth d-1 (leaves: its next best candidates at depth d). Nodes: the
    root, the spine 1..depth, then the leaves depth by depth. One drafter chain of `depth` steps
    makes every node (a leaf needs no step of its own); "3" is today's chain of 3 drafts, "3:2,1"
    that chain with two more candidates at depth 1 and one at depth 2."""

    depth: int
    extra: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.depth < 1 or len(self.extra) > self.depth or any(m < 0 for m in self.extra):
            raise ValueError(f"a spine tree has depth >= 1 and at most one leaf count per depth, got "
                             f"{self.depth}:{self.extra}")
        if 1 + self.depth + sum(self.extra) > MAX_NODES:
            raise ValueError(f"draft tree {self.spec}: {1 + self.depth + sum(self.extra)} nodes, at most {MAX_NODES}")

    @classmethod
    def parse(cls, spec: str) -> "SpineTree":
        """ "DEPTH" or "DEPTH:M1,M2,..": a chain of DEPTH drafts, M_d more candidates at depth d."""
        head, _, tail = spec.strip().partition(":")
        try:
            depth = int(head)
            extra = tuple(int(x) for x in tail.split(",") if x.strip()) if tail else ()
        except ValueError:
            raise ValueError(f"draft tree {spec!r}: expected DEPTH or DEPTH:M1,M2,.. (e.g. 3:2,1)") from None
        return cls(depth, extra)

    @property
    def spec(self) -> str:
        return f"{self.depth}" + (":" + ",".join(map(str, self.extra)) if self.extra else "")

    @cached_property
    def shape(self) -> TreeShape:
        parents = list(range(-1, self.depth))
        for d, m in enumerate(self.extra, 1):
            parents += [d - 1] * m
        return TreeShape(tuple(parents))

    def leaves(self) -> list[tuple[int, int, int]]:
        """(node, depth, rank among the depth's candidates: 1 = the best after the spine's)."""
        out, n = [], 1 + self.depth
        for d, m in enumerate(self.extra, 1):
            for r in range(1, m + 1):
                out.append((n, d, r))
                n += 1
        return out


def path_windows(tok_buf: Tensor, n: int, tokens: Tensor, shape: TreeShape, last_n: int) -> Tensor:
    """Penalty windows [N, W] (-1 padding) of a tree's rows: row m draws the token at position
    n + depth(m) after the committed tok_buf[:n] and the drafts on the path to m, so its window is
    the last last_n tokens of that sequence (-1: all of it; 0: none, W = 0), as sampling.fused's
    window_rows cuts a chain's from tok_buf. tokens [N]: the nodes' tokens (node 0's not read)."""
    c = tok_buf.shape[0]
    w = c if last_n < 0 else min(last_n, n + shape.depth)
    dev = tokens.device
    pos = n + torch.tensor(shape.depths, device=dev)  # [N]
    idx = pos[:, None] - w + torch.arange(w, device=dev)[None, :]  # sequence index of each entry
    anc = torch.tensor(shape.ancestors, device=dev)  # [N, depth + 1]
    step = (idx - n + 1).clamp(0, shape.depth)  # a path entry's depth
    from_path = tokens.gather(0, anc.gather(1, step).clamp(min=0).reshape(-1)).view(idx.shape)
    from_buf = tok_buf[idx.clamp(0, max(c - 1, 0))]
    win = torch.where(idx >= n, from_path, from_buf)
    return torch.where((idx >= 0) & (idx < pos[:, None]), win, -1)


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
    padded = torch.cat([path, torch.full((*path.shape[:-1], 1), -1, dtype=path.dtype, device=dev)], dim=-1)
    emitted = torch.where(j < a, padded, torch.where(j == a, t.gather(-1, last.unsqueeze(-1)), -1))
    return accepted, emitted, last
