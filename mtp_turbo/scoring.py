"""Scoring text with an engine's model: every position's logits, and llama.cpp's perplexity.

Owns: `forward_logits` (the torch forward over a text, chunked, on a cache of its own), `step_logits`
(the logits decoding computes: the fused step's kernels where the engine runs them) and `perplexity`
(llama-perplexity's chunks and scored half). Ignores: sessions and decoding (engine.py), the kernels
(models/). The engine's session cache is never touched.
"""

from __future__ import annotations

import math

import torch
from tqdm import tqdm

from .cache.kv import KVCache
from .errors import ConfigError


def forward_logits(engine, ids: list[int], chunk: int, tail_single: int = 0) -> torch.Tensor:
    """Logits of every position of `ids` from an empty cache of its own: chunks of `chunk` rows, the
    last `tail_single` tokens one row at a time (for tests and perplexity). fp32 [n, V] on CPU."""
    n = len(ids)
    m = engine.model
    c = m.cfg
    kv = KVCache(c.n_layers, n, c.n_kv_heads, c.head_dim, engine.device, m.dtype)
    toks = torch.tensor(ids, dtype=torch.int64, device=engine.device)
    out = []
    with torch.inference_mode():
        head = n - tail_single
        for c0 in range(0, head, chunk):
            c1 = min(head, c0 + chunk)
            logits, _ = m.forward(toks[c0:c1], c0, kv)
            out.append(logits.float().cpu())
        for p in range(head, n):
            logits, _ = m.forward(toks[p : p + 1], p, kv)
            out.append(logits.float().cpu())
    return torch.cat(out)


def step_logits(engine, ids: list[int], first: int) -> torch.Tensor:
    """Logits of positions first .. n-1 of `ids` as decoding computes them: with the fused step
    (CUDA) its own kernels (positions before `first` as prefill chunks, the rest in verify-sized
    forwards: the bits one-row steps give), on a cache of its own; else the torch forward. Why not
    the torch forward everywhere: matrices held as the file's bytes on integer tensor cores
    (quant/frag_matrix.py) give the fused step other bits than the loader's dense values.
    fp32 [n - first, V] on CPU."""
    fused = engine.runner.fused
    if fused is None:
        return forward_logits(engine, ids, chunk=engine.cfg.prefill_chunk)[first:]
    from .models.fused import MAX_ROWS, FusedDecoder

    n, m = len(ids), engine.model
    c = m.cfg
    kv = KVCache(c.n_layers, n, c.n_kv_heads, c.head_dim, engine.device, m.dtype)
    toks = torch.tensor(ids, dtype=torch.int64, device=engine.device)
    dec = FusedDecoder(m, kv, fused.tiles)
    pos = torch.arange(n, device=engine.device)
    out = []
    with torch.inference_mode():
        for c0 in range(0, first, dec.rows):
            c1 = min(first, c0 + dec.rows)
            dec.forward(toks[c0:c1], pos[c0:c1], head=False)
        for c0 in range(first, n, MAX_ROWS):
            c1 = min(n, c0 + MAX_ROWS)
            out.append(dec.forward(toks[c0:c1], pos[c0:c1])[0].float().cpu())
    return torch.cat(out)


def perplexity(engine, text: str, ctx: int, max_chunks: int | None = None, progress: bool = True) -> dict:
    """llama.cpp's llama-perplexity: chunks of ctx tokens, each starting with BOS, scoring the second
    half of each chunk (positions ctx/2 .. ctx-2 predicting the next token), on step_logits."""
    if ctx < 8 or ctx > engine.ctx_size:
        raise ConfigError(f"perplexity --ctx must be in [8, {engine.ctx_size}], got {ctx}")
    tok = engine.tokenizer
    ids = tok.encode(text, add_bos=True)
    n_chunks = len(ids) // ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise ConfigError(f"the text has {len(ids)} tokens; perplexity at --ctx {ctx} needs at least {ctx}")
    first = ctx // 2
    nll, count = 0.0, 0
    per_chunk = []
    for i in tqdm(range(n_chunks), desc="perplexity", unit="chunk", disable=not progress):
        chunk = ids[i * ctx : (i + 1) * ctx]
        if tok.add_bos:  # as llama-perplexity: BOS first only where the file adds one
            chunk[0] = tok.bos_id
        logits = step_logits(engine, chunk, first)  # [ctx - first, V]
        lp = torch.log_softmax(logits[: ctx - 1 - first].double(), dim=-1)
        tgt = torch.tensor(chunk[first + 1 : ctx])
        nll += -lp.gather(1, tgt[:, None]).sum().item()
        count += ctx - 1 - first
        per_chunk.append(math.exp(nll / count))
    return {"ppl": math.exp(nll / count), "tokens_scored": count, "chunks": n_chunks, "running": per_chunk}
