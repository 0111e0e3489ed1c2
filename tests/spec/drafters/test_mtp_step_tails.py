"""The fused draft step with dense matrices on the main layers' tail kernels (FusedTiles.tails:
the norms after fc / o / down and the q/k norm + RoPE + K/V write after qkv in each GEMV's last
program) against the same step with those as kernels of their own: bit for bit, over catch-up
rows, a chain step and a read list of more than one attention chunk (Triton's CPU interpreter,
fp32)."""

import random

import pytest
import torch

pytest.importorskip("triton")

from mtp_turbo.models.fused import FusedTiles  # noqa: E402
from mtp_turbo.models.mtp_step import CELL_CHUNK, FusedMTPStep  # noqa: E402

pytestmark = [pytest.mark.interpret, pytest.mark.usefixtures("one_thread")]


def run(head, tails: bool, toks, hid, cap: int):
    c, dev = head.cfg, head.device
    kc = torch.zeros(cap, c.n_kv_heads, c.head_dim, dtype=head.dtype, device=dev)
    vc = torch.zeros_like(kc)
    st = FusedMTPStep(head, kc, vc, head.rope, FusedTiles(tails=tails))
    assert st.tails == tails
    n = len(toks)
    P = 2 * CELL_CHUNK + 10  # the rows' first cell
    pos = torch.arange(P, P + n, device=dev)
    out = {}
    x = st.inputs(torch.tensor(toks, device=dev), hid, torch.arange(n, device=dev))
    out["x"] = x.clone()
    q = st.write_qkv(x, pos)
    out["q"] = q.clone()
    # read cells: an early run, then the rows just written and one before them (> one chunk)
    M = 2 * CELL_CHUNK + 5
    runs = torch.tensor([0, 2 * CELL_CHUNK - n, P - 1, P + n, 0, 0], device=dev)
    h = st.attend(x[-1:], q[-1:], runs, M)
    out["h"] = h.clone()
    out["lg0"] = st.logits(h, 0).clone()
    # a chain step: the draft's embedding with the chained state, one cell further
    x = st.inputs(torch.tensor([toks[0]], device=dev), h, torch.zeros(1, dtype=torch.int64, device=dev))
    q = st.write_qkv(x, pos[-1:] + 1)
    runs = torch.tensor([0, 2 * CELL_CHUNK - n, P - 1, P + n + 1, 0, 0], device=dev)
    out["lg1"] = st.logits(st.attend(x, q, runs, M), 1).clone()
    out["k"], out["v"] = kc.clone(), vc.clone()
    assert not st.cnt.any(), "every tail's last program leaves its arrival counter at zero"
    return out


def check(head, n, V, D):
    rng = random.Random(n)
    toks = [rng.randrange(V) for _ in range(n)]
    hid = (torch.randn(n, D, generator=torch.Generator().manual_seed(n)) * 3).to(head.device, head.dtype)
    head.rope_at(torch.tensor([255], device=head.device))
    a, b = run(head, True, toks, hid, 256), run(head, False, toks, hid, 256)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    P = 2 * CELL_CHUNK + 10
    assert a["lg1"].abs().sum() > 0 and a["k"][P: P + n + 1].abs().all(-1).all()


@pytest.mark.parametrize("n", [1, 3])
def test_tails_equal_separate_kernels(tiny, n):
    check(tiny.head(seed=4), n, tiny.V, tiny.D)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 5])
def test_tails_equal_separate_kernels_cuda_bf16(tiny, n):
    from mtp_turbo.models.mtp_head import MTPHead

    h = tiny.head(seed=4)
    W = {k: (w if k.endswith("norm") else w.to(torch.bfloat16)).cuda() for k, w in h.W.items()}
    head = MTPHead(h.cfg, W, h.embed.to(torch.bfloat16).cuda(), None, "cuda", torch.bfloat16)
    check(head, n, tiny.V, tiny.D)
