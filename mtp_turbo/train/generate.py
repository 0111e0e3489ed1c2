"""The frozen main model's own continuations as training rows: batched sampling with a KV cache.

Owns: turning a pool of user prompts (chat turns ending in the model's generation prompt, from
train/data.py's prompts file) into rows of `length` tokens that start with BOS and alternate
forced prompt tokens with the main model's sampled replies: every row starts on a prompt; when the
model ends its turn (a stop id), a newline and the next prompt are forced in, so a row is a
multi-turn chat in which every reply token is the main model's: greedy (temperature 0: the plain
argmax) or drawn through the engine's own sampler chain (sampling/chain.py: top-k, penalties over
the row's last tokens, temperature, min-p, top-p), so the head trains on the contexts that
sampled decoding with those settings produces.
All rows share positions (no padding): a row whose prompt is still being fed simply takes the
forced token instead of the sampled one. Bounded by a wall-clock budget; a batch cut short is kept
when it reached `min_length` tokens.
Ignores: the training loop (distill.py) and the data files (data.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from ..errors import ConfigError
from ..sampling.chain import probs_from_logits, window_counts
from ..sampling.config import SamplerConfig
from .forward import BatchKV, main_hidden


@dataclass(frozen=True)
class GenConfig:
    rows: int = 512  # rows to generate (in batches of `batch`)
    length: int = 2048  # tokens per row, BOS first
    batch: int = 256
    temps: tuple[float, ...] = (0.0, 0.7)  # per-row temperature, cycled over rows (0 = greedy)
    # the sampler chain of the sampled rows (temperature > 0); its own temperature is replaced by
    # each row's
    chain: SamplerConfig = SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05)
    time_budget: float = 60.0  # seconds for all batches (0 = no limit)
    min_length: int = 256  # a batch cut by the budget is kept if it reached this many tokens
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1 or self.batch < 1 or self.length < 2:
            raise ConfigError("gen rows/batch must be >= 1 and gen length >= 2")
        if any(t < 0 for t in self.temps) or not self.temps:
            raise ConfigError(f"gen temps must be >= 0, got {self.temps}")
        for t in self.temps:
            self.sampler(t)  # each temperature's chain must be valid (raises ConfigError)

    def sampler(self, temperature: float) -> SamplerConfig:
        """The chain a row at this temperature is sampled with (not used for greedy rows)."""
        return dataclasses.replace(self.chain, temperature=temperature)


def draw(logits: torch.Tensor, toks: torch.Tensor, temps: list[float], gc: GenConfig,
         gen: torch.Generator) -> torch.Tensor:
    """Next tokens [B] for logits [B, V] of rows whose histories are toks [B, s]: the argmax for
    temperature-0 rows, a draw from gc's sampler chain (penalties over each row's last tokens) for
    the others, rows grouped by temperature."""
    nxt = logits.argmax(-1)
    for t in sorted(set(temps) - {0.0}):
        idx = torch.tensor([b for b, tb in enumerate(temps) if tb == t], device=logits.device)
        cfg = gc.sampler(t)
        counts = None
        if cfg.uses_penalties:
            h = toks[idx]
            counts = window_counts(h, torch.full((len(idx),), h.shape[1], device=h.device), logits.shape[1],
                                   cfg.penalty_last_n)
        p = probs_from_logits(logits[idx], counts, cfg)
        nxt[idx] = torch.multinomial(p, 1, generator=gen)[:, 0]
    return nxt


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
        temps = [float(gc.temps[(done + b) % len(gc.temps)]) for b in range(B)]
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
            nxt_h = draw(logits, toks[:, : s + 1], temps, gc, gen).tolist()  # the one host sync per step
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
