"""Model-free drafters: n-gram prompt lookup computed on the device, and a scripted host drafter
for checks.

Owns: NGramDrafter (the lookup as one Triton kernel, `ngram_lookup`, on CUDA and a torch path of
the same arithmetic elsewhere, with the kernel's scratch) and ScriptedDrafter. Ignores:
verification and the main model's cache (spec/program.py, spec/round.py), the interface's hooks
(base.py).

The lookup (prompt lookup, as vLLM's ngram / transformers' prompt_lookup): L = the committed
count, tok = the committed tokens. For n = ngram_max down to ngram_min, the largest end e in
[n, L-1] with tok[e-n : e] == tok[L-n : L]; the first n that matches wins, and draft j is
tok[e + (j mod (L - e))] for j < k: what followed the match, continued periodically where it
runs into the suffix itself (a repeating stretch keeps repeating), so every round drafts exactly k
(one CUDA graph per k). Where no suffix of ngram_min tokens occurred before, the drafts are the
last token repeated (e = L - 1): a round needs k valid ids, the verify rows cost the same whatever
they hold, and a repeated token is the one guess right in runs of one token. ngram_min = 1 (the
default) first proposes what followed the last occurrence of the last token: teacher-forced on
tests/data/tempest_act1.txt, at the positions where no suffix of 2 tokens matched, its first draft
was right 6.1% of the time, the repeat's 0%.

Why on the device: a round's drafts then need nothing from the host but n_dev (which each round
program advances) and the token buffer, so rounds replay from CUDA graphs and are launched before
the previous one is read (spec/program.py launch_after), as the MTP drafter's are. The drafter
keeps no host state at all: every hook (begin, observe, truncate, reset) is a no-op.

Kernel: grid of cdiv(C, B) programs over the token buffer [C]; program c scores its B candidate
ends e by their match length m(e) (consecutive equal tokens going back from e and from L, capped
at ngram_max and at e) as the key m * 2^40 + e, so the largest key is the longest match at its
latest end; the last program to arrive merges the programs' keys and writes the k drafts and the
match length. A program of ends past L only joins the merge: one launch of a few microseconds
whatever the context.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...models import fused_kernels as fk
from .base import Drafter

triton = fk.triton
BLOCK = 1024  # candidate ends a program scores
SHIFT = 1 << 40  # key = match length * SHIFT + end (ends < 2^40)

if triton is not None:
    import triton.language as tl

    KEY_SHIFT = tl.constexpr(SHIFT)  # a kernel reads only constexpr globals

    @triton.jit
    def ngram_lookup(TOK, N, OUT, PK, CNT, K: tl.constexpr, NMIN: tl.constexpr, NMAX: tl.constexpr,
                     B: tl.constexpr, NBP: tl.constexpr, KP: tl.constexpr):
        """Program c of cdiv(C, B): ends e in [c*B, c*B + B) of TOK [C] int64 (committed tokens
        at [0, L), L = N [1] int64) scored as keys into PK [programs] int64 (-1: none); the last
        to arrive (counter CNT int32 [1], zero before and after) writes OUT [K + 1] int64: the K
        drafts, then the match length (0 where it is below NMIN)."""
        c = tl.program_id(0)
        nb = tl.num_programs(0)
        L = tl.load(N)
        e = (c * B + tl.arange(0, B)).to(tl.int64)
        ok = (e >= 1) & (e < L)
        run = ok
        m = tl.zeros([B], dtype=tl.int64)
        for i in tl.static_range(1, NMAX + 1):
            back = ok & (e >= i)
            a = tl.load(TOK + (e - i), mask=back, other=-1)
            b = tl.load(TOK + tl.maximum(L - i, 0))  # L - i > e - i >= 0 wherever it counts
            run = run & back & (a == b)
            m += run.to(tl.int64)
        tl.store(PK + c, tl.max(tl.where(ok, m * KEY_SHIFT + e, -1), axis=0))
        if fk.last_arrival(CNT, nb):
            rc = tl.arange(0, NBP)
            best = tl.max(fk.ld(PK + rc, rc < nb, -1, True), axis=0)
            mlen = tl.where(best >= 0, best // KEY_SHIFT, 0)
            hit = mlen >= NMIN
            end = tl.where(hit, best % KEY_SHIFT, tl.maximum(L - 1, 0))
            per = tl.maximum(L - end, 1)
            j = tl.arange(0, KP).to(tl.int64)
            d = tl.load(TOK + end + j % per, mask=j < K, other=0)
            tl.store(OUT + j, d, mask=j < K)
            tl.store(OUT + K, tl.where(hit, mlen, 0))


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def lookup_torch(tok: torch.Tensor, n: torch.Tensor, k: int, ngram_min: int, ngram_max: int) -> torch.Tensor:
    """The kernel's arithmetic in torch ops over the whole buffer tok [C] int64 (committed tokens
    at [0, n), n [1] int64 on the same device) -> int64 [k + 1]: the k drafts, then the match
    length (0: none of ngram_min tokens). No host sync, no shape that depends on n: capturable."""
    C = tok.shape[0]
    e = torch.arange(C, dtype=torch.int64, device=tok.device)
    ok = (e >= 1) & (e < n)
    run = ok
    m = torch.zeros(C, dtype=torch.int64, device=tok.device)
    for i in range(1, ngram_max + 1):
        a = tok[(e - i).clamp(min=0)]
        b = tok[(n - i).clamp(min=0)]
        run = run & (e >= i) & (a == b)
        m += run
    best = torch.where(ok, m * SHIFT + e, -1).max().view(1)
    mlen = torch.where(best >= 0, best // SHIFT, 0)
    hit = mlen >= ngram_min
    end = torch.where(hit, best % SHIFT, (n - 1).clamp(min=0))
    per = (n - end).clamp(min=1)
    j = torch.arange(k, dtype=torch.int64, device=tok.device)
    return torch.cat([tok[end + j % per], torch.where(hit, mlen, 0)])


class NGramDrafter(Drafter):
    """Prompt lookup on the device (see the module docstring): the round program asks for k
    drafts from the token buffer and n_dev; nothing is staged, nothing kept on the host."""

    name = "ngram"
    on_device = True

    def __init__(self, ngram_min: int = 1, ngram_max: int = 4, kernels: str = "auto"):
        """kernels: "triton" (the kernel; in the interpreter on the CPU, for checks), "torch", or
        "auto" (the kernel for a buffer on CUDA when Triton imports)."""
        assert 1 <= ngram_min <= ngram_max and kernels in ("auto", "triton", "torch"), (ngram_min, ngram_max, kernels)
        self.ngram_min, self.ngram_max, self.kernels = ngram_min, ngram_max, kernels
        self._scratch: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (device, C) -> (PK, CNT)

    # ---- the lookup ------------------------------------------------------------------------------
    def _kernel(self, tok: torch.Tensor) -> bool:
        if self.kernels == "torch" or triton is None:
            return False
        return self.kernels == "triton" or tok.is_cuda

    def lookup(self, tok: torch.Tensor, n: torch.Tensor, k: int) -> torch.Tensor:
        """Device: tok [C] int64 with the committed tokens at [0, n), n [1] int64 -> int64 [k + 1]:
        the k drafts, then the match length (0: no suffix of ngram_min tokens matched, the drafts
        are the last token). Capturable (the kernel's scratch is made on the first call)."""
        assert tok.dim() == 1 and tok.dtype == torch.int64 and n.shape == (1,) and 1 <= k, (tok.shape, n.shape, k)
        if not self._kernel(tok):
            return lookup_torch(tok, n, k, self.ngram_min, self.ngram_max)
        C = tok.shape[0]
        nb = -(-C // BLOCK)
        key = (tok.device, C)
        if key not in self._scratch:
            self._scratch[key] = (torch.zeros(nb, dtype=torch.int64, device=tok.device),
                                  torch.zeros(1, dtype=torch.int32, device=tok.device))
        pk, cnt = self._scratch[key]
        out = torch.empty(k + 1, dtype=torch.int64, device=tok.device)
        ngram_lookup[(nb,)](tok, n, out, pk, cnt, K=k, NMIN=self.ngram_min, NMAX=self.ngram_max, B=BLOCK,
                            NBP=_pow2(nb), KP=_pow2(k), num_warps=4)
        return out

    @torch.inference_mode()
    def propose(self, tokens: list[int], k: int) -> list[int]:
        """The k drafts the device would make after `tokens` (one host sync: for checks and tools)."""
        if k <= 0 or not tokens:
            return []
        tok = torch.tensor(tokens, dtype=torch.int64)
        return self.lookup(tok, torch.tensor([len(tokens)]), k)[:k].tolist()

    # ---- the round's device program (spec/program.py) ---------------------------------------------
    def prepare(self, tokens: list[int], k: int) -> tuple[int, None] | None:
        """Nothing to stage: (0 catch-up rows, no staged inputs), or None when no round can draft."""
        return (0, None) if k >= 1 and tokens else None

    def prepare_after(self, n: int, k_prev: int, k: int) -> tuple:
        """A round launched before the previous one is read needs nothing of its outcome but
        n_dev and the token buffer, which that round's program leaves on the device."""
        assert k >= 1, k
        return ()

    def launched_after(self, accepted: int) -> None:
        pass

    def device_drafts(self, staged, n_catch: int, k: int, tok_buf: torch.Tensor, n_dev: torch.Tensor) -> torch.Tensor:
        return self.lookup(tok_buf, n_dev, k)[:k]

    def device_drafts_after(self, staged, k_prev: int, k: int, accepted: torch.Tensor, tok_buf: torch.Tensor,
                            n_dev: torch.Tensor) -> torch.Tensor:
        return self.lookup(tok_buf, n_dev, k)[:k]

    def fall_back_to_torch(self) -> bool:
        """Look up with torch ops from now on (the kernel failed); False if it already does."""
        if self.kernels == "torch":
            return False
        self.kernels = "torch"
        return True


class ScriptedDrafter(Drafter):
    """Drafts from a function of the committed tokens, on the host (for checks: any deterministic
    proposer, and the round's host-drafter path)."""

    name = "scripted"

    def __init__(self, fn: Callable[[list[int], int], list[int]]):
        self.fn = fn

    def propose(self, tokens: list[int], k: int) -> list[int]:
        return list(self.fn(list(tokens), k))[:k]
