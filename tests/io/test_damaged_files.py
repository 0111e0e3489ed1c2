"""Damaged model files and session files: each one is refused with one line of the project's error
type (ModelFileError / CacheError), never a traceback, never a run with garbage, in bounded memory,
and a failed save never loses the previous session file (issue 40).

The corpus is made here from a tiny llama-family model (2 layers, hidden 64, Q8_0 matrices, F32
norms and embedding, a 261-token byte-level vocabulary), written with the gguf package's writer:
truncations, flipped header bytes, every size / norm / RoPE key set to bad values, tensor types,
shapes and offsets changed in the tensor table, NaN / inf weights, crafted headers (nested arrays,
huge counts and lengths); sessions cut, retyped field by field (with a valid checksum, so that the
schema is what is tested), with a bad checksum, of another model, out of the vocabulary or the
context, and saves that fail partway. A few cases go through the command line in a subprocess.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import gguf
from mtp_turbo.errors import CacheError, ModelFileError, MtpTurboError
from mtp_turbo.io.bpe import byte_alphabet
from mtp_turbo.io.gguf_file import GGUFFile
from mtp_turbo.io.gguf_write import write_gguf
from mtp_turbo.io.tokenizer import GGUFTokenizer
from mtp_turbo.models.arch import ModelConfig, Rope, tensor_shapes
from mtp_turbo.models.load import load_model

REPO = Path(__file__).resolve().parents[2]
Q8_0, F32 = 8, 0
V, D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 261, 64, 2, 4, 2, 16, 96

META = {
    "llama.block_count": LAYERS, "llama.embedding_length": D, "llama.feed_forward_length": FFN,
    "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS, "llama.context_length": 128,
    "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
    "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
    "tokenizer.ggml.tokens": [*byte_alphabet(), "Ġt", "he", "Ġthe", "<|end|>", "<think>"],
    "tokenizer.ggml.token_type": [1] * 259 + [3, 4], "tokenizer.ggml.merges": ["Ġ t", "h e", "Ġt he"],
    "tokenizer.ggml.eos_token_id": 259,
}


def _tensors() -> dict:
    cfg = ModelConfig(family="llama", vocab_size=V, hidden=D, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV_HEADS,
                      head_dim=HEAD_DIM, ffn=FFN, eps=1e-5, rope_global=Rope(1e4), rope_local=Rope(1e4),
                      sliding_window=0, sliding_pattern=0, query_scale=HEAD_DIM**-0.5, context_length=128)
    rng = np.random.default_rng(0)
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        norm = name.endswith("norm.weight")
        a = (1.0 + 0.1 * rng.standard_normal(shape) if norm else 0.05 * rng.standard_normal(shape)).astype(np.float32)
        if len(shape) == 2 and name != "token_embd.weight":
            out[name] = (gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0).ravel(), Q8_0, shape)
        else:
            out[name] = (a.view(np.uint8).ravel(), F32, shape)
    return out


TENSORS = _tensors()


def _s(text: str) -> bytes:
    """A GGUF string: u64 length, UTF-8 bytes."""
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def write_tiny(path: Path, meta: dict | None = None, drop=(), **tensor_over) -> Path:
    md = {k: v for k, v in {**META, **(meta or {})}.items() if v is not None and k not in drop}
    write_gguf(path, "llama", md, {**TENSORS, **tensor_over})
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, bytes]:
    path = write_tiny(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    return path, path.read_bytes()


def open_and_load(path: Path) -> None:
    """What a start does with a model file: the header, the config, the weights, the tokenizer."""
    gf = GGUFFile(path)
    load_model(gf, torch.device("cpu"), progress=False, max_positions=64)
    GGUFTokenizer(gf)


def refused(path: Path, cls=ModelFileError) -> str:
    """The one-line message a damaged file is refused with (any other exception fails the test)."""
    with pytest.raises(MtpTurboError) as e:
        open_and_load(path)
    msg = str(e.value)
    assert isinstance(e.value, cls), (type(e.value), msg)
    assert "\n" not in msg and path.name in msg, msg
    return msg


def test_the_tiny_model_loads_and_runs(tiny):
    open_and_load(tiny[0])  # the corpus below damages a file that is good


# ---- truncations and flipped header bytes ------------------------------------------------------------
@pytest.mark.parametrize("frac", [0.0005, 0.003, 0.01, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 0.999])
def test_truncated(tmp_path, tiny, frac):
    _, data = tiny
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:max(9, int(len(data) * frac))])
    msg = refused(p)
    assert "truncated" in msg, msg


def test_flipped_header_bytes(tmp_path, tiny):
    """A flipped byte anywhere in the header is refused or harmless (inside a string, say): never
    another exception. Most flips land in lengths, types, counts and shapes and must be refused."""
    path, data = tiny
    end = GGUFFile(path).data_offset
    rng = np.random.default_rng(40)
    spots = sorted(set(rng.integers(8, end, 60).tolist()))
    n_refused = 0
    for i, pos in enumerate(spots):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        p = tmp_path / f"flip{i}.gguf"
        p.write_bytes(bytes(bad))
        try:
            open_and_load(p)
        except ModelFileError as e:
            assert "\n" not in str(e) and p.name in str(e), str(e)
            n_refused += 1
        p.unlink()
    assert n_refused >= len(spots) // 3, (n_refused, len(spots))


# ---- every size / norm / RoPE / tokenizer key set to bad values --------------------------------------
_INT_KEYS = ["block_count", "embedding_length", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count"]
_BAD_META = (
    [(f"llama.{k}", v) for k in _INT_KEYS for v in (0, -1, 3, 2**31, 1 << 40, "12", 2.5, True, [2, 2])]
    + [("llama.context_length", v) for v in (0, -1, "128", 2.5, [128, 128])]
    + [("llama.attention.layer_norm_rms_epsilon", v) for v in (float("nan"), float("inf"), -1e-5, 0.0, 5.0, "x")]
    + [("llama.rope.freq_base", v) for v in (float("nan"), 0.0, -1.0, 0.5, "x")]
    + [("llama.rope.scaling.type", "yarn"), ("llama.rope.scaling.type", 3)]
    + [("tokenizer.ggml.tokens", v) for v in (5, "abc", list(range(1, V + 1)), [f"t{i}" for i in range(V - 1)])]
    + [("tokenizer.ggml.eos_token_id", v) for v in ("x", V + 5, [1, 2], 1.5)]
    + [("tokenizer.ggml.bos_token_id", V), ("tokenizer.ggml.model", 5), ("tokenizer.ggml.model", "rwkv"),
       ("tokenizer.ggml.merges", [1, 2]), ("tokenizer.ggml.token_type", ["a", "b"]),
       ("tokenizer.ggml.add_bos_token", "yes")]
)


@pytest.mark.parametrize("key,value", _BAD_META, ids=[f"{k}={str(v)[:12]}" for k, v in _BAD_META])
def test_bad_metadata_value(tmp_path, key, value):
    refused(write_tiny(tmp_path / "meta.gguf", {key: value}))


def _kv_bytes(key: str, vtype: int, value: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + value


@pytest.mark.parametrize("vtype,value,words", [
    (8, _s("mamba"), "unsupported architecture 'mamba'"), (4, struct.pack("<I", 7), "is an integer, expected a string"),
    (9, struct.pack("<IQ", 8, 1) + _s("llama"), "is an array of strings, expected a string")],
    ids=["mamba", "integer", "array"])
def test_bad_architecture(tmp_path, tiny, vtype, value, words):
    """general.architecture comes from the writer's own argument: replaced in the bytes (the header
    changes length, so the data moves too, but the key is what is refused first)."""
    _, data = tiny
    p = tmp_path / "arch.gguf"
    key = "general.architecture"
    p.write_bytes(data.replace(_kv_bytes(key, 8, _s("llama")), _kv_bytes(key, vtype, value)))
    assert words in refused(p)


@pytest.mark.parametrize("vtype,value,words", [(4, 3, "not a power of two"), (4, 0, "not a power of two"),
                                               (4, 48, "not a power of two"), (4, 64, "truncated"),
                                               (6, 32.0, "expected an integer")], ids=["3", "0", "48", "64", "float"])
def test_bad_alignment(tmp_path, vtype, value, words):
    good = write_tiny(tmp_path / "aligned.gguf", {"general.alignment": 32})
    data = good.read_bytes()
    was = _kv_bytes("general.alignment", 4, struct.pack("<I", 32))
    p = tmp_path / "align.gguf"
    now = _kv_bytes("general.alignment", vtype, struct.pack("<I" if vtype == 4 else "<f", value))
    p.write_bytes(data.replace(was, now))
    assert words in refused(p)


@pytest.mark.parametrize("factor", [float("nan"), 0.0, -2.0, "x"])
def test_bad_rope_scaling_factor(tmp_path, factor):
    meta = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": factor}
    refused(write_tiny(tmp_path / "rope.gguf", meta))


@pytest.mark.parametrize("key", ["llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                                 "llama.feed_forward_length", "tokenizer.ggml.tokens", "tokenizer.ggml.model"])
def test_missing_key(tmp_path, key):
    refused(write_tiny(tmp_path / "missing.gguf", drop=(key,)))


@pytest.mark.parametrize("window", [0, -1, 129, 2**31, 2.5, "8"])
def test_bad_sliding_window(window):
    """Gemma-3's window sizes the kernels' buffers: one past the context (128) is refused too."""
    from types import SimpleNamespace

    cfg = ModelConfig(family="gemma3", vocab_size=V, hidden=D, n_layers=6, n_heads=HEADS, n_kv_heads=1,
                      head_dim=HEAD_DIM, ffn=FFN, eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4),
                      sliding_window=16, sliding_pattern=6, query_scale=HEAD_DIM**-0.5, context_length=128)
    tensors = {n: SimpleNamespace(shape=s) for n, s in tensor_shapes(cfg).items()}
    meta = {"general.architecture": "gemma3", "gemma3.block_count": 6, "gemma3.embedding_length": D,
            "gemma3.feed_forward_length": FFN, "gemma3.attention.head_count": HEADS,
            "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": HEAD_DIM,
            "gemma3.context_length": 128, "gemma3.rope.freq_base": 1e6, "gemma3.attention.sliding_window": 16}
    assert ModelConfig.from_gguf(meta, tensors).sliding_window == 16
    with pytest.raises(ModelFileError, match="sliding_window"):
        ModelConfig.from_gguf({**meta, "gemma3.attention.sliding_window": window}, tensors)


# ---- the tensor table: types, shapes, offsets, names, counts -----------------------------------------
def _info_at(data: bytes, name: str) -> tuple[int, int]:
    """(byte where a tensor's n_dims is, its n_dims) in the tensor table."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key) + len(key)
    return at, struct.unpack_from("<I", data, at)[0]


def _patch(data: bytes, pos: int, fmt: str, value) -> bytes:
    return data[:pos] + struct.pack(fmt, value) + data[pos + struct.calcsize(fmt):]


def _table_edit(data: bytes, name: str, field: str, value) -> bytes:
    at, n_dims = _info_at(data, name)
    if field == "n_dims":
        return _patch(data, at, "<I", value)
    if field.startswith("ne"):
        return _patch(data, at + 4 + 8 * int(field[2:]), "<Q", value)
    type_at = at + 4 + 8 * n_dims
    return _patch(data, type_at if field == "type" else type_at + 4, "<I" if field == "type" else "<Q", value)


_MID, _LAST = "blk.0.attn_k.weight", "blk.1.ffn_down.weight"  # a Q8_0 matrix in the middle, the last tensor
_TABLE = {
    "Q8_0 -> Q4_0 (smaller)": (_MID, "type", 2, "not at the end"),
    "Q8_0 -> F32 (bigger)": (_MID, "type", 0, "not at the end"),
    "Q8_0 -> Q4_K (known, other block)": (_MID, "type", 12, "multiple of the Q4_K block"),
    "Q8_0 -> I8 (same bytes per row? no)": (_MID, "type", 24, "not at the end"),
    "unknown type": (_MID, "type", 200, "unknown ggml type 200"),
    "last tensor smaller": (_LAST, "type", 2, "follow the data of the last tensor"),
    "F32 norm -> F16": ("blk.0.attn_norm.weight", "type", 1, "not at the end"),
    "F32 norm -> I32 (same size)": ("blk.0.attn_norm.weight", "type", 26, "unsupported type I32"),
    "norm shorter": ("output_norm.weight", "ne0", 32, "not at the end"),
    "matrix rows": (_MID, "ne1", 16, "not at the end"),
    "matrix row length": (_MID, "ne0", 96, "not at the end"),
    "absurd dimension": (_MID, "ne1", 1 << 50, "absurd shape"),
    "5 dimensions": (_MID, "n_dims", 5, "5 dimensions"),
    "offset unaligned": (_MID, "offset", 3, "not a multiple of the alignment"),
    "offset overlaps": (_MID, "offset", 0, "not at the end"),
    "offset past the end": (_MID, "offset", 1 << 40, "runs past the end"),
}


@pytest.mark.parametrize("case", list(_TABLE))
def test_tensor_table_damage(tmp_path, tiny, case):
    _, data = tiny
    name, field, value, words = _TABLE[case]
    p = tmp_path / "table.gguf"
    p.write_bytes(_table_edit(data, name, field, value))
    msg = refused(p)
    assert words in msg, msg


def test_renamed_tensors(tmp_path, tiny):
    _, data = tiny
    dup = data.replace(b"blk.1.attn_q.weight", b"blk.0.attn_q.weight")
    p = tmp_path / "dup.gguf"
    p.write_bytes(dup)
    assert "duplicate tensor name" in refused(p)
    p.write_bytes(data.replace(b"blk.1.attn_q.weight", b"blk.1.attn_x.weight"))
    assert "missing tensor blk.1.attn_q.weight" in refused(p)


@pytest.mark.parametrize("field,delta", [(8, 1), (8, -1), (16, 1), (16, -1)])
def test_counts_off_by_one(tmp_path, tiny, field, delta):
    _, data = tiny
    count = struct.unpack_from("<Q", data, field)[0]
    p = tmp_path / "count.gguf"
    p.write_bytes(_patch(data, field, "<Q", count + delta))
    refused(p)


# ---- NaN / inf weights -------------------------------------------------------------------------------
def _poke(data: bytes, path: Path, name: str, at: int, raw: bytes) -> bytes:
    off = GGUFFile(path).tensors[name].offset + at
    return data[:off] + raw + data[off + len(raw):]


@pytest.mark.parametrize("name,at,raw", [
    ("blk.0.attn_norm.weight", 4 * 7, struct.pack("<f", float("nan"))),
    ("output_norm.weight", 0, struct.pack("<f", float("-inf"))),
    ("token_embd.weight", 4 * (D * 200 + 3), struct.pack("<f", float("nan"))),  # one row of the vocabulary
    (_MID, 34 * 5, b"\x00\x7e"),  # the f16 scale of a Q8_0 block: NaN
    ("blk.1.ffn_down.weight", 0, b"\x00\x7c"),  # +inf scale
], ids=["norm-nan", "norm-inf", "embedding-row-nan", "q8-scale-nan", "q8-scale-inf"])
def test_non_finite_weights(tmp_path, tiny, name, at, raw):
    path, data = tiny
    p = tmp_path / "nan.gguf"
    p.write_bytes(_poke(data, path, name, at, raw))
    msg = refused(p)
    assert f"tensor {name} holds NaN or infinite values" in msg, msg


# ---- crafted headers: nested arrays, huge counts, in bounded memory and time ------------------------
def _header(kvs: list[bytes], n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs)


def _arr(etype: int, count: int, body: bytes = b"") -> bytes:
    return struct.pack("<IIQ", 9, etype, count) + body  # value type ARRAY, element type, count


_CRAFTED = {  # name -> (file bytes, words of the refusal at open, or None: opens, refused as a model)
    "many nested arrays": (_header([_s("x.n") + _arr(9, 200_000, struct.pack("<IQ", 0, 0) * 200_000)]),
                           "arrays inside arrays"),
    "nested arrays, declared 2^33": (_header([_s("x.n") + _arr(9, 1 << 33, struct.pack("<IQ", 0, 0) * 1000)]),
                                     "declares 8589934592 items"),
    "nested 10 deep": (_header([_s("x.n") + struct.pack("<II", 9, 9) + struct.pack("<QI", 1, 9) * 9
                                + struct.pack("<Q", 0)]), "nests arrays more than"),
    "string array declared 2^40": (_header([_s("x.s") + _arr(8, 1 << 40, _s("ab") * 1000)]), "absurd length"),
    "string array declared 2^30": (_header([_s("x.s") + _arr(8, 1 << 30, _s("ab") * 1000)]), "declares 1073741824"),
    "u8 array declared 2^33": (_header([_s("x.u") + _arr(0, 1 << 33, bytes(4096))]), "declares 8589934592"),
    "inner strings declared 2^32": (_header([_s("x.n") + _arr(9, 2, struct.pack("<IQ", 8, 1 << 32) * 2)]),
                                    "declares 4294967296"),
    "string length 2^40": (_header([_s("x.s") + struct.pack("<IQ", 8, 1 << 40) + b"abc"]), "absurd length"),
    "string length 2^29": (_header([_s("x.s") + struct.pack("<IQ", 8, 1 << 29) + b"abc"]), "runs past the end"),
    "metadata count 2^20": (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 20) + bytes(64), "absurd metadata count"),
    "metadata count 60000, few bytes": (b"GGUF" + struct.pack("<IQQ", 3, 0, 60000) + bytes(64), "declares 60000"),
    "tensor count 500000, few bytes": (b"GGUF" + struct.pack("<IQQ", 3, 500_000, 0) + bytes(64), "declares 500000"),
    "empty string arrays x 60000": (_header([_s("x.n") + _arr(9, 60_000, struct.pack("<IQ", 8, 0) * 60_000)]), None),
    "u8 arrays x 60000": (_header([_s("x.n") + _arr(9, 60_000, struct.pack("<IQ", 0, 1) * 60_000 + bytes(0))]), None),
    "2-byte strings x 500000": (_header([_s("x.s") + _arr(8, 500_000, _s("ab") * 500_000)]), None),
    "65536 keys": (_header([_s(f"k{i:05d}") + struct.pack("<IB", 0, 1) for i in range(1 << 16)]), None),
}


@pytest.mark.parametrize("case", list(_CRAFTED))
def test_crafted_header_in_bounded_memory(tmp_path, case):
    data, words = _CRAFTED[case]
    if case == "u8 arrays x 60000":  # each inner u8 array holds its one byte
        data = _header([_s("x.n") + _arr(9, 60_000, (struct.pack("<IQ", 0, 1) + b"\x07") * 60_000)])
    p = tmp_path / "crafted.gguf"
    p.write_bytes(data)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        try:
            gf = GGUFFile(p)
            problem = None
        except ModelFileError as e:
            problem = str(e)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - t0
    # nothing bigger than a small multiple of the file (Python objects for what it really holds)
    assert peak < 8 * len(data) + (16 << 20), (peak, len(data))
    assert took < 10, took
    if words is None:
        assert problem is None, problem
        with pytest.raises(ModelFileError, match="unsupported architecture None"):
            load_model(gf, torch.device("cpu"), progress=False)
    else:
        assert problem is not None and words in problem and "\n" not in problem, problem


# ---- sessions -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tiny, tmp_path_factory):
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.sampling.config import SamplerConfig

    with pytest.MonkeyPatch.context() as mp:  # the file hash is remembered under a cache folder of our own
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        eng = Engine(EngineConfig(model=str(tiny[0]), device="cpu", ctx_size=64, progress=False, cpu_weights="f32"))
        eng.generate_text("the the he", sampler=SamplerConfig(temperature=0.0), max_tokens=6)
        yield eng


_PRELUDE = struct.Struct("<8sI32s")


def _split(data: bytes) -> tuple[dict, bytes]:
    magic, hl, _ = _PRELUDE.unpack_from(data)
    assert magic == b"MTPSESS2"
    return json.loads(data[_PRELUDE.size:_PRELUDE.size + hl]), data[_PRELUDE.size + hl:]


def _join(header, kv: bytes, raw_header: bytes | None = None) -> bytes:
    hb = raw_header if raw_header is not None else json.dumps(header).encode()
    return _PRELUDE.pack(b"MTPSESS2", len(hb), hashlib.sha256(hb + kv).digest()) + hb + kv


@pytest.fixture
def saved(engine, tmp_path):
    p = tmp_path / "s.session"
    engine.save_session(p)
    return p, p.read_bytes()


def _state(engine):
    n = engine.kv.length
    return list(engine.tokens), n, engine.kv.k[:, :n].clone(), engine.kv.v[:, :n].clone()


def test_session_round_trip_keeps_permissions(engine, saved):
    p, data = saved
    before = _state(engine)
    os.chmod(p, 0o640)
    engine.save_session(p)
    assert p.read_bytes() == data and (os.stat(p).st_mode & 0o777) == 0o640
    engine.reset()
    engine.load_session(p)
    after = _state(engine)
    assert after[:2] == before[:2] and torch.equal(after[2], before[2]) and torch.equal(after[3], before[3])
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]


def _edit(field, value):
    def f(h):
        if field == "pending":
            h["extra"]["pending"] = value
        elif value is _DROP:
            h.pop(field)
        else:
            h[field] = value
        return h
    return f


_DROP = object()
_SESSION_HEADERS = {  # name -> (edit of the header, words of the refusal)
    "identity is a list": (_edit("identity", [1, 2]), "'identity' is a list, expected an object"),
    "identity is a string": (_edit("identity", "gemma"), "'identity' is a string"),
    "identity of another model": (lambda h: {**h, "identity": {**h["identity"], "model_sha256": "0" * 64}},
                                  "another model"),
    "identity lacks a field": (lambda h: {**h, "identity": {k: v for k, v in list(h["identity"].items())[1:]}},
                               "another model"),
    "tokens is a string": (_edit("tokens", "1 2 3"), "'tokens' is a string"),
    "tokens is an object": (_edit("tokens", {"0": 1}), "'tokens' is an object"),
    "tokens missing": (_edit("tokens", _DROP), "lacks 'tokens'"),
    "a token is a string": (lambda h: {**h, "tokens": ["1", *h["tokens"][1:]]}, "token #0 is a string"),
    "a token is a float": (lambda h: {**h, "tokens": [*h["tokens"][:-1], 1.5]}, "is a number, not a token id"),
    "a token is a boolean": (lambda h: {**h, "tokens": [True, *h["tokens"][1:]]}, "token #0 is a boolean"),
    "a token is null": (lambda h: {**h, "tokens": [None, *h["tokens"][1:]]}, "token #0 is null"),
    "a token is negative": (lambda h: {**h, "tokens": [-1, *h["tokens"][1:]]}, "outside the vocabulary"),
    "a token past the vocabulary": (lambda h: {**h, "tokens": [V, *h["tokens"][1:]]},
                                    "outside the vocabulary [0, 261)"),
    "a token of 10^30": (lambda h: {**h, "tokens": [10**30, *h["tokens"][1:]]}, "outside the vocabulary"),
    "one token more than K/V": (lambda h: {**h, "tokens": h["tokens"] + [5]}, "does not match"),
    "shape is a string": (_edit("shape", "2x5x2x16"), "'shape' is a string"),
    "shape of 3 dims": (lambda h: {**h, "shape": h["shape"][:3]}, "does not match"),
    "shape of floats": (lambda h: {**h, "shape": [float(x) for x in h["shape"]]}, "does not match"),
    "shape of another cache": (lambda h: {**h, "shape": [h["shape"][0], h["shape"][1], 4, 8]}, "does not match"),
    "dtype is a number": (_edit("dtype", 32), "'dtype' is an integer"),
    "dtype int8": (_edit("dtype", "int8"), "K/V dtype 'int8'"),
    "dtype float16 (sizes no longer agree)": (_edit("dtype", "float16"), "corrupt or truncated"),
    "extra is a list": (_edit("extra", [1]), "'extra' is a list"),
    "extra is null": (_edit("extra", None), "'extra' is null"),
    "pending missing": (lambda h: {**h, "extra": {}}, "lacks its pending token"),
    "pending is a string": (_edit("pending", "7"), "pending token '7'"),
    "pending is a boolean": (_edit("pending", True), "pending token True"),
    "pending past the vocabulary": (_edit("pending", V), "pending token 261"),
    "pending negative": (_edit("pending", -3), "pending token -3"),
    "header is a list": (lambda h: [h], "the header is a list"),
    "header is a number": (lambda h: 7, "the header is an integer"),
}


@pytest.mark.parametrize("case", list(_SESSION_HEADERS))
def test_session_header_of_wrong_types(engine, saved, tmp_path, case):
    p, data = saved
    header, kv = _split(data)
    edit, words = _SESSION_HEADERS[case]
    bad = tmp_path / "bad.session"
    bad.write_bytes(_join(edit(header), kv))
    before = _state(engine)
    with pytest.raises(CacheError) as e:
        engine.load_session(bad)
    assert words in str(e.value) and "\n" not in str(e.value) and "bad.session" in str(e.value), str(e.value)
    after = _state(engine)  # a refused file leaves the session as it was
    assert after[:2] == before[:2] and torch.equal(after[2], before[2])


def test_session_damage(engine, saved, tmp_path):
    p, data = saved
    header, kv = _split(data)
    hl = _PRELUDE.unpack_from(data)[1]
    flipped_kv = bytearray(data)
    flipped_kv[-5] ^= 1
    flipped_digest = bytearray(data)
    flipped_digest[20] ^= 1
    cases = {
        "not json": (_join(None, kv, raw_header=b"{not json"), "header is not JSON"),
        "not utf-8": (_join(None, kv, raw_header=b"\xff\xfe{}"), "header is not JSON"),
        "deep json": (_join(None, kv, raw_header=b"[" * 30_000), "header is not JSON"),
        "K/V byte flipped": (bytes(flipped_kv), "checksum does not match"),
        "checksum flipped": (bytes(flipped_digest), "checksum does not match"),
        "header length past the file": (_patch(data, 8, "<I", len(data)), "corrupt or truncated: header length"),
        "header length 2^32-1": (_patch(data, 8, "<I", 2**32 - 1), "corrupt or truncated: header length"),
        "trailing bytes": (data + b"\0" * 8, "corrupt or truncated"),
        "version 1": (b"MTPSESS1" + data[8:], "format version 1"),
        "another format": (b"PK\x03\x04" + data[4:], "is not an mtp-turbo session file"),
        "empty": (b"", "is not an mtp-turbo session file"),
    }
    cuts = sorted({1, 8, 11, 12, 30, 43, 44, 50, _PRELUDE.size + hl - 1, _PRELUDE.size + hl,
                   _PRELUDE.size + hl + len(kv) // 2, len(data) - 1})
    for c in cuts:
        cases[f"cut at {c}"] = (data[:c], "session file" if c >= 8 else "not an mtp-turbo session")
    for name, (bad_bytes, words) in cases.items():
        bad = tmp_path / "damaged.session"
        bad.write_bytes(bad_bytes)
        with pytest.raises(CacheError) as e:
            engine.load_session(bad)
        msg = str(e.value)
        assert words in msg and "\n" not in msg and "damaged.session" in msg, (name, msg)
        assert not name.startswith("cut") or "truncated" in msg or "not an mtp-turbo" in msg, (name, msg)


def test_session_past_the_context_is_refused_before_reading_kv(engine, saved, tmp_path):
    p, data = saved
    header, kv = _split(data)
    per_token = len(kv) // 2 // len(header["tokens"])
    for n, words in ((engine.ctx_size + 1, r"holds 65 tokens, more than the context \(64\)"),
                     (engine.ctx_size, r"holds 65 tokens, more than the context \(64\)")):
        h = {**header, "tokens": [5] * n, "shape": [header["shape"][0], n, *header["shape"][2:]]}
        bad = tmp_path / "long.session"
        bad.write_bytes(_join(h, bytes(2 * per_token * n)))
        with pytest.raises(CacheError, match=words):
            engine.load_session(bad)


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace", "interrupt"])
def test_failed_save_keeps_the_previous_file(engine, saved, monkeypatch, fail_at):
    from mtp_turbo.cache import session as session_mod

    p, data = saved
    engine.generate_text("he the", max_tokens=2)  # the session now differs from the saved file

    def cut_write(f, chunks):  # a full disk: part of the data goes out, then the write fails
        f.write(chunks[0])
        f.write(bytes(chunks[-1])[: len(chunks[-1]) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def fail(*a, **k):
        raise OSError(errno.EIO, "Input/output error")

    def interrupt(f, chunks):
        f.write(chunks[0])
        raise KeyboardInterrupt

    if fail_at == "write":
        monkeypatch.setattr(session_mod, "_write_chunks", cut_write)
    elif fail_at == "fsync":
        monkeypatch.setattr(session_mod.os, "fsync", fail)
    elif fail_at == "replace":
        monkeypatch.setattr(session_mod.os, "replace", fail)
    else:
        monkeypatch.setattr(session_mod, "_write_chunks", interrupt)
    with pytest.raises(KeyboardInterrupt if fail_at == "interrupt" else CacheError) as e:
        engine.save_session(p)
    if fail_at != "interrupt":
        msg = str(e.value)
        assert "cannot save session file" in msg and "previous file is kept" in msg and "\n" not in msg, msg
        assert ("No space left" if fail_at == "write" else "Input/output error") in msg, msg
    monkeypatch.undo()
    assert p.read_bytes() == data  # the old session is whole
    assert sorted(f.name for f in p.parent.iterdir()) == ["s.session"]  # no temporary file left behind
    engine.load_session(p)  # and still loads


def test_save_into_a_missing_folder(engine, tmp_path):
    with pytest.raises(CacheError, match="cannot save session file .*No such file"):
        engine.save_session(tmp_path / "nope" / "s.session")


# ---- through the command line, in a subprocess -------------------------------------------------------
def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "mtp_turbo.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)


def _one_error_line(r: subprocess.CompletedProcess, *words: str) -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("mtp-turbo: error:"), r.stderr[-2000:]
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_cli_info_on_damaged_headers(tmp_path, tiny):
    path, data = tiny
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:GGUFFile(path).data_offset // 2])
    _one_error_line(_cli(["info", "--model", str(cut)], tmp_path), "cut.gguf", "truncated")
    nested = tmp_path / "nested.gguf"
    nested.write_bytes(_CRAFTED["many nested arrays"][0])
    _one_error_line(_cli(["info", "--model", str(nested)], tmp_path), "nested.gguf", "arrays inside arrays")


def test_cli_generate_on_damaged_model_and_session(tmp_path, tiny):
    path, data = tiny
    nan = tmp_path / "nan.gguf"
    nan.write_bytes(_poke(data, path, _MID, 0, b"\x00\x7e"))
    run = ["generate", "the", "--device", "cpu", "-n", "2", "--no-progress", "--draft", "none", "--temperature", "0"]
    _one_error_line(_cli([*run, "--model", str(nan)], tmp_path), "nan.gguf", "NaN")
    s = tmp_path / "s.session"
    s.write_bytes(b"MTPSESS2" + bytes(40))
    _one_error_line(_cli([*run, "--model", str(path), "--session", str(s)], tmp_path), "s.session", "corrupt")
    assert s.read_bytes() == b"MTPSESS2" + bytes(40)  # the user's file is not overwritten
