"""The engine: load once, prefill in chunks, generate (plain or speculative), perplexity, sessions.

Owns: the committed token sequence and its KV cache, the generate loop and its stop conditions,
per-generation stats. Ignores: the model's math (models/), the sampler's math (sampling/), how a
speculative round decides (spec/), HTTP and argument parsing.

State invariant between calls: `self.tokens` is the committed sequence; the cache holds K/V for
every token but the last (`kv.length == len(tokens) - 1`): the last one is fed by the next forward;
`self.tok_buf[:len(tokens)]` is the device copy of the tokens. The engine is the `spec.target.Target`
a speculative round verifies against.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from tqdm import tqdm

from .cache.kv import KVCache
from . import scoring
from .engine_config import EngineConfig
from .errors import CacheError, ConfigError, MtpTurboError
from .io.gguf_file import GGUFFile
from .io.registry import resolve_model
from .io.tokenizer import GGUFTokenizer
from .models.load import load_model, model_config
from .models.memory import dense_bytes, file_weights_needed, kv_bytes
from .models.step import StepRunner
from .sampling.chain import sample_dist
from .sampling.config import SamplerConfig
from .sampling.draw import draw
from .spec.drafters.base import Drafter
from .sampling.rng import uniforms
from .spec.programs import ProgramCache
from .spec.round import RoundStats


@dataclass
class Stats:
    prompt_tokens: int = 0
    prompt_cached: int = 0  # prompt tokens reused from the cache
    prompt_s: float = 0.0
    gen_tokens: int = 0
    decode_s: float = 0.0
    finish_reason: str = ""
    spec: RoundStats | None = None  # speculative decoding's round stats (None: plain decoding)
    captures: int = 0  # CUDA graphs the decode captured during this call (a shape's first use)

    @property
    def prompt_tps(self) -> float:
        return (self.prompt_tokens - self.prompt_cached) / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.gen_tokens / self.decode_s if self.decode_s > 0 else 0.0

    def summary(self) -> str:
        s = (
            f"prompt: {self.prompt_tokens} tokens ({self.prompt_cached} cached) in {self.prompt_s * 1e3:.1f} ms "
            f"({self.prompt_tps:.1f} tok/s) | decode: {self.gen_tokens} tokens in {self.decode_s * 1e3:.1f} ms "
            f"({self.decode_tps:.1f} tok/s) | finish: {self.finish_reason}"
            + (f" | {self.captures} CUDA graphs captured while decoding" if self.captures else "")
        )
        if self.spec is not None:
            s += "\n" + self.spec.summary()
        return s


@dataclass(frozen=True)
class Piece:
    """One streamed piece of output: the text it completes and the token ids behind it."""

    text: str
    token_ids: tuple[int, ...]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda asked for, but no CUDA device is available")
    return torch.device(name)


def pick_kernels(name: str, device: torch.device) -> str:
    """'auto' -> 'triton' on CUDA when Triton imports, else 'torch'. 'triton' needs CUDA."""
    from .models import fused

    if name == "auto":
        return "triton" if device.type == "cuda" and fused.available() else "torch"
    if name == "triton" and (device.type != "cuda" or not fused.available()):
        raise ConfigError("--kernels triton needs a CUDA device and the triton package")
    return name


class Engine:
    def __init__(self, cfg: EngineConfig = EngineConfig(), gguf: GGUFFile | None = None):
        """gguf: the model file already opened (its header parsed: ~0.3 s of a CPU start-up saved),
        which must be cfg's."""
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        path = resolve_model(cfg.model)
        if gguf is not None and Path(gguf.path).resolve() != path.resolve():
            raise ValueError(f"the opened model file {gguf.path} is not the configured {path}")
        self.gguf = gguf if gguf is not None else GGUFFile(path)
        # RoPE tables for the cache's positions only, not the model's whole context
        kernels = pick_kernels(cfg.kernels, self.device)
        self.model = load_model(self.gguf, self.device, progress=cfg.progress, max_positions=cfg.ctx_size,
                                cpu_int8=cfg.cpu_weights in ("auto", "int8"), cpu_cache=cfg.cpu_cache,
                                cpu_int4=cfg.cpu_weights == "auto",
                                file_weights=kernels == "triton" and self._file_weights(cfg))
        c = self.model.cfg
        ctx = min(cfg.ctx_size, c.context_length)
        self.kv = KVCache(c.n_layers, ctx, c.n_kv_heads, c.head_dim, self.device, self.model.dtype)
        self.runner = StepRunner(self.model, self.kv, use_graphs=cfg.cuda_graphs, compile=cfg.compile,
                                 kernels=kernels)
        self.threads = None  # the CPU's thread chooser (auto); a fixed --threads is set once here
        if self.device.type == "cpu":
            from .threads import ThreadChooser, available_cores

            if cfg.threads:
                torch.set_num_threads(cfg.threads)
            else:
                self.threads = ThreadChooser((available_cores(), 1))
        self.tokens: list[int] = []
        self._auto: dict = {}  # --draft auto: spec -> the spec it drafts with (None: plain), found once
        self.kept = ProgramCache()  # the device programs and drafters kept between calls
        self._tree = None  # the TreeRound of --draft-tree calls (spec/tree_round.py), kept with its graphs
        # device copy of the committed tokens (the sampler's penalty window, the forward's inputs),
        # then room for a round's drafts
        self.tok_buf = torch.zeros(ctx + 16, dtype=torch.int64, device=self.device)
        self.last_stats = Stats()
        # Last: the device works through the weights' queued dequantization and the head's layout
        # meanwhile (SentencePiece loads the cached model in ~0.1 s)
        self.tokenizer = GGUFTokenizer(self.gguf)

    @property
    def ctx_size(self) -> int:
        return self.kv.capacity

    # ---- low level ------------------------------------------------------------------------------
    def _set_tokens(self, toks: list[int], start: int) -> None:
        """Replace self.tokens[start:] with toks[start:] (host and device copies)."""
        self.tokens[start:] = toks[start:]
        if len(toks) > start:
            self.tok_buf[start : len(toks)] = torch.tensor(toks[start:], dtype=torch.int64).to(self.device)

    def _prefill(self, upto: int, progress: bool) -> None:
        """Encode tokens[kv.length:upto] in chunks. A drafter that reads the main model's hidden
        states (MTP) is handed each chunk's rows as they pass. With the fused kernels (CUDA) the
        chunks are the decode step's own kernels (fused.MAX_ROWS rows a step, replayed from its CUDA
        graphs), so a token's K/V at a position are bit-identical whatever the chunking and
        whatever the cache held before: the same seed gives the same text after a reused prefix
        too. Chunks of the runner's prefill sizes (128, 64, 32, 16 rows) go through the same kernels
        over row blocks in one launch each (no LM head). The torch path prefills prefill_chunk rows a
        forward, without the LM head."""
        start = self.kv.length
        n = upto - start
        if n <= 0:
            return
        bar = tqdm(total=n, desc="prefill", unit="tok", disable=not (progress and n > 2048), leave=False)
        for c0, c1, hidden in self.runner.encode(self.tok_buf, start, upto, self.cfg.prefill_chunk):
            if self.drafter is not None:
                self.drafter.on_prefill(c0, c1, hidden, self.tokens)
            bar.update(c1 - c0)
        bar.close()

    def reset(self) -> None:
        """Forget the committed sequence (the next prompt is prefilled from scratch)."""
        self.tokens = []
        self.kv.reset()
        if self.drafter is not None:
            self.drafter.reset()

    def encode_prompt(self, prompt: str | list[int], add_bos: bool = True) -> list[int]:
        ids = list(prompt) if not isinstance(prompt, str) else self.tokenizer.encode(prompt, add_bos=add_bos)
        if not ids:
            raise ConfigError("the prompt is empty")
        bad = [t for t in ids if not (0 <= t < self.model.cfg.vocab_size)]
        if bad:
            raise ConfigError(f"token id {bad[0]} is outside the vocabulary [0, {self.model.cfg.vocab_size})")
        return ids

    def start(self, ids: list[int]) -> int:
        """Make `ids` the committed sequence, reusing the longest cached prefix; prefill the rest
        but the last token. Returns the number of prompt tokens reused from the cache."""
        if len(ids) >= self.ctx_size:
            raise ConfigError(
                f"the prompt has {len(ids)} tokens but the context holds {self.ctx_size} "
                f"(raise --ctx-size, up to {self.model.cfg.context_length})"
            )
        common = 0
        limit = min(len(ids) - 1, self.kv.length)
        while common < limit and self.tokens[common] == ids[common]:
            common += 1
        self.kv.rollback(common)
        if self.drafter is not None:
            self.drafter.truncate(common)  # only the first `common` tokens stay valid
        self._set_tokens(ids, common)
        self._prefill(len(ids) - 1, progress=self.cfg.progress)
        return common

    # ---- the speculative round's target (spec/target.py) --------------------------------------------
    def forward(self, n_rows: int, pad_to: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward rows tok_buf[n-1 : n-1+n_rows] (the pending last token, then any drafts a round
        wrote after it) at positions kv.length..., n = len(tokens). Does not commit. Returns
        (logits [n_rows, V], hidden [n_rows, D]). `pad_to`: run at least this many rows (repeating
        the last input) when the context allows, so a captured step of that one shape serves every
        round; padded rows' K/V land in cells past the committed length, stale by definition."""
        n = len(self.tokens)
        T = n_rows
        assert T >= 1 and self.kv.length == n - 1, (T, self.kv.length, n)
        if self.kv.length + T > self.ctx_size:
            raise AssertionError("step past the context")
        inp = self.tok_buf[n - 1 : n - 1 + T]
        if T < pad_to and self.kv.length + pad_to <= self.ctx_size:
            inp = torch.cat([inp, inp[-1:].expand(pad_to - T)])
        logits, hidden = self.runner.forward(inp, self.kv.length)
        return logits[:T], hidden[:T]

    def forward_body(self, tokens: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """forward()'s device work alone (captured inside a round's CUDA graph): tokens [T] at
        device positions pos [T]."""
        return self.runner.body(tokens, pos)

    def forward_tree(self, tokens: torch.Tensor, shape, p0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A draft tree's rows (spec/tree_shape.TreeShape; tokens [N], node 0 the pending token) at
        positions p0 + depth, node n's K/V in cell p0 + n; p0 [1] on the device (= kv.length).
        Does not commit. -> (logits [N, V], hidden [N, D]): the fused step's kernels where the
        engine runs them (capturable), else the torch forward's."""
        if self.kv.length + shape.nodes > self.ctx_size:
            raise AssertionError("tree past the context")
        if self.runner.fused is None:
            return self.model.forward_tree(tokens, shape, self.kv.length, self.kv)
        from .spec.tree import tables

        tb = tables(shape, self.device)
        return self.runner.fused.forward(tokens, p0 + tb.depths, tree=(p0 + tb.nodes, tb.ancestors))

    def move_cells(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """K/V of cells src [A] into cells dst [A] (a tree's accepted path to its positions)."""
        self.kv.move_cells(src, dst)

    def sample_next(self, logits: torch.Tensor, sampler: SamplerConfig) -> torch.Tensor:
        """Draw the token at position len(tokens) from logits [1, V]; stays on the device."""
        n = len(self.tokens)
        if sampler.greedy and not sampler.uses_penalties:
            return logits[0].argmax().view(1)
        p = sample_dist(logits, self.tok_buf[:n], sampler)
        u = uniforms(sampler.seed, torch.tensor([n], device=self.device))
        return draw(p, u)

    def commit(self, new: list[int], accepted: int = 0, on_device: bool = False) -> None:
        """Commit tokens produced after a forward whose first row was the pending token and whose
        next `accepted` rows were the first tokens of `new` (accepted drafts). `on_device`: the
        caller already wrote `new` into tok_buf."""
        n = len(self.tokens)
        assert 0 <= accepted < max(len(new), 1)
        self.kv.commit(n + accepted)  # the pending token's (and accepted drafts') K/V are written
        if on_device:
            self.tokens.extend(new)
        else:
            self._set_tokens(self.tokens + new, n)

    def rollback(self, n: int) -> None:
        """Keep the first n committed tokens (a round that emitted beyond a stop or the budget)."""
        if n < len(self.tokens):
            del self.tokens[n:]
            self.kv.rollback(min(self.kv.length, n - 1))
            if self.drafter is not None:
                self.drafter.truncate(n)

    # ---- generation -------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str | list[int],
        sampler: SamplerConfig = SamplerConfig(),
        max_tokens: int = 256,
        spec=None,
        stop_ids: tuple[int, ...] | None = None,
        add_bos: bool = True,
        special: bool = False,
    ) -> Iterator[Piece]:
        """Stream the continuation of `prompt` as text pieces. `spec` is a spec.SpecConfig, or None
        for plain decoding; `special`: control tokens are printed as text (else they give no text;
        their ids stay in the pieces). Stats of the call are in `self.last_stats` when the stream
        ends."""
        if max_tokens < 0:
            raise ConfigError(f"max-tokens must be >= 0, got {max_tokens}")
        ids = self.encode_prompt(prompt, add_bos)
        stats = Stats(prompt_tokens=len(ids))
        self.last_stats = stats
        stops = set(self.tokenizer.stop_ids if stop_ids is None else stop_ids)
        if spec is not None and spec.draft == "auto":
            spec = self._auto_spec(spec)
        speculative = spec is not None and spec.draft != "none"
        if speculative:
            spec = spec.for_sampler(sampler.greedy, cpu=self.device.type == "cpu")
            self._use_drafter(spec)
            if spec.tree is not None and not self.drafter.drafts_trees:
                raise ConfigError(f"--draft-tree needs a drafter that ranks its candidates (mtp), not {self.drafter.name}")
        elif self.drafter is not None:  # plain decoding does not keep a drafter's cache current
            self.kept.stop_drafting()
        t0 = time.perf_counter()
        stats.prompt_cached = self.start(ids)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        stats.prompt_s = time.perf_counter() - t0
        budget = min(max_tokens, self.ctx_size - len(ids))
        if speculative and spec.tree is not None:
            from .spec.tree_round import tree_tokens

            stats.spec = RoundStats(f"{self.drafter.name} tree {spec.tree.spec}", spec.tree.depth)
            program = self._tree_round()
            token_iter = tree_tokens(self, sampler, spec, spec.tree, budget, self.drafter, stats.spec,
                                     vocab=self.model.cfg.vocab_size, tree_round=program)
        elif speculative:
            from .spec.round import speculative_tokens

            stats.spec = RoundStats(self.drafter.name, spec.draft_tokens)
            program = self._program(sampler, spec.spec_sample, self.drafter, spec.round_split)
            token_iter = speculative_tokens(self, sampler, spec, budget, self.drafter, stats.spec, program,
                                            plain_steps=self.decode_steps)
        else:
            program = self._program(sampler, "exact", None)
            token_iter = self._plain_tokens(program, budget)
        before = program.captures
        try:
            yield from self._stream(token_iter, stops, stats, max_tokens, budget, special)
        finally:
            stats.captures = program.captures - before

    def _file_weights(self, cfg: EngineConfig) -> bool:
        """--file-weights on / off, or auto: on where the dense copy and the K/V cache would not fit
        the GPU's free memory (said once on stderr)."""
        if cfg.file_weights != "auto":
            return cfg.file_weights == "on"
        mc = model_config(self.gguf)
        dense, kv = dense_bytes(self.gguf, mc), kv_bytes(mc, cfg.ctx_size)
        free = torch.cuda.mem_get_info(self.device)[0]
        if not file_weights_needed(dense, kv, free):
            return False
        print(f"mtp-turbo: the dense bf16 weights ({dense / 2**30:.1f} GiB) and the K/V cache ({kv / 2**30:.1f} GiB) "
              f"do not fit the GPU's {free / 2**30:.1f} GiB free: holding the matrices as the file's bytes "
              f"(--file-weights on)", file=sys.stderr)
        return True

    def _auto_spec(self, spec):
        """--draft auto: what spec/auto.py chooses for this model (None: plain decoding), kept per
        spec and said once on stderr. On the CPU drafting needs the int8 matrices (--cpu-weights
        f32: plain, as measured)."""
        if self.device.type == "cpu" and self.model.head_op is None:
            return None
        if spec not in self._auto:
            from .spec.auto import choose

            self._auto[spec], said = choose(spec, self.gguf.path, self.device.type == "cpu", self._use_drafter)
            print(f"mtp-turbo: --draft auto {said}", file=sys.stderr)
        return self._auto[spec]

    @property
    def drafter(self) -> Drafter | None:
        """The drafter of the current speculative calls (None after plain decoding)."""
        return self.kept.drafter

    def _use_drafter(self, spec) -> None:
        """Make the drafter for `spec` current (spec.programs.ProgramCache: kept across calls and
        draft modes, so a switch loads and captures nothing again)."""
        from .spec.drafters import make_drafter

        kernels = self.runner.kernels  # a draft model steps on the main model's kernels
        if self.kept.use_drafter(spec, lambda: make_drafter(spec, self.model, self.gguf, self.ctx_size, kernels)):
            # it knows nothing the engine committed while another mode ran: it and (when it reads the
            # main model's states) the main cache start over, so it sees every prompt chunk
            self.drafter.reset()
            if self.drafter.reads_hidden:
                self.kv.reset()
                self.tokens = []

    def _program(self, sampler: SamplerConfig, mode: str, drafter: Drafter | None, split: bool = False):
        """The device program of rounds (k = 0: plain steps) for this sampler's shape and drafter,
        kept with its CUDA graphs across calls and set to this sampler's values."""
        from .spec.program import RoundProgram

        return self.kept.program(sampler, mode, drafter is not None, split, self.model.cfg.vocab_size,
                                 self.tok_buf.shape[0],
                                 lambda: RoundProgram(self, sampler, mode, drafter, graphs=self.cfg.cuda_graphs,
                                                      split=split, pipeline=self.pipelined,
                                                      vocab=self.model.cfg.vocab_size))

    def _tree_round(self):
        """The current drafter's TreeRound, kept (with its CUDA graphs) while the drafter is."""
        from .spec.tree_round import TreeRound

        if self._tree is None or self._tree.drafter is not self.drafter:
            self._tree = TreeRound(self, self.drafter, self.model.cfg.vocab_size, graphs=self.cfg.cuda_graphs)
        return self._tree

    @property
    def decode_steps(self) -> int:
        """Plain steps a device program takes (EngineConfig.decode_steps; 0 = auto)."""
        if self.cfg.decode_steps:
            return self.cfg.decode_steps
        # a program of steps saves a host round trip a token where the steps replay from graphs;
        # eager steps (the CPU) gain nothing and would read every cached cell on the captured path
        return 4 if self.device.type == "cuda" and self.cfg.cuda_graphs else 1

    @property
    def pipelined(self) -> bool:
        """Programs launched before the previous one is read (EngineConfig.pipeline; auto = where
        they replay from CUDA graphs: eagerly, the host launches every kernel and gains nothing)."""
        if self.cfg.pipeline != "auto":
            return self.cfg.pipeline == "on"
        return self.device.type == "cuda" and self.cfg.cuda_graphs

    def _plain_tokens(self, program, budget: int) -> Iterator[list[int]]:
        """Plain decoding's tokens from `program` (a RoundProgram without a drafter)."""
        from .spec.program import launched_ahead

        steps, produced = self.decode_steps, 0

        def launch():  # whole programs while they fit, single steps for the rest (two graphs at most)
            return program.launch(0, steps=steps if budget - produced >= steps else 1)

        def settle(ticket) -> list[int]:
            nonlocal produced
            a, emitted, _ = program.finish(ticket)  # the one host sync
            self.commit(emitted, a, on_device=True)
            produced += len(emitted)
            return emitted

        def launch_after(ticket):  # plain steps emit exactly their count: the budget is known
            left = budget - produced - ticket.most
            return program.launch_after(ticket, 0, steps=steps if left >= steps else 1) if left >= 1 else None

        # as speculative rounds: the next program runs while the consumer takes these tokens
        yield from launched_ahead(launch, settle, lambda: produced < budget, program.finish,
                                  launch_after if program.pipeline else None)

    def _stream(self, token_iter, stops, stats: Stats, max_tokens: int, budget: int,
                special: bool) -> Iterator[Piece]:
        dec = self.tokenizer.stream(special=special)
        t0 = last = time.perf_counter()
        stats.finish_reason = "length" if budget >= max_tokens else "context"
        done = False
        if self.threads is not None:
            self.threads.apply()
        try:
            for toks in token_iter:
                if self.threads is not None:  # the program's time under its thread count; the next one's count
                    now = time.perf_counter()
                    self.threads.record(now - last, len(toks))
                    self.threads.apply()
                    last = now
                out = []
                for t in toks:
                    if t in stops:
                        stats.finish_reason = "stop"
                        break
                    out.append(t)
                    if stats.gen_tokens + len(out) >= max_tokens:
                        break
                stats.gen_tokens += len(out)
                text = "".join(dec.feed(t) for t in out)
                if out:
                    yield Piece(text, tuple(out))
                if stats.finish_reason == "stop" or stats.gen_tokens >= max_tokens:
                    # a round may have emitted past the stop: those tokens are not committed
                    self.rollback(stats.prompt_tokens + stats.gen_tokens + (stats.finish_reason == "stop"))
                    break
            done = True
            tail = dec.flush()
            if tail:
                yield Piece(tail, ())
        finally:
            token_iter.close()  # runs the round loop's cleanup (stats) now, not at GC
            stats.decode_s = time.perf_counter() - t0
            if not done:  # the caller closed the stream early: keep what it was given
                stats.finish_reason = "cancelled"
                self.rollback(stats.prompt_tokens + stats.gen_tokens)

    def generate_text(self, prompt, **kw) -> str:
        return "".join(p.text for p in self.generate(prompt, **kw))

    def generate_ids(self, prompt, **kw) -> list[int]:
        return [t for p in self.generate(prompt, **kw) for t in p.token_ids]

    # ---- analysis ---------------------------------------------------------------------------------
    def forward_logits(self, ids: list[int], chunk: int, tail_single: int = 0) -> torch.Tensor:
        """Logits of every position of `ids` from an empty cache of its own (scoring.forward_logits)."""
        return scoring.forward_logits(self, ids, chunk, tail_single)

    def step_logits(self, ids: list[int], first: int) -> torch.Tensor:
        """Logits of positions first .. n-1 as decoding computes them (scoring.step_logits)."""
        return scoring.step_logits(self, ids, first)

    def perplexity(self, text: str, ctx: int, max_chunks: int | None = None, progress: bool = True) -> dict:
        """llama.cpp's llama-perplexity on the logits decoding computes (scoring.perplexity)."""
        return scoring.perplexity(self, text, ctx, max_chunks, progress)

    # ---- sessions -------------------------------------------------------------------------------------
    def identity(self) -> dict:
        c = self.model.cfg
        return {"model_sha256": self.gguf.sha256(), "n_layers": c.n_layers, "hidden": c.hidden,
                "kv_dtype": str(self.kv.k.dtype)}

    def save_session(self, path: str | Path) -> None:
        """Save the committed tokens and their K/V (atomically: a failed write keeps the previous
        file, cache/session.py); the pending last token rides in the header."""
        if not self.tokens:
            raise MtpTurboError("nothing to save: no tokens in the session")
        self.kv.save_session(path, self.tokens[: self.kv.length], self.identity(), {"pending": self.tokens[-1]})

    def load_session(self, path: str | Path) -> None:
        """Continue a saved session. Everything is checked (cache/session.py, and the pending token
        here) before the cache is touched: a refused file leaves the current session as it was."""
        vocab = self.model.cfg.vocab_size
        s = self.kv.read_session(path, self.identity(), vocab)
        pending = s.extra.get("pending")
        if "pending" not in s.extra:
            raise CacheError(f"session file {path} lacks its pending token")
        if not isinstance(pending, int) or isinstance(pending, bool) or not 0 <= pending < vocab:
            raise CacheError(f"session file {path} is corrupt: its pending token {pending!r} is not a token id "
                             f"of this model [0, {vocab})")
        if len(s.tokens) >= self.ctx_size:  # the pending token's forward needs a cell too
            raise CacheError(f"session file {path} holds {len(s.tokens) + 1} tokens, more than the context "
                             f"({self.ctx_size})")
        self.kv.restore_session(s)
        self.tokens = []
        self._set_tokens(s.tokens + [pending], 0)
        if self.drafter is not None:
            self.drafter.reset()  # the session holds no drafter K/V
