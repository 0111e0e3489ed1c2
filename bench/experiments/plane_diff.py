"""Where the plane GEMV's bits differ from the dense GEMV's (diagnosis of tests/quant/test_planes.py on CUDA)."""
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
from blocks import random_blocks  # noqa: E402

from mtp_turbo.models.arch import BlockSpec  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan  # noqa: E402
from mtp_turbo.quant.planes import FusedWeight, PlaneMatrix  # noqa: E402


def gemv(w, x, tiles):
    spec = BlockSpec(hidden=x.shape[1], n_heads=2, n_kv_heads=1, head_dim=32, ffn=64, eps=1e-6, query_scale=0.1,
                     qk_norm=False, sandwich_norms=False, activation="gelu_tanh", qkv_bias=False)
    plan = LayerPlan(spec, tiles, torch.bfloat16, x.device)
    y = torch.zeros(16, w.shape[0], dtype=torch.bfloat16, device=x.device)
    return plan.gemv(x, w, y).clone()


for t in (T.Q8_0, T.Q4_K, T.Q6_K):
    n, k = 512, 2048
    pm = PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(t, n, k, 8)).cuda(), t, (n, k))
    dense = pm.dequantize().to(torch.bfloat16)
    for rows in (4, 16):
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).cuda()
        for name, tiles in (("default", FusedTiles()), ("no-w0", FusedTiles(pdl_w0=False)), ("no-pdl", FusedTiles(pdl=0))):
            a = [gemv(FusedWeight(pm), x, tiles) for _ in range(3)]
            d = [gemv(dense, x, tiles) for _ in range(3)]
            diff = (a[0].float() - d[0].float()).abs()
            bad = (diff > 0).nonzero()
            print(t.name, rows, name, "plane det", all(torch.equal(a[0], z) for z in a), "dense det",
                  all(torch.equal(d[0], z) for z in d), "n diff", bad.shape[0], "max", diff.max().item(),
                  "rows", sorted(set(bad[:, 0].tolist()))[:8], "cols", sorted(set(bad[:, 1].tolist()))[:6])
