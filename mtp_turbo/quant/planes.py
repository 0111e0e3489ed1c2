"""A weight matrix held as the file's own bytes, in planes the fused GEMV reads tile by tile.

Owns: `PlaneMatrix` (one [N, K] matrix in one GGUF block format, its blocks' fields split into
planes: codes, high bits, packed scales, block scales, each row-major [N, row bytes], so a tile's
bytes are contiguous and aligned), built from the file's raw bytes and turned back into them
(`gguf_bytes`: the exact inverse); `FusedWeight`, the matrix a fused GEMV launch reads (the fused
q|k|v or gate|up rows): one or two segments of rows, each a PlaneMatrix or a dense bf16 matrix, and
the kernel arguments of each. Ignores: the tile arithmetic (models/weight_tiles.py), which matrices
a model has (models/load.py), the drafter's packed weights (repack.py).

Why planes: ggml's blocks (34, 22, 210 bytes) put a row's codes at odd offsets; split by field, a
tile's codes load as aligned vectors. The planes hold exactly the file's bytes (plus at most 15
bytes of alignment each): resident memory stays the file's size. Measured slower than dense bf16
matrices at every size so far (bench/RESULTS.md session 27): EngineConfig.file_weights is auto, on only
where the dense copy would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from .dequant import dequantize

# format -> the planes of a block: (first byte in the ggml block, bytes, dtype), in kernel order.
# The kernels (models/weight_tiles.py) name them: Q8_0 (qs, d); Q4_0 (qs, d); Q4_1 (qs, d, m);
# Q5_0 (qs, qh, d); Q4_K (qs, scales, d|dmin); Q5_K (qs, qh, scales, d|dmin); Q6_K (ql, qh, scales, d).
PLANES: dict[int, tuple[tuple[int, int, torch.dtype], ...]] = {
    T.Q8_0: ((2, 32, torch.int8), (0, 2, torch.float16)),
    T.Q4_0: ((2, 16, torch.uint8), (0, 2, torch.float16)),
    T.Q4_1: ((4, 16, torch.uint8), (0, 2, torch.float16), (2, 2, torch.float16)),
    T.Q5_0: ((6, 16, torch.uint8), (2, 4, torch.int32), (0, 2, torch.float16)),
    T.Q4_K: ((16, 128, torch.uint8), (4, 12, torch.uint8), (0, 4, torch.float16)),
    T.Q5_K: ((48, 128, torch.uint8), (16, 32, torch.uint8), (4, 12, torch.uint8), (0, 4, torch.float16)),
    T.Q6_K: ((0, 128, torch.uint8), (128, 64, torch.uint8), (192, 16, torch.int8), (208, 2, torch.float16)),
}
# the kernels' format codes (FMT constexpr); DENSE: a bf16 / activation-dtype matrix [N, K]
DENSE = 0
FORMAT_CODE = {T.Q8_0: 1, T.Q4_0: 2, T.Q4_1: 3, T.Q5_0: 4, T.Q4_K: 5, T.Q5_K: 6, T.Q6_K: 7}
# elements a tile of each format is built from (models/weight_tiles.py): a GEMV's K step is a multiple
CHUNK = {DENSE: 1, 1: 32, 2: 32, 3: 32, 4: 32, 5: 64, 6: 64, 7: 128}
ALIGN = 16


def plane_format(ggml_type: int) -> bool:
    """True when the fused GEMV reads this GGUF type from its own bytes."""
    return int(ggml_type) in PLANES


@dataclass(frozen=True, eq=False)
class PlaneMatrix:
    """[n, k] in GGUF type `ggml_type`; planes: tensors [n, row units] (views into one buffer)."""

    ggml_type: int
    n: int
    k: int
    planes: tuple[torch.Tensor, ...]

    @classmethod
    def from_gguf(cls, raw: torch.Tensor, ggml_type: int, shape: tuple[int, int]) -> "PlaneMatrix":
        """The planes of the file's bytes `raw` (uint8, the tensor as stored) of a [n, k] matrix,
        on raw's device."""
        t = T(int(ggml_type))
        n, k = (int(s) for s in shape)
        block, size = GGML_QUANT_SIZES[t]
        assert k % block == 0 and raw.numel() == n * k // block * size, (t.name, shape, raw.numel())
        blocks = raw.reshape(n, k // block, size)
        rows = [(k // block) * nb for _, nb, _ in PLANES[t]]
        starts, total = [], 0
        for r in rows:
            starts.append(total)
            total += -(-n * r // ALIGN) * ALIGN
        buf = torch.empty(total, dtype=torch.uint8, device=raw.device)
        planes = []
        for (b0, nb, dt), r, s in zip(PLANES[t], rows, starts):
            p = buf[s:s + n * r].view(n, k // block, nb)
            p.copy_(blocks[:, :, b0:b0 + nb])
            planes.append(buf[s:s + n * r].view(dt).view(n, -1))
        return cls(int(t), n, k, tuple(planes))

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.planes)

    def gguf_bytes(self) -> torch.Tensor:
        """The file's bytes again (uint8, 1-D): the exact inverse of from_gguf."""
        t = T(self.ggml_type)
        block, size = GGML_QUANT_SIZES[t]
        out = torch.empty((self.n, self.k // block, size), dtype=torch.uint8, device=self.planes[0].device)
        for (b0, nb, _), p in zip(PLANES[t], self.planes):
            out[:, :, b0:b0 + nb] = p.contiguous().view(torch.uint8).view(self.n, self.k // block, nb)
        return out.reshape(-1)

    def dequantize(self) -> torch.Tensor:
        """float32 [n, k], bit-identical to quant/dequant.py on the file's bytes (the loader's values)."""
        return dequantize(self.gguf_bytes(), self.ggml_type, (self.n, self.k))

    def finite_sum(self) -> torch.Tensor:
        """A float32 scalar that is finite iff every value is: the sum of the float planes (block
        scales and minimums; the other planes are integer codes, and a finite scale times a code
        stays far inside float32). The loader's NaN check without dequantizing the matrix."""
        return sum(p.float().sum() for p in self.planes if p.dtype.is_floating_point)

    def row_values(self, index: torch.Tensor) -> torch.Tensor:
        """float32 [T, K]: the loader's values of rows `index` (embedding rows)."""
        return self.rows(index).dequantize()

    def rows(self, index: torch.Tensor) -> "PlaneMatrix":
        """The rows `index` (int64 [T], on the planes' device) as a PlaneMatrix of their own (copies;
        no host sync: capturable in a CUDA graph)."""
        return PlaneMatrix(self.ggml_type, int(index.shape[0]), self.k,
                           tuple(p.index_select(0, index) for p in self.planes))


def _args(seg) -> tuple:
    """A segment's kernel arguments: (fmt code, (P0, P1, P2, P3, S0, S1, S2, S3)), plane tensors
    and their row strides in elements (absent planes repeat P0 with stride 0)."""
    if isinstance(seg, torch.Tensor):
        return DENSE, (seg, seg, seg, seg, seg.stride(0), 0, 0, 0)
    ps = list(seg.planes) + [seg.planes[0]] * (4 - len(seg.planes))
    ss = [p.stride(0) for p in seg.planes] + [0] * (4 - len(seg.planes))
    return FORMAT_CODE[seg.ggml_type], (*ps, *ss)


@dataclass(frozen=True, eq=False)
class FusedWeight:
    """The rows one fused GEMV launch reads: rows [0, split) from `a`, [split, n) from `b` (None: all
    from a). Each segment a PlaneMatrix or a dense matrix in the activation dtype."""

    a: object
    b: object = None

    def __post_init__(self):
        for s in (self.a, self.b):
            assert s is None or isinstance(s, (PlaneMatrix, torch.Tensor)), type(s)

    @staticmethod
    def rows_of(seg) -> int:
        return seg.shape[0] if isinstance(seg, torch.Tensor) else seg.n

    @staticmethod
    def cols_of(seg) -> int:
        return seg.shape[1] if isinstance(seg, torch.Tensor) else seg.k

    @property
    def split(self) -> int:
        return self.rows_of(self.a)

    @property
    def shape(self) -> tuple[int, int]:
        n = self.split + (0 if self.b is None else self.rows_of(self.b))
        return n, self.cols_of(self.a)

    @property
    def nbytes(self) -> int:
        def size(s):
            return 0 if s is None else s.numel() * s.element_size() if isinstance(s, torch.Tensor) else s.nbytes
        return size(self.a) + size(self.b)

    @property
    def chunk(self) -> int:
        """The K step every segment's tiles are built from (a GEMV's BK must be a multiple)."""
        return max(CHUNK[_args(s)[0]] for s in (self.a, self.b) if s is not None)

    def kernel_args(self) -> tuple:
        """(FA, A, FB, B, split): the segments' format codes and argument tuples (B = A's when
        there is one segment; split = n then)."""
        fa, a = _args(self.a)
        if self.b is None:
            return fa, a, fa, a, self.shape[0]
        fb, b = _args(self.b)
        return fa, a, fb, b, self.split

    def dense(self, dtype: torch.dtype) -> torch.Tensor:
        """The matrix as the loader makes it: each segment dequantized (float32) then rounded to dtype."""
        def d(s):
            return s.to(dtype) if isinstance(s, torch.Tensor) else s.dequantize().to(dtype)
        return d(self.a) if self.b is None else torch.cat([d(self.a), d(self.b)])


def fused_weight(parts, dtype: torch.dtype) -> FusedWeight:
    """The FusedWeight of matrices stacked by rows, each part (raw uint8 bytes as in the file,
    ggml type, (n, k)): runs of one plane format become one PlaneMatrix, other types the loader's
    dense values in dtype. More than two runs (no model file seen mixes three) fall back to one
    dense matrix: correct, not small."""
    runs: list[list] = []
    for raw, t, shape in parts:
        key = int(t) if plane_format(t) else DENSE
        if runs and runs[-1][0] == key:
            runs[-1][1].append((raw, t, shape))
        else:
            runs.append([key, [(raw, t, shape)]])

    def dense(ps):
        return torch.cat([dequantize(r, t, s).to(dtype) for r, t, s in ps])

    if len(runs) > 2:
        return FusedWeight(dense([p for _, ps in runs for p in ps]))
    segs = []
    for key, ps in runs:
        if key == DENSE:
            segs.append(dense(ps))
        else:
            n = sum(s[0] for _, _, s in ps)
            segs.append(PlaneMatrix.from_gguf(torch.cat([r.reshape(-1) for r, _, _ in ps]), key, (n, ps[0][2][1])))
    return FusedWeight(*segs)


def weight_tensors(w) -> list[torch.Tensor]:
    """The tensors holding a PlaneMatrix, a FusedWeight or an op that names its own (a CPU matrix:
    quant/cpu_linear.py); anything else (a tensor) as it is."""
    if hasattr(w, "tensors"):
        return list(w.tensors())
    if isinstance(w, PlaneMatrix):
        return list(w.planes)
    if isinstance(w, FusedWeight):
        return weight_tensors(w.a) + ([] if w.b is None else weight_tensors(w.b))
    return [w]
