"""The greedy pick: each row's argmax over its logits, as torch.argmax gives it (the first index of
the maximum), in one launch on CUDA; optionally mapped through an id table (a reduced-vocabulary
draft head's rows -> token ids) and written into a given slot.

Owns: `argmax_rows` (a program per chunk of a row: its maximum and first index; the row's last
program to arrive merges the chunks) and GreedyPick, which owns that kernel's scratch. Ignores:
penalties and sampling (sampling/fused.py), what the tokens are for (spec/program.py, the drafter).

Why: torch's argmax over a row of 262144 logits is one reduction block a row (9 us a 1-row decode
step, 38 us of a temp-0 MTP round's device time in 5 launches: bench/RESULTS.md session 16); spread
over the grid and merged by the last chunk it is one short launch.
"""

from __future__ import annotations

import torch

from . import fused_kernels as fk

triton = fk.triton
CHUNK = 4096  # logits a program reads (262144: 64 programs a row)

if triton is not None:
    import triton.language as tl

    NO_INDEX = tl.constexpr(2**31 - 1)  # above every index (a kernel reads only constexpr globals)

    @triton.jit
    def argmax_rows(L, OUT, PV, PI, CNT, V, stride, IDS, B: tl.constexpr, NBP: tl.constexpr, MAP: tl.constexpr):
        """Program (r, c) of a (rows, NB = cdiv(V, B)) grid: chunk c of row r of L [rows, stride]
        (V logits a row) -> its maximum and the first index holding it into PV / PI [rows, NB];
        the row's last program (arrival counter CNT [rows] int32, zero before and after) takes the
        largest maximum at the smallest index into OUT [rows] int64 (MAP: IDS [V] int64 at that
        index). NaN counts as the largest value (torch.argmax's rule; here it ties with an inf,
        the first of the two winning)."""
        r = tl.program_id(0)
        c = tl.program_id(1)
        nb = tl.num_programs(1)
        offs = c * B + tl.arange(0, B)
        x = tl.load(L + r * stride + offs, mask=offs < V, other=float("-inf"))
        x = tl.where(x != x, float("inf"), x)  # NaN: the maximum
        m = tl.max(x, axis=0)
        i = tl.min(tl.where(x == m, offs, NO_INDEX), axis=0)
        tl.store(PV + r * nb + c, m)
        tl.store(PI + r * nb + c, i)
        if fk.last_arrival(CNT + r, nb):
            rc = tl.arange(0, NBP)
            ok = rc < nb
            pv = fk.ld(PV + r * nb + rc, ok, float("-inf"), True)
            pi = fk.ld(PI + r * nb + rc, ok, NO_INDEX, True)
            best = tl.max(pv, axis=0)
            won = tl.min(tl.where(ok & (pv == best), pi, NO_INDEX), axis=0).to(tl.int64)
            if MAP:
                won = tl.load(IDS + won)
            tl.store(OUT + r, won)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class GreedyPick:
    """pick(logits [T, V] fp32, out=None, ids=None) -> int64 [T] on the logits' device, =
    logits.argmax(-1), or ids[logits.argmax(-1)] (ids: int64 [V]); into `out` (int64 [T],
    contiguous: a slot the caller keeps, e.g. a drafter's chain of drafts) when given. Through
    argmax_rows on CUDA for rows of contiguous logits (or everywhere with backend "triton": the CPU interpreter, for the
    checks), torch elsewhere. Its scratch is sized at the first call of each (rows, V) and kept
    (a call inside a CUDA graph capture, after a warm-up call, allocates only its output); one
    call at a time on one stream."""

    def __init__(self, backend: str = "auto"):
        assert backend in ("auto", "triton", "torch"), backend
        self.backend = backend
        self.scratch: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def _kernel(self, logits: torch.Tensor) -> bool:
        if self.backend == "torch" or triton is None or logits.stride(1) != 1:
            return False
        return self.backend == "triton" or logits.is_cuda

    def __call__(self, logits: torch.Tensor, out: torch.Tensor | None = None,
                 ids: torch.Tensor | None = None) -> torch.Tensor:
        assert logits.dim() == 2 and logits.dtype == torch.float32, (logits.shape, logits.dtype)
        T, V = logits.shape
        assert out is None or (out.shape == (T,) and out.dtype == torch.int64 and out.is_contiguous()), out
        assert ids is None or (ids.shape == (V,) and ids.dtype == torch.int64), ids
        if not self._kernel(logits):
            i = logits.argmax(-1)
            i = i if ids is None else ids[i]
            return i if out is None else out.copy_(i)
        nb = -(-V // CHUNK)
        key = (T, V, logits.device)
        if key not in self.scratch:
            dev = logits.device
            self.scratch[key] = (torch.zeros(T, nb, dtype=torch.float32, device=dev),
                                 torch.zeros(T, nb, dtype=torch.int32, device=dev),
                                 torch.zeros(T, dtype=torch.int32, device=dev))
        pv, pi, cnt = self.scratch[key]
        if out is None:
            out = torch.empty(T, dtype=torch.int64, device=logits.device)  # the caller's: not reused here
        argmax_rows[(T, nb)](logits, out, pv, pi, cnt, V, logits.stride(0), ids if ids is not None else out,
                             B=CHUNK, NBP=_pow2(nb), MAP=ids is not None, num_warps=4)
        return out
