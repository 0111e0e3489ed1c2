"""A draft tree through the fused step (one row an attention block, keys past the root read from the
row's ancestors' cells, K/V written to the nodes' cells): every row's logits, hidden state and K/V are
the fused one-row steps' along its path. In Triton's CPU interpreter to fp32 rounding (its tl.dot is
a numpy matmul: see test_fused.py's batch-invariance test); bit for bit on a GPU."""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.models import fused  # noqa: E402
from mtp_turbo.spec.tree_shape import SpineTree, TreeShape  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_models import tiny_model  # noqa: E402

SHAPE = TreeShape((-1, 0, 0, 1, 1, 2, 3, 5))  # two children at depths 1 and 2, chains below, 8 rows
BIG = SpineTree(5, (4, 3, 2, 1)).shape  # 16 rows: past the verify step's 8, on the prefill chunks' plan


def tree_vs_steps(family, p_len, dev, dtype, SHAPE=SHAPE):
    m = tiny_model(family, seed=3, dtype=dtype, device=dev)
    c = m.cfg
    g = torch.Generator().manual_seed(4)
    toks = torch.randint(0, c.vocab_size, (p_len + SHAPE.nodes,), generator=g).to(dev)
    kv = KVCache(c.n_layers, 96, c.n_kv_heads, c.head_dim, dev, dtype)
    dec = fused.FusedDecoder(m, kv)
    p0 = p_len - 1
    for c0 in range(0, p0, 8):  # the prompt but its last token, in one-row-step-exact chunks
        c1 = min(p0, c0 + 8)
        dec.forward(toks[c0:c1], torch.arange(c0, c1, device=dev))
    snap = kv.k.clone(), kv.v.clone()
    nodes = toks[p0:p0 + SHAPE.nodes].clone()
    pos = p0 + torch.tensor(SHAPE.depths, device=dev)
    cells = p0 + torch.arange(SHAPE.nodes, device=dev)
    anc = torch.tensor(SHAPE.ancestors, device=dev)
    logits, hidden = (x.clone() for x in dec.forward(nodes, pos, tree=(cells, anc)))
    tree_k = kv.k[:, p0:p0 + SHAPE.nodes].clone()
    out = {}
    ends = [n for n in range(SHAPE.nodes) if n not in SHAPE.parents]  # every node lies on a path to one
    for n in ends:
        kv.k.copy_(snap[0])
        kv.v.copy_(snap[1])
        path = [a for a in SHAPE.ancestors[n] if a >= 0]
        for d, a in enumerate(path):  # one-row steps along the path, each node's outputs as it passes
            lg, h = dec.forward(nodes[a:a + 1], torch.tensor([p0 + d], device=dev))
            out.setdefault(a, (a, lg[0].clone(), h[0].clone(), kv.k[:, p0 + d].clone()))
    return logits, hidden, tree_k, [out[n] for n in range(SHAPE.nodes)]


@pytest.mark.interpret
@pytest.mark.parametrize("family,p_len,shape", [("gemma3", 30, SHAPE), ("qwen2", 7, SHAPE), ("gemma3", 24, BIG)],
                         ids=["gemma3", "qwen2", "gemma3-16-rows"])
def test_tree_rows_are_fused_one_row_steps_of_their_paths(family, p_len, shape):
    # gemma3: a 16-cell sliding window, so sliding rows start past cell 0; qwen2: biases, no window
    logits, hidden, tree_k, steps = tree_vs_steps(family, p_len, "cpu", torch.float32, shape)
    for n, lg, h, k in steps:
        scale = lg.abs().max()
        assert (logits[n] - lg).abs().max() <= 1e-5 * scale, (family, n)
        assert (hidden[n] - h).abs().max() <= 1e-5 * h.abs().max(), (family, n)
        assert (tree_k[:, n] - k).abs().max() <= 1e-5 * k.abs().max(), (family, n)
    # the check can fail: node 3's row and node 4's (siblings) differ only in what they attend to
    assert (logits[3] - logits[4]).abs().max() > 1e-2 * logits[3].abs().max()


@pytest.mark.gpu
@pytest.mark.parametrize("family,p_len,shape", [("gemma3", 30, SHAPE), ("qwen2", 7, SHAPE), ("gemma3", 24, BIG)])
def test_tree_rows_are_fused_one_row_steps_bit_for_bit_on_the_gpu(family, p_len, shape):
    logits, hidden, tree_k, steps = tree_vs_steps(family, p_len, "cuda", torch.bfloat16, shape)
    for n, lg, h, k in steps:
        assert torch.equal(logits[n], lg) and torch.equal(hidden[n], h) and torch.equal(tree_k[:, n], k), (family, n)
