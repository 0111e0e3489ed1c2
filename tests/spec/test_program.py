"""The round's device program (spec/program.py) against today's host rule (spec/verify.py's
verify: sample_dist + draw + accept): on a toy target whose logits depend on the token and the
position, every round gives the same accepted count and the same emitted tokens, for greedy,
greedy with penalties, the sampled chain and the legacy lossy rule, k = 0..4, drafts that are
right, wrong and mixed; the token buffer afterwards holds exactly the committed sequence. Both
with the index work's torch ops (the CPU's) and its kernels (spec/glue.py, in Triton's
interpreter)."""

import random
import zlib

import pytest
import torch

from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.program import RoundProgram
from mtp_turbo.spec.verify import verify

V, CTX = 60, 200


class ToyTarget:
    """A Target whose row logits are a fixed function of (input token, position)."""

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.E = torch.randn(V, V, generator=g) * 2.0
        self.P = torch.randn(CTX, V, generator=g)
        self.device = torch.device("cpu")
        self.ctx_size = CTX
        self.tokens: list[int] = []
        self.tok_buf = torch.zeros(CTX + 16, dtype=torch.int64)

    def start(self, ids):
        self.tokens = list(ids)
        self.tok_buf[: len(ids)] = torch.tensor(ids)

    def logits_at(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return (self.E[tok] + self.P[pos]).float()

    def forward(self, n_rows, pad_to=0):
        n = len(self.tokens)
        rows = self.tok_buf[n - 1: n - 1 + n_rows]
        return self.logits_at(rows, torch.arange(n - 1, n - 1 + n_rows)), torch.zeros(n_rows, 4)

    def forward_body(self, tokens, pos):
        return self.logits_at(tokens, pos), torch.zeros(tokens.shape[0], 4)

    def commit(self, new, accepted=0, on_device=False):
        self.tokens += list(new)
        if not on_device:
            self.tok_buf[len(self.tokens) - len(new): len(self.tokens)] = torch.tensor(new)

    def rollback(self, n):
        del self.tokens[n:]


CFGS = {
    "greedy": (SamplerConfig(temperature=0.0), "exact"),
    "greedy_pen": (SamplerConfig(temperature=0.0, repeat_penalty=1.5, presence_penalty=0.7, penalty_last_n=6), "exact"),
    "sampled": (SamplerConfig(temperature=0.9, top_k=12, top_p=0.9, min_p=0.02, repeat_penalty=1.1,
                              presence_penalty=0.3, frequency_penalty=0.1, penalty_last_n=8, seed=5), "exact"),
    "legacy": (SamplerConfig(temperature=0.8, top_k=0, top_p=0.95, repeat_penalty=1.2, seed=9), "greedy"),
}


@pytest.mark.parametrize("glue", ["auto", "triton"])
@pytest.mark.parametrize("name", list(CFGS))
def test_program_rounds_equal_the_host_rule(name, glue):
    if glue == "triton":
        pytest.importorskip("triton")
    cfg, mode = CFGS[name]
    rng = random.Random(zlib.crc32(name.encode()))  # (str hash() differs per process)
    tg = ToyTarget(seed=1)
    tg.start([rng.randrange(V) for _ in range(10)])
    prog = RoundProgram(tg, cfg, mode, glue=glue)
    kinds = {"all": 0, "none": 0, "some": 0}
    for r in range(60):
        k = rng.randrange(0, 5)
        n = len(tg.tokens)
        # the reference first: what the host rule makes of these drafts (built from the target's
        # own greedy choices, then corrupted at a random point, so every outcome occurs)
        truth = []
        hist = list(tg.tokens)
        for i in range(k):
            lg = tg.logits_at(torch.tensor(hist[-1:]), torch.tensor([len(hist) - 1]))
            truth.append(int(lg.argmax()))
            hist.append(truth[-1])
        cut = rng.randrange(0, k + 1)
        drafts = truth[:cut] + [(t + 1 + rng.randrange(V - 1)) % V for t in truth[cut:]]
        ref_buf = torch.cat([tg.tok_buf[:n], torch.tensor(drafts, dtype=torch.int64)])
        rows = ref_buf[n - 1:]
        ref_logits = tg.logits_at(rows, torch.arange(n - 1, n + k))
        if k:
            ref = verify(ref_logits, ref_buf, k, cfg, pos0=n, mode=mode)
            want = (ref.accepted, ref.emitted)
        else:  # a plain step: the token plain sampling draws
            from mtp_turbo.sampling.draw import sample

            want = (0, sample(ref_logits, ref_buf, cfg, torch.tensor([n])).tolist())
        a, emitted, kk = prog.run(k, drafts if k else None)
        assert kk == k and (a, emitted) == want, (name, r, k, (a, emitted), want)
        kinds["all" if k and a == k else "none" if k and a == 0 else "some"] += 1
        tg.commit(emitted, a, on_device=True)
        assert tg.tok_buf[: len(tg.tokens)].tolist() == tg.tokens  # the buffer holds the committed text
        if len(tg.tokens) > CTX - 12:
            tg.start(tg.tokens[:10])
    assert min(kinds.values()) > 0, kinds


@pytest.mark.parametrize("name", ["greedy", "greedy_pen", "sampled"])
@pytest.mark.parametrize("steps", [2, 4, 8])
def test_plain_steps_in_one_program_equal_single_steps(name, steps):
    # a program of `steps` plain steps draws, step by step, what as many 1-step rounds draw (each
    # step's penalty window holds the tokens the steps before it wrote), and says steps - 1 rows
    # past the pending one were forwarded; the programs of steps with the glue's kernels
    pytest.importorskip("triton")
    cfg, _ = CFGS[name]
    one, many = ToyTarget(seed=4), ToyTarget(seed=4)
    prompt = [3, 14, 15, 9, 26, 5]
    one.start(prompt)
    many.start(prompt)
    p1, ps = RoundProgram(one, cfg), RoundProgram(many, cfg, glue="triton")
    for _ in range(24 // steps):
        a, e, k = ps.run(0, steps=steps)
        assert (a, k, len(e)) == (steps - 1, 0, steps)
        many.commit(e, a, on_device=True)
    for _ in range(24):
        a, e, _ = p1.run(0)
        one.commit(e, a, on_device=True)
    assert many.tokens == one.tokens
    assert many.tok_buf[: len(many.tokens)].tolist() == many.tokens
    with pytest.raises(AssertionError):  # steps are plain steps: no drafts beside them
        ps.run(2, steps=2)


def test_degrade_takes_the_glue_kernels_first():
    # after a failed capture the program steps down one thing at a time: the index work's kernels
    # (the program's and the drafter's, together), then the argmax kernel, then the drafter's
    # kernels, then graphs; the glue step is skipped where nothing runs kernels any more
    from mtp_turbo.spec.drafters.base import Drafter

    class Dev(Drafter):
        on_device = True
        glue, step = "kernels", "fused"

        def glue_to_torch(self):
            was, self.glue = self.glue, "torch"
            return was != "torch"

        def fall_back_to_torch(self):
            was, self.step = self.step, "torch"
            return was != "torch"

    tg = ToyTarget()
    dr = Dev()
    prog = RoundProgram(tg, SamplerConfig(temperature=0.0), drafter=dr, glue="triton")
    prog.graphs = True  # as on CUDA
    assert "index work" in prog._degrade() and prog.glue.backend == "torch" and dr.glue == "torch"
    assert "argmax" in prog._degrade() and prog.pick.backend == "torch"
    assert "drafting" in prog._degrade() and dr.step == "torch"
    assert "eagerly" in prog._degrade() and not prog.graphs
    dr2 = Dev()  # the drafter's glue alone still on
    prog2 = RoundProgram(tg, SamplerConfig(temperature=0.0), drafter=dr2, glue="torch")
    assert "index work" in prog2._degrade() and dr2.glue == "torch"
