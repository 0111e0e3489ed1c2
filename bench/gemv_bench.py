"""GEMV benchmark: the Q8_0 / Q5_0 / Q4_0 kernels for 1-4 rows vs torch bf16 matmul.

Run from the repo root on a machine with torch + triton + CUDA:
    python bench/gemv_bench.py [--out results.json] [--sweep] [--shapes 1024x640,640x2048]
        [--kernels default,dot_bf16x3,dot_i8w,frag8,frag8x] [--formats q8_0,q5_0,q4_0]

Measures the device-to-device copy bandwidth (bytes read + written), then for each shape, format,
kernel (gemv.KERNELS, each at its default tile for the shape, `variant_tile` below) and
M = 1..4: correctness against dequantize-then-matmul (float64), the median time per call
(CUDA-graph replay of calls over rotating weight copies, so small matrices are not served from
L2 and Python launch overhead is not counted), the effective bandwidth ((weight + x + y bytes) /
time) as a fraction of the copy bandwidth, and torch bf16 matmul on the same shape beside it.
A variant that fails to compile or run is reported (error column) and the run goes on.
--sweep also times every supported tile (or only those of --tiles) at M = 1 and M = 4 (--sweep-rows)
and prints the best per shape/format. --read-floor adds, per shape and format, the fastest of a few
plain read kernels over the same number of bytes (kernel "read", same replay): what one launch that
only streams these bytes takes here, launch and ramp included.
Without CUDA: runs each variant once in Triton's interpreter on a small shape (correctness only)
and says that the timings were skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

if not torch.cuda.is_available():  # before anything imports triton: its CPU interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from timing import time_graph  # noqa: E402  (bench/timing.py: this folder is on sys.path)
from mtp_turbo.check.bytefloor import measure_copy_bandwidth  # noqa: E402
from mtp_turbo.quant import kernels as quant_kernels  # noqa: E402
from mtp_turbo.quant.gemv import (  # noqa: E402
    DEFAULT_TILES, HOPPER_KERNELS, KERNELS, SUPPORTED_TILES, TileConfig, default_tile, gemv, parse_tile, tile_class)
from mtp_turbo.quant.formats import quantize_tensor  # noqa: E402
from mtp_turbo.quant.kernels.frag8 import for_weight8  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402

DRAFTER_SHAPES = [(1024, 640), (640, 1024), (2048, 640), (640, 2048), (256, 640)]
BIG_SHAPES = [(262144, 640), (8192, 8192)]
FORMATS = ("q8_0", "q5_0", "q4_0")
ROTATE_BYTES = 256 << 20  # rotate over at least this many weight bytes (> L2 of any current GPU)


# Each kernel's tile per matrix class when it is not the class default (A/B runs of one kernel on
# every shape): dot_bf16x3 takes DEFAULT_TILES' shapes (the head: its best head tile).
_VARIANT_TILES = {
    "dot_i8w": {"head": (64, 128, 4, 2), "large": (64, 128, 4, 2), "tall": (32, 128, 4, 2), "wide": (32, 128, 4, 2)},
    "frag8": {"head": (32, 64, 4, 2), "large": (32, 64, 4, 2, 16), "tall": (32, 64, 4, 2, 16), "wide": (32, 64, 4, 2, 16)},
}
_VARIANT_TILES["frag8x"] = _VARIANT_TILES["frag8"]


def variant_tile(kernel: str, n_out: int, k: int) -> TileConfig:
    """The tile of `kernel` an A/B run takes for an [n_out, k] matrix (its shape class)."""
    assert kernel in KERNELS, kernel
    cls = tile_class(n_out, k)
    if kernel in _VARIANT_TILES:
        return TileConfig(kernel, *_VARIANT_TILES[kernel][cls])
    d = DEFAULT_TILES[cls]
    return d if d.kernel == kernel else TileConfig(kernel, 128, 64, 4, 3)


def _copies(nbytes: int) -> int:
    return max(1, min(2048, math.ceil(ROTATE_BYTES / nbytes)))


def read_floor(nbytes: int) -> tuple[float, str]:
    """(seconds, 'read,BLOCK,WARPS') of the fastest plain read of nbytes (int32 words, one partial a
    program) over rotating copies, replayed as gemv calls are."""
    import triton
    import triton.language as tl

    @triton.jit
    def _read(P, OUT, NW, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(OUT + tl.program_id(0), tl.sum(tl.load(P + offs, mask=offs < NW, other=0), axis=0))

    nw = nbytes // 4
    bufs = [torch.zeros(nw, dtype=torch.int32, device="cuda") for _ in range(_copies(nbytes))]
    best = (float("inf"), "")
    for block, warps in ((2048, 4), (4096, 8), (8192, 8), (16384, 16)):
        out = torch.empty(triton.cdiv(nw, block), dtype=torch.int32, device="cuda")
        t = time_graph([(lambda b=b: _read[(triton.cdiv(nw, block),)](b, out, nw, BLOCK=block, num_warps=warps))
                        for b in bufs])
        best = min(best, (t, f"read,{block},{warps}"))
    return best


def packed_copies(w: torch.Tensor, fmt: str) -> list[PackedWeight]:
    """Device copies of w quantized to fmt (one quantization, copied arrays), enough to rotate."""
    raw = quantize_tensor(w.cuda(), fmt).cpu()  # quantized on the GPU (on the CPU: minutes for the big shapes)
    base = PackedWeight.from_gguf_bytes(raw, fmt, tuple(w.shape)).to("cuda")
    n = _copies(base.nbytes)
    out = [base]
    for _ in range(n - 1):
        out.append(PackedWeight(base.fmt, base.shape, base.qs.clone(),
                                None if base.scales is None else base.scales.clone(),
                                None if base.qh is None else base.qh.clone()))
    return out


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _fail(e: Exception) -> str:
    msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    print(f"  FAILED: {msg}", file=sys.stderr)
    traceback.print_exc(limit=2, file=sys.stderr)
    return msg


def bench_shape(n: int, k: int, copy_bw: float, sweep: bool, kernels, formats, sweep_rows=(1, 4),
                only=(), floor: bool = False) -> list[dict]:
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
        rows.append(dict(shape=f"{n}x{k}", fmt="bf16", kernel="torch", M=m, us=t * 1e6, bytes=moved,
                         gbs=moved / t / 1e9, frac=moved / t / 1e9 / copy_bw, err=0.0, tile="cublas",
                         default=True))
    del dense, wb
    for fmt in formats:
        ws = packed_copies(w, fmt)
        if floor:
            t, tile = read_floor(ws[0].nbytes)
            rows.append(dict(shape=f"{n}x{k}", fmt=fmt, kernel="read", M=0, tile=tile, us=t * 1e6,
                             bytes=ws[0].nbytes, gbs=ws[0].nbytes / t / 1e9, frac=ws[0].nbytes / t / 1e9 / copy_bw,
                             err=0.0, default=True))
        if set(HOPPER_KERNELS) & set(kernels) or ("default" in kernels and any(
                default_tile(n, k, m, fmt).kernel in HOPPER_KERNELS for m in range(1, 5))):
            for p in ws:  # its layout, built before any CUDA-graph capture (gemv would build it on first use)
                for_weight8(p)
        ref_w = ws[0].dequantize().double()
        for kernel in kernels:
            # "default": what the dispatcher picks per row count and format (gemv.default_tile)
            tiles = [None] if kernel == "default" else [variant_tile(kernel, n, k)]
            if sweep and kernel != "default":
                tiles += [t for t in (only or SUPPORTED_TILES) if t.kernel == kernel and t != tiles[0]]
            for m in range(1, 5):
                x = torch.randn(m, k, device="cuda")
                out = torch.full((m, n), float("nan"), device="cuda")
                ref = x.double() @ ref_w.t()
                for tile in tiles if (m in sweep_rows or not sweep) else tiles[:1]:
                    row = dict(shape=f"{n}x{k}", fmt=fmt, kernel=kernel, M=m,
                               tile=str(tile or default_tile(n, k, m, fmt)), default=tile == tiles[0])
                    print(f"  {row['shape']} {fmt} {tile} M={m}", file=sys.stderr, flush=True)
                    try:
                        out.fill_(float("nan"))
                        gemv(x, ws[0], tile, out)
                        torch.cuda.synchronize()
                        err = _err(out, ref)
                        t = time_graph([(lambda p=p: gemv(x, p, tile, out)) for p in ws])
                    except Exception as e:  # a compile / launch failure of one variant: report, go on
                        row.update(error=_fail(e), us=float("nan"), gbs=float("nan"), frac=float("nan"),
                                   err=float("nan"), bytes=0)
                        torch.cuda.synchronize()
                        rows.append(row)
                        continue
                    moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4
                    row.update(us=t * 1e6, bytes=moved, gbs=moved / t / 1e9, frac=moved / t / 1e9 / copy_bw,
                               err=err)
                    rows.append(row)
        del ws, ref_w
        torch.cuda.empty_cache()
    return rows


def check_interpreter(kernels, formats) -> list[dict]:
    """No CUDA: each variant once per M on a small odd shape in Triton's interpreter."""
    n, k = 40, 96
    rows = []
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(0))
    for fmt in formats:
        pw = PackedWeight.from_dense(w, fmt)
        ref_w = pw.dequantize().double()
        for kernel in kernels:
            for m in range(1, 5):
                tile = default_tile(n, k, m, fmt) if kernel == "default" else variant_tile(kernel, n, k)
                x = torch.randn(m, k)
                out = torch.full((m, n), float("nan"))
                row = dict(shape=f"{n}x{k}", fmt=fmt, kernel=kernel, M=m, tile=str(tile), default=True,
                           us=float("nan"), gbs=float("nan"), frac=float("nan"), bytes=0)
                try:
                    quant_kernels.gemv_packed(x, pw, tile, out)
                    row["err"] = _err(out, x.double() @ ref_w.t())
                except Exception as e:
                    row.update(error=_fail(e), err=float("nan"))
                rows.append(row)
    return rows


def print_table(rows: list[dict], sweep: bool) -> None:
    print("| shape | fmt | kernel | M | tile | us | GB/s | of copy bw | max rel err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("default", True):
            extra = f" FAILED: {r['error']}" if r.get("error") else ""
            print(f"| {r['shape']} | {r['fmt']} | {r['kernel']} | {r['M']} | {r['tile']} | {r['us']:.2f} "
                  f"| {r['gbs']:.0f} | {100 * r['frac']:.0f}% | {r['err']:.1e}{extra} |")
    ok = [r for r in rows if not r.get("error") and r["kernel"] not in ("torch", "read") and r.get("default", True)]
    if ok and not math.isnan(ok[0]["us"]):
        print("\nbest variant per shape / format / M (default tiles), time vs M=1 of the same variant:")
        print("| shape | fmt | M | best kernel | us | of copy bw | us / us(M=1) |")
        print("|---|---|---|---|---|---|---|")
        for key in sorted({(r["shape"], r["fmt"], r["M"]) for r in ok}):
            b = min((r for r in ok if (r["shape"], r["fmt"], r["M"]) == key), key=lambda r: r["us"])
            one = next((r for r in ok if (r["shape"], r["fmt"], r["kernel"], r["M"]) == key[:2] + (b["kernel"], 1)), b)
            print(f"| {key[0]} | {key[1]} | {key[2]} | {b['kernel']} | {b['us']:.2f} | {100 * b['frac']:.0f}% "
                  f"| {b['us'] / one['us']:.2f} |")
    if sweep:
        print("\nbest tile per shape / format / kernel / M (sweep):")
        print("| shape | fmt | kernel | M | default tile | us | best tile | us |")
        print("|---|---|---|---|---|---|---|---|")
        good = [r for r in rows if not r.get("error") and r["kernel"] not in ("torch", "read")]
        for key in sorted({(r["shape"], r["fmt"], r["kernel"], r["M"]) for r in good}):
            cand = [r for r in good if (r["shape"], r["fmt"], r["kernel"], r["M"]) == key]
            d = next((r for r in cand if r.get("default")), None)
            b = min(cand, key=lambda r: r["us"])
            print(f"| {' | '.join(map(str, key))} | {d['tile'] if d else '-'} | {d['us'] if d else float('nan'):.2f} "
                  f"| {b['tile']} | {b['us']:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--sweep", action="store_true", help="also time every supported tile (at --sweep-rows)")
    ap.add_argument("--sweep-rows", default="1,4", help="row counts the sweep times every tile at")
    ap.add_argument("--tiles", default="", help="';'-separated tiles: the sweep times only these (of each kernel)")
    ap.add_argument("--shapes", default=None, help="comma-separated NxK (default: drafter + big shapes)")
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help="kernel variants to measure ('default' = the dispatcher's choice per row count and format)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="block formats to measure")
    ap.add_argument("--read-floor", action="store_true", help="also time plain reads of each weight's bytes")
    args = ap.parse_args(argv)
    kernels = [k for k in args.kernels.split(",") if k]
    formats = [f for f in args.formats.split(",") if f]
    assert set(kernels) <= set(KERNELS) | {"default"} and set(formats) <= set(FORMATS), (kernels, formats)
    if not quant_kernels.available():
        print("gemv_bench: needs triton", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gemv_bench: no CUDA device: timings and bandwidth SKIPPED; checking each kernel variant "
              "in Triton's CPU interpreter on a small shape instead")
        rows, device, copy_bw = check_interpreter(kernels, formats), "cpu (Triton interpreter)", float("nan")
    else:
        shapes = ([tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
                  if args.shapes else DRAFTER_SHAPES + BIG_SHAPES)
        copy_bw = measure_copy_bandwidth()
        device = torch.cuda.get_device_name()
        print(f"device: {device}; copy bandwidth {copy_bw:.0f} GB/s (read + written)")
        rows = []
        for n, k in shapes:
            rows += bench_shape(n, k, copy_bw, args.sweep, kernels, formats,
                                tuple(int(v) for v in args.sweep_rows.split(",")),
                                tuple(parse_tile(t) for t in args.tiles.split(";") if t), args.read_floor)
    print_table(rows, args.sweep)
    bad = [r for r in rows if not (r["err"] <= 1e-5)]  # NaN (failed) counts as bad
    for r in bad:
        print(f"WRONG RESULT OR FAILURE: {r}", file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(dict(device=device, copy_bw_gbs=copy_bw, rows=rows), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
