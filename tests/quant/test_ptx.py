"""The frag8 GEMV's inline PTX itself (quant/kernels/ptx.py), run on the CPU: a small warp interpreter of the
instructions the text uses (lop3, and, shr/shl, mad, cvt, f32 mul/FMA, mov and the warp-wide mma.sync
m16n8k32 .s8, the latter from the PTX ISA's fragment tables) executes `frag8_asm(fmt)` for the 32
lanes of a warp over every tile and chunk of a packed matrix, with the operands the kernel passes
(pack=4), and the result must match dequantize-then-matmul. On CUDA the same text runs in the GEMV
tests (`pytest -m gpu`, bench/check_i8_cuda.py); here it guards the text in CI, which has no GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from mtp_turbo.quant.kernels.frag8 import SHIFT, Frag8Weight
from mtp_turbo.quant.kernels.fragk import SHIFT as SHIFT_K, FragKWeight
from mtp_turbo.quant.kernels.ptx import frag8_asm, fragk_asm
from mtp_turbo.quant.repack import PackedWeight

pytest.importorskip("triton")
from mtp_turbo.quant.kernels import frag8_x  # noqa: E402

from triton._C.libtriton import interpreter as _tri  # noqa: E402

_fma32 = _tri.fma_fp32
LANE = np.arange(32)
G, T = LANE // 4, LANE % 4


def _h2f(bits: np.ndarray) -> np.ndarray:
    return (bits & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)


def _f32(bits: np.ndarray) -> np.ndarray:
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)


def _b32(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)


def _s8(bits: np.ndarray) -> np.ndarray:
    b = (bits & 0xFF).astype(np.int64)
    return b - 256 * (b >= 128)


def _s32(bits: np.ndarray) -> np.ndarray:
    b = (bits & 0xFFFFFFFF).astype(np.int64)
    return b - 2**32 * (b >= 2**31)


def run_warp(asm: str, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Execute asm for 32 lanes in lockstep; inputs/outputs: operand number -> uint64 bits [32]."""
    reg = {f"${k}": v.astype(np.uint64) & 0xFFFFFFFF for k, v in inputs.items()}

    def val(tok: str) -> np.ndarray:
        if tok.startswith("0x"):
            return np.full(32, int(tok, 16), dtype=np.uint64)
        if tok.startswith("0f"):
            return np.full(32, int(tok[2:], 16), dtype=np.uint64)
        if tok.isdigit():
            return np.full(32, int(tok), dtype=np.uint64)
        return reg[tok]

    body = asm.strip()
    assert body[0] == "{" and body[-1] == "}"
    for st in (s.strip() for s in body[1:-1].split(";")):
        if not st or st.startswith(".reg"):
            continue
        op, rest = st.split(None, 1)
        if op.startswith("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"):
            d, a, b, c = ([t.strip() for t in grp.split(",")] for grp in re.findall(r"\{([^}]*)\}", rest))
            am = np.zeros((16, 32), dtype=np.int64)
            for i, r in enumerate(a):  # a0: row g, k 4t..4t+3; a1: row g+8; a2, a3: k + 16 (PTX ISA, .s8)
                for h in range(4):
                    am[G + 8 * (i % 2), 4 * T + 16 * (i // 2) + h] = _s8(val(r) >> np.uint64(8 * h))
            bm = np.zeros((32, 8), dtype=np.int64)  # b0: k 4t..4t+3, b1: k + 16; column g
            for i, r in enumerate(b):
                for h in range(4):
                    bm[4 * T + 16 * i + h, G] = _s8(val(r) >> np.uint64(8 * h))
            cm = np.zeros((16, 8), dtype=np.int64)
            for i, r in enumerate(c):
                cm[G + 8 * (i // 2), 2 * T + i % 2] = _s32(val(r))
            dm = am @ bm + cm
            assert np.all(np.abs(dm) < 2**31)
            for i, r in enumerate(d):
                reg[r] = dm[G + 8 * (i // 2), 2 * T + i % 2].astype(np.uint64) & 0xFFFFFFFF
            continue
        ops = [t.strip() for t in rest.split(",")]
        if op == "mov.b32" and rest.startswith("{"):
            m = re.match(r"\{(\w+), (\w+)\}, (\$\d+)", rest)
            reg[m.group(1)], reg[m.group(2)] = val(m.group(3)) & 0xFFFF, val(m.group(3)) >> 16
        elif op in ("mov.b32", "mov.f32", "mov.s32"):
            reg[ops[0]] = val(ops[1])
        elif op == "lop3.b32":
            a, b, c = (val(t) for t in ops[1:4])
            assert ops[4] in ("0xEA", "0x6A"), ops[4]  # (a & b) | c, (a & b) ^ c
            reg[ops[0]] = ((a & b) | c) if ops[4] == "0xEA" else ((a & b) ^ c)
        elif op == "and.b32":
            reg[ops[0]] = val(ops[1]) & val(ops[2])
        elif op == "mad.lo.s32":
            reg[ops[0]] = (_s32(val(ops[1])) * _s32(val(ops[2])) + _s32(val(ops[3]))).astype(np.uint64) & 0xFFFFFFFF
        elif op == "cvt.rn.f32.s32":
            reg[ops[0]] = _b32(_s32(val(ops[1])).astype(np.float64))
        elif op in ("bfe.u32", "bfe.s32"):
            f = (val(ops[1]) >> int(ops[2])) & ((1 << int(ops[3])) - 1)
            if op == "bfe.s32":
                f = (f.astype(np.int64) - (1 << int(ops[3])) * (f >= (1 << (int(ops[3]) - 1)))).astype(np.uint64)
            reg[ops[0]] = f & 0xFFFFFFFF
        elif op == "cvt.rn.f32.u32":
            reg[ops[0]] = _b32((val(ops[1]) & 0xFFFFFFFF).astype(np.float64))
        elif op == "neg.f32":
            reg[ops[0]] = _b32(-_f32(val(ops[1])))
        elif op == "shr.b32":
            reg[ops[0]] = val(ops[1]) >> int(ops[2])
        elif op == "shl.b32":
            reg[ops[0]] = (val(ops[1]) << int(ops[2])) & 0xFFFFFFFF
        elif op == "cvt.f32.f16":
            reg[ops[0]] = _b32(_h2f(val(ops[1])))
        elif op == "mul.f32":
            reg[ops[0]] = _b32(_f32(val(ops[1])).astype(np.float32) * _f32(val(ops[2])).astype(np.float32))
        elif op == "fma.rn.f32":  # one rounding (the interpreter's fp32 fma)
            a, b, c = (_f32(val(t)).astype(np.float32) for t in ops[1:4])
            reg[ops[0]] = np.asarray(_fma32(a, b, c), dtype=np.float32).view(np.uint32).astype(np.uint64)
        else:
            raise AssertionError(f"instruction not modelled: {st}")
    return {k: reg[f"${k}"] for k in range(8)}


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
def test_frag8_asm_matches_dequantized_matmul(fmt, m):
    """frag8_asm (integer mma) over every tile and chunk, operands as frag8_gemv passes them, the
    store's join of lanes t and t ^ 1; x spans 16 binades inside each chunk."""
    n, k = 24, 160
    gen = torch.Generator().manual_seed(7)
    w = PackedWeight.from_dense(torch.randn(n, k, generator=gen), fmt)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-8, 8, (m, k), generator=gen).float())
    y = _warp_rows(fmt, Frag8Weight.from_packed(w), x, None).astype(np.float64)
    ref = x.double().numpy() @ w.dequantize().double().numpy().T
    bound = (np.abs(x.double().numpy()) @ np.abs(w.dequantize().double().numpy()).T) * 2.0 ** -21
    assert np.all(np.abs(y - ref) <= bound), np.max(np.abs(y - ref) / bound)


def _warp_gemv(asm, nt, nc, mm, m, operands, cps=None):
    """Run asm over every tile and chunk (operands(tile, c) -> the lane's input registers before the
    accumulators), join lanes t and t ^ 1 as the store does, in float32: y [m, nt * 16]. cps: chunks
    a split (the kernel's split-K: each split's joined partial, then 0 + P_0 + P_1 + .. in order)."""
    y = np.zeros((m, nt * 16), dtype=np.float32)
    cps = cps or nc
    splits = [(c0, min(nc, c0 + cps)) for c0 in range(0, nc, cps)]
    for tile in range(nt):
        parts = []
        for c0, c1 in splits:
            acc = [np.zeros(32, dtype=np.uint64) for _ in range(4)]
            for c in range(c0, c1):
                out = run_warp(asm, {4 + i: v for i, v in enumerate(operands(tile, c) + acc)})
                acc = [out[i] for i in range(4)]
            parts.append([_f32(v).astype(np.float32) for v in acc])
        for j in range(mm):
            for row_off, i in ((0, 2 * j), (8, 2 * j + 1)):
                vs = [a[i] + a[i][LANE ^ 1] for a in parts]  # float32 adds
                v = vs[0] if len(vs) == 1 else np.float32(0)
                if len(vs) > 1:
                    for p in vs:
                        v = v + p
                row = 2 * j + T // 2
                keep = (T % 2 == 0) & (row < m)
                y[row[keep], tile * 16 + G[keep] + row_off] = np.broadcast_to(v, (32,))[keep]
    return y


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("fmt", ["q4_k", "q5_k", "q6_k"])
def test_fragk_asm_matches_the_file_values(fmt, m):
    """fragk_asm over every tile and chunk of a random Q4_K / Q5_K / Q6_K matrix (N with a padded tile), the
    operands as frag8_gemv passes them: within fp32 rounding of x @ the file's exact values."""
    from gguf import GGMLQuantizationType as GT

    from mtp_turbo.quant.dequant import k_fields

    t = {"q4_k": GT.Q4_K, "q5_k": GT.Q5_K, "q6_k": GT.Q6_K}[fmt]
    n, k = 24, 512
    raw = torch.from_numpy(_blocks().random_blocks(t, n, k, seed=m, scale=0.05))
    fw = FragKWeight.from_gguf(raw, t, (n, k))
    wv = fw.dequantize().numpy()
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-8, 8, (m, k), generator=gen).float())
    y = _warp_rows(fmt, fw, x, None).astype(np.float64)
    xd = x.double().numpy()
    ref = xd @ wv.T
    mag = np.abs(wv)
    if fmt in ("q4_k", "q5_k"):  # the offset's share is summed apart: its terms bound the rounding too
        f = k_fields(raw, t, (n, k))
        off = (f["dmin"].double().repeat_interleave(8, 1) * f["m"].double()).repeat_interleave(32, 1).numpy()
        mag = mag + 2 * np.abs(off)
    bound = (np.abs(xd) @ mag.T) * 2.0 ** -21
    assert np.all(np.abs(y - ref) <= bound), np.max(np.abs(y - ref) / bound)


def _blocks():
    """tests/quant/blocks.py (random GGUF blocks), imported by path."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import blocks
    return blocks


def _warp_rows(fmt, fw, x, cps):
    """The decode GEMV's float32 outputs for every row of x: the PTX in the warp interpreter, 4 rows a
    launch (x_frag8's words for each launch), split into chunks of cps."""
    asm_of = fragk_asm if fmt in SHIFT_K else frag8_asm
    shift = SHIFT_K[fmt] if fmt in SHIFT_K else SHIFT[fmt]
    nt, nc = fw.tiles
    k = x.shape[1]
    u32 = (lambda t: t.numpy().view(np.uint32).astype(np.uint64))
    qf = u32(fw.qf)
    hf = None if fw.hf is None else u32(fw.hf)
    ys = []
    for m0 in range(0, x.shape[0], 4):
        xr = x[m0:m0 + 4].contiguous()
        m = xr.shape[0]
        mm = 1 if m <= 2 else 2
        xf = torch.zeros(nc, mm, 32, 4, dtype=torch.int32)
        xe = torch.zeros(nc, 4, 4, dtype=torch.float32)
        frag8_x.x_frag8[(nc,)](xr, xf, xe, k, xr.stride(0), M=m, MM=mm, SHIFT=shift, PDL=False)
        xf, xe = u32(xf), u32(xe)

        def operands(tile, c):
            if fmt in SHIFT_K:
                rec = u32(fw.record())
                ops = [qf[tile, c, :, i] for i in range(4)]
                if fmt == "q5_k":
                    ops += [hf[tile, c]] * 4
                if fmt == "q6_k":
                    ops += [hf[tile, c, :, i % 2] for i in range(4)]
                ops += [rec[tile, c, G, i] for i in range(4)]
            else:
                ops = [qf[tile, c, b, :, r] for b in range(2) for r in range(4)] if fmt == "q8_0" else \
                    [qf[tile, c, :, i] for i in range(4)]
                if fmt == "q5_0":
                    ops += [hf[tile, c]] * 4
                s = fw.sf.numpy().view(np.uint16).astype(np.uint64)[tile, c, G]
                ops += [s[:, 0] | (s[:, 1] << np.uint64(16)), s[:, 2] | (s[:, 3] << np.uint64(16))]
            ops += [xe[c, T, j] for j in range(4)]
            return ops + [xf[c, j, :, r] for j in range(mm) for r in range(4)]

        ys.append(_warp_gemv(asm_of(fmt, mm), nt, nc, mm, m, operands, cps))
    return np.concatenate(ys)[:, :fw.shape[0]]


@pytest.mark.parametrize("fmt", ["q8_0", "q5_0", "q4_0", "q4_k", "q5_k", "q6_k"])
def test_prefill_gemm_gives_the_decode_gemv_s_bits(fmt):
    """frag_gemm.gemm_frag (the prefill chunks' GEMM, Triton interpreter) against the decode GEMV's PTX
    (the warp interpreter, 4 rows a launch): the same float32 bits for every row, whole and split
    over K (3 chunks a split: a short last split), N with a padded tile, rows past a program's 16."""
    from gguf import GGMLQuantizationType as GT

    from mtp_turbo.quant.kernels import frag_gemm

    random_blocks = _blocks().random_blocks

    n, k, m = 40, 512, 18
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-6, 6, (m, k), generator=gen).float())
    x[3] = 0.0  # a zero row: E = 0, every piece 0
    if fmt in ("q4_k", "q5_k", "q6_k"):
        t = {"q4_k": GT.Q4_K, "q5_k": GT.Q5_K, "q6_k": GT.Q6_K}[fmt]
        fw = FragKWeight.from_gguf(torch.from_numpy(random_blocks(t, n, k, seed=5, scale=0.05)), t, (n, k))
    else:
        fw = Frag8Weight.from_packed(PackedWeight.from_dense(torch.randn(n, k, generator=gen), fmt))
    nc = fw.tiles[1]
    for split in (1, 3):
        cps = -(-nc // split)
        want = _warp_rows(fmt, fw, x, cps)
        for tiles in ((None, None), frag_gemm.TILES):  # the small chunks' tiles, then the long ones' (masked rows)
            got = torch.full((m, n), float("nan"))
            frag_gemm.launch(x, fw, split, got, *tiles)
            assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32)), (
                split, tiles, int((got.numpy() != want).sum()))
