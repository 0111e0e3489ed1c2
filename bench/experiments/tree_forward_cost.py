"""The CPU engine's forward of N rows: a chain of N rows (Engine.forward) beside a tree of N nodes
(Engine.forward_tree), 3 reps each, the last printed (bench/RESULTS.md session 34: 50.1 / 80.5 / 88.0 ms at 4 / 5 / 7).

    python bench/experiments/tree_forward_cost.py
"""
import time

import torch
from mtp_turbo.engine import Engine, EngineConfig
from mtp_turbo.spec.tree_shape import SpineTree, chain_shape
e = Engine(EngineConfig(device="cpu", ctx_size=512, progress=False))
ids = e.encode_prompt("Write a short story about a robot who learns to paint. Once upon a time")
e.start(ids)
n = len(e.tokens)
for shape in (chain_shape(3), SpineTree(3,(1,)).shape, SpineTree(3,(2,1)).shape):
    N = shape.nodes
    toks = torch.randint(0, 1000, (N,))
    e.tok_buf[n-1:n-1+N] = toks
    for rep in range(3):
        t0 = time.perf_counter(); lg, h = e.forward(N); t1 = time.perf_counter()
        lg2, h2 = e.forward_tree(toks, shape, torch.tensor([n-1])); t2 = time.perf_counter()
    print(N, "forward %.1f ms" % ((t1-t0)*1e3), "forward_tree %.1f ms" % ((t2-t1)*1e3), torch.get_num_threads())
