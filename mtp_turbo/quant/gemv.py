"""GEMV for 1-4 rows against a packed weight: y[M, N_out] = x[M, K] @ dequant(w).T, fp32 accumulation.

Owns: dispatch (Triton kernel on CUDA when Triton imports, else a torch fallback that dequantizes
the packed arrays and multiplies in fp32: correct, not fast), the tile configuration (kernel
variant + tile shape), its default per matrix class and its parsing from
`--draft-tile KERNEL,BN,BK,W,S[,SPLIT_K[,N_TILES]]`. Ignores: the kernels' bodies
(gemv_triton.py), the layout (repack.py), which matrices a model has (models/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from .repack import BLOCK_FORMATS, PackedWeight

MAX_ROWS = 4  # 1 draft row .. k+1 verify rows
KERNELS = ("dot_bf16x3", "dot_tf32x3", "reduce", "dot_i8", "dot_i8w", "dot_i8n", "dot_bf16n", "frag", "frag8",
           "frag8x")
# gemv_triton.py, gemv_i8.py, gemv_bf16n.py, gemv_frag.py, gemv_frag8.py (frag8x too)


@dataclass(frozen=True)
class TileConfig:
    kernel: str  # one of KERNELS
    BLOCK_N: int  # output rows per program
    BLOCK_K: int  # K elements per loop step (a power-of-two number of 32-blocks)
    num_warps: int
    num_stages: int
    split_k: int = 1  # dot_i8w / dot_i8n / dot_bf16n: K cut into up to this many parts (partials summed after)
    n_tiles: int = 1  # dot_i8n / dot_bf16n: output tiles per program, walked in one loop (loads in flight across tiles);
    # frag with BLOCK_N 16: CTAs per SM of its persistent kernel

    def __str__(self) -> str:
        s = f"{self.kernel},{self.BLOCK_N},{self.BLOCK_K},{self.num_warps},{self.num_stages}"
        if self.n_tiles != 1:
            return f"{s},{self.split_k},{self.n_tiles}"
        return s if self.split_k == 1 else f"{s},{self.split_k}"


def _tiles(kernel: str, *specs: tuple[int, int, int, int]) -> tuple[TileConfig, ...]:
    return tuple(TileConfig(kernel, *s) for s in specs)


# The combinations known to compile with sane register use. A closed set so an A/B override cannot
# pick a silly tile. Dot kernels: BLOCK_N >= 16 (the smallest dot), the [16, BLOCK_N] fp32
# accumulator is small, so wide BLOCK_N is cheap; BLOCK_K is an unroll of 32-blocks. Reduce: each
# row's accumulator is the whole [BLOCK_N, BLOCK_K] tile, so BLOCK_N * BLOCK_K <= 4096.
_DOT = ((16, 128, 4, 3), (32, 64, 4, 3), (32, 128, 4, 3), (64, 32, 4, 4), (64, 64, 4, 3),
        (64, 128, 4, 3), (128, 32, 4, 4), (128, 64, 4, 3), (128, 64, 8, 3), (256, 32, 8, 4),
        (256, 64, 8, 3))
# dot_i8 also gets wider K steps (128 contiguous bytes per q8_0 row and step) for the head sweep
_I8 = _DOT + ((128, 128, 4, 3), (128, 128, 8, 3), (256, 128, 8, 3), (64, 128, 4, 4), (128, 64, 4, 4),
              (256, 64, 8, 4), (128, 128, 4, 2))
_I8W = ((32, 128, 4, 2), (64, 128, 4, 2), (64, 128, 4, 3), (64, 128, 8, 3), (128, 128, 4, 2), (128, 128, 4, 3),
        (128, 128, 8, 3), (256, 128, 8, 2))  # BLOCK_K is always 128 (4 blocks per dot)
# dot_i8n (BN, BK, warps, stages, split_k, n_tiles): its two operands are 16 rows per input row
# each; n_tiles > 1 walks several output tiles per program (the head: 3 lines per tile otherwise)
_I8N = tuple((bn, 128, 4, st, 1, nt) for bn in (32, 64, 128) for st in (2, 3) for nt in (1, 4)) + (
    (128, 128, 8, 3, 1, 2), (256, 128, 8, 2, 1, 1))
# split over K (the sixth field) for deep matrices with few output tiles
_SPLIT = tuple((bn, 128, w, st, sk) for bn, w, st in ((64, 4, 2), (128, 4, 2), (128, 8, 2)) for sk in (2, 4, 8))
_SPLIT_N = tuple((bn, 128, 4, st, sk, 1) for bn, st in ((32, 3), (64, 2), (64, 3)) for sk in (2, 4, 8))
# dot_bf16n (nibble formats; BLOCK_K = 64 x block pairs a step): the [BN, 16] accumulator is the
# same at 1-4 rows; n_tiles > 1 for the head's short rows, split_k for 8192 x 8192
_BF16N = ((64, 128, 4, 3, 1, 1), (64, 128, 4, 3, 1, 4), (128, 128, 4, 2, 1, 1), (128, 128, 4, 3, 1, 1),
          (128, 128, 4, 3, 1, 2), (128, 128, 4, 4, 1, 2), (128, 128, 4, 2, 1, 2), (128, 256, 4, 2, 1, 1),
          (128, 64, 4, 4, 1, 4), (64, 128, 4, 3, 4, 1), (64, 128, 4, 4, 4, 1), (128, 128, 4, 3, 4, 1),
          (64, 128, 4, 3, 8, 1), (64, 64, 4, 4, 4, 1))
# frag (the fragment layout, gemv_frag.py; BLOCK_K = one 64-column chunk): BLOCK_N 32 = two 16-row
# tiles a warp sharing x (gemv_frag2), 16 = the persistent kernel (n_tiles CTAs per SM); weights loaded
# one chunk ahead (num_stages 2; two or three ahead measured slower); split_k parts of K
_FRAG = ((32, 64, 2, 2, 1, 1), (32, 64, 4, 2, 1, 1), (32, 64, 8, 2, 1, 1), (32, 64, 2, 2, 2, 1), (32, 64, 4, 2, 2, 1),
         (32, 64, 4, 2, 4, 1), (32, 64, 4, 2, 8, 1), (32, 64, 2, 2, 8, 1), (16, 64, 4, 2, 1, 8),
         (16, 64, 4, 2, 1, 4), (16, 64, 4, 2, 2, 8), (16, 64, 4, 2, 4, 8), (16, 64, 4, 2, 8, 8), (16, 64, 2, 2, 8, 8),
         (32, 64, 2, 3, 1, 1), (32, 64, 4, 3, 1, 1), (32, 64, 4, 3, 8, 1), (32, 64, 2, 3, 8, 1))
# frag8 (int8 fragment layout, gemv_frag8.py): two 16-row tiles a warp, loads a chunk ahead; split_k parts
# (up to 32: more warps for matrices with few row tiles; the kernel sums the parts); num_stages 3: loads
# two chunks ahead. frag8x: the same tiles, x's pieces made inside the GEMV
_FRAG8 = tuple((32, 64, w, st, sk, 1) for w in (2, 4, 8) for st in (2, 3) for sk in (1, 2, 4, 8, 16, 32))
_REDUCE = ((4, 256, 2, 2), (4, 512, 4, 2), (8, 128, 2, 2), (8, 256, 4, 2), (16, 128, 4, 2),
           (16, 256, 4, 2), (32, 64, 4, 2), (32, 128, 4, 2), (64, 64, 8, 2))
SUPPORTED_TILES: tuple[TileConfig, ...] = (
    _tiles("dot_bf16x3", *_DOT) + _tiles("dot_tf32x3", *_DOT) + _tiles("reduce", *_REDUCE)
    + _tiles("dot_i8", *_I8) + _tiles("dot_i8w", *_I8W + _SPLIT) + _tiles("dot_i8n", *_I8N + _SPLIT_N)
    + _tiles("dot_bf16n", *_BF16N) + _tiles("frag", *_FRAG) + _tiles("frag8", *_FRAG8) + _tiles("frag8x", *_FRAG8))

# Defaults per matrix class (MEASURED_TILES below overrides them per format and row count where a
# GPU run found better). Programs =
# ceil(N_out / BLOCK_N): small BLOCK_N keeps the drafter's 256..2048-row matrices spread over the
# SMs; the huge head matrix takes wide tiles to cut per-program overhead.
DEFAULT_TILES: dict[str, TileConfig] = {
    # N_out >= 32768 (LM head, full or gathered). H200, 262144 x 640 q8_0, 1 row: 50.0 us = 86% of
    # copy bandwidth, vs 71.0 us for the bf16x3 tile that was the default (bench/RESULTS.md)
    "head": TileConfig("dot_i8w", 64, 128, 4, 2),
    "large": TileConfig("dot_bf16x3", 64, 64, 4, 3),  # N_out * K >= 16M elements (e.g. 8192 x 8192)
    "tall": TileConfig("dot_bf16x3", 16, 128, 4, 3),  # K >= N_out (o 640x1024, down 640x2048, K/V 256x640)
    "wide": TileConfig("dot_bf16x3", 32, 64, 4, 3),  # N_out > K (q 1024x640, gate/up 2048x640)
}


# Per-kernel defaults for A/B runs of the other variants (bench/gemv_bench.py): the dot kernels
# share DEFAULT_TILES' shapes; reduce keeps its accumulator tile at <= 4096 elements.
_REDUCE_DEFAULTS = {"head": (32, 128, 4, 2), "large": (16, 256, 4, 2), "tall": (4, 256, 2, 2),
                    "wide": (8, 128, 2, 2)}


# Measured exceptions to DEFAULT_TILES: (class, format) -> the fastest tile per row count (1..4)
# in the H200 runs of bench/RESULTS.md (2026-11-30 sessions 2-6; microseconds by row count; the
# head and 8192 x 8192 lines of sessions 2-5 are what session 6's frag tiles replaced).
# Head 262144 x 640:
#   q8_0: dot_i8w for 1 row (50.6; dot_i8n 52.9), dot_i8n for 2 (55.8 vs dot_i8w 60.4), dot_i8 for
#         3-4 (68.2, 69.2; dot_i8n 68.9, 69.3; dot_i8w 79.3, 78.1: its operand grows with the rows).
#   q4_0 (block pairs, session 4): dot_i8n for 1-2 rows (39.5-41.3, 49.9-50.9); dot_bf16n for 3-4
#         (session 5: 59.0-59.5 vs dot_i8 68.5-69.4).
#   q5_0: dot_bf16n for 1-4 rows (session 5: 73.9-75.4 vs dot_i8n 89.1 / 95.4, dot_i8 99.4).
# 8192 x 8192 (128 output tiles for 132 SMs): split over K.
#   q8_0: dot_i8w 27.4-28.0 (8 parts), 35.3-38.1 (4 parts) vs 65.2-72.6 whole; 2 rows dot_i8n 30.5.
#   q4_0: dot_i8n 28.0-28.8, 33.0-33.6 (4 parts); dot_bf16n 38.2 at 3-4 (vs dot_i8n 44.8-46.6).
#   q5_0: dot_i8n 47.2-48.6, 50.9-52.4 (4 parts); dot_bf16n 51.0-51.3 at 3-4 (vs dot_i8n 69.1-70.3).
# Drafter shapes (session 5), split over K into 8 parts: 40-80 programs of one output tile walk
# K = 640..2048 one step at a time otherwise. Tall (640 x 2048 / 640 x 1024 / 256 x 640, 1-4 rows):
#   q4_0 dot_bf16n 7.7-7.9 / 6.6-6.8 / 6.3-6.6 vs dot_bf16x3 21.2-21.3 / 11.5 / 7.8-7.9;
#   q5_0 dot_bf16n 8.1-8.3 / 6.9-7.0 / 6.5-6.6 vs 22.0 / 11.9 / 8.1-8.2;
#   q8_0 dot_i8n 7.8-11.6 / 7.1-10.6 / 6.8-10.1 vs 19.7 / 10.8 / 7.2 (256 x 640 alone is slower at
#   2-4 rows; the three together take 33.6-42.4 vs 44.9-45.0 us, K and V counted twice).
# Wide q4_0, 1 row (1024 x 640 / 2048 x 640): dot_bf16n 6.6 / 6.9 vs 8.0 / 8.0 (other rows not swept).
_H8 = TileConfig("dot_i8", 64, 128, 4, 3)
# Session 6 (fragment layout, bench/RESULTS.md): frag,32,64,2,2 on the head (q4_0 37.7-38.3 us at 1-4 rows
# vs 40.3 / 50.5 / 59.5 / 58.9; q5_0 43.5-45.1 vs 74-76; q8_0 2-4 rows 53.8-54.4 vs 54.9 / 66.7 / 67.1,
# 1 row 52.4 vs dot_i8w 51.3: kept); 8192 x 8192 split into 8: q4_0 / q5_0 persistent frag,16,64,4,2,8,8
# (20.7-21.7 / 24.1-24.6 vs 28.3-37.9 / 46.8-50.9), q8_0 frag,32,64,4,2,8 (26.7-27.7 vs 27.0-36.9).
# gemv_frag3 (num_stages 3: 18% fewer loop instructions, 128 registers), same run, 1 and 4 rows: head
# q4_0 36.1 / 37.9 vs 42.7 / 38.7, q8_0 49.5 / 51.8 vs 56.9 / 55.2 (and dot_i8w's 51.2-53.1 at 1 row),
# q5_0 worse (48.6 / 51.2 vs 47.0 / 48.3); 8192 x 8192 split into 8: q4_0 19.3 / 20.0 vs 20.4 / 21.1,
# q8_0 25.9 / 26.7 vs 27.0 / 27.4.
# Drafter shapes (session 6, split into 8, 1 and 4 rows swept; frag's work is the same for 1-4 rows):
# frag,16,64,4,2,8,8 for q8_0 (tall 640x2048 / 640x1024 / 256x640: 7.8-7.9 / 6.8-6.9 / 6.6-6.7 vs
# dot_i8n 7.9-11.7 / 7.3-10.6 / 6.8-10.3) and wide q5_0 / q8_0 (6.8-7.2 vs dot_bf16x3 7.3-9.4) and
# wide q4_0 at 2-4 rows (6.9-7.1 vs 8.1); tall q4_0 / q5_0 stay on dot_bf16n (within 1%).
# Session 7: up to 2 rows, one mma group a step (gemv_frag.launch; not in gemv_frag3): head frag,32,64,2,2
# q4_0 32.0 / 31.6 us at 1 / 2 rows (vs frag3's 37.7 / 37.1), q5_0 37.4 / 39.4 (vs 43.5 / 44.0 with two
# groups), q8_0 50.0 / 51.3 (frag3 50.1 / 50.9); 8192 x 8192 persistent frag,16,64,4,2,8,8 q4_0 19.0 / 18.9
# (frag3 19.5 / 19.5), q5_0 21.9 / 21.4 (24.1), q8_0 25.3 / 25.5 (frag3 26.3 / 26.7).
# Session 8 (integer tensor cores, gemv_frag8; bench/RESULTS.md, runs 2-6 of 2026-11-30h): head
# frag8,32,64,4,2 q4_0 30.3-32.7 us at 1-4 rows (frag, run 2: 31.6-37.7), q5_0 34.7-37.3 (40.0-45.4), q8_0
# 47.3-51.6 (50.8-52.0); 8192 x 8192 split into 16 (q4_0 / q5_0: 16.8-17.7 / 19.3-20.6 us at 1 row
# vs frag's 19.0 / 22.2, 19.5-19.6 / 22.5-22.6 at 4 vs 19.6 / 23.8) or 8 (q8_0: 24.5-25.0 at 1 row vs 26.1,
# 25.9-26.5 at 4 vs 26.5); drafter shapes at 1 row split into 16 (every shape and format 0.1-0.7 us faster
# than the defaults before; at 2-4 rows not consistently faster: those stay).
# Session 9 (frag8x: the GEMV makes x's pieces itself, one launch instead of two; runs 1-2 of 2026-11-30i):
# drafter shapes at 1-4 rows frag8x,32,64,4,2,16 (1 row 4.3-5.8 us vs frag8's 6.3-7.6; 4 rows 5.3-6.6 vs
# the defaults' 6.9-7.9); on the head and 8192 x 8192 every program makes the x words again: slower (head
# q4_0 1 row 57.3 vs 30.0, 8192 x 8192 18.8 vs 17.0): frag8 stays there.
_F8H, _F8Q8, _F8X = TileConfig("frag8", 32, 64, 4, 2), TileConfig("frag8", 32, 64, 4, 2, 8), \
    TileConfig("frag8x", 32, 64, 4, 2, 16)
_F8S = TileConfig("frag8", 32, 64, 4, 2, 16)
MEASURED_TILES: dict[tuple[str, str], tuple[TileConfig | None, ...]] = {  # None: DEFAULT_TILES
    **{("head", f): (_F8H,) * 4 for f in BLOCK_FORMATS},
    ("large", "q8_0"): (_F8Q8,) * 4,
    ("large", "q4_0"): (_F8S,) * 4,
    ("large", "q5_0"): (_F8S,) * 4,
    **{(c, f): (_F8X,) * 4 for c in ("tall", "wide") for f in BLOCK_FORMATS},
}
_BF16N_DEFAULTS = {"head": (128, 128, 4, 3, 1, 2), "large": (64, 128, 4, 3, 4, 1), "tall": (64, 128, 4, 3, 1, 1),
                   "wide": (64, 128, 4, 3, 1, 1)}
_FRAG_DEFAULTS = {"head": (32, 64, 2, 2, 1, 1), "large": (16, 64, 4, 2, 8, 8), "tall": (16, 64, 4, 2, 8, 8),
                  "wide": (16, 64, 4, 2, 8, 8)}
_FRAG8_DEFAULTS = {"head": (32, 64, 4, 2, 1, 1), "large": (32, 64, 4, 2, 16, 1), "tall": (32, 64, 4, 2, 16, 1),
                   "wide": (32, 64, 4, 2, 16, 1)}
_I8W_DEFAULTS = {"head": (64, 128, 4, 2), "large": (64, 128, 4, 2), "tall": (32, 128, 4, 2), "wide": (32, 128, 4, 2)}


def variant_tile(kernel: str, n_out: int, k: int) -> TileConfig:
    """The default tile of `kernel` for an [n_out, k] matrix (the default table's shape class)."""
    assert kernel in KERNELS, kernel
    cls = tile_class(n_out, k)
    if kernel == "reduce":
        return TileConfig("reduce", *_REDUCE_DEFAULTS[cls])
    if kernel in ("dot_i8w", "dot_i8n"):
        return TileConfig(kernel, *_I8W_DEFAULTS[cls])
    if kernel == "dot_bf16n":
        return TileConfig(kernel, *_BF16N_DEFAULTS[cls])
    if kernel == "frag":
        return TileConfig(kernel, *_FRAG_DEFAULTS[cls])
    if kernel in ("frag8", "frag8x"):
        return TileConfig(kernel, *_FRAG8_DEFAULTS[cls])
    d = DEFAULT_TILES[cls]
    if d.kernel == "dot_i8w":  # dot_i8: its multi-row head tile; bf16x3/tf32x3: the bf16x3 head best
        d = _H8 if kernel == "dot_i8" else TileConfig(kernel, 128, 64, 4, 3)
    return d if d.kernel == kernel else TileConfig(kernel, d.BLOCK_N, d.BLOCK_K, d.num_warps, d.num_stages)


def tile_class(n_out: int, k: int) -> str:
    """The default-table class of an [n_out, k] matrix."""
    if n_out >= 32768:
        return "head"
    if n_out * k >= 16 * 1024 * 1024:
        return "large"
    return "tall" if k >= n_out else "wide"


# Kernels that need a Hopper GPU (compute capability 9.0+): Gluon + PTX with programmatic dependent
# launch (griddepcontrol). On older GPUs the defaults fall back to the class's plain Triton tile.
HOPPER_KERNELS = ("frag", "frag8", "frag8x")


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
    """'KERNEL,BN,BK,W,S[,SPLIT_K[,N_TILES]]' -> TileConfig, which must be one of
    SUPPORTED_TILES (else ConfigError)."""
    supported = " ".join(str(t) for t in SUPPORTED_TILES)
    parts = text.replace(" ", "").split(",")
    tile = None
    if len(parts) in (5, 6, 7) and parts[0] in KERNELS:
        try:
            tile = TileConfig(parts[0], *(int(p) for p in parts[1:]))
        except ValueError:
            tile = None
    if tile is None:
        raise ConfigError(f"--draft-tile {text!r}: expected KERNEL,BLOCK_N,BLOCK_K,num_warps,num_stages"
                          f"[,split_k[,n_tiles]] (KERNEL one of {', '.join(KERNELS)}); one of: {supported}")
    if tile not in SUPPORTED_TILES:
        raise ConfigError(f"--draft-tile {text!r} is not a supported tile; one of: {supported}")
    return tile


BACKENDS = ("auto", "triton", "torch")


def kernels_available() -> bool:
    """True when the GEMV kernels can be built (Triton imports; CUDA or its interpreter runs them)."""
    from . import gemv_triton

    return gemv_triton.available()


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
        from . import gemv_triton

        if backend == "triton" or (x.is_cuda and gemv_triton.available()):
            cap = device_capability(x.device)
            tile = check_tile(tile, cap) if tile is not None else default_tile(n, k, m, w.fmt, cap)
            gemv_triton.gemv_packed(x, w, tile, out)
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
            from . import gemv_triton

            kernel = backend == "triton" or (w.device.type == "cuda" and gemv_triton.available())
        self.use_kernel = kernel
        self.dense = None if kernel else w.dequantize()  # float32 [N, K]
        n, k = w.shape
        cap = device_capability(w.device)
        # the tile per row count 1..MAX_ROWS, chosen (and checked against the device) once, not per call
        self.tiles = [check_tile(tile, cap) if kernel else tile] * MAX_ROWS if tile is not None else \
            [default_tile(n, k, m, w.fmt, cap) for m in range(1, MAX_ROWS + 1)]
        tiles = self.tiles
        if kernel and w.device.type == "cuda" and any(t.kernel == "frag" for t in tiles):
            from .frag import for_weight

            for_weight(w)  # now, not inside a CUDA-graph capture of the first call
        if kernel and w.device.type == "cuda" and any(t.kernel in ("frag8", "frag8x") for t in tiles):
            from .frag8 import for_weight8

            for_weight8(w)

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
            from . import gemv_triton

            y = torch.empty((t, n), dtype=torch.float32, device=x.device)
            for i in range(0, t, MAX_ROWS):
                rows = min(MAX_ROWS, t - i)
                gemv_triton.gemv_packed(x2[i: i + rows], self.w, self.tiles[rows - 1], y[i: i + rows])
        return y.to(out_dtype).reshape(*lead, n)
