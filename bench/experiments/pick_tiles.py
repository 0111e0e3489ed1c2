"""From linear_sweep.py's JSON: the fastest tile per FusedTiles kind (qkv -> small, gate_up ->
gated, o + down -> tall (one tile for both: least summed time), head), among tiles whose 4-row
launch is at most 1.1x their 1-row one (verify rounds must not pay for the choice). Prints the
step_bench --ab variant (FusedTiles fields) and writes a sed script that sets those fields as
the defaults in mtp_turbo/models/fused.py (for a device session to run the model with them).

    python bench/experiments/pick_tiles.py SWEEP.json --sed /tmp/tiles.sed
"""

from __future__ import annotations

import argparse
import json
import sys

KINDS = {"small": ("qkv",), "gated": ("gate_up",), "tall": ("o", "down"), "head": ("head",)}


def pick(results: dict) -> dict[str, dict]:
    out = {}
    for kind, shapes in KINDS.items():
        if not all(s in results for s in shapes):
            continue
        times: dict[tuple, list[float]] = {}
        for s in shapes:
            for r in results[s]:
                if "us1" in r and r.get("us4", r["us1"]) <= 1.1 * r["us1"]:
                    times.setdefault((r["bn"], r["bk"], r["warps"], r["stages"]), []).append(r["us1"])
        full = {c: sum(t) for c, t in times.items() if len(t) == len(shapes)}
        if full:
            c = min(full, key=full.get)
            out[kind] = {"bn": c[0], "bk": c[1], "warps": c[2], "stages": c[3], "us": full[c]}
    return out


def write_sed(fields: dict[str, int], path: str) -> None:
    """A sed script that sets these int (or bool: 0 / 1) FusedTiles fields' defaults in
    mtp_turbo/models/fused.py."""
    with open(path, "w") as f:
        for k, v in fields.items():
            f.write(f"s/^    {k}: int = [0-9]*/    {k}: int = {v}/\n")
            f.write(f"s/^    {k}: bool = [TF][a-z]*/    {k}: bool = {bool(v)}/\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--sed", default=None)
    a = ap.parse_args()
    best = pick(json.load(open(a.sweep)))
    fields = {f"{f}_{kind}": v[f] for kind, v in best.items() for f in ("bn", "bk", "warps", "stages")}
    print(",".join(f"{k}={v}" for k, v in fields.items()))
    if a.sed:
        write_sed(fields, a.sed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
