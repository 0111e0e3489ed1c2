"""Ceiling of exact speculative acceptance at temp > 0: what any drafter could reach.

Under the exact rule (DESIGN.md) a draft d at position i is accepted iff the token sampled from the
main model's final distribution p_i (after the whole sampler chain) equals d, so P(accept) = p_i(d)
<= max p_i. A drafter that always proposes the main model's own most likely token reaches that
bound. This script samples plain continuations of MT-Bench prompts with the given sampler, records
m_i = max p_i at every step, and reports mean m (the per-position ceiling) and the estimated
ceiling of tokens per round for k drafts, E[1 + m_t + m_t m_{t+1} + ...] over round starts t along
the sampled text (an estimate: after an accepted argmax draft the true path continues with the
argmax token, not the sampled one).

    python bench/accept_bound.py --device cpu --prompts 10 --max-tokens 96 --out out/bound.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from accept import load_prompts, samplers  # noqa: E402

from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.sampling.chain import sample_dist  # noqa: E402
from mtp_turbo.sampling.draw import draw  # noqa: E402
from mtp_turbo.sampling.rng import uniforms  # noqa: E402


def max_probs(engine: Engine, prompt: str, sampler, n: int) -> list[float]:
    """m_i = max of the final sampling distribution at each of n plain-sampled steps."""
    ids = engine.encode_prompt(prompt)
    engine.start(ids)
    out = []
    with torch.inference_mode():
        for _ in range(n):
            logits, _ = engine.forward(1)
            k = len(engine.tokens)
            p = sample_dist(logits, engine.tok_buf[:k], sampler)  # [1, V]
            out.append(float(p.max()))
            t = draw(p, uniforms(sampler.seed, torch.tensor([k], device=engine.device)))
            engine.tok_buf[k : k + 1].copy_(t)
            tok = int(t.item())
            engine.commit([tok], on_device=True)
            if tok in engine.tokenizer.stop_ids:
                break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--sampler", default="temp0.6", help="a sampler name of bench/accept.py")
    ap.add_argument("--ks", default="1,2,3,4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng = Engine(EngineConfig(model=a.model, device=a.device, progress=False))
    sampler = samplers(a.seed)[a.sampler]
    seqs = [max_probs(eng, p, sampler, a.max_tokens) for p in load_prompts(eng, a.prompts)["mt_bench"]]
    allm = [m for s in seqs for m in s]
    R = {"sampler": a.sampler, "prompts": a.prompts, "steps": len(allm), "mean_max_p": sum(allm) / len(allm),
         "tokens_per_round_ceiling": {}}
    for k in [int(x) for x in a.ks.split(",")]:
        vals = []
        for s in seqs:
            for t in range(len(s) - k + 1):
                e, run = 1.0, 1.0
                for j in range(k):
                    run *= s[t + j]
                    e += run
                vals.append(e)
        R["tokens_per_round_ceiling"][str(k)] = sum(vals) / len(vals)
    print(f"{a.sampler}: {R['steps']} sampled steps over {a.prompts} MT-Bench prompts; per-position ceiling "
          f"(mean max p) {R['mean_max_p']:.3f}")
    for k, v in R["tokens_per_round_ceiling"].items():
        print(f"  k = {k}: tokens/round ceiling ~ {v:.2f}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(R, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
