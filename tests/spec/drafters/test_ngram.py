"""The n-gram drafter's device lookup (spec/drafters/ngram.py): its torch path and its Triton kernel
(in the interpreter on the CPU) give the drafts of a plain-Python statement of the rule on random
and repetitive sequences (matches that run into the suffix and continue periodically, no match,
every n), and where the host lookup it replaced proposed k full drafts, exactly those; the torch
path has no host sync (capturable); on a toy target, speculative rounds launched ahead of the
round before them give plain decoding's tokens at temp 0 and with the bench's sampled chain, and
draft what host rounds drafting the rule's k tokens draft (same rounds, same acceptance at each
position); on CUDA (gpu tests) the kernel replayed from a CUDA graph equals the torch path and the
engine's pipelined n-gram text is plain decoding's."""

import random

import pytest
import torch

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.spec.drafters.ngram import NGramDrafter, ScriptedDrafter
from mtp_turbo.spec.program import RoundProgram
from mtp_turbo.spec.round import RoundStats, speculative_tokens

SAMPLED = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                        presence_penalty=0.4, penalty_last_n=64, seed=5)


def rule(tok: list[int], k: int, nmin: int, nmax: int) -> tuple[list[int], int]:
    """The lookup as specified: for n = nmax .. nmin the largest end e in [n, L-1] with
    tok[e-n:e] == tok[L-n:L] (the first n that matches wins); draft j = tok[e + j mod (L - e)];
    no match: the last token k times. -> (drafts, n or 0)."""
    L = len(tok)
    for n in range(nmax, nmin - 1, -1):
        for e in range(L - 1, n - 1, -1):
            if tok[e - n: e] == tok[L - n: L]:
                return [tok[e + j % (L - e)] for j in range(k)], n
    return [tok[L - 1]] * k, 0


def host_lookup(tok: list[int], k: int, nmin: int, nmax: int) -> list[int]:
    """What the host NGramDrafter (before the device one) proposed: the latest earlier occurrence
    of the longest suffix, then at most k tokens and never past the end (maybe fewer, maybe none)."""
    L = len(tok)
    for n in range(nmax, nmin - 1, -1):
        if L < n + 1:
            continue
        ends = [e for e in range(n, L) if tuple(tok[e - n: e]) == tuple(tok[L - n:])]
        if ends:
            e = max(ends)
            return tok[e: min(e + k, L)]
    return []


def sequences(rng: random.Random):
    """Random sequences over small and large vocabularies, periodic ones, ones with a repeated
    stretch inside noise, lengths 1 .. 300."""
    for _ in range(50):
        kind = rng.choice(["random", "periodic", "stretch"])
        L = rng.randrange(1, 300)
        if kind == "random":
            V = rng.choice([2, 3, 7, 1000])
            yield [rng.randrange(V) for _ in range(L)]
        elif kind == "periodic":
            p = [rng.randrange(50) for _ in range(rng.randrange(1, 6))]
            yield [p[i % len(p)] for i in range(L)]
        else:
            s = [rng.randrange(50) for _ in range(rng.randrange(2, 12))]
            pre = [rng.randrange(1000, 2000) for _ in range(rng.randrange(0, 40))]
            mid = [rng.randrange(1000, 2000) for _ in range(rng.randrange(0, 40))]
            yield pre + s + mid + s[: rng.randrange(1, len(s) + 1)]


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_device_drafts_follow_the_rule_and_the_host_lookup(kernels):
    rng = random.Random(1 if kernels == "torch" else 2)
    cases = {"full": 0, "periodic": 0, "none": 0, "short n": 0}
    for tok in sequences(rng):
        L = len(tok)
        # a buffer past the committed tokens holding stale ids (rejected drafts): never read
        buf = torch.tensor(tok + [rng.randrange(50) for _ in range(rng.randrange(0, 1200))], dtype=torch.int64)
        for nmin, nmax in ((1, 4), (2, 4), (3, 5), (1, 1)):
            dr = NGramDrafter(nmin, nmax, kernels=kernels)
            k = rng.randrange(1, 8)
            want, n = rule(tok, k, nmin, nmax)
            got = dr.lookup(buf, torch.tensor([L]), k).tolist()
            assert got == want + [n], (tok, nmin, nmax, k, got, want, n)
            if kernels == "triton":  # the kernel and the torch path on the same input
                assert NGramDrafter(nmin, nmax, kernels="torch").lookup(buf, torch.tensor([L]), k).tolist() == got
            host = host_lookup(tok, k, nmin, nmax)
            assert got[: len(host)] == host  # what the host found, it drafts first
            if len(host) == k:
                cases["full"] += 1
            elif host:
                cases["periodic"] += 1  # the host ran out at the end: the rest continues periodically
            else:
                cases["none"] += 1
            cases["short n"] += 0 < n < nmax
    assert min(cases.values()) >= 5, cases


def test_propose_is_the_device_lookup_and_hooks_keep_no_state():
    dr = NGramDrafter()
    tok = [5, 1, 2, 3, 9, 1, 2, 3, 7, 1, 2]
    assert dr.propose(tok, 4) == rule(tok, 4, 1, 4)[0] == [3, 7, 1, 2]
    assert dr.propose(tok, 0) == [] and dr.propose([], 3) == []
    assert dr.propose([4], 3) == [4, 4, 4]  # one token: nothing before it, the last token repeated
    dr.begin(tok)
    dr.observe(tok + [3], 0, None)
    dr.truncate(2)
    dr.reset()
    assert dr.propose(tok, 4) == [3, 7, 1, 2]
    assert dr.prepare(tok, 3) == (0, None) and dr.prepare(tok, 0) is None


def test_torch_lookup_is_capturable(no_sync):
    dr = NGramDrafter(kernels="torch")
    buf = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 1, 4, 1, 5, 0, 0], dtype=torch.int64)
    with torch.no_grad(), no_sync():
        out = dr.device_drafts(None, 0, 3, buf, torch.tensor([12]))
    assert out.tolist() == rule(buf[:12].tolist(), 3, 1, 4)[0] == [9, 2, 6]


V, CTX = 60, 400


class ToyTarget:
    """A Target whose row logits are a function of (input token, position), mostly of the token,
    so greedy text falls into cycles (n-gram matches) and sampled text does now and then."""

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.E = torch.randn(V, V, generator=g) * 4.0
        self.P = torch.randn(CTX + 16, V, generator=g) * 0.3
        self.device = torch.device("cpu")
        self.ctx_size = CTX
        self.tokens: list[int] = []
        self.tok_buf = torch.zeros(CTX + 16, dtype=torch.int64)

    def start(self, ids):
        self.tokens = list(ids)
        self.tok_buf.zero_()
        self.tok_buf[: len(ids)] = torch.tensor(ids)

    def forward_body(self, tokens, pos):
        return (self.E[tokens] + self.P[pos]).float(), torch.zeros(tokens.shape[0], 4)

    def forward(self, n_rows, pad_to=0):
        n = len(self.tokens)
        pos = torch.arange(n - 1, n - 1 + n_rows)
        return self.forward_body(self.tok_buf[pos], pos)

    def commit(self, new, accepted=0, on_device=False):
        self.tokens += list(new)

    def rollback(self, n):
        del self.tokens[n:]


class Recorded(RoundStats):
    """RoundStats keeping each round's (drafts, accepted)."""

    def add(self, k, accepted, emitted):
        self.__dict__.setdefault("log", []).append((k, accepted, emitted))
        super().add(k, accepted, emitted)


def run(target, prompt, sampler, k, drafter, pipeline, budget=90, glue="auto"):
    """budget tokens after prompt through speculative_tokens -> (tokens, stats)."""
    target.start(prompt)
    prog = RoundProgram(target, sampler, "exact", drafter, graphs=False, pipeline=pipeline, glue=glue)
    stats = Recorded(drafter.name, k)
    out = [t for toks in speculative_tokens(target, sampler, SpecConfig(draft="ngram", draft_tokens=k), budget,
                                            drafter, stats, prog) for t in toks]
    return out[:budget], stats


@pytest.mark.parametrize("sampler", [SamplerConfig(temperature=0.0), SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("k", [1, 3])
def test_rounds_launched_ahead_give_plain_tokens_and_the_rule_drafts(sampler, k):
    tg = ToyTarget(seed=3)
    prompt = [7, 3, 11, 3, 7, 20, 3, 11]
    tg.start(prompt)
    plain_prog = RoundProgram(tg, sampler)
    plain = []
    for _ in range(90):
        a, e, _ = plain_prog.run(0)
        tg.commit(e, a, on_device=True)
        plain += e
    got, st = run(tg, prompt, sampler, k, NGramDrafter(), pipeline=True)
    assert got == plain
    # the lookup and the round's index work as kernels (Triton's interpreter): the same rounds
    got_k, st_k = run(tg, prompt, sampler, k, NGramDrafter(kernels="triton"), pipeline=True, glue="triton")
    assert got_k == plain and st_k.log == st.log
    assert st.ahead >= st.rounds // 2, (st.ahead, st.rounds)
    # every round drafts k (the counts say so), but near the budget's end, where fewer fit
    assert st.k_counts[k] >= st.rounds - k - 1 and st.drafted == sum(kk * c for kk, c in st.k_counts.items())
    # host rounds drafting the rule's k tokens from the committed sequence: the same rounds
    ref, rs = run(tg, prompt, sampler, k, ScriptedDrafter(lambda t, kk: rule(t, kk, 1, 4)[0]), pipeline=False)
    assert ref == plain and rs.ahead == 0
    # round by round the same drafts and acceptance up to the budget's last 2k + 2 tokens (a round
    # launched ahead drafts what fits the most its predecessor may emit, a round read first what fits)
    same = next((i for i, (a, b) in enumerate(zip(st.log, rs.log)) if a != b), min(len(st.log), len(rs.log)))
    assert sum(e for _, _, e in st.log[:same]) >= 90 - 2 * (k + 1), (same, st.log, rs.log)
    starts = [sum(e for _, _, e in st.log[:i]) for i in range(same)]
    assert all(kk == k for (kk, _, _), s in zip(st.log, starts) if s < 90 - 2 * (k + 1))
    assert sum(a for _, a, _ in st.log[:same]) > 0


@pytest.mark.gpu
def test_cuda_kernel_replayed_from_a_graph_equals_the_torch_path():
    rng = random.Random(7)
    C = 5000  # 5 programs of 1024 ends
    buf = torch.zeros(C, dtype=torch.int64, device="cuda")
    n = torch.ones(1, dtype=torch.int64, device="cuda")
    kern, ref = NGramDrafter(kernels="auto"), NGramDrafter(kernels="torch")
    assert kern._kernel(buf)
    for k in (1, 3, 7):
        kern.lookup(buf, n, k)  # the scratch, before the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = kern.lookup(buf, n, k)
        for tok in list(sequences(rng))[:20] + [[1, 2, 3] * 1500, [rng.randrange(4) for _ in range(4990)]]:
            buf.copy_(torch.tensor(tok + [0] * (C - len(tok)), device="cuda"))
            n.fill_(len(tok))
            g.replay()
            want = ref.lookup(buf, n, k)
            assert torch.equal(out, want) and torch.equal(kern.lookup(buf, n, k), want), (len(tok), k)
            assert out.tolist()[:k] == rule(tok, k, 1, 4)[0]


@pytest.mark.gpu
def test_cuda_pipelined_ngram_rounds_are_plain_decoding(model_path):
    """On CUDA (rounds from CUDA graphs, launched ahead): the text is plain decoding's at temp 0 and
    with the sampled chain, most rounds went ahead, and they accepted what rounds launched after
    the host read the one before accept (the same lookup on the same committed tokens; only the
    budget's last rounds may draft fewer)."""
    from mtp_turbo.engine import Engine, EngineConfig

    on, off = (Engine(EngineConfig(model=str(model_path), device="cuda", progress=False, pipeline=p))
               for p in ("auto", "off"))
    assert on.pipelined and not off.pipelined
    prompt = "List the first twenty prime numbers, then list them again in reverse order:"
    spec = SpecConfig(draft="ngram", draft_tokens=3)
    for s in (SamplerConfig(temperature=0.0), SAMPLED):
        plain = off.generate_ids(prompt, sampler=s, max_tokens=128)
        got = on.generate_ids(prompt, sampler=s, max_tokens=128, spec=spec)
        a = on.last_stats.spec
        assert off.generate_ids(prompt, sampler=s, max_tokens=128, spec=spec) == got == plain
        b = off.last_stats.spec
        assert a.ahead >= a.rounds // 2 and b.ahead == 0, (a.ahead, a.rounds)
        assert abs(a.accepted - b.accepted) <= 8 and (a.accepted > 0 or not s.greedy), (a.accepted, b.accepted)
