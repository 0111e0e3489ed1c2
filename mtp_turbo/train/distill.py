"""Self-distillation of an MTP head for a main model that ships none (`mtp-turbo train-mtp`).

Owns: the training loop: frozen main model (models/load.py), head initialised from the main
model's last sliding layer (block) + identity fc_hidden, or warm-started from a head GGUF
(--init), optional rows of the main model's own replies sampled at the start (train/generate.py,
--gen-rows) mixed into the batches, optional virtual position gaps after the sink (--pos-offset:
the sink seen from up to that many positions away, as in a long prompt), loss = sum over chain steps j of
KL(p_main(. | prefix up to t+j) || q_j) at every chain start t, where both distributions are
restricted to the head's N vocabulary ids and the main one renormalised over them (no 'rest'
bucket: the draft can only ever propose those ids, and mass outside them is a fixed cost);
AdamW, warmup + cosine LR (over --steps or --time-budget, whichever ends first), bf16 autocast on
CUDA, tqdm, periodic held-out eval (KL and top-1 agreement with the main model's full-vocab
argmax, per chain step; also with the sink --eval-offset positions away), checkpoint/resume, the
final table, writing the head (train/export.py).
Ignores: serving (spec/drafters/mtp.py), data building (train/data.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..errors import ConfigError
from ..models.block import rms_norm
from ..models.arch import layer_tensors
from ..models.mtp_head import MTPConfig
from ..models.mtp_load import load_head
from ..sampling.config import SamplerConfig
from . import data as data_mod
from .export import save_head
from .forward import chain_states, main_hidden, virtual_positions
from .generate import GenConfig, sample_rows


def frequent_ids(rows: np.ndarray, vocab: int, n: int) -> np.ndarray:
    """The n most frequent token ids of the data (ties by id), ascending int64."""
    counts = np.bincount(rows.reshape(-1).astype(np.int64), minlength=vocab)
    order = np.lexsort((np.arange(vocab), -counts))[:n]
    return np.sort(order)


def init_head(model, cfg: MTPConfig, seed: int) -> dict[str, torch.Tensor]:
    """fp32 head weights: block = a copy of the main model's last sliding layer (the last layer
    where none is sliding; QKV biases dropped: the head has none), its outputs scaled to 1%,
    fc_hidden = I, fc_embedding small random, input norms 1, final norm = the main model's."""
    g = torch.Generator().manual_seed(seed)
    mc = model.cfg
    src = max((i for i in range(mc.n_layers) if not mc.is_global(i)), default=mc.n_layers - 1)
    W = {k: model.layers[src][k].detach().float().clone() for k in layer_tensors(cfg.block)}
    F = cfg.ffn  # a narrower head keeps the first F units of the layer's FFN
    W["gate"], W["up"], W["down"] = W["gate"][:F].clone(), W["up"][:F].clone(), W["down"][:, :F].clone()
    D = cfg.hidden
    W["fc_h"] = torch.eye(D)
    W["fc_e"] = torch.randn(D, D, generator=g) * (0.1 / math.sqrt(D))
    W["enorm"] = torch.ones(D)
    W["hnorm"] = torch.ones(D)
    W["out_norm"] = model.out_norm.detach().float().clone()
    # start near an identity block (output ~ normalised h: the main model's own next-token view);
    # the copied block's outputs would swamp x (held-out KL 26 vs 12 nats): its post-norms (Gemma)
    # or its output matrices (pre-norm families) scaled to 1%
    for k in ("post_attn_norm", "post_ffn_norm") if cfg.block.sandwich_norms else ("o", "down"):
        W[k] = W[k] * 0.01
    return {k: v.to(model.device) for k, v in W.items()}


def sampled_probs(logits: torch.Tensor, temp: float, min_p: float) -> torch.Tensor:
    """softmax(logits / temp) over the last axis with tokens below min_p * max dropped, renormalised."""
    p = torch.softmax(logits / temp, -1)
    p = p * (p >= min_p * p.amax(-1, keepdim=True))
    return p / p.sum(-1, keepdim=True)


def step_losses(model, W, cfg: MTPConfig, head_rows: torch.Tensor, ids: torch.Tensor | None, tokens: torch.Tensor,
                tc, full_argmax: bool = False, offset: int = 0, stats: dict | None = None):
    """tokens [B, T] -> (list of loss per chain step, list of top-1 agreement per step).
    Loss = KL (+ the acceptance term when tc.accept_weight). Agreement is with the main model's
    argmax over the head's ids, or over the full vocabulary when full_argmax (eval). offset:
    virtual gap after the sink for the head (forward.py). stats (eval): gets per step "kl" (the
    KL alone) and "accept": the mean p_s(argmax q) (p_s at accept_temp / accept_min_p, over the
    head's ids) = the acceptance of the head's argmax draft under that sampler without penalties."""
    H = main_hidden(model, tokens)  # [B, T, D] pre-norm
    Hn = model.final_norm(H)
    src = Hn if cfg.hidden_source == "post_norm" else H
    emb = model.embed_tokens(tokens)
    rope = model.rope[False]
    pos = virtual_positions(tokens.shape[1] - 1, tc.sink, offset, device=tokens.device)
    states = chain_states(W, cfg, rope, emb, src, tc.chain, tc.sink, tc.window, pos=pos, block=tc.block)
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
        if stats is not None:
            stats.setdefault("kl", []).append(float(kl))
        if tc.accept_weight or stats is not None:
            with torch.no_grad():
                ps = sampled_probs(p_logits, tc.accept_temp, tc.accept_min_p)  # [B, m, N]
            if tc.accept_weight:
                qs = sampled_probs(q, tc.accept_temp, 0.0)  # min-p's mask has no gradient
                kl = kl + tc.accept_weight * (1.0 - (ps * qs).sum(-1).mean())
            if stats is not None:
                stats.setdefault("accept", []).append(float(ps.gather(-1, q.argmax(-1, keepdim=True)).mean()))
        losses.append(kl)
        with torch.no_grad():
            qa = q.argmax(-1)
            if full_argmax:
                agree.append(float(((qa if ids is None else ids[qa]) == fa[:, j: j + m]).float().mean()))
            else:
                agree.append(float((qa == p_logits.argmax(-1)).float().mean()))
    return losses, agree


def gen_config(tc, row_len: int) -> GenConfig:
    return GenConfig(rows=tc.gen_rows, length=tc.gen_len or row_len, batch=tc.gen_batch,
                     temps=tuple(float(x) for x in tc.gen_temps.split(",")), time_budget=tc.gen_time, seed=tc.seed,
                     chain=SamplerConfig(temperature=1.0, top_k=tc.gen_top_k, top_p=tc.gen_top_p, min_p=tc.gen_min_p,
                                         repeat_penalty=tc.gen_repeat_penalty, presence_penalty=tc.gen_presence_penalty,
                                         frequency_penalty=tc.gen_frequency_penalty,
                                         penalty_last_n=tc.gen_penalty_last_n))


def train(model, base_sha: str, data_path: str, out: str, tc, device, resume: bool = False,
          progress: bool = True, ckpt: str | None = None, tokenizer=None) -> dict:
    """tokenizer: needed only with tc.gen_rows (BOS, end-of-turn and newline ids)."""
    torch.manual_seed(tc.seed)
    train_rows, held_rows, side = data_mod.load(data_path)
    V = model.cfg.vocab_size
    cfg = MTPConfig.for_main(model.cfg, hidden_source=tc.hidden_source)
    if tc.ffn and tc.ffn > cfg.ffn:
        raise ConfigError(f"--ffn {tc.ffn} is wider than the main model's FFN ({cfg.ffn}), which the head starts from")
    cfg = dataclasses.replace(cfg, ffn=tc.ffn or cfg.ffn)
    longest = max(train_rows.shape[1], tc.gen_len) + max(tc.pos_offset, tc.eval_offset)
    if longest > model.rope[False][0].shape[0]:
        raise ConfigError(f"rows + position gap reach position {longest}, past the model's RoPE table "
                          f"({model.rope[False][0].shape[0]}); lower --pos-offset/--eval-offset")
    ckpt_path = Path(ckpt) if ckpt else Path(str(out) + ".ckpt")
    state = torch.load(ckpt_path, map_location=device, weights_only=False) if resume and ckpt_path.exists() else None
    if state is not None:
        ids = state["vocab_ids"]
        W = {k: v.to(device) for k, v in state["W"].items()}
        cfg = dataclasses.replace(cfg, hidden_source=state.get("hidden_source", tc.hidden_source),
                                  ffn=int(state["W"]["gate"].shape[0]))
    elif tc.init:
        head = load_head(tc.init, model, device=device, dtype=torch.float32, expect_sha=base_sha)
        cfg = head.cfg  # the file's hidden source wins
        ids = None if head.vocab_ids is None else head.vocab_ids.cpu()
        W = {k: v.float().clone() for k, v in head.W.items()}
        tqdm.write(f"warm start from {tc.init} ({'full head' if ids is None else f'{len(ids)} vocab rows'}, "
                   f"hidden source {cfg.hidden_source})")
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
    gen_blocks: list[torch.Tensor] = []
    gen_s = 0.0
    if state is not None and state.get("gen"):
        gen_blocks = [torch.from_numpy(b.astype(np.int64)).to(device) for b in state["gen"]]
    elif tc.gen_rows:
        if tokenizer is None:
            raise ConfigError("--gen-rows needs the tokenizer")
        t_gen = time.perf_counter()
        blocks, _ = sample_rows(model, data_mod.load_prompts(data_path), gen_config(tc, train_rows.shape[1]),
                                tokenizer.bos_id, tuple(tokenizer.stop_ids), tokenizer.encode("\n", add_bos=False),
                                progress=progress)
        gen_blocks = [torch.from_numpy(b).to(device) for b in blocks]
        gen_s = time.perf_counter() - t_gen
        tqdm.write(f"gen: {sum(len(b) for b in blocks)} rows of the main model's replies "
                   f"({', '.join(str(b.shape[1]) for b in blocks)} tokens) in {gen_s:.1f} s")
    gen_weights = torch.tensor([float(len(b)) for b in gen_blocks]) if gen_blocks else None
    data = torch.from_numpy(train_rows.astype(np.int64)).to(device)
    held = torch.from_numpy(held_rows[: tc.eval_rows].astype(np.int64)).to(device)
    T = data.shape[1] if tc.seq_len <= 0 else min(tc.seq_len, data.shape[1])
    gen = torch.Generator(device="cpu").manual_seed(tc.seed + step0)
    cuda = torch.device(device).type == "cuda"
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    history: list[dict] = []

    def evaluate(step):
        rec = {"step": step}
        with torch.no_grad(), amp:
            Wd = {k: p.to(model.dtype) if not k.endswith("norm") else p for k, p in params.items()}
            for tag, off in (("", 0), ("_far", tc.eval_offset)) if tc.eval_offset else (("", 0),):
                res_l, res_a, res_p = [], [], []
                for i in range(0, held.shape[0], tc.batch):
                    st: dict = {}
                    _, a = step_losses(model, Wd, cfg, head_rows, ids_dev, held[i: i + tc.batch, :T], tc,
                                       full_argmax=True, offset=off, stats=st)
                    res_l.append(st["kl"])
                    res_a.append(a)
                    res_p.append(st["accept"])
                rec["kl" + tag] = np.mean(res_l, 0).round(4).tolist()
                rec["top1" + tag] = np.mean(res_a, 0).round(4).tolist()
                rec["accept" + tag] = np.mean(res_p, 0).round(4).tolist()
        history.append(rec)
        tqdm.write(f"eval @ {step}: KL per step {rec['kl']}  top-1 agreement per step {rec['top1']}  "
                   f"p_{tc.accept_temp}(argmax draft) per step {rec['accept']}"
                   + (f"  | sink {tc.eval_offset} away: KL {rec['kl_far']} top-1 {rec['top1_far']}" if tc.eval_offset else ""))
        return rec

    def save_ckpt(step):
        torch.save({"W": {k: p.detach() for k, p in params.items()}, "opt": opt.state_dict(), "step": step,
                    "vocab_ids": ids, "config": asdict(tc), "hidden_source": cfg.hidden_source,
                    "gen": [b.cpu().numpy().astype(np.int32) for b in gen_blocks]}, ckpt_path)

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
        src, Ts = data, T
        if gen_blocks and float(torch.rand((), generator=gen)) < tc.gen_frac:
            src = gen_blocks[int(torch.multinomial(gen_weights, 1, generator=gen))]
            Ts = src.shape[1] if tc.seq_len <= 0 else min(tc.seq_len, src.shape[1])
        off = 0
        if tc.pos_offset and float(torch.rand((), generator=gen)) < tc.offset_frac:
            off = int(torch.randint(1, tc.pos_offset + 1, (), generator=gen))
        idx = torch.randint(0, src.shape[0], (tc.batch,), generator=gen).to(device)
        with amp:
            losses, agree = step_losses(model, params, cfg, head_rows, ids_dev, src[idx, :Ts], tc, offset=off)
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
              "init": tc.init or None, "pos_offset": tc.pos_offset, "offset_frac": tc.offset_frac,
              "gen_rows": int(sum(len(b) for b in gen_blocks)), "gen_len": [int(b.shape[1]) for b in gen_blocks],
              "gen_temps": tc.gen_temps if gen_blocks else None, "gen_frac": tc.gen_frac if gen_blocks else 0.0,
              "gen_seconds": round(gen_s, 1),
              "gen_sampler": {k: getattr(tc, k) for k in ("gen_top_k", "gen_top_p", "gen_min_p", "gen_repeat_penalty",
                                                          "gen_presence_penalty", "gen_frequency_penalty",
                                                          "gen_penalty_last_n")} if gen_blocks else None,
              "loss": "sum_j KL(p_main restricted+renormalised to vocab_ids || q_j)"
              + (f" + {tc.accept_weight} * (1 - sum_x p_s q_s), p_s/q_s at temp {tc.accept_temp}, main min-p "
                 f"{tc.accept_min_p}" if tc.accept_weight else ""),
              "train_seconds": round(time.perf_counter() - t0, 1), "final_eval": final}
    save_head(out, {k: p.detach() for k, p in params.items()}, cfg, base_sha, ids, recipe)
    far = "kl_far" in history[0]
    print("\nstep | " + " | ".join(f"KL{j + 1}" for j in range(tc.chain)) + " | " +
          " | ".join(f"top1@{j + 1}" for j in range(tc.chain)) + " | " +
          " | ".join(f"p{tc.accept_temp}@{j + 1}" for j in range(tc.chain))
          + (" | " + " | ".join(f"far top1@{j + 1}" for j in range(tc.chain)) if far else ""))
    for r in history:
        print(f"{r['step']:5d} | " + " | ".join(f"{x:.3f}" for x in r["kl"]) + " | " +
              " | ".join(f"{x:.3f}" for x in r["top1"]) + " | " + " | ".join(f"{x:.3f}" for x in r["accept"])
              + (" | " + " | ".join(f"{x:.3f}" for x in r["top1_far"]) if far else ""))
    print(f"wrote {out} ({Path(out).stat().st_size / 2**20:.1f} MiB) after {step} steps")
    return {"history": history, "steps": step, "recipe": recipe}
