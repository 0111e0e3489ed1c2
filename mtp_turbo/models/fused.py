"""The fused few-row forward: decode/verify steps and prefill chunks of the main model as a fixed
sequence of Triton kernels, for every family (arch.py).

Owns: the main model's launch sequence over the layer plan (layer_plan.py): per layer the qkv GEMV
with q/k norm + RoPE + K/V write, attention over key chunks (attn_partial) and their merge
(attn_combine), the o GEMV with the residual and the next norm, the gated gate|up GEMV, the down
GEMV with the residual and the next norm (6 launches a layer with tails, 8 without), then the LM
head; its scratch buffers. On sm_90+ the kernels go out with programmatic dependent launch
(FusedTiles.pdl): each is resident, its first weights loaded, while the one before it runs. The
LM head is the int8 tensor-core GEMV (quant/kernels/frag8_gemv.py) on the file's Q8_0 bytes where
the model keeps them (Decoder.head_q8: CUDA) and the GPU runs it (Hopper), else the fused GEMV on
the dense head. Prefill chunks of up to prefill_rows rows run the same kernels over row blocks (a
grid dimension) without tails and without the LM head. Ignores: graph capture (step.py), cache
lengths (cache/kv.py), the torch forward (decoder.py: the CPU path and the reference).

Why: the compiled torch step runs ~14 kernels per layer (cuBLAS GEMVs, separate norms, a masked
softmax over gathered cells); at small model sizes a decode step is bound by kernel count, not
bytes. Every launch here has a fixed grid and reads positions from a device tensor, so a CUDA
graph of it serves every position. The kernels are batch-invariant (fused_kernels.py): a verify
of k+1 rows yields bit-identical logits to k+1 one-row steps.

Runs wherever Triton runs: CUDA, or the CPU under TRITON_INTERPRET=1 (how CI checks it).
"""

from __future__ import annotations

import dataclasses

import torch

from ..quant import kernels as qk
from ..quant.frag_matrix import FragMatrix
from ..quant.gemv import TileConfig, device_capability, runs_on
from . import fused_kernels as fk
from .decoder import Decoder
from .embed import scaled_embedding
from .layer_plan import MP, NORM_ROWS, FusedTiles, LayerPlan

__all__ = ["MAX_ROWS", "MAX_TREE_ROWS", "MP", "NORM_ROWS", "FusedTiles", "FusedDecoder", "available"]

MAX_ROWS = 8  # verify rows (k+1)
MAX_TREE_ROWS = 16  # a draft tree's rows (spec/tree_shape.MAX_NODES): past MAX_ROWS on the prefill chunks' plan
QR = 32  # attention query rows a program computes: QR // (heads / kv_heads) rows of a KV group
# prefill chunks: the same kernels over row blocks (a grid dimension), no LM head. 128 rows: 117k
# tok/s a chunk against 76k for 64 on an H200 (bench/RESULTS.md); the attention scratch is 16
# blocks of chunk partials (67 MB at 4096 cells of context for Gemma-3-270M, 0.5 GB at 32768)
PREFILL_ROWS = 128
# The Q8_0 head's one tile, at every row count (never per row count, never split over K: a row's
# logits must not depend on the rows beside it): 46.0 / 46.5 / 47.0 / 47.7 us at 1-4 rows on the
# 262144 x 640 head against 81-82 us for the bf16 head (H200, bench/RESULTS.md session 9)
HEAD_Q8_TILE = TileConfig("frag8", 32, 64, 4, 2)
HEAD_Q8_ROWS = 4  # rows one frag8 launch takes: 5-8 rows are two launches (rows 0-3, 4-7)


def available() -> bool:
    """True when the Triton kernels can run (Triton imports)."""
    return fk.triton is not None


class FusedDecoder:
    """Buffers and launches for forwards of up to MAX_ROWS rows of `model` over cache `kv`, and
    of prefill chunks of up to `prefill_rows` rows (hidden states only)."""

    def __init__(self, model: Decoder, kv, tiles: FusedTiles = FusedTiles(), prefill_rows: int | None = None):
        assert available(), "Triton is not available"
        c = model.cfg
        self.model, self.kv, self.tiles = model, kv, tiles
        self.plan = LayerPlan(c.block, tiles, model.dtype, model.device)
        # prefill chunks (more rows than a verify) run without tails: see forward
        self.chunk_plan = LayerPlan(c.block, dataclasses.replace(tiles, tails=False), model.dtype, model.device) \
            if tiles.tails else self.plan
        rep = c.n_heads // c.n_kv_heads
        assert rep <= QR, f"{c.n_heads} query heads a K/V head: at most {QR}"
        prefill_rows = PREFILL_ROWS if prefill_rows is None else prefill_rows
        assert prefill_rows >= MAX_ROWS, prefill_rows
        self.rows = prefill_rows  # rows a forward takes at most
        self.block = QR // rep  # query rows an attention program takes
        assert c.head_dim & (c.head_dim - 1) == 0 and c.head_dim >= 16, "head_dim must be a power of two >= 16"
        ds = tiles.combine_split
        assert ds >= 1 and ds & (ds - 1) == 0 and c.head_dim % ds == 0, f"combine_split {ds}: a power of two <= head_dim"
        dev, act = model.device, model.dtype
        D, DH = c.hidden, c.head_dim
        nq, nkv = c.n_heads * DH, c.n_kv_heads * DH

        def buf(*shape, dtype=act):
            return torch.zeros(shape, dtype=dtype, device=dev)

        R = self.rows
        # matrices held as the file's bytes on integer tensor cores (quant/frag_matrix.py) write
        # float32 outputs, their epilogues separate kernels (gate|up's through gu2)
        frag = any(isinstance(w, FragMatrix) for w in model.layers[0].values())
        out = torch.float32 if frag else act
        self.res = [buf(R, D), buf(R, D)]  # residual stream, ping-pong
        self.qkv = buf(R, nq + 2 * nkv, dtype=out)
        self.q = buf(R, c.n_heads, DH)
        self.att = buf(R, c.n_heads, DH)
        self.o = buf(R, D, dtype=out)
        self.gu = buf(R, c.ffn)
        self.gu2 = buf(R, 2 * c.ffn, dtype=torch.float32) if frag else None
        self.down = buf(R, D, dtype=out)
        self.xn = buf(R, D)  # the normed input of the next GEMV
        self.hidden = buf(R, D)
        self.row_ids = torch.arange(R, device=dev)  # rows 0.. of a gathered embedding (see forward)
        self.logits = buf(MAX_TREE_ROWS, c.vocab_size, dtype=torch.float32)  # the head's rows at most
        bs = tiles.block_keys
        # key chunks a program grid covers: global layers every chunk of the cache; sliding layers
        # the window plus a row block's rows, starting at any alignment (+1)
        self.n_chunks = {True: -(-kv.capacity // bs)}
        if c.has_sliding:
            self.n_chunks[False] = -(-(c.sliding_window + self.block - 1) // bs) + 1
        # row blocks: a chunk's, or a tree's rows (one a block)
        ns = max(self.n_chunks.values()) * c.n_kv_heads * max(-(-R // self.block), MAX_TREE_ROWS)
        self.op = buf(ns, QR, DH, dtype=torch.float32)
        self.mx = buf(ns, QR, dtype=torch.float32)
        self.ls = buf(ns, QR, dtype=torch.float32)
        # the tails' arrival counters, per layer: [row blocks] for each of the two norms, [row
        # blocks x heads] for the RoPE (distinct per launch; each tail's last program zeroes its own)
        nb = -(-R // MP)
        self.count = buf(c.n_layers, 3, nb * (c.n_heads + 2 * c.n_kv_heads), dtype=torch.int32)
        # the head's Q8_0 PackedWeight when the head runs on the file's bytes, else None (the dense head)
        self.head_w = self._init_head_q8() if tiles.head_q8 else None

    def _init_head_q8(self):
        """The model's Q8_0 head as the frag8 GEMV's weight, its int8 fragment layout built now (178
        MB more on the device, shared by every decoder of the model: Decoder.head_packed), not inside
        the first call's graph capture; None where the model keeps no codes (the CPU engine, a file
        whose embedding is not Q8_0) or the kernel cannot run here (before Hopper, no Gluon)."""
        m = self.model
        w = m.head_packed()
        if w is None or w.shape[0] * w.shape[1] >= 2**31 or not qk.available() or \
                not runs_on(HEAD_Q8_TILE, device_capability(m.device)):  # the kernel's offsets are int32
            return None
        from ..quant.kernels import frag8_gemv
        from ..quant.kernels.frag8 import for_weight8

        if not frag8_gemv.available():
            return None
        assert HEAD_Q8_TILE.split_k == 1 and w.shape == tuple(m.head_weight.shape), (HEAD_Q8_TILE, w.shape)
        for_weight8(w)
        return w

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 logits [T, V] (a view of self.logits) of T <= MAX_TREE_ROWS rows x [T, D] after the final
        norm: the frag8 GEMV on the Q8_0 head (head_w), else the fused GEMV on the dense head.
        A row's logits are the same bits whatever T and the row's place among the rows: frag8's
        arithmetic for a row does not depend on the others. x_frag8 scales and splits each row by
        its own largest values; each row is its own B columns of the mma.m16n8k32.s8 (exact int32
        sums: the other columns cannot touch them); those are joined, converted and scaled by the
        same per-lane instructions for either mma group (rows 0-1 or 2-3; MM = 1 or 2) and added
        chunk after chunk in K order; a row's two piece-pair sums meet in one (commutative) fp32
        add. The row count only masks loads and stores (Triton's M == 1 specialisation included).
        One tile, no split over K (HEAD_Q8_TILE), so every call of 1-4 rows, and either of the two
        launches of 5-8 rows, computes a row alike (tests/models/test_fused*.py check it)."""
        T = x.shape[0]
        assert 1 <= T <= MAX_TREE_ROWS and x.shape[1] == self.model.cfg.hidden, x.shape
        logits = self.logits[:T]
        if self.head_w is None:  # the dense head, or the file's bytes where the model keeps them (not Q8_0)
            self.plan.gemv(x, self.model.head_weight, logits, head=True)
            return logits
        for r0 in range(0, T, HEAD_Q8_ROWS):  # the kernel takes at most 4 rows
            r1 = min(T, r0 + HEAD_Q8_ROWS)
            qk.gemv_packed(x[r0:r1], self.head_w, HEAD_Q8_TILE, self.logits[r0:r1])
        return logits

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, head: bool = True, tree=None):
        """tokens [T], pos [T] int64 consecutive absolute positions, on the model's device, T <=
        MAX_ROWS (head) or prefill_rows (no head). Writes the rows' K/V at cells pos. Returns views
        (logits [T, V] fp32 or None without the head, hidden [T, D] before the final norm) into
        buffers reused by the next call. A row's K/V, hidden and logits do not depend on T.
        tree: (cells [T], ancestors [T, A]) int64 for a draft tree's rows (spec/tree_shape.py):
        pos is the root's position + each node's depth, node n's K/V goes to cells[n] (the root's
        position + n), its attention reads key p0 + j from cell p0 + ancestors[n, j] past the
        root's position p0, one row an attention block (the tiles of a one-row step: its bits)."""
        m, c, kv, t, plan = self.model, self.model.cfg, self.kv, self.tiles, self.plan
        T = tokens.shape[0]
        most = MAX_TREE_ROWS if tree is not None else MAX_ROWS if head else self.rows
        assert 1 <= T <= most and pos.shape == (T,) and pos.dtype == torch.int64
        cells, anc = tree if tree is not None else (None, None)
        assert anc is None or (anc.shape[0] == T and anc.dtype == torch.int64 and anc.is_contiguous())
        H, HKV, DH = c.n_heads, c.n_kv_heads, c.head_dim
        # tails for decode / verify rows; a prefill chunk's rows run the same arithmetic (the same
        # [NORM_ROWS]-row tiles) as kernels of their own: a tail's passes over 16 rows are serial (a
        # 128-row chunk took 1147 us with tails against 963 without: bench/RESULTS.md session 16)
        if T > MAX_ROWS:
            plan = self.chunk_plan
        res = [r[:T] for r in self.res]
        xn = self.xn[:T]
        if m.dense_embed:
            scaled_embedding(m.embed, m.embed_scale, tokens, res[0])  # [T, D]: one launch, torch's bits
        else:  # the rows dequantized from the file's bytes, then the same scaling launch over them
            scaled_embedding(m.embedding_rows(tokens), m.embed_scale, self.row_ids[:T], res[0])
        plan.norm(res[0], m.layers[0]["attn_norm"], xn)  # layer 0's; every later one follows a GEMV
        cur = 0  # res[cur] holds the residual stream
        for i in range(c.n_layers):
            L = m.layers[i]
            glob = c.is_global(i)
            cos, sin = m.rope[glob]
            kc, vc = kv.k[i], kv.v[i]  # [capacity, HKV, DH]
            plan.qkv_rope(xn, L["qkv"], L.get("qkv_bias"), self.qkv[:T], self.count[i, 2], pos, L.get("q_norm"),
                          L.get("k_norm"), cos, sin, self.q, kc, vc, cells)
            window = 0 if glob else c.sliding_window
            n_ch, rows = self.n_chunks[glob], (1 if tree is not None else self.block)
            n_blk = -(-T // rows)
            assert n_ch * HKV * n_blk <= self.op.shape[0], "more attention blocks than the scratch holds"
            fk.attn_partial[(n_ch, HKV, n_blk)](self.q, kc, vc, pos, self.op, self.mx, self.ls, T, window,
                                                c.query_scale, H=H, HKV=HKV, DH=DH, QR=QR, BS=t.block_keys,
                                                PREC=plan.prec, num_warps=t.warps_attn, **plan.go,
                                                **({} if tree is None else dict(ANC=anc, AW=anc.shape[1], TREE=True)))
            fk.attn_combine[(min(T, rows) * (H // HKV) * t.combine_split, HKV, n_blk)](
                self.op, self.mx, self.ls, pos, self.att, T, window, n_ch, H=H, HKV=HKV, DH=DH, QR=QR,
                BS=t.block_keys, CT=t.combine_chunks, DS=t.combine_split, num_warps=t.warps, **plan.go,
                **({} if tree is None else dict(TREE=True)))
            plan.gemv_residual(self.att[:T].view(T, H * DH), L["o"], self.o, self.count[i, 0], res[cur],
                               L.get("post_attn_norm"), L["ffn_norm"], res[1 - cur], xn)
            cur = 1 - cur
            gu = plan.mlp(xn, L["gate_up"], self.gu, self.gu2)
            # the next layer's input norm; the last layer's: the final norm, its residual into hidden
            last = i + 1 == c.n_layers
            plan.gemv_residual(gu, L["down"], self.down, self.count[i, 1], res[cur], L.get("post_ffn_norm"),
                               m.out_norm if last else m.layers[i + 1]["attn_norm"],
                               self.hidden[:T] if last else res[1 - cur], xn)
            cur = 1 - cur
        hidden = self.hidden[:T]
        return (self.head(xn) if head else None), hidden
