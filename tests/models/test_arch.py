"""The architecture description (models/arch.py): what it reads from real files of each family, the
published Gemma-3 shapes (the 27B's query scale, linear RoPE scaling on global layers, 1024-cell
windows), and metadata that contradicts the tensors refused with one line naming the problem, both
from the config and through the command line on small files written here."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from mtp_turbo.cli import main
from mtp_turbo.errors import ModelFileError
from mtp_turbo.io.gguf_file import GGUFFile
from mtp_turbo.models.arch import ModelConfig, Rope, tensor_shapes


def _meta(arch="llama", **kv):
    m = {"general.architecture": arch, f"{arch}.block_count": 2, f"{arch}.embedding_length": 64,
         f"{arch}.feed_forward_length": 96, f"{arch}.attention.head_count": 4, f"{arch}.attention.head_count_kv": 2,
         f"{arch}.attention.layer_norm_rms_epsilon": 1e-5, f"{arch}.rope.freq_base": 1e4, f"{arch}.context_length": 256}
    m.update({k if k.startswith(("general.", "tokenizer.")) else f"{arch}.{k}": v for k, v in kv.items()})
    return m


def _tensors(cfg: ModelConfig, **override):
    t = {n: SimpleNamespace(shape=s) for n, s in tensor_shapes(cfg).items()}
    for n, s in override.items():
        if s is None:
            del t[n.replace("__", ".")]
        else:
            t[n.replace("__", ".")] = SimpleNamespace(shape=s)
    return t


def _cfg(arch="llama", **kw):
    base = dict(family=arch, vocab_size=100, hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn=96,
                eps=1e-5, rope_global=Rope(1e4), rope_local=Rope(1e4), sliding_window=0, sliding_pattern=0,
                query_scale=0.25, context_length=256)
    base.update(kw)
    return ModelConfig(**base)


def test_the_real_files_of_each_family(model_path, smollm2_path, qwen05_path):
    g = ModelConfig.from_gguf(*(lambda f: (f.metadata, f.tensors))(GGUFFile(model_path)))
    assert (g.family, g.n_layers, g.hidden, g.head_dim, g.sliding_window, g.tied_head) == ("gemma3", 18, 640, 256, 512, True)
    assert g.block.sandwich_norms and g.block.qk_norm and g.embed_scale == math.sqrt(640)
    assert [g.is_global(i) for i in range(6)] == [False] * 5 + [True] and g.rope_local.base == 1e4
    s = ModelConfig.from_gguf(*(lambda f: (f.metadata, f.tensors))(GGUFFile(smollm2_path)))
    assert (s.family, s.n_heads, s.n_kv_heads, s.head_dim, s.qkv_bias, s.tied_head) == ("llama", 9, 3, 64, False, True)
    assert not s.has_sliding and s.block.activation == "silu" and not s.block.sandwich_norms and s.embed_scale == 1.0
    q = ModelConfig.from_gguf(*(lambda f: (f.metadata, f.tensors))(GGUFFile(qwen05_path)))
    assert (q.family, q.n_heads, q.n_kv_heads, q.head_dim, q.qkv_bias, q.tied_head) == ("qwen2", 14, 2, 64, True, False)
    assert q.query_scale == 64 ** -0.5 and q.rope_global == Rope(1e6)


def test_published_gemma3_shapes():
    # 27B: 62 layers, 32 heads of 128, queries scaled by hidden / heads (query_pre_attn_scalar 168);
    # 4B and up: linear RoPE scaling 8 on global layers only, 1024-cell windows
    for layers, D, H, HKV, DH, F, W, scale in ((62, 5376, 32, 16, 128, 21504, 1024, (5376 / 32) ** -0.5),
                                               (34, 2560, 8, 4, 256, 10240, 1024, 256 ** -0.5)):
        meta = _meta("gemma3", block_count=layers, embedding_length=D, feed_forward_length=F,
                     **{"attention.head_count": H, "attention.head_count_kv": HKV, "attention.key_length": DH,
                        "attention.value_length": DH, "attention.sliding_window": W, "rope.freq_base": 1e6,
                        "rope.scaling.type": "linear", "rope.scaling.factor": 8.0, "context_length": 131072})
        want = _cfg("gemma3", vocab_size=262144, hidden=D, n_layers=layers, n_heads=H, n_kv_heads=HKV, head_dim=DH, ffn=F,
                    sliding_window=W, sliding_pattern=6, context_length=131072)
        cfg = ModelConfig.from_gguf(meta, _tensors(want))
        assert cfg.query_scale == pytest.approx(scale) and cfg.sliding_window == W
        assert cfg.rope_global == Rope(1e6, 8.0) and cfg.rope_local == Rope(1e4)
        assert sum(cfg.is_global(i) for i in range(layers)) == layers // 6


@pytest.mark.parametrize("meta,tensors,words", [
    (dict(block_count=0), {}, ["block_count = 0"]),
    ({"attention.head_count": 0}, {}, ["head_count = 0"]),
    ({"attention.head_count_kv": 0}, {}, ["head_count_kv = 0"]),
    ({"attention.head_count": 6, "attention.head_count_kv": 4}, {}, ["6 attention heads", "4 K/V heads"]),
    ({"attention.key_length": 1 << 30}, {}, ["head size"]),
    ({"attention.key_length": 24}, {}, ["head size 24"]),
    ({"attention.layer_norm_rms_epsilon": float("nan")}, {}, ["layer_norm_rms_epsilon", "finite"]),
    ({"rope.freq_base": -1.0}, {}, ["freq_base"]),
    ({"rope.scaling.type": "yarn"}, {}, ["yarn", "supported"]),
    ({"attention.head_count_kv": [2, 2]}, {}, ["per-layer array"]),
    ({"embedding_length": 80}, {}, ["embedding_length 80", "64 columns"]),
    ({}, {"blk__1__attn_norm__weight": (63,)}, ["blk.1.attn_norm.weight", "[63]", "[64]"]),
    ({}, {"blk__0__ffn_down__weight": (64, 95)}, ["blk.0.ffn_down.weight"]),
    ({}, {"blk__1__attn_k__weight": None}, ["missing tensor blk.1.attn_k.weight"]),
    ({"general.architecture": "mamba"}, {}, ["unsupported architecture 'mamba'", "gemma3, llama, qwen2"]),
])
def test_metadata_that_contradicts_the_tensors_is_refused(meta, tensors, words):
    m = _meta()
    arch = meta.pop("general.architecture", None)
    m.update({f"llama.{k}": v for k, v in meta.items()})
    if arch:
        m["general.architecture"] = arch
    with pytest.raises(ModelFileError) as e:
        ModelConfig.from_gguf(m, _tensors(_cfg(vocab_size=100), **tensors))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


# ---- small files written here, through the command line --------------------------------------------
def _write_llama(path, tok_md, V, break_norm=False, heads_kv=2):
    """A 2-layer llama-family GGUF (hidden 64) with random F32 weights and SmolLM2's tokenizer."""
    from mtp_turbo.io.gguf_write import write_gguf

    cfg = _cfg(vocab_size=V, n_kv_heads=2)
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in tensor_shapes(cfg).items():
        if break_norm and name == "blk.1.ffn_norm.weight":
            shape = (32,)
        a = (1.0 + 0.1 * rng.standard_normal(shape) if name.endswith("norm.weight") else
             0.05 * rng.standard_normal(shape)).astype(np.float32)
        tensors[name] = (a.view(np.uint8).ravel(), 0, shape)
    md = {k: v for k, v in _meta("llama", **{"attention.head_count_kv": heads_kv}).items() if k != "general.architecture"}
    md.update(tok_md)
    write_gguf(path, "llama", md, tensors)


@pytest.fixture(scope="module")
def smol_tokenizer(smollm2_path):
    md = GGUFFile(smollm2_path).metadata
    return {k: v for k, v in md.items() if k.startswith("tokenizer.")}, len(md["tokenizer.ggml.tokens"])


def test_a_small_llama_file_runs_and_damaged_ones_say_why(tmp_path, capsys, smol_tokenizer):
    tok_md, V = smol_tokenizer
    good = tmp_path / "tiny-llama.gguf"
    _write_llama(good, tok_md, V)
    assert main(["generate", "Hello", "--model", str(good), "--device", "cpu", "-n", "4", "--temperature", "0",
                 "--no-progress"]) == 0
    for name, kw, words in (("norm", {"break_norm": True}, ["blk.1.ffn_norm.weight", "[32]"]),
                            ("kv", {"heads_kv": 3}, ["4 attention heads", "3 K/V heads"])):
        bad = tmp_path / f"bad-{name}.gguf"
        _write_llama(bad, tok_md, V, **kw)
        capsys.readouterr()
        assert main(["generate", "Hello", "--model", str(bad), "--device", "cpu", "-n", "4", "--no-progress"]) == 1
        err = capsys.readouterr().err
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("mtp-turbo: error:") and "Traceback" not in err, err
        for w in words:
            assert w in lines[0], (w, lines[0])
