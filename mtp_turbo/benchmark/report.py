"""`mtp-turbo bench`'s outputs: the markdown table, the JSON, the plot. No torch."""

from __future__ import annotations

from pathlib import Path


def peer_ratio(row: dict, result: dict) -> float | None:
    """Our decode tok/s over llama.cpp's: llama-completion at the row's temperature (the same prompts
    and chain), else llama-bench's tgN for a greedy row."""
    lc = result.get("llama_completion", {}).get(f"{row['temp']:g}")
    if lc and lc["decode_tps"] > 0:
        return row["decode_tps"] / lc["decode_tps"]
    tg = result.get("llama_bench", {}).get("tg")
    if tg and row["temp"] == 0 and tg["tps"] > 0:
        return row["decode_tps"] / tg["tps"]
    return None


def label(row: dict) -> str:
    k = f" tree={row['tree']}" if row.get("tree") else "" if row["k"] is None else f" k={row['k']}"
    return f"{row['mode']}{k} T={row['temp']:g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _worst(w: dict | None) -> str:
    """'0.97x (#5)': the row's speed over plain's on its slowest prompt (index 5)."""
    return "-" if w is None else f"{w['ratio']:.2f}x (#{w['prompt']})"


def table(result: dict) -> str:
    m = result["meta"]
    out = [f"model {m['model']} | device {m['device']} | torch {m['torch']} | prompts {m['prompts']} x{m['n_prompts']}"
           f" | {m['max_tokens']} tokens each | reps {m['reps']} | seed {m['seed']}", ""]
    floor = result.get("floor")
    cols = ["mode", "k", "temp", "decode tok/s", "prompt tok/s", "tokens/round", "acceptance", "device", "draft",
            "verify", "accept", "host", "other", "same text", "worst prompt", "x llama.cpp"] + (["of floor"] if floor else [])
    out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in result["rows"]:
        sp = r.get("split", {})
        ratio = peer_ratio(r, result)
        cells = [r["mode"], f"tree {r['tree']}" if r.get("tree") else "-" if r["k"] is None else str(r["k"]), f"{r['temp']:g}", f"{r['decode_tps']:.1f}",
                 f"{r['prompt_tps']:.1f}", f"{r['tokens_per_round']:.2f}", _pct(r["acceptance"]),
                 *(_pct(sp.get(n)) for n in ("device", "draft", "verify", "accept", "host", "other")),
                 "yes" if r["same_text"] else "**NO**", _worst(r.get("worst_prompt")),
                 "-" if ratio is None else f"{ratio:.2f}"]
        if floor:
            cells.append(_pct(r["decode_tps"] / floor["tps"]))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    pp, lb = result.get("pp"), result.get("llama_bench", {})
    if pp:
        peer = lb.get("pp")
        out.append(f"prompt {pp['name']}: {pp['tps']:.1f} tok/s" +
                   (f" | llama-bench {peer['name']}: {peer['tps']:.1f} tok/s, ratio {pp['tps'] / peer['tps']:.2f}"
                    if peer else ""))
    if lb.get("tg"):
        tg = lb["tg"]
        plain = next((r for r in result["rows"] if r["mode"] == "plain" and r["temp"] == 0), None)
        out.append(f"llama-bench {tg['name']}: {tg['tps']:.1f} +- {tg['std']:.1f} tok/s (build {lb.get('build')}, "
                   f"{lb.get('backends')})" + (f" | plain greedy ratio {plain['decode_tps'] / tg['tps']:.2f}"
                                               if plain else ""))
    for temp, lc in result.get("llama_completion", {}).items():
        out.append(f"llama-completion temp {temp}: decode {lc['decode_tps']:.1f} tok/s, prompt {lc['prompt_tps']:.1f} "
                   "tok/s (same prompts, chain, seed, max tokens)")
    if floor:
        out.append(f"bandwidth floor: {(floor['weight_bytes'] + floor['kv_bytes']) / 2**20:.1f} MiB a plain step "
                   f"(weights {floor['weight_bytes'] / 2**20:.1f}"
                   f"{', the LM head as Q8_0' if floor.get('head') == 'q8_0' else ''}, K/V at {floor['context']} cells "
                   f"{floor['kv_bytes'] / 2**20:.1f}) at {floor['bandwidth_GBps']:.0f} GB/s copy: "
                   f"{floor['ms_per_token']:.3f} ms/token, {floor['tps']:.0f} tok/s")
    mem = result.get("memory")
    if mem:
        held = (f"device allocated {mem['allocated_MiB']:.0f} MiB (peak {mem['peak_allocated_MiB']:.0f}, reserved "
                f"{mem['reserved_MiB']:.0f})" if "allocated_MiB" in mem else f"peak RSS {mem['peak_rss_MiB']:.0f} MiB")
        out.append(f"memory: weights {mem['weights_MiB']:.1f} MiB" +
                   (f" + the head's Q8_0 codes {mem['head_q8_MiB']:.1f}" if mem["head_q8_MiB"] else "") +
                   (f" + their frag8 layout {mem['head_layout_MiB']:.1f}" if mem.get("head_layout_MiB") else "") +
                   f", K/V cache {mem['kv_MiB']:.1f} MiB; {held}")
    cap = [f"{label(r)}: {r['captures']}" for r in result["rows"] if r.get("captures")]
    if cap:
        out.append("CUDA graphs captured inside timed runs (first-use cost in their decode time): " + ", ".join(cap))
    for line in result["mismatches"]:
        out.append(f"MISMATCH (a bug: same seed must give the same text): {line}")
    return "\n".join(out)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = [label(r) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5))
    colors = {"plain": "tab:gray", "mtp": "tab:blue", "ngram": "tab:orange"}
    ax.barh(range(len(rows)), [r["decode_tps"] for r in rows], color=[colors.get(r["mode"], "tab:green") for r in rows])
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("decode tok/s")
    tg = result.get("llama_bench", {}).get("tg")
    if tg:
        ax.axvline(tg["tps"], color="k", ls="--", label=f"llama-bench {tg['name']}")
    if result.get("floor"):
        ax.axvline(result["floor"]["tps"], color="r", ls=":", label="bandwidth floor (plain)")
    if tg or result.get("floor"):
        ax.legend(loc="lower right")
    m = result["meta"]
    ax.set_title(f"{m['model']} on {m['device']}: {m['prompts']} x{m['n_prompts']}, {m['max_tokens']} tokens")
    fig.tight_layout()
    fig.savefig(Path(path))
    plt.close(fig)
