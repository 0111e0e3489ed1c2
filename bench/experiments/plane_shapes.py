"""The plane GEMV against the dense one at Gemma-3-270M's matrix shapes, formats and tile classes, on CUDA."""
import sys
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
from blocks import random_blocks  # noqa: E402

from mtp_turbo.models.arch import BlockSpec  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan  # noqa: E402
from mtp_turbo.quant.planes import FusedWeight, PlaneMatrix  # noqa: E402


def pm(t, n, k, seed):
    return PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(t, n, k, seed)).cuda(), t, (n, k))


spec = BlockSpec(hidden=640, n_heads=4, n_kv_heads=1, head_dim=256, ffn=2048, eps=1e-6, query_scale=0.1,
                 qk_norm=True, sandwich_norms=True, activation="gelu_tanh", qkv_bias=False)
for tiles in (FusedTiles(), FusedTiles(tails=False)):
    plan = LayerPlan(spec, tiles, torch.bfloat16, "cuda")
    cases = {"qkv Q5_0+Q8_0": (FusedWeight(pm(T.Q5_0, 1280, 640, 1), pm(T.Q8_0, 256, 640, 2)), False),
             "qkv Q5_0": (FusedWeight(pm(T.Q5_0, 1536, 640, 1)), False),
             "gate_up Q5_0": (FusedWeight(pm(T.Q5_0, 4096, 640, 3)), True),
             "o Q4_K": (FusedWeight(pm(T.Q4_K, 640, 1024, 4)), False),
             "down Q6_K": (FusedWeight(pm(T.Q6_K, 640, 2048, 5)), False),
             "down Q4_K": (FusedWeight(pm(T.Q4_K, 640, 2048, 6)), False)}
    for name, (fw, gated) in cases.items():
        dense = fw.dense(torch.bfloat16)
        for rows in (1, 4):
            x = (0.1 * torch.randn(rows, fw.shape[1], generator=torch.Generator().manual_seed(9))).bfloat16().cuda()
            N = fw.shape[0] // 2 if gated else fw.shape[0]
            ya = torch.zeros(16, N, dtype=torch.bfloat16, device="cuda")
            yb = torch.zeros_like(ya)
            plan.gemv(x, fw, ya, gated=gated)
            plan.gemv(x, dense, yb, gated=gated)
            d = (ya.float() - yb.float()).abs()[:rows]
            print("tails" if tiles.tails else "no-tails", name, rows, "n diff", int((d > 0).sum()), "of", d.numel(),
                  "max", float(d.max()), "ref max", float(yb.float().abs().max()))
