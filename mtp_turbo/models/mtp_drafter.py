"""The MTP drafter: the head's own KV cache and the Drafter (begin/propose/observe) that the
speculative round drives.

Owns: the drafter's static position-indexed KV cache (cell c = the row built from (h_c, token
c+1), RoPE at position c when K is written), catch-up / chain drafting over the cells DraftCells
allows (sink + window + current chain) on the variable-shape path, the engine hooks (on_prefill,
truncate, reset), and how a draft is picked from the head's logits (set_sampler): the argmax after
the sampler's penalty stage (the verifier's penalty window), or at temp > 0 with coupling the
verifier's own draw (whole chain, same uniform u(seed, position)) from the head's distribution. Every name the head's modules define still imports
from here: the head's config, math and reference are mtp_head.py's, the static / CUDA-graph path
mtp_static.py's, loading a head file with the --draft-quant policy mtp_load.py's (resolved
lazily), writing one train/export.py's.
Ignores: the cell bookkeeping rules (cache/cells.py), verification (spec/), training (train/).
"""

from __future__ import annotations

import numpy as np
import torch

from ..cache.cells import DraftCells, DraftCellsConfig
from ..sampling.chain import apply_penalties, probs_from_logits
from ..sampling.draw import draw
from ..sampling.rng import uniforms
from .gemma3 import LAYER_TENSORS, apply_rope, rms_norm, rope_tables  # noqa: F401  (imported from here before)
from .mtp_head import (  # noqa: F401  (re-exported: this module's public names before the split)
    _REQUANT_FMT, ARCH, DEFAULT_HEAD, DRAFT_QUANT_KEYS, DRAFT_QUANTS, GEMV_BACKENDS, HEAD_QUANTS, HIDDEN_SOURCES,
    NEXTN_TENSORS, MTPConfig, MTPHead, attend, block_out, input_rows, linear, qkv, read_set, reference_drafts,
    tensor_names,
)
from .mtp_static import GRAPH_K, GRAPH_ROWS, StaticPropose  # noqa: F401


class MTPDrafter(StaticPropose):
    """Drafter interface + engine hooks (on_prefill, truncate, reset). See cache/cells.py for the
    cell convention; the round with T committed tokens drafts from query p0 = T-2."""

    name = "mtp"

    def __init__(self, head: MTPHead, capacity: int, sink: int = 64, window: int = 256, main=None, engine=None,
                 static: bool | None = None, graphs: bool = True):
        """static: run propose's catch-up + chain with static shapes (read cells padded to
        sink + window + 1 and masked, inputs staged in one int64 vector; default: on CUDA);
        graphs: replay that work from a CUDA graph per (catch-up rows, k) (CUDA only)."""
        c = head.cfg
        self.head, self.main = head, main  # main: for final_norm when hidden_source is post_norm
        self.engine = engine  # only read for its `tokens` in on_prefill
        self.capacity = capacity + 16  # chain cells may run k-1 past the committed rows
        self.cells = DraftCells(DraftCellsConfig(sink=sink, window=window))
        dev, dt = head.device, head.dtype
        self.k_cache = torch.zeros(self.capacity, c.n_kv_heads, c.head_dim, device=dev, dtype=dt)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.hbuf = torch.zeros(self.capacity, c.hidden, device=dev, dtype=dt)  # main hidden by position
        self.h_lo = self.h_hi = 0  # positions [h_lo, h_hi) of hbuf hold current hidden rows
        self.tokens: list[int] = []
        self._prefill_next: int | None = None
        self.last_logits: torch.Tensor | None = None  # [k, N] of the last propose (tests)
        self._init_static(dev, static, graphs)  # static path (mtp_static.py)
        # sampler penalties (set_sampler): drafts are the argmax of the PENALISED head logits
        self._pen = None  # SamplerConfig whose penalty stage runs, or None (raw argmax, as without one)
        self._draw = None  # SamplerConfig whose whole chain + draw picks the drafts (coupling), or None
        self._vmap: np.ndarray | None = None  # full token id -> head index (-1: not a head row)
        n_rows = head.head_rows.shape[0]
        self._pen_dev = torch.zeros(n_rows, dtype=torch.float32, device=dev)  # window counts [N]
        self._pen_host = torch.zeros(n_rows, dtype=torch.float32, pin_memory=dev.type == "cuda")

    # ---- engine hooks --------------------------------------------------------------------------
    def reset(self) -> None:
        self.cells.reset()
        self.h_lo = self.h_hi = 0
        self.tokens = []
        self._prefill_next = None

    def truncate(self, n: int) -> None:
        """Keep the first n committed tokens (rollback): cells >= n-1 and hidden rows >= n are stale."""
        self.cells.truncate(max(n - 1, 0))
        self.h_hi = max(min(self.h_hi, n), 0)
        self.h_lo = min(self.h_lo, self.h_hi)
        del self.tokens[n:]

    def _store_hidden(self, c0: int, h: torch.Tensor) -> None:
        h = h.to(self.hbuf.dtype)
        if self.head.cfg.hidden_source == "post_norm":
            h = self.main.final_norm(h)
        n = h.shape[0]
        self.hbuf[c0: c0 + n].copy_(h)  # copy: the caller's buffers are overwritten by the next forward
        if self.h_lo <= c0 <= self.h_hi:
            self.h_hi = c0 + n
        else:
            self.h_lo, self.h_hi = c0, c0 + n

    def _encode(self, c0: int, n: int, toks: list[int]):
        """Write committed K/V for cells [c0, c0+n) from hbuf and tokens c0+1..c0+n, all rows in
        one pass (each matrix read once per <= 4 rows). Returns (x [n, D], q [n, H, Dh])."""
        head, W, cfg = self.head, self.head.ops, self.head.cfg
        pos = torch.arange(c0, c0 + n, device=head.device)
        e = head.embed_tokens(torch.tensor(toks[c0 + 1: c0 + n + 1], device=head.device))
        x = input_rows(W, cfg, e, self.hbuf[c0: c0 + n])
        q, k, v = qkv(W, cfg, x, *head.rope_at(pos))
        self.k_cache[c0: c0 + n] = k
        self.v_cache[c0: c0 + n] = v
        self.cells.wrote(c0, n)
        return x, q

    @torch.inference_mode()
    def on_prefill(self, c0: int, c1: int, hidden: torch.Tensor, tokens: list[int] | None = None,
                   n_rows: int | None = None) -> None:
        """Main rows [c0, c1) were just encoded with hidden [c1-c0, D] (a static buffer: copied).
        tokens: the committed sequence, the whole prompt (default: the engine's `tokens`, which the
        engine sets before prefilling); n_rows: main rows the whole prefill encodes (default
        len(tokens) - 1), for the sink + window plan."""
        if tokens is None:
            assert self.engine is not None, "on_prefill needs tokens when the drafter has no engine"
            tokens = self.engine.tokens
        n_rows = len(tokens) - 1 if n_rows is None else n_rows
        assert hidden.shape[0] == c1 - c0 and c1 <= n_rows < len(tokens), (c0, c1, n_rows, len(tokens))
        if self._prefill_next != c0:  # a new prefill: everything depending on token c0 or later is stale
            self.truncate(c0)
            self.tokens = list(tokens)
            # row c0-1 pairs the kept h_{c0-1} with the (new) token c0: encode it now, else the
            # run and the sink would have a hole there
            if c0 >= 1 and self.h_lo <= c0 - 1 < self.h_hi and self.cells.cell1 == c0 - 1:
                self._encode(c0 - 1, 1, self.tokens)
        self.tokens = list(tokens)
        self._store_hidden(c0, hidden)
        self._prefill_next = c1
        for a, n in self.cells.prefill_plan(n_rows, c0, c1 - c0):
            if n > 0:
                self._encode(a, n, self.tokens)

    # ---- sampler penalties ---------------------------------------------------------------------
    # Under the exact rule a draft is accepted with probability p_i(draft), p_i the main model's
    # distribution after the whole sampler chain, so the best draft is that distribution's argmax.
    # Temperature / top-p / min-p keep the argmax; the penalties move it. So the head's logits get
    # the same penalty stage (sampling/chain.py) over the window the verifier will use at that row:
    # the committed tokens plus the drafts before it in the chain. Drafts are proposals only:
    # exactness does not depend on this, acceptance does.
    def set_sampler(self, sampler, coupling: bool = False) -> None:
        """The SamplerConfig the verifier uses (None = raw argmax drafts). Its penalty stage moves
        the argmax (without penalties the drafts are exactly the unpenalised ones). coupling (temp
        > 0 only): draft the token the verifier's own draw would pick if the head's distribution
        were the main model's: the whole chain on the head's logits, inverse CDF in token-id order
        with the verifier's uniform for that position (sampling/draw.py, rng.py). The output does
        not depend on the drafts (every emitted token is the verifier's draw), so this stays exact;
        acceptance becomes the chance the two draws agree, which can pass max p (the ceiling of
        any fixed draft)."""
        on = (sampler is not None and sampler.uses_penalties and "penalties" in sampler.order)
        self._pen = sampler if on else None
        self._draw = sampler if (coupling and sampler is not None and not sampler.greedy) else None
        ids = self.head.vocab_ids
        if self._draw is not None and ids is not None and ids.numel() > 1:
            # the head's rows must run in token-id order for its CDF to line up with the verifier's
            assert bool((ids[1:] > ids[:-1]).all()), "head vocab ids must be ascending for coupled drafts"

    def _pen_key(self):
        """The sampler values a captured chain bakes in (part of its graph key)."""
        p, d = self._pen, self._draw
        pen = None if p is None else (p.repeat_penalty, p.presence_penalty, p.frequency_penalty)
        return pen if d is None else (pen, d)

    def _head_index(self) -> np.ndarray:
        """full token id -> head row index (-1 where the head has no row for it)."""
        if self._vmap is None:
            v = self.head.embed.shape[0]
            ids = self.head.vocab_ids
            if ids is None:
                self._vmap = np.arange(v, dtype=np.int64)
            else:
                self._vmap = np.full(v, -1, dtype=np.int64)
                self._vmap[ids.cpu().numpy()] = np.arange(ids.shape[0], dtype=np.int64)
        return self._vmap

    def _pen_window(self, tokens: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Penalty window of draft 0 (the last penalty_last_n committed tokens; -1 = all) as head
        counts float32 [N], and for each chain step j the head index of the committed token that
        leaves the window when draft j-1 enters it, int64 [k] (-1 = none; entry 0 is always -1).
        Tokens without a head row are left out: they cannot change the head's argmax."""
        last_n, T = self._pen.penalty_last_n, len(tokens)
        vmap = self._head_index()
        lo = 0 if last_n < 0 else max(0, T - last_n)
        win = vmap[np.asarray(tokens[lo:], dtype=np.int64)]
        counts = np.bincount(win[win >= 0], minlength=self._pen_dev.shape[0]).astype(np.float32)
        leave = np.full(k, -1, dtype=np.int64)
        if last_n > 0:
            for j in range(1, k):
                t = T - last_n + j - 1  # history T + j tokens, window [T + j - last_n, T + j)
                if t >= 0:
                    leave[j] = vmap[tokens[t]]
        return counts, leave

    def _next_draft(self, lg: torch.Tensor, h: torch.Tensor, cnt, i, j: int, k: int, leave, upos=None):
        """Draft j of a chain from head logits lg [1, Nv] and the block's output h [1, D]: the
        pick (penalised argmax, or the coupled draw at sequence position upos [1] int64) as a [1]
        full-vocabulary id d, the head index i and counts cnt it leaves,
        and the next chain step's input row (None after the last draft). Shared by the variable and
        the static (captured) path; [1]-shaped ids because indexing with a 0-dim tensor would call
        .item() (a sync, which breaks capture)."""
        head = self.head
        i, cnt = self._penalised_pick(lg, cnt, i if j > 0 else None, None if leave is None else leave[j: j + 1],
                                      upos)
        d = i if head.vocab_ids is None else head.vocab_ids[i]
        x = input_rows(head.ops, head.cfg, head.embed[d] * head.embed_scale, h) if j + 1 < k else None
        return d, i, cnt, x

    def _penalised_pick(self, lg: torch.Tensor, c: torch.Tensor | None, i_prev: torch.Tensor | None,
                        leave: torch.Tensor | None, upos: torch.Tensor | None = None):
        """Head logits lg [1, N] -> (head index [1] of the draft, counts [N] used). c: counts of
        the previous step (None = penalties off); i_prev [1]: the previous draft's head index
        (enters the window), leave [1]: the index leaving it (-1 = none); upos [1]: the draft's
        sequence position (coupled draws). Out of place, no sync."""
        if c is not None and i_prev is not None:
            c = c.index_add(0, i_prev, torch.ones(1, dtype=c.dtype, device=c.device))
            c = c.index_add(0, leave.clamp(min=0), -(leave >= 0).to(c.dtype))
        if self._draw is not None:
            probs = probs_from_logits(lg.float(), None if c is None else c[None], self._draw)
            return draw(probs, uniforms(self._draw.seed, upos)), c
        if c is None:
            return lg.argmax(-1), None
        return apply_penalties(lg, c[None], self._pen).argmax(-1), c

    # ---- Drafter interface ---------------------------------------------------------------------
    def begin(self, tokens: list[int]) -> None:
        m = 0
        lim = min(len(tokens), len(self.tokens))
        while m < lim and tokens[m] == self.tokens[m]:
            m += 1
        self.truncate(m)
        self.tokens = list(tokens)
        self._prefill_next = None

    def observe(self, tokens: list[int], accepted: int, hidden: torch.Tensor | None) -> None:
        self._prefill_next = None
        n_new = len(tokens)
        pos = n_new - accepted - 2  # = n - 1, n = tokens before the round
        self.truncate(min(len(self.tokens), pos + 1))  # cells of the rejected part of the chain
        self.tokens = list(tokens)
        if hidden is not None and pos >= 0:
            assert hidden.shape[0] == accepted + 1, (hidden.shape, accepted)
            self._store_hidden(pos, hidden)

    def _repair(self, p0: int) -> None:
        """Re-encode cells query p0 reads but that hold nothing (a rollback into prompt rows the
        prefill plan skipped): sink cells below the window, then the window from its first cell.
        Uses the kept hidden rows; without them the drafter just sees less context."""
        cells, sink = self.cells, self.cells.config.sink
        lo = max(p0 - self.cells.config.window, 0)
        force = False
        s_need = min(sink, lo)
        if cells.sink_valid < s_need and self.h_lo <= cells.sink_valid:
            self._encode(cells.sink_valid, s_need - cells.sink_valid, self.tokens)
            force = True
        need = max(lo, self.h_lo)
        if need < p0 and (force or not (cells.cell0 <= need <= cells.cell1)):
            self.cells.truncate(need)
            self._encode(need, p0 - need, self.tokens)

    @torch.inference_mode()
    def propose(self, tokens: list[int], k: int) -> list[int]:
        self._prefill_next = None
        if tokens[: len(self.tokens)] != self.tokens[: len(tokens)]:
            self.begin(tokens)
        self.tokens = list(tokens)
        T = len(tokens)
        p0 = T - 2
        if k <= 0 or p0 < 0 or self.h_hi <= p0:
            return []
        self._repair(p0)
        c = max(min(self.cells.cell1, p0), self.h_lo)
        self.cells.truncate(c)
        if self.static:
            return self._propose_static(tokens, c, p0, k)
        # catch-up rows c..p0-1 and draft 0's row p0 (committed too: h_p0 and token p0+1 are) in
        # one batch: each matrix is read once for all of them
        xs, qs = self._encode(c, p0 - c + 1, tokens)
        x, q = xs[-1:], qs[-1:]
        head, W, cfg = self.head, self.head.ops, self.head.cfg
        dev = head.device
        drafts, chain, logits = [], [], []
        cnt = leave = i = None
        if self._pen is not None:
            c_np, l_np = self._pen_window(tokens, k)
            cnt, leave = torch.from_numpy(c_np).to(dev), torch.from_numpy(l_np).to(dev)
        for j in range(k):
            p = p0 + j
            if j > 0:  # chain cell: K/V of a draft, not committed
                q, kk, vv = qkv(W, cfg, x, *head.rope_at(torch.tensor([p], device=dev)))
                self.k_cache[p] = kk[0]
                self.v_cache[p] = vv[0]
                chain.append(p)
            idx = torch.from_numpy(self.cells.read_cells_with_chain(p, chain)).to(dev)
            h = block_out(W, cfg, x, attend(cfg, q, self.k_cache[idx], self.v_cache[idx]))
            lg = head.logits(h)
            logits.append(lg[0])
            upos = None if self._draw is None else torch.tensor([T + j], device=dev)
            d, i, cnt, x = self._next_draft(lg, h, cnt, i, j, k, leave, upos)
            drafts.append(d)
        self.last_logits = torch.stack(logits)
        return [int(t) for t in torch.cat(drafts).tolist()]  # the one host sync per draft chain


# The loaders live in mtp_load.py; these names keep importing from here (resolved lazily: mtp_load
# imports this module).
_MOVED = ('_policy_fmt', 'policy_bytes', 'apply_draft_quant', 'uses_packed', 'pack_ops', '_main_head', 'load_head', 'load_mtp_drafter')


def __getattr__(name: str):
    if name in _MOVED:
        from . import mtp_load

        return getattr(mtp_load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
