"""A/B of the frag GEMVs' launch options (gemv_frag / gemv_frag8 .launch keywords) on the same tiles, same run.

Run from the repo root on a CUDA machine:
    python bench/frag_ab.py [--shapes 262144x640,8192x8192] [--formats q4_0,q5_0,q8_0] [--rows 1,4]
        [--tiles "frag,32,64,2,3;frag,16,64,4,2,8,8"] [--variants "groups=2;groups=0"] [--out F]
    (frag8 tiles: e.g. --tiles "frag8,32,64,4,2,8" --variants "fuse=0;fuse=1"; "make_x=1;make_x=0" times
    the GEMV without making x's words: what x_frag8 (or frag8x's own) costs)

For each shape, format, tile, row count and variant: the result against dequantize-then-matmul
(float64; a variant off by more than 1e-5 relative is reported WRONG) and the median time per call
(gemv_bench's CUDA-graph replay over rotating weight copies), as µs and as a fraction of the copy
bandwidth measured at the start (weight GGUF bytes + x + y, as gemv_bench counts them). The output
of the last graph replay must equal the first call's bit for bit (same values in every weight copy):
a variant whose result changes between calls (a race, a counter not reset) is reported NONDET.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from gemv_bench import _err, packed_copies, time_graph  # noqa: E402
from mtp_turbo.quant import gemv_frag, gemv_frag8  # noqa: E402
from mtp_turbo.check.bytefloor import measure_copy_bandwidth  # noqa: E402
from mtp_turbo.quant.frag import for_weight  # noqa: E402
from mtp_turbo.quant.frag8 import for_weight8  # noqa: E402

LAUNCH = {"frag": gemv_frag.launch, "frag8": gemv_frag8.launch, "frag8x": gemv_frag8.launch}
from mtp_turbo.quant.gemv import parse_tile  # noqa: E402


def _variant(spec: str) -> dict:
    """'groups=2' -> {'groups': 2}"""
    return {k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="262144x640,8192x8192")
    ap.add_argument("--formats", default="q4_0,q5_0,q8_0")
    ap.add_argument("--rows", default="1,4")
    ap.add_argument("--tiles", default="frag,32,64,2,3;frag,32,64,4,3,8;frag,32,64,2,2;frag,16,64,4,2,8,8")
    ap.add_argument("--variants", default="groups=2;groups=0", help="';'-separated launch keywords")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("frag_ab: needs CUDA (timings only; correctness without a GPU is in tests/quant)", file=sys.stderr)
        return 2
    copy_bw = measure_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {copy_bw:.0f} GB/s")
    tiles = [parse_tile(t) for t in args.tiles.split(";") if t]
    variants = [v for v in args.variants.split(";") if v]
    rows, bad = [], 0
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(n * 31 + k)) * 0.02
        for fmt in args.formats.split(","):
            ws = packed_copies(w, fmt)
            for p in ws:  # the layouts before capture
                for_weight(p)
                for_weight8(p)
            ref_w = ws[0].dequantize().double()
            for m in (int(v) for v in args.rows.split(",")):
                x = torch.randn(m, k, device="cuda")
                ref = x.double() @ ref_w.t()
                out = torch.empty(m, n, device="cuda")
                for tile in tiles:
                    line = []
                    for v in variants:
                        kw = _variant(v)
                        row = dict(shape=shape, fmt=fmt, M=m, tile=str(tile), variant=v)
                        try:
                            launch = LAUNCH[tile.kernel]
                            if "make_x" in kw:  # frag8 / frag8x: x's words made once here, then (make_x=0) not again
                                nc, mm = -(-k // 64), 1 if m <= 2 else 2
                                kw["scratch"] = (torch.empty(nc, mm, 32, 4, dtype=torch.int32, device="cuda"),
                                                 torch.empty(nc, 4, 4, device="cuda"))
                                launch(x, ws[0], tile, out, scratch=kw["scratch"])
                            out.fill_(float("nan"))
                            launch(x, ws[0], tile, out, **kw)
                            torch.cuda.synchronize()
                            err = _err(out, ref)
                            first = out.clone()
                            t = time_graph([(lambda p=p: launch(x, p, tile, out, **kw)) for p in ws])
                            torch.cuda.synchronize()
                            same = torch.equal(out, first)
                        except Exception as e:  # one variant failing: report it, go on
                            print(f"FAILED {row}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                            torch.cuda.synchronize()
                            bad += 1
                            continue
                        moved = ws[0].nbytes + x.numel() * 4 + out.numel() * 4
                        row.update(us=t * 1e6, frac=moved / t / 1e9 / copy_bw, err=err, same=same)
                        bad += not (err <= 1e-5 and same)
                        rows.append(row)
                        line.append(f"{v}: {t * 1e6:6.1f} us {100 * row['frac']:3.0f}%"
                                    + ("" if err <= 1e-5 else f" WRONG {err:.1e}") + ("" if same else " NONDET"))
                    print(f"{shape} {fmt} M={m} {tile}: " + " | ".join(line), flush=True)
            del ws, ref_w
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), copy_bw_gbs=copy_bw,
                                                  rows=rows), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
