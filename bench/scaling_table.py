"""The file-bytes issue's scaling table from `mtp-turbo bench --json` outputs: per model, plain decode
with the file's bytes (frag) and dense beside llama-bench, the bytes floor, memory and pp512.

    python bench/scaling_table.py OUT_DIR [--md]

Reads OUT_DIR/bench_NAME_frag.json and bench_NAME_dense.json (bench/gpu_session.sh bench_frag), one row
a NAME; a missing side is left blank. Figures are the bench's own (same run: llama-bench beside the
frag side).
"""
import argparse
import json
from pathlib import Path


def _plain(d):
    rows = [r for r in d.get("rows", []) if r["mode"] == "plain" and r["temp"] == 0]
    return rows[0] if rows else None


def row(name, frag, dense):
    f, de = frag or {}, dense or {}
    fp, dp = _plain(f) if f else None, _plain(de) if de else None
    lb = f.get("llama_bench") or de.get("llama_bench") or {}
    tg = (lb.get("tg") or {}).get("tps")
    llama_pp = (lb.get("pp") or {}).get("tps")
    fl = f.get("floor") or {}
    mem = f.get("memory") or {}
    path = ((f.get("meta") or de.get("meta") or {}).get("engine") or {}).get("model")
    size = Path(path).stat().st_size / 2**20 if path and Path(path).exists() else None
    cells = {
        "model": name,
        "file MiB": size,
        "llama tg": tg,
        "frag tok/s": fp and fp["decode_tps"],
        "frag x llama": fp and tg and fp["decode_tps"] / tg,
        "dense tok/s": dp and dp["decode_tps"],
        "dense x llama": dp and tg and dp["decode_tps"] / tg,
        "frag of floor": fp and fl.get("tps") and fp["decode_tps"] / fl["tps"],
        "weights MiB": mem.get("weights_MiB"),
        "KV MiB": mem.get("kv_MiB"),
        "allocated MiB": mem.get("allocated_MiB"),
        "weights / file": size and mem.get("weights_MiB") and mem["weights_MiB"] / size,
        "pp512 frag": (f.get("pp") or {}).get("tps"),
        "pp512 dense": (de.get("pp") or {}).get("tps"),
        "pp512 llama": llama_pp,
        "same text": fp and fp.get("same_text"),
    }
    return cells


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.2f}" if v < 10 else f"{v:.1f}"
    return str(v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--md", action="store_true", help="a Markdown table (default: tab-separated)")
    a = p.parse_args()
    out = Path(a.out)
    names = sorted({f.name[len("bench_"):].rsplit("_", 1)[0] for f in out.glob("bench_*_frag.json")}
                   | {f.name[len("bench_"):].rsplit("_", 1)[0] for f in out.glob("bench_*_dense.json")})
    rows = []
    for n in names:
        load = (lambda side: json.loads((out / f"bench_{n}_{side}.json").read_text())
                if (out / f"bench_{n}_{side}.json").exists() else None)
        rows.append(row(n, load("frag"), load("dense")))
    if not rows:
        print(f"no bench_*_frag.json / bench_*_dense.json in {out}")
        return
    keys = list(rows[0])
    if a.md:
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rows:
            print("| " + " | ".join(fmt(r[k]) for k in keys) + " |")
    else:
        print("\t".join(keys))
        for r in rows:
            print("\t".join(fmt(r[k]) for k in keys))


if __name__ == "__main__":
    main()
