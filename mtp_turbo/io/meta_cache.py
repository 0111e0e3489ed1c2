"""A GGUF file's parsed metadata kept on disk between runs.

Owns: turning a parsed metadata table (gguf_file.GGUFFile's: str, int, float, bool, numeric numpy
arrays, lists of str) and the offset where the file's tensor table starts into bytes and back, and
where they live (the user's cache beside the tokenizers, keyed by the file's path, size and
modification time: io/spm.cache_file). Ignores: parsing the file (gguf_file.py), what the keys mean.

Why: the metadata holds the vocabulary, whose strings are walked one by one in Python: Gemma-3's
262144 pieces took 0.10-0.14 s of a ~1.5 s one-shot CPU start on 2 cores (bench/RESULTS.md
session 31); unmarshalling them takes a few ms. A table with arrays of arrays is not kept (no file
the engine reads has one). marshal only rebuilds data (no code runs); a cache that does not load
or has another shape is a miss, and the file is parsed again.
"""

from __future__ import annotations

import marshal
from typing import Any

import numpy as np

from .spm import cache_file, write_cache

FORMAT = 1  # bump when what is stored changes


def _where(path) -> str:
    return cache_file(path, suffix=".meta", version=FORMAT)


def save(path, meta: dict[str, Any], tensors_at: int) -> None:
    """Keep `meta` and the tensor table's offset for the file at `path` (failures ignored)."""
    items = []
    for k, v in meta.items():
        if isinstance(v, np.ndarray):
            items.append((k, "a", (v.dtype.str, v.tobytes())))
        elif isinstance(v, list):
            if not all(isinstance(s, str) for s in v):
                return  # arrays of arrays: parsed each time
            items.append((k, "l", v))
        else:
            items.append((k, "v", v))
    try:
        write_cache(_where(path), marshal.dumps((FORMAT, tensors_at, items)))
    except (OSError, ValueError):
        pass


def load(path) -> tuple[dict[str, Any], int] | None:
    """(metadata, the tensor table's offset) kept for the file at `path`, or None."""
    try:
        with open(_where(path), "rb") as f:
            fmt, tensors_at, items = marshal.loads(f.read())
        if fmt != FORMAT or not isinstance(tensors_at, int):
            return None
        meta: dict[str, Any] = {}
        for k, kind, v in items:
            if kind == "a":
                v = np.frombuffer(v[1], dtype=np.dtype(v[0])).copy()
            elif kind == "l" and not isinstance(v, list):
                return None
            meta[k] = v
        return meta, tensors_at
    except (OSError, EOFError, ValueError, TypeError):
        return None
