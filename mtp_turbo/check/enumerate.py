"""Exact enumeration of the output distribution of speculative sampling (no sampling noise).

Owns: a small history-dependent toy model, two deterministic drafters (toy: an arbitrary rule;
draft-model: the argmax chain of a noisier copy of the model, like the engine's `--draft model`),
three exact computations of the distribution of the first H generated tokens, and the `mtp-turbo
check enumerate` subcommand. Ignores: real models.

- reference: one token at a time, P(seq) = prod_j p(seq_j | prompt ++ seq_<j).
- closed form (Leviathan rule, one-hot drafts): per round, with p_i = sample_dist rows for
  history ++ d1..di: accept d_{i+1} with p_i(d_{i+1}); on rejection draw the recovered token from
  p_i with d_{i+1} removed and renormalised; full acceptance draws the bonus from p_k. A round
  that crosses the horizon is truncated to it (later tokens cannot change earlier ones).
- verify rule: the production rule itself. The row tokens t_i of `verify` are independent draws
  t_i ~ p_i (distinct counter positions), so enumerate every joint (t_0..t_k) with probability
  prod p_i(t_i) and apply `spec.verify.accept_exact` to it.
All in float64 through `sample_dist`; both speculative forms must match the reference to ~1e-12,
with either drafter.
The legacy greedy-match rule is enumerated the same way as a negative control.
With `sampler="fused"` (`--sampler fused`) every distribution is the one the fused sampler kernels
draw from (sampling/fused.py: the softmax of the final logits the kernel computes; float32 logits;
plain rows one at a time, verification rows k+1 at once): the identities must then hold to 1e-12
as well, and the report adds the fused reference's distance to the torch one (float32 rounding).
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections import defaultdict
from typing import Callable

import torch
from torch import Tensor

from ..sampling.chain import sample_dist
from ..sampling.config import SamplerConfig
from ..spec.verify import accept_exact, accept_greedy

__all__ = ["EnumModel", "enumerate_check", "format_report", "register", "enum_config", "SAMPLERS", "DRAFTERS",
           "drafter_fn"]

TOL = 1e-12
SAMPLERS = ("torch", "fused")
DRAFTERS = ("toy", "draft-model")


def enum_config() -> SamplerConfig:
    """Every stage active on the 5-token toy vocabulary (top-k 4 masks one token per row)."""
    return SamplerConfig(temperature=1.5, top_k=4, top_p=0.97, min_p=0.03, repeat_penalty=1.3,
                         presence_penalty=0.3, frequency_penalty=0.2, penalty_last_n=3, seed=0)


class EnumModel:
    """Toy model: logits(h) = A[h[-1]] + B[len(h) % 2] + counts(h) @ W (float64 tables)."""

    def __init__(self, vocab: int = 5, table_seed: int = 7):
        g = torch.Generator().manual_seed(table_seed)
        self.vocab = vocab
        self.a = 1.0 * torch.randn(vocab, vocab, generator=g, dtype=torch.float64)
        self.b = 0.7 * torch.randn(2, vocab, generator=g, dtype=torch.float64)
        self.w = 0.6 * torch.randn(vocab, vocab, generator=g, dtype=torch.float64)

    def logits(self, h: list[int]) -> Tensor:
        c = torch.bincount(torch.tensor(h), minlength=self.vocab).double()
        return self.a[h[-1]] + self.b[len(h) % 2] + c @ self.w

    def draft(self, h: list[int]) -> int:
        """An arbitrary deterministic drafter (not the model's argmax)."""
        return (3 * h[-1] + len(h) * len(h) + sum(h)) % self.vocab

    def draft_model(self, noise: float = 0.4, table_seed: int = 8) -> "EnumModel":
        """The draft-model drafter's model: these A, B, W plus Gaussian noise from its own seed, so its
        argmax agrees with this model's on ~73% of histories, not all."""
        g = torch.Generator().manual_seed(table_seed)
        dm = copy.copy(self)
        for name in ("a", "b", "w"):
            t = getattr(self, name)
            setattr(dm, name, t + noise * torch.randn(t.shape, generator=g, dtype=torch.float64))
        return dm


def drafter_fn(model: EnumModel, drafter: str) -> Callable[[list[int]], int]:
    """The next draft for a history (the prefix ++ the round's drafts so far): its chain is k calls."""
    assert drafter in DRAFTERS, drafter
    if drafter == "toy":
        return model.draft
    dm = model.draft_model()
    return lambda h: int(torch.argmax(dm.logits(h)))


def _dist(logits: Tensor, tokens: Tensor, cfg: SamplerConfig, sampler: str) -> Tensor:
    """sample_dist(logits, tokens, cfg), or the fused kernels' distribution for the same rows."""
    if sampler == "torch":
        return sample_dist(logits, tokens, cfg)
    from ..sampling.fused import kernel_device, sample_tokens

    dev, backend = kernel_device()
    r, n = logits.shape[0], tokens.shape[0]
    pos = torch.arange(n - r + 1, n + 1, device=dev)
    _, fl = sample_tokens(logits.float().to(dev), tokens.to(dev), pos, cfg, backend=backend, return_logits=True)
    return torch.softmax(fl.double(), dim=1).cpu()


def _rows(model: EnumModel, h: list[int], drafts: list[int], cfg: SamplerConfig,
          sampler: str = "torch") -> tuple[Tensor, Tensor]:
    """(p [k+1, V] from sample_dist, raw logits [k+1, V]) for inputs h ++ d1..di, i = 0..k."""
    k = len(drafts)
    logits = torch.stack([model.logits(h + drafts[:i]) for i in range(k + 1)])
    return _dist(logits, torch.tensor(h + drafts), cfg, sampler), logits


def reference(model: EnumModel, prompt: list[int], horizon: int, cfg: SamplerConfig,
              sampler: str = "torch") -> dict:
    out: dict[tuple, float] = defaultdict(float)

    def rec(h: list[int], prob: float) -> None:
        if len(h) - len(prompt) == horizon:
            out[tuple(h[len(prompt):])] += prob
            return
        p = _dist(model.logits(h)[None], torch.tensor(h), cfg, sampler)[0].tolist()
        for x, px in enumerate(p):
            if px > 0:
                rec(h + [x], prob * px)

    rec(list(prompt), 1.0)
    return out


def speculative(model: EnumModel, prompt: list[int], horizon: int, cfg: SamplerConfig, k: int,
                form: str, sampler: str = "torch", drafter: str = "toy") -> dict:
    """Distribution of the first `horizon` tokens under rounds of k drafts; form in
    {"closed", "verify", "greedy"}, drafter in DRAFTERS."""
    out: dict[tuple, float] = defaultdict(float)
    draft = drafter_fn(model, drafter)

    def emit(h: list[int], toks: list[int], prob: float) -> None:
        left = horizon - (len(h) - len(prompt))
        rec(h + toks[:left], prob)

    def rec(h: list[int], prob: float) -> None:
        if len(h) - len(prompt) == horizon:
            out[tuple(h[len(prompt):])] += prob
            return
        drafts: list[int] = []
        for _ in range(k):
            drafts.append(draft(h + drafts))
        p, logits = _rows(model, h, drafts, cfg, sampler)
        if form == "closed":
            reach = prob  # probability of having accepted drafts[:a]
            for a in range(k + 1):
                if a == k:
                    for x, px in enumerate(p[k].tolist()):
                        if px > 0:
                            emit(h, drafts + [x], reach * px)
                    break
                d = drafts[a]
                pd = float(p[a, d])
                if pd < 1.0:
                    q = p[a].clone()
                    q[d] = 0.0
                    q = q / q.sum()
                    for x, qx in enumerate(q.tolist()):
                        if qx > 0:
                            emit(h, drafts[:a] + [x], reach * (1.0 - pd) * qx)
                reach *= pd
                if reach == 0.0:
                    break
            return
        # verify / greedy: every joint outcome of the k+1 row draws t_i ~ p_i
        joint = torch.tensor(list(itertools.product(range(model.vocab), repeat=k + 1)))  # [V^(k+1), k+1]
        pj = p.gather(1, joint.t()).prod(dim=0)  # [V^(k+1)] prod_i p_i(t_i)
        dt = torch.tensor(drafts).expand(joint.shape[0], k)
        if form == "verify":
            acc, em = accept_exact(joint, dt)
        else:
            raw = torch.argmax(logits, dim=1).expand(joint.shape[0], k + 1)
            acc, em = accept_greedy(raw, joint, dt)
        grouped: dict[tuple, float] = defaultdict(float)  # emitted tokens -> total probability
        for row, a, w in zip(em.tolist(), acc.tolist(), pj.tolist()):
            if w > 0:
                grouped[tuple(row[: a + 1])] += w
        for toks, w in grouped.items():
            emit(h, list(toks), prob * w)

    rec(list(prompt), 1.0)
    return out


def _max_diff(p: dict, q: dict) -> float:
    keys = set(p) | set(q)
    return max(abs(p.get(s, 0.0) - q.get(s, 0.0)) for s in keys)


def enumerate_check(ks=(1, 2, 3), horizon: int = 3, prompt=(1, 0, 2, 2),
                    cfg: SamplerConfig | None = None, model: EnumModel | None = None,
                    sampler: str = "torch", drafters=DRAFTERS) -> dict:
    """Max abs differences between each speculative form and the reference, per drafter and k."""
    assert sampler in SAMPLERS, sampler
    cfg = cfg or enum_config()
    model = model or EnumModel()
    prompt = list(prompt)
    ref = reference(model, prompt, horizon, cfg, sampler)
    rows = []
    for drafter, k in itertools.product(drafters, ks):
        rows.append(dict(drafter=drafter, k=k, **{
            form: _max_diff(ref, speculative(model, prompt, horizon, cfg, k, form, sampler, drafter))
            for form in ("closed", "verify", "greedy")}))
    ok = all(r["closed"] <= TOL and r["verify"] <= TOL for r in rows)
    rep = dict(vocab=model.vocab, horizon=horizon, outcomes=len(ref), ref_mass=sum(ref.values()),
               rows=rows, ok=ok, sampler=sampler)
    if sampler != "torch":  # the fused distribution itself: float32 logits vs the float64 reference
        rep["vs_torch"] = _max_diff(ref, reference(model, prompt, horizon, cfg))
    return rep


def format_report(rep: dict) -> str:
    lines = [f"Exact enumeration: vocab {rep['vocab']}, horizon {rep['horizon']}, "
             f"{rep['outcomes']} outcomes with mass {rep['ref_mass']:.15f}; max |P_spec - P_ref|:",
             f"{'drafter':<13}{'k':>3}{'closed form':>14}{'verify rule':>14}{'greedy-match':>14}"]
    for r in rep["rows"]:
        lines.append(f"{r['drafter']:<13}{r['k']:>3}{r['closed']:>14.2e}{r['verify']:>14.2e}{r['greedy']:>14.2e}")
    if "vs_torch" in rep:
        lines.append(f"{rep['sampler']} sampler; its reference vs the torch chain's (float32 logits): "
                     f"{rep['vs_torch']:.2e}")
    lines.append(f"{'PASS' if rep['ok'] else 'FAIL'} (tolerance {TOL:g})")
    return "\n".join(lines)


def _main(args: argparse.Namespace) -> int:
    rep = enumerate_check(horizon=args.horizon, sampler=args.sampler)
    print(format_report(rep))
    return 0 if rep["ok"] else 1


def register(subparsers) -> argparse.ArgumentParser:
    """Add `enumerate` to the `mtp-turbo check` subparsers; its func(args) returns the exit code."""
    p = subparsers.add_parser("enumerate", help="exact output distribution of speculative sampling")
    p.add_argument("--horizon", type=int, default=3, help="generated tokens enumerated (default 3)")
    p.add_argument("--sampler", choices=SAMPLERS, default="torch",
                   help="whose distributions: the torch chain (default) or the fused kernels (CUDA, else "
                   "Triton's interpreter)")
    p.set_defaults(func=_main)
    return p
