"""The inline PTX of the frag8 GEMV: one lane's work on one 64-column chunk, as text.

Owns: `frag8_asm` (the instruction text per format and mma group count) and `frag8_constraints`
(its operand list). Ignores: the kernel that passes the operands (frag8_gemv.py), the layout the
words come in (frag8.py), the x operand (frag8_x.py). Pure Python: the CPU tests run this text in a
warp interpreter (tests/quant/test_ptx.py).
"""

from __future__ import annotations


def frag8_asm(fmt: str, mmas: int = 1) -> str:
    """The PTX of the int8 frag GEMV (frag8_gemv.py) for one chunk of one lane (pack=4 operands, see
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
