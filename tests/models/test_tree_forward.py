"""A draft tree's eager forward: every row's logits and K/V are a one-row step's after its path, bit for bit
on the CPU, and the accepted path's K/V moved to its positions are the cells one-row steps write."""

import sys
from pathlib import Path

import pytest
import torch

from mtp_turbo.cache.kv import KVCache
from mtp_turbo.quant.cpu_linear import quantize_cpu_model
from mtp_turbo.spec.tree_shape import TreeShape

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_model  # noqa: E402

SHAPE = TreeShape((-1, 0, 0, 0, 1, 2, 4, 6, 7))  # three children, then a chain under the first two


def cache(m, n=96):
    c = m.cfg
    return KVCache(c.n_layers, n, c.n_kv_heads, c.head_dim, "cpu", m.dtype)


def prefill(m, kv, prompt):
    m.forward(torch.tensor(prompt), 0, kv)
    kv.commit(len(prompt))


@pytest.mark.parametrize("family,p_len", [("gemma3", 30), ("qwen2", 11), ("llama", 5)])
def test_tree_rows_are_one_row_steps_of_their_paths(family, p_len):
    m = tiny_model(family, dtype=torch.bfloat16)  # gemma3: window 16: sliding rows start past cell 0
    quantize_cpu_model(m)  # the CPU engine's matrices: a row's output does not depend on the rows beside it
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, m.cfg.vocab_size, (p_len,), generator=g).tolist()
    tokens = torch.randint(0, m.cfg.vocab_size, (SHAPE.nodes,), generator=g)
    kv = cache(m)
    prefill(m, kv, prompt[:-1])
    p0 = len(prompt) - 1  # node 0 is the pending last prompt token
    tokens[0] = prompt[-1]
    logits, _ = m.forward_tree(tokens, SHAPE, p0, kv)
    for n in range(SHAPE.nodes):
        path = [a for a in SHAPE.ancestors[n] if a >= 0]
        one = cache(m)
        prefill(m, one, prompt[:-1])
        for j, a in enumerate(path):
            row, _ = m.forward(tokens[a:a + 1], p0 + j, one)
        assert torch.equal(row[0], logits[n]), (family, n)
        assert torch.equal(one.k[:, p0 + len(path) - 1], kv.k[:, p0 + n]), n  # its K/V in its cell
        if n == 7:  # a depth-4 path through node 2: moved to its positions, the cells one-row steps wrote
            moved = cache(m)
            moved.k.copy_(kv.k)
            moved.v.copy_(kv.v)
            moved.move_cells(torch.tensor([p0 + a for a in path[1:]]), p0 + torch.arange(1, len(path)))
            span = slice(0, p0 + len(path))
            assert torch.equal(moved.k[:, span], one.k[:, span]) and torch.equal(moved.v[:, span], one.v[:, span])


def test_the_mask_path_reads_the_rows_keys():
    """The one-attention path (off the CPU) reads each row's committed range and its ancestors, no other
    cell: its mask holds exactly the row path's keys, and its logits equal the row path's to rounding."""
    m = tiny_model("gemma3")
    p0, window = 24, m.cfg.sliding_window
    rows = m.tree_context(False, SHAPE, p0)
    masked = m.tree_context(False, SHAPE, p0, by_row=False)
    assert rows.cells.tolist() == masked.cells.tolist() == list(range(p0, p0 + SHAPE.nodes))
    for n, keys in enumerate(rows.rows):
        anc = [p0 + a for a in SHAPE.ancestors[n] if a >= 0]
        assert keys.tolist() == list(range(p0 + SHAPE.depths[n] - window + 1, p0)) + anc
        assert masked.key_pos[masked.mask[n]].tolist() == sorted(keys.tolist())
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, m.cfg.vocab_size, (p0,), generator=g)
    tokens = torch.randint(0, m.cfg.vocab_size, (SHAPE.nodes,), generator=g)
    out = []
    for by_row in (True, False):
        kv = cache(m)
        prefill(m, kv, prompt.tolist())
        out.append(m.forward_tree(tokens, SHAPE, p0, kv, by_row=by_row)[0])
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-4)
