"""A small model of the main model's tokenizer as the drafter: k greedy steps of its own a round.

Owns: DraftModelDrafter (the draft model, its K/V cache and step runner, the sequence its cache
holds, the drafts of a round), the vocabulary check between the two files, and load_draft_model.
Ignores: verification (spec/program.py: every emitted token is the main model's draw, so the text is
plain decoding's whatever is drafted), choosing k (adaptive.py), the main model's cache.

Drafting runs on the host side of a round (the round's host-drafter path): the draft model's cache is
brought to the committed sequence (the longest prefix it already holds is kept, which after a round
is the committed part of its own drafts; the rest is encoded), then k one-row steps each take the
argmax of the draft's logits as the next input. The k - 1 drafts' K/V stay in its cache: the next
round keeps those the main model accepted. The steps are chained on the device: each argmax is
written into the step buffer the next step reads, and the k drafts are read back once (one host sync
a round, not one a draft). Drafting inside the round's own program is the next step (issue 38).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ConfigError
from .base import Drafter

PREFILL_CHUNK = 512  # rows a torch forward encodes at once (EngineConfig.prefill_chunk's default)


def check_vocabulary(main_tokens: list[str] | None, draft_tokens: list[str] | None, draft_name: str) -> None:
    """A draft's token ids must mean what they mean to the main model: its pieces equal the main
    model's for every id it defines (a draft vocabulary may be a prefix of the main one's)."""
    if not main_tokens or not draft_tokens:
        raise ConfigError(f"draft model {draft_name}: a file without a token list cannot be checked against the "
                          "main model's vocabulary")
    if len(draft_tokens) > len(main_tokens):
        raise ConfigError(f"draft model {draft_name} has {len(draft_tokens)} tokens, more than the main model's "
                          f"{len(main_tokens)}: its drafts would use ids the main model does not have")
    for i, (a, b) in enumerate(zip(draft_tokens, main_tokens)):
        if a != b:
            raise ConfigError(f"draft model {draft_name} does not share the main model's vocabulary: token {i} is "
                              f"{a!r} there and {b!r} in the main model")


class DraftModelDrafter(Drafter):
    name = "model"

    def __init__(self, model, capacity: int, graphs: bool = True, kernels: str = "torch"):
        """model: the draft Decoder (models/decoder.py) on the main model's device; capacity: the
        main model's context (the draft's cache holds as many cells, plus a round's drafts);
        kernels: the step's kernels, the main model's ("triton" on CUDA: the torch step's eager
        catch-up made a round 30-40 ms on an H200, bench/RESULTS.md session 28)."""
        from ...cache.kv import KVCache
        from ...models.step import StepRunner

        c = model.cfg
        self.model = model
        self.capacity = capacity + 16
        self.kv = KVCache(c.n_layers, self.capacity, c.n_kv_heads, c.head_dim, model.device, model.dtype)
        self.runner = StepRunner(model, self.kv, use_graphs=graphs and model.device.type == "cuda", kernels=kernels)
        self.buf = torch.zeros(self.capacity, dtype=torch.int64, device=model.device)
        self.held: list[int] = []  # tokens whose K/V cells [0, kv.length) hold (held[:kv.length])

    # ---- engine hooks: the draft's cache follows the committed sequence lazily (propose) -----------
    def reset(self) -> None:
        self.held = []
        self.kv.rollback(0)

    def truncate(self, n: int) -> None:
        if n < len(self.held):
            del self.held[n:]
            self.kv.rollback(min(self.kv.length, n))

    # ---- drafting ------------------------------------------------------------------------------
    def _sync(self, tokens: list[int]) -> None:
        """Make the cache hold tokens[:-1] (the last one is the next step's input)."""
        n = len(tokens) - 1
        common, lim = 0, min(n, self.kv.length)
        while common < lim and self.held[common] == tokens[common]:
            common += 1
        self.kv.rollback(common)
        self.held[common:] = tokens[common:]
        if len(tokens) > common:
            self.buf[common: len(tokens)] = torch.tensor(tokens[common:], dtype=torch.int64).to(self.buf.device)
        for _ in self.runner.encode(self.buf, common, n, PREFILL_CHUNK):
            pass

    def propose(self, tokens: list[int], k: int) -> list[int]:
        k = min(k, self.capacity - len(tokens))
        if k <= 0 or not tokens:
            return []
        self._sync(tokens)
        n = len(tokens)
        with torch.inference_mode():
            for j in range(k):  # step j: input at position n-1+j, its argmax the token at n+j (no sync)
                logits, _ = self.runner.forward(self.buf[n - 1 + j: n + j], n - 1 + j)
                torch.argmax(logits[0], out=self.buf[n + j])  # the lowest id on ties, as int(argmax()) was
                self.kv.commit(n + j)
            drafts = self.buf[n: n + k].tolist()  # the round's one read of the drafts
        self.held = list(tokens) + drafts
        return drafts


def load_draft_model(spec, main, main_gguf, capacity: int, kernels: str = "torch") -> DraftModelDrafter:
    """The drafter of SpecConfig `spec` (draft "model", draft_model a path or a registry name) for
    main model `main` from GGUFFile `main_gguf`: same device and step kernels, and on the CPU its
    matrices held as the main model's are (int8 when the main model's are, from the same cache)."""
    from ...io.gguf_file import GGUFFile
    from ...io.registry import resolve_model
    from ...models.load import load_model

    if not spec.draft_model:
        raise ConfigError("--draft model needs --draft-model PATH or NAME (a smaller model of the same tokenizer)")
    gf = GGUFFile(resolve_model(spec.draft_model))
    check_vocabulary(main_gguf.metadata.get("tokenizer.ggml.tokens"), gf.metadata.get("tokenizer.ggml.tokens"),
                     Path(gf.path).name)
    int8 = main.device.type == "cpu" and main.head_op is not None
    model = load_model(gf, main.device, progress=False, max_positions=capacity + 16, cpu_int8=int8, cpu_cache=int8)
    return DraftModelDrafter(model, capacity, kernels=kernels)
