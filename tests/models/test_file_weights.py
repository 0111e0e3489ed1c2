"""A model whose matrices stay the file's own bytes (load_model(file_weights=True), quant/planes.py)
against the same file loaded dense, over a file mixing every format the planes read (two formats in
one fused q|k|v or gate|up, the llama family's row interleave on quantized q/k, an untied Q6_K
head): the same weights, the torch forward's and the fused step's logits, hidden states and K/V,
bit for bit (in the CPU interpreter; on the GPU the plane dot may round a rare output differently:
weight_tiles.py). Rows' independence: test_planes.py here, tests/models/test_fused_gpu.py on the GPU.

Runs the kernels in Triton's interpreter on the CPU (conftest.py), in fp32: the loader's values.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T

pytest.importorskip("triton")

from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.errors import ModelFileError  # noqa: E402
from mtp_turbo.io.gguf_file import GGUFFile  # noqa: E402
from mtp_turbo.io.gguf_write import write_gguf  # noqa: E402
from mtp_turbo.models import fused  # noqa: E402
from mtp_turbo.models.arch import ModelConfig, Rope, tensor_shapes  # noqa: E402
from mtp_turbo.models.load import load_model  # noqa: E402
from mtp_turbo.quant.planes import FusedWeight, PlaneMatrix  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from blocks import random_blocks  # noqa: E402

pytestmark = pytest.mark.interpret

V, D, HEADS, KV_HEADS, HEAD_DIM, FFN = 261, 256, 4, 2, 64, 256
# per layer: q, k, v, o, gate, up, down
LAYER_TYPES = [(T.Q4_K, T.Q4_K, T.Q6_K, T.Q5_K, T.Q4_0, T.Q4_1, T.Q5_0),
               (T.Q8_0, T.Q8_0, T.Q5_0, T.Q6_K, T.Q4_K, T.Q4_K, T.Q6_K)]
KEYS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_model(path: Path, nan_in: str | None = None, tied: bool = False, head_type: T = T.Q6_K) -> Path:
    """Untied: an F32 embedding and a head_type (Q6_K) output matrix; tied: a head_type embedding that is
    the head too."""
    cfg = ModelConfig(family="llama", vocab_size=V, hidden=D, n_layers=2, n_heads=HEADS, n_kv_heads=KV_HEADS,
                      head_dim=HEAD_DIM, ffn=FFN, eps=1e-5, rope_global=Rope(1e4), rope_local=Rope(1e4),
                      sliding_window=0, sliding_pattern=0, query_scale=HEAD_DIM**-0.5, context_length=128,
                      tied_head=tied)
    types = {f"blk.{i}.{k}.weight": t for i, ts in enumerate(LAYER_TYPES) for k, t in zip(KEYS, ts)}
    types["token_embd.weight" if tied else "output.weight"] = head_type
    rng = np.random.default_rng(0)
    tensors = {}
    for j, (name, shape) in enumerate(tensor_shapes(cfg).items()):
        if name in types:
            raw = random_blocks(types[name], shape[0], shape[1], j, scale=2e-3 if "token_embd" in name else 2e-4)
            if name == nan_in:
                raw[:2] = np.array([np.nan], np.float16).view(np.uint8) if types[name] != T.Q6_K else raw[:2]
            tensors[name] = (raw, int(types[name]), shape)
        else:
            a = (1 + 0.1 * rng.standard_normal(shape) if name.endswith("norm.weight")
                 else rng.standard_normal(shape)).astype(np.float32)
            tensors[name] = (a.view(np.uint8).ravel(), 0, shape)
    md = {"llama.block_count": 2, "llama.embedding_length": D, "llama.feed_forward_length": FFN,
          "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS,
          "llama.context_length": 128, "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 1e4}
    write_gguf(path, "llama", md, tensors)
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("fw") / "mixed.gguf")


def run(model, tokens, n_prefill):
    c = model.cfg
    kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    dec = fused.FusedDecoder(model, kv)
    dec.forward(tokens[:n_prefill], torch.arange(n_prefill), head=False)
    logits, hidden = dec.forward(tokens[n_prefill:], torch.arange(n_prefill, len(tokens)))
    return logits.clone(), hidden.clone(), kv.k.clone(), kv.v.clone()


def test_file_weights_give_the_dense_bits(model_file):
    gf = GGUFFile(model_file)
    planes = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True)
    dense = load_model(gf, "cpu", torch.float32, progress=False)
    L0, L1 = planes.layers
    # q|k in Q4_K, v in Q6_K: two segments; layer 1's q|k|v in Q8_0 + Q5_0; gate|up one Q4_K matrix
    assert isinstance(L0["qkv"], FusedWeight) and L0["qkv"].b is not None
    assert isinstance(L1["gate_up"].a, PlaneMatrix) and L1["gate_up"].b is None
    assert isinstance(planes.head_weight, FusedWeight) and planes.head_file is planes.head_weight
    for a, b in ((L0["qkv"], dense.layers[0]["qkv"]), (L1["down"], dense.layers[1]["down"])):
        assert torch.equal(a.dense(torch.float32), b)  # the llama row interleave undone on the blocks too
    toks = torch.randint(0, V, (13,), generator=torch.Generator().manual_seed(0))
    for got, want in zip(run(planes, toks, 9), run(dense, toks, 9)):
        assert torch.equal(got, want)
    kv1 = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    kv2 = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    a, b = planes.forward(toks, 0, kv1)[0], dense.forward(toks, 0, kv2)[0]
    assert torch.equal(a, b) and torch.isfinite(a).all()


def test_a_tied_embedding_held_as_the_file_bytes(tmp_path):
    # the Q6_K embedding is the head too: its rows gathered and dequantized per forward, no dense table
    gf = GGUFFile(write_model(tmp_path / "tied.gguf", tied=True))
    planes = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True)
    dense = load_model(gf, "cpu", torch.float32, progress=False)
    assert not planes.dense_embed and planes.head_file.a is planes.embed_file
    assert all(t.dtype != torch.float32 for t in planes.embed_tensors())  # the planes, not a table
    toks = torch.randint(0, V, (13,), generator=torch.Generator().manual_seed(1))
    for got, want in zip(run(planes, toks, 9), run(dense, toks, 9)):
        assert torch.equal(got, want)
    assert not planes.dense_embed  # the forward made no table
    assert torch.equal(planes.embed, dense.embed) and planes.dense_embed  # made whole on demand


def test_a_nan_scale_in_a_file_matrix_is_refused(tmp_path):
    p = write_model(tmp_path / "nan.gguf", nan_in="blk.1.attn_k.weight")
    with pytest.raises(ModelFileError, match="blk.1.attn_k.weight"):
        load_model(GGUFFile(p), "cpu", torch.float32, progress=False, file_weights=True)
