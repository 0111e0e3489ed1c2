"""The scaled embedding lookup of a forward's input rows (embed[tokens] * embed_scale), in one
launch on the fused path.

Owns: `embed_rows` (a program a row: the gather, the product in fp32, the rounding to the
activation dtype) and `scaled_embedding`, which takes it (or the torch expression it replaces).
Ignores: everything after the lookup (fused.py), what the tokens are.

Why: torch took two launches a forward (a gather, then the product), ~5 us of a plain token's
device time on an H200 (bench/RESULTS.md session 19).

Rounding, bit for bit torch's: torch multiplies a bf16 tensor by the bf16 0-dim embed_scale in
fp32 (the product of two bf16 values is exact there) and rounds it to bf16 to nearest, ties to
even; the kernel does the same rounding itself in integer arithmetic, so the Triton CPU
interpreter (which truncates fp32 -> bf16 casts) gives the GPU's bits too. NaN becomes the
canonical 0x7FFF (the GPU's cvt.rn; torch's CPU path writes 0x7FC0): an embedding holds none.
fp32 and fp16 rows round as the dtype cast does.
"""

from __future__ import annotations

import torch

from . import fused_kernels as fk

triton = fk.triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def embed_rows(TOK, EMB, S, OUT, D, stride_e, stride_o, KP: tl.constexpr):
        """Program m: OUT[m, :D] = EMB[TOK[m], :D] * S[0] (S: the 0-dim scale), computed in fp32
        and rounded to OUT's dtype to nearest even."""
        ACT: tl.constexpr = OUT.dtype.element_ty
        m = tl.program_id(0)
        rk = tl.arange(0, KP)
        ok = rk < D
        tok = tl.load(TOK + m)
        e = tl.load(EMB + tok * stride_e + rk, mask=ok, other=0.0)
        s = tl.load(S)
        if ACT == tl.bfloat16:  # bf16 -> fp32 exactly (the interpreter's cast mangles subnormals)
            e = (e.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            s = (s.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        p = e.to(tl.float32) * s.to(tl.float32)
        if ACT == tl.bfloat16:
            u = p.to(tl.uint32, bitcast=True)
            r = (u + ((u >> 16) & 1) + 0x7FFF) >> 16  # round to nearest, ties to even (c10's rule)
            r = tl.where(p != p, 0x7FFF, r)
            y = r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            y = p.to(ACT)
        tl.store(OUT + m * stride_o + rk, y, mask=ok)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def scaled_embedding(embed: torch.Tensor, scale: torch.Tensor, tokens: torch.Tensor, out: torch.Tensor,
                     kernel: bool = True) -> torch.Tensor:
    """out [T, D] = embed [V, D] [tokens [T] int64] * scale (0-dim, embed's dtype), in out's dtype
    (= embed's). kernel: through embed_rows (Triton must import; the CPU runs its interpreter),
    else torch.mul. Capturable either way. Returns out."""
    T, D = out.shape
    assert tokens.shape == (T,) and embed.shape[1] == D and scale.dim() == 0 and out.dtype == embed.dtype, \
        (tokens.shape, embed.shape, out.shape, scale.shape)
    if not kernel or triton is None:
        return torch.mul(embed[tokens], scale, out=out)
    assert embed.stride(1) == 1 and out.stride(1) == 1, (embed.stride(), out.stride())
    embed_rows[(T,)](tokens, embed, scale, out, D, embed.stride(0), out.stride(0), KP=_pow2(D), num_warps=4)
    return out
