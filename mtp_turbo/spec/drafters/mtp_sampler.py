"""The MTP drafter's chain on the device: each draft picked from the head's logits under the verifier's sampler.

Owns: `DraftSampler`, what a SamplerConfig makes of the drafts (set): the raw argmax, the argmax
after the sampler's penalty stage over the verifier's penalty window, or at temp > 0 with coupling
the verifier's own draw from the head's distribution; the penalty window in the form a round
stages it (draft 0's window as head counts [N] plus the index leaving it at each chain step, or a
bounded window as its head indices [W] for the fused sampler), the full-id -> head-index map those
use, the key a captured chain bakes these values into; the chain of k steps from draft 0's row
(chain), each draft picked that way and fed to the next step, into kept draft slots. Ignores: the
cells, the staged vectors and repairs (mtp_stage.py), the cache, the rounds and their CUDA graphs
(mtp.py), the step's kernels (models/mtp_step.py), the sampler's own math (sampling/).

Why its own module: what the drafts are depends on the sampler alone (set_sampler), never on the
cells or the rounds around the chain; the drafter reads this state through the public names here
and passes in what it owns (the step, its GreedyPick and RoundGlue, which tests swap).

Under the exact rule a draft is accepted with probability p_i(draft), p_i the main model's
distribution after the whole sampler chain, so the best draft is that distribution's argmax.
Temperature / top-p / min-p keep the argmax; the penalties move it. So the head's logits get the
same penalty stage (sampling/chain.py) over the window the verifier will use at that row: the
committed tokens plus the drafts before it in the chain. Drafts are proposals only: exactness does
not depend on this, acceptance does.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ...models.mtp_head import MTPHead
from ...sampling.chain import apply_penalties, probs_from_logits
from ...sampling.draw import draw
from ...sampling.fused import PARAM_WORDS, sample_tokens, sampler_shape, sampler_values
from ...sampling.rng import uniforms

# penalty windows of up to this many tokens are staged as the window's head indices and the drafts
# picked by the fused sampler (one launch a draft); longer or whole-history windows (-1) as counts
SEQ_WINDOW_MAX = 4096


class DraftSampler:
    """The pick rule a SamplerConfig gives the drafts of one MTPDrafter, and the chain that picks
    them (see the module docstring)."""

    def __init__(self, head: MTPHead, max_k: int):
        """max_k: the longest chain with kept draft slots, here and in the window sequence (the
        drafter's GRAPH_K: captured graphs read these buffers)."""
        self.head, self.max_k = head, max_k
        dev = head.device
        self.pen = None  # SamplerConfig whose penalty stage runs, or None (raw argmax)
        self.draw = None  # SamplerConfig whose whole chain + draw picks the drafts (coupling), or None
        self._vmap: np.ndarray | None = None  # full token id -> head index (-1: not a head row)
        self.vmap_dev: torch.Tensor | None = None  # head_index() on the device (windows read there)
        n_rows = head.n_rows
        self.pen_dev = torch.zeros(n_rows, dtype=torch.float32, device=dev)  # window counts [N]
        self.pen_host = torch.zeros(n_rows, dtype=torch.float32, pin_memory=dev.type == "cuda")
        # the window-sequence path (set): per window length W, host [W] / device [W + max_k]
        # head-index sequences (window, then the chain's drafts), the draft positions [max_k] and
        # the window's offsets from n [W] (-W .. -1, for a window read on the device)
        self._seq_bufs: dict[int, tuple[torch.Tensor, ...]] = {}
        self.seq: tuple[torch.Tensor, ...] | None = None
        self.seq_cfg = None  # the verifier's penalty stage at temperature 0: the drafts' pick
        self.seq_backend = "auto"  # sample_tokens' ("torch" after a failure of the fused kernels)
        # seq_cfg's values where the fused sampler reads them: a captured chain serves every value
        self.params = torch.zeros(PARAM_WORDS, dtype=torch.int64, device=dev)
        self._slots = torch.zeros(max_k, dtype=torch.int64, device=dev)  # a captured chain's draft slots
        self._zero = torch.zeros(1, dtype=torch.int64, device=dev)  # a chained row's state index (its only row)

    def set(self, sampler, coupling: bool = False) -> None:
        """The SamplerConfig the verifier uses (None = raw argmax drafts). Its penalty stage moves
        the argmax (without penalties the drafts are exactly the unpenalised ones). coupling (temp
        > 0 only): draft the token the verifier's own draw would pick if the head's distribution
        were the main model's: the whole chain on the head's logits, inverse CDF in token-id order
        with the verifier's uniform for that position (sampling/draw.py, rng.py). The output does
        not depend on the drafts (every emitted token is the verifier's draw), so this stays exact;
        acceptance becomes the chance the two draws agree, which can pass max p (the ceiling of
        any fixed draft)."""
        on = (sampler is not None and sampler.uses_penalties and "penalties" in sampler.order)
        self.pen = sampler if on else None
        self.draw = sampler if (coupling and sampler is not None and not sampler.greedy) else None
        # penalised argmax drafts over a bounded window: the window's head indices go up (not a
        # [N] count array filled and uploaded a round) and one fused sampler launch picks each
        # draft, its window the sequence window ++ earlier drafts (what the verifier's row sees)
        self.seq = self.seq_cfg = None
        if self.pen is not None and self.draw is None and 0 < self.pen.penalty_last_n <= SEQ_WINDOW_MAX:
            w, k = self.pen.penalty_last_n, self.max_k
            if w not in self._seq_bufs:  # kept per W: captured graphs read these buffers
                dev = self.head.device
                self._seq_bufs[w] = (torch.full((w,), -1, dtype=torch.int64, pin_memory=dev.type == "cuda"),
                                     torch.full((w + k,), -1, dtype=torch.int64, device=dev),
                                     torch.arange(w, w + k, dtype=torch.int64, device=dev),
                                     torch.arange(-w, 0, dtype=torch.int64, device=dev))
            self.seq = self._seq_bufs[w]
            self.seq_cfg = dataclasses.replace(self.pen, temperature=0.0)
            self.params.copy_(torch.tensor(sampler_values(self.seq_cfg), dtype=torch.int64))
        ids = self.head.vocab_ids
        if self.draw is not None and ids is not None and ids.numel() > 1:
            # the head's rows must run in token-id order for its CDF to line up with the verifier's
            assert bool((ids[1:] > ids[:-1]).all()), "head vocab ids must be ascending for coupled drafts"

    @property
    def counts(self) -> bool:
        """Whether a round stages the penalty window as counts (penalties over a whole-history or
        long window)."""
        return self.pen is not None and self.seq is None

    def key(self):
        """What of the sampler a captured chain bakes in (part of its graph key): on the window
        sequence path the fused sampler's shape alone (its values are read from params); the
        counts and coupled paths' torch ops take the values themselves."""
        p, d = self.pen, self.draw
        if self.seq is not None:
            return ("seq", sampler_shape(self.seq_cfg, self.head.n_rows, self.seq[1].shape[0]))
        pen = None if p is None else (p.repeat_penalty, p.presence_penalty, p.frequency_penalty)
        return pen if d is None else (pen, d)

    def head_index(self) -> np.ndarray:
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

    def device_head_index(self) -> torch.Tensor:
        """head_index() on the device (made on first use)."""
        if self.vmap_dev is None:
            self.vmap_dev = torch.from_numpy(self.head_index()).to(self.head.device)
        return self.vmap_dev

    def pen_window(self, tokens: list[int], k: int, counts: np.ndarray) -> np.ndarray:
        """Penalty window of draft 0 (the last penalty_last_n committed tokens; -1 = all) as head
        counts, written into counts float32 [N]; returns for each chain step j the head index of
        the committed token that leaves the window when draft j-1 enters it, int64 [k] (-1 = none;
        entry 0 is always -1). Tokens without a head row are left out: they cannot change the
        head's argmax."""
        last_n, T = self.pen.penalty_last_n, len(tokens)
        vmap = self.head_index()
        lo = 0 if last_n < 0 else max(0, T - last_n)
        win = vmap[np.asarray(tokens[lo:], dtype=np.int64)]
        counts.fill(0.0)
        np.add.at(counts, win[win >= 0], 1.0)
        leave = np.full(k, -1, dtype=np.int64)
        if last_n > 0:
            for j in range(1, k):
                t = T - last_n + j - 1  # history T + j tokens, window [T + j - last_n, T + j)
                if t >= 0:
                    leave[j] = vmap[tokens[t]]
        return leave

    def seq_window(self, tokens: list[int], out: np.ndarray) -> None:
        """The verifier's penalty window of draft 0 (the last W committed tokens) as head indices
        (-1: no head row, or before the sequence's start) into out int64 [W]."""
        w = out.shape[0]
        win = self.head_index()[np.asarray(tokens[max(0, len(tokens) - w):], dtype=np.int64)]
        out[: w - win.shape[0]] = -1
        out[w - win.shape[0]:] = win

    def pick(self, lg: torch.Tensor, c: torch.Tensor | None, i_prev: torch.Tensor | None,
             leave: torch.Tensor | None, cpos: torch.Tensor, greedy):
        """Head logits lg [1, N] -> (head index [1] of the draft, counts [N] used). c: counts of
        the previous step (None = penalties off); i_prev [1]: the previous draft's head index
        (enters the window), leave [1]: the index leaving it (-1 = none); cpos [1]: the chain
        step's query position (the draft is the token at cpos + 2: coupled draws); greedy: the
        drafter's GreedyPick (the raw argmax). Out of place, no sync ([1]-shaped ids: indexing
        with a 0-dim tensor would call .item(), a sync that breaks capture)."""
        if c is not None and i_prev is not None:
            c = c.index_add(0, i_prev, torch.ones(1, dtype=c.dtype, device=c.device))
            c = c.index_add(0, leave.clamp(min=0), -(leave >= 0).to(c.dtype))
        if self.draw is not None:
            probs = probs_from_logits(lg.float(), None if c is None else c[None], self.draw)
            return draw(probs, uniforms(self.draw.seed, cpos + 2)), c
        if c is None:
            return greedy(lg), None
        return apply_penalties(lg, c[None], self.pen).argmax(-1), c

    def chain(self, st, x: torch.Tensor, q: torch.Tensor, cpos: torch.Tensor, runs: torch.Tensor,
              cnt: torch.Tensor | None, leave: torch.Tensor | None, k: int, max_reads: int, greedy, glue,
              want_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """k drafts from draft 0's block input x [1, D] and query q [1, H, Dh] through the step
        st (models/mtp_step.py), step j at position cpos[j] (p0 + j) reading runs[j] [6] (at most
        max_reads cells); cnt / leave: the staged penalty counts (None: off or the window
        sequence); greedy / glue: the drafter's GreedyPick and RoundGlue. -> (draft ids int64
        [k]: the slots here (k <= max_k), valid until the next chain; fp32 logits [k, N] with
        want_logits, else None)."""
        head, seq, ids = self.head, self.seq, self.head.vocab_ids
        drafts = self._slots[:k] if k <= self.max_k else torch.empty(k, dtype=torch.int64, device=head.device)
        i = None
        logits = []
        for j in range(k):
            if j > 0:  # chain cell p0 + j: a draft's K/V, not committed
                q = st.write_qkv(x, cpos[j: j + 1])
            h = st.attend(x, q, runs[j], max_reads)
            lg = st.logits(h, j)
            if want_logits:
                logits.append(lg[0])
            slot = drafts[j: j + 1]  # the draft's token id (the next step's input)
            if seq is not None:  # the penalised argmax; the draft then enters the next one's window
                w = seq[0].shape[0]
                i = sample_tokens(lg, seq[1], seq[2][j: j + 1], self.seq_cfg, backend=self.seq_backend,
                                  params=self.params)
                glue.draft_store(i, ids, slot, seq[1][w + j: w + j + 1])
            elif cnt is None and self.draw is None:  # the raw argmax, mapped and stored by its kernel
                greedy(lg, out=slot, ids=ids)
            else:  # staged counts, or coupled draws (draft j: the token at sequence position p0 + 2 + j)
                i, cnt = self.pick(lg, cnt, i if j > 0 else None, None if leave is None else leave[j: j + 1],
                                   cpos[j: j + 1], greedy)
                glue.draft_store(i, ids, slot)
            if j + 1 < k:
                x = st.inputs(slot, h, self._zero)
        return drafts, (torch.stack(logits) if want_logits else None)
