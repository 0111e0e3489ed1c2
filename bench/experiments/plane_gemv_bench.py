"""The fused GEMV's time on the file's own bytes against dense bf16, per matrix of a 4B model, per tile.

Gemma-3 4B's matrices in Q4_K_M's types (q|k|v and o and gate|up Q4_K, down Q6_K, the head Q6_K)
as random blocks, 1 and 4 rows; each tile variant's time (triton.testing.do_bench, L2 flushed),
the bytes it reads and the implied GB/s; the dense GEMV at the default tiles beside it.

    python bench/experiments/plane_gemv_bench.py [--quick]
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
from blocks import random_blocks  # noqa: E402

from mtp_turbo.models.arch import BlockSpec  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan  # noqa: E402
from mtp_turbo.quant.planes import FusedWeight, PlaneMatrix  # noqa: E402

Q4_K, Q6_K = 12, 14
D, F, NQKV, V = 2560, 10240, 4096, 262144
# name -> (rows, K, type, gated, tile kind)
MATS = {"qkv": (NQKV, D, Q4_K, False, "tall"), "o": (D, 2048, Q4_K, False, "tall"),
        "gate_up": (2 * F, D, Q4_K, True, "gated"), "down": (D, F, Q6_K, False, "tall"),
        "head": (V, D, Q6_K, False, "head")}
PER_TOKEN = {"qkv": 34, "o": 34, "gate_up": 34, "down": 34, "head": 1}
# one Gemma-3 4B block (the GEMV tiles' and epilogues' switches)
SPEC = BlockSpec(hidden=D, n_heads=8, n_kv_heads=4, head_dim=256, ffn=F, eps=1e-6, query_scale=0.0625,
                 qk_norm=True, sandwich_norms=True, activation="gelu_tanh", qkv_bias=False)


def tiles_for(kind, bn, bk, w, st):
    return FusedTiles(**{f"bn_{kind}": bn, f"bk_{kind}": bk, f"warps_{kind}": w, f"stages_{kind}": st},
                      tails=False)


def main():
    import triton

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    spec = SPEC
    variants = [(bn, bk, w, 3) for bn in (32, 64, 128) for bk in (128, 256, 512) for w in (4, 8)]
    if a.quick:
        variants = [(32, 256, 4, 3), (64, 256, 4, 3), (128, 256, 8, 3)]
    out = {}
    for name, (n, k, t, gated, kind) in MATS.items():
        raw = torch.from_numpy(random_blocks(t, n, k, 0, scale=1e-4)).cuda()
        pm = PlaneMatrix.from_gguf(raw, t, (n, k))
        fw, dense = FusedWeight(pm), pm.dequantize().to(torch.bfloat16)
        nout = n // 2 if gated else n
        for rows in (1, 4):
            x = (0.1 * torch.randn(rows, k, device="cuda")).to(torch.bfloat16)
            y = torch.zeros(16, nout, dtype=torch.bfloat16, device="cuda")
            res = {}
            plan = LayerPlan(spec, FusedTiles(tails=False), torch.bfloat16, torch.device("cuda"))
            ms = triton.testing.do_bench(lambda: plan.gemv(x, dense, y, gated=gated, head=kind == "head"), warmup=5,
                                         rep=40)
            res["dense"] = (ms * 1e3, dense.numel() * 2 / ms / 1e6)
            vs = variants if rows == 1 else sorted(variants, key=lambda v: out[f"{name}/1"][str(v)][0])[:3]
            for v in vs:
                try:
                    pl = LayerPlan(spec, tiles_for(kind, *v), torch.bfloat16, torch.device("cuda"))
                    ms = triton.testing.do_bench(lambda: pl.gemv(x, fw, y, gated=gated, head=kind == "head"),
                                                 warmup=5, rep=40)
                    res[str(v)] = (ms * 1e3, pm.nbytes / ms / 1e6)
                except Exception as e:  # noqa: BLE001
                    res[str(v)] = (float("nan"), f"{type(e).__name__}: {str(e)[:80]}")
            best = min((r for r in res.items() if r[0] != "dense" and r[1][0] == r[1][0]), key=lambda r: r[1][0])
            print(f"{name:8s} rows {rows}: dense {res['dense'][0]:8.1f} us ({res['dense'][1]:6.0f} GB/s) | best plane "
                  f"{best[0]} {best[1][0]:8.1f} us ({best[1][1]:6.0f} GB/s) | default-tile plane "
                  f"{res.get(str((32, 256, 4, 3)), (float('nan'),))[0]:8.1f} us", flush=True)
            res = {k: (v[0] if v[0] == v[0] else 1e9, v[1]) for k, v in res.items()}
            out[f"{name}/{rows}"] = res
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)
    for rows in (1, 4):
        dense = sum(PER_TOKEN[m] * out[f"{m}/{rows}"]["dense"][0] for m in MATS)
        plane = sum(PER_TOKEN[m] * min(v[0] for kk, v in out[f"{m}/{rows}"].items() if kk != "dense" and v[0] == v[0])
                    for m in MATS)
        print(f"rows {rows}: a step's GEMVs, dense {dense / 1e3:.3f} ms, best planes {plane / 1e3:.3f} ms")


if __name__ == "__main__":
    main()
