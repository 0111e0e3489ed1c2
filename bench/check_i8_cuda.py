"""GPU check: dot_i8 / dot_i8w against dequantize-then-matmul (float64) on odd N, K tails (K not a
multiple of 128), every dot_i8w tile (and dot_i8's head tile) at K = 640, M = 1..4, each block format, and the dispatcher defaults on
a head-class matrix. Run: python bench/check_i8_cuda.py (CUDA). Prints a count; exit 1 on any miss."""
import sys, torch
sys.path.insert(0, ".")
from mtp_turbo.quant.gemv import SUPPORTED_TILES, TileConfig, gemv
from mtp_turbo.quant.repack import PackedWeight
from mtp_turbo.quant import gemv_triton
bad = n_ok = 0
for fmt in ("q8_0", "q5_0", "q4_0"):
    for n, k in ((129, 640), (37, 96), (5, 160), (40001, 672)):
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(n + k))
        pw = PackedWeight.from_dense(w, fmt).to("cuda")
        ref_w = pw.dequantize().double()
        i8w = [t for t in SUPPORTED_TILES if t.kernel == "dot_i8w"]
        tiles = i8w + [TileConfig("dot_i8", 64, 128, 4, 3)] if k == 640 else i8w[:2]
        for t in tiles:
            for m in (1, 2, 3, 4):
                x = torch.randn(m, k, device="cuda")
                out = torch.full((m, n), float("nan"), device="cuda")
                gemv_triton.gemv_packed(x, pw, t, out)
                ref = x.double() @ ref_w.t()
                bound = 1e-6 * (x.double().abs() @ ref_w.abs().t()) + 1e-30
                ok = bool(((out.double() - ref).abs() <= bound).all())
                bad += not ok; n_ok += ok
                if not ok: print("BAD", fmt, n, k, t, m, flush=True)
        for m in (1, 2, 3, 4):  # dispatcher defaults
            x = torch.randn(m, k, device="cuda")
            y = gemv(x, pw)
            ok = bool(((y.double() - x.double() @ ref_w.t()).abs() <= 1e-6 * (x.double().abs() @ ref_w.abs().t()) + 1e-30).all())
            bad += not ok; n_ok += ok
print(f"dot_i8 / dot_i8w on CUDA: {n_ok} cases within the fp32-rounding bound, {bad} outside")
sys.exit(1 if bad else 0)
