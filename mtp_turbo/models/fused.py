"""The fused few-row forward: Gemma-3 decode/verify steps as a fixed sequence of Triton kernels.

Owns: the launch sequence of one forward of 1..MAX_ROWS rows (6 kernels per layer: qkv GEMV with
q/k norm+RoPE+KV write in its tail, attention over key chunks, chunk merge, o GEMV with
norm+residual in its tail, gate/up GEMV+GELU gating, down GEMV with the next norm+residual in its
tail; then the LM head; without FusedTiles.tails, as prefill chunks run, 9: the norms and the RoPE
as kernels of their own; with FusedTiles.persistent all layers as one launch of persistent_kernels.py),
its scratch buffers and tiles. On sm_90+ the kernels go out with programmatic dependent launch
(FusedTiles.pdl): each is resident, its first weights loaded, while the one before it runs. The
LM head is the int8 tensor-core GEMV (quant/kernels/frag8_gemv.py) on the file's Q8_0 bytes where
the model keeps them (Gemma3.head_q8: CUDA) and the GPU runs it (Hopper), else the fused GEMV on
the dense embedding.
Also prefill chunks of up to prefill_rows rows: the same kernels over row blocks (a grid
dimension), no LM head. Ignores: graph capture (step.py), cache lengths (cache/kv.py), the torch
forward (gemma3.py: the CPU path and the reference).

Why: the compiled torch step runs ~14 kernels per layer (cuBLAS GEMVs, separate norms, a masked
softmax over gathered cells); at this model size a decode step is bound by kernel count, not
bytes. Every launch here has a fixed grid and reads positions from a device tensor, so a CUDA
graph of it serves every position. The kernels are batch-invariant (fused_kernels.py): a verify
of k+1 rows yields bit-identical logits to one-row steps.

Runs wherever Triton runs: CUDA, or the CPU under TRITON_INTERPRET=1 (how CI checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..quant import kernels as qk
from ..quant.gemv import TileConfig, device_capability, runs_on
from . import fused_kernels as fk
from . import persistent_kernels as pk
from .embed import scaled_embedding
from .gemma3 import Gemma3

MAX_ROWS = 8  # verify rows (k+1); query rows per KV group (MAX_ROWS * heads/kv_heads) <= QR
MP = 16  # GEMV rows a program computes (>= MAX_ROWS; 16 is the smallest tl.dot tile)
QR = 32  # attention query rows per KV group a program computes (>= MAX_ROWS * 4 for Gemma-3-270M)
NORM_ROWS = 4  # rows a norm / RoPE pass takes at once (a tile of [4, 1024] fp32 stays in registers)
# prefill chunks: the same kernels over row blocks (a grid dimension), no LM head. 128 rows: 117k
# tok/s a chunk against 76k for 64 on an H200 (bench/RESULTS.md); the attention scratch is 16
# blocks of chunk partials (67 MB at 4096 cells of context, 0.5 GB at 32768)
PREFILL_ROWS = 128
COUNTER_STRIDE = 32  # int32s between the persistent kernel's stage counters: one 128-byte line each
# The Q8_0 head's one tile, at every row count (never per row count, never split over K: a row's
# logits must not depend on the rows beside it): 46.0 / 46.5 / 47.0 / 47.7 us at 1-4 rows on the
# 262144 x 640 head against 81-82 us for the bf16 head (H200, bench/RESULTS.md session 9)
HEAD_Q8_TILE = TileConfig("frag8", 32, 64, 4, 2)
HEAD_Q8_ROWS = 4  # rows one frag8 launch takes: 5-8 rows are two launches (rows 0-3, 4-7)


def available() -> bool:
    """True when the Triton kernels can run (Triton imports)."""
    return fk.triton is not None


@dataclass(frozen=True)
class FusedTiles:
    """GEMV tiles (output rows BN x K step BK, warps, K-loop pipelining depth) per matrix kind,
    warps per kernel kind, and the attention key chunk. Defaults from the H200 sweeps of
    bench/decode_bench.py (RESULTS.md 2026-11-30, commit bd1f2b7) and of
    bench/experiments/linear_sweep.py (RESULTS.md session 15)."""

    bn_small: int = 16  # qkv (K = hidden): small matrices want many programs
    bk_small: int = 128
    warps_small: int = 4
    stages_small: int = 4  # software-pipelining depth of the K loop (0: Triton's default)
    bn_gated: int = 32  # gate|up (K = hidden, two weight tiles a program)
    bk_gated: int = 128
    warps_gated: int = 4
    stages_gated: int = 4
    bn_tall: int = 32  # o, down (K >= 1024, few output rows)
    bk_tall: int = 512
    warps_tall: int = 4
    stages_tall: int = 3
    bn_head: int = 128  # the LM head: 262144 rows
    bk_head: int = 128
    warps_head: int = 4
    stages_head: int = 3
    block_keys: int = 32  # key cells per attention program
    # key chunks the merge takes a load (a power of two) and slices of head_dim it splits a row
    # over (a power of two): 32 and 2 took a 1-row step at 7000 cells from 783 to 743 us (at 256:
    # 693 vs 692; bench/RESULTS.md session 16)
    combine_chunks: int = 32
    combine_split: int = 2
    warps_attn: int = 4
    warps: int = 4  # q/k norm + RoPE and the merge
    # norms + residual in their own kernel instead of in every GEMV program's prologue: the sweep's
    # best (0.81 ms vs 1.05 ms per 1-row step on an H200, with warps_small 4)
    split_norm: bool = True
    # the norms and the q/k RoPE + K/V write done by the last program of the GEMV before them
    # (linear_norm, linear_rope) in forwards of <= MAX_ROWS rows: 6 launches a layer instead of 9
    # (needs split_norm); a 1-row step 693 -> 661 us at 256 cells, 783 -> 755 at 7000 (session 16)
    tails: bool = True
    # every layer of a forward of <= MAX_ROWS rows in one persistent kernel (persistent_kernels.py;
    # needs tails and one warp count): stages hand on through arrival counters, not launches
    persistent: bool = False
    persistent_programs: int = 0  # programs of that kernel on CUDA (0: one an SM; at most that)
    prefetch: bool = True  # in it, each program's next weight tile into L2 before it waits
    persistent_backoff: int = 0  # ns of nanosleep between a waiting program's polls (0: none)
    # the LM head from the file's Q8_0 bytes (Gemma3.head_q8, kept on CUDA) through the int8 frag8
    # GEMV: 178 MB a step instead of the bf16 embedding's 335 (off: the fused GEMV on the embedding)
    head_q8: bool = True
    # programmatic dependent launch (fused_kernels.pdl_enter; sm_90+ with a Triton that has it,
    # ignored elsewhere): 0 off; 1 each kernel lets the next launch once its producer is done, so
    # the next is resident and waiting while it runs; 2 lets it launch before that. A 1-row step at
    # 256 cells: 595 us off, 527 with 1, 609 with 2; 517 with 1 and pdl_w0 (H200, session 24)
    pdl: int = 1
    # each GEMV program loads its first weight chunk before it waits (with pdl: beside the kernel
    # before; without pdl it only costs: 657 us)
    pdl_w0: bool = True

    def gemv(self, K: int, gated: bool = False, head: bool = False) -> tuple[int, int, dict]:
        """(BN, BK, launch options) of a GEMV over K inputs: the head's, gate|up's, a tall
        matrix's (K >= 1024: o, down) or a small one's (qkv)."""
        if head:
            kind = "head"
        elif gated:
            kind = "gated"
        else:
            kind = "tall" if K >= 1024 else "small"
        stages = getattr(self, f"stages_{kind}")
        return getattr(self, f"bn_{kind}"), getattr(self, f"bk_{kind}"), {
            "num_warps": getattr(self, f"warps_{kind}"), **({"num_stages": stages} if stages else {})}


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class FusedDecoder:
    """Buffers and launches for forwards of up to MAX_ROWS rows of `model` over cache `kv`, and
    of prefill chunks of up to `prefill_rows` rows (hidden states only)."""

    def __init__(self, model: Gemma3, kv, tiles: FusedTiles = FusedTiles(), prefill_rows: int | None = None):
        assert available(), "Triton is not available"
        c = model.cfg
        self.model, self.kv, self.tiles = model, kv, tiles
        rep = c.n_heads // c.n_kv_heads
        assert MAX_ROWS * rep <= QR, f"{c.n_heads}/{c.n_kv_heads} heads: raise QR"
        # a chunk's hidden rows come from the split residual norm, as a decode step's do with it:
        # without it (a tile option) prefill runs as decode steps
        if prefill_rows is None:
            prefill_rows = PREFILL_ROWS if tiles.split_norm else MAX_ROWS
        assert prefill_rows >= MAX_ROWS and (prefill_rows == MAX_ROWS or tiles.split_norm), prefill_rows
        assert not tiles.tails or tiles.split_norm, "tails compute the split norms: they need split_norm"
        self.rows = prefill_rows  # rows a forward takes at most
        self.block = QR // rep  # attention rows a program takes (MAX_ROWS or more)
        assert c.head_dim & (c.head_dim - 1) == 0 and c.head_dim >= 32, "head_dim must be a power of two"
        ds = tiles.combine_split
        assert ds >= 1 and ds & (ds - 1) == 0 and c.head_dim % ds == 0, f"combine_split {ds}: a power of two <= head_dim"
        dev, act = model.device, model.dtype
        D, DH = c.hidden, c.head_dim
        nq, nkv = c.n_heads * DH, c.n_kv_heads * DH

        def buf(*shape, dtype=act):
            return torch.zeros(shape, dtype=dtype, device=dev)

        R = self.rows
        self.res = [buf(R, D), buf(R, D)]  # residual stream, ping-pong
        self.qkv = buf(R, nq + 2 * nkv)
        self.q = buf(R, c.n_heads, DH)
        self.att = buf(R, c.n_heads, DH)
        self.o = buf(R, D)
        self.gu = buf(R, c.ffn)
        self.down = buf(R, D)
        self.xn = buf(R, D)  # normed GEMV input (split_norm)
        self.hidden = buf(R, D)
        self.logits = buf(MAX_ROWS, c.vocab_size, dtype=torch.float32)  # the head runs on <= MAX_ROWS rows
        bs = tiles.block_keys
        # key chunks a program grid covers: global layers every chunk of the cache; sliding layers
        # the window plus a row block's rows, starting at any alignment (+1)
        self.n_chunks = {True: -(-kv.capacity // bs), False: -(-(c.sliding_window + self.block - 1) // bs) + 1}
        ns = max(self.n_chunks.values()) * c.n_kv_heads * -(-R // self.block)
        self.op = buf(ns, QR, DH, dtype=torch.float32)
        self.mx = buf(ns, QR, dtype=torch.float32)
        self.ls = buf(ns, QR, dtype=torch.float32)
        # the tails' arrival counters, per layer: [row blocks] for each of the two norms, [row
        # blocks x heads] for the RoPE (distinct per launch; each tail's last program zeroes its own)
        nb = -(-R // MP)
        self.count = buf(c.n_layers, 3, nb * (c.n_heads + 2 * c.n_kv_heads), dtype=torch.int32)
        if tiles.tails:
            bn = tiles.gemv(D)[0]
            assert DH % bn == 0, f"the qkv tile ({bn} columns) must divide head_dim {DH}"
        # fp32 weights (CPU interpreter checks) take exact fp32 dots; bf16 ones ignore the setting
        self.prec = "ieee" if act == torch.float32 else "tf32"
        assert tiles.pdl in (0, 1, 2), f"pdl {tiles.pdl}: 0, 1 or 2"
        pdl = tiles.pdl if fk.pdl_supported(dev) else 0
        # the launch option goes with the kernels' PDL (a kernel launched so must wait in pdl_enter)
        self.go = {"PDL": pdl, **({"launch_pdl": True} if pdl else {})}
        self.gemv_go = {**self.go, "W0": tiles.pdl_w0}
        if tiles.persistent:
            self._init_persistent()
        # the head's Q8_0 PackedWeight when the head runs on the file's bytes, else None (the embedding)
        self.head_w = self._init_head_q8() if tiles.head_q8 else None

    def _init_head_q8(self):
        """The model's Q8_0 head as the frag8 GEMV's weight, its int8 fragment layout built now (178
        MB more on the device, shared by every decoder of the model: Gemma3.head_packed), not inside
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
        assert HEAD_Q8_TILE.split_k == 1 and w.shape == tuple(m.embed.shape), (HEAD_Q8_TILE, w.shape)
        for_weight8(w)
        return w

    def _init_persistent(self):
        # the per-layer vectors stacked as the kernel reads them, its counters and its grid
        m, t = self.model, self.tiles
        assert t.tails, "the persistent kernel runs the tails' path: it needs tails"
        warps = {t.warps_small, t.warps_gated, t.warps_tall, t.warps_attn, t.warps}
        assert len(warps) == 1, f"the persistent kernel has one warp count, not {sorted(warps)}"
        self.norms = {k: torch.stack([L[k] for L in m.layers]) for k in
                      ("q_norm", "k_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm")}
        self.norms["next"] = torch.stack([L["attn_norm"] for L in m.layers[1:]] + [m.out_norm])
        n = m.cfg.n_layers
        self.stage_count = torch.zeros(n * 6 * COUNTER_STRIDE, dtype=torch.int32, device=m.device)
        self.exit_count = torch.zeros(1, dtype=torch.int32, device=m.device)
        if m.device.type == "cuda":
            sms = torch.cuda.get_device_properties(m.device).multi_processor_count
            p = t.persistent_programs or sms
            assert 1 <= p <= sms, f"persistent_programs {p}: between 1 and the {sms} SMs (all must be resident)"
        else:  # Triton's interpreter runs programs one after another: one program does every item
            p = 1
        self.programs = p
        # the L2 prefetches and the backoff are PTX: not in the CPU interpreter
        self.ptx = m.device.type == "cuda"

    def _linear(self, x, w, y, pro=0, h=None, delta=None, wpost=None, wpre=None, hout=None,
                gated=False, head=False):
        """y[:M] = per `pro`/`gated` (see fused_kernels.linear); x/h/delta [M, K]."""
        t = self.tiles
        M, K = x.shape
        N = w.shape[0] // 2 if gated else w.shape[0]
        assert M <= self.rows and w.shape[1] == K and y.shape[1] == N
        if pro != 0 and t.split_norm:  # prologue as its own kernel, then a plain GEMV
            xn = self.xn[:M]
            fk.residual_norm[(-(-M // NORM_ROWS),)](x if pro == 1 else h, delta if delta is not None else x,
                                                    wpost if wpost is not None else wpre, wpre,
                                                    hout if hout is not None else xn, xn, M, K, self.model.cfg.eps,
                                                    PRO=pro, KP=_pow2(K), RT=NORM_ROWS, num_warps=t.warps,
                                                    **self.go)
            return self._linear(xn, w, y, gated=gated, head=head)
        bn, bk, launch = t.gemv(K, gated, head)
        dummy = x
        fk.linear[(-(-N // bn), -(-M // MP))](
            x, h if h is not None else dummy, delta if delta is not None else dummy,
            wpost if wpost is not None else dummy, wpre if wpre is not None else dummy,
            hout if hout is not None else dummy, w, y, M, N, K, self.model.cfg.eps,
            PRO=pro, GATED=gated, MP=MP, KP=_pow2(K), BN=bn, BK=bk, PREC=self.prec, **launch, **self.gemv_go)

    def _linear_norm(self, x, w, y, cnt, res, wpost, wpre, hout):
        """y = x @ w.T, then (last program of each row block) hout = res + norm(y) * wpost and
        self.xn = norm(hout) * wpre: the next GEMV's input (fused_kernels.linear_norm)."""
        M, K = x.shape
        N = w.shape[0]
        bn, bk, launch = self.tiles.gemv(K)
        fk.linear_norm[(-(-N // bn), -(-M // MP))](x, w, y, M, N, K, self.model.cfg.eps, cnt, res, wpost, wpre, hout,
                                                  self.xn[:M], MP=MP, KP=_pow2(K), NP=_pow2(N), RT=NORM_ROWS,
                                                  BN=bn, BK=bk, PREC=self.prec, TP=2, **launch, **self.gemv_go)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 logits [T, V] (a view of self.logits) of T <= MAX_ROWS rows x [T, D] after the final
        norm: the frag8 GEMV on the Q8_0 head (head_w), else the fused GEMV on the embedding.
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
        assert 1 <= T <= MAX_ROWS and x.shape[1] == self.model.cfg.hidden, x.shape
        logits = self.logits[:T]
        if self.head_w is None:
            self._linear(x, self.model.embed, logits, head=True)
            return logits
        for r0 in range(0, T, HEAD_Q8_ROWS):  # the kernel takes at most 4 rows
            r1 = min(T, r0 + HEAD_Q8_ROWS)
            qk.gemv_packed(x[r0:r1], self.head_w, HEAD_Q8_TILE, self.logits[r0:r1])
        return logits

    def _layers_persistent(self, T: int, pos: torch.Tensor):
        """Every layer of T <= MAX_ROWS rows as the loop below runs them with tails, in one launch
        (persistent_kernels.decode_layers): from self.xn (layer 0's normed input) to self.hidden and
        its final norm in self.xn."""
        m, c, kv, t = self.model, self.model.cfg, self.kv, self.tiles
        st, nm = m.stacked, self.norms
        H, HKV, DH, D = c.n_heads, c.n_kv_heads, c.head_dim, c.hidden
        tile = {}
        for name, K, gated in (("q", D, False), ("o", H * DH, False), ("g", D, True), ("d", c.ffn, False)):
            bn, bk, launch = t.gemv(K, gated)
            tile.update({f"BN_{name.upper()}": bn, f"BK_{name.upper()}": bk,
                         f"ST_{name.upper()}": launch.get("num_stages")})
        cos_g, sin_g = m.rope[True]
        cos_l, sin_l = m.rope[False]
        pk.decode_layers[(self.programs,)](
            self.xn, self.qkv, self.q, self.att, self.o, self.gu, self.down, self.res[0], self.res[1], self.hidden,
            st["qkv"], st["o"], st["gate_up"], st["down"], nm["q_norm"], nm["k_norm"], nm["post_attn_norm"],
            nm["ffn_norm"], nm["post_ffn_norm"], nm["next"], kv.k, kv.v, pos, cos_g, sin_g, cos_l, sin_l,
            self.op, self.mx, self.ls, self.count, self.count.stride(0), self.count.stride(1), self.stage_count,
            self.exit_count, T, c.eps, c.query_scale, c.sliding_window, self.n_chunks[True], self.n_chunks[False],
            kv.capacity, NL=c.n_layers, D=D, F=c.ffn, H=H, HKV=HKV, DH=DH, PATTERN=c.sliding_pattern, MP=MP,
            RT=NORM_ROWS, QR=QR, BS=t.block_keys, CT=t.combine_chunks, DS=t.combine_split, KPD=_pow2(D),
            KPH=_pow2(H * DH), KPF=_pow2(c.ffn), PREC=self.prec, PF=t.prefetch and self.ptx,
            WL=128 // m.dtype.itemsize, SCP=_pow2(c.n_layers * 6), CS=COUNTER_STRIDE,
            BACKOFF=t.persistent_backoff if self.ptx else 0, num_warps=t.warps, num_stages=1, **tile)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, head: bool = True):
        """tokens [T], pos [T] int64 consecutive absolute positions, on the model's device, T <=
        MAX_ROWS (head) or prefill_rows (no head). Writes the rows' K/V at cells pos. Returns views
        (logits [T, V] fp32 or None without the head, hidden [T, D] before the final norm) into
        buffers reused by the next call. A row's K/V, hidden and logits do not depend on T."""
        m, c, kv, t = self.model, self.model.cfg, self.kv, self.tiles
        T = tokens.shape[0]
        assert 1 <= T <= (MAX_ROWS if head else self.rows) and pos.shape == (T,) and pos.dtype == torch.int64
        eps, DH, H, HKV = c.eps, c.head_dim, c.n_heads, c.n_kv_heads
        res = [r[:T] for r in self.res]
        scaled_embedding(m.embed, m.embed_scale, tokens, res[0])  # [T, D]: one launch, torch's bits
        cur = 0  # res[cur] holds the residual stream
        delta = None  # the previous sub-block's output, added (normed) in the next prologue
        # tails for decode / verify rows; a prefill chunk's rows run the same arithmetic (the same
        # [NORM_ROWS]-row tiles) as separate kernels: a tail's passes over 16 rows are serial (a
        # 128-row chunk took 1147 us with tails against 963 without: bench/RESULTS.md session 16)
        tails = t.tails and T <= MAX_ROWS
        if tails:  # layer 0's norm alone; every later one is the tail of the GEMV before it
            fk.residual_norm[(-(-T // NORM_ROWS),)](res[0], res[0], m.layers[0]["attn_norm"], m.layers[0]["attn_norm"],
                                                    self.xn, self.xn, T, c.hidden, eps, PRO=1, KP=_pow2(c.hidden),
                                                    RT=NORM_ROWS, num_warps=t.warps, **self.go)
        persistent = tails and t.persistent  # every layer in one launch; the loop below runs none
        if persistent:
            self._layers_persistent(T, pos)
        for i in range(0 if persistent else c.n_layers):
            L = m.layers[i]
            qkv = self.qkv[:T]
            glob = c.is_global(i)
            cos, sin = m.rope[glob]
            kc, vc = kv.k[i], kv.v[i]  # [capacity, HKV, DH]
            if tails:
                bn, bk, launch = t.gemv(c.hidden)
                fk.linear_rope[(-(-qkv.shape[1] // bn), -(-T // MP))](
                    self.xn[:T], L["qkv"], qkv, T, qkv.shape[1], c.hidden, eps, self.count[i, 2], pos,
                    L["q_norm"], L["k_norm"], cos, sin, self.q, kc, vc, H=H, HKV=HKV, DH=DH, MP=MP,
                    KP=_pow2(c.hidden), RT=NORM_ROWS, BN=bn, BK=bk, PREC=self.prec, **launch, **self.gemv_go)
            else:
                if delta is None:
                    self._linear(res[cur], L["qkv"], qkv, pro=1, wpre=L["attn_norm"])
                else:
                    self._linear(res[cur], L["qkv"], qkv, pro=2, h=res[cur], delta=delta,
                                 wpost=m.layers[i - 1]["post_ffn_norm"], wpre=L["attn_norm"], hout=res[1 - cur])
                    cur = 1 - cur
                fk.qk_rope_write[(-(-T // NORM_ROWS), H + 2 * HKV)](qkv, pos, L["q_norm"], L["k_norm"], cos, sin, self.q,
                                                                    kc, vc, T, eps, H=H, HKV=HKV, DH=DH, RT=NORM_ROWS,
                                                                    num_warps=t.warps, **self.go)
            window = 0 if glob else c.sliding_window
            n_ch, n_blk = self.n_chunks[glob], -(-T // self.block)
            fk.attn_partial[(n_ch, HKV, n_blk)](self.q, kc, vc, pos, self.op, self.mx, self.ls, T, window,
                                        c.query_scale, H=H, HKV=HKV, DH=DH, QR=QR, BS=t.block_keys,
                                        PREC=self.prec, num_warps=t.warps_attn, **self.go)
            fk.attn_combine[(min(T, self.block) * (H // HKV) * t.combine_split, HKV, n_blk)](
                self.op, self.mx, self.ls, pos, self.att, T, window, n_ch, H=H, HKV=HKV, DH=DH, QR=QR,
                BS=t.block_keys, CT=t.combine_chunks, DS=t.combine_split, num_warps=t.warps, **self.go)
            o = self.o[:T]
            gu = self.gu[:T]
            if tails:
                self._linear_norm(self.att[:T].view(T, H * DH), L["o"], o, self.count[i, 0], res[cur],
                                  L["post_attn_norm"], L["ffn_norm"], res[1 - cur])
                self._linear(self.xn[:T], L["gate_up"], gu, gated=True)
            else:
                self._linear(self.att[:T].view(T, H * DH), L["o"], o)
                self._linear(res[cur], L["gate_up"], gu, pro=2, h=res[cur], delta=o, wpost=L["post_attn_norm"],
                             wpre=L["ffn_norm"], hout=res[1 - cur], gated=True)
            cur = 1 - cur
            delta = self.down[:T]
            if tails:  # the next layer's input norm (the last layer's: the final norm, into hidden)
                last = i + 1 == c.n_layers
                self._linear_norm(gu, L["down"], delta, self.count[i, 1], res[cur], L["post_ffn_norm"],
                                  m.out_norm if last else m.layers[i + 1]["attn_norm"],
                                  self.hidden[:T] if last else res[1 - cur])
                if not last:
                    cur = 1 - cur
            else:
                self._linear(gu, L["down"], delta)
        hidden = self.hidden[:T]
        if tails:  # the last down GEMV's tail wrote hidden and its final norm (xn)
            if not head:
                return None, hidden
            return self.head(self.xn[:T]), hidden
        if not head or self.head_w is not None:  # the residual's last add alone (split_norm: the
            # kernel the dense head's prologue is), then the Q8_0 head on its normed rows
            fk.residual_norm[(-(-T // NORM_ROWS),)](res[cur], delta, m.layers[-1]["post_ffn_norm"], m.out_norm, hidden,
                                                    self.xn[:T], T, c.hidden, eps, PRO=2, KP=_pow2(c.hidden),
                                                    RT=NORM_ROWS, num_warps=t.warps, **self.go)
            return (self.head(self.xn[:T]) if head else None), hidden
        logits = self.logits[:T]
        self._linear(res[cur], m.embed, logits, pro=2, h=res[cur], delta=delta,
                     wpost=m.layers[-1]["post_ffn_norm"], wpre=m.out_norm, hout=hidden, head=True)
        return logits, hidden
