"""The CPU's int8 and int4 matrices kept on disk between runs.

Owns: where a model file's cache lives ($XDG_CACHE_HOME/mtp-turbo/cpu-int8/), its key (the file's
resolved path, size and modification time, this format's version), writing it atomically in the
background (then removing the model's older caches), and reading it back as Int8Linear /
Int4Linear ops mapped from the file (pages are read as the first steps touch them; not
torch.load, whose safe unpickler imports ~1 s of torch.distributed).
Ignores: how the codes are made (cpu_linear.py), which matrices a model has and where they go
(load.py names them).

Why: quantizing a model's matrices for the CPU takes ~0.8 s of a ~1.5 s load of the default model
on 2 cores, and dequantizing them from the file most of the rest; both are the same work every run
(bench/RESULTS.md session 26). A cache that is missing, damaged or of another shape is made again;
one that cannot be written costs the next load its time, never this one's answer.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import threading
from pathlib import Path

import torch

from .cpu_linear import GROUP, K_MULTIPLE, Int4Linear, Int8Linear

FORMAT = 2  # bump when the codes' meaning changes (cpu_linear.py's rounding, padding, scales, packing)
MAGIC = b"MTPINT8\x01"
ALIGN = 64


def cache_root() -> Path:
    """Read at each call (not import time): XDG_CACHE_HOME set later, as tests do, is honoured."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp-turbo" / "cpu-int8"


def cache_file(model_path: str | Path, variant: str = "int8") -> Path:
    """The cache of this model file: a name from its stem and a key of what identifies its bytes and
    which ops it holds (variant: "int8", or "int4" where 4-bit file blocks stay 4-bit)."""
    p = Path(model_path).resolve()
    st = p.stat()
    key = hashlib.sha256(f"{p}|{st.st_size}|{st.st_mtime_ns}|{FORMAT}|{variant}".encode()).hexdigest()[:16]
    return cache_root() / f"{p.stem}-{key}.bin"


def load(path: Path, shapes: dict[str, tuple[int, int]]) -> dict[str, Int8Linear | Int4Linear] | None:
    """The ops named in `shapes` ([N, K] each) from `path`, mapped (copy-on-write: nothing is read
    until used), or None when it is missing, cut short or holds anything else (then the caller
    quantizes and saves again)."""
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        if mm[:8] != MAGIC:
            return None
        n_head = int.from_bytes(mm[8:16], "little")
        header = json.loads(mm[16: 16 + n_head])
        base = _aligned(16 + n_head)
        ops = {}
        for name, (n, k) in shapes.items():
            entry = header[name]
            if entry.get("kind") == "int4":
                ops[name] = _int4(mm, base, entry, n, k)
                continue
            kp = k + (-k % K_MULTIPLE)
            if entry["k"] != k or entry["q"][1] != [n, kp] or entry["scale"][1] != [n]:
                return None
            (q_at, _), (s_at, _) = entry["q"], entry["scale"]
            if base + s_at + 2 * n > len(mm) or base + q_at + n * kp > len(mm):
                return None
            q = torch.frombuffer(mm, dtype=torch.int8, count=n * kp, offset=base + q_at).view(n, kp)
            scale = torch.frombuffer(mm, dtype=torch.int16, count=n, offset=base + s_at).view(torch.bfloat16)
            ops[name] = Int8Linear.from_codes(q, scale, k)
        return ops
    except (OSError, ValueError, KeyError, TypeError, IndexError):  # a cache miss, not an error
        return None


def save_in_background(path: Path, ops: dict[str, Int8Linear | Int4Linear]) -> threading.Thread:
    """Write `ops` to `path` atomically (a temporary file renamed over it) on a thread the process
    waits for at exit, so the load that made them returns at once. Layout: MAGIC, the header's
    length (8 bytes, little-endian), the header (JSON: per op its K and the byte offsets and shapes
    of its codes and scales), then the arrays, each at a 64-byte boundary."""
    header, parts, at = {}, [], 0
    for name, op in ops.items():
        entry = {"k": op.k}
        if isinstance(op, Int4Linear):
            entry.update(kind="int4", n=op.n)
            arrays = (("packed", op.packed), ("sz", op.sz.view(torch.int16)))
        else:
            arrays = (("q", op.q), ("scale", op.scale.view(torch.int16)))
        for key, t in arrays:
            entry[key] = [at, list(t.shape)]
            parts.append((at, t))
            at = _aligned(at + t.numel() * t.element_size())
        header[name] = entry
    head = json.dumps(header).encode()

    def write() -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(MAGIC + len(head).to_bytes(8, "little") + head)
                base = _aligned(f.tell())
                for off, t in parts:
                    f.seek(base + off)
                    f.write(t.contiguous().numpy().tobytes())
            os.replace(tmp, path)
            _drop_older(path)
        except OSError:
            tmp.unlink(missing_ok=True)

    th = threading.Thread(target=write, name="mtp-turbo-cpu-cache")
    th.start()
    return th


def _drop_older(path: Path) -> None:
    """Remove this model's other caches (an older file, format or variant: each is about the model's
    size, and nothing reads them again); a process still mapping one keeps its pages."""
    stem = path.name.rsplit("-", 1)[0]
    for old in path.parent.glob(f"{stem}-*.bin"):
        if old != path and old.name.rsplit("-", 1)[0] == stem:
            old.unlink(missing_ok=True)


def _int4(mm, base: int, entry: dict, n: int, k: int) -> Int4Linear:
    """An Int4Linear mapped from the cache (ValueError where its arrays do not fit [n, k])."""
    (p_at, p_shape), (s_at, s_shape) = entry["packed"], entry["sz"]
    if entry["k"] != k or entry["n"] != n or s_shape != [k // GROUP, n, 2] or len(p_shape) != 2 or p_shape[0] != n:
        raise ValueError(f"int4 entry of another shape than [{n}, {k}]")
    count = p_shape[0] * p_shape[1]
    if base + p_at + count > len(mm) or base + s_at + 2 * k // GROUP * n * 2 > len(mm):
        raise ValueError("int4 entry past the file's end")
    packed = torch.frombuffer(mm, dtype=torch.uint8, count=count, offset=base + p_at).view(*p_shape)
    sz = torch.frombuffer(mm, dtype=torch.int16, count=k // GROUP * n * 2, offset=base + s_at)
    return Int4Linear.from_codes(packed, sz.view(torch.bfloat16).view(k // GROUP, n, 2), n, k)


def _aligned(n: int) -> int:
    return n + (-n % ALIGN)
