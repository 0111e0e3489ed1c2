"""The MTP drafter: a one-block head on the main model's hidden states, its own KV cache, and the
Drafter (begin/propose/observe) that the speculative round drives.

Owns: the head's math (`x = fc_embedding(norm_e(embed(t+1))) + fc_hidden(norm_h(h_t))`, one
Gemma-3 block with a sliding-base RoPE, final norm, the main model's tied LM head or a gathered
subset of its rows), the drafter's static position-indexed KV cache (cell c = the row built from
(h_c, token c+1), RoPE at position c when K is written), catch-up / chain drafting over the cells
DraftCells allows (sink + window + current chain), drafting the argmax of the head's logits after
the sampler's penalty stage (set_sampler; the verifier's penalty window), a from-scratch reference
used by the tests. Loading a head file with the --draft-quant policy is mtp_load.py's job (its
names still import from here), writing one train/export.py's.
Ignores: the cell bookkeeping rules (cache/cells.py), verification (spec/), training (train/).

Tensor names in the GGUF (llama.cpp's nextn convention where it fits; L = the main model's
n_layer): blk.L.nextn.{enorm,hnorm,fc_embedding,fc_hidden,shared_head_norm}.weight and the block's
blk.L.{attn_norm,attn_q,...}.weight; metadata mtp.base_model_sha256, mtp.hidden_source,
mtp.vocab_ids (absent = full head), mtp.recipe (JSON).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..cache.cells import DraftCells, DraftCellsConfig
from ..sampling.chain import _apply_penalties
from .gemma3 import LAYER_TENSORS, apply_rope, rms_norm, rope_tables

ARCH = "gemma3-mtp"
HIDDEN_SOURCES = ("pre_norm", "post_norm")
DEFAULT_HEAD = Path(__file__).resolve().parent.parent / "data" / "gemma3-270m-mtp.gguf"
# head-specific tensors: internal name -> GGUF name suffix after "blk.{L}."
NEXTN_TENSORS = {"enorm": "nextn.enorm", "hnorm": "nextn.hnorm", "fc_e": "nextn.fc_embedding",
                 "fc_h": "nextn.fc_hidden", "out_norm": "nextn.shared_head_norm"}
# --draft-quant: the matrices that take the chosen format (DESIGN.md "Low-bit draft weights");
# K/V stay Q8_0, norms stay float, and the LM head rows are the main model's embedding, untouched
DRAFT_QUANTS = ("q8_0", "q5_0", "q4_0", "bf16")
DRAFT_QUANT_KEYS = ("q", "o", "fc_e", "fc_h", "gate", "up", "down")
# --draft-quant name -> quant/formats.py format used for requantization (None = keep stored values)
_REQUANT_FMT = {"q8_0": None, "bf16": None, "q5_0": "q5_0", "q4_0": "q4_0_lloyd"}
HEAD_QUANTS = ("main", "bf16", "q8_0", "q5_0", "q4_0")  # LM head rows: the main model's format, or told
GEMV_BACKENDS = ("auto", "dense", "torch", "triton")  # see uses_packed
# static path: captured CUDA graphs exist for catch-up batches of <= GRAPH_ROWS rows (a round
# catches up accepted + 1 rows) and chains of <= GRAPH_K drafts; bigger work runs the same code eagerly
GRAPH_ROWS, GRAPH_K = 8, 8


@dataclass(frozen=True)
class MTPConfig:
    hidden: int = 640
    n_heads: int = 4
    n_kv_heads: int = 1
    head_dim: int = 256
    ffn: int = 2048
    eps: float = 1e-6
    rope_base: float = 10_000.0
    n_layer: int = 18  # the main model's layer count: the head's tensors live at blk.{n_layer}
    hidden_source: str = "pre_norm"  # which main hidden the head reads: before or after the final norm

    def __post_init__(self) -> None:
        assert self.hidden_source in HIDDEN_SOURCES, self.hidden_source
        assert self.n_heads % self.n_kv_heads == 0

    @property
    def query_scale(self) -> float:
        return self.head_dim ** -0.5

    @classmethod
    def for_main(cls, mc, hidden_source: str = "pre_norm") -> "MTPConfig":
        return cls(hidden=mc.hidden, n_heads=mc.n_heads, n_kv_heads=mc.n_kv_heads, head_dim=mc.head_dim,
                   ffn=mc.ffn, eps=mc.eps, rope_base=mc.rope_local, n_layer=mc.n_layers, hidden_source=hidden_source)


def tensor_names(cfg: MTPConfig) -> dict[str, str]:
    """internal weight name -> GGUF tensor name."""
    L = cfg.n_layer
    names = {k: f"blk.{L}.{v}.weight" for k, v in NEXTN_TENSORS.items()}
    names.update({k: f"blk.{L}.{v}.weight" for k, v in LAYER_TENSORS.items()})
    return names


# ---- the math, shared by the cached drafter, the reference and training ------------------------
# W maps names to dense [out, in] tensors (training, the reference) or, for the cached drafter on
# the packed path, to PackedLinear layers; "qkv" / "gate_up" (fused rows) replace q, k, v / gate, up.
def linear(w, x: torch.Tensor) -> torch.Tensor:
    """x [.., in] @ w.T: F.linear for a dense weight, the layer's GEMV for a PackedLinear."""
    return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def input_rows(W: dict, cfg: MTPConfig, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """e: scaled embedding of token t+1 [.., D]; h: the state for position t [.., D] -> x [.., D]."""
    return linear(W["fc_e"], rms_norm(e, W["enorm"], cfg.eps)) + linear(W["fc_h"], rms_norm(h, W["hnorm"], cfg.eps))


def qkv(W: dict, cfg: MTPConfig, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """x [T, D] block input at positions with RoPE tables cos/sin [T, Dh] -> q [T,H,Dh], k, v [T,Hkv,Dh]."""
    T = x.shape[0]
    a = rms_norm(x, W["attn_norm"], cfg.eps)
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    if "qkv" in W:  # one GEMV over the fused rows
        q, k, v = linear(W["qkv"], a).split([qd, kvd, kvd], dim=-1)
    else:
        q, k, v = linear(W["q"], a), linear(W["k"], a), linear(W["v"], a)
    q = rms_norm(q.reshape(T, cfg.n_heads, cfg.head_dim), W["q_norm"], cfg.eps)
    k = rms_norm(k.reshape(T, cfg.n_kv_heads, cfg.head_dim), W["k_norm"], cfg.eps)
    v = v.reshape(T, cfg.n_kv_heads, cfg.head_dim)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attend(cfg: MTPConfig, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None):
    """q [T,H,Dh], K/V [S,Hkv,Dh], mask [T,S] bool (None = all) -> [T, H*Dh]."""
    rep = cfg.n_heads // cfg.n_kv_heads
    qh = q.transpose(0, 1)
    Kh = K.transpose(0, 1).repeat_interleave(rep, dim=0)
    Vh = V.transpose(0, 1).repeat_interleave(rep, dim=0)
    sc = torch.matmul(qh.float(), Kh.float().transpose(1, 2)) * cfg.query_scale  # [H, T, S]
    if mask is not None:
        sc = sc.masked_fill(~mask, float("-inf"))
    o = torch.matmul(torch.softmax(sc, dim=-1), Vh.float()).to(q.dtype)
    return o.transpose(0, 1).reshape(q.shape[0], cfg.n_heads * cfg.head_dim)


def block_out(W: dict, cfg: MTPConfig, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Residual stream after the block (the chained `h`), given the attention output before o-proj."""
    h = x + rms_norm(linear(W["o"], attn), W["post_attn_norm"], cfg.eps)
    m = rms_norm(h, W["ffn_norm"], cfg.eps)
    if "gate_up" in W:
        g, u = linear(W["gate_up"], m).split([cfg.ffn, cfg.ffn], dim=-1)
    else:
        g, u = linear(W["gate"], m), linear(W["up"], m)
    m = linear(W["down"], F.gelu(g, approximate="tanh") * u)
    return h + rms_norm(m, W["post_ffn_norm"], cfg.eps)


class MTPHead:
    """Weights of the head plus its LM head rows. `head_rows` [N, D] are main embedding rows (all
    of them, or the gathered `vocab_ids`); argmax ids are mapped back through vocab_ids.
    W: the dense values (the reference, training, tests). ops: what the cached drafter computes
    with: W itself, or (packed path, see pack_ops) norms plus PackedLinear layers, with the LM head
    as ops["head"]. Both hold the same values, so they agree to fp32 rounding."""

    def __init__(self, cfg: MTPConfig, weights: dict[str, torch.Tensor], embed: torch.Tensor,
                 vocab_ids: torch.Tensor | None, device, dtype, ops: dict | None = None,
                 head_rows: torch.Tensor | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.W = weights
        self.ops = weights if ops is None else ops
        self.embed = embed  # main embedding [V, D] (unscaled: the tied LM head)
        self.embed_scale = torch.tensor(math.sqrt(cfg.hidden), dtype=dtype).to(self.device)
        self.vocab_ids = None if vocab_ids is None else vocab_ids.to(self.device, torch.int64)
        if head_rows is None:
            head_rows = embed if vocab_ids is None else embed[self.vocab_ids].contiguous()
        self.head_rows = head_rows  # [N, D] values of the LM head (dense path and reference)
        self.rope = None  # (cos, sin) tables, grown on demand

    def rope_at(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        need = int(pos.max().item()) + 1
        if self.rope is None or self.rope[0].shape[0] < need:
            n = max(need, 4096 if self.rope is None else 2 * self.rope[0].shape[0])
            self.rope = rope_tables(self.cfg.rope_base, self.cfg.head_dim, n, self.device)
        return self.rope[0][pos], self.rope[1][pos]

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed[tokens] * self.embed_scale

    def logits(self, h: torch.Tensor, dense: bool = False) -> torch.Tensor:
        """Block output state [T, D] -> fp32 logits over the head's rows [T, N] (dense: with
        head_rows even when ops has a packed head, as the reference does)."""
        hn = rms_norm(h, self.W["out_norm"], self.cfg.eps)
        op = None if dense else self.ops.get("head")
        return F.linear(hn, self.head_rows).float() if op is None else op(hn, out_dtype=torch.float32)

    def argmax_ids(self, h: torch.Tensor) -> torch.Tensor:
        """[T, D] -> token ids [T] (int64) of the head's argmax."""
        i = self.logits(h).argmax(-1)
        return i if self.vocab_ids is None else self.vocab_ids[i]


def read_set(p: int, committed_hi: int, chain: list[int], sink: int, window: int) -> list[int]:
    """The rule DraftCells implements, stated plainly for the reference: committed cells
    [0, committed_hi) that are < sink or in [p - window, p], plus chain cells in [p - window, p]."""
    lo = p - window
    com = [c for c in range(min(committed_hi, p + 1)) if c < sink or c >= lo]
    return com + [c for c in chain if lo <= c <= p]


def reference_drafts(head: MTPHead, tokens: list[int], hidden: torch.Tensor, k: int, sink: int, window: int,
                     forced: list[int] | None = None):
    """From-scratch drafts for the committed `tokens` (T of them): hidden [T-1, D] = the main
    model's states (already in the head's hidden_source) of positions 0..T-2. Every committed cell
    c <= p0 = T-2 is recomputed from (h_c, token c+1); the chain is run with full recomputation.
    forced: chain input tokens to use instead of the drafts (teacher forcing, as training does).
    Returns (draft ids, fp32 logits [k, N])."""
    T = len(tokens)
    p0 = T - 2
    assert p0 >= 0 and hidden.shape[0] >= p0 + 1
    cfg, W = head.cfg, head.W
    dev = head.device
    pos = torch.arange(p0 + 1, device=dev)
    e = head.embed_tokens(torch.tensor(tokens[1: p0 + 2], device=dev))
    x = input_rows(W, cfg, e, hidden[: p0 + 1].to(dev, head.dtype))
    cos, sin = head.rope_at(pos)
    _, Kc, Vc = qkv(W, cfg, x, cos, sin)
    K, V, X = [Kc[i] for i in range(p0 + 1)], [Vc[i] for i in range(p0 + 1)], x
    drafts, logits = [], []
    state_x, chain = X[p0: p0 + 1], []
    for j in range(k):
        p = p0 + j
        cos, sin = head.rope_at(torch.tensor([p], device=dev))
        q, kk, vv = qkv(W, cfg, state_x, cos, sin)
        if j > 0:  # chain cell: its K/V exist only in this chain
            K.append(kk[0])
            V.append(vv[0])
            chain.append(p)
        cells = read_set(p, p0 + 1, chain, sink, window)
        idx = [c if c <= p0 else p0 + 1 + chain.index(c) for c in cells]
        o = attend(cfg, q, torch.stack([K[i] for i in idx]), torch.stack([V[i] for i in idx]))
        h = block_out(W, cfg, state_x, o)
        lg = head.logits(h, dense=True)
        d = int(lg.argmax(-1).item())
        d = d if head.vocab_ids is None else int(head.vocab_ids[d].item())
        drafts.append(d)
        logits.append(lg[0])
        nxt = d if forced is None or j >= len(forced) else forced[j]
        state_x = input_rows(W, cfg, head.embed_tokens(torch.tensor([nxt], device=dev)), h)
    return drafts, torch.stack(logits) if logits else torch.zeros(0)


class MTPDrafter:
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
        # static path (see _propose_static): on CUDA by default; the CPU keeps the variable-shape path
        self.static = dev.type == "cuda" if static is None else bool(static)
        self.use_graphs = bool(graphs) and self.static and dev.type == "cuda"
        self.max_reads = self.cells.config.max_reads  # M: the padded read-cell count of one query
        # + GRAPH_K: per chain step, the head index of the token leaving the penalty window (penalties on)
        self._stage_len = 2 * GRAPH_ROWS + GRAPH_K * self.max_reads + GRAPH_K
        self._stage_dev = torch.zeros(self._stage_len, dtype=torch.int64, device=dev)  # graphs read these
        self._stage_host = torch.zeros(self._stage_len, dtype=torch.int64,
                                       pin_memory=dev.type == "cuda")  # one non_blocking upload a round
        self._graphs: dict[tuple, tuple] = {}  # (n, k, penalty key) -> (graph, drafts [k], logits [k, N])
        # sampler penalties (set_sampler): drafts are the argmax of the PENALISED head logits
        self._pen = None  # SamplerConfig whose penalty stage runs, or None (raw argmax, as without one)
        self._vmap: np.ndarray | None = None  # full token id -> head index (-1: not a head row)
        n_rows = head.head_rows.shape[0]
        self._pen_dev = torch.zeros(n_rows, dtype=torch.float32, device=dev)  # window counts [N]
        self._pen_host = torch.zeros(n_rows, dtype=torch.float32, pin_memory=dev.type == "cuda")
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # the head's tables, >= capacity rows
        self.last_drafts: torch.Tensor | None = None  # int64 [k] on the device (static path)

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
    def set_sampler(self, sampler) -> None:
        """The SamplerConfig the verifier uses (None = raw argmax drafts). Only its penalty stage
        matters here; without penalties the drafts are exactly the unpenalised ones."""
        on = (sampler is not None and sampler.uses_penalties and "penalties" in sampler.order)
        self._pen = sampler if on else None

    def _pen_key(self):
        p = self._pen
        return None if p is None else (p.repeat_penalty, p.presence_penalty, p.frequency_penalty)

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

    def _next_draft(self, lg: torch.Tensor, h: torch.Tensor, cnt, i, j: int, k: int, leave):
        """Draft j of a chain from head logits lg [1, Nv] and the block's output h [1, D]: the
        (penalised) argmax as a [1] full-vocabulary id d, the head index i and counts cnt it leaves,
        and the next chain step's input row (None after the last draft). Shared by the variable and
        the static (captured) path; [1]-shaped ids because indexing with a 0-dim tensor would call
        .item() (a sync, which breaks capture)."""
        head = self.head
        i, cnt = self._penalised_pick(lg, cnt, i if j > 0 else None, None if leave is None else leave[j: j + 1])
        d = i if head.vocab_ids is None else head.vocab_ids[i]
        x = input_rows(head.ops, head.cfg, head.embed[d] * head.embed_scale, h) if j + 1 < k else None
        return d, i, cnt, x

    def _penalised_pick(self, lg: torch.Tensor, c: torch.Tensor | None, i_prev: torch.Tensor | None,
                        leave: torch.Tensor | None):
        """Head logits lg [1, N] -> (head index [1] of the draft, counts [N] used). c: counts of
        the previous step (None = penalties off); i_prev [1]: the previous draft's head index
        (enters the window), leave [1]: the index leaving it (-1 = none). Out of place, no sync."""
        if c is None:
            return lg.argmax(-1), None
        if i_prev is not None:
            c = c.index_add(0, i_prev, torch.ones(1, dtype=c.dtype, device=c.device))
            c = c.index_add(0, leave.clamp(min=0), -(leave >= 0).to(c.dtype))
        return _apply_penalties(lg, c[None], self._pen).argmax(-1), c

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
            d, i, cnt, x = self._next_draft(lg, h, cnt, i, j, k, leave)
            drafts.append(d)
        self.last_logits = torch.stack(logits)
        return [int(t) for t in torch.cat(drafts).tolist()]  # the one host sync per draft chain

    # ---- static path (CUDA graphs) -------------------------------------------------------------
    # The same math as above with shapes that depend only on (n, k): catch-up rows [c, p0] (n of
    # them, draft 0's row last) and k chain steps. Inputs live in one int64 vector, staged on the
    # host and uploaded with one copy: positions c..p0 [n] | tokens c+1..p0+1 [n] | for each draft
    # step j its read cells padded with -1 to M = sink + window + 1 [k, M] | with sampler penalties
    # only: for each step j the head index leaving the penalty window [k] (-1 none), next to draft
    # 0's window counts [N] uploaded to _pen_dev (drafts update a copy on the device). The read cells follow
    # from the cell bookkeeping alone (never from the drafts), so the host knows them up front;
    # drafts are chosen and embedded on the device, and the k ids come back in one sync at the end.
    # Attention over M masked cells sums in another order than over the exact cells, so logits
    # differ from the variable-shape path by fp32 rounding; graph replay and the eager run of the
    # static path are the same kernels (equal results), so a capture failure costs only speed.
    def _stage(self, tokens: list[int], c: int, p0: int, k: int) -> torch.Tensor:
        """Mark the catch-up rows written and return the round's input vector (staged, on the device)."""
        n, M = p0 - c + 1, self.max_reads
        self.cells.wrote(c, n)
        pen = self._pen is not None
        L = 2 * n + k * M + (k if pen else 0)
        fits = n <= GRAPH_ROWS and k <= GRAPH_K
        host = self._stage_host[:L] if fits else torch.empty(L, dtype=torch.int64)
        a = host.numpy()
        a[:n] = np.arange(c, p0 + 1)
        a[n: 2 * n] = tokens[c + 1: p0 + 2]
        idx = a[2 * n: 2 * n + k * M].reshape(k, M)
        idx.fill(-1)
        if pen:  # window counts of draft 0 -> _pen_dev (pinned, reused after the round's sync)
            counts, a[2 * n + k * M:] = self._pen_window(tokens, k)
            self._pen_host.numpy()[:] = counts
            self._pen_dev.copy_(self._pen_host, non_blocking=True)
        for j in range(k):
            r = self.cells.read_cells_with_chain(p0 + j, range(p0 + 1, p0 + j + 1))
            assert r.size <= M, (r.size, M)
            idx[j, : r.size] = r
        if not fits:
            return host.to(self.head.device)
        dev = self._stage_dev[:L]
        dev.copy_(host, non_blocking=True)  # pinned: the host buffer is reused only after the round's sync
        return dev

    def _chain(self, staged: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The round's device work from its staged inputs -> (draft ids int64 [k], fp32 logits [k, N]).
        No host syncs and no shape that depends on positions: capturable."""
        head, W, cfg = self.head, self.head.ops, self.head.cfg
        cos_t, sin_t = self._rope
        pos, toks = staged[:n], staged[n: 2 * n]
        km = k * self.max_reads
        raw = staged[2 * n: 2 * n + km].view(k, self.max_reads)
        # penalties on: window counts [N] (read only: warm-up runs and replays must all start from it)
        # and the head index leaving the window at each chain step [k]
        cnt = None if self._pen is None else self._pen_dev
        leave = None if self._pen is None else staged[2 * n + km:]
        i = None
        valid, idx = raw >= 0, raw.clamp(min=0)
        x = input_rows(W, cfg, head.embed[toks] * head.embed_scale, self.hbuf[pos])
        q, kk, vv = qkv(W, cfg, x, cos_t[pos], sin_t[pos])
        self.k_cache.index_copy_(0, pos, kk.to(self.k_cache.dtype))
        self.v_cache.index_copy_(0, pos, vv.to(self.v_cache.dtype))
        x, q = x[-1:], q[-1:]
        drafts, logits = [], []
        for j in range(k):
            if j > 0:  # chain cell p0 + j
                pj = pos[-1:] + j
                q, kk, vv = qkv(W, cfg, x, cos_t[pj], sin_t[pj])
                self.k_cache.index_copy_(0, pj, kk.to(self.k_cache.dtype))
                self.v_cache.index_copy_(0, pj, vv.to(self.v_cache.dtype))
            o = attend(cfg, q, self.k_cache[idx[j]], self.v_cache[idx[j]], valid[j: j + 1])
            h = block_out(W, cfg, x, o)
            lg = head.logits(h)
            logits.append(lg[0])
            d, i, cnt, x = self._next_draft(lg, h, cnt, i, j, k, leave)
            drafts.append(d)
        return torch.cat(drafts), torch.stack(logits)

    def _propose_static(self, tokens: list[int], c: int, p0: int, k: int) -> list[int]:
        if self._rope is None:  # grow the head's tables to every position once (same values)
            self.head.rope_at(torch.tensor([self.capacity - 1], device=self.head.device))
            self._rope = self.head.rope
        n = p0 - c + 1
        staged = self._stage(tokens, c, p0, k)
        out = None
        if self.use_graphs and n <= GRAPH_ROWS and k <= GRAPH_K:
            g = self._graphs.get((n, k, self._pen_key())) or self._capture(staged, n, k)
            if g is not None:
                g[0].replay()
                out = g[1:]
        if out is None:
            out = self._chain(staged, n, k)
        self.last_drafts, self.last_logits = out
        return [int(t) for t in out[0].tolist()]  # the one host sync per round

    def _capture(self, staged: torch.Tensor, n: int, k: int):
        """Warm up on a side stream and capture the (n, k) work; None (and no more graphs) on
        failure. The warm-up runs are this round's work done early: they write the same K/V."""
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._chain(staged, n, k)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                drafts, logits = self._chain(staged, n, k)
        except Exception as e:  # a capture failure costs speed, never the answer
            print(f"mtp-turbo: drafter CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); "
                  "drafting eagerly", file=sys.stderr)
            self.use_graphs = False
            return None
        key = (n, k, self._pen_key())  # the penalty values are constants of the captured work
        self._graphs[key] = (graph, drafts, logits)
        return self._graphs[key]


# The loaders live in mtp_load.py; these names keep importing from here (resolved lazily: mtp_load
# imports this module).
_MOVED = ('_policy_fmt', 'policy_bytes', 'apply_draft_quant', 'uses_packed', 'pack_ops', '_main_head', 'load_head', 'load_mtp_drafter')


def __getattr__(name: str):
    if name in _MOVED:
        from . import mtp_load

        return getattr(mtp_load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
