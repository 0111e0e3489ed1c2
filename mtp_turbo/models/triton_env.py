"""Triton, where its kernels can run: imported on CUDA or under Triton's interpreter, else None.

Owns: `wants_triton` and the `triton` / grid-dependency names every kernel module takes from here.
Ignores: the kernels (fused_kernels.py, weight_tiles.py and the modules built on them).

Why ask first: importing Triton is ~0.1 s of a one-shot CPU start whose steps never use it
(bench/RESULTS.md session 31). The tests set TRITON_INTERPRET=1 before importing anything, so
the CPU checks still run the kernels in the interpreter.
"""

from __future__ import annotations

import os

import torch


def wants_triton() -> bool:
    """Whether Triton's kernels can run here: CUDA, or the interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()


triton = gdc_wait = gdc_launch_dependents = None
if wants_triton():
    try:  # the package imports without Triton; fused.available() says whether it can run
        import triton
    except ImportError:
        triton = None
    try:  # grid dependency control (programmatic dependent launch, sm_90+): Triton >= 3.4
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    except ImportError:
        gdc_wait = gdc_launch_dependents = None
