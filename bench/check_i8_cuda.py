"""GPU check of the GEMV kernels (quant/kernels/) against dequantize-then-matmul (float64), within the
fp32-rounding bound |err| <= 1e-6 sum |x w|: every supported tile of --kernels (split-K ones included)
at K = 640 and 1 and 4 rows, each kernel's first tiles on odd N and K tails (K not a multiple of 128
or 256) at 1-4 rows, each block format, and the dispatcher's defaults. Run: python
bench/check_i8_cuda.py [--kernels dot_i8w,frag8,frag8x] [--tiles "T1;T2"] (CUDA). Exit 1 on any miss."""
import argparse
import sys

import torch

sys.path.insert(0, ".")
from mtp_turbo.quant import kernels  # noqa: E402
from mtp_turbo.quant.gemv import KERNELS, SUPPORTED_TILES, gemv, parse_tile  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402


def within(out, x, ref_w):
    ref = x.double() @ ref_w.t()
    bound = 1e-6 * (x.double().abs() @ ref_w.abs().t()) + 1e-30
    return bool(((out.double() - ref).abs() <= bound).all())


ap = argparse.ArgumentParser()
ap.add_argument("--kernels", default="dot_i8w,frag8,frag8x", help=f"which kernels' tiles to check (of {KERNELS})")
ap.add_argument("--tiles", default="", help="';'-separated tiles: check only these, on every shape and 1-4 rows")
args = ap.parse_args()
assert set(args.kernels.split(",")) <= set(KERNELS), args.kernels
bad = n_ok = 0
wide = [t for t in SUPPORTED_TILES if t.kernel in args.kernels.split(",")]
only = [parse_tile(t) for t in args.tiles.split(";") if t]
# per kernel: its first whole tile and its first split one (the odd shapes compile these only)
firsts = [next(t for t in wide if t.kernel == kn and (t.split_k > 1) == split)
          for kn in dict.fromkeys(t.kernel for t in wide) for split in (False, True)
          if any(t.kernel == kn and (t.split_k > 1) == split for t in wide)]
for fmt in ("q8_0", "q5_0", "q4_0"):
    for n, k in ((129, 640), (37, 96), (5, 160), (40001, 672), (300, 2080)):
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(n + k))
        pw = PackedWeight.from_dense(w, fmt).to("cuda")
        ref_w = pw.dequantize().double()
        tiles = only or (wide if k == 640 else firsts)
        for t in tiles:
            for m in (1, 4) if (k == 640 and not only) else (1, 2, 3, 4):  # every tile: 1 and 4 rows (compiles)
                x = torch.randn(m, k, device="cuda")
                out = torch.full((m, n), float("nan"), device="cuda")
                try:
                    kernels.gemv_packed(x, pw, t, out)
                    ok = within(out, x, ref_w)
                except Exception as e:  # a tile that does not compile or launch counts as a miss
                    print("FAILED", fmt, n, k, t, m, f"{type(e).__name__}: {str(e)[:120]}", flush=True)
                    ok = False
                bad += not ok
                n_ok += ok
                if not ok:
                    print("BAD", fmt, n, k, t, m, flush=True)
        for m in () if only else (1, 2, 3, 4):  # dispatcher defaults
            x = torch.randn(m, k, device="cuda")
            ok = within(gemv(x, pw), x, ref_w)
            bad += not ok
            n_ok += ok
print(f"GEMV kernels on CUDA: {n_ok} cases within the fp32-rounding bound, {bad} outside", flush=True)
sys.exit(1 if bad else 0)
