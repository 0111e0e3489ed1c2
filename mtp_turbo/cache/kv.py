"""Static KV cache of the main model, indexed by absolute position (cell c = position c).

Owns: the preallocated K/V tensors, the committed length, rollback, checkpoints, and saving /
restoring the committed cells as a session (tokens + K/V + model identity). Ignores: the model's
math (models/ writes rows through `write`), the session file's format and checks (cache/session.py),
the drafter's own cache (cache/cells.py keeps its bookkeeping).

Rolling back only moves the length: cells past it are stale and are overwritten before any
attention reads them, because a forward writes its rows before attending and reads no cell past
its own query position.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CacheError
from .session import Session, read_session, write_session


@dataclass(frozen=True)
class Checkpoint:
    """A remembered prefix length; restoring it is a rollback to that length."""

    length: int


class KVCache:
    def __init__(self, n_layers: int, capacity: int, n_kv_heads: int, head_dim: int, device, dtype):
        assert capacity >= 1
        self.capacity = capacity
        shape = (n_layers, capacity, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # committed cells [0, length)
        self.cell_ids = torch.arange(capacity, device=device)  # [capacity], for reads of every cell

    def write(self, layer: int, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v [T, Hkv, Dh] at cells pos [T]. Capturable (no host sync)."""
        # index_put_ (as gpt-fast) so the compiler updates the cache in place
        self.k[layer].index_put_((pos,), k.to(self.k.dtype))
        self.v[layer].index_put_((pos,), v.to(self.v.dtype))

    def move_cells(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Every layer's K/V of cells src [A] copied to cells dst [A] (a draft tree's accepted path to
        its positions). Each dst is at most its src and no src is an earlier dst, so one gather then
        one scatter is the same as copying in order. Capturable."""
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]

    # ---- length bookkeeping ------------------------------------------------------------------
    def commit(self, n: int) -> None:
        """Cells [length, n) now hold committed K/V (written by a forward)."""
        if not (self.length <= n <= self.capacity):
            raise CacheError(f"commit to {n} outside [{self.length}, {self.capacity}]")
        self.length = n

    def rollback(self, n: int) -> None:
        """Keep the first n cells. O(1): only the length moves."""
        if not (0 <= n <= self.length):
            raise CacheError(f"cannot roll back to length {n}: only {self.length} cells are kept")
        self.length = n

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.length)

    def restore(self, cp: Checkpoint) -> None:
        """Back to a checkpoint's prefix. The cells must not have been overwritten since: a
        restore past the current length cannot be honoured."""
        if cp.length > self.length:
            raise CacheError(
                f"checkpoint at length {cp.length} is past the current length {self.length}; "
                "its cells may have been overwritten"
            )
        self.rollback(cp.length)

    def reset(self) -> None:
        self.length = 0

    # ---- sessions (the file format: cache/session.py) ------------------------------------------
    def save_session(self, path: str | Path, tokens: list[int], identity: dict, extra: dict | None = None) -> None:
        """Save the committed cells and their tokens atomically (a failed write keeps the old file)."""
        n = self.length
        if len(tokens) != n:
            raise CacheError(f"session tokens ({len(tokens)}) do not match the cache length ({n})")
        write_session(path, identity, tokens, extra or {}, self.k[:, :n].cpu(), self.v[:, :n].cpu())

    def read_session(self, path: str | Path, identity: dict, vocab_size: int | None = None) -> Session:
        """A session file checked against this cache (shape, room) and identity; the cache is not
        touched, so a refused file leaves the current session as it was."""
        layers, capacity, kv_heads, head_dim = self.k.shape
        return read_session(path, identity, (layers, capacity, kv_heads, head_dim), vocab_size)

    def restore_session(self, s: Session) -> None:
        """Make a checked session's K/V the committed cells."""
        n = len(s.tokens)
        self.k[:, :n].copy_(s.k.to(self.k.dtype))
        self.v[:, :n].copy_(s.v.to(self.v.dtype))
        self.length = n

    def load_session(self, path: str | Path, identity: dict, vocab_size: int | None = None) -> tuple[list[int], dict]:
        """read_session then restore_session. Returns (tokens, extra)."""
        s = self.read_session(path, identity, vocab_size)
        self.restore_session(s)
        return s.tokens, s.extra
