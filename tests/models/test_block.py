"""The block's CPU float32 q/k path (q and k heads normed and rotated as one tensor) gives the bits of
the per-part path (q, k, v from their own matrices, each normed and rotated alone), for one and several
rows, with and without a batch dimension: speculative and plain text on the CPU rely on one set of
values, and this path must stay a rewrite of it, not a second definition."""

import pytest
import torch

from mtp_turbo.models import block as B
from mtp_turbo.models.arch import BlockSpec


@pytest.mark.parametrize("lead", [(1,), (3,), (2, 3)])
def test_joint_qk_rows_equal_the_per_part_path(lead):
    d = BlockSpec(hidden=64, n_heads=4, n_kv_heads=2, head_dim=32, ffn=128, eps=1e-6, query_scale=0.1,
                  qk_norm=True, sandwich_norms=True, activation="gelu_tanh", qkv_bias=False)
    g = torch.Generator().manual_seed(0)
    W = {"attn_norm": torch.randn(64, generator=g), "q_norm": torch.randn(32, generator=g),
         "k_norm": torch.randn(32, generator=g), "qkv": torch.randn(4 * 32 + 2 * 2 * 32, 64, generator=g)}
    parts = {k: v for k, v in W.items() if k != "qkv"}
    parts["q"], parts["k"], parts["v"] = W["qkv"].split([128, 64, 64])
    T = lead[-1]
    cos, sin = B.rope_tables(1e4, 32, 64, "cpu")
    h = torch.randn(*lead, 64, generator=g)
    got = B.project_qkv(W, d, h, cos[17:17 + T], sin[17:17 + T])
    want = B.project_qkv(parts, d, h, cos[17:17 + T], sin[17:17 + T])
    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.equal(a, b)
