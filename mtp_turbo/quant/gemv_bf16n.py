"""bf16-tensor-core GEMV for nibble weights (Q4_0 / Q5_0 in block pairs), 1-4 input rows: "dot_bf16n".

Owns: the kernel, its x operand and its launch. The weights are the dot's A operand, P block pairs
[BLOCK_N, 32 bytes] a step: byte c of pair j holds element c of block 2j (low nibble) and of
block 2j + 1 (high nibble) (repack.py). On CUDA, inline PTX turns each 4-byte word into 8 exact
bf16 values: one 3-input logic op per two values builds bf16 bit patterns 0x43qq (= 128 + q) and
one bf16x2 FMA takes off the bias exactly. 1.5 instructions a weight (q5_0: 2.5, its 5th bits
rotated into place from the repacked qh word); a cast would be an I2F per weight.

x is split into three bf16 pieces (hi + mid + lo == x exactly: bf16 has fp32's exponent range and
each remainder fits 8 bits), stored per block as one [32, 16] operand, column 4p + m = piece p of
row m (column 12 + m zero). ONE dot per block gives every row and piece, with exact products and
fp32 accumulation; the block's fp16 weight scale multiplies the [BLOCK_N, 16] partial (one FMA per
element) and the pieces are summed once per output tile. Against dot_i8n (gemv_i8.py): no
int -> float of the partials and no per-piece scales, so the epilogue per weight is the same at
1 and 4 rows (dot_i8n's grows with the rows). H200 (bench/RESULTS.md, session 5): flat in the row
count, faster than the integer kernels at 3-4 rows and for q5_0, slower at 1-2 rows of q4_0.

Ignores: the other kernels and dispatch (gemv_triton.py, gemv.py), q8_0 (the int8 kernels read
its bytes straight into the tensor cores; the same scheme with fp16 operands measured slower, and
gemv_triton runs dot_i8n for it), the layout (repack.py). Without CUDA it runs in
Triton's interpreter with the same values in fp32 and no PTX.
"""

from __future__ import annotations

import torch

from .gemv_i8 import _splits
from .repack import PackedWeight

try:  # imported by gemv_triton.py only when Triton is there
    import triton
    import triton.language as tl

    from .gemv_triton import _nib_value, _pair_bytes, _qh_bit, _x_rows  # noqa: F401  (jit callees resolve in globals)
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def x_bf16(X, XB, K, stride_xm, M: tl.constexpr):
        # Block kb of x [M, K] -> XB bf16 [nb, 32, 16]: XB[kb, c, 4p + m] = piece p (0..2) of
        # x[m, 32 kb + c] (gemv_triton._x_rows' split, transposed); hi + mid + lo == x exactly;
        # column 12 + m and rows m >= M are zero.
        kb = tl.program_id(0)
        c = tl.arange(0, 32)
        v = tl.trans(_x_rows(X, stride_xm, kb * 32 + c, K, M, True))  # [32, 16]
        tl.store(XB + kb * 512 + c[:, None] * 16 + tl.arange(0, 16)[None, :], v.to(tl.bfloat16))

    def _nibble_asm(q5: bool) -> str:
        # PTX, per word w = $8 (bytes 4k..4k+3 of a pair: elements e0..e3 of blocks A = 2j and
        # B = 2j + 1). MAGIC = bf16x2 (128, 128); lop3 0xEA = (a & b) | c. prmt puts bytes 0 / 1
        # (2 / 3) at bits 0 and 16; their low nibbles there, ORed into MAGIC, are bf16 pairs
        # (128 + q) (bf16's 7 mantissa bits hold q < 128); >> 4 brings the high nibbles down. One FMA
        # takes off 128 + offset exactly. Outputs $0..$3 = A's e0..e3, $4..$7 = B's.
        # q5_0: qh words hA / hB ($9 / $10) in repack's order (element 4k + i's bit at k, 16 + k,
        # 8 + k, 24 + k for i = 0..3): rotated right by $11 = k - 4 (mod 32) they put e0 / e1's bits
        # at 4 / 20, by $12 = k + 4 e2 / e3's; masked and ORed into MAGIC, then beside the nibbles.
        neg = "0xC310C310" if q5 else "0xC308C308"  # bf16x2 -(128 + 16), -(128 + 8)
        text = ("{\n.reg .b32 s, u, s4, u4, t0, t1, t2, t3, r0, r1, r2, r3, mg, one, ng;\n"
                f"mov.b32 mg, 0x43004300; mov.b32 one, 0x3F803F80; mov.b32 ng, {neg};\n"
                "prmt.b32 s, $8, 0, 0x7170; prmt.b32 u, $8, 0, 0x7372; shr.u32 s4, s, 4; shr.u32 u4, u, 4;\n")
        if q5:
            text += ("shf.r.wrap.b32 r0, $9, $9, $11; shf.r.wrap.b32 r1, $9, $9, $12;\n"
                     "shf.r.wrap.b32 r2, $10, $10, $11; shf.r.wrap.b32 r3, $10, $10, $12;\n")
            text += "".join(f"lop3.b32 r{i}, r{i}, 0x00100010, mg, 0xEA;\n" for i in range(4))
        for i, src in enumerate(("s", "u", "s4", "u4")):
            text += f"lop3.b32 t{i}, {src}, 0x000F000F, {f'r{i}' if q5 else 'mg'}, 0xEA;\n"
        text += "".join(f"fma.rn.bf16x2 t{i}, t{i}, one, ng;\n" for i in range(4))
        text += "".join(f"mov.b32 {{${2 * i}, ${2 * i + 1}}}, t{i};\n" for i in range(4))
        return text + "}"

    _Q4_ASM = tl.constexpr(_nibble_asm(False))
    _Q5_ASM = tl.constexpr(_nibble_asm(True))

    @triton.jit
    def _nib_bf(w, shift, h, j, HAS_QH: tl.constexpr):
        # the nibble at bit `shift` of w as element j's signed value, int -> fp32 -> bf16 (the
        # interpreter casts int to bf16 by raw bits)
        return _nib_value((w >> shift) & 15, h, j, HAS_QH).to(tl.float32).to(tl.bfloat16)

    @triton.jit
    def _word_values(w, ha, hb, k, HAS_QH: tl.constexpr, ASM: tl.constexpr):
        # int32 words [BN, 8] (word k of a pair) -> 8 bf16 [BN, 8]: elements 4k + i (i = 0..3) of
        # block A, then of block B, as exact signed values. ha / hb: the blocks' qh words [BN, 1].
        if ASM:
            if HAS_QH:
                return tl.inline_asm_elementwise(
                    asm=_Q5_ASM, constraints="=h,=h,=h,=h,=h,=h,=h,=h,r,r,r,r,r",
                    args=[w, ha, hb, (k + 28) & 31, k + 4],
                    dtype=(tl.bfloat16,) * 8, is_pure=True, pack=1)
            return tl.inline_asm_elementwise(asm=_Q4_ASM, constraints="=h,=h,=h,=h,=h,=h,=h,=h,r", args=[w],
                                             dtype=(tl.bfloat16,) * 8, is_pure=True, pack=1)
        # the same values from plain ops (gemv_triton._nib_value: offset, q5_0's bit)
        return (_nib_bf(w, 0, ha, 4 * k, HAS_QH), _nib_bf(w, 8, ha, 4 * k + 1, HAS_QH),
                _nib_bf(w, 16, ha, 4 * k + 2, HAS_QH), _nib_bf(w, 24, ha, 4 * k + 3, HAS_QH),
                _nib_bf(w, 4, hb, 4 * k, HAS_QH), _nib_bf(w, 12, hb, 4 * k + 1, HAS_QH),
                _nib_bf(w, 20, hb, 4 * k + 2, HAS_QH), _nib_bf(w, 28, hb, 4 * k + 3, HAS_QH))

    @triton.jit
    def _elements(a0, a1, a2, a3, BLOCK_N: tl.constexpr):
        # 4 tensors [BN, 8] (element 4k + i of word k in a_i) -> [BN, 32] in element order
        return tl.reshape(tl.join(tl.join(a0, a2), tl.join(a1, a3)), [BLOCK_N, 32])

    @triton.jit
    def _pair_partial(acc, QW, QH, XB, SC, rn, n_mask, j, nb, pw, HAS_QH: tl.constexpr,
                      F32_OPERANDS: tl.constexpr, ASM: tl.constexpr, BLOCK_N: tl.constexpr):
        # acc [BN, 16] + pair j's two blocks: (values [BN, 32] @ x operand [32, 16]) * block scale.
        # (Unmasked loads for evenly shaped matrices cut 18% of the loop's instructions and did not
        # make it faster on the H200: bench/RESULTS.md, 2026-11-30 session 5.)
        ok = n_mask & ((rn * 0 + 2 * j) < nb)  # [BN]; a pair past the split's end (P > 1 tails) adds 0
        okb = ok & ((rn * 0 + 2 * j + 1) < nb)  # and block B exists (odd nb: the last pair's is empty)
        k8 = tl.arange(0, 8)
        w = tl.load(QW + rn[:, None] * pw + j * 8 + k8[None, :], mask=ok[:, None], other=0)  # int32 [BN, 8]
        ha = w  # (unused for q4_0)
        hb = w
        if HAS_QH:
            ha = tl.load(QH + rn * nb + 2 * j, mask=ok, other=0)[:, None]
            hb = tl.load(QH + rn * nb + 2 * j + 1, mask=okb, other=0)[:, None]
        a0, a1, a2, a3, b0, b1, b2, b3 = _word_values(w, ha, hb, k8[None, :], HAS_QH, ASM)
        va = _elements(a0, a1, a2, a3, BLOCK_N)
        vb = _elements(b0, b1, b2, b3, BLOCK_N)
        # x operands and scales are loaded after the conversion: issued before it (the same loads),
        # the q4_0 head at 3-4 rows took 70.3 us instead of 59.0 (H200, RESULTS session 5)
        c32 = tl.arange(0, 32)
        col = tl.arange(0, 16)
        xo = XB + 2 * j * 512 + c32[:, None] * 16 + col[None, :]
        xa = tl.load(xo, mask=(c32 * 0 + 2 * j < nb)[:, None], other=0.0)  # bf16 [32, 16]
        xb = tl.load(xo + 512, mask=(c32 * 0 + 2 * j + 1 < nb)[:, None], other=0.0)
        sa = tl.load(SC + rn * nb + 2 * j, mask=ok, other=0.0).to(tl.float32)
        sb = tl.load(SC + rn * nb + 2 * j + 1, mask=okb, other=0.0).to(tl.float32)
        if F32_OPERANDS:  # interpreter: the same values in fp32
            da = tl.dot(va.to(tl.float32), xa.to(tl.float32), input_precision="ieee")
            db = tl.dot(vb.to(tl.float32), xb.to(tl.float32), input_precision="ieee")
        else:
            da = tl.dot(va, xa)
            db = tl.dot(vb, xb)
        acc = acc + da * sa[:, None]
        return acc + db * sb[:, None]

    @triton.jit
    def gemv_bf16n(XB, QS, QH, SC, Y, M, N, K, stride_ys, stride_ym, SPS, NT,
                   BLOCK_N: tl.constexpr, P: tl.constexpr, FMT: tl.constexpr,
                   F32_OPERANDS: tl.constexpr, ASM: tl.constexpr):
        # Program (i, s): NT consecutive output tiles over split s's steps (SPS steps of P pairs),
        # in ONE flattened loop over (tile, step) so the pipeliner prefetches across tiles; a
        # tile's rows are stored after its last step. M (1..4) is a runtime value: one compile
        # serves every row count (the operand is 4 rows wide regardless).
        nb = K // 32
        pw = _pair_bytes(K) // 4
        QW = QS.to(tl.pointer_type(tl.int32), bitcast=True)
        s0 = tl.program_id(1) * SPS
        cnt = tl.minimum(SPS, tl.cdiv(tl.cdiv(nb, 2), P) - s0)  # this split's steps
        rm = tl.arange(0, 4)
        acc = tl.zeros([BLOCK_N, 16], dtype=tl.float32)
        for it in range(0, NT * cnt):
            step = s0 + it % cnt
            rn = (tl.program_id(0) * NT + it // cnt) * BLOCK_N + tl.arange(0, BLOCK_N)
            n_mask = rn < N
            for q in tl.static_range(P):
                acc = _pair_partial(acc, QW, QH, XB, SC, rn, n_mask, step * P + q, nb, pw, FMT == 1,
                                    F32_OPERANDS, ASM, BLOCK_N)
            if it % cnt == cnt - 1:
                y = tl.sum(tl.reshape(acc, [BLOCK_N, 4, 4]), axis=1)  # [BN, 4]: pieces summed
                tl.store(Y + tl.program_id(1) * stride_ys + rm[None, :] * stride_ym + rn[:, None], y,
                         mask=(rm[None, :] < M) & n_mask[:, None])
                acc = tl.zeros([BLOCK_N, 16], dtype=tl.float32)


def launch(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor, asm: bool | None = None) -> None:
    """out[M, N] = x @ dequant(w).T for q4_0 / q5_0 with tile.kernel == "dot_bf16n" (gemv_packed
    has checked the arguments; x has unit column stride). A step is BLOCK_K // 64 pairs.
    asm: the PTX conversion (default: on CUDA)."""
    assert w.fmt in ("q4_0", "q5_0") and tile.kernel == "dot_bf16n", (w.fmt, tile)
    assert tile.BLOCK_K in (64, 128, 256), f"{tile}: 1, 2 or 4 block pairs a step"
    n, k = w.shape
    m = x.shape[0]
    nb = k // 32
    pairs_per_step = tile.BLOCK_K // 64
    sps, splits = _splits(triton.cdiv(triton.cdiv(nb, 2), pairs_per_step), tile.split_k)
    y = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
    xb = torch.empty(nb, 32, 16, dtype=torch.bfloat16, device=x.device)
    x_bf16[(nb,)](x, xb, k, x.stride(0), M=m, num_warps=1)
    qh = w.qh if w.fmt == "q5_0" else w.scales  # an unused pointer unless q5_0
    nt = tile.n_tiles
    gemv_bf16n[(triton.cdiv(n, tile.BLOCK_N * nt), splits)](
        xb, w.qs, qh, w.scales, y, m, n, k, 0 if splits == 1 else y.stride(0), out.stride(0), sps, nt,
        BLOCK_N=tile.BLOCK_N, P=pairs_per_step, FMT=1 if w.fmt == "q5_0" else 2,
        F32_OPERANDS=not x.is_cuda, ASM=x.is_cuda if asm is None else asm,
        num_warps=tile.num_warps, num_stages=tile.num_stages)
    if splits > 1:
        torch.sum(y, dim=0, out=out)
