"""MTP rounds through the round program on a toy target, with the round's and the drafter's index
work as spec/glue.py's kernels (Triton's CPU interpreter; the draft pick's id map in its argmax
kernel) against the torch ops the CPU runs: rounds read first and rounds launched ahead (the
previous round's outcome picked on the device: catch-up tokens, read runs, chain positions,
draft 0's row, the penalty window) give the same rounds, round by round (drafts, acceptance,
tokens), at temp 0, with a penalised chain (a window, the whole history), coupled drafts, full
and reduced heads; every outcome (all accepted, none, some) occurs.

The toy target's hidden rows are conftest.FakeMain's (a function of the position and the
committed tokens); its row logits agree with the next row's input (the draft) on 3 positions of
4 (a fixed random pattern), so acceptance runs the whole range. Drafts then change what is verified,
which no real model does; the check is only that every configuration runs the same rounds."""

import dataclasses
import random

import pytest
import torch

from mtp_turbo.models.greedy import GreedyPick
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.spec.config import SpecConfig
from mtp_turbo.spec.drafters.mtp import MTPDrafter
from mtp_turbo.spec.glue import RoundGlue
from mtp_turbo.spec.program import RoundProgram
from mtp_turbo.spec.round import RoundStats, speculative_tokens

pytest.importorskip("triton")

pytestmark = [pytest.mark.interpret, pytest.mark.usefixtures("one_thread")]
CTX = 300


class HiddenTarget:
    """Target for the tiny MTP head: hidden rows FakeMain's, logits [T, V] favouring on 3 of 4
    positions (a fixed random pattern) the next row's input token (a draft, when the round has
    one), else a token that depends on the position and the input token."""

    def __init__(self, tiny, seed=0):
        self.V = tiny.V
        g = torch.Generator().manual_seed(seed)
        self.main = tiny.main(seed, n=CTX + 16)
        self.L = torch.randn(CTX + 16, self.V, generator=g)
        self.agree = torch.rand(CTX + 16, generator=g) < 0.75
        self.device, self.ctx_size = torch.device("cpu"), CTX
        self.tokens: list[int] = []
        self.tok_buf = torch.zeros(CTX + 16, dtype=torch.int64)

    def start(self, ids):
        self.tokens = list(ids)
        self.tok_buf.zero_()
        self.tok_buf[: len(ids)] = torch.tensor(ids)

    def forward_body(self, tokens, pos):
        m = self.main
        prev = torch.cat([self.tok_buf[(pos[:1] - 1).clamp(min=0)], tokens[:-1]])
        hidden = m.P[pos] + m.E[tokens] + 0.5 * m.E[prev]
        logits = self.L[pos] + m.E[tokens][:, :1] * 0.1  # (rows depend on their input)
        nxt = torch.cat([tokens[1:], tokens[-1:]])
        agree = self.agree[pos] & (torch.arange(tokens.shape[0]) < tokens.shape[0] - 1)
        logits = logits + 20.0 * agree[:, None] * torch.nn.functional.one_hot(nxt, self.V)
        return logits.float(), hidden

    def forward(self, n_rows, pad_to=0):
        n = len(self.tokens)
        pos = torch.arange(n - 1, n - 1 + n_rows)
        return self.forward_body(self.tok_buf[pos], pos)

    def commit(self, new, accepted=0, on_device=False):
        self.tokens += list(new)

    def rollback(self, n):
        del self.tokens[n:]


class Recorded(RoundStats):
    def add(self, k, accepted, emitted):
        self.__dict__.setdefault("log", []).append((k, accepted, emitted))
        super().add(k, accepted, emitted)


def run(tiny, head, sampler, k, pipeline, kernels, budget=60, seed=0, coupling=False):
    tg = HiddenTarget(tiny, seed)
    rng = random.Random(seed)
    prompt = [rng.randrange(tiny.V) for _ in range(30)]
    tg.start(prompt)
    dr = MTPDrafter(head, capacity=CTX, sink=4, window=16, kernels="torch")
    if kernels:  # the index work's kernels in the interpreter (the step's math stays torch: fast)
        dr.glue, dr.pick = RoundGlue("triton"), GreedyPick("triton")
    dr.on_prefill(0, len(prompt) - 1, tg.main.hidden(prompt)[: len(prompt) - 1].clone(), prompt)
    prog = RoundProgram(tg, sampler, "exact", dr, graphs=False, pipeline=pipeline,
                        glue="triton" if kernels else "torch")
    stats = Recorded("mtp", k)
    spec = SpecConfig(draft="mtp", draft_tokens=k, draft_coupling=coupling)
    out = [t for toks in speculative_tokens(tg, sampler, spec, budget, dr, stats, prog) for t in toks]
    return out[:budget], stats


PEN = SamplerConfig(temperature=0.7, top_k=20, top_p=0.95, repeat_penalty=1.3, presence_penalty=0.5,
                    penalty_last_n=8, seed=4)


@pytest.mark.parametrize("sampler,reduced,k,coupling", [
    (SamplerConfig(temperature=0.0), False, 3, False), (SamplerConfig(temperature=0.0), True, 5, False),
    (PEN, True, 2, False), (PEN, False, 4, False),
    (dataclasses.replace(PEN, penalty_last_n=-1), True, 3, False),
    (SamplerConfig(temperature=0.8, top_p=0.9, seed=3), False, 3, True),
], ids=["greedy", "greedy_reduced", "penalised_reduced", "penalised", "whole_history", "coupled"])
def test_rounds_with_the_glue_kernels_are_the_torch_rounds(tiny, sampler, reduced, k, coupling):
    ids = torch.tensor(sorted(random.Random(3).sample(range(tiny.V), 40))) if reduced else None
    head = tiny.head(vocab_ids=ids, seed=1)
    ref, rs = run(tiny, head, sampler, k, pipeline=False, kernels=False, coupling=coupling)
    got, st = run(tiny, head, sampler, k, pipeline=False, kernels=True, coupling=coupling)
    assert got == ref and st.log == rs.log
    outcomes = {"all" if a == kk else "none" if a == 0 else "some" for kk, a, _ in rs.log if kk}
    assert outcomes == {"all", "none", "some"}, rs.log
    if sampler.penalty_last_n < 0:  # whole-history windows: rounds wait for the one before
        return
    # launched ahead: the same rounds but near the budget's end, where a round launched ahead
    # drafts what fits the most its predecessor may emit (here fewer drafts change the verify)
    got, st = run(tiny, head, sampler, k, pipeline=True, kernels=True, coupling=coupling)
    assert st.ahead >= st.rounds // 2, (st.ahead, st.rounds)
    same = next(i for i, (x, y) in enumerate(zip(st.log + [None], rs.log + [()])) if x != y)
    done = sum(e for _, _, e in rs.log[:same])
    assert done >= len(ref) - 2 * (k + 1) and got[:done] == ref[:done], (same, st.log, rs.log)
