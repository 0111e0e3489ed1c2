"""The MTP head's device work of a drafting round, as four operations over the drafter's caches:
torch (the head's math, mtp_head.py: every device) or the fused Triton kernels of the main
model's decode step (CUDA; the CPU through Triton's interpreter in tests).

Owns: `TorchMTPStep` and `FusedMTPStep`, which compute the same four things:
- inputs(toks [n], hsrc [*, D], hidx [n]) -> x [n, D]: the block inputs of rows pairing the main
  model's state hsrc[hidx[m]] with the embedding of token toks[m];
- write_qkv(x [n, D], pos [n]) -> q [n, H, Dh]: the rows' K/V written into the drafter's cache at
  cells pos (RoPE at those positions, from the tables given at construction), their queries; x is
  what the last inputs() returned (the fused step norms it in the fc GEMV's tail);
- attend(x [1, D], q [1, H, Dh], runs [6] int64, M) -> h [1, D]: one query over the cells of up
  to three [lo, hi) runs (at most M cells; cells_from_runs), then the rest of the block: the
  chained state;
- logits(h [1, D], j) -> fp32 [1, N]: final norm and the head's rows, for chain step j (a fused
  step keeps each step's logits in its own buffer row).
No host syncs and fixed launch shapes: both can be captured in a CUDA graph. The fused step runs
its block through the main model's layer plan (layer_plan.py). With dense (bf16) matrices that
plan's kernels run with their tails (FusedTiles.tails):
mtp_inputs, fc + attention norm, qkv + q/k norm + RoPE + K/V write, attn_cells, o + residual
norm, gate|up + gating, down + residual + final norm: 7 launches before the head's. Packed
matrices (Q8_0 ...) take their own GEMV with the norms, the RoPE and the gating as kernels of
their own (12). The torch step launches ~130 small kernels.
Ignores: which cells a query reads and what the drafts are (spec/drafters/mtp.py), the head's
weights and file (mtp_head.py, mtp_load.py).
"""

from __future__ import annotations

import torch

import dataclasses

from ..errors import ConfigError
from . import fused_kernels as fk
from . import mtp_kernels as mk
from .arch import GELU_TANH
from .layer_plan import MP, FusedTiles, LayerPlan, pow2
from .mtp_head import MTPHead

MAX_ROWS = MP  # catch-up rows one fused launch takes (the GEMV's row tile)
MAX_CHAIN = 8  # drafts a chain makes at most (SpecConfig: draft_tokens <= 7)
# read cells an attention program takes: the sink + window's 321 in 6 programs. 64 with 4 warps
# took 7.7 us a launch on an H200 against 11.6 for 32 (bench/RESULTS.md session 21)
CELL_CHUNK = 64


def cells_from_runs(runs: torch.Tensor, M: int) -> torch.Tensor:
    """A query's read-cell list from its runs int64 [6] = [lo, hi) x 3 (ascending, each possibly
    empty), padded with -1 to M entries -> int64 [M] on runs' device (no host sync): what
    attn_cells computes per entry."""
    m = torch.arange(M, device=runs.device)
    n = runs[1::2] - runs[0::2]  # [3] run lengths
    e0, e1 = n[0], n[0] + n[1]
    return torch.where(m < e0, runs[0] + m, torch.where(m < e1, runs[2] + m - e0,
                                                         torch.where(m < e1 + n[2], runs[4] + m - e1, -1)))


class TorchMTPStep:
    """rope: the head's (cos, sin) tables [>= capacity, Dh]."""

    def __init__(self, head: MTPHead, k_cache: torch.Tensor, v_cache: torch.Tensor, rope):
        self.head, self.k_cache, self.v_cache, self.rope = head, k_cache, v_cache, rope

    def inputs(self, toks, hsrc, hidx):
        h = self.head
        return h.input_rows(h.embed[toks] * h.embed_scale, hsrc[hidx])

    def write_qkv(self, x, pos):
        q, k, v = self.head.qkv(x, self.rope[0][pos], self.rope[1][pos])
        self.k_cache.index_copy_(0, pos, k.to(self.k_cache.dtype))
        self.v_cache.index_copy_(0, pos, v.to(self.v_cache.dtype))
        return q

    def attend(self, x, q, runs, M):
        cells = cells_from_runs(runs, M)
        valid, idx = cells >= 0, cells.clamp(min=0)
        return self.head.step(x, q, self.k_cache[idx], self.v_cache[idx], valid[None])

    def logits(self, h, j):
        return self.head.logits(h)


class FusedMTPStep:
    """The four operations on fused_kernels.py's kernels, over static buffers of up to MAX_ROWS
    rows. Dense matrices (torch tensors in the activation dtype) go through the fused GEMV
    (`linear`, gating in its epilogue); packed ones (PackedLinear) through their own GEMV, with
    `gated_act` after gate|up. fc_embedding | fc_hidden is one GEMV over both normed inputs."""

    def __init__(self, head: MTPHead, k_cache: torch.Tensor, v_cache: torch.Tensor, rope,
                 tiles: FusedTiles = FusedTiles()):
        c, ops = head.cfg, head.ops
        self.head, self.k_cache, self.v_cache, self.tiles = head, k_cache, v_cache, tiles
        self.cos, self.sin = (t.contiguous() for t in rope)
        self.dt, dev = head.dtype, head.device
        D, qd, kvd = c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim

        def dense_cat(names, dim=0):
            return torch.cat([ops[n] for n in names], dim).to(self.dt).contiguous()

        # the matrices: the packed op where the drafter has one, else the dense values fused
        self.fc = ops["fc"] if "fc" in ops and not isinstance(ops["fc"], torch.Tensor) else dense_cat(("fc_e", "fc_h"), 1)
        if "qkv" in ops:
            self.qkv = ops["qkv"]
        elif all(isinstance(ops[n], torch.Tensor) for n in ("q", "k", "v")):
            self.qkv = dense_cat(("q", "k", "v"))
        else:
            self.qkv = (ops["q"], ops["k"], ops["v"])  # mixed formats: three GEMVs
        if "gate_up" in ops:
            self.gate_up = ops["gate_up"]
        else:
            self.gate_up = dense_cat(("gate", "up"))
        if not isinstance(self.gate_up, torch.Tensor) and c.block.activation != GELU_TANH:
            raise ConfigError("a packed MLP in the MTP head is gated by the GeGLU kernel (Gemma-3 heads): use "
                              "--draft-quant bf16 for a head on a SwiGLU model")
        self.o, self.down = ops["o"], ops["down"]
        self.head_op = ops.get("head")  # PackedLinear of the LM head rows, or None: dense rows
        self.head_rows = head.head_rows.to(self.dt).contiguous() if self.head_op is None else None
        self.norms = {k: ops[k].float().contiguous() for k in ops if k.endswith("norm")}
        # dense matrices ride the main layers' tail kernels: the norm after fc, o and down, the q/k
        # norm + RoPE + K/V write after qkv, computed by each GEMV's last program (fewer launches)
        self.tails = tiles.tails and all(isinstance(w, torch.Tensor)
                                         for w in (self.fc, self.qkv, self.o, self.gate_up, self.down))
        self.plan = LayerPlan(c.block, dataclasses.replace(tiles, tails=self.tails), self.dt, dev)

        def buf(*shape, dtype=self.dt):
            return torch.zeros(shape, dtype=dtype, device=dev)

        R = MAX_ROWS
        self.xcat, self.x = buf(R, 2 * D), buf(R, D)
        self.xn, self.qkv_out, self.q = buf(R, D), buf(R, qd + 2 * kvd), buf(R, c.n_heads, c.head_dim)
        self.att, self.o_out, self.h1 = buf(1, qd), buf(1, D), buf(1, D)
        self.gu, self.dn, self.state = buf(1, c.ffn), buf(1, D), buf(1, D)
        self.lg = buf(MAX_CHAIN, head.n_rows, dtype=torch.float32)
        self.scale = float(head.embed_scale.float())
        self.cell_scratch: dict[int, tuple] = {}  # attend's partials per chunk count (allocated before capture)
        # the tails' arrival counters (zero before and after each launch): fc, qkv (a head each), o, down
        self.cnt = torch.zeros(4, c.n_heads + 2 * c.n_kv_heads, dtype=torch.int32, device=dev)

    # ---- pieces ----------------------------------------------------------------------------------
    def _linear(self, x, w, y, gated=False, head=False):
        """y[:M] = x[:M] @ w.T (gated: gelu(gate) * up). y is the output buffer; a packed op's
        result is a new fp32 tensor (returned instead, gated: gated into y)."""
        M = x.shape[0]
        if not isinstance(w, torch.Tensor):
            out = w(x, out_dtype=torch.float32)
            if not gated:
                return out
            F = out.shape[1] // 2
            fk.gated_act[(-(-F // 1024), M)](out, y, F, BN=1024, num_warps=4)
            return y
        return self.plan.gemv(x, w, y, gated=gated, head=head)

    # ---- the four operations -------------------------------------------------------------------
    def inputs(self, toks, hsrc, hidx):
        n, D = toks.shape[0], self.head.cfg.hidden
        assert n <= MAX_ROWS and hsrc.is_contiguous()
        nm = self.norms
        mk.mtp_inputs[(n,)](toks, self.head.embed, self.scale, hsrc, hidx, nm["enorm"], nm["hnorm"], self.xcat,
                            D, self.head.cfg.eps, KP=pow2(D), num_warps=self.tiles.warps)
        if self.tails:  # x, and its attention norm into xn for write_qkv
            self.plan.gemv_residual(self.xcat[:n], self.fc, self.x, self.cnt[0], None, None, self.norms["attn_norm"],
                                    None, self.xn[:n])
            return self.x[:n]
        return self._linear(self.xcat[:n], self.fc, self.x)[:n]

    def write_qkv(self, x, pos):
        n = x.shape[0]
        nm = self.norms
        rope = (pos, nm.get("q_norm"), nm.get("k_norm"), self.cos, self.sin, self.q, self.k_cache, self.v_cache)
        if self.tails:
            assert x.data_ptr() == self.x.data_ptr(), "write_qkv takes the rows inputs() returned (normed in xn)"
            self.plan.qkv_rope(self.xn[:n], self.qkv, None, self.qkv_out, self.cnt[1], *rope)
            return self.q[:n]
        self.plan.norm(x, nm["attn_norm"], self.xn[:n])
        if isinstance(self.qkv, tuple):
            qkv = torch.cat([w(self.xn[:n], out_dtype=torch.float32) for w in self.qkv], dim=1)
        else:
            qkv = self._linear(self.xn[:n], self.qkv, self.qkv_out)[:n]
        self.plan.rope_write(qkv, *rope)
        return self.q[:n]

    def attend(self, x, q, runs, M):
        c, nm = self.head.cfg, self.norms
        S = -(-M // CELL_CHUNK)
        if S not in self.cell_scratch:  # per read-cell count (static in a graph): partials + counters
            dev, qr = self.att.device, 16
            self.cell_scratch[S] = (torch.zeros(c.n_kv_heads * S, qr, c.head_dim, dtype=torch.float32, device=dev),
                                     torch.zeros(c.n_kv_heads * S, qr, dtype=torch.float32, device=dev),
                                     torch.zeros(c.n_kv_heads * S, qr, dtype=torch.float32, device=dev),
                                     torch.zeros(c.n_kv_heads, dtype=torch.int32, device=dev))
        op, mx, ls, cnt = self.cell_scratch[S]
        mk.attn_cells[(S, c.n_kv_heads)](q, self.k_cache, self.v_cache, runs, self.att, op, mx, ls, cnt, M,
                                         c.query_scale, H=c.n_heads, HKV=c.n_kv_heads, DH=c.head_dim, QR=16,
                                         BS=CELL_CHUNK, SP=pow2(S), PREC=self.plan.prec, num_warps=4)
        if self.tails:
            self.plan.gemv_residual(self.att, self.o, self.o_out, self.cnt[2], x, nm.get("post_attn_norm"),
                                    nm["ffn_norm"], self.h1, self.xn[:1])
            gu = self.plan.mlp(self.xn[:1], self.gate_up, self.gu)
            self.plan.gemv_residual(gu, self.down, self.dn, self.cnt[3], self.h1, nm.get("post_ffn_norm"),
                                    nm["out_norm"], self.state, self.xn[:1])
            return self.state
        o = self._linear(self.att, self.o, self.o_out)
        self.plan.norm(x, nm["ffn_norm"], self.xn[:1], delta=o, wpost=nm.get("post_attn_norm"), hout=self.h1)
        gu = self._linear(self.xn[:1], self.gate_up, self.gu, gated=True)
        dn = self._linear(gu, self.down, self.dn)
        self.plan.norm(self.h1, nm["out_norm"], self.xn[:1], delta=dn, wpost=nm.get("post_ffn_norm"), hout=self.state)
        return self.state

    def logits(self, h, j):
        assert h is self.state, "logits follow attend (its final norm is fused into attend's last kernel)"
        if self.head_op is not None:
            return self.head_op(self.xn[:1], out_dtype=torch.float32)
        return self._linear(self.xn[:1], self.head_rows, self.lg[j: j + 1], head=True)
