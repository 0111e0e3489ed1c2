"""GEMV for 1-4 rows against a packed weight: y[M, N_out] = x[M, K] @ dequant(w).T, fp32 accumulation.

Owns: dispatch (Triton kernel on CUDA when Triton imports, else a torch fallback that dequantizes
the packed arrays and multiplies in fp32: correct, not fast), the tile configuration, its default
per matrix class and its parsing from `--draft-tile BN,BK,W,S`. Ignores: the kernels' bodies
(gemv_triton.py), the layout (repack.py), which matrices a model has (models/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError
from .repack import BLOCK_FORMATS, PackedWeight

MAX_ROWS = 4  # 1 draft row .. k+1 verify rows; the kernels unroll up to this many accumulators


@dataclass(frozen=True)
class TileConfig:
    BLOCK_N: int  # output rows per program
    BLOCK_K: int  # K elements per loop step (a multiple of 32: whole blocks)
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"{self.BLOCK_N},{self.BLOCK_K},{self.num_warps},{self.num_stages}"


def _t(bn: int, bk: int, w: int, s: int) -> TileConfig:
    return TileConfig(bn, bk, w, s)


# The combinations the kernels are known to compile with sane register use (BLOCK_N * BLOCK_K <=
# 8192 fp32 per accumulator pass). A closed set so an A/B override cannot pick a silly tile.
SUPPORTED_TILES: tuple[TileConfig, ...] = (
    _t(4, 256, 2, 2), _t(4, 512, 4, 2),
    _t(8, 128, 2, 2), _t(8, 256, 4, 2), _t(8, 512, 4, 3),
    _t(16, 128, 4, 2), _t(16, 256, 4, 2),
    _t(32, 128, 4, 2), _t(32, 256, 8, 2),
    _t(64, 64, 4, 2), _t(64, 128, 8, 2),
    _t(128, 64, 8, 2),
)

# Defaults per matrix class (unmeasured until bench/gemv_bench.py runs on the GPU). Programs =
# ceil(N_out / BLOCK_N): small BLOCK_N keeps the drafter's 640..2048-row matrices spread over
# the SMs; the huge head matrix takes big tiles to cut per-program overhead.
DEFAULT_TILES: dict[str, TileConfig] = {
    "head": _t(64, 128, 8, 2),  # N_out >= 32768 (LM head, full or gathered)
    "large": _t(16, 256, 4, 2),  # N_out * K >= 16M elements (e.g. 8192 x 8192)
    "tall": _t(4, 256, 2, 2),  # K >= N_out (o_proj 640x1024, ffn_down 640x2048, K/V 256x640)
    "wide": _t(8, 128, 2, 2),  # N_out > K (q 1024x640, gate/up 2048x640)
}


def tile_class(n_out: int, k: int) -> str:
    """The default-table class of an [n_out, k] matrix."""
    if n_out >= 32768:
        return "head"
    if n_out * k >= 16 * 1024 * 1024:
        return "large"
    return "tall" if k >= n_out else "wide"


def default_tile(n_out: int, k: int) -> TileConfig:
    return DEFAULT_TILES[tile_class(n_out, k)]


def parse_tile(text: str) -> TileConfig:
    """'BN,BK,W,S' -> TileConfig, which must be one of SUPPORTED_TILES (else ConfigError)."""
    supported = " ".join(str(t) for t in SUPPORTED_TILES)
    try:
        parts = [int(p) for p in text.replace(" ", "").split(",")]
    except ValueError:
        parts = []
    if len(parts) != 4:
        raise ConfigError(f"--draft-tile {text!r}: expected BLOCK_N,BLOCK_K,num_warps,num_stages; one of: {supported}")
    tile = TileConfig(*parts)
    if tile not in SUPPORTED_TILES:
        raise ConfigError(f"--draft-tile {text!r} is not a supported tile; one of: {supported}")
    return tile


def gemv(
    x: torch.Tensor,
    w: PackedWeight,
    tile: TileConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x: [M, K] float32 or bfloat16, 1 <= M <= 4, on w's device -> float32 [M, N_out] (in `out`
    if given: a contiguous float32 [M, N_out] buffer). Every row reads the matrix once, together."""
    n, k = w.shape
    assert x.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS and x.shape[1] == k, (x.shape, w.shape)
    assert x.dtype in (torch.float32, torch.bfloat16), x.dtype
    assert x.device == w.device, (x.device, w.device)
    m = x.shape[0]
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    assert out.shape == (m, n) and out.dtype == torch.float32 and out.is_contiguous()
    if w.fmt in BLOCK_FORMATS and x.is_cuda:
        from . import gemv_triton

        if gemv_triton.available():
            gemv_triton.gemv_packed(x, w, tile or default_tile(n, k), out)
            return out
    if w.fmt not in BLOCK_FORMATS and x.is_cuda and x.dtype == w.qs.dtype:
        # Dense comparison format on the GPU: cuBLAS (fp32 accumulation inside).
        out.copy_(torch.matmul(x, w.qs.t()))
        return out
    torch.matmul(x.float(), w.dequantize().t(), out=out)
    return out
