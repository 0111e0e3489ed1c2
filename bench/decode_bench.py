"""Decode benchmark: plain greedy tok/s, prompt tok/s, the 4-row/1-row forward ratio, n-gram
speculation, and transformers' generate on the same weights; with the bandwidth floor beside.

Run on the GPU host from the repo root:
    python bench/decode_bench.py --model /tmp/gguf/model.gguf --out $OUT/decode.json
llama.cpp is measured by its own llama-bench in the same session (see bench/gpu_session.sh).
Prints a table last; writes every figure to --out as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402

GREEDY = SamplerConfig(temperature=0.0)
SAMPLED = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                        presence_penalty=0.4, penalty_last_n=64, seed=7)

CODE_PROMPT = (
    "Rewrite the following Python code, adding type hints to every function and keeping everything else "
    "the same.\n\n```python\nimport os\nimport json\n\n\ndef load_config(path):\n    with open(path) as f:\n"
    "        return json.load(f)\n\n\ndef save_config(path, config):\n    with open(path, 'w') as f:\n"
    "        json.dump(config, f, indent=2)\n\n\ndef list_configs(directory):\n    return [os.path.join(directory, n)"
    " for n in os.listdir(directory) if n.endswith('.json')]\n\n\ndef merge_configs(a, b):\n    out = dict(a)\n"
    "    out.update(b)\n    return out\n```\n\nHere is the code with type hints:\n\n```python\n"
)
SUMMARY_PROMPT = (
    "Article: The city council met on Tuesday evening to discuss the new public library. The library, which "
    "will be built on the site of the old train station, is expected to open in two years. Council members "
    "said the library will have a children's section, a reading room, and a computer lab. The cost of the "
    "library is estimated at twelve million dollars, and the council voted to fund it through a bond. "
    "Residents who spoke at the meeting were mostly in favour of the library, though some worried about "
    "parking near the old train station.\n\nQuestion: Summarize the article, quoting it where you can.\n"
    "Summary: The city council met on Tuesday evening to discuss"
)
STORY_PROMPT = "Once upon a time, in a small village by the sea, there lived"


def cuda_sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def copy_bandwidth(dev) -> float:
    """GB/s of a large device-to-device copy, counting bytes read + written."""
    if dev.type != "cuda":
        return float("nan")
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(20):
        s.record(); b.copy_(a); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return 2 * n / statistics.median(ts) / 1e9


def decode_bytes(eng: Engine, ctx_len: int) -> int:
    """Bytes one decode step must read: every weight byte once (the fused qkv / gate_up, not again
    their q / k / v and gate / up views; the LM head as the step reads it: the file's Q8_0 bytes or
    the dense embedding), plus the K/V the attention reads (mtp-turbo bench's floor)."""
    from mtp_turbo.benchmark.run import step_reads_q8_head, step_weight_bytes

    m = eng.model
    w = step_weight_bytes(m, step_reads_q8_head(eng))
    c = m.cfg
    kv_cell = 2 * c.n_kv_heads * c.head_dim * eng.kv.k.element_size()
    kv = 0
    for i in range(c.n_layers):
        kv += kv_cell * (ctx_len if c.is_global(i) else min(ctx_len, c.sliding_window))
    return w + kv


def time_generate(eng, prompt, sampler, n, spec=None, reps=3):
    out = []
    for _ in range(reps):
        eng.reset()  # no prompt reuse: each rep prefills
        ids = eng.generate_ids(prompt, sampler=sampler, max_tokens=n, spec=spec, stop_ids=())
        st = eng.last_stats
        out.append({"tok_s": st.decode_tps, "prompt_tok_s": st.prompt_tps, "n": len(ids), "spec": {} if st.spec is None else {**dataclasses.asdict(st.spec), "tokens_per_round": st.spec.tokens_per_round},
                    "ids": ids})
    best = sorted(out, key=lambda r: r["tok_s"])[len(out) // 2]  # median run
    return best


def forward_ratio(eng, rows=(1, 2, 4, 5), pos=256, iters=200):
    """Median time of a captured forward of T rows at position `pos` (CUDA events)."""
    res = {}
    toks = torch.randint(10, 1000, (8,), device=eng.device)
    for T in rows:
        for _ in range(5):
            eng.runner.forward(toks[:T], pos)
        cuda_sync()
        ts = []
        for _ in range(iters):
            if eng.device.type == "cuda":
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); eng.runner.forward(toks[:T], pos); e.record(); e.synchronize()
                ts.append(s.elapsed_time(e) / 1e3)
            else:
                t0 = time.perf_counter(); eng.runner.forward(toks[:T], pos); ts.append(time.perf_counter() - t0)
        res[T] = statistics.median(ts)
    return res


def sweep_tiles(eng, variants, pos=256, iters=100) -> list[dict]:
    """Captured 1-row and 4-row fused steps per tile variant (fresh decoder each); fastest first."""
    from mtp_turbo.models.fused import FusedDecoder, FusedTiles

    runner, saved = eng.runner, (eng.runner.fused, dict(eng.runner._graphs))
    out = []
    for v in variants:
        tiles = FusedTiles(**v)
        try:
            runner.fused, runner._graphs = FusedDecoder(eng.model, eng.kv, tiles), {}
            t = forward_ratio(eng, rows=(1, 4), pos=pos, iters=iters)
            out.append({"tiles": v, "ms1": t[1] * 1e3, "ms4": t[4] * 1e3})
        except Exception as e:  # a tile that does not compile is reported, not fatal
            out.append({"tiles": v, "error": f"{type(e).__name__}: {e}"[:200]})
        print("tiles", out[-1], flush=True)
    runner.fused, runner._graphs = saved[0], saved[1]
    return sorted(out, key=lambda r: r.get("ms1", 1e9))


TILE_VARIANTS = [
    {}, {"warps_small": 4}, {"bn_small": 32}, {"bk_small": 256}, {"bk_small": 64}, {"bk_tall": 128},
    {"bk_tall": 512}, {"warps_head": 8}, {"bn_head": 64}, {"bn_head": 256, "warps_head": 8}, {"block_keys": 16},
    {"block_keys": 64}, {"warps_attn": 8}, {"warps_attn": 2}, {"tails": False},
    {"head_q8": False},  # the bf16 head (the *_head tiles above apply only to it)
]


def combine_best(sweep: list[dict]) -> dict:
    """Per field, the value of the fastest one-field variant that beat the defaults ({})."""
    base = next((r["ms1"] for r in sweep if r["tiles"] == {} and "ms1" in r), None)
    best: dict = {}
    for r in sorted((r for r in sweep if "ms1" in r and base is not None and r["ms1"] < base), key=lambda r: -r["ms1"]):
        best.update(r["tiles"])  # faster variants applied last win their fields
    return best


def time_linears(eng, reps=50) -> dict:
    """us per launch of each GEMV part of the fused step at 1 row (graph of `reps` launches), through
    its layer plan (models/layer_plan.py) as a forward launches it, tails included."""
    dec = eng.runner.fused
    plan, m, L = dec.plan, eng.model, eng.model.layers[1]
    T, c = 1, eng.model.cfg
    res, xn = dec.res, dec.xn[:T]
    pos = torch.full((T,), 100, dtype=torch.int64, device=eng.device)
    cos, sin = m.rope[c.is_global(1)]
    scratch = eng.kv.k[1].clone(), eng.kv.v[1].clone()  # RoPE tail writes: not into the live cache
    kinds = {
        "qkv (GEMV + RoPE / K/V tail)": lambda: plan.qkv_rope(xn, L["qkv"], L.get("qkv_bias"), dec.qkv[:T], dec.count[1, 2],
                                                                pos, L.get("q_norm"), L.get("k_norm"), cos, sin, dec.q,
                                                                *scratch),
        "o (GEMV + residual norm tail)": lambda: plan.gemv_residual(dec.att[:T].view(T, -1), L["o"], dec.o, dec.count[1, 0],
                                                                    res[0][:T], L.get("post_attn_norm"), L["ffn_norm"],
                                                                    res[1][:T], xn),
        "gate_up (GEMV + gating)": lambda: plan.mlp(xn, L["gate_up"], dec.gu),
        "down (GEMV + residual norm tail)": lambda: plan.gemv_residual(dec.gu[:T], L["down"], dec.down, dec.count[1, 1],
                                                                       res[0][:T], L.get("post_ffn_norm"), L["attn_norm"],
                                                                       res[1][:T], xn),
        "head": lambda: dec.head(xn),
    }
    out = {}
    for name, fn in kinds.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(5):
            s.record(); g.replay(); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3 / reps)
        out[name] = statistics.median(ts)
    return out


def profile_step(eng, rows=1, pos=256) -> list[tuple[str, float, int]]:
    """CUDA time per kernel name of eager (not captured) steps: where a step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    toks = torch.randint(10, 1000, (rows,), device=eng.device)
    use = eng.runner.use_graphs
    eng.runner.use_graphs = False
    with torch.inference_mode():
        for _ in range(3):
            eng.runner.forward(toks, pos)
        cuda_sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                eng.runner.forward(toks, pos)
            cuda_sync()
    eng.runner.use_graphs = use
    rows_ = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t > 0:
            rows_.append((ev.key[:60], t / 10, ev.count // 10))
    return sorted(rows_, key=lambda r: -r[1])[:25]


def hf_generate(eng, prompt, n) -> dict:
    """transformers' model of the family on the same dequantized weights, bf16, generate()."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
    from hf_reference import build_hf

    hf = build_hf(eng.model, attn_implementation=None)  # as measured: the library default
    ids = torch.tensor([eng.tokenizer.encode(prompt)], device=eng.device)
    res = {}
    for label, kw in (("dynamic", {}), ("static", {"cache_implementation": "static"})):
        try:
            hf.generate(ids, max_new_tokens=8, do_sample=False, **kw)
            cuda_sync(); t0 = time.perf_counter()
            out = hf.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
            cuda_sync(); dt = time.perf_counter() - t0
            res[label] = {"tok_s": (out.shape[1] - ids.shape[1]) / dt, "ids": out[0, ids.shape[1]:].tolist()}
        except Exception as e:  # report, don't abort the session
            res[label] = {"error": f"{type(e).__name__}: {e}"[:300]}
    del hf
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--ks", default="2,3,4", help="draft counts for the n-gram rows")
    ap.add_argument("--kernels", default="auto", help="the engine's --kernels for the main rows")
    ap.add_argument("--compare-torch", action="store_true",
                    help="also time plain decode and the 1/4-row forward with --kernels torch (compiles)")
    ap.add_argument("--sweep-tiles", action="store_true", help="time fused-step tile variants, use the fastest")
    ap.add_argument("--tiles", default="", help="the variants --sweep-tiles times, as a JSON list of FusedTiles "
                    "overrides (default: TILE_VARIANTS)")
    ap.add_argument("--profile", action="store_true", help="per-kernel CUDA time of one eager 1-row step")
    ap.add_argument("--mtp-ks", default="", help="draft counts for MTP-drafter rows (e.g. 3; empty = none)")
    ap.add_argument("--draft-quants", default="", help="MTP rows once per --draft-quant (e.g. bf16,q8_0; empty: "
                    "the default only)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    t0 = time.perf_counter()
    eng = Engine(EngineConfig(model=a.model, device=a.device, ctx_size=a.ctx_size, compile=not a.no_compile,
                              kernels=a.kernels, progress=False))
    R: dict = {"device": str(eng.device), "load_s": time.perf_counter() - t0, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name() if eng.device.type == "cuda" else "cpu"}
    R["copy_GBps"] = copy_bandwidth(eng.device)
    n = a.tokens
    ks = [int(x) for x in a.ks.split(",")]

    t0 = time.perf_counter()
    eng.generate_ids(STORY_PROMPT, sampler=GREEDY, max_tokens=8)  # capture/compile the 1-row step
    R["warmup_s"] = time.perf_counter() - t0
    R["kernels"] = eng.runner.kernels
    if a.sweep_tiles and eng.runner.fused is not None:
        R["tile_sweep"] = sweep_tiles(eng, json.loads(a.tiles) if a.tiles else TILE_VARIANTS)
        comb = combine_best(R["tile_sweep"])
        if comb and not any(r["tiles"] == comb for r in R["tile_sweep"]):
            R["tile_sweep"] = sorted(R["tile_sweep"] + sweep_tiles(eng, [comb]), key=lambda r: r.get("ms1", 1e9))
        best = next((r for r in R["tile_sweep"] if "ms1" in r), None)
        if best is not None:
            from mtp_turbo.models.fused import FusedDecoder, FusedTiles

            eng.runner.fused, eng.runner._graphs = FusedDecoder(eng.model, eng.kv, FusedTiles(**best["tiles"])), {}
            R["tiles_used"] = best["tiles"]
            eng.generate_ids(STORY_PROMPT, sampler=GREEDY, max_tokens=8)
    if a.profile:
        R["profile_1row"] = profile_step(eng)
        if eng.runner.fused is not None and eng.device.type == "cuda":
            R["linear_us"] = time_linears(eng)
    plain = time_generate(eng, STORY_PROMPT, GREEDY, n, reps=a.reps)
    R["plain_greedy"] = plain
    ctx_len = len(eng.tokenizer.encode(STORY_PROMPT)) + n // 2
    R["decode_bytes"] = decode_bytes(eng, ctx_len)
    R["decode_floor_ms"] = R["decode_bytes"] / (R["copy_GBps"] * 1e9) * 1e3

    # prompt throughput for a 512-token prompt (llama.cpp's pp512)
    words = (SUMMARY_PROMPT + " ") * 8
    ids512 = eng.tokenizer.encode(words)[:512]
    pts = []
    for _ in range(a.reps + 1):
        eng.reset()
        cuda_sync(); t1 = time.perf_counter()
        eng._set_tokens(ids512 + [ids512[-1]], 0)
        eng._prefill(512, progress=False)
        cuda_sync(); pts.append(512 / (time.perf_counter() - t1))
    R["pp512_tok_s"] = statistics.median(pts[1:])

    R["forward_s"] = {str(k): v for k, v in forward_ratio(eng, rows=sorted({1, 4} | {k + 1 for k in ks})).items()}
    R["ratio_4_to_1"] = R["forward_s"]["4"] / R["forward_s"]["1"]

    # n-gram speculation vs plain, temp 0 and temp 0.6 with penalties
    R["spec"] = {}
    for name, prompt in (("code", CODE_PROMPT), ("summary", SUMMARY_PROMPT)):
        for sname, sampler in (("t0", GREEDY), ("t0.6", SAMPLED)):
            base = time_generate(eng, prompt, sampler, n, reps=a.reps)
            row = {"plain_tok_s": base["tok_s"]}
            for k in ks:
                sp = time_generate(eng, prompt, sampler, n, spec=SpecConfig(draft="ngram", draft_tokens=k),
                                   reps=a.reps)
                row[f"k{k}"] = {"tok_s": sp["tok_s"], "tokens_per_round": sp["spec"]["tokens_per_round"],
                                "acceptance": sp["spec"]["acceptance_per_position"],
                                "same_text": sp["ids"] == base["ids"]}
            R["spec"][f"{name}/{sname}"] = row
            for k, q in [(int(x), q) for x in a.mtp_ks.split(",") if x for q in a.draft_quants.split(",")]:
                key = f"mtp{k}" + (f"/{q}" if q else "")
                spec = SpecConfig(draft="mtp", draft_tokens=k, **({"draft_quant": q} if q else {}))
                try:
                    sp = time_generate(eng, prompt, sampler, n, spec=spec, reps=a.reps)
                    row[key] = {"tok_s": sp["tok_s"], "tokens_per_round": sp["spec"]["tokens_per_round"],
                                      "acceptance": sp["spec"]["acceptance_per_position"],
                                      "same_text": sp["ids"] == base["ids"],
                                      "draft_ms_per_round": 1e3 * sp["spec"]["draft_s"] / max(1, sp["spec"]["rounds"]),
                                      "verify_ms_per_round": 1e3 * sp["spec"]["verify_s"] / max(1, sp["spec"]["rounds"])}
                except Exception as e:  # report, keep the session going
                    row[key] = {"error": f"{type(e).__name__}: {e}"[:300]}

    if a.compare_torch and eng.runner.kernels != "torch":
        del eng
        torch.cuda.empty_cache()
        et = Engine(EngineConfig(model=a.model, device=a.device, ctx_size=a.ctx_size, compile=not a.no_compile,
                                 kernels="torch", progress=False))
        et.generate_ids(STORY_PROMPT, sampler=GREEDY, max_tokens=8)
        pt = time_generate(et, STORY_PROMPT, GREEDY, n, reps=a.reps)
        fst = forward_ratio(et, rows=(1, 4))
        R["torch_kernels"] = {"plain_tok_s": pt["tok_s"], "forward_s": {str(k): v for k, v in fst.items()},
                              "same_text_as_main": pt["ids"] == plain["ids"]}
        eng = et
    if not a.skip_hf:
        R["hf"] = hf_generate(eng, STORY_PROMPT, n)
        for v in R["hf"].values():
            if "ids" in v:
                v["agree_prefix"] = next((i for i, (x, y) in enumerate(zip(v["ids"], plain["ids"])) if x != y),
                                         min(len(v["ids"]), len(plain["ids"])))
                del v["ids"]
    for r in [plain]:
        r.pop("ids", None)

    # ---- table -------------------------------------------------------------------------------------
    print(f"\n== decode bench: {R['gpu']} torch {R['torch']} | copy {R['copy_GBps']:.0f} GB/s | load {R['load_s']:.1f} s"
          f" | kernels {R['kernels']} {R.get('tiles_used', '')}")
    for name, t, cnt in R.get("profile_1row", []):
        print(f"  profile {t:9.1f} us x{cnt:4d}  {name}")
    for name, t in R.get("linear_us", {}).items():
        print(f"  GEMV {name}: {t:.2f} us per launch (1 row, graph)")
    print(f"plain greedy: {plain['tok_s']:.1f} tok/s ({1e3 / plain['tok_s']:.3f} ms/tok); "
          f"floor {R['decode_floor_ms']:.3f} ms/tok ({R['decode_bytes'] / 1e6:.0f} MB/step)")
    print(f"pp512: {R['pp512_tok_s']:.0f} tok/s")
    fs = R["forward_s"]
    print("forward ms by rows: " + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in fs.items())
          + f" | 4-row/1-row = {R['ratio_4_to_1']:.2f}")
    for key, row in R["spec"].items():
        cells = " | ".join(f"k{k}: {row[f'k{k}']['tok_s']:.0f} tok/s, {row[f'k{k}']['tokens_per_round']:.2f} t/r"
                           f"{'' if row[f'k{k}']['same_text'] else ' (TEXT DIFFERS)'}" for k in ks)
        print(f"ngram {key}: plain {row['plain_tok_s']:.0f} tok/s | {cells}")
        for mk in [k for k in row if k.startswith("mtp")]:
            r = row[mk]
            print(f"  {mk} {key}: " + (f"{r['tok_s']:.0f} tok/s, {r['tokens_per_round']:.2f} t/r, draft "
                                        f"{r['draft_ms_per_round']:.2f} ms/round, verify {r['verify_ms_per_round']:.2f} "
                                        f"ms/round{'' if r['same_text'] else ' (TEXT DIFFERS)'}" if "tok_s" in r else r["error"]))
    if "torch_kernels" in R:
        tk = R["torch_kernels"]
        print(f"torch kernels: plain {tk['plain_tok_s']:.1f} tok/s, forward 1 row {tk['forward_s']['1'] * 1e3:.3f} ms, "
              f"4 rows {tk['forward_s']['4'] * 1e3:.3f} ms, same greedy text: {tk['same_text_as_main']}")
    if "hf" in R:
        for k, v in R["hf"].items():
            print(f"transformers generate ({k} cache): " + (f"{v['tok_s']:.1f} tok/s, greedy agrees for "
                                                             f"{v['agree_prefix']} tokens" if "tok_s" in v else v["error"]))
    if a.out:
        Path(a.out).write_text(json.dumps(R, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
