"""Session files: a conversation's committed tokens and their K/V, written safely and read back checked.

Owns: the file format (version 2), writing it atomically (a failed save keeps the previous file),
and reading it back with every header field checked, and the K/V sizes checked against the cache
that will take them, before anything of the K/V's size is allocated; then a SHA-256 over header
and K/V catches damage anywhere else. Every problem is one CacheError line naming the file.
Ignores: where the K/V live and how they are restored (cache/kv.py), what the identity holds and
what `extra` carries (engine.py: the pending token), the drafter's cache (never saved).

Format v2, little-endian:
    b"MTPSESS2" | u32 header length | 32-byte SHA-256 of (header + K + V) | JSON header | K | V
    header: {"identity": {...}, "tokens": [int], "shape": [layers, n, kv heads, head dim],
             "dtype": "float32" | "bfloat16" | "float16", "extra": {...}}
    K, V: the cache's rows [layers, n, kv heads, head dim] in `dtype`, raw and row-major.
Version 1 files (b"MTPSESS1": a torch.save blob after the header, unchecked) are refused with a
message saying so: they cannot be verified, and a session is cheap to make again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ..errors import CacheError

MAGIC = b"MTPSESS2"
OLD_MAGICS = {b"MTPSESS1": 1}
_PRELUDE = struct.Struct("<8sI32s")  # magic, header length, SHA-256
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# JSON of a token id takes at most 12 bytes ("4294967295, "); identity and extra are small
_HEADER_SLACK = 1 << 16


@dataclass(frozen=True)
class Session:
    """A session file's checked contents: K/V on the CPU, shaped [layers, n, kv heads, head dim]."""

    tokens: list[int]
    extra: dict
    k: torch.Tensor
    v: torch.Tensor


def _bytes_of(t: torch.Tensor) -> memoryview:
    """A CPU tensor's raw bytes without a copy (bf16 has no numpy dtype: viewed as uint8 first)."""
    return memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def _write_chunks(f: BinaryIO, chunks: list) -> None:
    """Every chunk to f (its own function: the tests make it fail partway, as a full disk does)."""
    for c in chunks:
        f.write(c)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; folders that cannot be opened or synced (some platforms and
    file systems) keep what the rename gave."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike[str], chunks: list) -> None:
    """Write `chunks` to `path` through a temporary file in the same folder, flushed and fsynced,
    then renamed over it: a reader sees the old file or the new one, never a cut one. On any
    failure the temporary file goes and the old file stays. The old file's permissions are kept."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path  # replace the file a link names, not the link
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise CacheError(f"cannot save session file {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            _write_chunks(f, chunks)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # no old file, or a file system without modes
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            kept = " (the previous file is kept)" if target.is_file() else ""
            raise CacheError(f"cannot save session file {path}: {e.strerror or e}{kept}") from None
        raise
    _fsync_dir(target.parent)


def write_session(path: str | os.PathLike[str], identity: dict, tokens: list[int], extra: dict,
                  k: torch.Tensor, v: torch.Tensor) -> None:
    """Save tokens and their K/V (CPU tensors [layers, n, kv heads, head dim]) atomically."""
    dtype = str(k.dtype).removeprefix("torch.")
    if dtype not in DTYPES or k.shape != v.shape or k.dtype != v.dtype or k.dim() != 4 or k.shape[1] != len(tokens):
        raise CacheError(f"cannot save a session of K/V {tuple(k.shape)} {k.dtype} for {len(tokens)} tokens")
    header = {"identity": identity, "tokens": [int(t) for t in tokens], "shape": list(k.shape), "dtype": dtype,
              "extra": extra}
    hb = json.dumps(header, allow_nan=False).encode()
    kb, vb = _bytes_of(k.cpu()), _bytes_of(v.cpu())
    digest = hashlib.sha256(hb)
    digest.update(kb)
    digest.update(vb)
    atomic_write(path, [_PRELUDE.pack(MAGIC, len(hb), digest.digest()), hb, kb, vb])


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(x), type(x).__name__)


def _corrupt(path, problem: str) -> CacheError:
    return CacheError(f"session file {path} is corrupt: {problem}")


def _check_header(path, h: Any, identity: dict, layout: tuple[int, int, int, int],
                  vocab_size: int | None) -> tuple[list[int], dict, torch.dtype, tuple[int, ...]]:
    """The header's fields, each of the right type and range, or a CacheError saying which is not."""

    def bad(problem: str) -> CacheError:
        return _corrupt(path, problem)

    if not isinstance(h, dict):
        raise bad(f"the header is {_kind(h)}, not an object")
    for key, kind in (("identity", dict), ("tokens", list), ("shape", list), ("dtype", str), ("extra", dict)):
        if key not in h:
            raise bad(f"the header lacks {key!r}")
        if not isinstance(h[key], kind):
            raise bad(f"header field {key!r} is {_kind(h[key])}, expected {_kind(kind())}")
    if h["identity"] != identity:
        raise CacheError(f"session file {path} was made with another model or settings "
                         f"({h['identity']} != {identity})")
    tokens, shape = h["tokens"], h["shape"]
    for i, t in enumerate(tokens):
        if not _is_int(t):
            raise bad(f"token #{i} is {_kind(t)}, not a token id")
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            raise bad(f"token #{i} = {t} is outside the vocabulary [0, {vocab_size if vocab_size is not None else ''})")
    if h["dtype"] not in DTYPES:
        raise bad(f"K/V dtype {h['dtype']!r} is not one of {', '.join(DTYPES)}")
    layers, capacity, kv_heads, head_dim = layout
    n = len(tokens)
    if n > capacity:
        raise CacheError(f"session file {path} holds {n} tokens, more than the context ({capacity})")
    want = [layers, n, kv_heads, head_dim]
    if len(shape) != 4 or not all(_is_int(x) for x in shape) or shape != want:
        raise bad(f"K/V shape {shape} does not match {n} tokens of this model's cache {want}")
    return tokens, h["extra"], DTYPES[h["dtype"]], tuple(want)


def _read_exactly(f: BinaryIO, n: int) -> torch.Tensor:
    out = torch.empty(n, dtype=torch.uint8)
    got = f.readinto(memoryview(out.numpy())) if n else 0
    if got != n:
        raise EOFError
    return out


def read_session(path: str | os.PathLike[str], identity: dict, layout: tuple[int, int, int, int],
                 vocab_size: int | None = None) -> Session:
    """A session file's checked contents. layout: the cache (layers, capacity, kv heads, head
    dim) that will take it; vocab_size: token ids must lie below it. Nothing is allocated past the
    header until its sizes agree with the layout and with the file's size."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CacheError(f"cannot read session file {path}: {e.strerror or e}") from None
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_PRELUDE.size)
            if head[:8] in OLD_MAGICS:
                raise CacheError(f"session file {path} is of format version {OLD_MAGICS[head[:8]]} (an older "
                                 f"mtp-turbo); this version reads version 2 only: delete it and a new one is saved")
            if head[:8] != MAGIC:
                raise CacheError(f"{path} is not an mtp-turbo session file")
            if len(head) < _PRELUDE.size:
                raise CacheError(f"session file {path} is corrupt or truncated: it ends inside its header")
            _, hl, digest = _PRELUDE.unpack(head)
            if hl > size - _PRELUDE.size or hl > _HEADER_SLACK + 12 * layout[1]:
                raise CacheError(f"session file {path} is corrupt or truncated: header length {hl} "
                                 f"in a file of {size} bytes")
            hb = f.read(hl)
            try:
                header = json.loads(hb)
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
                why = (str(e).splitlines() or [type(e).__name__])[0][:80]
                raise _corrupt(path, f"its header is not JSON ({why})") from None
            tokens, extra, dtype, shape = _check_header(path, header, identity, layout, vocab_size)
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if size != _PRELUDE.size + hl + 2 * nbytes:
                raise CacheError(f"session file {path} is corrupt or truncated: {len(tokens)} tokens of K/V take "
                                 f"{2 * nbytes} bytes, the file holds {size - _PRELUDE.size - hl} after its header")
            k, v = _read_exactly(f, nbytes), _read_exactly(f, nbytes)
        except EOFError:
            raise CacheError(f"session file {path} is corrupt or truncated: it ended while being read") from None
        except OSError as e:
            raise CacheError(f"cannot read session file {path}: {e.strerror or e}") from None
    check = hashlib.sha256(hb)
    check.update(memoryview(k.numpy()))
    check.update(memoryview(v.numpy()))
    if check.digest() != digest:
        raise _corrupt(path, "its checksum does not match its contents (the file was damaged after it was saved)")
    return Session(tokens, extra, k.view(dtype).reshape(shape), v.view(dtype).reshape(shape))
