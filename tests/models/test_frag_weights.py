"""A model whose matrices are the file's bytes in the integer tensor cores' layouts (load_model(file_weights=True,
frag=True), quant/frag_matrix.py) over test_file_weights.py's mixed-format file: the matrices that have a
layout (Q8_0, Q5_0, Q4_0, Q4_K, Q5_K, Q6_K) are FragMatrix, the rest planes; the torch forward gives the dense
model's bits (the layouts hold the loader's values); the fused step is within float32 rounding of it
(x kept to 2^-28 of its chunk, exact block sums: not the dense bits); a verify's rows and a prefill
chunk's K/V agree with one-row steps (to fp32 rounding in the interpreter).

Runs the kernels in Triton's interpreter on the CPU (the frag GEMV's CPU branch: x_frag8 interpreted,
then the exact emulation), in fp32. The Gluon kernel itself: tests/quant/test_fragk.py (GPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as T

pytest.importorskip("triton")

from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.io.gguf_file import GGUFFile  # noqa: E402
from mtp_turbo.models import fused  # noqa: E402
from mtp_turbo.models.load import load_model  # noqa: E402
from mtp_turbo.quant.frag_matrix import FragMatrix  # noqa: E402
from mtp_turbo.quant.planes import FusedWeight  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_file_weights import HEAD_DIM, KV_HEADS, V, write_model  # noqa: E402

pytestmark = pytest.mark.interpret


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    gf = GGUFFile(write_model(tmp_path_factory.mktemp("frag") / "mixed.gguf"))
    frag = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True, frag=True)
    dense = load_model(gf, "cpu", torch.float32, progress=False)
    return frag, dense


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def _steps(model, tokens, chunks):
    """Forward tokens in consecutive chunks (sizes), the head on every chunk of <= MAX_ROWS rows:
    (logits per token where computed, K, V)."""
    c = model.cfg
    kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    dec = fused.FusedDecoder(model, kv)
    logits, p = {}, 0
    for n in chunks:
        head = n <= fused.MAX_ROWS
        out, _ = dec.forward(tokens[p:p + n], torch.arange(p, p + n), head=head)
        if head:
            for i in range(n):
                logits[p + i] = out[i].clone()
        p += n
    return logits, kv.k[:, :p].clone(), kv.v[:, :p].clone()


def test_which_matrices_take_the_layouts(models):
    frag, dense = models
    L0, L1 = frag.layers
    # layer 0: q|k Q4_K + v Q6_K (two runs), o Q5_K, gate Q4_0 + up Q4_1 (Q4_1 has no layout), down Q5_0
    assert isinstance(L0["qkv"], FragMatrix) and len(L0["qkv"].runs) == 2
    assert isinstance(L0["o"], FragMatrix) and L0["o"].runs[0].layout.fmt == "q5_k"
    assert isinstance(L0["gate_up"], FusedWeight)
    assert isinstance(L0["down"], FragMatrix)
    assert all(isinstance(L1[k], FragMatrix) for k in ("qkv", "o", "gate_up", "down"))
    assert isinstance(frag.head_weight, FragMatrix)  # the untied Q6_K head
    for i in range(2):
        for k in ("qkv", "o", "gate_up", "down"):
            assert torch.equal(frag.layers[i][k].dense(torch.float32), dense.layers[i][k].dense(torch.float32)
                               if isinstance(dense.layers[i][k], FusedWeight) else dense.layers[i][k])


def test_torch_forward_is_the_dense_models(models):
    frag, dense = models
    toks = torch.randint(0, V, (9,), generator=torch.Generator().manual_seed(0))
    kv1 = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    kv2 = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    a, b = frag.forward(toks, 0, kv1)[0], dense.forward(toks, 0, kv2)[0]
    assert torch.equal(a, b) and torch.isfinite(a).all()


def test_fused_step_close_to_the_dense_model_and_rows_independent(models):
    frag, dense = models
    toks = torch.randint(0, V, (14,), generator=torch.Generator().manual_seed(1))
    one_l, one_k, one_v = _steps(frag, toks, [1] * 14)
    # a 9-row prefill chunk (no head), then a 4-row verify and a 1-row step
    ch_l, ch_k, ch_v = _steps(frag, toks, [9, 4, 1])
    # to fp32 rounding: the interpreter's tl.dot (attention, the planes' GEMVs) is a numpy matmul whose
    # rounding for a row depends on the BLAS kernel (test_fused.py); the frag GEMV's rows are
    # independent bit for bit (tests/quant/test_fragk.py), the whole step on CUDA: test_fused_gpu.py
    assert _rel(ch_k, one_k) < 1e-6 and _rel(ch_v, one_v) < 1e-6
    for p in range(9, 14):
        assert _rel(ch_l[p], one_l[p]) < 1e-6, p
    # against the dense model's torch forward (the loader's values): float32 rounding apart
    kv = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    ref = dense.forward(toks, 0, kv)[0]
    got = torch.stack([one_l[p] for p in range(14)])
    err = (got - ref).abs().max().item()
    assert err <= 1e-4 * ref.abs().max().item(), err


@pytest.mark.parametrize("head_type", [T.Q6_K, T.Q8_0])
def test_a_tied_embedding_is_read_from_the_heads_layout(tmp_path, head_type):
    """A tied Q6_K or Q8_0 embedding: the head's layout is the only copy of its bytes (a Q8_0 head
    keeps no codes and no dense table beside it), its rows the loader's values (the dense table's
    rows bit for bit), and the fused step runs on it."""
    gf = GGUFFile(write_model(tmp_path / "tied.gguf", tied=True, head_type=head_type))
    frag = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True, frag=True)
    dense = load_model(gf, "cpu", torch.float32, progress=False)
    assert isinstance(frag.head_weight, FragMatrix) and frag.embed_file is frag.head_weight
    assert not frag.dense_embed and frag.head_q8 is None
    held = {t.data_ptr() for t in frag.embed_tensors()}
    assert held == {t.data_ptr() for t in frag.head_weight.tensors()}
    ids = torch.tensor([0, 17, 16, 260, 5, 17])
    assert torch.equal(frag.embedding_rows(ids), dense.embed[ids])
    toks = torch.randint(0, V, (6,), generator=torch.Generator().manual_seed(2))
    logits, _, _ = _steps(frag, toks, [2, 4])
    kv = KVCache(2, 64, KV_HEADS, HEAD_DIM, "cpu", torch.float32)
    ref = dense.forward(toks, 0, kv)[0]
    got = torch.stack([logits[p] for p in range(2, 6)])
    assert _rel(got, ref[2:]) < 1e-4
