"""The round's index kernels (spec/glue.py) against the torch ops they replaced, written out here as
the round program and the MTP drafter ran them before: on random inputs, every k 1..7 (and 0),
drafts all accepted, none, some, the legacy greedy rule, n at the token buffer's end, plain steps
of 2..8 in a program, a round staged ahead for every previous outcome a with and without the
penalty window (past the sequence's start, over more than one block), the draft slots with and
without a reduced head's id map. The kernels run in Triton's CPU interpreter; the torch branch is
checked against the same references. On CUDA (gpu tests) the kernels replayed from a CUDA graph
give the torch branch's results."""

import random

import pytest
import torch

from mtp_turbo.spec.glue import RoundGlue
from mtp_turbo.spec.verify import accept_exact, accept_greedy

pytest.importorskip("triton")

pytestmark = pytest.mark.interpret
BACKENDS = ("triton", "torch")
C = 64  # the token buffer: ctx_size 48 + 16, as the engine's


# ---- the torch ops the kernels replace (spec/program.py and spec/drafters/mtp.py before them) ----
def old_round(tb, n, drafts, k, t, raw, ar, out):
    """draft (drafts into tb), verify's input rows, accept (program.py's _parts): -> (rows, tokens)."""
    if k:
        tb.index_copy_(0, n + ar[:k], drafts)
    rows = n - 1 + ar[: k + 1]
    toks = tb[rows]
    pos = n + ar[: k + 1]
    dr = tb[n + ar[:k]]
    a, e = accept_exact(t, dr) if raw is None else accept_greedy(raw, t, dr)
    a = a.view(1)
    cur = tb[pos]
    tb.index_copy_(0, pos, torch.where(ar[: k + 1] <= a, e, cur))
    out[:1].copy_(a)
    out[1: k + 2].copy_(e)
    n.add_(a + 1)
    return rows, toks, pos


def old_after(staged, R, k, a, tb, n, window):
    """_chain_after's index work -> (tokens, runs, p0 + j for each chain step)."""
    pos = staged[:R]
    runs = staged[R: R + R * k * 6].view(R, k, 6).index_select(0, a)[0]
    if window is not None:
        vmap, seq, w, offs = window
        at = n + offs
        seq[:w].copy_(torch.where(at >= 0, vmap[tb[at.clamp(min=0)]], -1))
    p0 = pos.index_select(0, a)
    return tb[pos + 1], runs, torch.cat([p0 + j for j in range(k)])


def buffers():
    return (torch.full((9,), -5, dtype=torch.int64) for _ in range(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_inputs_and_accept_equal_the_torch_ops(backend):
    rng = random.Random(0)
    glue, ar = RoundGlue(backend), torch.arange(9)
    seen = set()
    for trial in range(80):
        k = trial % 8
        greedy = trial % 3 == 2
        n0 = rng.choice([1, 2, rng.randrange(1, C - 16 - k), C - 16 - k])  # at the context's end too
        tb = torch.tensor([rng.randrange(6) for _ in range(C)])
        drafts = torch.tensor([rng.randrange(6) for _ in range(k)], dtype=torch.int64)
        # row draws: the drafts up to a chosen point (all, none, some), then anything
        cut = rng.randrange(k + 1)
        t = torch.tensor([int(drafts[i]) if i < cut else rng.randrange(6) for i in range(k + 1)])
        raw = torch.tensor([int(drafts[i]) if i < cut else rng.randrange(6) for i in range(k + 1)]) if greedy else None
        ref_tb, ref_n, ref_out = tb.clone(), torch.tensor([n0]), torch.full((10,), -7)
        rows_r, toks_r, pos_r = old_round(ref_tb, ref_n, drafts, k, t, raw, ar, ref_out)
        n, out = torch.tensor([n0]), torch.full((10,), -7)
        rows, toks, pos = buffers()
        glue.round_inputs(tb, n, drafts if k else None, k, ar, rows, toks, pos)
        assert rows[: k + 1].tolist() == rows_r.tolist() and toks[: k + 1].tolist() == toks_r.tolist()
        assert pos[: k + 1].tolist() == pos_r.tolist() and (rows[k + 1:] == -5).all()  # nothing past the rows
        # every other trial also copies the rows' hidden states (D past one column block) by row
        hid = None
        if trial % 2:
            D = 200
            h, hb = torch.randn(k + 1, D).to(torch.bfloat16), torch.zeros(C, D, dtype=torch.bfloat16)
            ref_hb = hb.clone().index_copy_(0, rows_r, h)
            hid = (h, hb, rows[: k + 1])
        glue.accept(tb, n, t, raw, k, ar, toks, pos, out, hid)
        assert torch.equal(tb, ref_tb) and torch.equal(n, ref_n) and torch.equal(out, ref_out), (trial, k, out, ref_out)
        if hid is not None:
            assert torch.equal(hb, ref_hb) and hb[rows_r].abs().sum() > 0
        a = int(out[0])
        seen.add("all" if a == k else "none" if a == 0 else "some")
    assert seen == {"all", "none", "some"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("steps", [2, 5, 8])
def test_plain_steps_equal_the_torch_ops(backend, steps):
    # step j (program.py's _plain_steps before): input tb[n-1+j] at n-1+j, draw at n+j, the token
    # written there and into out[1+j]; at the end out[0] = steps - 1 and n += steps
    rng = random.Random(steps)
    glue, ar = RoundGlue(backend), torch.arange(9)
    for n0 in (1, 7, C - 16 - steps):
        tb = torch.tensor([rng.randrange(50) for _ in range(C)])
        ref_tb, ref_out, ref_n = tb.clone(), torch.full((10,), -7), torch.tensor([n0])
        n, out = torch.tensor([n0]), torch.full((10,), -7)
        rows, toks, pos = buffers()
        glue.round_inputs(tb, n, None, 0, ar, rows, toks, pos)
        for j in range(steps):
            p = ref_n + j
            assert (toks[0], rows[0], pos[0]) == (ref_tb[p - 1], p - 1, p), j  # this step's inputs
            t = torch.tensor([rng.randrange(50)])
            ref_tb.index_copy_(0, p, t)
            ref_out[1 + j: 2 + j].copy_(t)
            glue.step_commit(tb, n, t, j, steps, out, toks, rows, pos)
        ref_out[:1].fill_(steps - 1)
        ref_n.add_(steps)
        assert torch.equal(tb, ref_tb) and torch.equal(out, ref_out) and torch.equal(n, ref_n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_staged_ahead_picks_the_outcome(backend):
    # prepare_after's staged vector: cells [R] | runs [R, k, 6]; every outcome a picks its runs,
    # the catch-up tokens tb[cell + 1] and the chain positions cell a + j; the penalty window is
    # the head indices of tb[n-W:n] (-1 before the start, -1 for tokens without a head row)
    rng = random.Random(1)
    glue = RoundGlue(backend)
    V = 40
    vmap = torch.tensor([rng.randrange(-1, 30) for _ in range(V)])
    big = 3000  # a window over several of the kernel's blocks
    tb = torch.tensor([rng.randrange(V) for _ in range(big + 64)])
    for trial in range(24):
        R, k = rng.randrange(2, 9), rng.randrange(1, 8)
        n0 = rng.choice([2, 5, rng.randrange(2, big)])
        cells = torch.arange(n0 - 1, n0 - 1 + R)
        staged = torch.cat([cells, torch.tensor([rng.randrange(100) for _ in range(R * k * 6)])])
        w = rng.choice([None, 3, 64, big])
        for a in range(R):
            at = torch.tensor([a])
            win = win_ref = None
            if w is not None:
                seq, seq_ref = torch.full((w + 8,), -9), torch.full((w + 8,), -9)
                win, win_ref = ((vmap, s, w, torch.arange(-w, 0)) for s in (seq, seq_ref))
            want = old_after(staged, R, k, at, tb, torch.tensor([n0]), win_ref)
            got = glue.after_inputs(staged, R, k, at, tb, torch.tensor([n0]), win)
            for g, r in zip(got, want):
                assert g.shape == r.shape and torch.equal(g, r), (trial, a, g, r)
            if w is not None:
                assert torch.equal(seq, seq_ref) and (seq[w:] == -9).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_after_select_takes_row_a(backend, dtype):
    glue = RoundGlue(backend)
    for R in (2, 5, 8):
        x, q = torch.randn(R, 64).to(dtype), torch.randn(R, 2, 32).to(dtype)
        for a in range(R):
            xs, qs = glue.after_select(torch.tensor([a]), x, q)
            assert xs.shape == (1, 64) and qs.shape == (1, 2, 32)
            assert torch.equal(xs, x[a: a + 1]) and torch.equal(qs, q[a: a + 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_draft_store_maps_and_enters_the_window(backend):
    glue = RoundGlue(backend)
    ids = torch.tensor([5, 9, 2, 40, 7])
    for i in range(5):
        for mapped in (None, ids):
            for window in (False, True):
                drafts, seq = torch.full((4,), -1), torch.full((6,), -1)
                glue.draft_store(torch.tensor([i]), mapped, drafts[2:3], seq[4:5] if window else None)
                want = i if mapped is None else int(ids[i])
                assert drafts.tolist() == [-1, -1, want, -1]
                assert seq.tolist() == [-1] * 4 + ([i] if window else [-1]) + [-1]


def test_auto_takes_torch_for_cpu_tensors_and_a_failing_kernel_falls_back(capsys, monkeypatch):
    import mtp_turbo.spec.glue as gm

    auto = RoundGlue()
    assert not auto.on(torch.zeros(1)) and RoundGlue("triton").on(torch.zeros(1))

    class Broken:  # a kernel that fails to build
        __name__ = "round_inputs_kernel"

        def __getitem__(self, grid):
            def launch(*a, **kw):
                raise RuntimeError("no such instruction")
            return launch

    monkeypatch.setattr(gm, "round_inputs_kernel", Broken())
    monkeypatch.setattr(auto, "on", lambda t: auto.backend != "torch")  # as for a CUDA tensor
    ar, tb, n = torch.arange(9), torch.arange(20), torch.tensor([5])
    rows, toks, pos = buffers()
    auto.round_inputs(tb, n, torch.tensor([11, 12]), 2, ar, rows, toks, pos)  # done with torch ops
    assert auto.backend == "torch" and "failed" in capsys.readouterr().err
    assert tb[5:7].tolist() == [11, 12] and toks[:3].tolist() == [4, 11, 12] and pos[:3].tolist() == [5, 6, 7]
    with pytest.raises(RuntimeError):  # an explicit "triton" backend (the checks) raises instead
        RoundGlue("triton").round_inputs(tb, n, torch.tensor([1]), 1, ar, rows, toks, pos)


# ---- CUDA ----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cuda_kernels_replayed_from_a_graph_equal_the_torch_ops():
    """Every kernel on the GPU, captured in one CUDA graph per k and replayed on fresh inputs
    (the device scalars n and a change between replays): the torch branch's results, bit for bit."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on the device machine)")
    dev = torch.device("cuda")
    rng = random.Random(2)
    kern, ref = RoundGlue(), RoundGlue("torch")
    ar = torch.arange(9, device=dev)

    def state():
        tb = torch.tensor([rng.randrange(6) for _ in range(C)], device=dev)
        return tb, torch.tensor([rng.randrange(1, C - 24)], device=dev)

    for k in range(0, 8):
        for greedy in (False, True):
            bufs = {}
            for name, g in (("kern", kern), ("ref", ref)):
                tb, n = (torch.zeros(C, dtype=torch.int64, device=dev), torch.ones(1, dtype=torch.int64, device=dev))
                d = torch.zeros(max(k, 1), dtype=torch.int64, device=dev)
                t = torch.zeros(k + 1, dtype=torch.int64, device=dev)
                raw = torch.zeros(k + 1, dtype=torch.int64, device=dev) if greedy else None
                rows, toks, pos = (torch.zeros(9, dtype=torch.int64, device=dev) for _ in range(3))
                out = torch.zeros(10, dtype=torch.int64, device=dev)

                hid = (torch.zeros(k + 1, 640, dtype=torch.bfloat16, device=dev),
                       torch.zeros(C, 640, dtype=torch.bfloat16, device=dev), rows[: k + 1])

                def work(g=g, tb=tb, n=n, d=d, t=t, raw=raw, rows=rows, toks=toks, pos=pos, out=out, hid=hid):
                    g.round_inputs(tb, n, d[:k] if k else None, k, ar, rows, toks, pos)
                    g.accept(tb, n, t, raw, k, ar, toks, pos, out, hid)
                    g.round_inputs(tb, n, None, 0, ar, rows, toks, pos)  # then two plain steps
                    g.step_commit(tb, n, t[:1], 0, 2, out, toks, rows, pos)
                    g.step_commit(tb, n, t[-1:], 1, 2, out, toks, rows, pos)

                work()  # builds the kernels
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    work()
                bufs[name] = (graph, tb, n, d, t, raw, rows, toks, pos, out, hid[0], hid[1])
            for _ in range(4):
                tb0, n0 = state()
                h0 = torch.randn(k + 1, 640, device=dev).to(torch.bfloat16)
                drafts = torch.tensor([rng.randrange(6) for _ in range(max(k, 1))], device=dev)
                cut = rng.randrange(k + 1)
                tt = torch.tensor([int(drafts[i]) if i < cut and i < k else rng.randrange(6) for i in range(k + 1)],
                                  device=dev)
                for graph, tb, n, d, t, raw, *rest in bufs.values():
                    tb.copy_(tb0)
                    n.copy_(n0)
                    d.copy_(drafts)
                    t.copy_(tt)
                    if raw is not None:
                        raw.copy_(tt.flip(0))
                    rest[-2].copy_(h0)  # the rows' hidden states the accept kernel copies
                    graph.replay()
                torch.cuda.synchronize()
                a, b = bufs["kern"][1:], bufs["ref"][1:]
                for x, y in zip(a, b):
                    assert x is None or torch.equal(x, y), (k, greedy)

    # the drafter's: a round staged ahead, every outcome, with a penalty window; row a; the slots
    vmap = torch.tensor([rng.randrange(-1, 30) for _ in range(40)], device=dev)
    tb = torch.tensor([rng.randrange(40) for _ in range(C)], device=dev)
    for R, k, w in ((4, 3, None), (4, 3, 64), (8, 7, 1500), (2, 1, 3)):
        runs = torch.tensor([rng.randrange(99) for _ in range(R * k * 6)])
        staged = torch.cat([torch.arange(9, 9 + R), runs]).to(dev)
        x = torch.randn(R, 640, device=dev, dtype=torch.bfloat16)
        q = torch.randn(R, 4, 256, device=dev, dtype=torch.bfloat16)
        ids = torch.tensor([rng.randrange(1000) for _ in range(40)], device=dev)
        a = torch.zeros(1, dtype=torch.int64, device=dev)
        n = torch.tensor([30], device=dev)
        res = {}
        for name, g in (("kern", kern), ("ref", ref)):
            seq = torch.full((max(w or 1, 1) + 8,), -9, device=dev)
            win = None if w is None else (vmap, seq, w, torch.arange(-w, 0, device=dev))
            slots = torch.zeros(8, dtype=torch.int64, device=dev)

            def work(g=g, win=win, slots=slots, seq=seq):
                o = g.after_inputs(staged, R, k, a, tb, n, win)
                s = g.after_select(a, x, q)
                g.draft_store(o[2][:1] % 40, ids, slots[1:2], seq[w: w + 1] if w else None)
                g.draft_store(o[2][:1] % 40, None, slots[2:3])
                return o, s

            work()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                o, s = work()
            res[name] = (graph, o, s, seq, slots)
        for av in range(R):
            a.fill_(av)
            outs = []
            for graph, o, s, seq, slots in res.values():
                graph.replay()
                torch.cuda.synchronize()
                outs.append([t.clone() for t in (*o, *s, seq, slots)])
            for x1, x2 in zip(*outs):
                assert torch.equal(x1, x2), (R, k, w, av)


@pytest.mark.gpu
def test_cuda_engine_rounds_with_the_kernels_are_the_torch_glue_rounds(model_path, monkeypatch):
    """The engine on the real model: MTP rounds launched ahead (temp 0, k 3; temp 0.6 with the
    chain's penalties, k 2), n-gram rounds and plain programs of steps give, with the index
    kernels, the text of plain decoding and the same acceptance at every draft position as an
    engine whose programs and drafters all take the torch glue."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on the device machine)")
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec import program
    from mtp_turbo.spec.config import SpecConfig
    from mtp_turbo.spec.drafters import mtp

    prompt = "Question: Explain in detail how a steam engine works.\nAnswer:"
    chain = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                          presence_penalty=0.4, seed=2)
    cases = [(SamplerConfig(temperature=0.0), SpecConfig(draft="mtp", draft_tokens=3)),
             (chain, SpecConfig(draft="mtp", draft_tokens=2)),
             (SamplerConfig(temperature=0.0), SpecConfig(draft="ngram", draft_tokens=3)),
             (chain, None)]

    def runs(backend):
        eng = Engine(EngineConfig(model=str(model_path), device="cuda", progress=False))
        out = []
        for s, spec in cases:
            ids = eng.generate_ids(prompt, sampler=s, max_tokens=96, **({"spec": spec} if spec else {}))
            st = eng.last_stats.spec if spec else None
            out.append((ids, None if st is None else (st.rounds, st.accepted_per_position, st.ahead > 0)))
            assert all(p.glue.backend == backend for p in eng.kept.programs.values())
        plain = [eng.generate_ids(prompt, sampler=s, max_tokens=96) for s, _ in cases]
        return out, plain

    with_kernels, plain = runs("auto")
    for mod in (program, mtp):  # every RoundGlue made from here on takes torch ops
        monkeypatch.setattr(mod, "RoundGlue", lambda backend="auto": RoundGlue("torch"))
    with_torch, _ = runs("torch")
    for (s, _), a, b, p in zip(cases, with_kernels, with_torch, plain):
        assert a == b and a[0] == p, (s, a[1], b[1])
    assert with_kernels[0][1][2] and with_kernels[0][1][1][0] > 0  # launched ahead, drafts accepted
