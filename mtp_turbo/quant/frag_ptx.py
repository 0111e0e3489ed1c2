"""The inline PTX of the frag GEMV: one lane's work on one 64-column chunk, as text.

Owns: `frag_asm` (the instruction text per format and mma group count) and `frag_constraints`
(its operand list). Ignores: the kernels that pass the operands (gemv_frag.py), the layout the
words come in (frag.py), the x operand (frag_x.py). Pure Python: the CPU tests run this text in a
warp interpreter (tests/quant/test_frag_ptx.py).

Per lane and chunk the text turns each weight word into four f16x2 A registers (`lop3` of the
nibbles under fp16's 0x6400 = 1024, or `prmt` of q8_0's bytes under 0x64, then one f16x2 FMA that
takes off 1024 + the offset: exact small integers), runs one `mma.m16n8k16` per group and 16
columns with fp32 accumulation (B = the x pieces, frag_x.py), and adds each block's partial times
its scale (times the chunk's power-of-two x scale) to the lane's fp32 accumulators.
"""

from __future__ import annotations

import numpy as np


def _f16x2(v: float) -> str:
    """An fp16 value twice in a b32 immediate."""
    h = int(np.array(v, dtype=np.float16).view(np.uint16))
    assert float(np.array(h, dtype=np.uint16).view(np.float16)) == v, v  # exact
    return f"0x{h:04X}{h:04X}"


def frag_asm(fmt: str, groups: int = 2) -> str:
    """The PTX for one chunk of one lane (pack=4 operands: see gemv_frag._mma). Outputs $0..$3 = group 0
    accumulators (rows g, g, g+8, g+8 x columns 2t, 2t+1), $4..$7 = group 1 (groups == 2: 3-4 rows
    of x; 1-2 rows fit one group, module docstring)."""
    assert groups in (1, 2), groups
    n_o = 4 * groups  # output registers
    n_w = {"q4_0": 1, "q5_0": 2, "q8_0": 2}[fmt]  # 4-register input tensors before the scales
    i_s = n_o + 4 * n_w  # scales: 2 registers (f16x2 (block 0: g, g+8), (block 1: g, g+8))
    i_e = i_s + 2  # x scale of the lane's row (4 copies)
    i_x = i_e + 4  # x registers: 2 per step and group (b0, b1)
    i_acc = i_x + 8 * groups
    text = ["{", ".reg .b32 a0, a1, a2, a3, t, hs, hs2, one, mg, ka, kb, c16;",
            ".reg .f32 d0, d1, d2, d3, d4, d5, d6, d7, z, sa, sb;", ".reg .f16 h0, h1;",
            "mov.b32 one, 0x3C003C00; mov.b32 mg, 0x64006400; mov.f32 z, 0f00000000;"]
    if fmt == "q8_0":
        text.append(f"mov.b32 ka, {_f16x2(-1152.0)};")  # bytes are value + 128 under 1024
    else:
        off = 16 if fmt == "q5_0" else 8
        # low-nibble registers: (1024 + q) - (1024 + off); high (1024 + 16 q) / 16 - (64 + off)
        text.append(f"mov.b32 ka, {_f16x2(-1024.0 - off)}; mov.b32 kb, {_f16x2(-64.0 - off)}; "
                    f"mov.b32 c16, {_f16x2(1 / 16)};")
    for s in range(4):
        if fmt == "q8_0":
            base = n_o + 4 * (s // 2) + 2 * (s % 2)
            wa, wb = f"${base}", f"${base + 1}"
            text.append(f"prmt.b32 a0, {wa}, 0x64646464, 0x4140; prmt.b32 a1, {wa}, 0x64646464, 0x4342;")
            text.append(f"prmt.b32 a2, {wb}, 0x64646464, 0x4140; prmt.b32 a3, {wb}, 0x64646464, 0x4342;")
            text.append("".join(f"fma.rn.f16x2 a{i}, a{i}, one, ka; " for i in range(4)))
        else:
            w = f"${n_o + s}"
            text.append(f"lop3.b32 a0, {w}, 0x000F000F, mg, 0xEA; lop3.b32 a1, {w}, 0x00F000F0, mg, 0xEA; "
                        f"shr.b32 t, {w}, 8; lop3.b32 a2, t, 0x000F000F, mg, 0xEA; "
                        f"lop3.b32 a3, t, 0x00F000F0, mg, 0xEA;")
            if fmt == "q5_0":  # this step's 5th bits to 4 / 20 and 8 / 24 (frag.H_BASE / H_POS)
                sh = 4 - (0, 2, 8, 10)[s]
                text.append(f"{'shl' if sh > 0 else 'shr'}.b32 hs, ${n_o + 4}, {abs(sh)}; shr.b32 hs2, hs, 1;")
                text.append("lop3.b32 a0, hs, 0x00100010, a0, 0xEA; lop3.b32 a1, hs, 0x01000100, a1, 0xEA; "
                            "lop3.b32 a2, hs2, 0x00100010, a2, 0xEA; lop3.b32 a3, hs2, 0x01000100, a3, 0xEA;")
            text.append("fma.rn.f16x2 a0, a0, one, ka; fma.rn.f16x2 a1, a1, c16, kb; "
                        "fma.rn.f16x2 a2, a2, one, ka; fma.rn.f16x2 a3, a3, c16, kb;")
        x = i_x + 2 * groups * s
        for grp in range(groups):
            d = ", ".join(f"d{4 * grp + i}" for i in range(4))
            c = "z, z, z, z" if s % 2 == 0 else d
            text.append(f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, {{a0, a1, a2, a3}}, "
                        f"{{${x + 2 * grp}, ${x + 2 * grp + 1}}}, {{{c}}};")
        if s % 2 == 1:  # end of block s // 2: scale the block's partials into the accumulators
            b = s // 2
            text.append(f"mov.b32 {{h0, h1}}, ${i_s + b}; cvt.f32.f16 sa, h0; cvt.f32.f16 sb, h1; "
                        f"mul.f32 sa, sa, ${i_e}; mul.f32 sb, sb, ${i_e};")
            for o in range(n_o):
                acc = f"${i_acc + o}" if b == 0 else f"${o}"
                text.append(f"fma.rn.f32 ${o}, d{o}, {'sa' if o % 4 < 2 else 'sb'}, {acc};")
    text.append("}")
    return "\n".join(text)


def frag_constraints(fmt: str, groups: int = 2) -> str:
    """frag_asm's operand constraints: 4 accumulators a group out; in: the weight words (4, or 8
    for q8_0 and q5_0's qh copies), the scales (2 registers), x scale (4 copies), x registers (8 a
    group), accumulators (4 a group)."""
    n_w = 4 if fmt == "q4_0" else 8
    return "=f," * 4 * groups + "r," * (n_w + 2) + "f," * 4 + "r," * 8 * groups + ",".join("f" * 4 * groups)


def frag8_asm(fmt: str, mmas: int = 1) -> str:
    """The PTX of the int8 frag GEMV (gemv_frag8.py) for one chunk of one lane (pack=4 operands, see
    frag8_constraints). Per 32-block b: the lane's four int8 A registers (frag8.py: q8_0 the words as
    they are; q4_0 `shl` + two `lop3` per word; q5_0 nibble shift, 5th-bit shift + `and`, `lop3`), one
    `mma.m16n8k32.s8` per group of 2 x rows (B = x's int8 pieces, frag8_x.py; exact int32 sums),
    the lane's two pieces joined exactly (c_even * 2^7 + c_odd), converted, times block scale x the
    lane's x scale into the fp32 accumulators. Outputs $0..$3: (group 0 row g, g + 8, group 1 row g,
    g + 8); with one group $2, $3 pass through."""
    assert mmas in (1, 2) and fmt in ("q4_0", "q5_0", "q8_0"), (fmt, mmas)
    n_w = 2 if fmt == "q4_0" else 4  # weight registers before the scales, in units of 2 (q4_0: 4 words)
    i_w = 4
    i_s = i_w + 2 * n_w  # 2 scale registers: f16x2 (block 0: g, g + 8), (block 1: g, g + 8)
    i_e = i_s + 2  # the lane's x scale per group (4 registers, 2 used)
    i_x = i_e + 4  # x: 4 registers a group (block 0: b0, b1; block 1: b0, b1)
    i_acc = i_x + 4 * mmas
    text = ["{", ".reg .b32 a0, a1, a2, a3, t, u, sgn;", ".reg .s32 z, c0, c1, c2, c3;",
            ".reg .f32 f0, f1, sa, sb, da, db;", ".reg .f16 h0, h1;",
            "mov.s32 z, 0; mov.b32 sgn, 0x80808080;"]
    for b in range(2):
        if fmt == "q8_0":
            text.append("".join(f"mov.b32 a{r}, ${i_w + 4 * b + r}; " for r in range(4)))
        elif fmt == "q4_0":  # (w & 0xF0F0F0F0) ^ 0x80808080 = 16 (q - 8) per byte (lop3 0x6A: (a & b) ^ c)
            for h in range(2):
                w = f"${i_w + 2 * b + h}"
                text.append(f"shl.b32 t, {w}, 4; lop3.b32 a{h}, t, 0xF0F0F0F0, sgn, 0x6A; "
                            f"lop3.b32 a{h + 2}, {w}, 0xF0F0F0F0, sgn, 0x6A;")
        else:  # nibble to bits 3..6, NOT 5th bit to bit 7: 8 (q - 16) per byte
            for r in range(4):
                w = f"${i_w + 2 * b + r % 2}"
                text.append(f"shl.b32 t, {w}, 3;" if r < 2 else f"shr.b32 t, {w}, 1;")
                rr = 4 * b + r
                hf = f"${i_w + 4}"
                text.append(f"shl.b32 u, {hf}, {rr}; and.b32 u, u, sgn;" if rr else f"and.b32 u, {hf}, sgn;")
                text.append(f"lop3.b32 a{r}, t, 0x78787878, u, 0xEA;")
        text.append(f"mov.b32 {{h0, h1}}, ${i_s + b}; cvt.f32.f16 da, h0; cvt.f32.f16 db, h1;")
        for j in range(mmas):
            x = i_x + 4 * j + 2 * b
            text.append(f"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {{c0, c1, c2, c3}}, {{a0, a1, a2, a3}}, "
                        f"{{${x}, ${x + 1}}}, {{z, z, z, z}};")
            text.append("mad.lo.s32 c0, c0, 128, c1; mad.lo.s32 c2, c2, 128, c3; "
                        "cvt.rn.f32.s32 f0, c0; cvt.rn.f32.s32 f1, c2;")
            text.append(f"mul.f32 sa, da, ${i_e + j}; mul.f32 sb, db, ${i_e + j};")
            for o, f, s in ((2 * j, "f0", "sa"), (2 * j + 1, "f1", "sb")):
                acc = f"${i_acc + o}" if b == 0 else f"${o}"
                text.append(f"fma.rn.f32 ${o}, {f}, {s}, {acc};")
    if mmas == 1:
        text.append(f"mov.f32 $2, ${i_acc + 2}; mov.f32 $3, ${i_acc + 3};")
    text.append("}")
    return "\n".join(text)


def frag8_constraints(fmt: str, mmas: int = 1) -> str:
    """frag8_asm's operand constraints: 4 accumulators out; in: the weight words (4; 8 for q8_0 and
    q5_0's hf copies), the scales (2 registers), the lane's x scales (4), x (4 a group), accumulators (4)."""
    n_w = 4 if fmt == "q4_0" else 8
    return "=f," * 4 + "r," * (n_w + 2) + "f," * 4 + "r," * 4 * mmas + "f,f,f,f"
