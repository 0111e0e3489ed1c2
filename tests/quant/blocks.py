"""Random GGUF blocks of every format the fused GEMV reads from the file's bytes (quant/planes.py).

Random codes with finite fp16 scales are valid blocks of every format, so the tests need no
quantizer. Imported by path (tests put this folder on sys.path).
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

FORMATS = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q4_K, T.Q5_K, T.Q6_K]
# where each format keeps its fp16 scales in a block: (first byte, count)
F16_FIELDS = {T.Q8_0: (0, 1), T.Q4_0: (0, 1), T.Q4_1: (0, 2), T.Q5_0: (0, 1), T.Q4_K: (0, 2), T.Q5_K: (0, 2),
              T.Q6_K: (208, 1)}


def random_blocks(t: T, n: int, k: int, seed: int, scale: float = 0.01) -> np.ndarray:
    """uint8 [n * k / block * size]: random codes, fp16 scales ~ N(0, scale) of either sign."""
    block, size = GGML_QUANT_SIZES[t]
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (n * k // block, size), dtype=np.uint8)
    first, count = F16_FIELDS[t]
    sc = (rng.standard_normal((b.shape[0], count)) * scale).astype(np.float16)
    b[:, first:first + 2 * count] = sc.view(np.uint8).reshape(b.shape[0], 2 * count)
    return b.reshape(-1)
