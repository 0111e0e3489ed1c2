"""Draft trees on the device: the exact acceptance walk over one verified tree, its rows' penalty windows.

Owns: `accept_tree` (the device rule) and `path_windows` (each row's penalty window: committed
tokens, then its path's drafts). Ignores: the shapes (tree_shape.py), how the drafts are made,
the forward that verifies them (tree rows attend to the committed cells plus their own
ancestors), committing K/V (tree_round.py).

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
from functools import lru_cache

import torch
from torch import Tensor

from .tree_shape import SpineTree, TreeShape

__all__ = ["ShapeTables", "accept_tree", "leaf_index", "path_windows", "tables"]


@dataclass(frozen=True)
class ShapeTables:
    """A shape's index tables on a device (made once: a captured program copies nothing from the host)."""

    parents: Tensor  # [N], -1 for the root
    depths: Tensor  # [N]
    ancestors: Tensor  # [N, depth + 1], -1 below a node's depth
    nodes: Tensor  # arange(N)


@lru_cache(maxsize=64)
def tables(shape: TreeShape, device: torch.device) -> ShapeTables:
    def t(x):
        return torch.tensor(x, dtype=torch.int64, device=device)

    return ShapeTables(t(shape.parents), t(shape.depths), t(shape.ancestors), t(range(shape.nodes)))


@lru_cache(maxsize=64)
def leaf_index(tree: SpineTree, device: torch.device) -> tuple[Tensor, Tensor]:
    """A spine tree's leaves as (depth - 1, rank - 1) index tensors on a device (made once)."""
    leaves = tree.leaves()
    return (torch.tensor([d - 1 for _, d, _ in leaves], dtype=torch.int64, device=device),
            torch.tensor([r - 1 for _, _, r in leaves], dtype=torch.int64, device=device))


def path_windows(tok_buf: Tensor, n: int | Tensor, tokens: Tensor, shape: TreeShape, last_n: int) -> Tensor:
    """Penalty windows [N, W] (-1 padding) of a tree's rows: row m draws the token at position
    n + depth(m) after the committed tok_buf[:n] and the drafts on the path to m, so its window is
    the last last_n tokens of that sequence (-1: all of it; 0: none, W = 0), as sampling.fused's
    window_rows cuts a chain's from tok_buf. tokens [N]: the nodes' tokens (node 0's not read);
    n: an int, or a [1] tensor on the device (W does not depend on it: capturable)."""
    c = tok_buf.shape[0]
    w = c if last_n < 0 else last_n
    dev = tokens.device
    tb = tables(shape, dev)
    pos = n + tb.depths  # [N]
    idx = pos[:, None] - w + torch.arange(w, device=dev)[None, :]  # sequence index of each entry
    anc = tb.ancestors  # [N, depth + 1]
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
    tb = tables(shape, dev)
    up = tb.parents
    parents = up.clamp(min=0)
    match = tokens == t[..., parents]  # the child holds its parent's draw
    # a sibling of the same token after the first never matches (at most one child is accepted);
    # the root (parent -1) is no one's sibling
    same = (up[:, None] == up[None, :]) & torch.ones(n, n, dtype=torch.bool, device=dev).tril(-1)
    dup = (same & (tokens[..., :, None] == tokens[..., None, :])).any(dim=-1)
    match &= ~dup
    match[..., 0].fill_(True)  # (a Python scalar assigned is a host copy: not capturable)
    acc = match
    for _ in range(shape.depth):  # accepted: the node and all its ancestors match
        acc = match & acc[..., parents]
    depths = tb.depths
    score = torch.where(acc, depths * n + (n - 1 - torch.arange(n, device=dev)), -1)  # the deepest; one a depth
    last = score.argmax(dim=-1)
    at = last.unsqueeze(-1)  # (a 0-dim index tensor is read on the host: not capturable)
    accepted = depths[at].squeeze(-1)
    anc = tb.ancestors[at].squeeze(-2)  # [..., depth + 1]
    path = tokens.gather(-1, anc[..., 1:].clamp(min=0))  # the path's drafts at depths 1..depth
    j = torch.arange(shape.depth + 1, device=dev)
    a = accepted.unsqueeze(-1)
    padded = torch.cat([path, torch.full((*path.shape[:-1], 1), -1, dtype=path.dtype, device=dev)], dim=-1)
    emitted = torch.where(j < a, padded, torch.where(j == a, t.gather(-1, last.unsqueeze(-1)), -1))
    return accepted, emitted, last
