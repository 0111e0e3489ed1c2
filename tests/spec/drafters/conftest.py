"""Fixtures shared by the MTP drafter tests (test_mtp_*.py).

Owns: the tiny MTP set-up (`tiny`: vocab V, hidden D, a random head, a fake main model whose
hidden rows show staleness), one torch thread for tiny tensors (`one_thread`, opt in with
`pytestmark = pytest.mark.usefixtures("one_thread")`), and the host-sync checks of the static
path's captured work (`no_sync`, `watch_chain`), and one driven round of accept / observe /
maybe roll back (`commit_round`). pytest runs with --import-mode=importlib, so test
modules cannot import each other or this file: helpers reach them as fixtures.
Ignores: the real-model fixtures (tests/conftest.py); test_mtp_drafter.py's own make_head / V / D,
which stay there because tests/train import them from that file by path.
"""

import pytest
import torch

from mtp_turbo.models.arch import ModelConfig, Rope
from mtp_turbo.models.mtp_head import MTPConfig, MTPHead, tensor_names


class FakeMain:
    """Hidden state of position c = a function of (c, tokens[c]) and the previous token: rewriting a
    token changes the hidden rows that depend on it, so stale rows would show. n: longest sequence."""

    def __init__(self, D: int, V: int, seed: int = 0, n: int = 600):
        g = torch.Generator().manual_seed(seed + 7)
        self.P = torch.randn(n, D, generator=g) * 3
        self.E = torch.randn(V, D, generator=g) * 3

    def hidden(self, toks):
        t = torch.tensor(toks)
        prev = torch.cat([t[:1], t[:-1]])
        return self.P[: len(toks)] + self.E[t] + 0.5 * self.E[prev]


class TinyMTP:
    """A small MTP head (vocab V, hidden D, 2 heads of 32, ffn 128, on a 3-layer main config) with
    random weights, and a FakeMain of the same sizes."""

    V, D = 97, 64

    def __init__(self, family: str = "gemma3"):
        self.family = family

    def main_cfg(self) -> ModelConfig:
        gemma = self.family == "gemma3"  # else a Qwen2 / Llama block: pre-norms only, SwiGLU, no sliding layers
        return ModelConfig(family=self.family, vocab_size=self.V, hidden=self.D, n_layers=3, n_heads=2, n_kv_heads=1,
                           head_dim=32, ffn=128, eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4 if gemma else 0.0),
                           sliding_window=16 if gemma else 0, sliding_pattern=6 if gemma else 0,
                           query_scale=32 ** -0.5, context_length=2048)

    def head(self, vocab_ids=None, seed: int = 0) -> MTPHead:
        """Random weights from `seed` (norms near 1, matrices ~ 1/sqrt(in)); vocab_ids: a reduced head."""
        V, D = self.V, self.D
        cfg = MTPConfig.for_main(self.main_cfg())
        g = torch.Generator().manual_seed(seed)
        qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        shapes = {"fc_e": (D, D), "fc_h": (D, D), "q": (qd, D), "k": (kvd, D), "v": (kvd, D), "o": (D, qd),
                  "gate": (cfg.ffn, D), "up": (cfg.ffn, D), "down": (D, cfg.ffn)}
        W = {}
        for k in tensor_names(cfg):
            if k.endswith("norm"):
                W[k] = 1.0 + 0.1 * torch.randn(cfg.head_dim if k in ("q_norm", "k_norm") else D, generator=g)
            else:
                W[k] = torch.randn(*shapes[k], generator=g) / shapes[k][1] ** 0.5
        embed = torch.randn(V, D, generator=torch.Generator().manual_seed(seed + 1))
        return MTPHead(cfg, W, embed, vocab_ids, "cpu", torch.float32)

    def main(self, seed: int = 0, n: int = 600) -> FakeMain:
        return FakeMain(self.D, self.V, seed, n)


@pytest.fixture(scope="session")
def tiny() -> TinyMTP:
    return TinyMTP()


@pytest.fixture(scope="session")
def tiny_qwen() -> TinyMTP:
    """The same tiny set-up for a head on a Qwen2 main model (its block, no embedding scale)."""
    return TinyMTP("qwen2")


@pytest.fixture
def one_thread():
    """Tiny tensors: threads only add contention (10x slower on a busy 2-core CI box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class NoSync(torch.utils._python_dispatch.TorchDispatchMode):
    """Fails on the ops that read a device value on the host (.item(), data-dependent shapes):
    on CUDA each is a sync, and illegal inside a graph capture."""

    BANNED = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "repeat_interleave.Tensor")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket.__name__) + ("." + func._overloadname if func._overloadname == "Tensor" else "")
        assert not any(name.startswith(b) for b in self.BANNED), f"host sync in the captured work: {func}"
        return func(*args, **(kwargs or {}))


@pytest.fixture
def no_sync():
    """The NoSync dispatch mode (class): `with torch.no_grad(), no_sync(): ...`."""
    return NoSync


@pytest.fixture
def watch_chain(monkeypatch):
    """watch(drafter) -> a list that gets one entry per call of the drafter's _chain (the work the
    graphs capture); every call runs under NoSync, so a host sync in it fails the test."""

    def watch(dr):
        real, ran = dr._chain, []

        def checked(*a, **kw):  # (inference mode hides ops from dispatch modes: leave it for the check)
            with torch.inference_mode(False), torch.no_grad(), NoSync():
                ran.append(1)
                return real(*a, **kw)

        monkeypatch.setattr(dr, "_chain", checked)
        return ran

    return watch


def _commit_round(rng, drafters, main, tokens, got, V, p_rollback, span):
    """One driven round: accept a random prefix of the drafts `got` plus a random token, tell every
    drafter (observe with the hidden rows of the new tokens), then with probability p_rollback
    roll back to a random length within `span` of the end. Returns the committed tokens. The
    random draws come in a fixed order, so a test's sequence is a function of its rng seed."""
    a = rng.randrange(0, len(got) + 1)
    n = len(tokens)
    new = tokens + got[:a] + [rng.randrange(V)]
    h_new = main.hidden(new)[n - 1: n + a]
    for d in drafters:
        d.observe(new, a, h_new.clone())
    if rng.random() < p_rollback:
        m = rng.randrange(max(2, len(new) - span), len(new))
        new = new[:m]
        for d in drafters:
            d.truncate(m)
    return new


@pytest.fixture
def commit_round():
    """_commit_round(rng, drafters, main, tokens, got, V, p_rollback, span) -> the new tokens."""
    return _commit_round
