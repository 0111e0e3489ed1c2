"""From a step_bench.py JSON with --ab variants timed at several positions: per family of
FusedTiles fields (the first field's name up to its first '_': l2 / combine / ...) the variants
that are at least 2% faster than the default at some position and at most 1% slower at any
(a merge option may only matter at depth), batch-invariant (its bitwise checks true) and with its
prefill chunk at most 10% slower; of those the one with the lowest mean ratio. Prints
each family's ratios and choice; writes a sed script setting the kept variants' fields as
defaults in mtp_turbo/models/fused.py.

    python bench/experiments/pick_ab.py step.json --sed /tmp/tiles.sed
"""

from __future__ import annotations

import argparse
import json
import sys

from pick_tiles import write_sed  # run as a script: its folder is on the path


def pick(rows: list[dict]) -> dict[str, dict[str, int]]:
    ratios: dict[str, list[float]] = {}
    sound: dict[str, bool] = {}
    for k in rows[0]:
        if k.startswith("ab "):
            ab = [r[k] for r in rows if k in r]
            ratios[k[3:]] = [x["ms1"] / x["ms1_default"] for x in ab]
            sound[k[3:]] = all(x.get("bitwise_verify_rows", True) and x.get("bitwise_prefill_last_row", True)
                               and x.get("prefill_ms", 0) <= 1.10 * x.get("prefill_ms_default", 0) for x in ab)
    families: dict[str, list[str]] = {}
    for v in ratios:
        families.setdefault(v.split("=")[0].split("_")[0], []).append(v)
    chosen = {}
    for fam, vs in families.items():
        ok = [v for v in vs if min(ratios[v]) < 0.98 and max(ratios[v]) <= 1.01 and sound[v]]
        best = min(ok, key=lambda v: sum(ratios[v]) / len(ratios[v])) if ok else None
        print(f"{fam}: " + ", ".join(f"{v} " + "/".join(f"{x:.3f}" for x in ratios[v]) +
                                     ("" if sound[v] else " (not bitwise or prefill slower)") for v in vs) +
              (f" -> kept {best}" if best else " -> none kept"))
        if best:
            chosen[fam] = {f.split("=")[0]: int(f.split("=")[1]) for f in best.split(",")}
    return chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step_json")
    ap.add_argument("--sed", default=None)
    a = ap.parse_args()
    chosen = pick(json.load(open(a.step_json))["rows"])
    if a.sed:
        write_sed({k: v for fields in chosen.values() for k, v in fields.items()}, a.sed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
