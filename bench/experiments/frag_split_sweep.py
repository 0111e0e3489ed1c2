"""The frag GEMV per split and row count, and the prefill GEMM per program shape, timed as CUDA-graph
replays over rotating weight copies, at Gemma-3 1B / 4B and Qwen2.5 1.5B shapes.

Why: fragk_gemv_bench.py timed single launches with triton.testing.do_bench, and its figures do not
hold together (session 35: the same split measured 13 and 77 us depending on whether x's words were
made in the GEMV; 4 rows 5x slower than 1 at one split): a launch from Python takes tens of us, the
GPU part of a 4-30 us GEMV far less, so those figures were the host's. The engine replays its steps
as CUDA graphs, so this times graphs: each case a graph of calls over enough copies of the weights
that they do not sit in L2 (bench/timing.py).

Per matrix (random Q4_K_M blocks in each matrix's type): the dense bf16 fused GEMV (the step's
default tiles), frag8 / frag8x at splits 1..32 for 1-4 rows, the dispatcher's default split
(frag_matrix.split_for); a 128-row chunk through frag_gemm at several program shapes. Then per shape
and row count: a step's GEMVs at the default splits, at each matrix's best, and dense.

    python bench/experiments/frag_split_sweep.py [--shapes gemma3-4b,gemma3-1b,qwen2.5-1.5b] [--out F.json]
"""
import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from blocks import random_blocks  # noqa: E402
from timing import time_graph  # noqa: E402

from mtp_turbo.models.arch import BlockSpec  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan  # noqa: E402
from mtp_turbo.quant.dequant import dequantize  # noqa: E402
from mtp_turbo.quant.frag_matrix import frag_matrix  # noqa: E402

Q5_0, Q8_0, Q4_K, Q6_K = 6, 8, 12, 14
FALLBACK = {Q4_K: Q5_0, Q6_K: Q8_0}  # llama-quantize's type for rows that are no multiple of 256
# shape -> (hidden, q rows, kv rows (each), ffn, layers, vocab, spec kwargs)
SHAPES = {
    "gemma3-1b": (1152, 1024, 256, 6912, 26, 262144, dict(n_heads=4, n_kv_heads=1, head_dim=256)),
    "gemma3-4b": (2560, 2048, 1024, 10240, 34, 262144, dict(n_heads=8, n_kv_heads=4, head_dim=256)),
    "qwen2.5-1.5b": (1536, 1536, 256, 8960, 28, 151936, dict(n_heads=12, n_kv_heads=2, head_dim=128)),
}
COPY_BYTES = 160 << 20  # rotate copies until a graph reads this much (H100/H200 L2: 50 / 60 MB)


def mats(shape):
    d, q, kv, f, layers, v, _ = SHAPES[shape]
    m = {"qkv": (q + 2 * kv, d, Q4_K, False), "o": (d, q, Q4_K, False), "gate_up": (2 * f, d, Q4_K, True),
         "down": (d, f, Q6_K, False), "head": (v, d, Q6_K, False)}
    return {nm: (n, k, t if k % 256 == 0 else FALLBACK[t], g) for nm, (n, k, t, g) in m.items()}, layers


def spec_of(shape):
    d, q, kv, f, layers, v, kw = SHAPES[shape]
    qwen = shape.startswith("qwen")
    return BlockSpec(hidden=d, ffn=f, eps=1e-6, query_scale=kw["head_dim"] ** -0.5, qk_norm=not qwen,
                     sandwich_norms=not qwen, activation="silu" if qwen else "gelu_tanh", qkv_bias=qwen, **kw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="gemma3-4b,gemma3-1b,qwen2.5-1.5b")
    p.add_argument("--rows", default="1,2,3,4")
    p.add_argument("--splits", default="1,2,4,8,16,32")
    p.add_argument("--gemm", default="2x16w4,2x64w4,4x32w4,4x64w4,4x64w8,8x64w8,4x128w8,8x128w8")
    p.add_argument("--out")
    a = p.parse_args()
    from mtp_turbo.quant.kernels import frag_gemm

    rows_list = [int(r) for r in a.rows.split(",") if r]  # --rows "": the prefill GEMM alone
    splits = [int(s) for s in a.splits.split(",")]
    out = {}
    for shape in a.shapes.split(","):
        ms, layers = mats(shape)
        plan = LayerPlan(spec_of(shape), FusedTiles(tails=False), torch.bfloat16, torch.device("cuda"))
        step = {}  # (rows, what) -> us a step
        for name, (n, k, t, gated) in ms.items():
            if name == "head" and not rows_list:
                continue
            per = 1 if name == "head" else layers
            raw = torch.from_numpy(random_blocks(t, n, k, 0, scale=1e-4)).cuda()
            fm0 = frag_matrix([(raw, t, (n, k))])
            copies = max(1, min(16, -(-COPY_BYTES // fm0.nbytes)))
            fms = [fm0] + [frag_matrix([(raw.clone(), t, (n, k))]) for _ in range(copies - 1)]
            dense = dequantize(raw, t, (n, k)).to(torch.bfloat16)
            dcopies = max(1, min(16, -(-COPY_BYTES // (dense.numel() * 2))))
            denses = [dense] + [dense.clone() for _ in range(dcopies - 1)]
            nout = n // 2 if gated else n
            res = {"bytes": fm0.nbytes, "default_split": fm0.runs[0].tile.split_k}
            for rows in rows_list:
                x = (0.1 * torch.randn(rows, k, device="cuda")).to(torch.bfloat16)
                y = torch.zeros(16, nout, dtype=torch.bfloat16, device="cuda")
                y32 = torch.zeros(16, n, dtype=torch.float32, device="cuda")
                r = {"dense": time_graph([lambda w=w: plan.gemv(x, w, y, gated=gated, head=name == "head")
                                          for w in denses]) * 1e6}
                r["default"] = time_graph([lambda f=f: f.gemv(x, y32) for f in fms]) * 1e6
                for kern in ("frag8", "frag8x"):
                    for s in splits:
                        alts = [dataclasses.replace(f, runs=(dataclasses.replace(f.runs[0], tile=dataclasses.replace(
                            f.runs[0].tile, kernel=kern, split_k=s)),)) for f in fms]
                        try:
                            r[f"{kern}/{s}"] = time_graph([lambda f=f: f.gemv(x, y32) for f in alts]) * 1e6
                        except Exception as e:  # noqa: BLE001
                            r[f"{kern}/{s}"] = f"error {type(e).__name__}: {e}"[:160]
                nums = {kk: v for kk, v in r.items() if isinstance(v, float) and "/" in kk}
                best = min(nums, key=nums.get)
                r["best"] = best
                res[f"rows {rows}"] = r
                for what, us in (("dense", r["dense"]), ("default", r["default"]), ("best", nums[best])):
                    step[(rows, what)] = step.get((rows, what), 0.0) + us * per
                print(f"{shape} {name} {n}x{k} rows {rows}: dense {r['dense']:.1f} default(s={res['default_split']}) "
                      f"{r['default']:.1f} best {best} {nums[best]:.1f} us ({fm0.nbytes / nums[best] / 1e3:.0f} GB/s) | "
                      + " ".join(f"{kk}={v:.1f}" for kk, v in nums.items()), flush=True)
            if name != "head":  # prefill: a 128-row chunk
                x = (0.1 * torch.randn(128, k, device="cuda")).to(torch.bfloat16)
                y32 = torch.zeros(128, n, dtype=torch.float32, device="cuda")
                y = torch.zeros(128, nout, dtype=torch.bfloat16, device="cuda")
                g = {"dense": time_graph([lambda w=w: plan.gemv(x, w, y, gated=gated) for w in denses]) * 1e6}
                for sh in a.gemm.split(","):  # TBxBMwWARPS[sSTAGES]
                    tb, rest = sh.split("x")
                    bm, w = rest.split("w")
                    w, _, st = w.partition("s")
                    try:
                        g[sh] = time_graph([lambda f=f: frag_gemm.launch(x, f.runs[0].layout, f.runs[0].tile.split_k,
                                                                         y32, int(tb), int(bm), int(w),
                                                                         stages=int(st) if st else None)
                                            for f in fms], reps=3, warm_ms=5, rep_ms=1) * 1e6
                    except Exception as e:  # noqa: BLE001
                        g[sh] = f"error {type(e).__name__}: {e}"[:160]
                res["gemm 128"] = g
                for kk, v in g.items():
                    if isinstance(v, float):
                        step[("gemm", kk)] = step.get(("gemm", kk), 0.0) + v * per
                print(f"{shape} {name} 128 rows: " + " ".join(
                    f"{kk}={v:.0f}" if isinstance(v, float) else f"{kk}={v}" for kk, v in g.items()), flush=True)
            out[f"{shape} {name} {n}x{k}"] = res
            del fms, denses
            torch.cuda.empty_cache()
        for rows in rows_list:
            print(f"{shape} step GEMVs rows {rows}: dense {step[(rows, 'dense')]:.0f} us, frag default "
                  f"{step[(rows, 'default')]:.0f}, frag each best {step[(rows, 'best')]:.0f}")
        print(f"{shape} a 128-row chunk's layer GEMVs: " + ", ".join(
            f"{kk} {v:.0f} us ({128e6 / v:.0f} tok/s)" for (tag, kk), v in step.items() if tag == "gemm"))
        out[f"{shape} step"] = {f"{a_}|{b_}": v for (a_, b_), v in step.items()}
        if a.out:
            Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
