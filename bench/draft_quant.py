"""--draft-quant on the MTP drafter: ms per draft step and acceptance (tokens/round at temp 0, k = 3)
for bf16 / q8_0 / q5_0 / q4_0, to decide the default by measurement.

    python bench/draft_quant.py --model PATH --out FILE.json [--drafter HEAD.gguf] [--prompts 10]

For each --draft-quant:
- draft step: a drafter loaded like the engine loads it (packed layers on the Triton GEMV on
  CUDA, dense F.linear on the CPU; LM head rows in the main model's format), prefilled with a
  1k-token context, then `propose(tokens, 1)` (one draft step: one row through fc, the block and
  the head, plus the id's host sync) timed many times after warm-up, median, CUDA-synchronised;
  and ms per round of k = 3 / k = 1 drafts (with 1 or 2 catch-up rows) in each propose mode:
  graph (CUDA-graph replay, the CUDA default), eager (the same code run eagerly: the CPU path and
  what a failed capture falls back to). Beside it, the GEMV chain of one step (every matrix of
  the step, head included) replayed as a CUDA graph: the weight-reading floor of the step, with
  its bytes and GB/s.
  An extra row "bf16/dense-head" is the old all-dense path (bf16 matrices and bf16 head rows).
- acceptance: bench/accept.py's prompts and run_cell on the MT-Bench first turns (temp 0,
  k = 3): tokens per round and acceptance per draft position.
Without CUDA the CUDA-only timings (graph replay) are skipped with a message; CPU times are
printed but mean little. A quant whose load or kernels fail is reported and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

import accept  # noqa: E402  (bench/accept.py: prompts and the acceptance cell)

from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.models.mtp_head import DEFAULT_HEAD  # noqa: E402
from mtp_turbo.models.mtp_load import load_head  # noqa: E402
from mtp_turbo.spec.drafters.mtp import MTPDrafter  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402

QUANTS = ("bf16", "q8_0", "q5_0", "q4_0")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def make_drafter(engine: Engine, path: Path, quant: str, head_quant: str, ctx: int) -> MTPDrafter:
    head = load_head(path, engine.model, expect_sha=engine.gguf.sha256(), draft_quant=quant,
                     head_quant=head_quant, main_gguf=engine.gguf)
    return MTPDrafter(head, max(engine.ctx_size, ctx + 64), sink=64, window=256, main=engine.model)


# propose's modes: "graph" = replayed from CUDA graphs (the CUDA default), "eager" = the same
# code run eagerly (the CPU path, and what a failed capture falls back to)
MODES = ("graph", "eager")


def set_mode(dr: MTPDrafter, mode: str) -> None:
    dr.use_graphs = mode == "graph"


def time_propose(dr: MTPDrafter, tokens: list[int], steps: int, warmup: int, catch_up: int = 1) -> dict:
    """Median ms of propose(tokens, 1) (one draft step) and propose(tokens, 3) / 3; catch_up: rows
    the round encodes before drafting (a real round after `a` accepted drafts: a + 1)."""
    dev = dr.head.device
    p0 = len(tokens) - 2
    out = {}
    for k in (1, 3):
        ts = []
        for i in range(warmup + steps):
            dr.cells.truncate(p0 - catch_up + 1)  # rows p0-catch_up+1 .. p0 to encode again
            _sync(dev)
            t0 = time.perf_counter()
            dr.propose(tokens, k)
            _sync(dev)
            if i >= warmup:
                ts.append(time.perf_counter() - t0)
        out[f"ms_propose_k{k}"] = statistics.median(ts) * 1e3
    out["ms_per_step_k3"] = out["ms_propose_k3"] / 3
    return out


def time_modes(dr: MTPDrafter, tokens: list[int], steps: int, warmup: int) -> dict:
    """ms per round of k = 3 drafts (catch-up 1 and 2 rows) for each mode, and whether the graph
    mode's drafts equal the eager static mode's."""
    out = {}
    modes = MODES if dr.head.device.type == "cuda" else MODES[1:]
    drafts = {}
    for mode in modes:
        set_mode(dr, mode)
        for cu in (1, 2):
            r = time_propose(dr, tokens, steps, warmup, catch_up=cu)
            out[f"ms_round_k3_cu{cu}_{mode}"] = r["ms_propose_k3"]
            out[f"ms_round_k1_cu{cu}_{mode}"] = r["ms_propose_k1"]
        dr.cells.truncate(len(tokens) - 3)
        drafts[mode] = dr.propose(tokens, 3)
    if "graph" in drafts:
        out["graph_used"] = bool(dr._graphs) and dr.use_graphs
        out["graph_drafts_equal_eager"] = drafts["graph"] == drafts["eager"]
    set_mode(dr, "graph" if dr.head.device.type == "cuda" else "eager")
    return out


def step_layers(head) -> list[tuple[str, object, int]]:
    """(name, weight op, input width) of every matrix product of one draft step, in order."""
    cfg, ops = head.cfg, head.ops
    D, qd = cfg.hidden, cfg.n_heads * cfg.head_dim
    names = (["fc"] if "fc" in ops else ["fc_e", "fc_h"]) + (["qkv"] if "qkv" in ops else ["q", "k", "v"]) + ["o"]
    names += (["gate_up"] if "gate_up" in ops else ["gate", "up"]) + ["down"]
    width = {"o": qd, "down": cfg.ffn, "fc": 2 * D}
    layers = [(n, ops[n], width.get(n, D)) for n in names]
    layers.append(("head", ops.get("head", head.head_rows), D))
    return layers


def _nbytes(w) -> int:
    if isinstance(w, torch.Tensor):
        return w.numel() * w.element_size()
    return w.w.nbytes


def time_gemv_chain(head, reps: int = 200) -> dict:
    """The step's matrix products for one row, captured in a CUDA graph and replayed."""
    from mtp_turbo.models.block import linear

    layers = step_layers(head)
    xs = [torch.randn(1, k, device=head.device, dtype=head.dtype) for _, _, k in layers]

    def run():
        for (_, w, _), x in zip(layers, xs):
            linear(w, x)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    t = statistics.median(ts)
    nbytes = sum(_nbytes(w) for _, w, _ in layers)
    return {"us_gemv_chain_graph": t * 1e6, "step_weight_bytes": nbytes, "gemv_chain_gbs": nbytes / t / 1e9,
            "layers": {n: (type(w).__name__ if not isinstance(w, torch.Tensor) else "dense", _nbytes(w))
                       for n, w, _ in layers}}


def context_tokens(engine: Engine, n: int) -> list[int]:
    text = (ROOT / "data" / "tempest.txt").read_text()
    ids = engine.tokenizer.encode(text)
    return (ids * (n // max(len(ids), 1) + 1))[:n]


def measure_step(engine, path, quant, head_quant, args) -> dict:
    ctx = context_tokens(engine, args.context)
    dr = make_drafter(engine, path, quant, head_quant, len(ctx))
    g = torch.Generator().manual_seed(0)
    # hidden rows only shape the values, not the work: random states stand in for the main model's
    hid = (torch.randn(len(ctx) - 1, engine.model.cfg.hidden, generator=g) * 2).to(dr.head.device, dr.head.dtype)
    dr.on_prefill(0, len(ctx) - 1, hid, ctx)
    r = time_propose(dr, ctx, args.steps, args.warmup)
    r.update(time_modes(dr, ctx, args.steps, args.warmup))
    r["packed_layers"] = sorted(k for k, v in dr.head.ops.items() if not isinstance(v, torch.Tensor))
    if engine.device.type == "cuda":
        r.update(time_gemv_chain(dr.head))
    else:
        r["us_gemv_chain_graph"] = None
    return r


def measure_accept(engine, quant, prompts, args) -> dict:
    spec = SpecConfig(draft="mtp", draft_tokens=3, drafter=args.drafter, draft_quant=quant)
    return accept.run_cell(engine, prompts, accept.samplers(0)["temp0"], spec, args.max_tokens)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="main model GGUF (default: the packaged Gemma-3-270M)")
    ap.add_argument("--drafter", default=None, help="MTP head GGUF (default: the shipped one)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--quants", default=",".join(QUANTS))
    ap.add_argument("--prompts", type=int, default=10, help="MT-Bench prompts for acceptance")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200, help="timed propose calls per k")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--context", type=int, default=1024, help="context tokens before the timed steps")
    ap.add_argument("--no-accept", action="store_true", help="timings only")
    ap.add_argument("--out", default="out/draft_quant.json")
    args = ap.parse_args(argv)
    engine = Engine(EngineConfig(model=args.model, device=args.device, progress=False))
    path = Path(args.drafter) if args.drafter else DEFAULT_HEAD
    cuda = engine.device.type == "cuda"
    if not cuda:
        print("draft_quant: no CUDA device: the CUDA-graph GEMV-chain timings are SKIPPED; propose times "
              "are CPU times of the dense path (not the packed GEMV)")
    prompts = None if args.no_accept else accept.load_prompts(engine, args.prompts)["mt_bench"]
    runs = [(q, "main") for q in args.quants.split(",") if q] + ([("bf16", "bf16")] if "bf16" in args.quants else [])
    rows = []
    for quant, hq in runs:
        name = quant if hq == "main" else f"{quant}/dense-head"
        row = {"quant": name}
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            row.update(measure_step(engine, path, quant, hq, args))
        except Exception as e:  # a load / compile failure of one quant: report it, go on
            traceback.print_exc(file=sys.stderr)
            row["step_error"] = f"{type(e).__name__}: {e}"[:300]
            if cuda:
                torch.cuda.synchronize()
        if prompts is not None and hq == "main":
            try:
                row["accept"] = measure_accept(engine, quant, prompts, args)
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                row["accept_error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    print(f"\ndevice {engine.device}; context {args.context} tokens; acceptance: {args.prompts} MT-Bench "
          f"prompts, temp 0, k = 3, {args.max_tokens} tokens")
    print("| draft quant | ms / draft step (propose k=1) | ms / step (k=3 chain) | GEMV chain us (graph) "
          "| step weight MB | GB/s | tokens / round | acceptance per position |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = r.get("accept") or {}
        err = r.get("step_error") or r.get("accept_error")
        print(f"| {r['quant']} | {f(r.get('ms_propose_k1'), '.3f')} | {f(r.get('ms_per_step_k3'), '.3f')} "
              f"| {f(r.get('us_gemv_chain_graph'), '.1f')} | {f(r.get('step_weight_bytes', 0) / 1e6 if r.get('step_weight_bytes') else None, '.2f')} "
              f"| {f(r.get('gemv_chain_gbs'), '.0f')} | {f(a.get('tokens_per_round'), '.3f')} "
              f"| {' '.join(f'{x:.3f}' for x in a.get('acceptance_per_position', [])) or '-'}"
              f"{' | FAILED: ' + err if err else ''} |")
    print("\nms per propose round (median, CUDA-synchronised), by mode; cu = catch-up rows encoded in the round")
    cols = [(m, k, cu) for m in MODES for k in (3, 1) for cu in (1, 2)]
    print("| draft quant | " + " | ".join(f"{m} k={k} cu={cu}" for m, k, cu in cols) + " | graph == eager |")
    print("|---|" + "---|" * (len(cols) + 1))
    for r in rows:
        print(f"| {r['quant']} | " + " | ".join(f(r.get(f"ms_round_k{k}_cu{cu}_{m}"), ".3f") for m, k, cu in cols)
              + f" | {r.get('graph_drafts_equal_eager', '-')} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(engine.device), "cuda_name": torch.cuda.get_device_name() if cuda else None,
                               "context": args.context, "prompts": args.prompts, "max_tokens": args.max_tokens,
                               "rows": rows}, indent=1, default=str))
    print(f"wrote {out}")
    return 1 if any("step_error" in r or "accept_error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
