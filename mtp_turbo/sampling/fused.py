"""The sampler chain as fused GPU kernels: logits + history + uniform -> token, for 1-16 rows.

Owns: `sample_tokens` (the engine's and the verifier's entry point), `sample_rows` (the same on
explicit per-row windows and uniforms: what the checks push many independent sequences through),
the plan of kernel launches for a configuration, and the torch path (CPU tensors, or no Triton).
Ignores: the chain's definitions (chain.py is the specification and the reference), speculation.

Semantics: row r's token is draw(sample_dist(logits[r], its history), u_r) exactly as chain.py
and draw.py define it, every stage in cfg.order, ties to the lowest id, temp 0 = the penalised
argmax. The kernels (kernels.py, passes.py) compute it without sorting and without a [rows, V] count table
for short penalty windows:

The stages in order are cut at the first top-k with k <= KMAX (128). Before that cut (or
everywhere, when there is none: top-k 0, or k > KMAX) the row is the whole vocabulary, handled by
passes over chunks of B tokens; after it the row is <= KMAX candidates held by one program.
- Elementwise stages (penalties, temperature) are recomputed in every pass from the logits: the
  same float32 operations as torch, in the same order, with IEEE division and no FMA contraction,
  so the values are bit-identical to the torch chain's on the CPU. Window counts come from a scan
  of the <= 64 window tokens, or from a [rows, V] int32 table built by atomic adds (longer windows).
- min-p: one STATS pass gives the row's max m; keep exp(l - m) >= min_p (torch: p >= min_p *
  p_max; the same up to rounding of exp).
- top-p: keep token i iff the float64 mass of the tokens with a strictly larger value is
  < top_p * total. This is chain._top_p_keep without the sort (the crossing token, and every
  token tied with it, has mass above < top_p; the next smaller value has >= top_p). Over the full
  vocabulary the threshold (the smallest kept value) is found by a radix search over the 32-bit
  order key of the float32 values, 4 bits a pass: each pass histograms the float64 masses
  exp(l - m_c) (m_c: the chunk's max, written beside) of the tokens in the current bucket into 16
  digits per chunk, and the chunk's mass above the bucket; the next pass rescales the chunks by
  exp(m_c - m), sums them in a fixed order and takes the largest digit whose bucket keeps the mass
  >= top_p * S (S: digit 0's total, the whole row). When top-p is the last stage, the last
  digit's partials also give each chunk's kept mass: the draw needs no further pass.
- top-k over the vocabulary (k > KMAX): the same radix search on counts (exact), then one TIES
  pass counting ties at the threshold per chunk, so a tie keeps the lowest ids (prefix over
  chunks + cumulative count inside the chunk).
- top-k with k <= KMAX: a SELECT pass writes each chunk's exact top-k (ties by id) in token order;
  the compact program selects the global top-k from those candidates the same way (the global
  top-k is inside the union of the chunks' top-k under the total order (value desc, id asc)),
  then runs every later stage in registers: min-p and top-p on <= KMAX tokens (top-p's mass above
  each token by a pairwise sum in float64), and the draw. Both selections are topk.py's: a bound
  from group maxima (K of them are keys, so the K-th largest maximum is <= the K-th largest key),
  narrowed by a few 2-bit steps while more than M keys pass it, then the <= M keys above it ranked
  pairwise in one reduction (or, past M ties, the exact threshold); exact integer work on the
  32-bit order keys. Top-1 (greedy, top-k 1) is the largest key and the lowest id holding it.
- The draw: inverse CDF in token order over the final values, float64 exp(l - m) masses: the
  first token whose cumulative mass exceeds u * total, never a zero-mass token (as draw.py). Over
  the full vocabulary: per-chunk masses (from a STATS pass, or top-p's last digit), a prefix over
  chunks, then the crossing chunk's own prefix (FINAL). u is rng.uniforms(seed, pos) computed
  inside the kernel (int64 splitmix64, bit-exact) or given.

Why exact: survivor sets are decided on the same float32 values as torch with exact integer
counts (top-k), float64 masses whose summation order differs from torch's only by ~1e-16
relative (top-p), and float32 exp (min-p: a decision differs only if exp(l - m) is within an ulp
or two of min_p). The draw's cumulative masses are float64 from accurate float64 exp of the
float32 final logits, i.e. within ~1e-15 of the exact distribution those logits define; a token
can differ from the exact inverse CDF only when u lies within that of a boundary. The torch draw
itself uses float32 probabilities (its boundaries are ~1e-7 relative off the exact ones); the
tests compare both with the exact float64 inverse CDF and count the near-boundary cases.

Same seed, same text: every program reads only its own row and its computations never depend on
the number of rows (which is passed only in the grid), so a row gives bit-identical results as
row 0 of 1 or as row i of k+1: verification picks the tokens plain decoding picks. No host sync,
no shape depending on pos: the launches (and the allocations) can be captured in a CUDA graph
(compile first: call once outside the capture).

Cost (V = 262144): top-k 40 first (the default order) is two launches (SELECT, compact; chunks of
2048 tokens, 64 candidate slots each; a top-1 chunk is >= 128 chunks of >= 256 tokens); top-k 0
with min-p and top-p is 10 (min-p's max, 8 top-p digits, FINAL), top-p alone 9; a top-k over 128
on the full vocabulary adds 9 (8 digits on counts, TIES). Penalty windows over 64 tokens add a
memset and a count launch.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

import torch
from torch import Tensor

from .chain import final_logits, survivor_probs
from .codes import FINAL, MINP, NSLOT, PART_W, PEN, RADIX, SCAN, SELECT, STATS, TABLE, TEMP, TIES, TOPK, TOPP
from .config import SamplerConfig
from .draw import draw_survivors
from .exact import padded_counts
from .rng import _keys, _signed, uniforms

__all__ = ["sample_tokens", "sample_rows", "kernels_available", "kernel_device", "window_rows", "KMAX",
           "SCAN_MAX", "sampler_values", "sampler_shape", "PARAM_WORDS"]

KMAX = 128  # top-k at most this runs in registers after a per-chunk selection (the fast path)
SCAN_MAX = 64  # penalty windows up to this are scanned; longer ones go through a count table
MAX_ROWS = 16

_NAME = {"penalties": PEN, "temperature": TEMP, "min_p": MINP, "top_p": TOPP, "top_k": TOPK}


def kernels_available() -> bool:
    """True when Triton imports (CUDA tensors then take the kernels)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_device() -> tuple[torch.device, str]:
    """(device, backend) for running the kernels here, for the checks: CUDA when present, else the
    CPU through Triton's interpreter (slow; selected before Triton is first imported, else an error)."""
    if torch.cuda.is_available():
        return torch.device("cuda"), "auto"
    import os
    import sys

    if "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != "1" or not kernels_available():
        raise RuntimeError("the fused sampler needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1 before "
                           "triton is imported)")
    return torch.device("cpu"), "triton"


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


# ----------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class Plan:
    stages: tuple[int, ...]  # active stage codes in order
    k: int  # top-k (1 when greedy)
    greedy: bool
    mode: str  # "row" (V <= KMAX), "cand" (top-k <= KMAX cut), "full"
    split: int  # compact stages start here (row: 0; cand: after the top-k; full: len(stages))
    passes: tuple[tuple[int, int, int], ...]  # (kind, stage position, digit) full-vocabulary passes
    ties: tuple[int, ...]  # per position: index of its TIES pass (full-vocabulary top-k), else 0
    block: int  # B: tokens per chunk
    kp: int  # compact capacity (power of two)


def active_stages(cfg: SamplerConfig, vocab: int, window: int) -> tuple[tuple[int, ...], int]:
    """(codes of the stages that change anything, in order; k). Greedy: [penalties,] top-1."""
    pen = cfg.uses_penalties and "penalties" in cfg.order and window > 0
    if cfg.greedy:
        return ((PEN,) if pen else ()) + (TOPK,), 1
    on = {"top_k": 0 < cfg.top_k < vocab, "penalties": pen, "temperature": cfg.temperature != 1.0,
          "min_p": cfg.min_p > 0.0, "top_p": cfg.top_p < 1.0}
    return tuple(_NAME[s] for s in cfg.order if on[s]), cfg.top_k


def make_plan(cfg: SamplerConfig, vocab: int, window: int, block: int | None = None) -> Plan:
    stages, k = active_stages(cfg, vocab, window)
    if vocab <= KMAX:
        mode, split, kp = "row", 0, max(16, _pow2(vocab))
    elif TOPK in stages and k <= KMAX:
        mode, split, kp = "cand", stages.index(TOPK), max(16, _pow2(k))
    else:
        mode, split, kp = "full", len(stages), 16
    passes, ties = [], [0] * 5
    if mode != "row":
        for i, code in enumerate(stages[:split]):
            if code == MINP:
                passes.append((STATS, i, 0))
            if code in (TOPP, TOPK):
                passes += [(RADIX, i, d) for d in range(8)]
            if code == TOPK:
                ties[i] = len(passes)
                passes.append((TIES, i, 0))
        if mode == "full" and not (split and stages[split - 1] == TOPP):  # (else from top-p's digits)
            passes.append((STATS, split, 0))
    if block is None:  # chunks: <= 8192 candidates (cand), ~128 chunks (full)
        if mode == "cand" and k == 1 and not passes:  # >= 128 chunks: a top-1 is two reductions, a
            block = max(256, min(1024, _pow2(-(-vocab // 128))))  # chunk's time its window scan
        elif mode == "cand":  # (passes sum over chunks: their block stays what it was)
            block = max(1024, _pow2(-(-vocab * kp // 8192)))
        else:
            block = max(2048, _pow2(-(-vocab // 128)))
    assert block >= kp and block & (block - 1) == 0
    return Plan(stages, k, cfg.greedy, mode, split, tuple(passes), tuple(ties), block, kp)


PARAM_WORDS = 9  # sampler_values' length


def sampler_values(cfg: SamplerConfig) -> list[int]:
    """The values the kernels read from a device buffer, as int64 words: top-k, then repeat,
    frequency and presence penalties, temperature and min-p as float32 bit patterns (the rounding
    a float kernel argument gets), top-p as its float64 bits, the seed's two stream keys. A
    program captured once serves every seed and value of its shape (sampler_shape)."""
    f32 = torch.tensor([cfg.repeat_penalty, cfg.frequency_penalty, cfg.presence_penalty,
                        cfg.temperature if cfg.temperature > 0 else 1.0, cfg.min_p],
                       dtype=torch.float32).view(torch.int32).tolist()
    ka, kb = (_signed(x) for x in _keys(cfg.seed))
    return [1 if cfg.greedy else cfg.top_k, *f32, struct.unpack("<q", struct.pack("<d", cfg.top_p))[0], ka, kb]


def sampler_shape(cfg: SamplerConfig, vocab: int, history: int) -> tuple:
    """What shapes the kernels' launches for rows of `vocab` logits over a token buffer of
    `history` tokens (everything but sampler_values): the stages that are on, the plan's chunks,
    the penalty window. Two configurations with equal shapes differ only in the params buffer."""
    last_n = cfg.penalty_last_n
    window = history if last_n < 0 else min(last_n, history)
    plan = make_plan(cfg, vocab, window)
    pen = PEN in plan.stages
    return (dataclasses.replace(plan, k=min(plan.k, 2)), last_n if pen else None,
            pen and cfg.repeat_penalty != 1.0, pen and (cfg.frequency_penalty != 0.0 or cfg.presence_penalty != 0.0))


# ----------------------------------------------------------------------------- launches

def _scratch_rows(kp: int, n: int) -> int:
    """M: how many keys above a bound the top-k selection ranks pairwise (topk._select) in one
    step; more narrow the bound first. n: the keys it selects from."""
    return min(max(128, 2 * kp), n)


def _params_of(cfg: SamplerConfig, dev: torch.device) -> Tensor:
    """cfg's sampler_values on `dev`: a copy, or (inside a CUDA graph capture, where a copy from
    host memory cannot be captured) one fill a word, the values then constants of the graph."""
    values = sampler_values(cfg)
    if dev.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        return torch.tensor(values, dtype=torch.int64).to(dev)
    out = torch.empty(len(values), dtype=torch.int64, device=dev)
    for i, v in enumerate(values):
        out[i: i + 1].fill_(v)
    return out


def _launch(logits: Tensor, tok: Tensor, tok_row: int, pos: Tensor | None, u: Tensor | None,
            last_n: int, window: int, cfg: SamplerConfig, block: int | None, debug: bool,
            params: Tensor | None = None):
    # windows: tok_row > 0 or pos None means rows of their own in tok (sample_rows); pos then only
    # keys the uniforms (u None)
    from . import kernels as K
    from .passes import full_pass

    r, v = logits.shape
    dev = logits.device
    plan = make_plan(cfg, v, window, block)
    st = plan.stages + (0,) * (5 - len(plan.stages))
    pen_mode = 0
    if PEN in plan.stages:
        pen_mode = TABLE if window > SCAN_MAX else SCAN
    out = torch.empty(r, dtype=torch.int64, device=dev)
    fl = torch.full((r, v), float("-inf"), device=dev) if debug else out
    cnt = out
    end_from_pos = pos is not None and tok_row == 0
    if pen_mode == TABLE:
        cnt = torch.zeros(r, v, dtype=torch.int32, device=dev)
        blk = 1024
        K.count_table[(r, -(-window // blk))](tok, tok_row, pos if pos is not None else out, cnt, v, last_n,
                                               END_FROM_POS=end_from_pos, BLK=blk, enable_fp_fusion=False)
    if params is None:
        params = _params_of(cfg, dev)
    scal = dict(LAST_N=last_n, PRM=params)
    ws = window if pen_mode == SCAN else 1  # constexpr: only the scan needs it
    flags = dict(COUNT_MODE=pen_mode, WS=ws, END_FROM_POS=end_from_pos,
                 U_FROM_POS=u is None, HAS_REP=cfg.repeat_penalty != 1.0,
                 HAS_FP=cfg.frequency_penalty != 0.0 or cfg.presence_penalty != 0.0)
    codes = dict(S0=st[0], S1=st[1], S2=st[2], S3=st[3], S4=st[4])
    pos_t = pos if pos is not None else out
    u_t = u if u is not None else out
    b = plan.block
    nb = -(-v // b)
    if plan.mode != "row":
        n = len(plan.passes)
        # (kind, position, digit, partials slot, index of the pass it resolves or -1); the consumer
        # (SELECT / FINAL) writes no partials. return_logits where no STATS pass sees the final
        # values: one more pass after the draw writes them (the draw path stays the same).
        seq = [(k, a, d, i, i - 1) for i, (k, a, d) in enumerate(plan.passes)]
        seq.append((SELECT if plan.mode == "cand" else FINAL, plan.split, 0, n, n - 1))
        if debug and plan.mode == "full" and plan.passes[-1][0] != STATS:
            seq.append((STATS, plan.split, 0, n, n - 1))
        npass = n + 1
        nbp = _pow2(nb)
        state = torch.empty(r, NSLOT, dtype=torch.float64, device=dev) if n else out
        part = torch.empty(r, npass, nbp, PART_W, dtype=torch.float64, device=dev) if n else out
        ck = torch.empty(r, nb * plan.kp, dtype=torch.int32, device=dev) if plan.mode == "cand" else out
        ci = torch.empty_like(ck) if plan.mode == "cand" else out
        m_sel = _scratch_rows(plan.kp, b)
        sm = torch.empty(r, nb, m_sel, dtype=torch.int64, device=dev) if plan.mode == "cand" and plan.k > 1 else out
        ties = dict(TQ0=plan.ties[0], TQ1=plan.ties[1], TQ2=plan.ties[2], TQ3=plan.ties[3], TQ4=plan.ties[4])
        warps = min(16, max(4, b // 256))
        for kind, at, digit, me, q in seq:
            prev = plan.passes[q] if q >= 0 else (0, 0, 0)
            grid = (r,) if kind == FINAL else (r, nb)
            full_pass[grid](
                logits, logits.stride(0), tok, tok_row, pos_t, cnt, state, part, ck, ci, sm, u_t, out, fl,
                v, nb, npass, me, max(q, 0), digit, prev[2], **scal, **codes, **ties,
                KIND=kind, AT=at, AT_CODE=st[at] if at < 5 else 0, PREV_KIND=prev[0], PREV_AT=prev[1],
                PREV_CODE=st[prev[1]] if prev[0] and prev[1] < 5 else 0,
                NEED_C=PEN in plan.stages[:at], **flags, B=b, NBP=nbp, KP=plan.kp,
                M=m_sel if kind == SELECT else 16, TOP1=kind == SELECT and plan.k == 1,
                DEBUG=debug and kind == STATS and at == len(plan.stages),  # the final values
                num_warps=warps if kind != FINAL else min(warps, 8), enable_fp_fusion=False)
        if plan.mode == "full":
            return out, fl
    else:
        ck = ci = out
    first = plan.split + 1 if plan.mode == "cand" else 0
    nc = nb * plan.kp if plan.mode == "cand" else 0
    ncp = _pow2(nc) if plan.mode == "cand" else 16
    assert ncp < 1 << 21 and b < 1 << 21  # kernels._bound counts in 21-bit fields
    m_c = _scratch_rows(plan.kp, ncp) if plan.mode == "cand" else 16
    scr = torch.empty(r, 2, plan.kp, dtype=torch.int64, device=dev) if plan.mode == "cand" else out
    smc = torch.empty(r, m_c, dtype=torch.int64, device=dev) if plan.mode == "cand" and plan.k > 1 else out
    K.compact[(r,)](
        logits, logits.stride(0), tok, tok_row, pos_t, cnt, ck, ci, scr, smc, u_t, out, fl,
        v, nc, **scal, **codes, FIRST=first, FROM_CAND=plan.mode == "cand", GREEDY=plan.greedy,
        NEED_C=PEN in plan.stages[first:], **flags, DEBUG=debug, WSP=_pow2(ws), NCP=ncp, KP=plan.kp,
        M=m_c, TOP1=plan.mode == "cand" and plan.k == 1,
        num_warps=min(16, max(4, ncp // 512)), enable_fp_fusion=False)
    return out, fl


# ----------------------------------------------------------------------------- entry points

def window_rows(tok_buf: Tensor, pos: Tensor, last_n: int) -> Tensor:
    """Windows [R, W] int64 (-1 padding) of the histories tok_buf[:pos[r]]: their last last_n
    tokens (-1 = all, W = len(tok_buf); 0 = none, W = 0). Static shape, no host sync."""
    c = tok_buf.shape[0]
    w = c if last_n < 0 else min(last_n, c)
    j = torch.arange(w, device=tok_buf.device)
    idx = j[None, :] if last_n < 0 else pos[:, None] - w + j[None, :]
    ok = (idx >= 0) & (idx < pos[:, None])
    return torch.where(ok, tok_buf[idx.clamp(0, max(c - 1, 0))] if c else idx, -1)


def _torch_rows(logits: Tensor, windows: Tensor, u: Tensor, cfg: SamplerConfig, debug: bool):
    counts = None
    if cfg.uses_penalties and "penalties" in cfg.order and windows.shape[1] > 0:
        counts = padded_counts(windows, logits.shape[1], logits.dtype)
    ids = draw_survivors(*survivor_probs(logits, counts, cfg), u)
    return ids, (final_logits(logits, counts, cfg) if debug else None)


def _use_kernels(logits: Tensor, backend: str) -> bool:
    assert backend in ("auto", "triton", "torch"), backend
    if backend == "auto":
        return logits.is_cuda and kernels_available()
    return backend == "triton"


def _check(logits: Tensor) -> None:
    assert logits.dim() == 2 and logits.dtype == torch.float32, "logits must be [R, V] float32"
    assert logits.stride(1) == 1, "logits rows must be contiguous"


def sample_rows(logits: Tensor, windows: Tensor, u: Tensor | None, cfg: SamplerConfig, *, backend: str = "auto",
                block: int | None = None, return_logits: bool = False, pos: Tensor | None = None,
                params: Tensor | None = None):
    """Token ids [R] int64: row r = draw(chain(logits[r], window windows[r]), u[r]); u None: the
    uniforms of positions pos [R] int64, uniforms(cfg.seed, pos) (the kernels key them from params,
    cfg's sampler_values on the device as sample_tokens reads them: a captured program serves
    every seed). A draft tree's rows: windows of their own paths, uniforms of their positions.

    windows [R, W] int64: the penalty window of each row (entries < 0 are padding, anywhere);
    cfg.penalty_last_n only switches penalties on or off here (the caller cut the windows).
    u [R] float64 in [0, 1). Any number of rows (the checks push thousands). backend: "auto" =
    the kernels for CUDA tensors when Triton imports, else the torch chain; "triton" forces the
    kernels (CPU tensors need Triton's interpreter); "torch" the chain. block: tokens per chunk
    (a power of two >= the top-k capacity; tests use small ones). return_logits: also the final
    logits [R, V] (-inf where masked; greedy: the kept token's value) the draw used.
    """
    _check(logits)
    assert (u is None) != (pos is None), "u or pos"
    rows = logits.shape[:1]
    assert windows.dim() == 2 and windows.shape[0] == rows[0] and (u if u is not None else pos).shape == rows
    if not _use_kernels(logits, backend):
        uu = uniforms(cfg.seed, pos.to(logits.device)) if u is None else u.to(torch.float64)
        ids, fl = _torch_rows(logits, windows, uu, cfg, return_logits)
        return (ids, fl) if return_logits else ids
    win = windows.to(torch.int64).contiguous()
    w = win.shape[1]
    if w == 0:
        win = torch.full((rows[0], 1), -1, dtype=torch.int64, device=logits.device)
    uu = None if u is None else u.to(torch.float64).contiguous()
    # tok_row >= 1 keeps the windows per row when pos only keys the uniforms
    ids, fl = _launch(logits, win, max(w, 1), None if pos is None else pos.contiguous(), uu, -1, w, cfg, block,
                      return_logits, params)
    return (ids, fl) if return_logits else ids


def sample_tokens(logits: Tensor, tok_buf: Tensor, pos: Tensor, cfg: SamplerConfig, *, backend: str = "auto",
                  block: int | None = None, return_logits: bool = False, params: Tensor | None = None):
    """logits [R, V] float32 (1 <= R <= 16), tok_buf [C] int64 (the sequence: committed tokens, then
    any drafts), pos [R] int64 on the device: row r draws the token at absolute position pos[r]
    from logits[r] with history tok_buf[:pos[r]] (penalty window = its last cfg.penalty_last_n
    tokens; -1 = all, 0 = none) and uniform uniforms(cfg.seed, pos[r]). Returns ids [R] int64 on
    the device. Equals draw(sample_dist(logits[r:r+1], tok_buf[:pos[r]], cfg), uniforms(cfg.seed,
    pos[r:r+1])) row by row (temp 0: the penalised argmax, lowest id on ties). No host sync, no
    shape that depends on pos values: capturable in a CUDA graph. CUDA: the Triton kernels; CPU
    (or no Triton): the torch chain. params: cfg's sampler_values in an int64 device buffer that
    the kernels read (a captured program's, rewritten for each call's values; None: made here).
    (backend / block / return_logits: as sample_rows, for tests.)
    """
    _check(logits)
    r = logits.shape[0]
    assert 1 <= r <= MAX_ROWS, f"1..{MAX_ROWS} rows, got {r}"
    assert tok_buf.dim() == 1 and pos.shape == (r,) and pos.dtype == torch.int64
    if not _use_kernels(logits, backend):
        win = window_rows(tok_buf.to(logits.device), pos.to(logits.device), cfg.penalty_last_n)
        ids, fl = _torch_rows(logits, win, uniforms(cfg.seed, pos.to(logits.device)), cfg, return_logits)
        return (ids, fl) if return_logits else ids
    c = tok_buf.shape[0]
    last_n = cfg.penalty_last_n
    window = c if last_n < 0 else min(last_n, c)
    tok = tok_buf.to(torch.int64).contiguous()
    if c == 0:
        tok = torch.full((1,), -1, dtype=torch.int64, device=logits.device)
    ids, fl = _launch(logits, tok, 0, pos.contiguous(), None, last_n, window, cfg, block, return_logits, params)
    return (ids, fl) if return_logits else ids
