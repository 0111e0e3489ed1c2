"""Drive GEMV cases for Nsight Compute: one compile/warm-up call per case outside the profiled range,
then one call per case inside it (cudaProfilerStart/Stop), so `ncu --profile-from-start off` sees
exactly one launch of each case's kernels.

    ncu --clock-control none --profile-from-start off -k regex:gemv --section SpeedOfLight ... \
        python3 bench/ncu_gemv.py --cases "262144x640:q4_0:1:frag8,32,64,4,2;..."

A case is SHAPE:FMT:M[:TILE] (TILE as --draft-tile; default: the dispatcher's choice). Each case's
output is checked against dequantize-then-matmul (fp32) and the max relative error printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mtp_turbo.quant.formats import quantize_tensor  # noqa: E402
from mtp_turbo.quant.gemv import default_tile, gemv, parse_tile  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="';'-separated SHAPE:FMT:M[:TILE]")
    args = ap.parse_args(argv)
    weights: dict[tuple, PackedWeight] = {}
    runs = []
    for spec in args.cases.split(";"):
        shape, fmt, m, *tile = spec.split(":")
        n, k = (int(v) for v in shape.split("x"))
        key = (n, k, fmt)
        if key not in weights:
            w = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(n + k))
            weights[key] = PackedWeight.from_gguf_bytes(quantize_tensor(w, fmt).cpu(), fmt, (n, k)).to("cuda")
        pw = weights[key]
        t = parse_tile(tile[0]) if tile else default_tile(n, k, int(m), fmt)
        x = torch.randn(int(m), k, device="cuda")
        out = torch.empty(int(m), n, device="cuda")
        gemv(x, pw, t, out)  # compile outside the profiled range
        ref = x @ pw.dequantize().t()
        err = float((out - ref).abs().max() / ref.abs().max())
        print(f"{spec} -> {t}: rel err {err:.2e}", flush=True)
        runs.append((x, pw, t, out))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for x, pw, t, out in runs:
        gemv(x, pw, t, out)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
