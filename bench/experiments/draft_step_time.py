"""One MTP draft step on Gemma-3-270M's drafter shapes with random weights (no model file), per
weight path, and the drafter's attention (`attn_cells`) per launch shape: which pays on the GPU.

Draft step (FusedMTPStep, captured in a CUDA graph of `--reps` steps, replayed): inputs of 1 or 3
catch-up rows -> write_qkv -> attend over sink 64 + window 256 + 1 chain cell -> logits of a
32768-row Q8_0 head, for
- q8_0: packed block matrices (their own GEMV; norms, RoPE and gating as kernels of their own);
- bf16: dense matrices on the main layers' tail kernels (FusedTiles.tails);
- bf16-notails: the same dense matrices, tails off.
attn_cells alone (a graph of `--reps` launches): cells per program (BS) x warps. (A copy of the
kernel loading V beside K, before the QK dot, was timed in session 21 and gained nothing: removed.)

    python bench/experiments/draft_step_time.py --out $OUT/draft_step.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mtp_turbo.models import mtp_kernels as mk  # noqa: E402
from mtp_turbo.models.layer_plan import FusedTiles, pow2 as _pow2  # noqa: E402
from mtp_turbo.models.arch import ModelConfig, Rope  # noqa: E402
from mtp_turbo.models.mtp_head import MTPConfig, MTPHead, tensor_names  # noqa: E402
from mtp_turbo.models.mtp_load import apply_draft_quant, pack_ops, policy_bytes  # noqa: E402
from mtp_turbo.models.mtp_step import FusedMTPStep  # noqa: E402
from mtp_turbo.quant.formats import quantize  # noqa: E402
from mtp_turbo.quant.repack import PackedWeight  # noqa: E402

MAIN = ModelConfig(family="gemma3", vocab_size=262144, hidden=640, n_layers=18, n_heads=4, n_kv_heads=1, head_dim=256,
                   ffn=2048, eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=512,
                   sliding_pattern=6, query_scale=256 ** -0.5, context_length=32768)
HEAD_ROWS = 32768
CAP = 4096


def head_for(quant: str, dev) -> MTPHead:
    cfg = MTPConfig.for_main(MAIN)
    g = torch.Generator().manual_seed(0)
    D, qd, kvd = cfg.hidden, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes = {"fc_e": (D, D), "fc_h": (D, D), "q": (qd, D), "k": (kvd, D), "v": (kvd, D), "o": (D, qd),
              "gate": (cfg.ffn, D), "up": (cfg.ffn, D), "down": (D, cfg.ffn)}
    W = {}
    for k in tensor_names(cfg):
        if k.endswith("norm"):
            W[k] = 1.0 + 0.1 * torch.randn(cfg.head_dim if k in ("q_norm", "k_norm") else D, generator=g)
        else:
            W[k] = torch.randn(*shapes[k], generator=g) / shapes[k][1] ** 0.5
    embed = (torch.randn(MAIN.vocab_size, D, generator=g) * 0.05).to(torch.bfloat16).to(dev)
    ids = torch.arange(HEAD_ROWS) * (MAIN.vocab_size // HEAD_ROWS)
    rows = embed[ids.to(dev)].float().cpu()
    head_pw = PackedWeight.from_gguf_bytes(quantize(rows, "q8_0"), "q8_0", tuple(rows.shape)).to(dev)
    pbytes = policy_bytes(W, quant)
    Wq = apply_draft_quant(W, quant, pbytes)
    Wq["fc"] = torch.cat([Wq["fc_e"], Wq["fc_h"]], dim=1)
    if "fc_e" in pbytes:
        import numpy as np

        pbytes["fc"] = (pbytes["fc_e"][0], np.concatenate([pbytes["fc_e"][1], pbytes["fc_h"][1]], axis=1))
    Wd = {k: (w if k.endswith("norm") else w.to(torch.bfloat16)).to(dev) for k, w in Wq.items()}
    packed = {k: PackedWeight.from_gguf_bytes(raw, fmt, tuple(Wd[k].shape)).to(dev) for k, (fmt, raw) in pbytes.items()}
    ops = pack_ops(Wd, packed, head_pw, cfg)
    return MTPHead(cfg, Wd, embed, ids, dev, torch.bfloat16, ops=ops)


def graph_us(fn, reps: int, trials: int = 7) -> float:
    """Median us per call of fn, captured `reps` times in one graph and replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(out)


def draft_steps(reps: int) -> dict:
    dev = torch.device("cuda")
    out = {}
    for name, quant, tiles in (("q8_0", "q8_0", FusedTiles()), ("bf16", "bf16", FusedTiles()),
                               ("bf16-notails", "bf16", FusedTiles(tails=False))):
        head = head_for(quant, dev)
        head.rope_at(torch.tensor([CAP - 1], device=dev))
        c = head.cfg
        kc = torch.randn(CAP, c.n_kv_heads, c.head_dim, device=dev).to(torch.bfloat16)
        vc = torch.randn_like(kc)
        st = FusedMTPStep(head, kc, vc, head.rope, tiles)
        hid = torch.randn(8, c.hidden, device=dev).to(torch.bfloat16)
        runs = torch.tensor([0, 64, 3000 - 256, 3001, 0, 0], device=dev)
        M = 64 + 256 + 8
        for n in (1, 3):
            toks = torch.randint(0, MAIN.vocab_size, (n,), device=dev)
            pos = torch.arange(3001 - n, 3001, device=dev)

            def step():
                x = st.inputs(toks, hid, torch.arange(n, device=dev))
                q = st.write_qkv(x, pos)[-1:]
                st.logits(st.attend(x[-1:], q, runs, M), 0)

            out[f"{name} {n} rows"] = graph_us(step, reps)
            print(f"draft step {name:13s} {n} rows: {out[f'{name} {n} rows']:7.1f} us", flush=True)
        out[f"{name} tails"] = st.tails
    return out


def attn_variants(reps: int) -> dict:
    dev = torch.device("cuda")
    H, HKV, DH, QR = 4, 1, 256, 16
    kc = torch.randn(CAP, HKV, DH, device=dev).to(torch.bfloat16)
    vc = torch.randn_like(kc)
    q = torch.randn(H, DH, device=dev).to(torch.bfloat16)
    runs = torch.tensor([0, 64, 3000 - 256, 3001, 0, 0], device=dev)
    M = 64 + 256 + 8
    ref = None
    out = {}
    for kern, kname in ((mk.attn_cells, "attn_cells"),):
        for bs in (16, 32, 64, 128):
            for warps in (2, 4, 8):
                S = -(-M // bs)
                op = torch.zeros(HKV * S, QR, DH, device=dev)
                mx = torch.zeros(HKV * S, QR, device=dev)
                ls = torch.zeros_like(mx)
                cnt = torch.zeros(HKV, dtype=torch.int32, device=dev)
                att = torch.zeros(H, DH, device=dev, dtype=torch.bfloat16)

                def launch():
                    kern[(S, HKV)](q, kc, vc, runs, att, op, mx, ls, cnt, M, DH ** -0.5, H=H, HKV=HKV, DH=DH, QR=QR,
                                   BS=bs, SP=_pow2(S), PREC="tf32", num_warps=warps)

                try:
                    us = graph_us(launch, reps)
                except Exception as e:  # a shape the compiler refuses is reported, the sweep goes on
                    print(f"{kname} BS={bs} warps={warps}: failed {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                if ref is None:
                    ref = att.float().clone()
                err = (att.float() - ref).abs().max().item()
                out[f"{kname} BS={bs} warps={warps}"] = us
                print(f"{kname:10s} BS={bs:3d} warps={warps}: {us:6.2f} us  (max diff {err:.2e})", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 1
    res = {"gpu": torch.cuda.get_device_name(), "attn": attn_variants(a.reps), "draft_step": draft_steps(a.reps)}
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
