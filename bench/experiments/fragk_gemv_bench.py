"""The frag GEMV on the file's bytes (Q4_K / Q6_K on integer tensor cores) against the dense bf16 fused GEMV,
per matrix of a Gemma-3 4B model, per kernel and split: does a matrix read its file bytes near the copy rate?

Gemma-3 4B's matrices in Q4_K_M's types (q|k|v, o, gate|up Q4_K; down and the head Q6_K) as random
blocks, 1 and 4 rows. Each variant: triton.testing.do_bench (L2 flushed) of FragMatrix.gemv (x words
by x_frag8 then the GEMV: "frag8"; or made inside: "frag8x") at splits 1..32, the layout's bytes and
their GB/s; the dense GEMV (the fused step's default tiles) beside it, and the step total (34 layers
+ the head) at each matrix's best split against dense. Then prefill: a 128-row chunk through
frag_gemm at several program shapes (TB row tiles x BM rows) against the dense GEMV's 128 rows. Predicted before the first run (H200): Q4_K
~2 TB/s of layout bytes on gate|up and the head (frag8 Q4_0 reached 2.3 TB/s on 8192 x 8192, session 8),
a step's GEMVs ~1.4 ms against dense's 3.5 ms.

    python bench/experiments/fragk_gemv_bench.py [--quick] [--out FILE.json]

Superseded by frag_split_sweep.py (session 36): do_bench times a single launch from Python, and for these
4-30 us GEMVs that is the host's launch time, not the GPU's; its decode figures (session 35) are not used.
"""
import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from blocks import random_blocks  # noqa: E402

from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan  # noqa: E402
from mtp_turbo.quant.dequant import dequantize  # noqa: E402
from mtp_turbo.quant.frag_matrix import frag_matrix  # noqa: E402

from plane_gemv_bench import D, F, NQKV, PER_TOKEN, Q4_K, Q6_K, SPEC, V  # noqa: E402  (Gemma-3 4B's shapes)

MATS = {"qkv": (NQKV, D, Q4_K, False), "o": (D, 2048, Q4_K, False), "gate_up": (2 * F, D, Q4_K, True),
        "down": (D, F, Q6_K, False), "head": (V, D, Q6_K, False)}


def main():
    import triton

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    plan = LayerPlan(SPEC, FusedTiles(tails=False), torch.bfloat16, torch.device("cuda"))
    kernels = ("frag8", "frag8x")
    splits = (1, 4, 16) if a.quick else (1, 2, 4, 8, 16, 32)
    out, best, dense_t = {}, {}, {}
    for name, (n, k, t, gated) in MATS.items():
        raw = torch.from_numpy(random_blocks(t, n, k, 0, scale=1e-4)).cuda()
        fm = frag_matrix([(raw, t, (n, k))])
        dense = dequantize(raw, t, (n, k)).to(torch.bfloat16)
        nout = n // 2 if gated else n
        for rows in (1, 4):
            x = (0.1 * torch.randn(rows, k, device="cuda")).to(torch.bfloat16)
            y = torch.zeros(16, nout, dtype=torch.bfloat16, device="cuda")
            y32 = torch.zeros(16, n, dtype=torch.float32, device="cuda")
            ms = triton.testing.do_bench(lambda: plan.gemv(x, dense, y, gated=gated, head=name == "head"),
                                         warmup=5, rep=50)
            res = {"dense_us": ms * 1e3, "dense_GBps": dense.numel() * 2 / ms / 1e6}
            dense_t[(name, rows)] = ms * 1e3
            for kern in kernels:
                for s in splits:
                    run = fm.runs[0]
                    alt = dataclasses.replace(fm, runs=(dataclasses.replace(run, tile=dataclasses.replace(
                        run.tile, kernel=kern, split_k=s)),))
                    try:
                        us = triton.testing.do_bench(lambda: alt.gemv(x, y32), warmup=5, rep=50) * 1e3
                    except Exception as e:  # noqa: BLE001
                        res[f"{kern}/{s}"] = f"error {type(e).__name__}: {e}"[:200]
                        continue
                    res[f"{kern}/{s}"] = {"us": us, "GBps": fm.nbytes / us / 1e3}
                    if us < best.get((name, rows), (1e9, ""))[0]:
                        best[(name, rows)] = (us, f"{kern}/{s}")
            res["default_split"] = fm.runs[0].tile.split_k
            res["default_us"] = triton.testing.do_bench(lambda: fm.gemv(x, y32), warmup=5, rep=50) * 1e3
            out[f"{name} {n}x{k} rows {rows}"] = res
            print(name, rows, json.dumps({kk: (v if not isinstance(v, dict) else round(v["us"], 1))
                                          for kk, v in res.items()}), flush=True)
    # prefill: a 128-row chunk through frag_gemm at several program shapes (a row's bits do not depend
    # on them) against the dense fused GEMV's 128 rows; tok/s of a chunk's GEMVs for the whole model
    from mtp_turbo.quant.kernels import frag_gemm
    shapes = ((2, 16, 4), (4, 64, 4), (4, 64, 8), (8, 64, 8), (4, 128, 8), (8, 32, 4)) if not a.quick \
        else ((2, 16, 4), (4, 64, 4))
    gemm = {sh: 0.0 for sh in shapes}
    dense_pp = 0.0
    for name, (n, k, t, gated) in MATS.items():
        if name == "head":
            continue
        raw = torch.from_numpy(random_blocks(t, n, k, 0, scale=1e-4)).cuda()
        fm = frag_matrix([(raw, t, (n, k))])
        dense = dequantize(raw, t, (n, k)).to(torch.bfloat16)
        x = (0.1 * torch.randn(128, k, device="cuda")).to(torch.bfloat16)
        y32 = torch.zeros(128, n, dtype=torch.float32, device="cuda")
        y = torch.zeros(128, n // 2 if gated else n, dtype=torch.bfloat16, device="cuda")
        dms = triton.testing.do_bench(lambda: plan.gemv(x, dense, y, gated=gated), warmup=3, rep=30)
        dense_pp += dms * 1e3 * PER_TOKEN[name]
        res = {"dense_us": dms * 1e3}
        run = fm.runs[0]
        for tb, bm, w in shapes:
            try:
                us = triton.testing.do_bench(lambda: frag_gemm.launch(x, run.layout, run.tile.split_k, y32, tb, bm, w),
                                             warmup=3, rep=30) * 1e3
            except Exception as e:  # noqa: BLE001
                res[f"gemm {tb}x{bm}w{w}"] = f"error {type(e).__name__}: {e}"[:200]
                gemm[(tb, bm, w)] = float("inf")
                continue
            res[f"gemm {tb}x{bm}w{w}"] = us
            gemm[(tb, bm, w)] += us * PER_TOKEN[name]
        out[f"{name} {n}x{k} rows 128"] = res
        print(name, 128, json.dumps({kk: round(v, 1) if isinstance(v, float) else v for kk, v in res.items()}), flush=True)
    print(f"a 128-row chunk's layer GEMVs: dense {dense_pp:.0f} us ({128e6 / dense_pp:.0f} tok/s), "
          + ", ".join(f"gemm {tb}x{bm}w{w} {v:.0f} us ({128e6 / v:.0f} tok/s)" for (tb, bm, w), v in gemm.items()))
    for rows in (1, 4):
        d = sum(dense_t[(nm, rows)] * PER_TOKEN[nm] for nm in MATS)
        f = sum(best[(nm, rows)][0] * PER_TOKEN[nm] for nm in MATS)
        print(f"rows {rows}: a step's GEMVs dense {d:.0f} us, frag at each best {f:.0f} us "
              f"({', '.join(f'{nm} {best[(nm, rows)][1]}' for nm in MATS)})")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
