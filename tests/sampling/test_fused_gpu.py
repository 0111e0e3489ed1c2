"""The fused sampler kernels on CUDA at the real vocabulary (V = 262144): bitwise batch invariance
(1 row vs 16 rows), agreement with the torch chain (run on the CPU: its divisions are IEEE, as
the kernels'), the in-kernel uniforms, CUDA-graph capture and replay, plain == speculative text.

Agreement (also on rows built to stress the top-k selection: ties, all-equal rows, few finite
values, clustered or spread tops, values ulps apart): survivor sets and final logits equal; tokens
equal to the exact float64 inverse CDF of the torch chain's final logits except where u lies
within 1e-9 of a boundary (counted: 0 in these cases). A min-p decision may differ where
exp(l - max) is within a few ulps of min_p (the GPU's float32 exp); such rows are counted too (0
in these cases).
"""

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from mtp_turbo.sampling import fused  # noqa: E402
from mtp_turbo.sampling import kernels as K  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.sampling.exact import exact_draw, reference_logits  # noqa: E402
from mtp_turbo.sampling.rng import uniforms  # noqa: E402

pytestmark = pytest.mark.gpu

V = 262144
CHAIN = dict(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4,
             frequency_penalty=0.1, penalty_last_n=64, seed=17)
CASES = {
    "chain": SamplerConfig(**CHAIN),
    "chain top-k 0": SamplerConfig(**{**CHAIN, "top_k": 0}),
    "top-p 0.95 only": SamplerConfig(temperature=1.0, top_k=0, top_p=0.95, min_p=0.0, seed=17),
    "greedy + penalties": SamplerConfig(**{**CHAIN, "temperature": 0.0}),
    "top-k 1": SamplerConfig(**{**CHAIN, "top_k": 1}),
    "top-k 200": SamplerConfig(**{**CHAIN, "top_k": 200}),
    "whole history, penalties first": SamplerConfig(**{**CHAIN, "penalty_last_n": -1, "order": (
        "penalties", "top_k", "temperature", "min_p", "top_p")}),
    "masks before top-k": SamplerConfig(**{**CHAIN, "order": ("min_p", "top_p", "top_k", "penalties", "temperature")}),
}


def lm_like(rows, seed, vocab=V):
    """Heavy-tailed rows like an LM's (a bulk, a few hundred strong tokens); one on a 0.25 grid
    (ties), one with -inf tokens (a vocabulary mask)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g) * 2.0
    x += (torch.rand(rows, vocab, generator=g) < 0.001) * (6 + 4 * torch.rand(rows, vocab, generator=g))
    x[0] = torch.round(x[0] * 4) / 4
    if rows > 1:
        x[1, 200000:] = float("-inf")
    return x


def history(logits, n, seed):
    """A sequence whose every other token is one of row 0's strongest (penalties bite)."""
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, logits.shape[1], (n,), generator=g)
    top = logits[0].topk(20).indices
    tok[::2] = top[torch.randint(0, 20, (len(tok[::2]),), generator=g)]
    return tok


@triton.jit
def _probe(P, U, KA, KB, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(U + i, K._uniform(tl.load(P + i), KA, KB))


def test_uniforms_in_kernel_bit_exact_on_cuda():
    pos = torch.cat([torch.arange(1000), torch.tensor([2**31, 2**40 + 7, 2**62 + 12345])])
    pos = torch.cat([pos, torch.zeros(1024 - len(pos), dtype=torch.int64)]).cuda()
    for seed in (0, 1, 2**63 - 1):
        ka, kb = (fused._signed(k) for k in fused._keys(seed))
        got = torch.empty(1024, dtype=torch.float64, device="cuda")
        _probe[(1,)](pos, got, ka, kb, N=1024)
        assert torch.equal(got, uniforms(seed, pos))


@pytest.mark.parametrize("name", list(CASES))
def test_rows_alone_equal_rows_together_bitwise(name):
    c = CASES[name]
    logits = lm_like(16, 1).cuda()
    tok = history(logits.cpu(), 3000, 2).cuda()
    pos = torch.arange(2980, 2996, device="cuda")
    ids, fl = fused.sample_tokens(logits, tok, pos, c, return_logits=True)
    for r in (0, 1, 7, 15):
        one, f1 = fused.sample_tokens(logits[r:r + 1].clone(), tok, pos[r:r + 1].clone(), c, return_logits=True)
        assert torch.equal(one, ids[r:r + 1]) and torch.equal(f1, fl[r:r + 1]), (name, r)
    five, f5 = fused.sample_tokens(logits[3:8].clone(), tok, pos[3:8].clone(), c, return_logits=True)
    assert torch.equal(five, ids[3:8]) and torch.equal(f5, fl[3:8])


@pytest.mark.parametrize("name", list(CASES))
def test_agrees_with_the_torch_chain(name):
    logits = lm_like(8, 3)
    _agrees_with_the_torch_chain(name, CASES[name], logits, history(logits, 3000, 4))


def _agrees_with_the_torch_chain(name, c, logits, tok):
    """Rows 2990..2997 of `logits` [8, V] with history `tok`, sampled on the GPU: the same survivors
    and final values as the torch chain, greedy's argmax, the exact float64 inverse CDF's tokens
    (no uniform within 1e-9 of a boundary)."""
    pos = torch.arange(2990, 2998)
    ids, fl = fused.sample_tokens(logits.cuda(), tok.cuda(), pos.cuda(), c, return_logits=True)
    ids, fl = ids.cpu(), fl.cpu()
    ref = reference_logits(logits, fused.window_rows(tok, pos, c.penalty_last_n), c)
    fin = ref.isfinite()
    assert torch.equal(fl.isfinite(), fin), name
    if c.greedy:
        assert torch.equal(ids, fin.to(torch.int8).argmax(dim=1))
        return
    assert torch.equal(fl[fin], ref[fin])
    want, margin = exact_draw(ref, uniforms(c.seed, pos))
    near = int((margin < 1e-9).sum())
    assert near == 0 and torch.equal(ids, want), (name, ids.tolist(), want.tolist())


def adversarial_rows(vocab, seed):
    """[8, vocab] rows that stress the top-k selection (sampling/topk.py): a few values (ties at
    every threshold, across chunks), all equal (more ties than the selection's M), 9 finite values,
    the top spread one a chunk, values 1-8 ulps apart, +-0 and huge magnitudes, the top clustered
    in one stretch of the vocabulary, all negative."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, vocab, generator=g) * 3
    x[0] = torch.round(x[0] / 4) * 4
    x[1] = 2.0
    x[2] = float("-inf")
    x[2, torch.randperm(vocab, generator=g)[:9]] = torch.randn(9, generator=g)
    x[3] = -30.0
    x[3, ::137] = torch.linspace(5, 6, len(x[3, ::137]))
    x[4] = 1.0 + torch.randint(1, 9, (vocab,), generator=g) * 1.1920929e-07
    x[5, torch.randperm(vocab, generator=g)[:20]] = torch.tensor([0.0, -0.0] * 10)
    x[5, :7] = torch.tensor([1e38, -1e38, 1e-45, -1e-45, 1e38, 1e-45, -0.0])  # (/ temperature stays finite)
    x[6, vocab // 8: vocab // 8 + vocab // 64] += 10
    x[7] = -x[7].abs() - 1
    return x


ADVERSARIAL = {
    "chain": CASES["chain"],
    "top-k 40 only": SamplerConfig(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0, seed=17),
    "top-k 128 + chain": SamplerConfig(**{**CHAIN, "top_k": 128}),
    "greedy + penalties": CASES["greedy + penalties"],
    "top-k 1": CASES["top-k 1"],
}


@pytest.mark.parametrize("vocab", [V, 32768])
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_rows_agree_with_the_torch_chain(name, vocab):
    """The selection's paths on the GPU (the maxima bound alone, after search steps, ties past M,
    one candidate, top-1) against the torch chain: same survivors, values, tokens."""
    logits = adversarial_rows(vocab, 11)
    _agrees_with_the_torch_chain(name, ADVERSARIAL[name], logits, history(logits, 3000, 12))


def test_many_draws_agree_with_the_exact_inverse_cdf():
    """One row's distribution (full chain, top-k 0) hit by 16 x 64 uniforms: every token equals the
    exact float64 inverse CDF (near-boundary uniforms counted: 0)."""
    c = CASES["chain top-k 0"]
    logits = lm_like(1, 5).expand(16, -1).contiguous()
    tok = history(logits, 200, 6)
    win = fused.window_rows(tok, torch.full((16,), 200), 64)
    ref = reference_logits(logits[:1], win[:1], c)
    bad = near = 0
    for rep in range(64):
        u = uniforms(rep, torch.arange(16))
        got = fused.sample_rows(logits.cuda(), win.cuda(), u.cuda(), c).cpu()
        want, margin = exact_draw(ref.expand(16, -1), u)
        near += int((margin < 1e-9).sum())
        bad += int(((got != want) & (margin >= 1e-9)).sum())
    assert bad == 0 and near == 0


@pytest.mark.parametrize("name", ["chain", "chain top-k 0", "greedy + penalties", "whole history, penalties first"])
def test_cuda_graph_capture_and_replay(name):
    c = CASES[name]
    rows = 4
    logits = lm_like(rows, 7).cuda()
    tok = history(logits.cpu(), 4096, 8).cuda()
    pos = torch.arange(3000, 3000 + rows, device="cuda")
    fused.sample_tokens(logits, tok, pos, c)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused.sample_tokens(logits, tok, pos, c)
    for step in range(3):  # new inputs in the captured buffers
        logits.copy_(lm_like(rows, 20 + step).cuda())
        pos.add_(rows)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fused.sample_tokens(logits, tok, pos, c))


def test_cuda_graph_reads_the_values_from_its_params_buffer():
    """A graph captured with one configuration's values in a params buffer, replayed after another
    configuration of the same shape was written there, draws what that configuration draws."""
    rows = 4
    logits = lm_like(rows, 7).cuda()
    tok = history(logits.cpu(), 4096, 8).cuda()
    pos = torch.arange(3000, 3000 + rows, device="cuda")
    a = CASES["chain"]
    others = [SamplerConfig(**{**CHAIN, "seed": s, "temperature": t, "top_p": p}) for s, t, p in
              ((1, 0.6, 0.95), (2, 1.4, 0.8), (2**62, 0.3, 0.99))]
    assert all(fused.sampler_shape(b, V, 4096) == fused.sampler_shape(a, V, 4096) for b in others)
    params = torch.tensor(fused.sampler_values(a), device="cuda")
    fused.sample_tokens(logits, tok, pos, a, params=params)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused.sample_tokens(logits, tok, pos, a, params=params)
    seen = set()
    for b in others:
        params.copy_(torch.tensor(fused.sampler_values(b)))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fused.sample_tokens(logits, tok, pos, b)), b
        seen.add(tuple(out.tolist()))
    assert len(seen) > 1  # the values changed the draws


def test_plain_and_speculative_text_equal_same_seed():
    """A toy LM (a fixed random table on the last tokens) at V = 262144: plain decoding (1 row a
    call) and verification of 3 drafts a round (4 rows a call) emit the same text for a seed."""
    g = torch.Generator().manual_seed(0)
    table = (torch.randn(61, V, generator=g) * 2.5).cuda()
    c, k, n_new = SamplerConfig(**{**CHAIN, "seed": 5}), 3, 40
    logits_of = lambda h: table[(h[-1] * 7 + h[-2] * 3 + len(h)) % 61]  # noqa: E731
    buf = torch.zeros(256, dtype=torch.int64, device="cuda")
    plain = [1, 2, 3]
    for _ in range(n_new):
        buf[: len(plain)] = torch.tensor(plain)
        at = torch.tensor([len(plain)], device="cuda")
        plain.append(int(fused.sample_tokens(logits_of(plain)[None], buf, at, c)))
    spec, rounds = [1, 2, 3], 0
    while len(spec) < len(plain):
        drafts = [plain[j] if j < len(plain) and (j * 5) % 3 else (j * 31) % V for j in range(len(spec), len(spec) + k)]
        seq = spec + drafts
        buf[: len(seq)] = torch.tensor(seq)
        rows = torch.stack([logits_of(seq[: len(spec) + i]) for i in range(k + 1)])
        t = fused.sample_tokens(rows, buf, torch.arange(len(spec), len(spec) + k + 1, device="cuda"), c).tolist()
        acc = 0
        while acc < k and t[acc] == drafts[acc]:
            acc += 1
        spec += t[: acc + 1]
        rounds += 1
    assert spec[: len(plain)] == plain and rounds < n_new


def test_checks_through_the_fused_sampler_on_cuda():
    from mtp_turbo.check import enumerate as en
    from mtp_turbo.check import montecarlo as mc

    rep = mc.run_montecarlo(n_seq=60_000, seed=7, k=2, same_seed_seqs=5_000, sampler="fused")
    assert rep["ok"] and all(r["same_seed_identical"] == 1.0 for r in rep["rows"])
    rep = en.enumerate_check(sampler="fused")
    assert rep["ok"] and rep["vs_torch"] < 1e-6
