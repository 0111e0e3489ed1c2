"""Draft trees' shapes: which node hangs under which (no torch: the CLI and the configs read them).

Owns: `TreeShape` (a fixed tree of draft nodes: node 0 is the round's pending token t0, every other
node one draft whose parent comes before it; depths, the ancestor table), `chain_shape`, and
`SpineTree` (the trees the MTP drafter makes: its chain plus next-best leaves, and their spec
strings). Ignores: the device rules over a verified tree (tree.py), how drafts are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

__all__ = ["MAX_NODES", "SpineTree", "TreeShape", "chain_shape"]

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
