"""What a speculative round needs of the model it verifies against; the engine implements it.

Owns: the `Target` protocol. Ignores: how the target computes (models/, engine.py).

Convention (the engine's state between rounds): `tokens` is the committed sequence; the main
model's cache holds K/V of every committed token but the last (the pending one, fed by the next
forward); `tok_buf` is the device copy of the sequence, [:len(tokens)] committed, and a round may
write its drafts right after it, where the next forward reads them.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ..sampling.config import SamplerConfig


class Target(Protocol):
    device: torch.device
    ctx_size: int  # cells of the main model's cache
    tokens: list[int]  # the committed sequence (host copy)
    tok_buf: torch.Tensor  # [>= ctx_size] int64 on `device`: [:len(tokens)] = tokens, then drafts

    def forward(self, n_rows: int, pad_to: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward rows tok_buf[n-1 : n-1+n_rows] (the pending token, then drafts) at positions
        n-1.., n = len(tokens), without committing them -> (logits [n_rows, V] fp32, hidden
        [n_rows, D]). pad_to: run at least this many rows (a captured step of one shape)."""
        ...

    def forward_body(self, tokens: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same forward as device work only, for a round's CUDA graph: tokens [T] at the
        consecutive device positions pos [T] -> (logits, hidden); no host sync, no commit."""
        ...

    def forward_tree(self, tokens: torch.Tensor, shape, p0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A draft tree's rows (spec/tree_shape.TreeShape; tokens [N], node 0 the pending token) at
        positions p0 + depth, node m's K/V in cell p0 + m (p0 = n-1, [1] on the device), without
        committing -> (logits [N, V] fp32, hidden [N, D]); each row a one-row step's after the
        path to it. Device work only where the target captures it (no host sync)."""
        ...

    def move_cells(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """The main cache's K/V of cells src [A] into cells dst [A]."""
        ...

    def sample_next(self, logits: torch.Tensor, sampler: SamplerConfig) -> torch.Tensor:
        """The token at position len(tokens) from logits [1, V], history tok_buf[:len(tokens)] -> [1]."""
        ...

    def commit(self, new: list[int], accepted: int, on_device: bool = False) -> None:
        """Append `new` (the accepted drafts, then one sampled token) to the committed sequence;
        the forward's first 1 + accepted rows hold their K/V. on_device: tok_buf holds `new` already."""
        ...

    def rollback(self, n: int) -> None:
        """Keep the first n committed tokens."""
        ...
