"""Can a GEMV on the file's own Q4_K bytes run near the bandwidth floor without tensor cores?

The question behind the file-bytes issue after session 27: its plane kernels built a [BN, BK] bf16
tile in registers and fed it to tl.dot, which shuffled it through shared memory; they reached
160-490 GB/s against dense bf16's 900-2660. This kernel keeps every value where its byte was
loaded: a tile is [BN rows, G chunks of 64, 32] codes (a chunk's 32 code bytes give its low and
high sub-blocks), dequantized in the loader's fp32 arithmetic and rounded to bf16 (the same values
as the dense matrix), multiplied by the activations loaded in that same shape, and reduced with
plain FMAs (no tensor core). FMT 0 is the same kernel over a dense bf16 matrix, for the cost of
the FMA reduction itself (defer: products summed in place over the K loop, one reduction at the end); FMT 6 skips the bf16 rounding of the values, FMT 7 factors the scales
out of each sub-block's sum (d sc sum(q x) - dmin m sum(x), llama.cpp's form in float): both no
longer the loader's values, there to price what the exact values cost. FMT 8 is FMT 5 with the
codes loaded as 32-bit words and turned into floats by bit arithmetic (no I2F, no byte permutes). Split-K writes partial sums (the merge is not timed: it reads NR x N x
SPLITK floats). Checks each variant against a float64 matmul of the dequantized matrix.

    python bench/experiments/fma_gemv_bench.py [--quick] [--out F]
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "quant"))
from blocks import random_blocks  # noqa: E402

from mtp_turbo.quant.planes import PlaneMatrix  # noqa: E402

Q4_K = 12
D, F, NQKV = 2560, 10240, 4096  # Gemma-3 4B
MATS = {"qkv": (NQKV, D), "o": (D, 2048), "gate_up": (2 * F, D)}


@triton.jit
def _scale_min_k4(S, m, j):
    lo = j < 4
    ba = tl.load(S + tl.where(lo, j, j + 4), mask=m, other=0).to(tl.int32)
    bb = tl.load(S + tl.where(lo, j + 4, j - 4), mask=m, other=0).to(tl.int32)
    bc = tl.load(S + j, mask=m, other=0).to(tl.int32)
    sc = tl.where(lo, ba & 63, (ba & 15) | ((bb >> 6) << 4))
    mn = tl.where(lo, bb & 63, (ba >> 4) | ((bc >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)


@triton.jit
def fma_gemv(W, QS, SC, DD, X, Y, N, K, s_qs, s_sc, s_dd,
             FMT: tl.constexpr, DEFER: tl.constexpr, NR: tl.constexpr, BN: tl.constexpr, G: tl.constexpr, SPLITK: tl.constexpr):
    pid = tl.program_id(0)
    ks = tl.program_id(1)
    rows = pid * BN + tl.arange(0, BN)[:, None, None]  # [BN, 1, 1]
    gi = tl.arange(0, G)[None, :, None]  # [1, G, 1]
    l = tl.arange(0, 32)[None, None, :]  # [1, 1, 32]
    rm = rows < N
    ri = tl.arange(0, NR)[:, None, None, None]
    acc = tl.zeros([NR, BN], tl.float32)
    acc4 = tl.zeros([NR, BN, G, 32], tl.float32)
    per = (K // 64) // SPLITK
    c0 = ks * per
    for it in range(0, per, G):
        c = c0 + it + gi  # [1, G, 1] 64-element chunks
        if FMT == 0:
            base = W + rows * K + c * 64 + l
            vlo = tl.load(base, mask=rm, other=0.0).to(tl.float32)
            vhi = tl.load(base + 32, mask=rm, other=0.0).to(tl.float32)
        elif FMT == 8:  # Q4_K from 32-bit words: nibble t of word j is element 4 j + t (low) or 32 + 4 j + t (high)
            wq = tl.load(QS.to(tl.pointer_type(tl.int32)) + rows * (s_qs // 4) + c * 8 + tl.arange(0, 8)[None, None, :],
                         mask=rm, other=0)  # [BN, G, 8]
            sh = (8 * tl.arange(0, 4))[None, None, None, :]
            nb = wq[:, :, :, None] >> sh  # [BN, G, 8, 4]
            # exact int -> float without I2F: 2^23 + n as a float's bits, minus 2^23
            flo = tl.reshape(((nb & 15) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0, (BN, G, 32))
            fhi = tl.reshape((((nb >> 4) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0, (BN, G, 32))
            sb = c // 4
            j = 2 * (c % 4) + tl.arange(0, 2)[None, None, :]
            sc, mn = _scale_min_k4(SC + rows * s_sc + sb * 12, rm, j)
            d = tl.load(DD + rows * s_dd + sb * 2, mask=rm, other=0.0).to(tl.float32)
            dm = tl.load(DD + rows * s_dd + sb * 2 + 1, mask=rm, other=0.0).to(tl.float32)
            dlo, dhi = tl.split(d * sc)
            mlo, mhi = tl.split(dm * mn)
            vlo = (flo * dlo[:, :, None] - mlo[:, :, None]).to(tl.bfloat16).to(tl.float32)
            vhi = (fhi * dhi[:, :, None] - mhi[:, :, None]).to(tl.bfloat16).to(tl.float32)
        else:
            q = tl.load(QS + rows * s_qs + c * 32 + l, mask=rm, other=0)  # [BN, G, 32]
            sb = c // 4
            j = 2 * (c % 4) + tl.arange(0, 2)[None, None, :]  # [1, G, 2]
            sc, mn = _scale_min_k4(SC + rows * s_sc + sb * 12, rm, j)  # [BN, G, 2]
            d = tl.load(DD + rows * s_dd + sb * 2, mask=rm, other=0.0).to(tl.float32)  # [BN, G, 1]
            dm = tl.load(DD + rows * s_dd + sb * 2 + 1, mask=rm, other=0.0).to(tl.float32)
            dsc = d * sc
            dmn = dm * mn
            dlo, dhi = tl.split(dsc)  # [BN, G]
            mlo, mhi = tl.split(dmn)
        xo = X + ri * K + (c * 64 + l)[None]  # [NR, 1, G, 32]
        xlo = tl.load(xo).to(tl.float32)
        xhi = tl.load(xo + 32).to(tl.float32)
        if FMT == 7:  # factored: d sc sum(q x) - dmin m sum(x) per sub-block (not the loader's values)
            qlo = (q & 15).to(tl.float32)
            qhi = (q >> 4).to(tl.float32)
            slo = tl.sum(qlo[None] * xlo, axis=3)  # [NR, BN, G]
            shi = tl.sum(qhi[None] * xhi, axis=3)
            sx_lo = tl.sum(xlo, axis=3)  # [NR, 1, G]
            sx_hi = tl.sum(xhi, axis=3)
            t = dlo[None] * slo - mlo[None] * sx_lo + dhi[None] * shi - mhi[None] * sx_hi
            acc += tl.sum(t, axis=2)
        else:
            if FMT != 0 and FMT != 8:
                vlo = (q & 15).to(tl.float32) * dlo[:, :, None] - mlo[:, :, None]
                vhi = (q >> 4).to(tl.float32) * dhi[:, :, None] - mhi[:, :, None]
                if FMT == 5:  # the loader's bf16 values
                    vlo = vlo.to(tl.bfloat16).to(tl.float32)
                    vhi = vhi.to(tl.bfloat16).to(tl.float32)
            if DEFER:  # products summed in place, across the whole K loop; reduced once at the end
                acc4 += vlo[None] * xlo + vhi[None] * xhi
            else:
                p = vlo[None] * xlo + vhi[None] * xhi  # [NR, BN, G, 32]
                acc += tl.sum(tl.sum(p, axis=3), axis=2)
    if DEFER:
        acc += tl.sum(tl.sum(acc4, axis=3), axis=2)
    ro = pid * BN + tl.arange(0, BN)
    tl.store(Y + (ks * NR + tl.arange(0, NR)[:, None]) * N + ro[None, :], acc, mask=(ro < N)[None, :])


def run(fmt, pm, dense, x, y, bn, g, splitk, warps, defer=0):
    n, k = dense.shape
    qs, sc, dd = pm.planes
    grid = (triton.cdiv(n, bn), splitk)
    fma_gemv[grid](dense, qs, sc, dd, x, y, n, k, qs.stride(0), sc.stride(0), dd.stride(0),
                   FMT=fmt, DEFER=bool(defer), NR=x.shape[0], BN=bn, G=g, SPLITK=splitk, num_warps=warps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    p.add_argument("--fmts", type=lambda t: [int(v) for v in t.split(",")], default=[0, 5, 6, 7])
    p.add_argument("--variants", default=None, help="bn:g:splitk:warps[:defer],... (default: a sweep)")
    a = p.parse_args()
    dev = torch.device("cuda")
    variants = [(bn, g, s, w) for bn in (8, 16, 32) for g in (2, 4, 8) for s in (1, 2, 4) for w in (4, 8)]
    if a.quick:
        variants = [(16, 4, 1, 4), (32, 4, 2, 4), (8, 8, 4, 4)]
    if a.variants:
        variants = [tuple(int(v) for v in t.split(":")) for t in a.variants.split(",")]
    out = {}
    from mtp_turbo.models.arch import BlockSpec
    from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan
    spec = BlockSpec(hidden=D, n_heads=8, n_kv_heads=4, head_dim=256, ffn=F, eps=1e-6, query_scale=0.0625,
                     qk_norm=True, sandwich_norms=True, activation="gelu_tanh", qkv_bias=False)
    plan = LayerPlan(spec, FusedTiles(tails=False), torch.bfloat16, dev)
    for name, (n, k) in MATS.items():
        raw = torch.from_numpy(random_blocks(Q4_K, n, k, 0, scale=1e-4)).to(dev)
        pm = PlaneMatrix.from_gguf(raw, Q4_K, (n, k))
        dense = pm.dequantize().to(torch.bfloat16).contiguous()
        for nr in (1, 4):
            x = (0.1 * torch.randn(nr, k, device=dev)).to(torch.bfloat16)
            ref = (x.double() @ dense.double().t()).float()
            yd = torch.zeros(16, n, dtype=torch.bfloat16, device=dev)
            ms = triton.testing.do_bench(lambda: plan.gemv(x, dense, yd, gated=False, head=False), warmup=5, rep=40)
            res = {"mma_dense": (ms * 1e3, dense.numel() * 2 / ms / 1e6)}
            for fmt in a.fmts:
                nbytes = dense.numel() * 2 if fmt == 0 else pm.nbytes  # (FMT 8 reads the same bytes)
                for v in variants:
                    bn, g, s, w = v[:4]
                    if (k // 64) % (s * g):
                        continue
                    y = torch.zeros(s * nr, n, dtype=torch.float32, device=dev)
                    try:
                        run(fmt, pm, dense, x, y, *v)
                        got = y.view(s, nr, n).sum(0)
                        err = float((got - ref).abs().max() / ref.abs().max())
                        ms = triton.testing.do_bench(lambda: run(fmt, pm, dense, x, y, *v), warmup=5, rep=40)
                        res[f"{fmt}/{v}"] = (ms * 1e3, nbytes / ms / 1e6, err)
                    except Exception as e:  # noqa: BLE001
                        res[f"{fmt}/{v}"] = (1e9, f"{type(e).__name__}: {str(e)[:80]}", 0)
            out[f"{name}/{nr}"] = res
            for fmt in a.fmts:
                best = min(((kk, r) for kk, r in res.items() if kk.startswith(f"{fmt}/")), key=lambda t: t[1][0])
                print(f"{name:8s} rows {nr} fmt {fmt}: best {best[0]} {best[1][0]:8.1f} us ({best[1][1]:6.0f} GB/s, "
                      f"rel err {best[1][2]:.1e}) | mma dense {res['mma_dense'][0]:8.1f} us "
                      f"({res['mma_dense'][1]:6.0f} GB/s)", flush=True)
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
