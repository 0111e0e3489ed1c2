"""GEMV for 1-4 rows against a packed weight: y[M, N_out] = x[M, K] @ dequant(w).T, fp32 accumulation.

Owns: the tile configuration (kernel + tile shape), the closed set of supported tiles, the default
tile per matrix class, format and row count (and its fallback before Hopper), its parsing from
`--draft-tile KERNEL,BN,BK,W,S[,SPLIT_K]`, and dispatch: the kernels on CUDA when Triton imports,
else a torch fallback that dequantizes the packed arrays and multiplies in fp32 (correct, not fast);
`PackedLinear`, a model's linear layer over any number of rows. Ignores: the kernels' bodies
(kernels/), the layout (repack.py), which matrices a model has (models/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from . import kernels
from .kernels import HOPPER_KERNELS, KERNELS
from .repack import BLOCK_FORMATS, PackedWeight

MAX_ROWS = 4  # 1 draft row .. k+1 verify rows


@dataclass(frozen=True)
class TileConfig:
    kernel: str  # one of KERNELS
    BLOCK_N: int  # output rows per program
    BLOCK_K: int  # K elements per loop step (a power-of-two number of 32-blocks)
    num_warps: int
    num_stages: int
    split_k: int = 1  # K cut into up to this many parts (partials summed after)

    def __str__(self) -> str:
        s = f"{self.kernel},{self.BLOCK_N},{self.BLOCK_K},{self.num_warps},{self.num_stages}"
        return s if self.split_k == 1 else f"{s},{self.split_k}"


def _tiles(kernel: str, *specs: tuple[int, ...]) -> tuple[TileConfig, ...]:
    return tuple(TileConfig(kernel, *s) for s in specs)


# The combinations known to compile with sane register use: a closed set, so an A/B override cannot
# pick a silly tile. dot_bf16x3: BLOCK_N >= 16 (the smallest dot), BLOCK_K an unroll of 32-blocks.
_DOT = ((16, 128, 4, 3), (32, 64, 4, 3), (32, 128, 4, 3), (64, 32, 4, 4), (64, 64, 4, 3),
        (64, 128, 4, 3), (128, 32, 4, 4), (128, 64, 4, 3), (128, 64, 8, 3), (256, 32, 8, 4),
        (256, 64, 8, 3))
# dot_i8w: BLOCK_K is always 128 (a line of each row a step); the sixth field splits deep matrices
# with few output tiles over K
_I8W = ((32, 128, 4, 2), (64, 128, 4, 2), (64, 128, 4, 3), (64, 128, 8, 3), (128, 128, 4, 2), (128, 128, 4, 3),
        (128, 128, 8, 3), (256, 128, 8, 2))
_SPLIT = tuple((bn, 128, w, st, sk) for bn, w, st in ((64, 4, 2), (128, 4, 2), (128, 8, 2)) for sk in (2, 4, 8))
# frag8 / frag8x: two 16-row tiles a warp, a 64-column chunk a step; num_stages 2 / 3 loads one / two
# chunks ahead; split_k parts (up to 32: more warps for matrices with few row tiles)
_FRAG8 = tuple((32, 64, w, st, sk) for w in (2, 4, 8) for st in (2, 3) for sk in (1, 2, 4, 8, 16, 32))
SUPPORTED_TILES: tuple[TileConfig, ...] = (
    _tiles("dot_bf16x3", *_DOT) + _tiles("dot_i8w", *_I8W + _SPLIT) + _tiles("frag8", *_FRAG8)
    + _tiles("frag8x", *_FRAG8))

# Defaults per matrix class, the ones that run on any CUDA GPU. Programs = ceil(N_out / BLOCK_N):
# small BLOCK_N keeps the drafter's 256..2048-row matrices spread over the SMs; the huge head matrix
# takes wide tiles to cut per-program overhead.
DEFAULT_TILES: dict[str, TileConfig] = {
    "head": TileConfig("dot_i8w", 64, 128, 4, 2),  # N_out >= 32768 (LM head, full or gathered)
    "large": TileConfig("dot_bf16x3", 64, 64, 4, 3),  # N_out * K >= 16M elements (e.g. 8192 x 8192)
    "tall": TileConfig("dot_bf16x3", 16, 128, 4, 3),  # K >= N_out (o 640x1024, down 640x2048, K/V 256x640)
    "wide": TileConfig("dot_bf16x3", 32, 64, 4, 3),  # N_out > K (q 1024x640, gate/up 2048x640)
}

# The fastest tile per (class, format) and row count 1..4 on the H200 (Hopper kernels: elsewhere
# DEFAULT_TILES); the measurements behind each entry are in bench/RESULTS.md, sessions 2-9.
_F8H, _F8Q8, _F8S = TileConfig("frag8", 32, 64, 4, 2), TileConfig("frag8", 32, 64, 4, 2, 8), \
    TileConfig("frag8", 32, 64, 4, 2, 16)
_F8X = TileConfig("frag8x", 32, 64, 4, 2, 16)  # x made inside the GEMV: one launch on small matrices
MEASURED_TILES: dict[tuple[str, str], tuple[TileConfig | None, ...]] = {  # None: DEFAULT_TILES
    **{("head", f): (_F8H,) * 4 for f in BLOCK_FORMATS},
    ("large", "q8_0"): (_F8Q8,) * 4,
    ("large", "q4_0"): (_F8S,) * 4,
    ("large", "q5_0"): (_F8S,) * 4,
    **{(c, f): (_F8X,) * 4 for c in ("tall", "wide") for f in BLOCK_FORMATS},
}


def tile_class(n_out: int, k: int) -> str:
    """The default-table class of an [n_out, k] matrix."""
    if n_out >= 32768:
        return "head"
    if n_out * k >= 16 * 1024 * 1024:
        return "large"
    return "tall" if k >= n_out else "wide"


def runs_on(tile: TileConfig, capability: tuple[int, int] | None) -> bool:
    """Whether tile's kernel runs on a CUDA device of this compute capability (None: not CUDA)."""
    return capability is None or tile.kernel not in HOPPER_KERNELS or tuple(capability) >= (9, 0)


def default_tile(n_out: int, k: int, m: int = 1, fmt: str = "q8_0",
                 capability: tuple[int, int] | None = None) -> TileConfig:
    """The default tile for an [n_out, k] matrix in block format fmt times m input rows, on a CUDA
    device of this compute capability (None: as measured, on the H200)."""
    assert 1 <= m <= MAX_ROWS, m
    cls = tile_class(n_out, k)
    tile = (MEASURED_TILES.get((cls, fmt)) or (None,) * MAX_ROWS)[m - 1] or DEFAULT_TILES[cls]
    return tile if runs_on(tile, capability) else DEFAULT_TILES[cls]


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device, None for others."""
    return tuple(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None


def check_tile(tile: TileConfig, capability: tuple[int, int] | None) -> TileConfig:
    """tile, or ConfigError when its kernel cannot run on this device."""
    if not runs_on(tile, capability):
        raise ConfigError(f"GEMV tile {tile}: the {tile.kernel} kernel needs a Hopper GPU (compute capability "
                          f"9.0 or newer); this one is {capability[0]}.{capability[1]}: pick another --draft-tile "
                          f"(e.g. {DEFAULT_TILES['wide']}) or leave it empty for the defaults")
    return tile


def parse_tile(text: str) -> TileConfig:
    """'KERNEL,BN,BK,W,S[,SPLIT_K]' -> TileConfig, which must be one of SUPPORTED_TILES (else
    ConfigError naming them)."""
    supported = " ".join(str(t) for t in SUPPORTED_TILES)
    parts = text.replace(" ", "").split(",")
    tile = None
    if len(parts) in (5, 6) and parts[0] in KERNELS:
        try:
            tile = TileConfig(parts[0], *(int(p) for p in parts[1:]))
        except ValueError:
            tile = None
    if tile is None:
        raise ConfigError(f"--draft-tile {text!r}: expected KERNEL,BLOCK_N,BLOCK_K,num_warps,num_stages"
                          f"[,split_k] (KERNEL one of {', '.join(KERNELS)}); one of: {supported}")
    if tile not in SUPPORTED_TILES:
        raise ConfigError(f"--draft-tile {text!r} is not a supported tile; one of: {supported}")
    return tile


BACKENDS = ("auto", "triton", "torch")


def kernels_available() -> bool:
    """True when the GEMV kernels can be built (Triton imports; CUDA or its interpreter runs them)."""
    return kernels.available()


def gemv(
    x: torch.Tensor,
    w: PackedWeight,
    tile: TileConfig | None = None,
    out: torch.Tensor | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """x: [M, K] float32 or bfloat16, 1 <= M <= 4, on w's device -> float32 [M, N_out] (in `out`
    if given: a contiguous float32 [M, N_out] buffer). Every row reads the matrix once, together.
    backend: "auto" = the Triton kernel for block formats on CUDA (when Triton imports), else
    torch; "triton" = the kernel always (CPU tensors need Triton's interpreter); "torch" = the
    fallback (dequantize the packed arrays, fp32 matmul: correct, not fast)."""
    n, k = w.shape
    assert x.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS and x.shape[1] == k, (x.shape, w.shape)
    assert x.dtype in (torch.float32, torch.bfloat16), x.dtype
    assert x.device == w.device, (x.device, w.device)
    assert backend in BACKENDS, backend
    m = x.shape[0]
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    assert out.shape == (m, n) and out.dtype == torch.float32 and out.is_contiguous()
    if w.fmt in BLOCK_FORMATS and backend != "torch":
        if backend == "triton" or (x.is_cuda and kernels.available()):
            cap = device_capability(x.device)
            tile = check_tile(tile, cap) if tile is not None else default_tile(n, k, m, w.fmt, cap)
            kernels.gemv_packed(x, w, tile, out)
            return out
    if w.fmt not in BLOCK_FORMATS and x.is_cuda and x.dtype == w.qs.dtype:
        # Dense comparison format on the GPU: cuBLAS (fp32 accumulation inside).
        out.copy_(torch.matmul(x, w.qs.t()))
        return out
    torch.matmul(x.float(), w.dequantize().t(), out=out)
    return out


class PackedLinear:
    """A linear layer y = x @ dequant(w).T over any number of rows, for a model's forward.

    On the kernel path (backend "triton", or "auto" on CUDA with Triton and a block format) rows
    go to the GEMV in chunks of MAX_ROWS (each chunk reads the matrix once) up to `kernel_rows`
    rows; longer inputs (prefill-sized) dequantize the matrix and use one fp32 matmul. Otherwise
    (torch) a dense float32 copy of the dequantized values is kept and F.linear does the math.
    No host syncs: the kernel path is capturable in a CUDA graph."""

    def __init__(self, w: PackedWeight, tile: TileConfig | None = None, backend: str = "auto",
                 kernel_rows: int = 16):
        assert backend in BACKENDS, backend
        self.w = w
        self.kernel_rows = kernel_rows
        kernel = False
        if w.fmt in BLOCK_FORMATS and backend != "torch":
            kernel = backend == "triton" or (w.device.type == "cuda" and kernels.available())
        self.use_kernel = kernel
        self.dense = None if kernel else w.dequantize()  # float32 [N, K]
        n, k = w.shape
        cap = device_capability(w.device)
        # the tile per row count 1..MAX_ROWS, chosen (and checked against the device) once, not per call
        self.tiles = [check_tile(tile, cap) if kernel else tile] * MAX_ROWS if tile is not None else \
            [default_tile(n, k, m, w.fmt, cap) for m in range(1, MAX_ROWS + 1)]
        if kernel and w.device.type == "cuda" and any(t.kernel in HOPPER_KERNELS for t in self.tiles):
            from .kernels.frag8 import for_weight8

            for_weight8(w)  # now, not inside a CUDA-graph capture of the first call

    @property
    def shape(self) -> tuple[int, int]:
        return self.w.shape

    def __call__(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """x [..., K] (float32 / bfloat16) -> [..., N] in out_dtype (default x.dtype)."""
        n, k = self.w.shape
        lead = x.shape[:-1]
        out_dtype = x.dtype if out_dtype is None else out_dtype
        x2 = x.reshape(-1, k)
        t = x2.shape[0]
        if not self.use_kernel:
            y = F.linear(x2.float(), self.dense)
        elif t > self.kernel_rows:
            y = F.linear(x2.float(), self.w.dequantize())
        else:
            y = torch.empty((t, n), dtype=torch.float32, device=x.device)
            for i in range(0, t, MAX_ROWS):
                rows = min(MAX_ROWS, t - i)
                kernels.gemv_packed(x2[i: i + rows], self.w, self.tiles[rows - 1], y[i: i + rows])
        return y.to(out_dtype).reshape(*lead, n)
