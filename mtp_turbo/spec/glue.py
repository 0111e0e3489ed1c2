"""The index work between a speculative round's kernels, as a few tiny Triton kernels on CUDA and
the torch ops they replace elsewhere.

Owns: RoundGlue (backend "auto": the kernels for CUDA tensors, torch ops for the rest; "triton":
the kernels everywhere, the CPU through Triton's interpreter, for checks; "torch") and its kernels:
- round_inputs: a round's drafts into tok_buf at [n, n+k) and the verify rows' inputs (rows
  n-1+j, their tokens, the draw positions n+j), one launch where torch took ~8;
- accept: the acceptance rule (exact or the legacy greedy), the emitted tokens into tok_buf and
  out, n_dev += a + 1, one launch where torch took ~20; optionally the verified rows' main hidden
  states into the MTP drafter's rows by position (its store_hidden_rows, a launch of its own before);
- step_commit: a plain step's token into tok_buf and out, the next step's inputs, at the last
  step out[0] and n_dev;
- after_inputs / after_select: the MTP drafter's work for a round staged before the previous one
  is read (the previous accepted count picks the catch-up tokens' outcome, the read runs, the
  chain positions, the penalty window, then draft 0's block input and query rows);
- draft_store: a drafted head index into the chain's draft slot (through vocab_ids) and the
  penalty window.
Ignores: what the values mean (program.py, drafters/mtp.py, verify.py's rules, which the torch
branch calls), the model's kernels.

Why: between the fused forward's and the drafter's kernels a round ran ~53 launches of torch's
own small kernels (72 us of an 870 us temp-0 MTP round on an H200, bench/RESULTS.md session 19)
and a plain token ~8 (14 us); each costs ~1.5-2 us of device time plus a gap in the graph.

Every kernel is one program of one warp (a round has at most 9 rows), reads its device scalars
(n_dev, the accepted count) itself, and has a fixed launch shape: all of it is capturable. The
torch branch is the same arithmetic in torch ops; both give the same integers. A kernel that fails
to launch outside a graph capture (a build failure) switches the object to the torch branch for
good, says so once on stderr, and redoes that call with torch ops (RoundProgram._degrade switches
it too, for a failure inside a capture).
"""

from __future__ import annotations

import sys

import torch

from ..models import fused_kernels as fk
from .verify import accept_exact, accept_greedy

triton = fk.triton
ROWS_MAX = 8  # catch-up rows after_inputs takes (the drafter's GRAPH_ROWS)
CHAIN_MAX = 8  # chain steps after_inputs takes (the drafter's GRAPH_K)
RUN_WORDS = 6  # a chain step's read runs (drafters/mtp.py)
WINDOW_BLOCK = 1024  # penalty-window tokens after_inputs maps a loop step

if triton is not None:
    import triton.language as tl

    @triton.jit
    def round_inputs_kernel(TB, N, D, ROWS, TOKS, POS, K: tl.constexpr, TP: tl.constexpr):
        """TB [C] int64 (committed tokens at [0, n), n = N [1]): drafts D [K] into TB[n, n+K);
        for j <= K: ROWS[j] = n-1+j, TOKS[j] = the token at ROWS[j] (TB[n-1], then the drafts),
        POS[j] = n+j. TP: a power of two > K."""
        n = tl.load(N)
        j = tl.arange(0, TP)
        rows = j < K + 1
        tok = tl.zeros([TP], dtype=tl.int64) + tl.load(TB + n - 1)
        if K > 0:
            d = tl.load(D + j, mask=j < K, other=0)
            tl.store(TB + n + j, d, mask=j < K)
            tok = tl.where(j >= 1, tl.load(D + j - 1, mask=(j >= 1) & rows, other=0), tok)
        tl.store(ROWS + j, n - 1 + j, mask=rows)
        tl.store(TOKS + j, tok, mask=rows)
        tl.store(POS + j, n + j, mask=rows)

    @triton.jit
    def accept_kernel(TB, N, T, RAW, TOKS, OUT, HID, HB, ROWS, D, K: tl.constexpr, TP: tl.constexpr,
                      GREEDY: tl.constexpr, COPY: tl.constexpr, DB: tl.constexpr):
        """Row tokens T [K+1] (drawn), drafts TOKS[1 .. K] (round_inputs'), RAW [K+1] (GREEDY:
        each row's unpenalised argmax): a = leading rows whose draft matches (exact: T, greedy:
        RAW); e_j = T_j for j <= a (greedy: the drafts, then T_a), -1 after. e_0..e_a into TB at
        n.., OUT = [a, e_0 .. e_K], N += a + 1. Reads everything before the reduction, writes
        after it (one warp). COPY: then rows HID[j] [K+1, D] into HB at rows ROWS[j], DB columns a
        pass (the values as they are)."""
        n = tl.load(N)
        j = tl.arange(0, TP)
        rows = j < K + 1
        dr = j < K
        t = tl.load(T + j, mask=rows, other=-1)
        d = tl.load(TOKS + 1 + j, mask=dr, other=-1)
        if GREEDY:
            hit = (tl.load(RAW + j, mask=dr, other=-1) == d) & dr
        else:
            hit = (t == d) & dr
        a = tl.min(tl.where(hit, K, j), axis=0)  # the first row that misses (lane K never hits)
        if GREEDY:
            e = tl.where(j < a, d, tl.where(j == a, t, -1))
        else:
            e = tl.where(j <= a, t, -1)
        tl.store(TB + n + j, e, mask=j <= a)
        tl.store(OUT + 1 + j, e, mask=rows)
        tl.store(OUT, a.to(tl.int64))
        tl.store(N, n + a + 1)
        if COPY:
            r = tl.load(ROWS + j, mask=rows, other=0)
            for d0 in range(0, D, DB):
                dd = d0 + tl.arange(0, DB)
                m = rows[:, None] & (dd < D)[None, :]
                h = tl.load(HID + j[:, None] * D + dd[None, :], mask=m, other=0.0)
                tl.store(HB + r[:, None] * D + dd[None, :], h, mask=m)

    @triton.jit
    def step_commit_kernel(TB, N, T, OUT, TOKS, ROWS, POS, J, STEPS, LAST: tl.constexpr):
        """Plain step J of STEPS drew T [1] (the token at n+J): into TB[n+J] and OUT[1+J]; the
        next step's input TOKS[0] = T at ROWS[0] = n+J, drawn at POS[0] = n+J+1; LAST: OUT[0] =
        STEPS-1 and N += STEPS."""
        n = tl.load(N)
        t = tl.load(T)
        p = n + J
        tl.store(TB + p, t)
        tl.store(OUT + 1 + J, t)
        if LAST:
            tl.store(OUT, n * 0 + (STEPS - 1))  # (n * 0: an int64 whatever STEPS specialises to)
            tl.store(N, n + STEPS)
        else:
            tl.store(TOKS, t)
            tl.store(ROWS, p)
            tl.store(POS, p + 1)

    @triton.jit
    def after_inputs_kernel(ST, A, TB, N, TOKS, RUNS, CPOS, VMAP, SEQ, R, K, W,
                            RP: tl.constexpr, KW: tl.constexpr, KP: tl.constexpr, WB: tl.constexpr,
                            WINDOW: tl.constexpr):
        """ST: a staged vector of prepare_after (cells [R] | read runs [R, K, 6]); A [1]: the
        previous round's accepted count a. TOKS[m] = TB[cell m + 1] (m < R), RUNS [K*6] = outcome
        a's runs, CPOS[j] = cell a + j (j < K: the chain's positions); WINDOW: SEQ[i] (i < W) =
        the head index VMAP[TB[n-W+i]] of the verifier's penalty window (-1 before the start)."""
        a = tl.load(A)
        m = tl.arange(0, RP)
        ok = m < R
        cells = tl.load(ST + m, mask=ok, other=0)
        tl.store(TOKS + m, tl.load(TB + cells + 1, mask=ok, other=0), mask=ok)
        i = tl.arange(0, KW)
        ok = i < K * 6
        tl.store(RUNS + i, tl.load(ST + R + a * (K * 6) + i, mask=ok, other=0), mask=ok)
        j = tl.arange(0, KP)
        tl.store(CPOS + j, tl.load(ST + a) + j, mask=j < K)
        if WINDOW:  # (names of their own in the loop: Triton 3.6 types loop-carried names)
            n = tl.load(N)
            for s in range(0, W, WB):
                w = s + tl.arange(0, WB)
                inw = w < W
                at = n - W + w
                live = inw & (at >= 0)
                v = tl.load(VMAP + tl.load(TB + at, mask=live, other=0), mask=live, other=-1)
                tl.store(SEQ + w, tl.where(live, v, -1), mask=inw)

    @triton.jit
    def after_select_kernel(A, X, Q, XS, QS, DX, DQ, BX: tl.constexpr, BQ: tl.constexpr):
        """Row a = A[0] of X [R, DX] and Q [R, DQ] (contiguous) into XS [DX] and QS [DQ]."""
        a = tl.load(A)
        i = tl.arange(0, BX)
        tl.store(XS + i, tl.load(X + a * DX + i, mask=i < DX), mask=i < DX)
        i = tl.arange(0, BQ)
        tl.store(QS + i, tl.load(Q + a * DQ + i, mask=i < DQ), mask=i < DQ)

    @triton.jit
    def draft_store_kernel(I, IDS, SLOT, SEQ, MAP: tl.constexpr, WINDOW: tl.constexpr):
        """A drafted head index I [1]: SLOT[0] = IDS[I] (MAP) or I; WINDOW: SEQ[0] = I."""
        i = tl.load(I)
        if WINDOW:
            tl.store(SEQ, i)
        if MAP:
            i = tl.load(IDS + i)
        tl.store(SLOT, i)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class RoundGlue:
    """The kernels above with their torch branch (see the module docstring). Scratch for
    after_inputs / after_select is made at the first call of each shape (before a capture: the
    warm-up runs first) and kept; the results of those two are views of it, valid until the
    next call."""

    def __init__(self, backend: str = "auto"):
        assert backend in ("auto", "triton", "torch"), backend
        self.backend = backend
        self.scratch: dict[tuple, torch.Tensor] = {}

    def on(self, t: torch.Tensor) -> bool:
        """Whether calls on t's device take the kernels."""
        if self.backend == "torch" or triton is None:
            return False
        return self.backend == "triton" or t.is_cuda

    def _launch(self, fn, grid, *args, **kw) -> bool:
        """Launch a kernel; False (and the torch branch from now on) when it fails outside a CUDA
        graph capture (a build failure: the caller then does the work with torch ops)."""
        try:
            fn[grid](*args, **kw)
            return True
        except Exception as e:
            if self.backend == "triton" or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
                raise  # checks see the failure; a capture has its own path (RoundProgram._degrade)
            print(f"mtp-turbo: the round's index kernel {fn.__name__} failed ({type(e).__name__}: "
                  f"{str(e)[:200]}); doing that work with torch ops", file=sys.stderr)
            self.backend = "torch"
            return False

    def _buf(self, key: tuple, shape, dtype, device) -> torch.Tensor:
        k = (key, tuple(shape), dtype, device)
        if k not in self.scratch:
            self.scratch[k] = torch.zeros(shape, dtype=dtype, device=device)
        return self.scratch[k]

    # ---- the round program -------------------------------------------------------------------
    def round_inputs(self, tb: torch.Tensor, n: torch.Tensor, drafts: torch.Tensor | None, k: int,
                     ar: torch.Tensor, rows: torch.Tensor, toks: torch.Tensor, pos: torch.Tensor) -> None:
        """Device: drafts [k] int64 (None when k = 0) into tb at [n, n+k), n = n_dev [1]; then for
        j <= k: rows[j] = n-1+j, toks[j] = tb[rows[j]], pos[j] = n+j (ar: arange >= k+1)."""
        T = k + 1
        assert (drafts is None) == (k == 0) and (k == 0 or drafts.shape == (k,) and drafts.is_contiguous())
        if self.on(tb) and self._launch(round_inputs_kernel, (1,), tb, n, drafts if k else tb, rows, toks, pos,
                                        K=k, TP=_pow2(T + 1), num_warps=1):
            return
        if k:
            tb.index_copy_(0, n + ar[:k], drafts)
        torch.add(ar[:T], n, out=pos[:T])
        torch.sub(pos[:T], 1, out=rows[:T])
        torch.index_select(tb, 0, rows[:T], out=toks[:T])

    def accept(self, tb: torch.Tensor, n: torch.Tensor, t: torch.Tensor, raw: torch.Tensor | None, k: int,
               ar: torch.Tensor, toks: torch.Tensor, pos: torch.Tensor, out: torch.Tensor,
               hid: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> None:
        """Device: after round_inputs(.., k, .., toks, pos) and the draws t [k+1] (raw: each row's
        unpenalised argmax [k+1] for the legacy greedy rule, else None): the accepted count a and
        the emitted tokens e (verify.py's rules) into tb at [n, n+a], out = [a, e_0 .. e_k] (-1
        after e_a), n += a + 1. hid = (hidden [k+1, D], buf [*, D], rows [k+1]): also buf[rows[j]]
        = hidden[j] (same dtype, contiguous)."""
        T = k + 1
        assert t.shape == (T,) and (raw is None or raw.shape == (T,)), (t.shape, k)
        greedy = raw is not None
        if hid is not None:
            h, hb, hrows = hid
            assert h.shape[0] == T and hrows.shape == (T,) and h.dtype == hb.dtype and h.shape[1] == hb.shape[1]
            assert h.is_contiguous() and hb.is_contiguous(), "the copy indexes rows of D values"
        if self.on(tb) and self._launch(accept_kernel, (1,), tb, n, t, raw if greedy else t, toks, out,
                                        *(hid if hid is not None else (tb, tb, tb)),
                                        hid[0].shape[1] if hid is not None else 1, K=k, TP=_pow2(T + 1),
                                        GREEDY=greedy, COPY=hid is not None, DB=128, num_warps=1):
            return
        if hid is not None:
            hid[1].index_copy_(0, hid[2], hid[0])
        drafts = toks[1:T]
        a, e = accept_greedy(raw, t, drafts) if greedy else accept_exact(t, drafts)
        a = a.view(1)
        p = pos[:T]
        tb.index_copy_(0, p, torch.where(ar[:T] <= a, e, tb[p]))
        out[:1].copy_(a)
        out[1: T + 1].copy_(e)
        n.add_(a + 1)

    def step_commit(self, tb: torch.Tensor, n: torch.Tensor, t: torch.Tensor, j: int, steps: int,
                    out: torch.Tensor, toks: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> None:
        """Device: plain step j of `steps` drew t [1], the token at pos[0] = n+j: into tb there and
        out[1+j]; then the next step's input (toks[0] = t at rows[0] = n+j, drawn at pos[0] =
        n+j+1), or after the last step out[0] = steps - 1 and n += steps."""
        last = j + 1 == steps
        if self.on(tb) and self._launch(step_commit_kernel, (1,), tb, n, t, out, toks, rows, pos, j, steps,
                                        LAST=last, num_warps=1):
            return
        p = n + j
        tb.index_copy_(0, p, t)
        out[1 + j: 2 + j].copy_(t)
        if last:
            out[:1].fill_(steps - 1)
            n.add_(steps)
        else:
            toks[:1].copy_(t)
            rows[:1].copy_(p)
            torch.add(p, 1, out=pos[:1])

    # ---- the MTP drafter ---------------------------------------------------------------------
    def after_inputs(self, staged: torch.Tensor, R: int, k: int, a: torch.Tensor, tb: torch.Tensor,
                     n: torch.Tensor, window=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Device: staged = cells [R] | runs [R, k, 6] (prepare_after), a [1] the accepted count
        of the round before -> (tokens [R] = tb[cells + 1], outcome a's runs [k, 6], the chain's
        positions [k] = cell a + j). window (vmap [V] int64, seq [>= W], W, offs = arange(-W, 0)):
        also seq[:W] = vmap[tb[n-W .. n-1]], -1 before the sequence's start."""
        assert 1 <= R <= ROWS_MAX and 1 <= k <= CHAIN_MAX, (R, k)
        dev = staged.device
        if self.on(staged):
            toks = self._buf("toks", (ROWS_MAX,), torch.int64, dev)
            runs = self._buf("runs", (CHAIN_MAX * RUN_WORDS,), torch.int64, dev)
            cpos = self._buf("cpos", (CHAIN_MAX,), torch.int64, dev)
            vmap, seq, W = (window[0], window[1], window[2]) if window is not None else (staged, staged, 0)
            if self._launch(after_inputs_kernel, (1,), staged, a, tb, n, toks, runs, cpos, vmap, seq, R, k, W,
                            RP=ROWS_MAX, KW=_pow2(CHAIN_MAX * RUN_WORDS), KP=CHAIN_MAX,
                            WB=min(WINDOW_BLOCK, _pow2(max(W, 1))), WINDOW=window is not None, num_warps=4):
                return toks[:R], runs[: k * RUN_WORDS].view(k, RUN_WORDS), cpos[:k]
        pos = staged[:R]
        runs = staged[R: R + R * k * RUN_WORDS].view(R, k, RUN_WORDS).index_select(0, a)[0]
        if window is not None:
            vmap, seq, W, offs = window
            at = n + offs  # positions n-W .. n-1
            seq[:W].copy_(torch.where(at >= 0, vmap[tb[at.clamp(min=0)]], -1))
        cpos = pos.index_select(0, a) + torch.arange(k, dtype=torch.int64, device=dev)
        return tb[pos + 1], runs, cpos

    def after_select(self, a: torch.Tensor, x: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Device: row a [1] of x [R, D] and q [R, H, Dh] -> ([1, D], [1, H, Dh])."""
        if self.on(x) and x.is_contiguous() and q.is_contiguous():
            xs = self._buf("x", (1, *x.shape[1:]), x.dtype, x.device)
            qs = self._buf("q", (1, *q.shape[1:]), q.dtype, q.device)
            DX, DQ = xs.numel(), qs.numel()
            if self._launch(after_select_kernel, (1,), a, x, q, xs, qs, DX, DQ, BX=_pow2(DX), BQ=_pow2(DQ),
                            num_warps=4):
                return xs, qs
        return x.index_select(0, a), q.index_select(0, a)

    def draft_store(self, i: torch.Tensor, ids: torch.Tensor | None, slot: torch.Tensor,
                    seq_slot: torch.Tensor | None = None) -> None:
        """Device: a drafted head index i [1] -> slot [1] (the draft's token: ids[i], or i for a
        full head); seq_slot [1] (the penalty window's next entry): i."""
        if self.on(slot) and self._launch(draft_store_kernel, (1,), i, ids if ids is not None else i, slot,
                                          seq_slot if seq_slot is not None else slot, MAP=ids is not None,
                                          WINDOW=seq_slot is not None, num_warps=1):
            return
        if seq_slot is not None:
            seq_slot.copy_(i)
        slot.copy_(i if ids is None else ids[i])
