"""Inverse-CDF drawing and the seeded convenience sampler."""

import torch

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.sampling.draw import draw, sample
from mtp_turbo.sampling.rng import uniforms


def test_inverse_cdf_in_token_order():
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.5, 0.25]]).expand(6, 5)
    u = torch.tensor([0.0, 0.2499, 0.25, 0.74, 0.75, 0.999999], dtype=torch.float64)
    assert draw(probs, u).tolist() == [1, 1, 3, 3, 4, 4]


def test_unnormalised_rows_and_never_a_zero_token():
    probs = torch.tensor([[0.0, 2.0, 0.0, 6.0, 0.0, 0.0]])
    assert draw(probs, torch.tensor([0.0], dtype=torch.float64)).tolist() == [1]
    assert draw(probs, torch.tensor([0.26], dtype=torch.float64)).tolist() == [3]
    # u just below 1: float edge must not land on a trailing zero-probability token
    u = torch.tensor([1.0 - 2.0 ** -53], dtype=torch.float64)
    for total in (1.0, 0.3, 7.7, 1e-30):
        p = torch.tensor([[0.0, total / 3, 2 * total / 3, 0.0, 0.0]], dtype=torch.float64)
        assert draw(p, u).tolist() == [2]


def test_frequencies_match_probs():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    n = 200_000
    ids = draw(p.expand(n, 4), uniforms(9, torch.arange(n, dtype=torch.int64)))
    freq = torch.bincount(ids, minlength=4).double() / n
    assert freq[1] == 0.0
    assert torch.allclose(freq, p.double(), atol=5 * (0.25 / n) ** 0.5)


def test_seeded_sample_reproducible_and_seed_sensitive():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 50, generator=g)
    toks = torch.randint(0, 50, (10,), generator=g)
    c = SamplerConfig(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    draws = [int(sample(logits, toks, c, torch.tensor([p]))[0]) for p in range(200)]
    again = [int(sample(logits, toks, c, torch.tensor([p]))[0]) for p in range(200)]
    assert draws == again
    other = SamplerConfig(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=12)
    assert draws != [int(sample(logits, toks, other, torch.tensor([p]))[0]) for p in range(200)]
    assert len(set(draws)) > 10
