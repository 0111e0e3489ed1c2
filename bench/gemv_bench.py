"""GEMV benchmark on CUDA: Q8_0 / Q5_0 / Q4_0 Triton kernels for 1-4 rows vs torch bf16 matmul.

Run from the repo root on a machine with torch + triton + CUDA:
    python bench/gemv_bench.py [--out results.json] [--sweep] [--shapes 1024x640,640x2048]

Measures the device-to-device copy bandwidth (bytes read + written), then for each format, M in
1..4 and shape: correctness against dequantize-then-matmul (float64), the median time per call
(CUDA-graph replay of calls over rotating weight copies, so small matrices are not served from
L2 and Python launch overhead is not counted), the effective bandwidth ((weight + x + y bytes) /
time) as a fraction of the copy bandwidth, and torch bf16 matmul on the same shape beside it.
--sweep also times every supported tile at M = 1 and M = 4 and prints the best per shape/format.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mtp_turbo.quant.bytefloor import measure_copy_bandwidth  # noqa: E402
from mtp_turbo.quant.gemv import SUPPORTED_TILES, default_tile, gemv  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402

DRAFTER_SHAPES = [(1024, 640), (640, 1024), (2048, 640), (640, 2048), (256, 640)]
BIG_SHAPES = [(262144, 640), (8192, 8192)]
FORMATS = ("q8_0", "q5_0", "q4_0")
ROTATE_BYTES = 256 << 20  # rotate over at least this many weight bytes (> L2 of any current GPU)


def _copies(nbytes: int) -> int:
    return max(1, min(2048, math.ceil(ROTATE_BYTES / nbytes)))


def time_graph(fn_list, reps: int = 7) -> float:
    """Median seconds per call of the callables in fn_list, replayed as one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fn_list[:2]:
            fn()  # compile / warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fn_list:
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / len(fn_list))
    del g
    return statistics.median(times)


def packed_copies(w: torch.Tensor, fmt: str) -> list[PackedWeight]:
    """Device copies of w quantized to fmt (one quantization, copied arrays), enough to rotate."""
    try:  # quantize on the GPU (the CPU path takes minutes for the big shapes)
        from mtp_turbo.quant.formats import quantize_tensor

        raw = quantize_tensor(w.cuda(), fmt).cpu()
        base = PackedWeight.from_gguf_bytes(raw, fmt, tuple(w.shape)).to("cuda")
    except ImportError:
        base = PackedWeight.from_dense(w.cpu(), fmt).to("cuda")
    n = _copies(base.nbytes)
    out = [base]
    for _ in range(n - 1):
        out.append(PackedWeight(base.fmt, base.shape, base.qs.clone(),
                                None if base.scales is None else base.scales.clone(),
                                None if base.qh is None else base.qh.clone()))
    return out


def bench_shape(n: int, k: int, copy_bw: float, sweep: bool) -> list[dict]:
    gen = torch.Generator().manual_seed(n * 31 + k)
    w = torch.randn(n, k, generator=gen) * 0.02
    rows = []
    # torch bf16 matmul baseline
    wb = w.to(torch.bfloat16).cuda()
    dense = [wb] + [wb.clone() for _ in range(_copies(wb.numel() * 2) - 1)]
    for m in range(1, 5):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        t = time_graph([(lambda d=d: torch.matmul(x, d.t(), out=y)) for d in dense])
        moved = wb.numel() * 2 + x.numel() * 2 + y.numel() * 2
        rows.append(dict(shape=f"{n}x{k}", fmt="bf16(torch)", M=m, us=t * 1e6, bytes=moved,
                         gbs=moved / t / 1e9, frac=moved / t / 1e9 / copy_bw, err=0.0, tile="cublas"))
    del dense, wb
    for fmt in FORMATS:
        ws = packed_copies(w, fmt)
        ref_w = ws[0].dequantize().double()
        tiles = [default_tile(n, k)]
        if sweep:
            tiles += [t for t in SUPPORTED_TILES if t != tiles[0]]
        for m in range(1, 5):
            x = torch.randn(m, k, device="cuda")
            out = torch.full((m, n), float("nan"), device="cuda")
            ref = x.double() @ ref_w.t()
            for tile in tiles if (m in (1, 4) or not sweep) else tiles[:1]:
                out.fill_(float("nan"))
                gemv(x, ws[0], tile, out)
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                t = time_graph([(lambda p=p: gemv(x, p, tile, out)) for p in ws])
                moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4
                rows.append(dict(shape=f"{n}x{k}", fmt=fmt, M=m, us=t * 1e6, bytes=moved,
                                 gbs=moved / t / 1e9, frac=moved / t / 1e9 / copy_bw, err=err,
                                 tile=str(tile), default=tile == tiles[0]))
        del ws, ref_w
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--sweep", action="store_true", help="also time every supported tile (M = 1, 4)")
    ap.add_argument("--shapes", default=None, help="comma-separated NxK (default: drafter + big shapes)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemv_bench: needs a CUDA device", file=sys.stderr)
        return 2
    from mtp_turbo.quant import gemv_triton

    if not gemv_triton.available():
        print("gemv_bench: needs triton", file=sys.stderr)
        return 2
    shapes = ([tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
              if args.shapes else DRAFTER_SHAPES + BIG_SHAPES)
    copy_bw = measure_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {copy_bw:.0f} GB/s (read + written)")
    rows = []
    for n, k in shapes:
        rows += bench_shape(n, k, copy_bw, args.sweep)
    print("| shape | fmt | M | tile | us | GB/s | of copy bw | max rel err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("default", True):
            print(f"| {r['shape']} | {r['fmt']} | {r['M']} | {r['tile']} | {r['us']:.2f} | {r['gbs']:.0f} "
                  f"| {100 * r['frac']:.0f}% | {r['err']:.1e} |")
    if args.sweep:
        print("\nbest tile per shape / format / M (sweep):")
        print("| shape | fmt | M | default tile | us | best tile | us |")
        print("|---|---|---|---|---|---|---|")
        keys = sorted({(r["shape"], r["fmt"], r["M"]) for r in rows if r["fmt"] in FORMATS and r["M"] in (1, 4)})
        for key in keys:
            cand = [r for r in rows if (r["shape"], r["fmt"], r["M"]) == key]
            d = next(r for r in cand if r.get("default"))
            b = min(cand, key=lambda r: r["us"])
            print(f"| {key[0]} | {key[1]} | {key[2]} | {d['tile']} | {d['us']:.2f} | {b['tile']} | {b['us']:.2f} |")
    bad = [r for r in rows if r["err"] > 1e-4]
    for r in bad:
        print(f"WRONG RESULT: {r}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=torch.cuda.get_device_name(),
                                                  copy_bw_gbs=copy_bw, rows=rows), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
