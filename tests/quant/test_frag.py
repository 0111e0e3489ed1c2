"""The fragment layout (quant/frag.py) and the x operand (quant/frag_x.py), checked on the CPU.

The GPU kernel runs `mma.sync` in PTX, which no CPU can run; what it computes is fixed by the PTX
ISA's fragment tables. `emulate` below is written from those tables (not from frag.py's index
maps): per lane it decodes the stored words with the same bit operations the PTX uses (lop3 under
fp16 0x6400, prmt under 0x64, the f16x2 FMA), places the values where m16n8k16 takes them, and
multiplies. That it reproduces dequantize-then-matmul shows the layout, the decoding constants and
the x pieces agree; test_gemv.py's GPU test (and bench/check_i8_cuda.py) run the real kernel
where a GPU is, tests/quant/test_frag_ptx.py the PTX text itself on the CPU.
"""

import numpy as np
import pytest
import torch

from mtp_turbo.quant.frag import FragWeight
from mtp_turbo.quant.repack import PackedWeight


def _f16(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint16).view(np.float16).astype(np.float64)


def _halves(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = r.astype(np.uint32)
    return _f16(r & 0xFFFF), _f16(r >> 16)


def _a_regs(fmt: str, qf: np.ndarray, hf, s: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The four A registers (lo, hi values) of step s, per [NT, 32] lane (one chunk), as the PTX makes them."""
    if fmt == "q8_0":
        half = qf[:, s // 2]  # [NT, 32, 4]
        wa, wb = half[..., 2 * (s % 2)], half[..., 2 * (s % 2) + 1]
        out = []
        for w in (wa, wb):
            for sel in (0, 1):  # prmt 0x4140 / 0x4342: bytes (2 sel, 2 sel + 1) under 0x64
                b0 = (w >> (16 * sel)) & 0xFF
                b1 = (w >> (16 * sel + 8)) & 0xFF
                out.append((1024.0 + b0 - 1152.0, 1024.0 + b1 - 1152.0))
        return out
    w = qf[..., s].astype(np.uint32)
    off = 16 if fmt == "q5_0" else 8
    regs = []
    for i, (src, mask) in enumerate(((w, 0x000F000F), (w, 0x00F000F0), (w >> 8, 0x000F000F), (w >> 8, 0x00F000F0))):
        r = (src & mask) | 0x64006400
        if fmt == "q5_0":
            sh = 4 - (0, 2, 8, 10)[s]
            hs = (hf.astype(np.uint32) << sh if sh > 0 else hf.astype(np.uint32) >> -sh) & 0xFFFFFFFF
            h = hs if i < 2 else hs >> 1
            r = r | (h & (0x00100010 if i % 2 == 0 else 0x01000100))
        lo, hi = _halves(r)
        if i % 2 == 0:
            regs.append((lo - 1024 - off, hi - 1024 - off))
        else:
            regs.append((lo / 16 - 64 - off, hi / 16 - 64 - off))
    return regs


def emulate(fw: FragWeight, xf: np.ndarray, xe: np.ndarray, m: int) -> np.ndarray:
    """y [m, N] from the stored arrays through m16n8k16's fragment tables (float64 products)."""
    nt, nc = fw.tiles
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    qf = fw.qf.numpy().astype(np.int64) & 0xFFFFFFFF
    hf = None if fw.hf is None else fw.hf.numpy().astype(np.int64) & 0xFFFFFFFF
    sf = fw.sf.numpy().astype(np.float64)[:, :, g]  # [NT, NC, 8, 4] -> each lane's entry [NT, NC, 32, 4]
    groups = xf.shape[3] // 2  # xf: [NC, step, lane, register (group, half)] (x_operand)
    acc = np.zeros((nt, 2, 16, 8))  # [tile, group, row, column]
    for c in range(nc):
        for b in range(2):
            d = np.zeros((nt, 2, 16, 8))
            for s in (2 * b, 2 * b + 1):
                a = np.zeros((nt, 16, 16))
                regs = _a_regs(fw.fmt, qf[:, c], None if hf is None else hf[:, c], s)
                # PTX: a0,a1 (row g), a2,a3 (row g+8), a4,a5 (row g, col+8), a6,a7 (row g+8, col+8)
                for i, (lo, hi) in enumerate(regs):
                    row = g + 8 * (i % 2)
                    col = 2 * t + 8 * (i // 2)
                    a[:, row, col], a[:, row, col + 1] = lo, hi
                for grp in range(groups):
                    bm = np.zeros((16, 8))  # B [k, n]: b0,b1 (k 2t, 2t+1), b2,b3 (k 2t+8, 2t+9), n = g
                    for half in range(2):
                        lo, hi = _halves(xf[c, s, :, 2 * grp + half])
                        bm[2 * t + 8 * half, g], bm[2 * t + 8 * half + 1, g] = lo, hi
                    d[:, grp] += a @ bm
            # C/D: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8); scale of the row's block times
            # 2^e of the column's x row (column // 2; one group: columns 4-7 are rows 0, 0, 1, 1)
            sc = np.zeros((nt, 16))
            sc[:, g], sc[:, g + 8] = sf[:, c, :, 2 * b], sf[:, c, :, 2 * b + 1]
            e = xe[c, (np.arange(8) % 4) // 2 if groups == 1 else np.arange(8) // 2]  # per column
            acc += d * sc[:, None, :, None] * e[None, None, None, :]
    y = np.zeros((m, nt * 16))
    for r in range(m):  # pieces 0, 1, 2 of row r
        p2 = acc[:, 0, :, 4 + 2 * r] if groups == 1 else acc[:, 1, :, 2 * r]
        y[r] = (acc[:, 0, :, 2 * r] + acc[:, 0, :, 2 * r + 1] + p2).reshape(-1)
    return y[:, : fw.shape[0]]


def x_operand(x: torch.Tensor, nc: int) -> tuple[np.ndarray, np.ndarray]:
    """frag_x.x_frag run in Triton's interpreter (CPU), as numpy: registers [NC, step, lane,
    (group, half)] (one group up to 2 rows: stored [NC, step pair, lane, (step % 2, half)])."""
    from mtp_turbo.quant import frag_x

    if frag_x.triton is None:
        pytest.skip("Triton is not installed")
    groups = 1 if x.shape[0] <= 2 else 2
    xf = torch.zeros(nc, 2 * groups, 32, 4, dtype=torch.int32)
    xe = torch.zeros(nc, 4, dtype=torch.float32)
    frag_x.x_frag[(nc,)](x, xf, xe, x.shape[1], x.stride(0), M=x.shape[0], PDL=False, G=groups)
    regs = xf.numpy().astype(np.int64) & 0xFFFFFFFF
    if groups == 1:
        regs = regs.reshape(nc, 2, 32, 2, 2).transpose(0, 1, 3, 2, 4).reshape(nc, 4, 32, 2)
    return regs, xe.numpy().astype(np.float64)


@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
@pytest.mark.parametrize("n,k,m", [(40, 96, 1), (16, 64, 4), (33, 160, 3), (8, 32, 2)])
def test_layout_through_fragment_tables(fmt, n, k, m):
    gen = torch.Generator().manual_seed(n * 7 + k + m)
    w = PackedWeight.from_dense(torch.randn(n, k, generator=gen), fmt)
    # x over many magnitudes (the per-chunk power-of-two scale, the three pieces)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-20, 20, (m, k), generator=gen).float())
    fw = FragWeight.from_packed(w)
    assert fw.tiles == (-(-n // 16), -(-k // 64))
    xf, xe = x_operand(x, fw.tiles[1])
    y = emulate(fw, xf, xe, m)
    ref = x.double().numpy() @ w.dequantize().double().numpy().T
    bound = (np.abs(x.double().numpy()) @ np.abs(w.dequantize().double().numpy()).T) * 2.0**-30
    assert np.all(np.abs(y - ref) <= bound + 1e-300), np.max(np.abs(y - ref) / (bound + 1e-300))


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_x_pieces_exact(m):
    # pieces times 2^e sum back to x exactly (away from fp16's subnormals); columns past the rows
    # hold zeros
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(m, 128, generator=gen) * 3.0
    xf, xe = x_operand(x, 2)
    groups = xf.shape[3] // 2
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    got = np.zeros((4, 128))
    for c in range(2):
        for s in range(4):
            for grp in range(groups):
                for half in range(2):
                    lo, hi = _halves(xf[c, s, :, 2 * grp + half])
                    if groups == 1:  # columns 0-3: pieces 0, 1 of rows 0, 1; 4, 6: piece 2; 5, 7 zero
                        row, piece_ok = (g % 4) // 2, (g < 4) | (g % 2 == 0)
                    else:
                        row, piece_ok = g // 2, (grp == 0) | (g % 2 == 0)
                    assert not lo[~piece_ok].any() and not hi[~piece_ok].any()  # the zero columns
                    col = 64 * c + 16 * s + 2 * t + 8 * half
                    for v, dc in ((lo, 0), (hi, 1)):
                        np.add.at(got, (row[piece_ok], col[piece_ok] + dc), v[piece_ok] * xe[c, row[piece_ok]])
    np.testing.assert_array_equal(got[:m], x.double().numpy())
    assert not got[m:].any()


@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0"])
def test_decoding_the_words_gives_the_matrix_back(fmt):
    # every stored code and scale at its place: the words decoded back == the packed matrix, exactly
    w = PackedWeight.from_dense(torch.randn(33, 160), fmt)
    assert torch.equal(FragWeight.from_packed(w).dequantize(), w.dequantize())


def test_padding():
    w = PackedWeight.from_dense(torch.randn(20, 96), "q4_0")
    fw = FragWeight.from_packed(w)
    nt, nc = fw.tiles
    assert fw.qf.shape == (nt, nc, 32, 4) and fw.sf.shape == (nt, nc, 8, 4) and fw.hf is None
    # padded rows / blocks carry scale 0, real ones the packed scales
    sf = fw.sf.float()
    assert float(sf[1, :, 4:].abs().sum()) == 0.0  # tile 1, g >= 4: rows 20.. and 28.. (N = 20)
    assert float(sf[1, :, :4, 0].abs().min()) > 0.0  # rows 16..19 are real
    assert float(sf[:, 1, :, 2:].abs().sum()) == 0.0  # chunk 1's second block (K = 96: 3 blocks)
