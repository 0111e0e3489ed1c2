"""The counter-based uniform stream: reference equality, uniformity, decorrelation."""

import math

import torch

from mtp_turbo.sampling.rng import reference_uniform, uniforms


def test_matches_pure_python_reference():
    pos = [0, 1, 2, 63, 64, 1000, 2**31 - 1, 2**31, 2**40 + 7, 2**62 + 12345]
    for seed in (0, 1, 42, 2**63 - 1, 0xDEADBEEF):
        got = uniforms(seed, torch.tensor(pos, dtype=torch.int64)).tolist()
        assert got == [reference_uniform(seed, p) for p in pos]


def test_range_and_dtype():
    u = uniforms(5, torch.arange(100_000, dtype=torch.int64))
    assert u.dtype == torch.float64 and float(u.min()) >= 0.0 and float(u.max()) < 1.0


def test_uniformity_chi_square_and_ks():
    n = 1_000_000
    u = uniforms(123, torch.arange(n, dtype=torch.int64))
    bins = 1000
    obs = torch.bincount((u * bins).long(), minlength=bins).double()
    chi2 = float(((obs - n / bins) ** 2 / (n / bins)).sum())
    # chi-square with 999 dof: mean 999, sd ~44.7; 5 sd bound
    assert abs(chi2 - 999) < 5 * math.sqrt(2 * 999), chi2
    s = torch.sort(u).values
    i = torch.arange(1, n + 1, dtype=torch.float64)
    d = float(torch.maximum(i / n - s, s - (i - 1) / n).max())
    assert d * math.sqrt(n) < 1.95, d  # KS 0.1% critical value is 1.95


def test_seeds_and_positions_decorrelated():
    n = 200_000
    pos = torch.arange(n, dtype=torch.int64)
    a, b = uniforms(1, pos), uniforms(2, pos)
    bound = 5 / math.sqrt(n)
    def corr(x, y):
        x, y = x - x.mean(), y - y.mean()
        return float((x * y).sum() / torch.sqrt((x * x).sum() * (y * y).sum()))
    assert abs(corr(a, b)) < bound  # different seeds, same positions
    assert abs(corr(a[:-1], a[1:])) < bound  # neighbouring positions
    assert torch.equal(uniforms(1, pos + 1)[:-1], a[1:])  # stateless: position is the counter
    # seeds are not shifts of one another within a window of positions
    assert not torch.equal(uniforms(1, pos[:1000]), uniforms(2, pos[:1000]))
    assert len(set(torch.cat([a, b]).tolist())) == 2 * n
