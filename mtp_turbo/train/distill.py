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
from ..models.block import rms_norm
from ..models.gemma3 import LAYER_TENSORS
from ..models.mtp_head import MTPConfig
from ..models.mtp_load import load_head
from ..sampling.config import SamplerConfig
from . import data as data_mod
from .export import save_head
from .forward import chain_states, main_hidden, virtual_positions
from .generate import GenConfig, sample_rows


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
    time_budget: float = 0.0  # seconds of training (0 = no limit), not counting --gen-time
    seed: int = 0
    init: str = ""  # head GGUF to start from (its vocab ids and hidden source are kept)
    block: int = 256  # query rows per attention block of the head's banded attention
    pos_offset: int = 0  # max virtual gap after the sink (0 = off)
    offset_frac: float = 0.5  # share of batches that get a gap, uniform in [1, pos_offset]
    eval_offset: int = 12288  # eval also with this gap (0 = off)
    gen_rows: int = 0  # rows of the main model's own replies sampled before training (0 = off)
    gen_len: int = 0  # their length (0 = the data's row length)
    gen_batch: int = 256
    gen_time: float = 60.0  # seconds for sampling them
    gen_temps: str = "0,0.7"
    gen_frac: float = 0.3  # share of training batches drawn from them
    # the sampler chain of their sampled rows (temperature > 0; see sampling/config.py)
    gen_top_k: int = 0
    gen_top_p: float = 1.0
    gen_min_p: float = 0.05
    gen_repeat_penalty: float = 1.0
    gen_presence_penalty: float = 0.0
    gen_frequency_penalty: float = 0.0
    gen_penalty_last_n: int = 64
    # + accept_weight * (1 - sum_x p_s(x) q_s(x)) per chain step, p_s / q_s = main / head at
    # accept_temp with min-p accept_min_p: the chance a draft drawn from the head's sampled
    # distribution is accepted by exact verification; pulls the head's top token onto the main
    # model's where sampled decoding is uncertain (0 = off)
    accept_weight: float = 0.0
    accept_temp: float = 0.6
    accept_min_p: float = 0.05

    def __post_init__(self) -> None:
        if self.chain < 1 or self.steps < 1 or self.batch < 1 or self.block < 1:
            raise ConfigError("chain, steps, batch and block must be >= 1")
        if self.pos_offset < 0 or self.eval_offset < 0 or not (0 <= self.offset_frac <= 1) or not (0 <= self.gen_frac <= 1):
            raise ConfigError("pos-offset/eval-offset must be >= 0, offset-frac and gen-frac in [0, 1]")
        if self.accept_weight < 0 or not self.accept_temp > 0 or not (0 <= self.accept_min_p < 1):
            raise ConfigError("accept-weight must be >= 0, accept-temp > 0, accept-min-p in [0, 1)")
        if self.hidden_source not in ("pre_norm", "post_norm"):
            raise ConfigError(f"hidden-source must be pre_norm or post_norm, got {self.hidden_source!r}")


# `train-mtp --help`: one line per TrainConfig field (its flag is the field's name)
TRAIN_HELP = {
    "steps": "optimizer steps (the cosine schedule spans them, or --time-budget if that ends first)",
    "batch": "rows per step",
    "seq_len": "tokens per row: 0 = the data's row length, else a crop of that many from position 0",
    "lr": "peak AdamW learning rate",
    "warmup": "steps of linear learning-rate warmup",
    "weight_decay": "AdamW weight decay (not on the norms)",
    "chain": "chain depth k trained: the head predicts 1..k tokens ahead from its own states",
    "vocab_rows": "rows of the head's reduced vocabulary (the data's most frequent ids); 0 = the full head",
    "sink": "head attention: first cells always attended (as the drafter's --draft-sink)",
    "window": "head attention: most recent cells attended (as --draft-window)",
    "hidden_source": "main-model hidden state the head reads: pre_norm (before the final norm) or post_norm",
    "eval_every": "steps between held-out evaluations (KL, top-1 agreement, acceptance per chain step); 0 = at the start and the end only",
    "eval_rows": "held-out rows evaluated",
    "ckpt_every": "steps between checkpoints (OUT.ckpt); 0 = at the end only",
    "time_budget": "seconds of training, not counting --gen-time (0 = no limit); stops cleanly and writes the head",
    "seed": "seed of the initialisation, the batches and the sampled rows",
    "init": "warm start from this head GGUF (its vocab ids and hidden source are kept); empty = from the main "
    "model's last sliding layer",
    "block": "query rows per block of the head's banded attention (memory vs speed)",
    "pos_offset": "largest virtual position gap after the sink (the sink seen from far, as in a long prompt); 0 = off",
    "offset_frac": "share of batches that get a gap, uniform in [1, pos-offset]",
    "eval_offset": "also evaluate with the sink this many positions away; 0 = off",
    "gen_rows": "rows of the main model's own replies sampled before training and mixed into the batches; 0 = off",
    "gen_len": "tokens of each sampled row (0 = the data's row length)",
    "gen_batch": "rows sampled at once",
    "gen_time": "seconds at most for sampling them",
    "gen_temps": "comma list of temperatures the rows are sampled at (0 = greedy)",
    "gen_frac": "share of training batches drawn from the sampled rows",
    "gen_top_k": "sampled rows' chain: top-k (0 = off)",
    "gen_top_p": "sampled rows' chain: top-p (1 = off)",
    "gen_min_p": "sampled rows' chain: min-p (0 = off)",
    "gen_repeat_penalty": "sampled rows' chain: repetition penalty (1 = off)",
    "gen_presence_penalty": "sampled rows' chain: presence penalty",
    "gen_frequency_penalty": "sampled rows' chain: frequency penalty",
    "gen_penalty_last_n": "sampled rows' chain: tokens the penalties see (-1 = all)",
    "accept_weight": "weight of the acceptance term (1 - sum p_s q_s per chain step, at --accept-temp): pulls the "
    "head's top token onto the main model's where sampling is uncertain; 0 = off",
    "accept_temp": "temperature of the acceptance term's distributions",
    "accept_min_p": "min-p of the acceptance term's main-model distribution",
}


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


def sampled_probs(logits: torch.Tensor, temp: float, min_p: float) -> torch.Tensor:
    """softmax(logits / temp) over the last axis with tokens below min_p * max dropped, renormalised."""
    p = torch.softmax(logits / temp, -1)
    p = p * (p >= min_p * p.amax(-1, keepdim=True))
    return p / p.sum(-1, keepdim=True)


def step_losses(model, W, cfg: MTPConfig, head_rows: torch.Tensor, ids: torch.Tensor | None, tokens: torch.Tensor,
                tc: TrainConfig, full_argmax: bool = False, offset: int = 0, stats: dict | None = None):
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


def gen_config(tc: TrainConfig, row_len: int) -> GenConfig:
    return GenConfig(rows=tc.gen_rows, length=tc.gen_len or row_len, batch=tc.gen_batch,
                     temps=tuple(float(x) for x in tc.gen_temps.split(",")), time_budget=tc.gen_time, seed=tc.seed,
                     chain=SamplerConfig(temperature=1.0, top_k=tc.gen_top_k, top_p=tc.gen_top_p, min_p=tc.gen_min_p,
                                         repeat_penalty=tc.gen_repeat_penalty, presence_penalty=tc.gen_presence_penalty,
                                         frequency_penalty=tc.gen_frequency_penalty,
                                         penalty_last_n=tc.gen_penalty_last_n))


def train(model, base_sha: str, data_path: str, out: str, tc: TrainConfig, device, resume: bool = False,
          progress: bool = True, ckpt: str | None = None, tokenizer=None) -> dict:
    """tokenizer: needed only with tc.gen_rows (BOS, end-of-turn and newline ids)."""
    torch.manual_seed(tc.seed)
    train_rows, held_rows, side = data_mod.load(data_path)
    V = model.cfg.vocab_size
    cfg = MTPConfig.for_main(model.cfg, hidden_source=tc.hidden_source)
    longest = max(train_rows.shape[1], tc.gen_len) + max(tc.pos_offset, tc.eval_offset)
    if longest > model.rope[False][0].shape[0]:
        raise ConfigError(f"rows + position gap reach position {longest}, past the model's RoPE table "
                          f"({model.rope[False][0].shape[0]}); lower --pos-offset/--eval-offset")
    ckpt_path = Path(ckpt) if ckpt else Path(str(out) + ".ckpt")
    state = torch.load(ckpt_path, map_location=device, weights_only=False) if resume and ckpt_path.exists() else None
    if state is not None:
        ids = state["vocab_ids"]
        W = {k: v.to(device) for k, v in state["W"].items()}
        cfg = MTPConfig.for_main(model.cfg, hidden_source=state.get("hidden_source", tc.hidden_source))
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


def cmd_train_mtp(args) -> int:
    from ..cli import config_from_args
    from ..engine import pick_device
    from ..io.gguf_file import GGUFFile, default_model_path
    from ..io.tokenizer import GGUFTokenizer
    from ..models.load import load_gemma3

    tc = config_from_args(TrainConfig, args)  # checked before the model loads, as the files are
    for flag, path in (("--data", args.data), ("--init", tc.init)):
        if path and not Path(path).is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    if not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out {args.out}: its folder does not exist")
    device = pick_device(args.device)
    gf = GGUFFile(args.model or default_model_path())
    model = load_gemma3(gf, device)
    res = train(model, gf.sha256(), args.data, args.out, tc, device, resume=args.resume, ckpt=args.ckpt,
                tokenizer=GGUFTokenizer(gf) if tc.gen_rows else None)
    if args.history:
        Path(args.history).write_text(json.dumps(res, indent=1))
    return 0


def add_parser(sub) -> None:
    """`train-mtp`: the files, then one flag per TrainConfig field (help from TRAIN_HELP)."""
    from ..cli import add_config_args

    p = sub.add_parser("train-mtp", help="train an MTP head for the main model by self-distillation",
                       description="Train an MTP head for the main model by self-distillation on rows from "
                       "`mtp-turbo train-data`; writes a head GGUF that `--draft mtp --drafter OUT` loads.")
    p.add_argument("--data", required=True, help="rows from `mtp-turbo train-data` (.npy)")
    p.add_argument("--out", required=True, help="head GGUF to write (checkpoint: OUT.ckpt)")
    p.add_argument("--model", default=None, help="main model GGUF (default: Gemma-3-270M)")
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument("--ckpt", default=None, help="checkpoint path (default: OUT.ckpt)")
    p.add_argument("--history", default=None, help="write eval history + recipe JSON here")
    add_config_args(p, TrainConfig, help=TRAIN_HELP)
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
