"""Where an engine's start-up goes, and which order of its parts is shortest (issue 20 item 4).

    python bench/experiments/startup_order.py --model PATH --order thread|serial|none [--runs 1]

One order a process (run it once per order, after a warm-up run that fills the Triton cache):
  thread  the tokenizer's parse in a thread started before the weights' load (Engine's order at
          81cd06c..32feb36);
  serial  weights, cache, step runner first (their device work queued), then the parse in this
          thread while the device works through that queue;
  none    no tokenizer: what the model alone costs.
Prints seconds since the imports for each part's end, and the device's queue drained at the end.
Why: `tokenizers`' Tokenizer.from_file holds the GIL for its whole parse (RESULTS.md session 21),
so a thread beside it does not run beside it; this measures what each order costs on the device
machine rather than guessing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--order", choices=("thread", "serial", "none"), default="thread")
    a = ap.parse_args()
    import torch

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    from concurrent.futures import ThreadPoolExecutor

    from mtp_turbo.cache.kv import KVCache
    from mtp_turbo.engine import pick_device, pick_kernels
    from mtp_turbo.io.gguf_file import GGUFFile, default_model_path
    from mtp_turbo.io.tokenizer import GGUFTokenizer
    from mtp_turbo.models.load import load_gemma3
    from mtp_turbo.models.step import StepRunner

    t0 = time.perf_counter()
    marks = []

    def mark(name):
        marks.append((name, time.perf_counter() - t0))

    dev = pick_device("auto")
    gf = GGUFFile(a.model or default_model_path())
    mark("header")

    def rest(model):
        kv = KVCache(model.cfg.n_layers, 4096, model.cfg.n_kv_heads, model.cfg.head_dim, dev, model.dtype)
        runner = StepRunner(model, kv, use_graphs=True, kernels=pick_kernels("auto", dev))
        mark("runner")
        return runner

    if a.order == "thread":
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(GGUFTokenizer, gf)
            model = load_gemma3(gf, dev, progress=False, max_positions=4096)
            mark("weights")
            fut.result()
            mark("tokenizer")
        rest(model)
    else:
        model = load_gemma3(gf, dev, progress=False, max_positions=4096)
        mark("weights")
        rest(model)
        if a.order == "serial":
            GGUFTokenizer(gf)
            mark("tokenizer")
    if dev.type == "cuda":
        torch.cuda.synchronize()
    mark("device drained")
    print(f"startup_order {a.order}: " + " | ".join(f"{n} {s:.3f} s" for n, s in marks), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
