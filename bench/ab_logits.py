"""What a tree's engine computes on a real model, saved for a bit-for-bit comparison with another tree's.

Why: a refactor of the fused step must leave the default model's bits alone (the same text, the
same speed). Run once per tree (PYTHONPATH=TREE), then --compare the files:

    PYTHONPATH=/tmp/before python3 bench/ab_logits.py --model M --out /tmp/before.pt
    PYTHONPATH=$PWD python3 bench/ab_logits.py --model M --out /tmp/after.pt
    python3 bench/ab_logits.py --compare /tmp/before.pt /tmp/after.pt

Two configurations of one tree compare the same way (--set file_weights=False: the dense matrices).

Saved: the prefill's K/V cells (chunks of the runner's sizes, then one-row steps), a 4-row verify's
logits and hidden rows and the four one-row steps', and 64 greedy and 64 sampled tokens. Only the
Engine's long-standing interface is used, so the file runs on older trees too.
"""

from __future__ import annotations

import argparse
import sys

import torch

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 12


def run(model: str, device: str, **engine_args) -> dict:
    from mtp_turbo.engine import Engine, EngineConfig
    from mtp_turbo.sampling.config import SamplerConfig

    eng = Engine(EngineConfig(model=model, device=device, ctx_size=2048, progress=False, **engine_args))
    ids = eng.tokenizer.encode(TEXT)[:700]
    out = {}
    with torch.inference_mode():
        eng.reset()
        eng._set_tokens(ids, 0)
        eng._prefill(len(ids) - 4, progress=False)
        p0 = eng.kv.length
        out["k"], out["v"] = eng.kv.k[:, :p0].clone(), eng.kv.v[:, :p0].clone()
        rows = torch.tensor(ids[p0:], device=eng.device)
        lg, hd = eng.runner.forward(rows, p0)
        out["verify_logits"], out["verify_hidden"] = lg.clone(), hd.clone()
        for j in range(4):
            lg, hd = eng.runner.forward(rows[j:j + 1], p0 + j)
            out[f"step{j}_logits"], out[f"step{j}_hidden"] = lg.clone(), hd.clone()
    eng.reset()
    out["greedy"] = torch.tensor(eng.generate_ids(TEXT[:200], max_tokens=64, stop_ids=()))
    eng.reset()
    s = SamplerConfig(temperature=0.6, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4, seed=5)
    out["sampled"] = torch.tensor(eng.generate_ids(TEXT[:200], sampler=s, max_tokens=64, stop_ids=()))
    return {k: v.cpu() for k, v in out.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--out")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compare", nargs=2, metavar="FILE")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="an EngineConfig field for this run (a Python literal), e.g. file_weights=False")
    a = p.parse_args(argv)
    if a.compare:
        x, y = (torch.load(f) for f in a.compare)
        same = {k: torch.equal(x[k], y[k]) for k in x if k in y}
        print("bit for bit equal:", same)
        return 0 if all(same.values()) else 1
    import ast

    torch.save(run(a.model, a.device, **{k: ast.literal_eval(v) for k, v in (x.split("=", 1) for x in a.set)}), a.out)
    print(f"saved {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
