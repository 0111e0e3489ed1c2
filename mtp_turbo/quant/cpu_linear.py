"""Linear layers held in few bits on the CPU: int8 codes with a scale a row, or the file's own 4-bit codes.

Owns: `Int8Linear`, a matrix [N, K] quantized per row (the row's largest magnitude over 127, the
scale rounded to bf16 first so the codes are chosen against the scale the kernel multiplies by)
and applied with PyTorch's CPU weight-only kernel `torch._weight_int8pack_mm` on bf16 rows;
`Int4Linear`, a matrix whose file blocks are 4-bit (Q4_0, Q4_1, Q4_K: quant/dequant.int4_groups),
held as those codes with their affine per 32 weights (scale and offset rounded to bf16) and applied
with `torch._weight_int4pack_mm_for_cpu` on bf16 rows; and `quantize_cpu_model`, which swaps a CPU
main model's matrices and LM head for them. Ignores: GPU paths (the fused kernels read their own
layouts), everything about the forward but the matrices.

Why: the CPU path held every weight as fp32 (~1 GB a token for Gemma-3-270M, the 262144-row head
alone 671 MB). On a 2-core x86 machine the int8 kernel on bf16 rows took the head from 40.7 to 5.3
ms and a layer's four GEMVs from 0.30 to 0.09 ms (bench/RESULTS.md session 25). Its error is the
per-row int8 grid (half a step of the row's largest value / 127) plus bf16 rounding of the rows and
the result; a row's output does not depend on the rows beside it (batch-invariant).
Why the 4-bit codes as they are: the int4 kernel reads half the bytes, and a step is bound by them:
Qwen2.5-Coder-1.5B's layer matrices took 19.7 ms against 42.8 as int8 on 2 cores (bench/RESULTS.md
session 30); their values are the file's within the bf16 rounding of each group's scale and offset
(closer than the int8 grid's), and rows stay batch- and thread-count-invariant (tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

K_MULTIPLE = 16  # the kernel reads K in steps of 16 (other K crash it: torch 2.13, x86): pad with zeros


class Int8Linear:
    """y = x @ w.T for a dense w [N, K], held as int8 codes [N, K] and bf16 scales [N]."""

    def __init__(self, w: torch.Tensor):
        assert w.dim() == 2 and w.device.type == "cpu", (w.shape, w.device)
        self.k = w.shape[1]
        wf = F.pad(w.float(), (0, -self.k % K_MULTIPLE))
        scale = (wf.abs().amax(dim=1) / 127.0).clamp(min=torch.finfo(torch.float32).tiny)
        scale = scale.bfloat16()  # the kernel multiplies by the bf16 scale: choose the codes against it
        q = torch.round(wf / scale.float()[:, None]).clamp_(-127, 127).to(torch.int8)
        self.q, self.scale = q.contiguous(), scale.contiguous()

    @classmethod
    def from_codes(cls, q: torch.Tensor, scale: torch.Tensor, k: int) -> "Int8Linear":
        """An op over codes made before (quant/cpu_cache.py): q int8 [N, K padded], scale bf16 [N]."""
        op = cls.__new__(cls)
        op.q, op.scale, op.k = q, scale, k
        return op

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape[0], self.k

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.q, self.scale

    def rows(self, ids: torch.Tensor) -> "Int8Linear":
        """The op of rows `ids` of w: the same codes and scales as Int8Linear(w[ids]) (each row is
        quantized on its own), without quantizing again."""
        return Int8Linear.from_codes(self.q[ids].contiguous(), self.scale[ids].contiguous(), self.k)

    def dequantize(self) -> torch.Tensor:
        """The values the kernel multiplies by, float32 [N, K]."""
        return self.q[:, :self.k].float() * self.scale.float()[:, None]

    def __call__(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """x [..., K] (any float dtype) -> [..., N] in out_dtype (default: x's dtype)."""
        lead, K = x.shape[:-1], x.shape[-1]
        assert K == self.k, (x.shape, self.shape)
        xb = x.reshape(-1, K).to(torch.bfloat16)
        if self.q.shape[1] != K:
            xb = F.pad(xb, (0, self.q.shape[1] - K))
        y = torch._weight_int8pack_mm(xb.contiguous(), self.q, self.scale)
        return y.reshape(*lead, self.q.shape[0]).to(out_dtype or x.dtype)


GROUP = 32  # weights a scale and offset cover (every INT4_TYPES block is made of such groups)


class Int4Linear:
    """y = x @ w.T for w [N, K] = q * scale + offset per group of 32 along K (q 0..15), from the file's
    4-bit blocks; the kernel computes (q - 8) * scale + (offset + 8 * scale) in bf16."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor):
        """q uint8 [N, K], scale and offset float32 [N, K // 32] (quant/dequant.int4_groups)."""
        self.n, self.k = q.shape
        assert self.k % GROUP == 0 and scale.shape == offset.shape == (self.n, self.k // GROUP), (q.shape, scale.shape)
        self.packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
        zero = offset + 8 * scale
        self.sz = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()  # [K // 32, N, 2]

    @classmethod
    def from_blocks(cls, parts: list[tuple[torch.Tensor, int, tuple[int, int]]]) -> "Int4Linear":
        """The matrices of `parts` ((raw bytes, ggml type, [N_i, K]) each, types in INT4_TYPES) stacked
        along N, as the fused q|k|v and gate|up are."""
        from .dequant import int4_groups

        q, scale, offset = zip(*(int4_groups(raw, t, shape) for raw, t, shape in parts))
        return cls(torch.cat(q), torch.cat(scale), torch.cat(offset))

    @classmethod
    def from_codes(cls, packed: torch.Tensor, sz: torch.Tensor, n: int, k: int) -> "Int4Linear":
        """An op over a packing made before (quant/cpu_cache.py)."""
        op = cls.__new__(cls)
        op.packed, op.sz, op.n, op.k = packed, sz, n, k
        return op

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.k

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.packed, self.sz

    def __call__(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """x [..., K] (any float dtype) -> [..., N] in out_dtype (default: x's dtype)."""
        lead, K = x.shape[:-1], x.shape[-1]
        assert K == self.k, (x.shape, self.shape)
        xb = x.reshape(-1, K).to(torch.bfloat16).contiguous()
        y = torch._weight_int4pack_mm_for_cpu(xb, self.packed, GROUP, self.sz)
        return y.reshape(*lead, self.n).to(out_dtype or x.dtype)


MATRICES = ("qkv", "o", "gate_up", "down")  # a layer's matrices as the Decoder holds them (q|k|v, gate|up fused)


def cpu_op_shapes(c) -> dict[str, tuple[int, int]]:
    """[N, K] of every matrix quantize_cpu_model holds as int8 for a model of ModelConfig c, by
    name: blk.I.qkv / o / gate_up / down and head."""
    nkv = c.n_kv_heads * c.head_dim
    per = {"qkv": (c.n_heads * c.head_dim + 2 * nkv, c.hidden), "o": (c.hidden, c.n_heads * c.head_dim),
           "gate_up": (2 * c.ffn, c.hidden), "down": (c.hidden, c.ffn)}
    shapes = {f"blk.{i}.{k}": per[k] for i in range(c.n_layers) for k in MATRICES}
    shapes["head"] = (c.vocab_size, c.hidden)
    return shapes


def quantize_cpu_model(model, ops: dict | None = None, blocks: dict | None = None) -> dict:
    """Hold a CPU Decoder's layer matrices (the fused qkv and gate|up, o, down) and its LM head as
    Int8Linear, or Int4Linear where `blocks` gives a matrix's 4-bit file blocks (its name -> the
    parts for Int4Linear.from_blocks), in place (the dense matrices and their per-part views are
    dropped), or take them from `ops` (cpu_op_shapes' names: a cache's). The embedding keeps its
    dense rows for the lookup. Returns the ops by name."""
    assert model.device.type == "cpu", model.device
    made, blocks = {}, blocks or {}
    for i, L in enumerate(model.layers):
        for k in ("q", "k", "v", "gate", "up"):  # views of the fused matrices: block.py takes the fused ones
            L.pop(k, None)
        for k in MATRICES:
            name = f"blk.{i}.{k}"
            if ops:
                L[k] = ops[name]
            else:
                L[k] = Int4Linear.from_blocks(blocks[name]) if name in blocks else Int8Linear(L[k])
            made[name] = L[k]
    if ops:
        made["head"] = ops["head"]
    else:  # a tied head whose embedding is held as the file's bytes: its values, dequantized once
        w = model.head_weight if model.head_weight is not None else model.embed_file.dequantize()
        made["head"] = Int8Linear(w)
    model.head_op = made["head"]
    return made
