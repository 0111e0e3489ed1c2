"""GPU check of the integer-tensor-core kernels (quant/gemv_i8.py): dot_i8, dot_i8w and dot_i8n against dequantize-then-matmul (float64) on odd N, K tails (K not a multiple of 128 or 256), every
dot_i8w / dot_i8n tile (split-K ones included) at K = 640, M = 1..4, each block format, dot_i8n
with and without its PTX nibble split, and the dispatcher defaults. Then times dot_i8n's PTX split
against plain Triton ops on the 262144 x 640 head (M = 1, q4_0 and q5_0; CUDA-graph replay over
rotating copies, as bench/gemv_bench.py). Run: python bench/check_i8_cuda.py [--kernels
dot_i8w,dot_i8n] [--no-timing] (CUDA). Exit 1 on any miss."""
import argparse
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "bench")
from gemv_bench import packed_copies, time_graph  # noqa: E402

from mtp_turbo.quant import gemv_i8, gemv_triton  # noqa: E402
from mtp_turbo.quant.gemv import SUPPORTED_TILES, TileConfig, gemv, parse_tile  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402


def within(out, x, ref_w):
    ref = x.double() @ ref_w.t()
    bound = 1e-6 * (x.double().abs() @ ref_w.abs().t()) + 1e-30
    return bool(((out.double() - ref).abs() <= bound).all())


ap = argparse.ArgumentParser()
ap.add_argument("--kernels", default="dot_i8w,dot_i8n", help="which wide kernels' tiles to check")
ap.add_argument("--no-timing", action="store_true", help="skip the PTX vs plain timing")
ap.add_argument("--tiles", default="", help="';'-separated tiles: check only these, on every shape and 1-4 rows")
args = ap.parse_args()
bad = n_ok = 0
wide = [t for t in SUPPORTED_TILES if t.kernel in args.kernels.split(",")]
for fmt in ("q8_0", "q5_0", "q4_0"):
    for n, k in ((129, 640), (37, 96), (5, 160), (40001, 672), (300, 2080)):
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(n + k))
        pw = PackedWeight.from_dense(w, fmt).to("cuda")
        ref_w = pw.dequantize().double()
        firsts = [next(t for t in wide if t.kernel == kn) for kn in dict.fromkeys(t.kernel for t in wide)]
        only = [parse_tile(t) for t in args.tiles.split(";") if t]
        tiles = wide + [TileConfig("dot_i8", 64, 128, 4, 3)] if k == 640 else firsts + [
            TileConfig("dot_i8n", 64, 128, 4, 2), TileConfig("dot_i8n", 64, 128, 4, 2, 4)]
        tiles = only or tiles
        for t in tiles:
            for m in (1, 4) if (k == 640 and not only) else (1, 2, 3, 4):  # every tile: 1 and 4 rows (compiles)
                for asm in ((True, False) if t.kernel == "dot_i8n" and fmt != "q8_0" and m in (1, 4) else (None,)):
                    x = torch.randn(m, k, device="cuda")
                    out = torch.full((m, n), float("nan"), device="cuda")
                    try:
                        if asm is None:
                            gemv_triton.gemv_packed(x, pw, t, out)
                        else:
                            gemv_i8.launch(x, pw, t, out, asm=asm)
                        ok = within(out, x, ref_w)
                    except Exception as e:  # a tile that does not compile or launch counts as a miss
                        print("FAILED", fmt, n, k, t, m, asm, f"{type(e).__name__}: {str(e)[:120]}", flush=True)
                        ok = False
                    bad += not ok
                    n_ok += ok
                    if not ok:
                        print("BAD", fmt, n, k, t, m, asm, flush=True)
        for m in () if only else (1, 2, 3, 4):  # dispatcher defaults
            x = torch.randn(m, k, device="cuda")
            ok = within(gemv(x, pw), x, ref_w)
            bad += not ok
            n_ok += ok
print(f"integer kernels on CUDA: {n_ok} cases within the fp32-rounding bound, {bad} outside", flush=True)

w = torch.randn(262144, 640, generator=torch.Generator().manual_seed(1)) * 0.02
for fmt in () if args.no_timing else ("q4_0", "q5_0"):
    copies = packed_copies(w, fmt)
    x = torch.randn(1, 640, device="cuda")
    out = torch.empty(1, 262144, device="cuda")
    for t in (TileConfig("dot_i8n", 64, 128, 4, 2), TileConfig("dot_i8n", 64, 128, 4, 3, 1, 4)):
        res = []
        for asm in (True, False):
            s = time_graph([(lambda c=c, a=asm: gemv_i8.launch(x, c, t, out, asm=a)) for c in copies])
            res.append(f"{'ptx' if asm else 'plain'} {s * 1e6:.1f} us")
        print(f"dot_i8n {fmt} 262144x640 M=1 {t}: " + ", ".join(res), flush=True)
sys.exit(1 if bad else 0)
