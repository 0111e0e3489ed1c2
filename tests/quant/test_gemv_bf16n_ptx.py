"""dot_bf16n's inline PTX (the nibble -> bf16 conversion), checked on the CPU: a small interpreter of
the instructions it uses (prmt, shr, lop3, shf.r.wrap, fma.rn.bf16x2, mov) runs the kernel's own
asm strings on random words and must give exactly the values the packed layout defines (repack.py:
block pairs, q5_0's permuted qh bits). On CUDA the same strings run in the GEMV tests."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from mtp_turbo.quant.repack import qh_bit

triton = pytest.importorskip("triton")
from mtp_turbo.quant import gemv_bf16n  # noqa: E402


def _bf16(bits: int) -> float:
    return float(torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item())


def _bits(value: float) -> int:
    t = torch.tensor([value], dtype=torch.float64).to(torch.bfloat16)
    assert float(t.item()) == value, f"{value} is not a bf16 value: the FMA would round"
    return int(t.view(torch.int16).item()) & 0xFFFF


def _run(asm: str, inputs: list[int]) -> list[float]:
    """Execute the asm block; $8.. are the 32-bit inputs, $0..$7 the bf16 outputs."""
    reg = {f"${8 + i}": v for i, v in enumerate(inputs)}
    out: dict[str, int] = {}

    def val(x: str) -> int:
        return int(x, 16) if x.startswith("0x") else int(x) if x.isdigit() else reg[x]

    for st in (s.strip() for s in re.split(r";\s*", asm.strip()[1:-1])):
        if not st or st.startswith(".reg"):
            continue
        op, rest = st.split(None, 1)
        a = [x.strip() for x in rest.split(",")]
        if op == "mov.b32" and rest.startswith("{"):
            m = re.match(r"\{(\$\d), (\$\d)\}, (\w+)", rest)
            out[m.group(1)], out[m.group(2)] = reg[m.group(3)] & 0xFFFF, reg[m.group(3)] >> 16
        elif op == "mov.b32":
            reg[a[0]] = val(a[1])
        elif op == "shr.u32":
            reg[a[0]] = val(a[1]) >> int(a[2])
        elif op == "prmt.b32":  # default mode: byte i of d = byte (selector nibble i & 7) of {b, a}
            src, sel = val(a[1]) | (val(a[2]) << 32), val(a[3])
            reg[a[0]] = sum(((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "lop3.b32":
            assert a[4] == "0xEA"  # (a & b) | c
            reg[a[0]] = (val(a[1]) & val(a[2])) | val(a[3])
        elif op == "shf.r.wrap.b32":  # funnel shift of {a, a}: rotate right by n mod 32
            assert a[1] == a[2]
            x, n = val(a[1]), val(a[3]) & 31
            reg[a[0]] = ((x >> n) | (x << (32 - n))) & 0xFFFFFFFF
        elif op == "fma.rn.bf16x2":
            x, y, z = val(a[1]), val(a[2]), val(a[3])
            reg[a[0]] = sum(_bits(_bf16((x >> s) & 0xFFFF) * _bf16((y >> s) & 0xFFFF) + _bf16((z >> s) & 0xFFFF)) << s
                            for s in (0, 16))
        else:
            raise AssertionError(f"instruction not modelled: {st}")
    return [_bf16(out[f"${i}"]) for i in range(8)]


def test_q4_0_words_convert_exactly():
    rng = np.random.default_rng(0)
    words = [0, 0xFFFFFFFF, 0x0F0F0F0F, 0xF0F0F0F0] + [int(v) for v in rng.integers(0, 2 ** 32, 200)]
    for w in words:
        b = [(w >> (8 * i)) & 0xFF for i in range(4)]
        want = [(x & 15) - 8 for x in b] + [(x >> 4) - 8 for x in b]  # block A (low), block B (high)
        assert _run(gemv_bf16n._Q4_ASM.value, [w]) == want, hex(w)


def test_q5_0_words_convert_exactly():
    rng = np.random.default_rng(1)
    for t in range(200):
        w, ha, hb = (int(v) for v in rng.integers(0, 2 ** 32, 3))
        if t < 4:  # all-zero and all-one bits, both nibbles
            w, ha, hb = [(0, 0, 0), (0xFFFFFFFF,) * 3, (0x0F0F0F0F, 0xFFFFFFFF, 0), (0xF0F0F0F0, 0, 0xFFFFFFFF)][t]
        k = t % 8  # the word's place in its pair
        b = [(w >> (8 * i)) & 0xFF for i in range(4)]
        bit = lambda h, i: (h >> qh_bit(4 * k + i)) & 1  # noqa: E731
        want = [(b[i] & 15) + 16 * bit(ha, i) - 16 for i in range(4)] + [(b[i] >> 4) + 16 * bit(hb, i) - 16 for i in range(4)]
        assert _run(gemv_bf16n._Q5_ASM.value, [w, ha, hb, (k + 28) & 31, k + 4]) == want, (hex(w), k)


def test_qh_bit_is_a_permutation():
    assert sorted(qh_bit(j) for j in range(32)) == list(range(32))
    for k in range(8):  # elements 4k, 4k+1 (4k+2, 4k+3) 16 bits apart: one rotate serves both
        assert qh_bit(4 * k + 1) - qh_bit(4 * k) == 16 and qh_bit(4 * k + 3) - qh_bit(4 * k + 2) == 16
