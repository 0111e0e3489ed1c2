"""The report's suggested check: at temp 0.6 with the sampler chain, the exact verification rule
beside the legacy lossy one (`--spec-sample greedy`: drafts kept while they equal the unpenalised
argmax), in the same run: tokens per round and decode tok/s, MTP k = 3 and n-gram k = 3.

    python bench/exact_vs_lossy.py --model PATH [--n-prompts 20] [--max-tokens 256] [--out FILE.json]

Plain sampling with the same chain is timed beside them. The exact rule's text equals plain
sampling's (same seed); the lossy rule's does not in general (that is its flaw): the script
counts the prompts where it differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mtp_turbo.benchmark.config import load_prompts  # noqa: E402
from mtp_turbo.engine import Engine, EngineConfig  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.spec.config import SpecConfig  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--n-prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    prompts = load_prompts("mtbench", a.n_prompts)
    eng = Engine(EngineConfig(model=a.model, progress=False))
    s = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08,
                      presence_penalty=0.4, penalty_last_n=64, seed=7)
    rows = {"plain": None}
    for d in ("mtp", "ngram"):
        for mode in ("exact", "greedy"):
            rows[f"{d}/{mode}"] = SpecConfig(draft=d, draft_tokens=3, adaptive=False, spec_sample=mode)
    out, plain_ids = {}, {}
    for name, spec in rows.items():
        eng.reset()
        eng.generate_ids(prompts[0], sampler=s, max_tokens=32, spec=spec, stop_ids=())  # warm-up: graphs
        toks = secs = rounds = emitted = differ = 0
        for i, p in enumerate(prompts):
            eng.reset()
            ids = eng.generate_ids(p, sampler=s, max_tokens=a.max_tokens, spec=spec, stop_ids=())
            st = eng.last_stats
            toks, secs = toks + st.gen_tokens, secs + st.decode_s
            if spec is None:
                plain_ids[i] = ids
            else:
                rounds, emitted = rounds + st.spec.rounds, emitted + st.spec.emitted
                differ += ids != plain_ids[i]
        out[name] = {"tok_s": toks / secs, "tokens_per_round": emitted / rounds if rounds else None,
                     "texts_differing_from_plain": differ if spec is not None else None}
        print(f"{name:14s} {out[name]['tok_s']:8.1f} tok/s  tokens/round {out[name]['tokens_per_round'] or 0:.2f}  "
              f"texts != plain: {out[name]['texts_differing_from_plain']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
