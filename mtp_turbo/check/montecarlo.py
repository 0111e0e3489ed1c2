"""Monte Carlo exactness check of speculative sampling (the report's item 4 toy test).

Owns: a toy 6-token model with history-dependent logits, its three drafters (toy: a fixed rule;
greedy-chain: the model's own argmax; draft-model: the argmax chain of a noisier copy of the model,
like the engine's `--draft model`), batched plain sampling and batched speculative rounds over many
independent sequences, the TV-distance table, and the `mtp-turbo check montecarlo` subcommand.
Ignores: real models and caches.

Every sequence goes through the production math: rows are pushed through `probs_from_logits`
(the body of `sample_dist`), tokens are drawn with `draw` and `uniforms`, and the accept rules
are `spec.verify.accept_exact` / `accept_greedy`. Sequence s uses the counter positions
s * STRIDE + (absolute token position), so sequences are independent and, within one seed,
plain and speculative runs use the same uniform for the same token position.
With `sampler="fused"` (`--sampler fused`) the rows' tokens are drawn by the fused sampler
kernels instead (sampling/fused.py `sample_rows`, on CUDA, else in Triton's CPU interpreter):
the same windows, uniforms and accept rules, so the table then checks the kernels' exactness.

Pass rule (CLI exit code), for every drafter: TV(ref, exact) <= 1.5 * TV(ref, ref2) + 3 * sigma, where
sigma = 0.5 * sqrt(2 (1 - 2/pi) / n) bounds the standard deviation of the TV between two
independent n-sample histograms of one distribution (each cell's difference is ~N(0, 2p/n), and
|N(0, s^2)| has variance s^2 (1 - 2/pi); summing over cells ignores their negative correlation,
so it is an upper bound). The 1.5x absorbs the floor's own fluctuation. Greedy-match must be at
least 5x the floor with the greedy-chain drafter (the report's case; its bias is large).
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch
from torch import Tensor

from ..sampling.chain import probs_from_logits, window_counts
from ..sampling.config import SamplerConfig
from ..sampling.draw import draw
from ..sampling.rng import uniforms
from ..spec.verify import accept_exact, accept_greedy

__all__ = ["ToyModel", "run_montecarlo", "format_report", "register", "toy_config", "SAMPLERS", "DRAFTERS"]

VOCAB = 6
HORIZON = 3
PROMPT = (0, 3, 1, 3)
STRIDE = 64  # counter positions per sequence (> prompt + horizon + k)
SAMPLERS = ("torch", "fused")
DRAFTERS = ("toy", "greedy-chain", "draft-model")


def toy_config(seed: int = 0) -> SamplerConfig:
    return SamplerConfig(temperature=0.6, top_k=0, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                         presence_penalty=0.4, frequency_penalty=0.0, penalty_last_n=64, seed=seed)


class ToyModel:
    """logits(history) = A[last token] + B[len % 3] + counts(whole history) @ W  (fixed tables)."""

    def __init__(self, vocab: int = VOCAB, table_seed: int = 1234, dtype=torch.float32):
        g = torch.Generator().manual_seed(table_seed)
        self.vocab = vocab
        self.a = (1.6 * torch.randn(vocab, vocab, generator=g, dtype=torch.float64)).to(dtype)
        self.b = (0.8 * torch.randn(3, vocab, generator=g, dtype=torch.float64)).to(dtype)
        self.w = (0.5 * torch.randn(vocab, vocab, generator=g, dtype=torch.float64)).to(dtype)
        self.d = (1.6 * torch.randn(vocab, 2, vocab, generator=g, dtype=torch.float64)).to(dtype)

    def logits(self, hist: Tensor, lens: Tensor) -> Tensor:
        """hist [S, L] padded int64, lens [S] (>= 1) -> logits [S, V]."""
        last = hist.gather(1, (lens - 1).unsqueeze(1)).squeeze(1)
        c = window_counts(hist, lens, self.vocab, -1, self.a.dtype)
        return self.a[last] + self.b[lens % 3] + c @ self.w

    def toy_draft(self, hist: Tensor, lens: Tensor) -> Tensor:
        """A fixed deterministic drafter, an imperfect copy of the model: argmax(A[last] + D[last, len % 2])."""
        last = hist.gather(1, (lens - 1).unsqueeze(1)).squeeze(1)
        return torch.argmax(self.a[last] + self.d[last, lens % 2], dim=1)

    def draft_model(self, noise: float = 0.4, table_seed: int = 4321) -> "ToyModel":
        """The draft-model drafter's model: these A, B, W plus Gaussian noise from its own seed, so its
        argmax agrees with this model's on ~70% of random histories, not all (history-dependent too)."""
        g = torch.Generator().manual_seed(table_seed)
        dm = copy.copy(self)
        for name in ("a", "b", "w"):
            t = getattr(self, name)
            setattr(dm, name, t + (noise * torch.randn(t.shape, generator=g, dtype=torch.float64)).to(t.dtype))
        return dm


def _draft(model: ToyModel, dm: ToyModel | None, drafter: str, hist: Tensor, lens: Tensor, logits: Tensor) -> Tensor:
    """Next drafts [S] for rows hist[s, :lens[s]]; logits [S, V] are the model's own for those rows."""
    if drafter == "greedy-chain":
        return torch.argmax(logits, dim=1)
    if drafter == "draft-model":  # its own forward on the same (drafted-into) rows, batched
        return torch.argmax(dm.logits(hist, lens), dim=1)
    return model.toy_draft(hist, lens)


def _row_probs(model: ToyModel, hist: Tensor, lens: Tensor, cfg: SamplerConfig) -> tuple[Tensor, Tensor]:
    """(probs [S, V], raw logits [S, V]) of the rows hist[s, :lens[s]] through the chain."""
    logits = model.logits(hist, lens)
    counts = window_counts(hist, lens, model.vocab, cfg.penalty_last_n, logits.dtype)
    return probs_from_logits(logits, counts, cfg), logits


def _windows(hist: Tensor, lens: Tensor, last_n: int) -> Tensor:
    """The penalty windows of the rows hist[s, :lens[s]] as [S, L] with -1 padding."""
    j = torch.arange(hist.shape[1])[None, :]
    ok = (j < lens[:, None]) & (last_n != 0)
    if last_n > 0:
        ok &= j >= (lens - last_n)[:, None]
    return torch.where(ok, hist, -1)


def _draw_rows(logits: Tensor, hist: Tensor, lens: Tensor, u: Tensor, cfg: SamplerConfig, sampler: str) -> Tensor:
    """Tokens [S] for rows with raw logits [S, V] and histories hist[s, :lens[s]], uniforms u [S]."""
    if sampler == "torch":
        counts = window_counts(hist, lens, logits.shape[1], cfg.penalty_last_n, logits.dtype)
        return draw(probs_from_logits(logits, counts, cfg), u)
    from ..sampling.fused import kernel_device, sample_rows

    dev, backend = kernel_device()
    win = _windows(hist, lens, cfg.penalty_last_n)
    ids = sample_rows(logits.float().to(dev), win.to(dev), u.to(dev), cfg, backend=backend)
    return ids.cpu()


def _start(n_seq: int, width: int) -> Tensor:
    hist = torch.zeros(n_seq, width, dtype=torch.int64)
    hist[:, : len(PROMPT)] = torch.tensor(PROMPT)
    return hist


def plain_run(model: ToyModel, cfg: SamplerConfig, n_seq: int, sampler: str = "torch") -> Tensor:
    """One token at a time; returns the generated tokens [S, HORIZON]."""
    p0 = len(PROMPT)
    hist = _start(n_seq, p0 + HORIZON)
    seq_base = torch.arange(n_seq, dtype=torch.int64) * STRIDE
    for j in range(HORIZON):
        lens = torch.full((n_seq,), p0 + j, dtype=torch.int64)
        u = uniforms(cfg.seed, seq_base + lens)
        hist[:, p0 + j] = _draw_rows(model.logits(hist, lens), hist, lens, u, cfg, sampler)
    return hist[:, p0:]


def spec_run(model: ToyModel, cfg: SamplerConfig, n_seq: int, k: int, drafter: str,
             mode: str, sampler: str = "torch") -> tuple[Tensor, float]:
    """Speculative rounds until HORIZON tokens; returns (tokens [S, HORIZON], tokens per round).

    Each round works on the still-active sequences only. Row i's logits are computed once and
    serve both the greedy-chain drafter (its draft d_{i+1} is their argmax) and verification;
    the draft-model drafter takes d_{i+1} from its own model's logits on the same row.
    """
    assert drafter in DRAFTERS, drafter
    dm = model.draft_model() if drafter == "draft-model" else None
    p0, end = len(PROMPT), len(PROMPT) + HORIZON
    hist = _start(n_seq, end + k + 1)
    lens = torch.full((n_seq,), p0, dtype=torch.int64)
    emitted_total, rounds = 0, 0
    idx = torch.arange(n_seq)  # ids of the active sequences
    while idx.numel() > 0:
        ext, ln = hist[idx], lens[idx]  # [A, W], [A]
        a = idx.numel()
        rows_a = torch.arange(a)
        raw, drafts = [], []
        for i in range(k + 1):
            raw.append(model.logits(ext, ln + i))
            lg = raw[-1]
            if i < k:  # chain the drafter on its own outputs
                d = _draft(model, dm, drafter, ext, ln + i, lg)
                ext[rows_a, ln + i] = d
                drafts.append(d)
        drafts_t = torch.stack(drafts, dim=1)  # [A, k]
        pos = (idx * STRIDE)[:, None] + ln[:, None] + torch.arange(k + 1)[None, :]  # [A, k+1]
        # row i of every sequence sees ext[:, :ln + i] (the drafts before it); one batched draw
        t = _draw_rows(torch.cat(raw), ext.repeat(k + 1, 1), torch.cat([ln + i for i in range(k + 1)]),
                       uniforms(cfg.seed, pos.t().reshape(-1)), cfg, sampler).view(k + 1, a).t()
        if mode == "exact":
            acc, out = accept_exact(t, drafts_t)
        else:
            acc, out = accept_greedy(torch.argmax(torch.stack(raw, dim=1), dim=2), t, drafts_t)
        for j in range(k + 1):  # commit, truncating at the horizon
            ok = (out[:, j] >= 0) & (ln + j < end)
            hist[idx[ok], (ln + j)[ok]] = out[:, j][ok]
        emitted_total += int((acc + 1).sum())
        rounds += a
        lens[idx] = torch.clamp(ln + acc + 1, max=end)
        idx = idx[lens[idx] < end]
    return hist[:, p0:end], emitted_total / max(rounds, 1)


def true_distribution(model: ToyModel, cfg: SamplerConfig) -> Tensor:
    """Exact probability [V^HORIZON] of every outcome under one-at-a-time sampling (float64)."""
    v, p0 = model.vocab, len(PROMPT)
    outs = torch.cartesian_prod(*[torch.arange(v)] * HORIZON).view(-1, HORIZON)  # [V^H, H]
    hist = torch.cat([torch.tensor(PROMPT).expand(outs.shape[0], -1), outs], dim=1)
    prob = torch.ones(outs.shape[0], dtype=torch.float64)
    for j in range(HORIZON):
        probs, _ = _row_probs(model, hist, torch.full((outs.shape[0],), p0 + j), cfg)
        prob = prob * probs.gather(1, outs[:, j:j + 1]).squeeze(1).double()
    return prob


def _hist(seqs: Tensor, v: int) -> Tensor:
    idx = torch.zeros(seqs.shape[0], dtype=torch.int64)
    for j in range(seqs.shape[1]):
        idx = idx * v + seqs[:, j]
    return torch.bincount(idx, minlength=v ** seqs.shape[1]).double() / seqs.shape[0]


def _tv(p: Tensor, q: Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def run_montecarlo(n_seq: int = 400_000, seed: int = 2024, k: int = 2,
                   same_seed_seqs: int = 20_000, sampler: str = "torch") -> dict:
    """Run the check; returns a report dict (TVs, tokens/round, thresholds, pass flags).

    Each run uses its own seed (independent samples); `same_seed_seqs` sequences are also rerun
    speculatively with the reference seed, where they must equal the reference token for token.
    sampler: "torch" (the chain + draw) or "fused" (the fused kernels) draws every token.
    """
    assert sampler in SAMPLERS, sampler
    t_start = time.perf_counter()
    model = ToyModel()
    ref_seqs = plain_run(model, toy_config(seed), n_seq, sampler)
    ref = _hist(ref_seqs, model.vocab)
    ref2 = _hist(plain_run(model, toy_config(seed + 1), n_seq, sampler), model.vocab)
    true = true_distribution(model, toy_config(seed))
    floor = _tv(ref, ref2)
    sigma = 0.5 * math.sqrt(2 * (1 - 2 / math.pi) / n_seq)
    limit = 1.5 * floor + 3 * sigma
    rows = []
    for r, drafter in enumerate(DRAFTERS):
        ex_seqs, ex_tpr = spec_run(model, toy_config(seed + 2 + 2 * r), n_seq, k, drafter, "exact", sampler)
        gm_seqs, gm_tpr = spec_run(model, toy_config(seed + 3 + 2 * r), n_seq, k, drafter, "greedy", sampler)
        m = min(same_seed_seqs, n_seq)
        same, _ = spec_run(model, toy_config(seed), m, k, drafter, "exact", sampler)
        ex, gm = _hist(ex_seqs, model.vocab), _hist(gm_seqs, model.vocab)
        rows.append(dict(
            drafter=drafter, k=k, tv_exact=_tv(ref, ex), tv_greedy=_tv(ref, gm),
            tv_true_exact=_tv(true, ex), tv_true_greedy=_tv(true, gm),
            tokens_per_round_exact=ex_tpr, tokens_per_round_greedy=gm_tpr,
            same_seed_identical=float((same == ref_seqs[:m]).all(dim=1).double().mean()),
        ))
    for r in rows:
        r["exact_ok"] = r["tv_exact"] <= limit and r["same_seed_identical"] == 1.0
        r["greedy_far"] = r["tv_greedy"] >= 5 * floor
    ok = all(r["exact_ok"] for r in rows) and rows[DRAFTERS.index("greedy-chain")]["greedy_far"]
    return dict(n_seq=n_seq, seed=seed, k=k, sampler=sampler, tv_floor=floor, tv_true_ref=_tv(true, ref),
                tv_true_ref2=_tv(true, ref2), sigma=sigma, limit=limit, rows=rows, ok=ok,
                seconds=time.perf_counter() - t_start)


def format_report(rep: dict) -> str:
    lines = [
        f"Monte Carlo: toy {VOCAB}-token model, {rep['n_seq']} sequences of {HORIZON} tokens, "
        f"temp 0.6 top-p 0.95 min-p 0.05 rep 1.08 presence 0.4, k={rep['k']}, seed {rep['seed']}",
        f"noise floor TV(ref, ref2) = {rep['tv_floor']:.5f}   (TV(true, ref) = {rep['tv_true_ref']:.5f},"
        f" TV(true, ref2) = {rep['tv_true_ref2']:.5f}; pass limit for exact = 1.5*floor + 3*sigma"
        f" = {rep['limit']:.5f})",
        f"{'drafter':<14}{'TV exact':>10}{'TV greedy':>11}{'tok/round ex':>14}{'tok/round gm':>14}"
        f"{'same-seed==ref':>16}{'exact ok':>10}{'greedy far':>12}",
    ]
    for r in rep["rows"]:
        lines.append(
            f"{r['drafter']:<14}{r['tv_exact']:>10.5f}{r['tv_greedy']:>11.5f}"
            f"{r['tokens_per_round_exact']:>14.3f}{r['tokens_per_round_greedy']:>14.3f}"
            f"{r['same_seed_identical']:>16.4f}{str(r['exact_ok']):>10}{str(r['greedy_far']):>12}")
    if rep.get("sampler", "torch") != "torch":
        lines.append(f"tokens drawn by the {rep['sampler']} sampler")
    lines.append(f"{'PASS' if rep['ok'] else 'FAIL'} ({rep['seconds']:.1f} s)")
    return "\n".join(lines)


def _main(args: argparse.Namespace) -> int:
    rep = run_montecarlo(n_seq=args.sequences, seed=args.seed, k=args.k, sampler=args.sampler)
    print(format_report(rep))
    return 0 if rep["ok"] else 1


def register(subparsers) -> argparse.ArgumentParser:
    """Add `montecarlo` to the `mtp-turbo check` subparsers; its func(args) returns the exit code."""
    p = subparsers.add_parser("montecarlo", help="Monte Carlo exactness of speculative sampling")
    p.add_argument("--sequences", type=int, default=400_000, help="sequences per run (default 400000)")
    p.add_argument("--seed", type=int, default=2024, help="base seed of the random streams")
    p.add_argument("--k", type=int, default=2, help="drafts per round (default 2)")
    p.add_argument("--sampler", choices=SAMPLERS, default="torch",
                   help="what draws the tokens: the torch chain (default) or the fused kernels (CUDA, "
                   "else Triton's interpreter: small --sequences only)")
    p.set_defaults(func=_main)
    return p
