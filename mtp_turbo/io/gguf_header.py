"""A GGUF file's header read from its bytes: metadata values and tensor infos, bounded and validated.

Owns: the bounds-checked little-endian reads (`Cursor`: every count and length bounded by the bytes
left, nesting bounded), the standard keys' kinds, the tensor table's layout as llama.cpp requires it
(known types, in declaration order, aligned, contiguous, inside the file, nothing after them), the
ggml type table, and `parse` (header bytes -> metadata, tensor infos, data offset). Raises
`Truncated` / `Corrupt`. Ignores: opening and mapping the file, its magic and version, tensor data
and hashes (gguf_file.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from . import meta_cache

DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Sanity limits: values past these are garbage, not big models (real files hold ~50 keys and at
# most a few thousand tensors). Every count is also bounded by the bytes left in the file (each
# item takes at least its smallest encoding), so a declared count never allocates past the file.
_MAX_KV = 1 << 16
_MAX_TENSORS = 1 << 20
_MAX_STRING = 1 << 30
_MAX_ARRAY = 1 << 34
# Arrays of arrays: no model file uses them (llama.cpp's reader refuses them); they are read for
# gguf-py's sake, but each inner array costs ~100 bytes of Python for its 12 bytes of file, so
# their depth and their number in a file are bounded.
_MAX_DEPTH = 3
_MAX_NESTED = 1 << 16
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # name length, dimension count, type, offset

# GGUF metadata value types -> (struct format, numpy dtype); 8 = STRING, 9 = ARRAY.
SCALAR_TYPES = {
    0: ("B", np.uint8), 1: ("b", np.int8), 2: ("H", np.uint16), 3: ("h", np.int16),
    4: ("I", np.uint32), 5: ("i", np.int32), 6: ("f", np.float32), 7: ("?", np.bool_),
    10: ("Q", np.uint64), 11: ("q", np.int64), 12: ("d", np.float64),
}
STRING_TYPE, ARRAY_TYPE = 8, 9
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# The standard keys this engine reads, by the kind of value the GGUF spec gives them: a value of
# another kind is a damaged header, said at open rather than as a TypeError deep in a reader.
# (kind: "str", "int", "float" (int accepted), "bool" (0 / 1 accepted), "ints" (an integer or a
# per-layer integer array), "strs" (array of strings), "numbers" (numeric array).)
_GENERAL_KINDS = {
    "general.architecture": "str", "general.alignment": "int", "general.quantization_version": "int",
    "general.file_type": "int", "general.name": "str",
    "tokenizer.ggml.model": "str", "tokenizer.ggml.pre": "str", "tokenizer.ggml.tokens": "strs",
    "tokenizer.ggml.scores": "numbers", "tokenizer.ggml.token_type": "numbers",
    "tokenizer.ggml.merges": "strs", "tokenizer.chat_template": "str",
    **{f"tokenizer.ggml.{w}_token_id": "int" for w in ("bos", "eos", "eot", "eom", "unknown", "padding",
                                                        "separator", "mask", "fim_pre", "fim_suf", "fim_mid")},
    **{f"tokenizer.ggml.{w}": "bool" for w in ("add_bos_token", "add_eos_token", "add_sep_token",
                                               "add_space_prefix", "remove_extra_whitespaces")},
}
_ARCH_KINDS = {  # after "{general.architecture}."
    "context_length": "int", "embedding_length": "int", "block_count": "int", "vocab_size": "int",
    "feed_forward_length": "ints", "attention.head_count": "ints", "attention.head_count_kv": "ints",
    "attention.key_length": "int", "attention.value_length": "int", "attention.sliding_window": "int",
    "attention.layer_norm_rms_epsilon": "float", "attention.layer_norm_epsilon": "float",
    "rope.dimension_count": "int", "rope.freq_base": "float", "rope.scaling.type": "str",
    "rope.scaling.factor": "float",
}
_KIND_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
               "ints": "an integer or an array of integers", "strs": "an array of strings",
               "numbers": "an array of numbers"}


def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of {v.dtype}"
    if isinstance(v, list):
        return "an array of arrays" if v and not isinstance(v[0], str) else "an array of strings"
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}.get(type(v), type(v).__name__)


def _is_kind(v: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(v, str)
    if kind in ("int", "ints") and isinstance(v, int) and not isinstance(v, bool):
        return True
    if kind == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "bool":
        return isinstance(v, bool) or (isinstance(v, int) and v in (0, 1))
    if kind == "strs":
        return isinstance(v, list) and all(isinstance(x, str) for x in v[:1])  # string arrays hold only str
    if isinstance(v, np.ndarray) and v.ndim == 1:
        return v.dtype.kind in "iu" if kind == "ints" else kind == "numbers" and v.dtype.kind in "iuf"
    return False


def _check_kinds(meta: Mapping[str, Any]) -> None:
    arch = meta.get("general.architecture")
    kinds = dict(_GENERAL_KINDS)
    if isinstance(arch, str):
        kinds.update({f"{arch}.{k}": v for k, v in _ARCH_KINDS.items()})
    for key, kind in kinds.items():
        if key in meta and not _is_kind(meta[key], kind):
            raise Corrupt(f"metadata {key} is {_describe(meta[key])}, expected {_KIND_WORDS[kind]}")


_KEEP_LIST = 4096  # a metadata table holding a string array this long (a vocabulary) is kept: io/meta_cache.py

# ggml type id -> (name, elements per block, bytes per block). A copy of gguf.GGML_QUANT_SIZES
# (tests check they agree) because importing gguf costs ~0.2 s, more than parsing the model header.
GGML_TYPES: Mapping[int, tuple[str, int, int]] = MappingProxyType({
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
})


def ggml_type_name(ggml_type: int) -> str:
    info = GGML_TYPES.get(int(ggml_type))
    return info[0] if info else f"unknown type {ggml_type}"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file. shape is torch order (GGUF ne reversed): token_embd is (vocab, hidden)."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int


class Truncated(Exception):
    """A read ran past the end of the file."""


class Corrupt(Exception):
    """A header field holds an absurd value."""


class Cursor:
    """Sequential little-endian reads over the mapped file; every read is bounds-checked."""

    def __init__(self, buf: memoryview, size: int):
        self.buf, self.size, self.pos = buf, size, 0
        self.nested_left = _MAX_NESTED  # arrays inside arrays this file may still hold

    def fits(self, count: int, item_bytes: int, what: str) -> None:
        """A declared count must fit the bytes left (each item takes at least item_bytes): checked
        before anything of that size is allocated."""
        if count * item_bytes > self.size - self.pos:
            raise Truncated(f"{what} declares {count} items, more than the {self.size - self.pos} bytes "
                            f"left at byte {self.pos} can hold")

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise Truncated(f"{what} at byte {self.pos} runs past the end of the file ({self.size} bytes)")

    def u32(self, what: str) -> int:
        self.need(4, what)
        v = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        v = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        if n > _MAX_STRING:
            raise Corrupt(f"{what} has an absurd length {n}")
        self.need(n, what)
        s = str(self.buf[self.pos:self.pos + n], "utf-8", "replace")
        self.pos += n
        return s

    def scalar(self, vtype: int, what: str) -> Any:
        fmt, _ = SCALAR_TYPES[vtype]
        size = struct.calcsize(fmt)
        self.need(size, what)
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in SCALAR_TYPES:
            return self.scalar(vtype, what)
        if vtype == STRING_TYPE:
            return self.string(what)
        if vtype == ARRAY_TYPE:
            if depth >= _MAX_DEPTH:
                raise Corrupt(f"{what} nests arrays more than {_MAX_DEPTH} deep")
            etype = self.u32(f"element type of {what}")
            count = self.u64(f"length of {what}")
            if count > _MAX_ARRAY:
                raise Corrupt(f"{what} has an absurd length {count}")
            if etype in SCALAR_TYPES:
                fmt, dtype = SCALAR_TYPES[etype]
                itemsize = np.dtype(dtype).itemsize
                self.fits(count, itemsize, what)
                arr = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                    offset=self.pos).copy()
                self.pos += count * itemsize
                return arr
            if etype == STRING_TYPE:
                self.fits(count, 8, what)
                return self.string_array(count, what)
            if etype == ARRAY_TYPE:
                self.fits(count, 12, what)
                if count > self.nested_left:
                    raise Corrupt(f"{what} holds more than {_MAX_NESTED} arrays inside arrays")
                self.nested_left -= count
                return [self.value(ARRAY_TYPE, what, depth + 1) for _ in range(count)]
            raise Corrupt(f"{what} has unknown element type {etype}")
        raise Corrupt(f"{what} has unknown value type {vtype}")

    def string_array(self, count: int, what: str) -> list[str]:
        # Hot path (262144 tokens in Gemma-3): walk the length prefixes over a bytes copy of a
        # window (slicing bytes is ~2x cheaper than slicing the memmap), then decode all pieces in
        # one call. Anything odd (window too small, NULs, bad lengths) takes the checked slow path.
        if count == 0:
            return []
        start, unpack = self.pos, _U64.unpack_from
        # the first window is sized by the count (not a fixed 1 MB: a crafted file may hold many
        # short arrays, each of which would copy the whole window)
        window = min(self.size - start, max(4096, 64 * count))
        while True:
            chunk = bytes(self.buf[start:start + window])
            parts: list[bytes] = []
            append, pos = parts.append, 0
            try:
                for _ in range(count):
                    n = unpack(chunk, pos)[0]
                    pos += 8
                    append(chunk[pos:pos + n])
                    pos += n
            except (struct.error, OverflowError):  # ran off the window (a damaged length may be ~2^64)
                pos = len(chunk) + 1
            if pos <= len(chunk):
                break
            if start + window >= self.size:
                return self._string_array_checked(count, what)
            window = min(self.size - start, window * 4)
        # joined in batches: bytes.join keeps an 80-byte buffer record per item while it runs
        step = 1 << 16
        joined = b"\0".join([b"\0".join(parts[i:i + step]) for i in range(0, count, step)])
        if joined.count(0) != count - 1:  # some item holds a NUL byte
            out = [p.decode("utf-8", "replace") for p in parts]
        else:
            del parts, append, chunk  # the pieces and the window go before the strings are made (peak memory)
            out = joined.decode("utf-8", "replace").split("\0")
        self.pos = start + pos
        return out

    def _string_array_checked(self, count: int, what: str) -> list[str]:
        """Item-by-item, with a precise error for the first bad length or the truncation point."""
        out = []
        for i in range(count):
            n = self.u64(f"length of item {i} of {what}")
            if n > _MAX_STRING:
                raise Corrupt(f"item {i} of {what} has an absurd length {n}")
            self.need(n, f"item {i} of {what}")
            out.append(str(self.buf[self.pos:self.pos + n], "utf-8", "replace"))
            self.pos += n
        return out


def layout(raw_infos: list, data_start: int, alignment: int, size: int) -> dict[str, TensorInfo]:
    """Tensor infos from (name, ne, type, relative offset) rows, checked as llama.cpp checks them
    (gguf.cpp): known types, sane shapes, and the data laid out in declaration order, each tensor
    at the aligned end of the one before (so no gaps or overlaps), all inside the file, and nothing
    after the last one: a tensor whose type or shape was changed in the header no longer fits
    this layout, where it would otherwise be read as garbage."""
    tensors: dict[str, TensorInfo] = {}
    expected, before = 0, None  # where the next tensor must start (relative to data_start), and after what
    for name, ne, ggml_type, rel in raw_infos:
        if name in tensors:
            raise Corrupt(f"duplicate tensor name {name!r}")
        if ggml_type not in GGML_TYPES:
            raise Corrupt(f"tensor {name!r} has unknown ggml type {ggml_type}")
        tname, block, type_size = GGML_TYPES[ggml_type]
        n = 1
        for d in ne:
            n *= d
        if any(d > 1 << 40 for d in ne) or n > 1 << 48:
            raise Corrupt(f"tensor {name!r} has an absurd shape {tuple(reversed(ne))}")
        if ne and ne[0] % block:
            raise Corrupt(f"tensor {name!r} row length {ne[0]} is not a multiple of the {tname} block ({block})")
        if rel % alignment:
            raise Corrupt(f"tensor {name!r} offset {rel} is not a multiple of the alignment {alignment}")
        nbytes = n // block * type_size
        offset = data_start + rel
        if offset + nbytes > size:
            raise Truncated(
                f"tensor {name!r} data [{offset}, {offset + nbytes}) runs past the end of the file ({size} bytes)")
        if rel != expected:
            where = f"the end of {before!r}" if before else "the start of the data"
            raise Corrupt(f"tensor {name!r} starts at data offset {rel}, not at {where} ({expected}): "
                          f"a type, shape or offset in the tensor table is damaged")
        expected, before = rel + -(-nbytes // alignment) * alignment, name
        tensors[name] = TensorInfo(name, ggml_type, tuple(int(d) for d in reversed(ne)), offset, nbytes)
    extra = size - (data_start + expected)
    if tensors and extra > 0:
        raise Corrupt(f"{extra} bytes follow the data of the last tensor {before!r}: a type or shape in the "
                      f"tensor table is damaged")
    return tensors


def parse(buf: memoryview, size: int, path: Path) -> tuple[dict[str, Any], dict[str, TensorInfo], int]:
    """(metadata, tensor infos by name, the data's byte offset) of the GGUF header in buf (the file's
    bytes, size of them; the version already read), every field checked. path: the metadata cache's key."""
    cur = Cursor(buf, size)
    cur.pos = 8
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    if n_tensors > _MAX_TENSORS:
        raise Corrupt(f"absurd tensor count {n_tensors}")
    if n_kv > _MAX_KV:
        raise Corrupt(f"absurd metadata count {n_kv}")
    cur.fits(n_kv, _MIN_KV_BYTES, "the metadata table")
    kept = meta_cache.load(path)
    if kept is not None and len(kept[0]) == n_kv and 0 < kept[1] <= size:
        meta, cur.pos = kept
    else:
        meta = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            if key in meta:
                raise Corrupt(f"duplicate metadata key {key!r}")
            vtype = cur.u32(f"value type of {key!r}")
            meta[key] = cur.value(vtype, f"value of {key!r}")
        if any(isinstance(v, list) and len(v) >= _KEEP_LIST for v in meta.values()):
            meta_cache.save(path, meta, cur.pos)  # a vocabulary: kept for the next open
    _check_kinds(meta)

    alignment = meta.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise Corrupt(f"general.alignment {alignment!r} is not a power of two")
    cur.fits(n_tensors, _MIN_TENSOR_BYTES, "the tensor table")
    raw_infos = []
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.u32(f"dimension count of {name!r}")
        if n_dims > GGML_MAX_DIMS:
            raise Corrupt(f"tensor {name!r} has {n_dims} dimensions (max {GGML_MAX_DIMS})")
        ne = [cur.u64(f"shape of {name!r}") for _ in range(n_dims)]
        ggml_type = cur.u32(f"type of {name!r}")
        rel = cur.u64(f"offset of {name!r}")
        raw_infos.append((name, ne, ggml_type, rel))
    data_start = -(-cur.pos // alignment) * alignment
    return meta, layout(raw_infos, data_start, alignment, size), data_start
