"""The fused layer plan: how one block's parts launch on fused_kernels.py's kernels, for any family.

Owns: `FusedTiles` (GEMV tiles per matrix kind, warps, the attention key chunk, the tails and PDL
switches) and `LayerPlan`, the one place where a block's parts are launched: the norm before a
block, the qkv GEMV with its bias, q/k norms, RoPE and K/V write, the GEMV after attention or the
MLP with the residual add (and Gemma's sandwich norm) and the next norm, the gated gate|up GEMV,
and plain GEMVs (the LM head). The main model's forward (fused.py) and the MTP head's draft step
(mtp_step.py) both run their blocks through it; the family's traits (arch.BlockSpec) pick the
kernels' compile-time switches. With `tails` a norm or the RoPE runs in the last program of the
GEMV before it (one launch instead of two); without, as its own kernel (prefill chunks): the same
arithmetic on the same [NORM_ROWS]-row tiles either way, so a row's bits do not depend on it.
Ignores: buffers and the order of the parts (the callers), attention (the callers' own kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..quant.frag_matrix import FragMatrix
from ..quant.planes import DENSE
from . import fused_kernels as fk
from .arch import SILU, BlockSpec

MP = 16  # GEMV rows a program computes (>= the rows of a decode/verify step; 16 is the smallest tl.dot tile)
NORM_ROWS = 4  # rows a norm / RoPE pass takes at once (a tile of [4, 1024] fp32 stays in registers)


@dataclass(frozen=True)
class FusedTiles:
    """GEMV tiles (output rows BN x K step BK, warps, K-loop pipelining depth) per matrix kind,
    warps per kernel kind, and the attention key chunk. Defaults from the H200 sweeps of
    bench/decode_bench.py (RESULTS.md 2026-11-30, commit bd1f2b7) and of
    bench/experiments/linear_sweep.py (RESULTS.md session 15)."""

    bn_small: int = 16  # qkv (K = hidden < 1024): small matrices want many programs
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
    bn_head: int = 128  # the LM head: the vocabulary's rows
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
    warps: int = 4  # norms, q/k norm + RoPE and the merge
    # the norms and the q/k RoPE + K/V write done by the last program of the GEMV before them
    # (linear_norm, linear_rope) in forwards of <= MAX_ROWS rows: 6 launches a layer instead of 9;
    # a 1-row step 693 -> 661 us at 256 cells, 783 -> 755 at 7000 (session 16)
    tails: bool = True
    # the LM head from the file's Q8_0 bytes (Decoder.head_q8, kept on CUDA) through the int8 frag8
    # GEMV: 178 MB a step instead of the bf16 embedding's 335 for Gemma-3-270M (off: the fused GEMV
    # on the dense head)
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
        matrix's (K >= 1024: o, down, and qkv of wide models) or a small one's."""
        if head:
            kind = "head"
        elif gated:
            kind = "gated"
        else:
            kind = "tall" if K >= 1024 else "small"
        stages = getattr(self, f"stages_{kind}")
        return getattr(self, f"bn_{kind}"), getattr(self, f"bk_{kind}"), {
            "num_warps": getattr(self, f"warps_{kind}"), **({"num_stages": stages} if stages else {})}


def pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def weight_args(w, bn: int, bk: int) -> tuple[tuple, int, dict]:
    """(WA, WB, SPLIT), the K step and the format switches a fused GEMV launch takes for weight `w`:
    a dense [N, K] matrix or a FusedWeight (quant/planes.py). A weight read from the file's bytes
    steps K by the largest BK <= bk that is a multiple of its formats' chunk and divides K (the
    tiles have no column mask); its segments' boundary must fall between BN-row tiles."""
    if isinstance(w, torch.Tensor):
        t = (w, w, w, w, w.shape[1], 0, 0, 0)
        return (t, t, w.shape[0]), bk, {}
    fa, a, fb, b, split = w.kernel_args()
    K, c = w.shape[1], w.chunk
    step = bk
    if not (fa == DENSE and w.b is None):
        step = max((s for s in range(c, max(bk, c) + 1, c) if K % s == 0 and s & (s - 1) == 0), default=0)
        assert step, f"no K step for K {K} in chunks of {c}"
    one = w.b is None
    assert one or split % bn == 0, f"a {bn}-row tile straddles the segments at row {split}"
    return (a, b, split), step, {"FA": fa, "FB": -1 if one else fb}


class LayerPlan:
    """The launches of one block's parts for `spec` on `device` in activation dtype `dtype`.
    Buffers are the caller's; every method launches with fixed grids (capturable in CUDA graphs)."""

    def __init__(self, spec: BlockSpec, tiles: FusedTiles, dtype: torch.dtype, device: torch.device):
        assert fk.triton is not None, "Triton is not available"
        self.spec, self.tiles = spec, tiles
        # fp32 weights (CPU interpreter checks) take exact fp32 dots; bf16 ones ignore the setting
        self.prec = "ieee" if dtype == torch.float32 else "tf32"
        assert tiles.pdl in (0, 1, 2), f"pdl {tiles.pdl}: 0, 1 or 2"
        pdl = tiles.pdl if fk.pdl_supported(torch.device(device)) else 0
        # the launch option goes with the kernels' PDL (a kernel launched so must wait in pdl_enter)
        self.go = {"PDL": pdl, **({"launch_pdl": True} if pdl else {})}
        self.gemv_go = {**self.go, "W0": tiles.pdl_w0}
        self.post = spec.sandwich_norms
        self.silu = spec.activation == SILU
        if tiles.tails:
            bn = tiles.gemv(spec.hidden)[0]
            assert spec.head_dim % bn == 0, f"the qkv tile ({bn} columns) must divide head_dim {spec.head_dim}"

    # ---- single kernels ---------------------------------------------------------------------------
    def norm(self, h, wpre, xout, delta=None, wpost=None, hout=None) -> None:
        """xout = rmsnorm(h) * wpre (delta None), or hout = h + delta (normed by wpost with sandwich
        norms) and xout = rmsnorm(hout) * wpre. Rows [M, K]."""
        M, K = h.shape
        pro = 1 if delta is None else 2
        fk.residual_norm[(-(-M // NORM_ROWS),)](h, h if delta is None else delta, wpre if wpost is None else wpost,
                                                wpre, xout if hout is None else hout, xout, M, K, self.spec.eps,
                                                PRO=pro, KP=pow2(K), RT=NORM_ROWS, num_warps=self.tiles.warps,
                                                POST=self.post, **self.go)

    def gemv(self, x, w, y, bias=None, gated=False, head=False) -> torch.Tensor:
        """y[:M] = x [M, K] @ w.T (+ bias); gated: act(x @ w[:N].T) * (x @ w[N:].T), the family's
        activation. Returns y[:M]. A FragMatrix (the file's bytes on integer tensor cores) writes
        float32 y, never gated (mlp's scratch takes its two halves)."""
        M, K = x.shape
        if isinstance(w, FragMatrix):
            assert not gated and y.dtype == torch.float32, (gated, y.dtype)
            w.gemv(x, y)
            if bias is not None:
                y[:M] += bias.float()
            return y[:M]
        N = w.shape[0] // 2 if gated else w.shape[0]
        assert M <= y.shape[0] and w.shape[1] == K and y.shape[1] == N, (x.shape, w.shape, y.shape)
        bn, bk, launch = self.tiles.gemv(K, gated, head)
        (wa, wb, split), bk, fmt = weight_args(w, bn, bk)
        fk.linear[(-(-N // bn), -(-M // MP))](x, wa, wb, split, y, x if bias is None else bias, M, N, K,
                                              GATED=gated, MP=MP, BN=bn, BK=bk, PREC=self.prec,
                                              HAS_BIAS=bias is not None, SILU=self.silu, **fmt, **launch,
                                              **self.gemv_go)
        return y[:M]

    # ---- a block's parts ---------------------------------------------------------------------------
    def qkv_rope(self, xn, w, bias, qkv, cnt, pos, qn, kn, cos, sin, q_out, kc, vc, cells=None) -> None:
        """The rows' q/k/v from their normed input xn [M, D]: qkv [M, (H + 2 Hkv) Dh] = xn @ w.T
        (+ bias), then (q/k norms where the family has them) RoPE at pos [M], queries into q_out
        [M, H, Dh], K/V into the cache cells kc/vc [cells, Hkv, Dh] at pos (at `cells` where given:
        a draft tree's nodes). cnt: int32 [row blocks, H + 2 Hkv] of zeros (the tails' counters).
        qn/kn: the q/k norm weights (ignored without)."""
        s, t = self.spec, self.tiles
        M, K = xn.shape
        N = w.shape[0]
        qn = xn if qn is None else qn
        kn = xn if kn is None else kn
        if t.tails and not isinstance(w, FragMatrix):
            bn, bk, launch = t.gemv(K)
            (wa, wb, split), bk, fmt = weight_args(w, bn, bk)
            fk.linear_rope[(-(-N // bn), -(-M // MP))](
                xn, wa, wb, split, qkv, xn if bias is None else bias, M, N, K, s.eps, cnt, pos,
                pos if cells is None else cells, qn, kn, cos, sin,
                q_out, kc, vc, H=s.n_heads, HKV=s.n_kv_heads, DH=s.head_dim, MP=MP, RT=NORM_ROWS, BN=bn, BK=bk,
                PREC=self.prec, HAS_BIAS=bias is not None, QKN=s.qk_norm, **fmt, **launch, **self.gemv_go)
            return
        self.rope_write(self.gemv(xn, w, qkv, bias), pos, qn, kn, cos, sin, q_out, kc, vc, cells)

    def rope_write(self, qkv, pos, qn, kn, cos, sin, q_out, kc, vc, cells=None) -> None:
        """qkv_rope's second half as its own kernel, on rows qkv [M, (H + 2 Hkv) Dh] (any dtype)."""
        s = self.spec
        M = qkv.shape[0]
        qn = qkv if qn is None else qn
        kn = qkv if kn is None else kn
        fk.qk_rope_write[(-(-M // NORM_ROWS), s.n_heads + 2 * s.n_kv_heads)](
            qkv, pos, pos if cells is None else cells, qn, kn, cos, sin, q_out, kc, vc, M, s.eps, H=s.n_heads, HKV=s.n_kv_heads, DH=s.head_dim,
            RT=NORM_ROWS, num_warps=self.tiles.warps, QKN=s.qk_norm, **self.go)

    def gemv_residual(self, x, w, y, cnt, res, wpost, wpre, hout, xout) -> None:
        """A sub-block's output GEMV and the residual stream after it: y = x @ w.T, hout = res + y
        (normed by wpost with sandwich norms), xout = rmsnorm(hout) * wpre (the next GEMV's input).
        Without res (the MTP head's fc, whose output is the residual): xout = rmsnorm(y) * wpre.
        cnt: int32 [row blocks] of zeros (the tail's counter)."""
        M, K = x.shape
        N = w.shape[0]
        if not self.tiles.tails or isinstance(w, FragMatrix):
            self.gemv(x, w, y)
            if res is None:
                self.norm(y[:M], wpre, xout)
            else:
                self.norm(res, wpre, xout, delta=y[:M], wpost=wpost, hout=hout)
            return
        bn, bk, launch = self.tiles.gemv(K)
        (wa, wb, split), bk, fmt = weight_args(w, bn, bk)
        fk.linear_norm[(-(-N // bn), -(-M // MP))](x, wa, wb, split, y, M, N, K, self.spec.eps, cnt,
                                                  y if res is None else res, wpre if wpost is None else wpost, wpre,
                                                  y if hout is None else hout, xout, MP=MP, NP=pow2(N), RT=NORM_ROWS,
                                                  BN=bn, BK=bk, PREC=self.prec, TP=1 if res is None else 2,
                                                  POST=self.post, **fmt, **launch, **self.gemv_go)

    def mlp(self, xn, gate_up, gu, scratch=None) -> torch.Tensor:
        """The gated half of the MLP: gu [M, F] = act(xn @ gate.T) * (xn @ up.T). Returns gu[:M].
        A FragMatrix gate_up writes both halves to scratch (float32 [>= M, 2F]) first."""
        if not isinstance(gate_up, FragMatrix):
            return self.gemv(xn, gate_up, gu, gated=True)
        M, F = xn.shape[0], gu.shape[1]
        gate_up.gemv(xn, scratch)
        fk.gated_act[(-(-F // 1024), M)](scratch, gu, F, BN=1024, SILU=self.silu, num_warps=self.tiles.warps,
                                         **self.go)
        return gu[:M]
