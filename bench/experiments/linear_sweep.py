"""Tile sweep of the fused step's GEMV kernel (models/fused_kernels.linear) on Gemma-3-270M's
shapes, one row (and four for the best tiles), weights rotated over > 100 MB so every launch reads
DRAM as the step's distinct layers do. Per shape: us a launch (median of graph replays) for
each (BN, BK, warps, stages), the best ones first.

    python bench/experiments/linear_sweep.py --out $OUT/linear_sweep.json [--shapes qkv,o,gate_up,down,head]
    python bench/experiments/linear_sweep.py --l2     # FusedTiles' defaults only: DRAM vs L2-resident weights

--l2 times each shape's default tile twice: weights rotated (DRAM, as above) and one weight copy
launched again and again (it stays in L2): what a launch would cost if its weights were already in
L2 (the ceiling of an L2 prefetch; FusedTiles.l2_prefetch, measured slower in session 16, is gone).

Each shape runs in its own process (compiles in parallel); the sweep's result is what FusedTiles'
defaults are chosen from, the step bench (bench/step_bench.py --ab) is what confirms them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = {"qkv": (1536, 640, False), "o": (640, 1024, False), "gate_up": (2048, 640, True),
          "down": (640, 2048, False), "head": (262144, 640, False)}


def configs(name: str):
    if name == "head":
        return list(itertools.product((128, 256), (64, 128), (4, 8), (2, 3, 4)))
    out = [(bn, bk, 4, s) for bn, bk, s in itertools.product((8, 16, 32), (128, 256, 512), (2, 3, 4))]
    return out + [(16, bk, w, s) for bk, w, s in itertools.product((128, 256), (2, 8), (3, 4))]


def default_config(name: str) -> tuple[int, int, int, int]:
    from mtp_turbo.models.fused import FusedTiles

    N, K, gated = SHAPES[name]
    bn, bk, launch = FusedTiles().gemv(K, gated, name == "head")
    return bn, bk, launch["num_warps"], launch.get("num_stages", 3)


def sweep(name: str, l2: bool = False) -> list[dict]:
    import torch

    from mtp_turbo.models import fused_kernels as fk

    N, K, gated = SHAPES[name]
    dev = torch.device("cuda")
    rows_w = 2 * N if gated else N
    n_copies = max(2, -(-(160 << 20) // (rows_w * K * 2)))  # > L2 (50 MB) several times over
    ws = [torch.randn(rows_w, K, device=dev).mul_(0.04).to(torch.bfloat16) for _ in range(n_copies)]
    x = torch.randn(16, K, device=dev).to(torch.bfloat16)
    y = torch.empty(16, N, device=dev, dtype=torch.float32 if name == "head" else torch.bfloat16)
    res = []

    def launch(w, M, bn, bk, warps, stages):
        fk.linear[(-(-N // bn), 1)](x, w, y, x, M, N, K, GATED=gated, MP=16, BN=bn, BK=bk, PREC="tf32",
                                    num_warps=warps, num_stages=stages)

    def time_cfg(M, cfg, resident=False):
        for w in ws[:2]:
            launch(w, M, *cfg)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for w in ws:
                launch(ws[0] if resident else w, M, *cfg)
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(12):
            st.record(); g.replay(); en.record(); en.synchronize()
            ts.append(st.elapsed_time(en) * 1e3 / len(ws))
        return statistics.median(ts[2:])

    if l2:
        cfg = default_config(name)
        return [{"shape": name, "bn": cfg[0], "bk": cfg[1], "warps": cfg[2], "stages": cfg[3],
                 "MiB": rows_w * K * 2 / 2**20, "us_dram": time_cfg(1, cfg), "us_l2": time_cfg(1, cfg, True)}]
    ref = None
    for cfg in configs(name):
        try:
            us = time_cfg(1, cfg)
            launch(ws[0], 1, *cfg)
            out = y[:1].float().clone()
            if ref is None:
                ref = (ws[0][:N].float() @ x[:1].float().T).T if not gated else None
            err = float((out - ref).abs().max()) if ref is not None else 0.0
            res.append({"shape": name, "bn": cfg[0], "bk": cfg[1], "warps": cfg[2], "stages": cfg[3], "us1": us,
                        "max_err": err})
        except Exception as e:  # out of resources: not a candidate
            res.append({"shape": name, "bn": cfg[0], "bk": cfg[1], "warps": cfg[2], "stages": cfg[3],
                        "error": f"{type(e).__name__}: {str(e)[:80]}"})
    ok = sorted((r for r in res if "us1" in r), key=lambda r: r["us1"])
    for r in ok[:4]:
        r["us4"] = time_cfg(4, (r["bn"], r["bk"], r["warps"], r["stages"]))
    mb = rows_w * K * 2 / 2**20
    for r in res:
        r["MiB"] = mb
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="qkv,o,gate_up,down,head")
    ap.add_argument("--l2", action="store_true", help="the default tiles only, DRAM vs L2-resident weights")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    names = a.shapes.split(",")
    import multiprocessing as mp

    with ProcessPoolExecutor(max_workers=len(names), mp_context=mp.get_context("spawn")) as ex:
        results = dict(zip(names, ex.map(sweep, names, [a.l2] * len(names))))
    if a.l2:
        for name, (r,) in results.items():
            print(f"{name} ({r['MiB']:.1f} MiB, BN {r['bn']} BK {r['bk']} warps {r['warps']} stages {r['stages']}): "
                  f"DRAM {r['us_dram']:.2f} us, L2-resident {r['us_l2']:.2f} us")
        if a.out:
            json.dump(results, open(a.out, "w"), indent=1)
        return 0
    for name, res in results.items():
        ok = sorted((r for r in res if "us1" in r), key=lambda r: r["us1"])
        base = next((r for r in res if (r["bn"], r["bk"], r["warps"], r["stages"]) == default_config(name)), {})
        print(f"{name} ({ok[0]['MiB']:.1f} MiB): FusedTiles' default {base.get('us1', float('nan')):.2f} us; best:")
        for r in ok[:6]:
            four = f", 4 rows {r['us4']:.2f} us" if "us4" in r else ""
            print(f"   BN {r['bn']:3d} BK {r['bk']:3d} warps {r['warps']} stages {r['stages']}: {r['us1']:.2f} us "
                  f"({r['MiB'] * 2**20 / r['us1'] / 1e3:.0f} GB/s){four}, err {r['max_err']:.2e}")
        errs = [r for r in res if "error" in r]
        if errs:
            print(f"   {len(errs)} configs failed, e.g. {errs[0]['error']}")
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
