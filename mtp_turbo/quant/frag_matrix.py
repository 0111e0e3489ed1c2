"""A matrix held as int8 fragment layouts of the file's own bytes, for the frag8 GEMV on integer tensor cores.

Owns: `FragMatrix` (the rows of one fused GEMV: runs of rows in one format, each a layout: a
FragKWeight for Q4_K / Q5_K / Q6_K (kernels/fragk.py), a Frag8Weight for Q8_0 / Q5_0 / Q4_0 (kernels/frag8.py),
each with its split counters), `frag_matrix` (built from the parts' GGUF bytes; None when a part's
format has no layout), its GEMV (1-4 rows a launch, each run with one fixed split; more rows, the
prefill chunks, through kernels/frag_gemm.py with the same bits a row), its values (`dense`, the
loader's: the torch forward) and rows (`row_values`: a tied embedding). Ignores: which matrices a
model has (models/load.py), the kernels (kernels/), the epilogues (models/layer_plan.py).

Why: a decode step must read the file's bytes, not a dense bf16 copy 3.5x larger (the file-bytes
issue). Unlike the dense path the result is not the bf16 matrix's: x is taken to 2^-28 of its
chunk's largest value and each 32-block (16 for Q6_K) summed exactly in int32, so an output is
within fp32 rounding of x times the file's exact values. A row's bits never depend on the rows
beside it: a run's split is fixed at build, whatever the row count (frag8 and frag8x make the same
x words; the GEMM repeats the GEMV's float steps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from gguf import GGMLQuantizationType as T

from .gemv import TileConfig
from .repack import PackedWeight, fmt_name

BLOCK_TYPES = (T.Q8_0, T.Q5_0, T.Q4_0)  # frag8's formats (a PackedWeight's layout)
K_TYPES = (T.Q4_K, T.Q5_K, T.Q6_K)  # fragk's
FRAG_TYPES = frozenset(int(t) for t in BLOCK_TYPES + K_TYPES)
K_INTS = frozenset(int(t) for t in K_TYPES)
ROWS = 4  # rows one launch takes (two mma groups of two)
GEMM_ROWS = 8  # more rows than this (prefill chunks) go through frag_gemm.py: one read of the weights a chunk
# launches of up to this many rows make x's int8 words inside the GEMV (tile kernel frag8x: one launch,
# not x_frag8 + the GEMV; the same words and bits, tests/quant/test_frag8_gemv.py). Decode steps are
# chains of dependent launches (~4.7 us a launch in the 270M step, RESULTS session 24); at 3-4 rows
# frag8x measured slower on 8192 x 8192 (27.8 against 19.0 us, RESULTS session 8)
X_INSIDE_ROWS = 2


def frag_runs(device) -> bool:
    """True where the frag8 GEMV runs: CUDA of compute capability 9.0 or more with Gluon."""
    device = torch.device(device)
    if device.type != "cuda":
        return False
    from .kernels import frag8_gemv

    return frag8_gemv.available() and torch.cuda.get_device_capability(device)[0] >= 9


def split_for(n: int, k: int, sms: int = 132) -> int:
    """Parts of K a run is split into: enough programs (4 warps, 8 row tiles each) for 2 on each of
    the device's sms (an H200's 132 by default), at least 2 chunks of 64 a part; a power of two."""
    programs = -(-n // 128)
    chunks = k // 64
    split = 1
    while programs * split < 2 * sms and chunks // (2 * split) >= 2:
        split *= 2
    return split


@dataclass(frozen=True)
class Run:
    """Rows [r0, r1) of a FragMatrix: one layout and its tile."""

    r0: int
    r1: int
    layout: object  # FragKWeight (Q4_K, Q5_K, Q6_K) or Frag8Weight (Q8_0, Q5_0, Q4_0), with its counters
    tile: TileConfig


@dataclass(frozen=True, eq=False)
class FragMatrix:
    """The rows one fused GEMV reads (module docstring). Build with `frag_matrix`."""

    shape: tuple[int, int]
    runs: tuple[Run, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> list[torch.Tensor]:
        """The device tensors holding the layouts."""
        return [t for r in self.runs for t in (r.layout.qf, r.layout.sf, getattr(r.layout, "df", None),
                                                r.layout.hf, r.layout.counters) if t is not None]

    def gemv(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out[:M] = x [M, K] @ values.T in float32 (out: float32 [>= M, N], unit column stride).
        Rows go ROWS a launch; each run writes its columns. Returns out[:M]."""
        from .kernels import frag8_gemv, frag_gemm

        M, K = x.shape
        assert K == self.shape[1] and out.dtype == torch.float32 and out.shape[1] == self.shape[0], (x.shape, out.shape)
        if M > GEMM_ROWS:  # a prefill chunk: the GEMM with the GEMV's arithmetic (each row the same bits)
            pieces = frag_gemm.make_pieces(x, self.runs[0].layout.tiles[1])  # x's pieces once for every run
            for r in self.runs:
                frag_gemm.launch(x, r.layout, r.tile.split_k, out[:M, r.r0:r.r1], pieces=pieces)
            return out[:M]
        for m0 in range(0, M, ROWS):
            m1 = min(M, m0 + ROWS)
            for r in self.runs:
                tile = r.tile if m1 - m0 > X_INSIDE_ROWS else dataclasses.replace(r.tile, kernel="frag8x")
                frag8_gemv.launch(x[m0:m1], r.layout, tile, out[m0:m1, r.r0:r.r1])
        return out[:M]

    def row_values(self, index: torch.Tensor) -> torch.Tensor:
        """float32 [T, K]: the loader's values of rows `index` of a one-run matrix (a tied embedding
        gathered from the head's layout, so no second copy of its bytes is held)."""
        assert len(self.runs) == 1, "rows of a one-run matrix"
        return self.runs[0].layout.row_values(index)

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K]: the loader's values (the whole matrix)."""
        return self.dense(torch.float32)

    def dense(self, dtype: torch.dtype) -> torch.Tensor:
        """The matrix as the loader makes it (float32 values, then dtype)."""
        parts = []
        for r in self.runs:
            v = r.layout.dequantize()
            parts.append(v.float().to(dtype))
        return torch.cat(parts)


def frag_matrix(parts) -> FragMatrix | None:
    """The FragMatrix of matrices stacked by rows, each part (raw uint8 bytes as in the file, ggml
    type, (n, k)); consecutive parts of one type share a layout. None when a part's type has none
    (the caller keeps another form)."""
    from .kernels.frag8 import Frag8Weight
    from .kernels.fragk import FragKWeight

    if not parts or any(int(t) not in FRAG_TYPES for _, t, _ in parts):
        return None
    groups: list[list] = []
    for raw, t, shape in parts:
        if groups and groups[-1][0] == int(t):
            groups[-1][1].append((raw, shape))
        else:
            groups.append([int(t), [(raw, shape)]])
    runs, r0 = [], 0
    k = parts[0][2][1]
    dev = parts[0][0].device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 132
    for t, ps in groups:
        n = sum(s[0] for _, s in ps)
        raw = torch.cat([r.reshape(-1) for r, _ in ps])
        if t in K_INTS:
            layout = FragKWeight.from_gguf(raw, t, (n, k))
        else:  # the PackedWeight is a step on the way: only its frag8 layout is kept
            fw = Frag8Weight.from_packed(PackedWeight.from_gguf_bytes(raw, fmt_name(t), (n, k)).to(raw.device))
            layout = dataclasses.replace(fw, counters=torch.zeros(fw.tiles[0], dtype=torch.int32, device=raw.device))
        runs.append(Run(r0, r0 + n, layout, TileConfig("frag8", 32, 64, 4, 2, split_for(n, k, sms))))
        r0 += n
    return FragMatrix((r0, k), tuple(runs))
