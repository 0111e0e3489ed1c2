"""Torch's own launches in a round's device program, counted on the CPU: every aten op the program
runs outside the target's forward and outside Triton kernels (each is a kernel of torch's on CUDA,
cumprod two, views none), and the Triton launches, per program kind, for the round program of the
tree given (--repo: e.g. an export of an older commit, to compare before and after a change).

Why: the GPU profile (bench/round_profile.py) measures these launches' device time; this says,
without a GPU, which of them a change removes. The CPU runs the CUDA path's code: the drafter on
the fused kernels (kernels="triton", Triton's interpreter), the argmax kernel, the round's index
kernels where the tree has them (spec/glue.py, glue="triton"). The target is a toy (its forward is
not counted: the fused forward's own embedding lookup was 2 torch launches a forward, now 1 Triton
launch); the sampler's ops are counted apart (sampling/ is not the round's glue).

    git archive HEAD~1 | (mkdir -p /tmp/old && tar -x -C /tmp/old)
    python bench/experiments/glue_launches.py --repo /tmp/old ; python bench/experiments/glue_launches.py
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import random
import sys
from collections import Counter
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton imports
HERE = Path(__file__).resolve().parents[2]

# no kernel on CUDA: allocation, aliasing, a Python scalar wrapped as a 0-dim host tensor
SKIP = {"empty", "empty_strided", "empty_like", "detach", "alias", "lift_fresh", "_local_scalar_dense", "set_",
        "resize_", "scalar_tensor"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(HERE), help="the tree whose mtp_turbo runs (default: this one)")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    sys.path.insert(0, args.repo)

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.runtime import interpreter

    from mtp_turbo.models.greedy import GreedyPick
    from mtp_turbo.sampling.config import SamplerConfig
    from mtp_turbo.spec import program as pm
    from mtp_turbo.spec.config import SpecConfig
    from mtp_turbo.spec.drafters import mtp as mm
    from mtp_turbo.spec.drafters.ngram import NGramDrafter
    from mtp_turbo.spec.round import RoundStats, speculative_tokens

    spec = importlib.util.spec_from_file_location("tiny", HERE / "tests" / "spec" / "drafters" / "conftest.py")
    tiny_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_mod)
    tiny = tiny_mod.TinyMTP()
    V, CTX = tiny.V, 400

    state = {"where": None, "key": None}  # None: count; else the op's bucket
    ops: dict[tuple, Counter] = {}
    calls: Counter = Counter()  # programs run per (kind, program)

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not func.is_view and name not in SKIP and state["key"] is not None:
                where = state["where"] or "glue"
                ops.setdefault(state["key"], Counter())[(where, name)] += 1
            return func(*args, **(kwargs or {}))

    def quiet(where, f):
        def g(*a, **kw):
            prev, state["where"] = state["where"], where
            try:
                return f(*a, **kw)
            finally:
                state["where"] = prev
        return g

    real_run = interpreter.InterpretedFunction.run

    def run(self, *a, **kw):
        if state["key"] is not None and state["where"] is None:
            ops.setdefault(state["key"], Counter())[("triton", self.fn.__name__)] += 1
        prev, state["where"] = state["where"], "in-kernel"
        try:
            return real_run(self, *a, **kw)
        finally:
            state["where"] = prev

    interpreter.InterpretedFunction.run = run
    for mod in (pm, mm):
        if hasattr(mod, "sample_tokens"):
            mod.sample_tokens = quiet("sampler", mod.sample_tokens)

    class Target:
        """As tests/spec/drafters/test_mtp_rounds.py's: FakeMain hidden rows, logits agreeing
        with the next row's input on 3 positions of 4."""

        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.main = tiny.main(0, n=CTX + 16)
            self.L = torch.randn(CTX + 16, V, generator=g)
            self.agree = torch.rand(CTX + 16, generator=g) < 0.75
            self.device, self.ctx_size, self.tokens = torch.device("cpu"), CTX, []
            self.tok_buf = torch.zeros(CTX + 16, dtype=torch.int64)
            self.forward_body = quiet("forward", self._body)
            self.forward = quiet("forward", self._forward)  # (eager rounds read n on the host)

        def _body(self, tokens, pos):
            m = self.main
            prev = torch.cat([self.tok_buf[(pos[:1] - 1).clamp(min=0)], tokens[:-1]])
            hidden = m.P[pos] + m.E[tokens] + 0.5 * m.E[prev]
            nxt = torch.cat([tokens[1:], tokens[-1:]])
            agree = self.agree[pos] & (torch.arange(tokens.shape[0]) < tokens.shape[0] - 1)
            return (self.L[pos] + 20.0 * agree[:, None] * torch.nn.functional.one_hot(nxt, V)).float(), hidden

        def _forward(self, n_rows, pad_to=0):
            n = len(self.tokens)
            pos = torch.arange(n - 1, n - 1 + n_rows)
            return self.forward_body(self.tok_buf[pos], pos)

        def commit(self, new, accepted=0, on_device=False):
            self.tokens += list(new)

        def rollback(self, n):
            del self.tokens[n:]

    has_glue = "glue" in inspect.signature(pm.RoundProgram.__init__).parameters

    def program(tg, sampler, drafter, pipeline):
        kw = {"glue": "triton"} if has_glue else {}
        prog = pm.RoundProgram(tg, sampler, "exact", drafter, graphs=False, pipeline=pipeline, **kw)
        prog.pick = GreedyPick("triton")  # as on CUDA
        real_go, real_whole = prog._go, prog._whole

        def go(n, kind, k, key, parts, *a, **kw):
            state["bucket"] = key[0] if key[0] in ("after", "steps") else ("round" if k else "plain step")
            return real_go(n, kind, k, key, parts, *a, **kw)

        def whole(parts):
            state["key"] = (state["bucket"], id(prog))
            calls[state["key"]] += 1
            with torch.inference_mode(False), torch.no_grad(), Count():
                try:
                    return real_whole(parts)
                finally:
                    state["key"] = None

        prog._go, prog._whole = go, whole
        return prog

    def drive(name, sampler, drafter, k, pipeline=True, steps=1, budget=None):
        tg = Target()
        rng = random.Random(1)
        prompt = [rng.randrange(V) for _ in range(30)]
        prog = program(tg, sampler, drafter, pipeline)
        for _ in range(2):  # a warm-up generation first: the kernels' scratch is made in it, as on CUDA
            ops.clear()
            calls.clear()
            tg.tokens, tg.tok_buf[:30] = list(prompt), torch.tensor(prompt)
            if drafter is not None and drafter.reads_hidden:
                drafter.reset()
                drafter.on_prefill(0, 29, tg.main.hidden(prompt)[:29].clone(), prompt)
            stats = RoundStats(name, max(k, 1))
            if drafter is None:  # plain decoding: programs of `steps` plain steps, as the engine's
                n = 0
                while n < args.rounds * steps:
                    a, e, _ = prog.run(0, steps=steps)
                    tg.commit(e, a, on_device=True)
                    n += len(e)
            else:
                sp = SpecConfig(draft="mtp" if drafter.name == "mtp" else "ngram", draft_tokens=k)
                for _ in speculative_tokens(tg, sampler, sp, budget or args.rounds * (k + 1), drafter, stats, prog,
                                            plain_steps=steps):
                    pass
        return {b: (ops[(b, pid)], calls[(b, pid)]) for (b, pid) in calls if pid == id(prog)}

    greedy = SamplerConfig(temperature=0.0)
    chain = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                          presence_penalty=0.4, penalty_last_n=64, seed=0)

    def mtp():
        d = mm.MTPDrafter(tiny.head(seed=1, vocab_ids=torch.tensor(sorted(random.Random(3).sample(range(V), 40)))),
                          capacity=CTX, sink=4, window=16, kernels="triton")
        d.pick = GreedyPick("triton")
        return d

    cases = [("MTP k=3, temp 0 (reduced head)", greedy, mtp(), 3, 1),
             ("MTP k=2, temp 0.6 chain", chain, mtp(), 2, 1),
             ("n-gram k=3, temp 0", greedy, NGramDrafter(kernels="triton"), 3, 1),
             ("plain, 4 steps a program, temp 0", greedy, None, 0, 4)]
    print(f"tree: {args.repo} (round glue kernels: {'yes' if has_glue else 'no'})")
    for name, sampler, drafter, k, steps in cases:
        ops.clear()
        calls.clear()
        per = drive(name, sampler, drafter, k, steps=steps)
        for bucket, (tot, runs) in sorted(per.items()):
            n = runs * (steps if bucket == "steps" else 1)
            unit = "token" if bucket == "steps" else "program"
            by = Counter()
            for (where, op), v in tot.items():
                by[where] += v
            glue = sorted(((v / n, op) for (w, op), v in tot.items() if w == "glue"), reverse=True)
            trit = sorted(((v / n, op) for (w, op), v in tot.items() if w == "triton"), reverse=True)
            print(f"{name} | {bucket}: {runs} programs; per {unit}: torch ops {by['glue'] / n:.1f}, "
                  f"sampler torch ops {by['sampler'] / n:.1f}, Triton launches {by['triton'] / n:.1f}")
            print("    torch: " + ", ".join(f"{op} {v:.2g}" for v, op in glue))
            print("    triton: " + ", ".join(f"{op} {v:.2g}" for v, op in trit))


if __name__ == "__main__":
    main()
