"""The fused main-model step on Gemma-3-270M's shapes with random weights: no model file needed.

Times the captured 1-row and 4-row decode steps and the prefill chunks (the same kernels over row
blocks, no LM head: --prefill-rows) against 8-row decode steps, at each --positions; checks a
chunk's hidden rows and K/V bit-identical to one-row steps'; splits a replayed 1-row step into
kernel time and the gaps between kernels (profiler trace of graph replays) and gives kernels a
token and CUDA time per kernel class. The bandwidth floor of the step's bytes is printed beside.
The default step's LM head reads the embedding's Q8_0 bytes (FusedTiles.head_q8); `--ab head_q8=0`
times the bf16 head beside it.

    python bench/step_bench.py --out $OUT/step.json
    python bench/step_bench.py --positions 256,7000 --ab "head_q8=0" --out $OUT/step_head.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtp_turbo.benchmark.run import step_weight_bytes  # noqa: E402
from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.models.fused import FusedDecoder, FusedTiles  # noqa: E402
from mtp_turbo.models.arch import ModelConfig, Rope, layer_tensors
from mtp_turbo.models.decoder import Decoder  # noqa: E402
from mtp_turbo.quant.dequant import dequantize  # noqa: E402
from mtp_turbo.quant.formats import quantize_tensor  # noqa: E402
from mtp_turbo.quant.repack import split_q8_0  # noqa: E402

CFG = ModelConfig(family="gemma3", vocab_size=262144, hidden=640, n_layers=18, n_heads=4, n_kv_heads=1, head_dim=256, ffn=2048,
                   eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=512, sliding_pattern=6,
                   query_scale=256 ** -0.5, context_length=32768)


def random_model(cfg: ModelConfig, dev) -> Decoder:
    """Random weights in the loader's forms: bf16 matrices, fp32 norms, the embedding's Q8_0 codes
    and scales kept (the fused step's head reads them: FusedTiles.head_q8) beside their bf16
    dequantization."""
    g = torch.Generator(device=dev).manual_seed(0)
    D, F, DH = cfg.hidden, cfg.ffn, cfg.head_dim
    nq, nkv = cfg.n_heads * DH, cfg.n_kv_heads * DH
    shapes = {"attn_norm": (D,), "q": (nq, D), "k": (nkv, D), "v": (nkv, D), "q_norm": (DH,), "k_norm": (DH,),
              "o": (D, nq), "post_attn_norm": (D,), "ffn_norm": (D,), "gate": (F, D), "up": (F, D),
              "down": (D, F), "post_ffn_norm": (D,)}

    def mk(shape, norm, scale):
        t = torch.randn(*shape, generator=g, device=dev) * scale
        return (1 + t).float() if norm else t.to(torch.bfloat16)

    # the embedding through Q8_0 as the file stores it, dequantized as the loader does (models/load.py)
    raw = quantize_tensor(mk((cfg.vocab_size, D), False, 0.05).float(), "q8_0").reshape(-1)
    w = {"token_embd.weight": dequantize(raw, 8, (cfg.vocab_size, D)).to(torch.bfloat16),
         "output_norm.weight": mk((D,), True, 0.1)}
    for i in range(cfg.n_layers):
        for k, name in layer_tensors(cfg).items():
            w[f"blk.{i}.{name}"] = mk(shapes[k], k.endswith("norm"), 0.1 if k.endswith("norm") else 0.04)
    return Decoder(cfg, w, dev, torch.bfloat16, head_q8=split_q8_0(raw, (cfg.vocab_size, D)))


def step_bytes(m: Decoder, pos: int, q8_head: bool) -> int:
    """Bytes one 1-row step must read once: every weight byte (benchmark/run.step_weight_bytes: the
    fused qkv / gate_up once, the head as the step reads it), the K/V cells its attention reads."""
    n = step_weight_bytes(m, q8_head)
    c = m.cfg
    cells = sum(pos + 1 if c.is_global(i) else min(pos + 1, c.sliding_window) for i in range(c.n_layers))
    return n + 2 * cells * c.n_kv_heads * c.head_dim * 2


def copy_bandwidth() -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(12):
        s.record(); b.copy_(a); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return 2 * a.numel() / statistics.median(ts[2:]) / 1e9


def time_step(dec: FusedDecoder, rows: int, pos: int, iters: int = 300, head: bool = True, per_graph: int = 10):
    """Median ms of one captured step (a graph of per_graph steps, so the replay launch is
    amortised), and what it gives (logits, or hidden rows without the head)."""
    toks = torch.arange(100, 100 + rows, device="cuda")
    p = torch.arange(pos, pos + rows, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.inference_mode():
        for _ in range(3):
            dec.forward(toks, p, head=head)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(g):
        for _ in range(per_graph):
            out = dec.forward(toks, p, head=head)
            out = out[0] if head else out[1]
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(max(iters // per_graph, 6)):
        st.record(); g.replay(); en.record(); en.synchronize()
        ts.append(st.elapsed_time(en) / per_graph)
    return statistics.median(ts[3:]), out.clone()


def gaps(dec: FusedDecoder, pos: int) -> dict:
    """Kernel time and idle gaps of replayed 1-row steps, from a profiler trace of 5 replays."""
    import tempfile

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_

    toks, p = torch.tensor([100], device="cuda"), torch.tensor([pos], device="cuda")
    with torch.inference_mode():
        dec.forward(toks, p)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dec.forward(toks, p)
        g.replay()
        torch.cuda.synchronize()
        with prof_(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(5):
                g.replay()
            torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        pr.export_chrome_trace(f.name)
        ev = [e for e in json.load(open(f.name))["traceEvents"] if e.get("cat") == "kernel"]
    ev.sort(key=lambda e: e["ts"])
    n = len(ev) // 5
    busy = sum(e["dur"] for e in ev) / 5
    idle = sum(max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(ev, ev[1:])
               if b["ts"] - (a["ts"] + a["dur"]) < 50) / 5  # within a replay (not between replays)
    return {"kernels_per_step": n, "kernel_us": busy, "gap_us": idle, "gap_per_kernel_us": idle / max(n - 1, 1)}


def profile(dec: FusedDecoder, pos: int) -> list[dict]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_

    toks, p = torch.tensor([100], device="cuda"), torch.tensor([pos], device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            dec.forward(toks, p)
        torch.cuda.synchronize()
        with prof_(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(10):
                dec.forward(toks, p)
            torch.cuda.synchronize()
    out = []
    for ev in pr.key_averages():
        t = getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)
        if t > 0:
            out.append({"kernel": ev.key[:50], "us_per_step": t / 10, "launches_per_step": ev.count / 10,
                        "us_per_launch": t / ev.count})
    return sorted(out, key=lambda r: -r["us_per_step"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--positions", default="256,7000", help="query positions to time at")
    ap.add_argument("--prefill-rows", default="64,128", help="prefill chunk sizes to time")
    ap.add_argument("--ab", default="combine_chunks=1",
                    help="tile variants (FusedTiles fields, ';' between variants) whose 1-row step is timed "
                         "beside the default's at each position, bitwise logits compared")
    ap.add_argument("--out", default=None)
    ap.add_argument("--save", default=None, metavar="PT",
                    help="torch.save the default step's outputs (1-row and 4-row logits, the chunk's hidden rows "
                         "at each position) for a bitwise comparison with another tree's run")
    a = ap.parse_args()
    assert torch.cuda.is_available(), "needs CUDA"
    torch.manual_seed(0)  # the cache's random cells: the same in every run (--save)
    saved = {}
    m = random_model(CFG, torch.device("cuda"))
    kv = KVCache(CFG.n_layers, 8192, CFG.n_kv_heads, CFG.head_dim, "cuda", torch.bfloat16)
    kv.k.normal_(0, 1)
    kv.v.normal_(0, 1)
    bw = copy_bandwidth()
    res = {"gpu": torch.cuda.get_device_name(), "copy_GBps": bw, "rows": []}
    step = FusedDecoder(m, kv)
    chunks = {P: FusedDecoder(m, kv, prefill_rows=P) for P in map(int, a.prefill_rows.split(","))}
    for pos in map(int, a.positions.split(",")):
        nbytes = step_bytes(m, pos, step.head_w is not None)
        floor = nbytes / (bw * 1e9) * 1e3
        row = {"pos": pos, "floor_ms": floor}
        for rows in (1, 4, 8):
            row[f"ms{rows}"], out = time_step(step, rows, pos)
            saved[f"logits{rows}_pos{pos}"] = out.cpu()
            # the K/V cells the rows wrote, every layer: where two trees' outputs differ, the first
            # layer whose cells differ says which kernel did
            saved[f"k{rows}_pos{pos}"] = kv.k[:, pos:pos + rows].cpu()
            saved[f"v{rows}_pos{pos}"] = kv.v[:, pos:pos + rows].cpu()
            if rows == 4:  # verify rows = one-row steps, bit for bit (the cells below hold what the 4 rows wrote)
                with torch.inference_mode():
                    ones = [step.forward(torch.tensor([100 + j], device="cuda"),
                                         torch.tensor([pos + j], device="cuda"))[0][0].clone() for j in range(4)]
                row["bitwise_verify_rows"] = all(torch.equal(o, out[j]) for j, o in enumerate(ones))
                saved[f"logits1x4_pos{pos}"] = torch.stack(ones).cpu()
        print(f"position {pos}: floor {floor * 1e3:.0f} us ({nbytes / 2**20:.1f} MiB at {bw:.0f} GB/s); "
              f"decode step 1 row {row['ms1'] * 1e3:.1f} us, 4 rows {row['ms4'] * 1e3:.1f} us "
              f"(4/1 {row['ms4'] / row['ms1']:.3f}), 8 rows {row['ms8'] * 1e3:.1f} us = "
              f"{8 / row['ms8'] * 1e3:.0f} prefill tok/s as 8-row steps; 4 verify rows = 1-row steps bitwise: "
              f"{row['bitwise_verify_rows']}", flush=True)
        for P, dec in chunks.items():
            ms, hid = time_step(dec, P, pos, iters=60, head=False, per_graph=2)
            _, h1 = step.forward(torch.tensor([100 + P - 1], device="cuda"), torch.tensor([pos + P - 1], device="cuda"))
            same = bool(torch.equal(h1[0], hid[P - 1]))  # the cells before it hold what the chunk wrote
            row[f"prefill{P}_ms"], row[f"prefill{P}_bitwise_last_row"] = ms, same
            saved[f"prefill{P}_hidden_pos{pos}"] = hid.cpu()
            print(f"  prefill chunk of {P} rows: {ms * 1e3:.1f} us = {P / ms * 1e3:.0f} tok/s "
                  f"({row['ms8'] * P / 8 / ms:.2f}x 8-row steps); last row's hidden = a 1-row step's: {same}",
                  flush=True)
        for v in filter(None, a.ab.split(";")):
            kw = {k: type(getattr(FusedTiles(), k))(int(x)) for k, x in (f.split("=") for f in v.split(","))}
            alt = FusedDecoder(m, kv, FusedTiles(**kw))
            ms, lo = time_step(alt, 1, pos)
            _, ld = time_step(step, 1, pos, iters=30)
            ab = {"ms1": ms, "ms1_default": row["ms1"], "same_logits": bool(torch.equal(lo, ld))}
            # a variant that changes the arithmetic must stay batch-invariant: its 4 verify rows =
            # its 1-row steps, and its prefill chunk's last row = its 1-row step's
            ab["ms4"], out = time_step(alt, 4, pos)
            with torch.inference_mode():
                ab["bitwise_verify_rows"] = all(
                    torch.equal(alt.forward(torch.tensor([100 + j], device="cuda"),
                                            torch.tensor([pos + j], device="cuda"))[0][0], out[j]) for j in range(4))
            P = max(chunks)
            alt_chunk = FusedDecoder(m, kv, FusedTiles(**kw), prefill_rows=P)
            ab["prefill_ms"], hid = time_step(alt_chunk, P, pos, iters=60, head=False, per_graph=2)
            ab["prefill_ms_default"] = row[f"prefill{P}_ms"]
            _, h1 = alt.forward(torch.tensor([100 + P - 1], device="cuda"), torch.tensor([pos + P - 1], device="cuda"))
            ab["bitwise_prefill_last_row"] = bool(torch.equal(h1[0], hid[P - 1]))
            del alt, alt_chunk
            row[f"ab {v}"] = ab
            print(f"  variant {v}: 1-row step {ms * 1e3:.1f} us vs default {row['ms1'] * 1e3:.1f} us "
                  f"(same logits: {ab['same_logits']}); 4 rows {ab['ms4'] * 1e3:.1f} vs {row['ms4'] * 1e3:.1f} us; "
                  f"prefill {P} rows {ab['prefill_ms'] * 1e3:.1f} vs {ab['prefill_ms_default'] * 1e3:.1f} us; "
                  f"bitwise verify rows {ab['bitwise_verify_rows']}, prefill last row "
                  f"{ab['bitwise_prefill_last_row']}", flush=True)
        res["rows"].append(row)
    if a.save:
        torch.save(saved, a.save)
    try:
        res["gaps_pos256"] = gp = gaps(step, 256)
        print(f"replayed 1-row step at 256: {gp['kernels_per_step']} kernels, {gp['kernel_us']:.1f} us in kernels, "
              f"{gp['gap_us']:.1f} us of gaps ({gp['gap_per_kernel_us']:.2f} us a kernel)")
    except Exception as e:  # the trace is an extra; the timings above stand without it
        print(f"trace failed: {type(e).__name__}: {e}")
    for pos in map(int, a.positions.split(",")):
        prof = profile(step, pos)
        res[f"profile_pos{pos}"] = prof
        print(f"eager 1-row step at {pos}: kernel, us a step, launches a step")
        for r in prof[:12]:
            print(f"  {r['kernel']:50s} {r['us_per_step']:7.1f} {r['launches_per_step']:5.0f}")
        print(f"  total {sum(r['us_per_step'] for r in prof):.1f} us, "
              f"{sum(r['launches_per_step'] for r in prof):.0f} launches")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
