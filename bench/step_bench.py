"""The fused main-model step on Gemma-3-270M's shapes with random weights: no model file needed.

Times the captured 1-row and 4-row steps per FusedTiles variant (programmatic dependent launch on
or off, the L2 weight prefetch, the split norm), checks every variant's logits bit-identical to
the first's (launch options must not change the math), and profiles one eager step: kernels a
token and CUDA time per kernel class. The bandwidth floor of the step's bytes is printed beside.

    python bench/step_bench.py --out $OUT/step.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.models.fused import FusedDecoder, FusedTiles  # noqa: E402
from mtp_turbo.models.gemma3 import LAYER_TENSORS, Gemma3, Gemma3Config  # noqa: E402

CFG = Gemma3Config(vocab_size=262144, hidden=640, n_layers=18, n_heads=4, n_kv_heads=1, head_dim=256, ffn=2048,
                   eps=1e-6, rope_global=1e6, rope_local=1e4, sliding_window=512, sliding_pattern=6,
                   query_scale=256 ** -0.5, context_length=32768)
VARIANTS = {"no PDL": {"pdl": False}, "PDL": {"pdl": True, "prefetch": False},
            "PDL + L2 prefetch": {"pdl": True, "prefetch": True},
            "PDL + prefetch, norms in the GEMVs": {"pdl": True, "prefetch": True, "split_norm": False}}


def random_model(cfg: Gemma3Config, dev) -> Gemma3:
    g = torch.Generator(device=dev).manual_seed(0)
    D, F, DH = cfg.hidden, cfg.ffn, cfg.head_dim
    nq, nkv = cfg.n_heads * DH, cfg.n_kv_heads * DH
    shapes = {"attn_norm": (D,), "q": (nq, D), "k": (nkv, D), "v": (nkv, D), "q_norm": (DH,), "k_norm": (DH,),
              "o": (D, nq), "post_attn_norm": (D,), "ffn_norm": (D,), "gate": (F, D), "up": (F, D),
              "down": (D, F), "post_ffn_norm": (D,)}

    def mk(shape, norm, scale):
        t = torch.randn(*shape, generator=g, device=dev) * scale
        return (1 + t).float() if norm else t.to(torch.bfloat16)

    w = {"token_embd": mk((cfg.vocab_size, D), False, 0.05), "output_norm": mk((D,), True, 0.1)}
    for i in range(cfg.n_layers):
        for k, name in LAYER_TENSORS.items():
            w[f"blk.{i}.{name}"] = mk(shapes[k], k.endswith("norm"), 0.1 if k.endswith("norm") else 0.04)
    return Gemma3(cfg, w, dev, torch.bfloat16)


def step_bytes(m: Gemma3, pos: int) -> int:
    """Bytes one 1-row step must read once: every weight (the fused qkv / gate_up, not their split
    views), the K/V cells its attention reads."""
    n = m.embed.numel() * m.embed.element_size() + m.out_norm.numel() * 4
    for L in m.layers:
        n += sum(L[k].numel() * L[k].element_size() for k in ("qkv", "o", "gate_up", "down"))
        n += sum(L[k].numel() * 4 for k in L if k.endswith("norm"))
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


def time_step(dec: FusedDecoder, rows: int, pos: int, iters: int = 300):
    """Median ms of one captured step (a graph of 10 steps, so the replay launch is amortised),
    and the logits it gives."""
    toks = torch.arange(100, 100 + rows, device="cuda")
    p = torch.arange(pos, pos + rows, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.inference_mode():
        for _ in range(3):
            dec.forward(toks, p)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(g):
        for _ in range(10):
            out = dec.forward(toks, p)[0]
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(iters // 10):
        st.record(); g.replay(); en.record(); en.synchronize()
        ts.append(st.elapsed_time(en) / 10)
    return statistics.median(ts[3:]), out.clone()


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
    ap.add_argument("--variants", default=",".join(VARIANTS), help="FusedTiles variants (names above)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    assert torch.cuda.is_available(), "needs CUDA"
    m = random_model(CFG, torch.device("cuda"))
    kv = KVCache(CFG.n_layers, 8192, CFG.n_kv_heads, CFG.head_dim, "cuda", torch.bfloat16)
    kv.k.normal_(0, 1)
    kv.v.normal_(0, 1)
    bw = copy_bandwidth()
    res = {"gpu": torch.cuda.get_device_name(), "copy_GBps": bw, "rows": []}
    ref = {}
    for pos in map(int, a.positions.split(",")):
        floor = step_bytes(m, pos) / (bw * 1e9) * 1e3
        print(f"position {pos}: floor {floor * 1e3:.0f} us ({step_bytes(m, pos) / 2**20:.1f} MiB at {bw:.0f} GB/s)")
        for name in a.variants.split(","):
            dec = FusedDecoder(m, kv, FusedTiles(**VARIANTS[name]))
            row = {"variant": name, "pos": pos, "pdl_active": bool(dec.pdl), "floor_ms": floor}
            for rows in (1, 4):
                ms, logits = time_step(dec, rows, pos)
                same = ref.setdefault((pos, rows), logits)
                row[f"ms{rows}"] = ms
                row[f"bitwise{rows}"] = bool(torch.equal(same, logits))
            row["ratio4"] = row["ms4"] / row["ms1"]
            res["rows"].append(row)
            print(f"  {name:36s} 1 row {row['ms1'] * 1e3:6.1f} us  4 rows {row['ms4'] * 1e3:6.1f} us  "
                  f"(4/1 {row['ratio4']:.3f})  same logits as first: {row['bitwise1'] and row['bitwise4']}",
                  flush=True)
    prof = profile(FusedDecoder(m, kv, FusedTiles(pdl=False)), 256)
    res["profile_no_pdl_pos256"] = prof
    print("eager 1-row step at 256, no PDL: kernel, us a step, launches a step")
    for r in prof[:12]:
        print(f"  {r['kernel']:50s} {r['us_per_step']:7.1f} {r['launches_per_step']:5.0f}")
    print(f"  total {sum(r['us_per_step'] for r in prof):.1f} us, {sum(r['launches_per_step'] for r in prof):.0f} launches")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
