"""The frozen main model's own continuations as training rows: batched sampling with a KV cache.

Owns: turning a pool of user prompts (chat turns ending in the model's generation prompt, from
train/data.py's prompts file) into rows of `length` tokens that start with BOS and alternate
forced prompt tokens with the main model's sampled replies: every row starts on a prompt; when the
model ends its turn (a stop id), a newline and the next prompt are forced in, so a row is a
multi-turn chat in which every reply token is the main model's (greedy or temperature + min-p).
All rows share positions (no padding): a row whose prompt is still being fed simply takes the
forced token instead of the sampled one. Bounded by a wall-clock budget; a batch cut short is kept
when it reached `min_length` tokens.
Ignores: the training loop (distill.py) and the data files (data.py).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from ..errors import ConfigError
from .forward import BatchKV, main_hidden


@dataclass(frozen=True)
class GenConfig:
    rows: int = 512  # rows to generate (in batches of `batch`)
    length: int = 2048  # tokens per row, BOS first
    batch: int = 256
    temps: tuple[float, ...] = (0.0, 0.7)  # per-row temperature, cycled over rows (0 = greedy)
    min_p: float = 0.05  # sampled rows drop tokens below min_p * the top probability
    time_budget: float = 60.0  # seconds for all batches (0 = no limit)
    min_length: int = 256  # a batch cut by the budget is kept if it reached this many tokens
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1 or self.batch < 1 or self.length < 2:
            raise ConfigError("gen rows/batch must be >= 1 and gen length >= 2")
        if any(t < 0 for t in self.temps) or not self.temps:
            raise ConfigError(f"gen temps must be >= 0, got {self.temps}")


@torch.no_grad()
def sample_rows(model, prompts: list[list[int]], gc: GenConfig, bos: int, stop_ids: tuple[int, ...],
                sep: list[int], progress: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """-> (row blocks, sampled masks): each block int64 [b, L] (L <= gc.length), each mask bool
    [b, L], True where the token was sampled from the main model (False: BOS or a forced token)."""
    assert prompts and all(prompts), "need non-empty prompts"
    dev = model.device
    rng = np.random.default_rng(gc.seed)
    gen = torch.Generator(device=dev).manual_seed(gc.seed)
    t0 = time.perf_counter()
    blocks, masks = [], []
    done = 0
    bar = tqdm(total=gc.rows * (gc.length - 1), desc="gen", unit="tok", disable=not progress, mininterval=2.0)
    while done < gc.rows:
        B = min(gc.batch, gc.rows - done)
        temps = torch.tensor([gc.temps[(done + b) % len(gc.temps)] for b in range(B)], device=dev)
        greedy = temps == 0
        queues = [deque(prompts[int(rng.integers(len(prompts)))]) for _ in range(B)]
        toks = torch.full((B, gc.length), bos, dtype=torch.long, device=dev)
        sampled = np.zeros((B, gc.length), dtype=bool)
        cache = BatchKV.empty(model, B, gc.length)
        L = gc.length
        for s in range(gc.length - 1):
            if gc.time_budget and time.perf_counter() - t0 > gc.time_budget:
                L = s + 1
                break
            h = main_hidden(model, toks[:, s: s + 1], pos0=s, cache=cache)[:, 0]
            logits = model.lm_head(model.final_norm(h))  # [B, V] fp32
            nxt = logits.argmax(-1)
            if not bool(greedy.all()):
                p = torch.softmax(logits / temps.clamp(min=1e-6)[:, None], dim=-1)
                p = p.masked_fill(p < gc.min_p * p.max(-1, keepdim=True).values, 0.0)
                drawn = torch.multinomial(p, 1, generator=gen)[:, 0]
                nxt = torch.where(greedy, nxt, drawn)
            nxt_h = nxt.tolist()  # the one host sync per step
            for b in range(B):
                q = queues[b]
                if q:
                    nxt_h[b] = q.popleft()
                else:
                    sampled[b, s + 1] = True
                    if nxt_h[b] in stop_ids:  # the reply ended: the next user turn follows
                        q.extend(sep + prompts[int(rng.integers(len(prompts)))])
            toks[:, s + 1] = torch.tensor(nxt_h, device=dev)
            bar.update(B)
        if L >= gc.min_length or L == gc.length:
            blocks.append(toks[:, :L].cpu().numpy())
            masks.append(sampled[:, :L])
        done += B
        if L < gc.length:
            tqdm.write(f"gen: time budget {gc.time_budget:.0f}s reached ({done} rows started, "
                       f"last batch cut at {L} tokens{'' if L >= gc.min_length else ', dropped'})")
            break
    bar.close()
    return blocks, masks
