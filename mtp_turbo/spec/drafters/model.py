"""A small model of the main model's tokenizer as the drafter: k greedy steps of its own a round.

Owns: DraftModelDrafter (the draft model, its K/V cache and step runner, the sequence its cache
holds, the round's drafts on the device), the vocabulary check between the two files, and
load_draft_model.
Ignores: verification (spec/program.py: every emitted token is the main model's draw, so the text is
plain decoding's whatever is drafted), choosing k (adaptive.py), the main model's cache.

Drafting runs inside the round's device program (on CUDA its graph): with n committed tokens, the
first launch forwards the draft model's rows n-2 and n-1 (their tokens read from the round's token
buffer, positions from the device's n), the argmax of the last row is draft 1, then k-1 one-row
steps each take the argmax of the one before as input. Whatever the round before accepted, the
cells before n-2 hold committed tokens (a round of k drafts writes cells n-2 .. n+k-2, and accepting
a of them commits n+a+1 tokens), so no round waits for the host to learn the outcome of the one
before, and a round can be launched before that one is read. The host keeps the bookkeeping: which
cells hold which tokens (observe), and a longer catch-up (a new prompt, plain steps) encoded ahead of
the round (prepare). On CUDA the draft model's rows are batch-invariant (the main model's kernels), so
rewriting cell n-2 stores the bits it already held; on the CPU they may differ in the last bits, which
moves only the drafts, never the text.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ConfigError
from .base import Drafter

PREFILL_CHUNK = 512  # rows a torch forward encodes at once (EngineConfig.prefill_chunk's default)
MAX_DRAFTS = 8  # the round's most (program.MAX_K)


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
    on_device = True

    def __init__(self, model, capacity: int, graphs: bool = True, kernels: str = "torch"):
        """model: the draft Decoder (models/decoder.py) on the main model's device; capacity: the
        main model's context (the draft's cache holds as many cells, plus a round's drafts);
        kernels: the step's kernels, the main model's ("triton" on CUDA: the torch step's eager
        catch-up made a round 30-40 ms on an H200, bench/RESULTS.md session 28)."""
        from ...cache.kv import KVCache
        from ...models.greedy import GreedyPick
        from ...models.step import StepRunner

        c = model.cfg
        self.model, self.graphs = model, graphs and model.device.type == "cuda"
        self.vocab = c.vocab_size
        self.capacity = capacity + 16
        self.kv = KVCache(c.n_layers, self.capacity, c.n_kv_heads, c.head_dim, model.device, model.dtype)
        self.runner = StepRunner(model, self.kv, use_graphs=self.graphs, kernels=kernels)
        self.pick = GreedyPick("auto")
        self.buf = torch.zeros(self.capacity, dtype=torch.int64, device=model.device)  # catch-up rows' tokens
        self.slots = torch.zeros(MAX_DRAFTS, dtype=torch.int64, device=model.device)  # the round's drafts
        self.ar2 = torch.arange(2, dtype=torch.int64, device=model.device)
        self.held: list[int] = []  # tokens whose K/V cells [0, kv.length) hold (held[:kv.length])
        self.pending: list[int] = []  # k of each drafting round launched and not yet observed
        self.caught_up = 0

    # ---- engine hooks: the draft's cache follows the committed sequence ---------------------------
    def reset(self) -> None:
        self.held, self.pending = [], []
        self.kv.rollback(0)

    def truncate(self, n: int) -> None:
        if n < len(self.held):
            del self.held[n:]
            self.kv.rollback(min(self.kv.length, n))

    def begin(self, tokens: list[int]) -> None:
        """A generation starts from `tokens`: keep the longest prefix the cache already holds (after
        this the sequence only grows by what rounds commit; rollbacks come through truncate)."""
        m, lim = 0, min(len(tokens), len(self.held))
        while m < lim and self.held[m] == tokens[m]:
            m += 1
        self.truncate(m)
        self.pending = []

    def observe(self, tokens: list[int], accepted: int, hidden: torch.Tensor | None, stored: bool = False) -> None:
        """A drafting round of k drafts from n committed tokens wrote cells n-2 .. n+k-2 (inputs
        tokens n-2, n-1 and drafts 1..k-1); the first n + min(accepted, k-1) now hold committed
        tokens. A plain step (no round of this drafter pending) wrote none of them."""
        if not self.pending:
            return
        k = self.pending.pop(0)
        n = len(tokens) - accepted - 1
        valid = n + min(accepted, k - 1)
        assert len(self.held) >= n - 2, (len(self.held), n)
        del self.held[n - 2:]
        self.held.extend(tokens[n - 2: valid])
        self.kv.rollback(min(self.kv.length, n - 2))
        self.kv.commit(valid)

    # ---- the round's device program (spec/program.py) ---------------------------------------------
    def _catch_up(self, tokens: list[int], upto: int) -> None:
        """Make the cache hold tokens[:upto] (held is a prefix of tokens: begin / truncate / observe)."""
        common = min(len(self.held), upto)
        tail = max(0, common - 64)
        if self.held[tail:common] != tokens[tail:common]:  # not the sequence begin() was told: start over
            self.begin(tokens)
            common = min(len(self.held), upto)
        self.truncate(common)
        self.caught_up = upto - common
        if self.caught_up:
            rows = torch.tensor(tokens[common:upto], dtype=torch.int64).clamp_(max=self.vocab - 1)
            self.buf[common:upto] = rows.to(self.buf.device)
            for _ in self.runner.encode(self.buf, common, upto, PREFILL_CHUNK):
                pass
            self.held.extend(tokens[common:upto])

    def prepare(self, tokens: list[int], k: int) -> tuple[int, tuple] | None:
        """Host half of a round of k drafts after `tokens`: the cells before n-2 brought to the
        committed tokens (caught_up: rows encoded here, ahead of the round) -> (0 catch-up rows in
        the round, nothing staged), or None when no round can draft (fewer than 2 tokens)."""
        self.caught_up = 0
        n = len(tokens)
        if not 1 <= k <= MAX_DRAFTS or n < 2 or n + k > self.capacity:
            return None
        self._catch_up(tokens, n - 2)
        self.pending.append(k)
        return 0, ()

    def prepare_after(self, n: int, k_prev: int, k: int) -> tuple | None:
        """A round launched before the previous drafting round (n committed tokens before it) is
        read: it needs nothing of that round's outcome but n_dev and the token buffer."""
        if not 1 <= k <= MAX_DRAFTS or n + k_prev + 1 + k > self.capacity or not self.pending:
            return None
        self.pending.append(k)
        return ()

    def launched_after(self, accepted: int) -> None:
        self.caught_up = 0

    def device_drafts(self, staged, n_catch: int, k: int, tok_buf: torch.Tensor, n_dev: torch.Tensor) -> torch.Tensor:
        return self._chain(k, tok_buf, n_dev)

    def device_drafts_after(self, staged, k_prev: int, k: int, accepted: torch.Tensor, tok_buf: torch.Tensor,
                            n_dev: torch.Tensor) -> torch.Tensor:
        return self._chain(k, tok_buf, n_dev)

    def _chain(self, k: int, tok_buf: torch.Tensor, n_dev: torch.Tensor) -> torch.Tensor:
        """Device, capturable: the k drafts after the n_dev committed tokens of tok_buf -> a view of
        the drafter's slots (rewritten by its next chain)."""
        pos = n_dev - 2 + self.ar2
        # a committed id past a shorter draft vocabulary (check_vocabulary allows a prefix) drafts
        # from the last id instead: only the drafts' quality depends on it
        toks = tok_buf.index_select(0, pos).clamp_(max=self.vocab - 1)
        logits, _ = self.runner.body(toks, pos)
        self.pick(logits[1:], out=self.slots[:1])
        for j in range(1, k):  # step j: draft j's row at position n-1+j, its argmax draft j+1
            logits, _ = self.runner.body(self.slots[j - 1: j], pos[1:] + j)
            self.pick(logits, out=self.slots[j: j + 1])
        return self.slots[:k]

    def fall_back_to_torch(self) -> bool:
        """Draft with the torch step and argmax from now on (the fused kernels failed)."""
        if self.runner.kernels == "torch" and self.pick.backend == "torch":
            return False
        from ...models.greedy import GreedyPick
        from ...models.step import StepRunner

        self.runner = StepRunner(self.model, self.kv, use_graphs=self.graphs, kernels="torch")
        self.pick = GreedyPick("torch")
        return True

    @torch.inference_mode()
    def propose(self, tokens: list[int], k: int) -> list[int]:
        """The k drafts the round would make after `tokens` (one host sync: for checks and tools);
        the cache then holds tokens and the first k-1 drafts."""
        k = min(k, MAX_DRAFTS)
        if self.prepare(tokens, k) is None:
            return []
        n = len(tokens)
        tb = torch.tensor(tokens + [0] * k, dtype=torch.int64).to(self.buf.device)
        drafts = self._chain(k, tb, torch.tensor([n], dtype=torch.int64, device=self.buf.device)).tolist()
        self.observe(tokens + drafts + drafts[-1:], k, None)  # as if all k were accepted
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
    model = load_model(gf, main.device, progress=False, max_positions=capacity + 16, cpu_int8=int8, cpu_cache=int8,
                       cpu_int4=int8)
    return DraftModelDrafter(model, capacity, kernels=kernels)
