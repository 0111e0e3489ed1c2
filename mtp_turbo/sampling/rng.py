"""Counter-based uniform stream keyed by (seed, absolute position).

Owns: `uniforms(seed, positions)`, the only source of randomness for drawing tokens. It has no
state (no torch.Generator): the uniform for the token at position n is a pure function of
(seed, n), which is what makes plain and speculative decoding emit the same tokens for a seed.
Ignores: what the numbers are used for.

Construction (all arithmetic mod 2^64; `mix` is the splitmix64 finaliser of Steele et al.):
    mix(z)  = z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
              z ^= z >> 31
    a = mix(seed), b = mix(a ^ 0xD1B54A32D192ED03)            (per-seed keys, host ints)
    h = mix(mix(position * 0x9E3779B97F4A7C15 + a) ^ b)       (per position, on the device)
    u = (h >> 11) * 2^-53                                     (53 random bits -> [0, 1), exact)
The first mix is splitmix64 itself (a Weyl sequence through the finaliser); the second, keyed by
b, decorrelates streams of different seeds, which in plain splitmix64 are shifts of one sequence.
Torch int64 multiplication wraps mod 2^64 (two's complement) on CPU and CUDA; right shifts on
int64 are arithmetic, so each one is masked to be logical. Results are bit-identical across
devices; `reference_uniform` is the same hash in plain Python ints (for tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["uniforms", "reference_uniform"]

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_SEED2 = 0xD1B54A32D192ED03


def _signed(x: int) -> int:
    """A 64-bit pattern as the int64 value torch stores."""
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix_py(z: int) -> int:
    z &= _M64
    z ^= z >> 30
    z = (z * _C1) & _M64
    z ^= z >> 27
    z = (z * _C2) & _M64
    return z ^ (z >> 31)


def _srl(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(z: Tensor) -> Tensor:
    z = z ^ _srl(z, 30)
    z = z * _signed(_C1)
    z = z ^ _srl(z, 27)
    z = z * _signed(_C2)
    return z ^ _srl(z, 31)


def _keys(seed: int) -> tuple[int, int]:
    assert 0 <= seed < 1 << 64, "seed must fit in 64 bits"
    a = _mix_py(seed)
    return a, _mix_py(a ^ _SEED2)


def uniforms(seed: int, positions: Tensor) -> Tensor:
    """Uniforms in [0, 1), float64, same shape and device as int64 `positions` (>= 0)."""
    assert positions.dtype == torch.int64, "positions must be int64"
    a, b = _keys(seed)
    z = _mix(positions * _signed(_GAMMA) + _signed(a))
    z = _mix(z ^ _signed(b))
    return _srl(z, 11).to(torch.float64) * (2.0 ** -53)


def reference_uniform(seed: int, position: int) -> float:
    """Pure-Python value of uniforms(seed, [position]) (the specification, for tests)."""
    a, b = _keys(seed)
    z = _mix_py(_mix_py(position * _GAMMA + a) ^ b)
    return (z >> 11) * 2.0 ** -53
