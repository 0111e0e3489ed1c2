"""The greedy pick (models/greedy.py) against torch.argmax, in Triton's CPU interpreter: the same
index on random rows, on ties inside a chunk and across chunks (the first index wins), on rows of
-inf and NaN, for 1..8 rows and vocabularies that are not a multiple of the chunk; its arrival
counters end every launch at zero; mapped through an id table and written into a given slot."""

import pytest
import torch

pytest.importorskip("triton")

from mtp_turbo.models.greedy import CHUNK, GreedyPick  # noqa: E402

pytestmark = pytest.mark.interpret


@pytest.mark.parametrize("T,V", [(1, 3 * CHUNK + 17), (4, 300), (8, 2 * CHUNK)])
def test_greedy_pick_is_torch_argmax(T, V):
    g = torch.Generator().manual_seed(T * 1000 + V)
    pick = GreedyPick(backend="triton")
    for trial in range(3):
        x = torch.randn(T, V, generator=g)
        if trial == 1:  # ties: the maximum repeated later in the row (same chunk and other chunks)
            for r in range(T):
                j = int(torch.randint(0, V, (1,), generator=g))
                x[r, j:] = torch.where(torch.rand(V - j, generator=g) < 0.01, x[r].max() + 1, x[r, j:])
                x[r, -1] = x[r].max()
        if trial == 2:  # a row of -inf, a NaN
            x[0] = float("-inf")
            x[-1, V // 2] = float("nan")
        got = pick(x)
        assert got.dtype == torch.int64 and torch.equal(got, x.argmax(-1)), (trial, got, x.argmax(-1))
        assert not any(s[2].any() for s in pick.scratch.values())


def test_greedy_pick_returns_a_fresh_tensor_and_torch_elsewhere():
    pick = GreedyPick(backend="triton")
    a, b = torch.randn(1, 500), torch.randn(1, 500)
    ia = pick(a)
    ib = pick(b)
    assert torch.equal(ia, a.argmax(-1)) and torch.equal(ib, b.argmax(-1))
    assert torch.equal(GreedyPick()(a), a.argmax(-1))  # CPU tensors: torch's argmax
    x = torch.randn(500, 2).t()  # strided rows: torch's argmax
    assert torch.equal(pick(x), x.argmax(-1))


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_greedy_pick_maps_through_ids_into_a_slot(backend):
    # a reduced draft head's rows -> token ids, the id written into the caller's slot (a chain's
    # draft), nothing else of the slot's buffer touched
    g = torch.Generator().manual_seed(5)
    pick = GreedyPick(backend)
    for T, V in ((1, 300), (3, CHUNK + 5)):
        ids = torch.randperm(4 * V, generator=g)[:V]
        x = torch.randn(T, V, generator=g)
        buf = torch.full((T + 3,), -1, dtype=torch.int64)
        got = pick(x, out=buf[1: 1 + T], ids=ids)
        assert got.data_ptr() == buf[1:].data_ptr() and torch.equal(got, ids[x.argmax(-1)])
        assert buf[0] == -1 and (buf[1 + T:] == -1).all()
        assert torch.equal(pick(x, ids=ids), ids[x.argmax(-1)])
        assert torch.equal(pick(x, out=torch.empty(T, dtype=torch.int64)), x.argmax(-1))


@pytest.mark.gpu
def test_greedy_pick_on_cuda_in_a_graph():
    # the kernel on the GPU, eagerly and replayed from a CUDA graph: torch.argmax's index on the
    # head's shapes (1, 4, 8 rows of 262144; 1 of 32768), ties included, counters back at zero
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on the device machine)")
    g = torch.Generator(device="cuda").manual_seed(0)
    pick = GreedyPick()
    for T, V in ((1, 262144), (4, 262144), (8, 262144), (1, 32768)):
        x = torch.randn(T, V, device="cuda", generator=g)
        x[:, -1] = x.max(-1).values  # a tie with the last column: the first index wins
        assert torch.equal(pick(x), x.argmax(-1))
        ids = torch.randperm(V, device="cuda", generator=g)
        slot = torch.zeros(T + 1, dtype=torch.int64, device="cuda")
        assert torch.equal(pick(x, out=slot[1:], ids=ids), ids[x.argmax(-1)])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = pick(x)
            pick(x, out=slot[1:], ids=ids)  # a slot at an offset of 8 bytes, mapped
        for _ in range(3):
            x.copy_(torch.randn(T, V, device="cuda", generator=g))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, x.argmax(-1)) and torch.equal(slot[1:], ids[x.argmax(-1)]), (T, V)
        assert not any(s[2].any() for s in pick.scratch.values())
