"""The GEMV kernels a default tile reaches, and the one entry point that launches them.

Owns: the closed list of kernel names (`KERNELS`; `HOPPER_KERNELS` need compute capability 9.0),
`gemv_packed` (argument checks, then the kernel module of `tile.kernel`), `available()` and
`interpreting()`. Ignores: which tile a matrix gets (gemv.py), the kernels' bodies (triton_gemv.py:
dot_bf16x3, dot_i8w, the portable ones; frag8_gemv.py: frag8, frag8x, Hopper), the layouts
(repack.py, frag8.py).

Importing this package does not import Triton: the kernel modules are imported on first launch, so
that TRITON_INTERPRET (tests/conftest.py) may still be set after quant/ is imported.
"""

from __future__ import annotations

import torch

from ..repack import PackedWeight

KERNELS = ("dot_bf16x3", "dot_i8w", "frag8", "frag8x")  # triton_gemv.KERNELS + frag8_gemv.KERNELS
# Gluon + PTX with programmatic dependent launch (griddepcontrol): Hopper only
HOPPER_KERNELS = ("frag8", "frag8x")


def available() -> bool:
    """True when Triton imports (the caller checks for CUDA or the interpreter)."""
    from . import triton_gemv

    return triton_gemv.triton is not None


def interpreting() -> bool:
    """True when the kernels were built by Triton's interpreter (they then run on CPU tensors)."""
    from . import triton_gemv

    if triton_gemv.triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton_gemv.gemv_dot, InterpretedFunction)


def gemv_packed(x: torch.Tensor, w: PackedWeight, tile, out: torch.Tensor) -> None:
    """out[M, N] (float32, contiguous) = x[M, K] @ dequant(w).T with the kernel `tile.kernel`.
    x, w, out on one device: CUDA, or CPU under Triton's interpreter."""
    from . import frag8_gemv, triton_gemv

    assert triton_gemv.triton is not None, "Triton is not available"
    n, k = w.shape
    m = x.shape[0]
    assert w.fmt in triton_gemv.FMT_ID, w.fmt
    assert 1 <= m <= 4 and x.shape[1] == k and out.shape == (m, n) and out.dtype == torch.float32
    assert out.is_contiguous() and x.device == w.device == out.device, (x.device, w.device, out.device)
    assert x.dtype in (torch.float32, torch.bfloat16), x.dtype
    assert tile.kernel in KERNELS, tile.kernel
    assert tile.BLOCK_K % 32 == 0 and (tile.BLOCK_K // 32) & (tile.BLOCK_K // 32 - 1) == 0
    assert n * k < 2 ** 31, "int32 offsets"
    if not x.is_cuda:
        assert interpreting(), "Triton kernels on CPU tensors need the interpreter (TRITON_INTERPRET=1 before importing triton)"
    if x.stride(1) != 1:
        x = x.contiguous()
    if tile.kernel in frag8_gemv.KERNELS:
        if not frag8_gemv.available():
            raise RuntimeError(f"the {tile.kernel} kernel needs Triton with Gluon (triton.experimental.gluon)")
        frag8_gemv.launch(x, w, tile, out)
    else:
        triton_gemv.launch(x, w, tile, out)
