"""Self-distillation of an MTP head for a main model that ships none (`mtp-turbo train-mtp`).

Owns: the training loop: frozen main model (models/load.py), head initialised from the main
model's last sliding layer (block) + identity fc_hidden, loss = sum over chain steps j of
KL(p_main(. | prefix up to t+j) || q_j) at every chain start t, where both distributions are
restricted to the head's N vocabulary ids and the main one renormalised over them (no 'rest'
bucket: the draft can only ever propose those ids, and mass outside them is a fixed cost);
AdamW, warmup + cosine LR (over --steps or --time-budget, whichever ends first), bf16 autocast on
CUDA, tqdm, periodic held-out eval (KL and top-1 agreement with the main model's full-vocab
argmax, per chain step), checkpoint/resume, the final table, writing the head (train/export.py).
Ignores: serving (models/mtp_drafter.py), data building (train/data.py).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..errors import ConfigError
from ..models.gemma3 import LAYER_TENSORS, rms_norm
from ..models.mtp_drafter import MTPConfig
from . import data as data_mod
from .export import save_head
from .forward import chain_states, main_hidden


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch: int = 16
    seq_len: int = 0  # 0 = the data's row length; else a random crop of that many tokens (from position 0)
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.01
    chain: int = 3  # chain depth k trained (steps 1..k)
    vocab_rows: int = 32768  # 0 = full head
    sink: int = 64
    window: int = 256
    hidden_source: str = "pre_norm"
    eval_every: int = 250
    eval_rows: int = 32
    ckpt_every: int = 500
    time_budget: float = 0.0  # seconds of training (0 = no limit)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.chain < 1 or self.steps < 1 or self.batch < 1:
            raise ConfigError("chain, steps and batch must be >= 1")


def frequent_ids(rows: np.ndarray, vocab: int, n: int) -> np.ndarray:
    """The n most frequent token ids of the data (ties by id), ascending int64."""
    counts = np.bincount(rows.reshape(-1).astype(np.int64), minlength=vocab)
    order = np.lexsort((np.arange(vocab), -counts))[:n]
    return np.sort(order)


def init_head(model, cfg: MTPConfig, seed: int) -> dict[str, torch.Tensor]:
    """fp32 head weights: block = a copy of the main model's last sliding layer (post-norms scaled
    to 1%), fc_hidden = I, fc_embedding small random, input norms 1, final norm = the main model's."""
    g = torch.Generator().manual_seed(seed)
    mc = model.cfg
    src = max(i for i in range(mc.n_layers) if not mc.is_global(i))
    W = {k: model.layers[src][k].detach().float().clone() for k in LAYER_TENSORS}
    D = cfg.hidden
    W["fc_h"] = torch.eye(D)
    W["fc_e"] = torch.randn(D, D, generator=g) * (0.1 / math.sqrt(D))
    W["enorm"] = torch.ones(D)
    W["hnorm"] = torch.ones(D)
    W["out_norm"] = model.out_norm.detach().float().clone()
    # start near an identity block (output ~ normalised h: the main model's own next-token view);
    # the copied post-norms would let the block's outputs swamp x (held-out KL 26 vs 12 nats)
    W["post_attn_norm"] = W["post_attn_norm"] * 0.01
    W["post_ffn_norm"] = W["post_ffn_norm"] * 0.01
    return {k: v.to(model.device) for k, v in W.items()}


def step_losses(model, W, cfg: MTPConfig, head_rows: torch.Tensor, ids: torch.Tensor | None, tokens: torch.Tensor,
                tc: TrainConfig, full_argmax: bool = False):
    """tokens [B, T] -> (list of KL per chain step, list of top-1 agreement per step).
    Agreement is with the main model's argmax over the head's ids, or over the full vocabulary
    when full_argmax (eval)."""
    H = main_hidden(model, tokens)  # [B, T, D] pre-norm
    Hn = model.final_norm(H)
    src = Hn if cfg.hidden_source == "post_norm" else H
    emb = model.embed_tokens(tokens)
    rope = model.rope[False]
    states = chain_states(W, cfg, rope, emb, src, tc.chain, tc.sink, tc.window)
    with torch.no_grad():
        main_logits = F.linear(Hn, head_rows).float()  # [B, T, N]
        if full_argmax:
            fa = torch.cat([F.linear(Hn[:, i: i + 64], model.embed).float().argmax(-1) for i in range(0, Hn.shape[1], 64)], 1)
    losses, agree = [], []
    for j, h in enumerate(states, start=1):
        m = h.shape[1]
        q = F.linear(rms_norm(h, W["out_norm"], cfg.eps), head_rows).float()  # [B, m, N]
        p_logits = main_logits[:, j: j + m]  # main at position t+j predicts token t+j+1
        logp = torch.log_softmax(p_logits, -1)
        logq = torch.log_softmax(q, -1)
        kl = (logp.exp() * (logp - logq)).sum(-1).mean()
        losses.append(kl)
        with torch.no_grad():
            qa = q.argmax(-1)
            if full_argmax:
                agree.append(float(((qa if ids is None else ids[qa]) == fa[:, j: j + m]).float().mean()))
            else:
                agree.append(float((qa == p_logits.argmax(-1)).float().mean()))
    return losses, agree


def train(model, base_sha: str, data_path: str, out: str, tc: TrainConfig, device, resume: bool = False,
          progress: bool = True, ckpt: str | None = None) -> dict:
    torch.manual_seed(tc.seed)
    train_rows, held_rows, side = data_mod.load(data_path)
    V = model.cfg.vocab_size
    cfg = MTPConfig.for_main(model.cfg, hidden_source=tc.hidden_source)
    ckpt_path = Path(ckpt) if ckpt else Path(str(out) + ".ckpt")
    state = torch.load(ckpt_path, map_location=device) if resume and ckpt_path.exists() else None
    if state is not None:
        ids = state["vocab_ids"]
        W = {k: v.to(device) for k, v in state["W"].items()}
    else:
        ids = (torch.from_numpy(frequent_ids(train_rows, V, tc.vocab_rows)) if 0 < tc.vocab_rows < V else None)
        W = init_head(model, cfg, tc.seed)
    ids_dev = None if ids is None else ids.to(device)
    head_rows = model.embed if ids_dev is None else model.embed[ids_dev].contiguous()
    params = {k: torch.nn.Parameter(v.float()) for k, v in W.items()}
    decay = [p for k, p in params.items() if not k.endswith("norm")]
    nodecay = [p for k, p in params.items() if k.endswith("norm")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.95))
    step0 = 0
    if state is not None:
        opt.load_state_dict(state["opt"])
        step0 = int(state["step"])
    data = torch.from_numpy(train_rows.astype(np.int64)).to(device)
    held = torch.from_numpy(held_rows[: tc.eval_rows].astype(np.int64)).to(device)
    T = data.shape[1] if tc.seq_len <= 0 else min(tc.seq_len, data.shape[1])
    gen = torch.Generator(device="cpu").manual_seed(tc.seed + step0)
    cuda = torch.device(device).type == "cuda"
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    history: list[dict] = []

    def evaluate(step):
        with torch.no_grad(), amp:
            Wd = {k: p.to(model.dtype) if not k.endswith("norm") else p for k, p in params.items()}
            res_l, res_a = [], []
            for i in range(0, held.shape[0], tc.batch):
                l, a = step_losses(model, Wd, cfg, head_rows, ids_dev, held[i: i + tc.batch, :T], tc, full_argmax=True)
                res_l.append([float(x) for x in l])
                res_a.append(a)
        rec = {"step": step, "kl": np.mean(res_l, 0).round(4).tolist(), "top1": np.mean(res_a, 0).round(4).tolist()}
        history.append(rec)
        tqdm.write(f"eval @ {step}: KL per step {rec['kl']}  top-1 agreement per step {rec['top1']}")
        return rec

    def save_ckpt(step):
        torch.save({"W": {k: p.detach() for k, p in params.items()}, "opt": opt.state_dict(), "step": step,
                    "vocab_ids": ids, "config": asdict(tc)}, ckpt_path)

    t0 = time.perf_counter()
    step = step0
    bar = tqdm(total=tc.steps, initial=step0, desc="train-mtp", unit="step", disable=not progress, mininterval=2.0)
    evaluate(step)
    while step < tc.steps:
        elapsed = time.perf_counter() - t0
        if tc.time_budget and elapsed >= tc.time_budget:
            tqdm.write(f"time budget {tc.time_budget:.0f}s reached at step {step}")
            break
        frac = step / tc.steps
        if tc.time_budget:
            frac = max(frac, elapsed / tc.time_budget)
        lr = tc.lr * (min(1.0, (step + 1) / tc.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, data.shape[0], (tc.batch,), generator=gen).to(device)
        with amp:
            losses, agree = step_losses(model, params, cfg, head_rows, ids_dev, data[idx, :T], tc)
            loss = sum(losses)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        step += 1
        bar.update(1)
        if step % 10 == 0 or step == tc.steps:  # a host sync: not every step
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc1=f"{agree[0]:.3f}", lr=f"{lr:.2e}")
        if tc.eval_every and step % tc.eval_every == 0:
            evaluate(step)
        if tc.ckpt_every and step % tc.ckpt_every == 0:
            save_ckpt(step)
    bar.close()
    final = history[-1] if history and history[-1]["step"] == step else evaluate(step)
    save_ckpt(step)
    recipe = {"data": side.get("sources", str(data_path)), "data_tokens": int(train_rows.size), "steps": step,
              "batch": tc.batch, "seq_len": T, "lr": tc.lr, "warmup": tc.warmup, "chain": tc.chain,
              "vocab_rows": 0 if ids is None else int(len(ids)), "sink": tc.sink, "window": tc.window,
              "loss": "sum_j KL(p_main restricted+renormalised to vocab_ids || q_j)",
              "train_seconds": round(time.perf_counter() - t0, 1), "final_eval": final}
    save_head(out, {k: p.detach() for k, p in params.items()}, cfg, base_sha, ids, recipe)
    print("\nstep | " + " | ".join(f"KL{j + 1}" for j in range(tc.chain)) + " | " +
          " | ".join(f"top1@{j + 1}" for j in range(tc.chain)))
    for r in history:
        print(f"{r['step']:5d} | " + " | ".join(f"{x:.3f}" for x in r["kl"]) + " | " +
              " | ".join(f"{x:.3f}" for x in r["top1"]))
    print(f"wrote {out} ({Path(out).stat().st_size / 2**20:.1f} MiB) after {step} steps")
    return {"history": history, "steps": step, "recipe": recipe}


def cmd_train_mtp(args) -> int:
    from ..engine import pick_device
    from ..io.gguf_file import GGUFFile, default_model_path
    from ..models.load import load_gemma3

    device = pick_device(args.device)
    gf = GGUFFile(args.model or default_model_path())
    model = load_gemma3(gf, device)
    tc = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr, warmup=args.warmup,
                     chain=args.chain, vocab_rows=args.vocab_rows, sink=args.sink, window=args.window,
                     hidden_source=args.hidden_source, eval_every=args.eval_every, eval_rows=args.eval_rows,
                     ckpt_every=args.ckpt_every, time_budget=args.time_budget, seed=args.seed)
    res = train(model, gf.sha256(), args.data, args.out, tc, device, resume=args.resume, ckpt=args.ckpt)
    if args.history:
        Path(args.history).write_text(json.dumps(res, indent=1))
    return 0


def add_parser(sub) -> None:
    d = TrainConfig()
    p = sub.add_parser("train-mtp", help="train an MTP head for the main model by self-distillation")
    p.add_argument("--data", required=True, help="rows from `mtp-turbo train-data` (.npy)")
    p.add_argument("--out", required=True, help="head GGUF to write (checkpoint: OUT.ckpt)")
    p.add_argument("--model", default=None, help="main model GGUF (default: Gemma-3-270M)")
    p.add_argument("--device", default="auto")
    for name in ("steps", "batch", "seq_len", "warmup", "chain", "vocab_rows", "sink", "window", "eval_every",
                 "eval_rows", "ckpt_every", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--time-budget", type=float, default=d.time_budget, help="seconds; stops cleanly and writes the head")
    p.add_argument("--hidden-source", choices=("pre_norm", "post_norm"), default=d.hidden_source)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument("--ckpt", default=None, help="checkpoint path (default: OUT.ckpt)")
    p.add_argument("--history", default=None, help="write eval history + recipe JSON here")
    p.set_defaults(func=cmd_train_mtp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mtp_turbo.train.distill")
    sub = ap.add_subparsers(dest="command", required=True)
    add_parser(sub)
    data_mod.add_parser(sub)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
