"""The verifier: token-for-token equality with plain sampling for any drafts, and the rules."""

import pytest
import torch

from mtp_turbo.errors import ConfigError
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.sampling.draw import sample
from mtp_turbo.spec.verify import accept_exact, accept_greedy, verify

V = 40


class Model:
    """Deterministic logits from the whole history (random table by last token + counts)."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.a = 2.5 * torch.randn(V, V, generator=g)
        self.w = 0.3 * torch.randn(V, V, generator=g)

    def __call__(self, h):
        return self.a[h[-1]] + torch.bincount(torch.tensor(h), minlength=V).float() @ self.w


def plain(model, prompt, n, cfg):
    h = list(prompt)
    while len(h) < len(prompt) + n:
        h.append(int(sample(model(h)[None], torch.tensor(h), cfg, torch.tensor([len(h)]))[0]))
    return h


def speculative(model, prompt, n, cfg, k, drafter, mode="exact"):
    h, rounds = list(prompt), 0
    while len(h) < len(prompt) + n:
        d = drafter(h, k)
        logits = torch.stack([model(h + d[:i]) for i in range(k + 1)])
        r = verify(logits, torch.tensor(h + d), k, cfg, pos0=len(h), mode=mode)
        assert len(r.emitted) == r.accepted + 1 and r.emitted[: r.accepted] == d[: r.accepted]
        assert (r.bonus is None) == (r.accepted < k) and (r.recovered is None) == (r.accepted == k)
        h += r.emitted
        rounds += 1
    return h[: len(prompt) + n], rounds


CFGS = [
    SamplerConfig(temperature=0.8, top_k=10, top_p=0.9, min_p=0.05, repeat_penalty=1.2,
                  presence_penalty=0.3, frequency_penalty=0.1, penalty_last_n=8, seed=3),
    SamplerConfig(temperature=1.3, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.1,
                  penalty_last_n=-1, seed=77),
    SamplerConfig(temperature=0.0, repeat_penalty=1.5, presence_penalty=0.5, seed=1),
]


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_verify_equals_plain_sampling_for_random_drafts(cfg, k):
    model = Model(k)
    prompt = [1, 5, 9]
    want = plain(model, prompt, 30, cfg)
    g = torch.Generator().manual_seed(100 + k)

    def random_drafts(h, k):  # random, sometimes correct (so acceptance paths are exercised)
        d = torch.randint(0, V, (k,), generator=g).tolist()
        for i in range(k):
            if len(h) + i < len(want) and torch.rand(1, generator=g) < 0.6:
                d[i] = want[len(h) + i]
        return d

    got, rounds = speculative(model, prompt, 30, cfg, k, random_drafts)
    assert got == want
    assert rounds < 30  # some drafts were accepted


def test_oracle_drafter_accepts_everything_and_wrong_drafter_nothing():
    cfg = CFGS[0]
    model = Model(0)
    want = plain(model, [2, 3], 24, cfg)
    oracle = lambda h, k: (want[len(h):len(h) + k] + [0] * k)[:k]
    got, rounds = speculative(model, [2, 3], 24, cfg, 3, oracle)
    assert got == want and rounds == 6
    wrong = lambda h, k: [(want[len(h)] + 1) % V] * k if len(h) < len(want) else [0] * k
    got, rounds = speculative(model, [2, 3], 24, cfg, 3, wrong)
    assert got == want and rounds == 24


def test_accept_rules_by_hand():
    t = torch.tensor([[4, 5, 6, 7], [4, 9, 6, 7], [1, 5, 6, 7], [4, 5, 6, 8]])
    d = torch.tensor([[4, 5, 6]] * 4)
    acc, out = accept_exact(t, d)
    assert acc.tolist() == [3, 1, 0, 3]
    assert out.tolist() == [[4, 5, 6, 7], [4, 9, -1, -1], [1, -1, -1, -1], [4, 5, 6, 8]]
    raw = torch.tensor([[4, 5, 0, 0], [0, 0, 0, 0], [4, 5, 6, 0], [4, 0, 6, 0]])
    acc, out = accept_greedy(raw, t, d)
    assert acc.tolist() == [2, 0, 3, 1]
    assert out.tolist() == [[4, 5, 6, -1], [4, -1, -1, -1], [4, 5, 6, 7], [4, 5, -1, -1]]


def test_greedy_mode_keeps_unpenalised_argmax_and_samples_last_row_with_history():
    model = Model(5)
    h = [1, 2, 3]
    cfg = SamplerConfig(temperature=0.9, repeat_penalty=1.3, presence_penalty=0.4, seed=4)
    d1 = int(torch.argmax(model(h)))
    d2 = (int(torch.argmax(model(h + [d1]))) + 1) % V  # second draft is not the argmax
    logits = torch.stack([model(h), model(h + [d1]), model(h + [d1, d2])])
    r = verify(logits, torch.tensor(h + [d1, d2]), 2, cfg, mode="greedy")
    assert r.accepted == 1 and r.emitted[0] == d1
    # the last token is what plain sampling draws at that position after h + [d1]
    want = int(sample(model(h + [d1])[None], torch.tensor(h + [d1]), cfg, torch.tensor([4]))[0])
    assert r.emitted[1] == want and r.recovered == want


def test_bad_mode_is_a_config_error():
    with pytest.raises(ConfigError):
        verify(torch.zeros(2, 4), torch.tensor([0, 1]), 1, CFGS[0], mode="typical")
