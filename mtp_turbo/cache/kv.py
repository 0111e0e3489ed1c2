"""Static KV cache of the main model, indexed by absolute position (cell c = position c).

Owns: the preallocated K/V tensors, the committed length, rollback, checkpoints, and session files
(tokens + K/V + model identity). Ignores: the model's math (models/ writes rows through `write`),
the drafter's own cache (cache/cells.py keeps its bookkeeping).

Rolling back only moves the length: cells past it are stale and are overwritten before any
attention reads them, because a forward writes its rows before attending and reads no cell past
its own query position.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CacheError

SESSION_MAGIC = b"MTPSESS1"


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

    # ---- sessions ----------------------------------------------------------------------------
    def save_session(self, path: str | Path, tokens: list[int], identity: dict, extra: dict | None = None) -> None:
        """File: magic, u32 header length, JSON header (identity, tokens, shapes), raw K/V."""
        n = self.length
        if len(tokens) != n:
            raise CacheError(f"session tokens ({len(tokens)}) do not match the cache length ({n})")
        k = self.k[:, :n].contiguous().cpu()
        v = self.v[:, :n].contiguous().cpu()
        header = {
            "identity": identity,
            "tokens": list(map(int, tokens)),
            "shape": list(k.shape),
            "dtype": str(k.dtype).removeprefix("torch."),
            "extra": extra or {},
        }
        hb = json.dumps(header).encode()
        buf = io.BytesIO()
        torch.save({"k": k, "v": v}, buf)
        with open(path, "wb") as f:
            f.write(SESSION_MAGIC + struct.pack("<I", len(hb)) + hb)
            f.write(buf.getvalue())

    def load_session(self, path: str | Path, identity: dict) -> tuple[list[int], dict]:
        """Restore tokens + K/V; refuse a file of another model or a damaged one.
        Returns (tokens, extra)."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise CacheError(f"cannot read session file {path}: {e.strerror}") from None
        if data[:8] != SESSION_MAGIC or len(data) < 12:
            raise CacheError(f"{path} is not an mtp-turbo session file")
        (hl,) = struct.unpack("<I", data[8:12])
        try:
            header = json.loads(data[12 : 12 + hl])
            tensors = torch.load(io.BytesIO(data[12 + hl :]), map_location="cpu", weights_only=True)
            k, v = tensors["k"], tensors["v"]
        except Exception:
            raise CacheError(f"session file {path} is corrupt or truncated") from None
        if header.get("identity") != identity:
            raise CacheError(
                f"session file {path} was made with another model or settings "
                f"({header.get('identity')} != {identity})"
            )
        tokens = header.get("tokens")
        if not isinstance(tokens, list):
            raise CacheError(f"session file {path} is corrupt (no token list)")
        n = len(tokens)
        want = (self.k.shape[0], n, self.k.shape[2], self.k.shape[3])
        if tuple(k.shape) != want or tuple(v.shape) != want:
            raise CacheError(f"session file {path} has K/V of shape {tuple(k.shape)}, expected {want}")
        if n > self.capacity:
            raise CacheError(f"session of {n} tokens does not fit the context ({self.capacity})")
        self.k[:, :n].copy_(k.to(self.k.dtype))
        self.v[:, :n].copy_(v.to(self.v.dtype))
        self.length = n
        return tokens, header.get("extra", {})
