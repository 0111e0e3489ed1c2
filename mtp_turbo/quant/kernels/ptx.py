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


_MMA = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"


def fragk_asm(fmt: str, mmas: int = 1) -> str:
    """The PTX of the frag8 GEMV for a K-quant (fragk.py) on one chunk of one lane (pack=4 operands,
    see fragk_constraints). Per 32-block b and group of 2 x rows:
    q4_k: A registers = the codes (`and`, `shr` + `and` a word); one mma of them and one of all-ones
      A registers (the block's sum of x, the same for every row) against x's pieces; a row's
      accumulator += (d sc) x the first + (-dmin m) x the second, each times the lane's x scale.
    q5_k: as q4_k, each A register's bytes taking their 5th bit from the hf words (`shl` + `and` +
      `lop3` a register).
    q6_k: A registers = 4 (q - 32) (nibble shifted to bits 2-5, the stored high field to bits 6-7:
      two shifts, an `and`, a `lop3`); one mma of registers a0, a1 (columns 0-15) and one of a2, a3
      (columns 16-31): each half times its own d sc.
    The sums join as in frag8_asm (c_even 2^7 + c_odd, exact); outputs $0..$3 as frag8_asm's."""
    assert mmas in (1, 2) and fmt in ("q4_k", "q5_k", "q6_k"), (fmt, mmas)
    offsets = fmt in ("q4_k", "q5_k")  # (d sc) q - (dmin m): the block's sum of x times the offset
    i_w = 4
    i_h = i_w + 4  # q5_k / q6_k: the 5th-bit word (1 used of 4) / high-field words (2 used of 4)
    i_s = i_h + (0 if fmt == "q4_k" else 4)  # the record (4 registers)
    i_e = i_s + 4
    i_x = i_e + 4
    i_acc = i_x + 4 * mmas
    text = ["{", ".reg .b32 a0, a1, a2, a3, t, u, one, zb;", ".reg .s32 z, c0, c1, c2, c3, e0, e1, e2, e3;",
            ".reg .f32 f0, f1, f2, f3, dg, d8, mg, m8, s0, s1, s2, s3, q0, q1, q2, q3;", ".reg .f16 h0, h1;",
            "mov.s32 z, 0; mov.b32 zb, 0; mov.b32 one, 0x01010101;"]
    if offsets:
        text.append(f"mov.b32 {{h0, h1}}, ${i_s + 2}; cvt.f32.f16 dg, h0; cvt.f32.f16 mg, h1; neg.f32 mg, mg;")
        text.append(f"mov.b32 {{h0, h1}}, ${i_s + 3}; cvt.f32.f16 d8, h0; cvt.f32.f16 m8, h1; neg.f32 m8, m8;")
    else:
        text.append(f"mov.b32 {{h0, h1}}, ${i_s + 2}; cvt.f32.f16 dg, h0; cvt.f32.f16 d8, h1;")
    for b in range(2):
        if offsets:
            for h in range(2):
                w = f"${i_w + 2 * b + h}"
                text.append(f"and.b32 a{h}, {w}, 0x0F0F0F0F; shr.b32 t, {w}, 4; and.b32 a{h + 2}, t, 0x0F0F0F0F;")
            if fmt == "q5_k":  # register r's 5th bits: bit 4 b + r of each byte of the hf word, to bit 4
                for r in range(4):
                    s = 4 - 4 * b - r
                    move = f"shl.b32 u, ${i_h}, {s}; " if s > 0 else f"shr.b32 u, ${i_h}, {-s}; " if s < 0 else \
                        f"mov.b32 u, ${i_h}; "
                    text.append(f"{move}and.b32 u, u, 0x10101010; lop3.b32 a{r}, a{r}, 0x0F0F0F0F, u, 0xEA;")
            # (d sc, -dmin m) of rows g (s0, s2) and g + 8 (s1, s3): record bytes 2 b, 2 b + 1
            for reg, (sv, dv) in ((i_s, ("s0", "dg")), (i_s, ("s1", "d8")), (i_s + 1, ("s2", "mg")),
                                  (i_s + 1, ("s3", "m8"))):
                pos = 16 * b + (8 if sv in ("s1", "s3") else 0)
                text.append(f"bfe.u32 t, ${reg}, {pos}, 8; cvt.rn.f32.u32 f0, t; mul.f32 {sv}, {dv}, f0;")
        else:
            for r in range(4):
                w = f"${i_w + 2 * b + r % 2}"
                text.append(f"shl.b32 t, {w}, 2;" if r < 2 else f"shr.b32 t, {w}, 2;")
                s = 6 - 2 * r
                hw = f"${i_h + b}"
                text.append(f"shl.b32 u, {hw}, {s}; and.b32 u, u, 0xC0C0C0C0;" if s else f"and.b32 u, {hw}, 0xC0C0C0C0;")
                text.append(f"lop3.b32 a{r}, t, 0x3C3C3C3C, u, 0xEA;")
            # d sc_j of register r's rows and half: record word b, byte r (signed)
            for r in range(4):
                text.append(f"bfe.s32 t, ${i_s + b}, {8 * r}, 8; cvt.rn.f32.s32 f0, t; "
                            f"mul.f32 s{r}, {'dg' if r % 2 == 0 else 'd8'}, f0;")
        for j in range(mmas):
            x = i_x + 4 * j + 2 * b
            xs = f"{{${x}, ${x + 1}}}"
            e = f"${i_e + j}"
            acc = [f"${i_acc + 2 * j}" if b == 0 else f"${2 * j}", f"${i_acc + 2 * j + 1}" if b == 0 else f"${2 * j + 1}"]
            if offsets:
                text.append(f"{_MMA} {{c0, c1, c2, c3}}, {{a0, a1, a2, a3}}, {xs}, {{z, z, z, z}};")
                text.append(f"{_MMA} {{e0, e1, e2, e3}}, {{one, one, one, one}}, {xs}, {{z, z, z, z}};")
                text.append("mad.lo.s32 c0, c0, 128, c1; mad.lo.s32 c2, c2, 128, c3; mad.lo.s32 e0, e0, 128, e1; "
                            "cvt.rn.f32.s32 f0, c0; cvt.rn.f32.s32 f1, c2; cvt.rn.f32.s32 f2, e0;")
                text.append(f"mul.f32 q0, s0, {e}; mul.f32 q1, s1, {e}; mul.f32 q2, s2, {e}; mul.f32 q3, s3, {e};")
                text.append(f"fma.rn.f32 ${2 * j}, f0, q0, {acc[0]}; fma.rn.f32 ${2 * j}, f2, q2, ${2 * j};")
                text.append(f"fma.rn.f32 ${2 * j + 1}, f1, q1, {acc[1]}; fma.rn.f32 ${2 * j + 1}, f2, q3, ${2 * j + 1};")
            else:
                text.append(f"{_MMA} {{c0, c1, c2, c3}}, {{a0, a1, zb, zb}}, {xs}, {{z, z, z, z}};")
                text.append(f"{_MMA} {{e0, e1, e2, e3}}, {{zb, zb, a2, a3}}, {xs}, {{z, z, z, z}};")
                text.append("mad.lo.s32 c0, c0, 128, c1; mad.lo.s32 c2, c2, 128, c3; mad.lo.s32 e0, e0, 128, e1; "
                            "mad.lo.s32 e2, e2, 128, e3; cvt.rn.f32.s32 f0, c0; cvt.rn.f32.s32 f1, c2; "
                            "cvt.rn.f32.s32 f2, e0; cvt.rn.f32.s32 f3, e2;")
                text.append(f"mul.f32 q0, s0, {e}; mul.f32 q1, s1, {e}; mul.f32 q2, s2, {e}; mul.f32 q3, s3, {e};")
                text.append(f"fma.rn.f32 ${2 * j}, f0, q0, {acc[0]}; fma.rn.f32 ${2 * j}, f2, q2, ${2 * j};")
                text.append(f"fma.rn.f32 ${2 * j + 1}, f1, q1, {acc[1]}; fma.rn.f32 ${2 * j + 1}, f3, q3, ${2 * j + 1};")
    if mmas == 1:
        text.append(f"mov.f32 $2, ${i_acc + 2}; mov.f32 $3, ${i_acc + 3};")
    text.append("}")
    return "\n".join(text)


def fragk_constraints(fmt: str, mmas: int = 1) -> str:
    """fragk_asm's operand constraints: 4 accumulators out; in: the code words (4), q5_k's 5th-bit /
    q6_k's high-field words (4), the record (4), the lane's x scales (4), x (4 a group), accumulators (4)."""
    n_w = 8 if fmt == "q4_k" else 12
    return "=f," * 4 + "r," * n_w + "f," * 4 + "r," * 4 * mmas + "f,f,f,f"
