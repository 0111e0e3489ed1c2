"""SamplerConfig's ranges: every value the float32 chain cannot take (NaN, infinities, a subnormal
temperature, factors that overflow a logit) is one ConfigError line naming the field and its
range; the edges of each range are accepted; and no accepted extreme makes the sampler emit NaN
or a token outside the vocabulary."""

import math

import pytest
import torch

from mtp_turbo.errors import ConfigError
from mtp_turbo.sampling.config import INT_MAX, PENALTY, REPEAT_PENALTY, TEMPERATURE, SamplerConfig

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("field,value,words", [
    ("temperature", 1e-320, ["temperature", "0 (greedy)", "[0.001, 100]"]),
    ("temperature", 5e-4, ["temperature", "[0.001, 100]"]),
    ("temperature", -0.1, ["temperature"]),
    ("temperature", 100.5, ["temperature", "[0.001, 100]"]),
    ("temperature", INF, ["temperature", "inf"]),
    ("temperature", NAN, ["temperature", "nan"]),
    ("repeat_penalty", 0.0, ["repeat-penalty", "[0.01, 100]"]),
    ("repeat_penalty", 1e-320, ["repeat-penalty"]),
    ("repeat_penalty", -1.0, ["repeat-penalty"]),
    ("repeat_penalty", 1e400, ["repeat-penalty", "inf"]),
    ("repeat_penalty", NAN, ["repeat-penalty"]),
    ("presence_penalty", 101.0, ["presence-penalty", "[-100, 100]"]),
    ("presence_penalty", -INF, ["presence-penalty"]),
    ("presence_penalty", NAN, ["presence-penalty"]),
    ("frequency_penalty", -101.0, ["frequency-penalty", "[-100, 100]"]),
    ("frequency_penalty", INF, ["frequency-penalty"]),
    ("top_p", 0.0, ["top-p", "(0, 1]"]),
    ("top_p", NAN, ["top-p"]),
    ("top_p", INF, ["top-p"]),
    ("min_p", -1e-9, ["min-p", "[0, 1]"]),
    ("min_p", NAN, ["min-p"]),
    ("top_k", -1, ["top-k"]),
    ("top_k", INT_MAX + 1, ["top-k", str(INT_MAX)]),
    ("penalty_last_n", -2, ["penalty-last-n"]),
    ("penalty_last_n", INT_MAX + 1, ["penalty-last-n", str(INT_MAX)]),
    ("seed", -1, ["seed"]),
    ("seed", 2**63, ["seed"]),
])
def test_out_of_range_is_one_line_naming_field_and_range(field, value, words):
    with pytest.raises(ConfigError) as e:
        SamplerConfig(**{field: value})
    msg = str(e.value)
    assert "\n" not in msg and msg.count("must be") == 1, msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize("kw", [
    dict(temperature=0.0), dict(temperature=TEMPERATURE[0]), dict(temperature=TEMPERATURE[1]),
    dict(repeat_penalty=REPEAT_PENALTY[0]), dict(repeat_penalty=REPEAT_PENALTY[1]),
    dict(presence_penalty=-PENALTY, frequency_penalty=PENALTY), dict(top_p=1e-300), dict(min_p=1.0),
    dict(top_k=INT_MAX, penalty_last_n=INT_MAX), dict(penalty_last_n=-1), dict(seed=2**63 - 1),
])
def test_the_edges_are_accepted(kw):
    cfg = SamplerConfig(**kw)
    assert all(getattr(cfg, k) == v for k, v in kw.items())


@pytest.mark.parametrize("kw", [
    dict(temperature=TEMPERATURE[0], repeat_penalty=REPEAT_PENALTY[0], presence_penalty=-PENALTY,
         frequency_penalty=-PENALTY),
    dict(temperature=TEMPERATURE[1], repeat_penalty=REPEAT_PENALTY[1], presence_penalty=PENALTY,
         frequency_penalty=PENALTY),
    dict(temperature=TEMPERATURE[0], top_k=INT_MAX, top_p=1e-300, min_p=1.0),
])
def test_extremes_keep_the_chain_finite(kw):
    """The torch chain (the CPU engine's) at the corners of the ranges, on large float32 logits with
    a long history: a distribution (finite, summing to 1), and a drawn token in the vocabulary."""
    from mtp_turbo.sampling.chain import sample_dist
    from mtp_turbo.sampling.fused import sample_tokens

    cfg = SamplerConfig(**{"penalty_last_n": -1, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **kw})
    g = torch.Generator().manual_seed(0)
    vocab, n = 1000, 4096
    logits = torch.randn(1, vocab, generator=g) * 30
    history = torch.randint(0, vocab, (n,), generator=g)
    p = sample_dist(logits, history, cfg)
    assert torch.isfinite(p).all() and abs(float(p.sum()) - 1) < 1e-4
    ids = sample_tokens(logits, history, torch.tensor([n]), cfg, backend="torch")
    assert 0 <= int(ids[0]) < vocab and float(p[0, ids[0]]) > 0
