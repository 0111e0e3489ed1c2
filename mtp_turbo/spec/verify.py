"""The verifier: accept/reject k deterministic drafts against k+1 main-model rows.

Owns: the acceptance rules ("exact" and the legacy lossy "greedy" match) and the result of one
round. Ignores: drafting, model forwards, caches (the caller commits/rolls back from the result).

exact (default; Leviathan et al. 2023 sec. 2.3 with a one-hot draft distribution):
    p_i = sample_dist(L_i, history ++ d1..di)          (the same function plain decoding uses)
    t_i = draw(p_i, u(seed, pos0 + i))                 (the same uniform plain decoding would use)
    d_{i+1} is accepted iff t_i == d_{i+1}; the first mismatching t_i is the RECOVERED token and
    ends the round; if all k drafts are accepted, t_k is the BONUS token.
  P(accept) = p_i(d_{i+1}) and a rejected row yields p_i without d_{i+1}, renormalised, so this is
  exact speculative sampling; and because t_i is exactly the token plain decoding would draw at
  pos0 + i, the emitted text equals plain decoding's for the same seed, for ANY drafts.
  temp 0: p_i is one-hot at the penalised argmax, so this is "accept iff equal to the argmax".
greedy (legacy, lossy, for comparison only): keep drafts while they equal the UNPENALISED argmax
  of their row; sample only the row after the last kept draft (its penalties see the accepted
  inputs: the history fix).

Both modes are shape-static and sync-free on the device (`verify_tensors`); `verify` adds the
round's single host sync (one .tolist()). `accept_exact`/`accept_greedy` take any leading batch
dims so the Monte Carlo check can run many sequences through the very same rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from ..sampling.chain import sample_dist
from ..sampling.config import SamplerConfig
from ..sampling.draw import draw
from ..sampling.rng import uniforms

__all__ = ["VerifyResult", "verify", "verify_tensors", "accept_exact", "accept_greedy", "MODES"]

MODES = ("exact", "greedy")


@dataclass(frozen=True)
class VerifyResult:
    accepted: int  # number of drafts accepted (0..k)
    emitted: list[int]  # accepted drafts, then one recovered-or-bonus token (len accepted + 1)
    recovered: int | None  # token drawn at the first rejected row (None if all accepted)
    bonus: int | None  # token drawn after a fully accepted window (None if one was rejected)


def _leading_matches(a: Tensor, b: Tensor) -> Tensor:
    """Number of leading positions (last dim) where a == b; [...]."""
    return torch.cumprod((a == b).to(torch.int64), dim=-1).sum(dim=-1)


def accept_exact(t: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor]:
    """Exact rule from sampled row tokens t [..., k+1] and drafts [..., k].

    Returns (accepted [...] int64, emitted [..., k+1] int64 with -1 after the last emitted token).
    """
    k = drafts.shape[-1]
    assert t.shape[-1] == k + 1 and t.shape[:-1] == drafts.shape[:-1]
    acc = _leading_matches(t[..., :k], drafts)
    j = torch.arange(k + 1, device=t.device)
    return acc, torch.where(j <= acc.unsqueeze(-1), t, -1)


def accept_greedy(raw_argmax: Tensor, t: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor]:
    """Legacy rule: raw_argmax [..., k+1] (unpenalised argmax per row), t [..., k+1] sampled rows.

    Keeps drafts while they equal raw_argmax; the last emitted token is t at the first other row.
    """
    k = drafts.shape[-1]
    acc = _leading_matches(raw_argmax[..., :k], drafts)
    j = torch.arange(k + 1, device=t.device)
    padded = torch.cat([drafts, torch.full_like(t[..., :1], -1)], dim=-1)  # (t: shaped even when k = 0)
    a = acc.unsqueeze(-1)
    return acc, torch.where(j < a, padded, torch.where(j == a, t, -1))


def verify_tensors(logits: Tensor, tokens: Tensor, k: int, cfg: SamplerConfig,
                   pos0: int | None = None, mode: str = "exact") -> tuple[Tensor, Tensor]:
    """Device-side verify: (accepted [] int64, emitted [k+1] int64, -1 padded). No host sync.

    logits [k+1, V]: main-model rows for inputs [t0, d1..dk]; tokens [N] = history ++ d1..dk
    (history ends with t0); pos0 = absolute position of the token drawn from row 0 (default
    N - k = len(history)).
    """
    if mode not in MODES:
        raise ConfigError(f"spec-sample must be one of {', '.join(MODES)}, got {mode!r}")
    assert logits.dim() == 2 and logits.shape[0] == k + 1, "logits must be [k+1, V]"
    assert tokens.dim() == 1 and tokens.shape[0] >= k + 1, "tokens = history (>= 1) ++ k drafts"
    if pos0 is None:
        pos0 = tokens.shape[0] - k
    tokens = tokens.to(logits.device)
    drafts = tokens[tokens.shape[0] - k:]
    probs = sample_dist(logits, tokens, cfg)  # [k+1, V]
    pos = pos0 + torch.arange(k + 1, device=logits.device, dtype=torch.int64)
    t = draw(probs, uniforms(cfg.seed, pos))  # [k+1] what plain decoding would draw at each row
    if mode == "exact":
        return accept_exact(t, drafts)
    return accept_greedy(torch.argmax(logits, dim=1), t, drafts)


def verify(logits: Tensor, tokens: Tensor, k: int, cfg: SamplerConfig,
           pos0: int | None = None, mode: str = "exact") -> VerifyResult:
    """One verify round; see the module docstring. Exactly one host sync."""
    acc, out = verify_tensors(logits, tokens, k, cfg, pos0, mode)
    vals = torch.cat([acc.view(1), out]).tolist()  # the round's only sync
    a = vals[0]
    emitted = vals[1:a + 2]
    last = emitted[-1]
    return VerifyResult(accepted=a, emitted=emitted,
                        recovered=last if a < k else None, bonus=last if a == k else None)
