"""`mtp-turbo quant-report`: quantization error of real weight matrices, as GEMV output error.

Owns: picking named matrices from a GGUF file (the main model's projections of a few layers by
default, plus a drafter GGUF's matrices with --drafter), requantizing up to --rows rows of each to
Q8_0, Q5_0, Q4_0 (ggml rule) and Q4_0 (Lloyd), and the rel-RMSE of the GEMV output on Gaussian x:
sqrt(sum_x ||W_q x - W x||^2 / sum_x ||W x||^2), W = the source tensor dequantized, W_q x computed
by our `gemv` on the repacked weight. Ignores: choosing a format for the engine, GPU timing.

The source weights are themselves quantized (Gemma-3-270M Q4_K_M: Q5_0 / Q8_0 / Q4_K / Q6_K):
the error is against the dequantized source, and a source already in the target format
re-quantizes exactly (a Q5_0 tensor to Q5_0 gives 0), so the table lists each source type.
"""

from __future__ import annotations

import argparse
import fnmatch
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from .gemv import MAX_ROWS, gemv
from .repack import PackedWeight, quantize_bytes

REPORT_FORMATS = ("q8_0", "q5_0", "q4_0", "q4_0_lloyd")
DEFAULT_KINDS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
DEFAULT_LAYERS = (0, 8, 17)
DEFAULT_GLOBS = tuple(f"blk.{layer}.{kind}.weight" for layer in DEFAULT_LAYERS for kind in DEFAULT_KINDS)


@dataclass(frozen=True)
class ReportRow:
    name: str
    source_type: str
    shape: tuple[int, int]  # rows used x cols
    rel_rmse: dict[str, float]  # format -> rel-RMSE of the GEMV output


def load_rows(gf, name: str, rows: int) -> torch.Tensor:
    """The first `rows` rows of a 2-D GGUF tensor, dequantized to float32 [r, cols]."""
    from mtp_turbo.io.gguf_file import ggml_type_name
    from .dequant import dequantize, nbytes_for

    t = gf.tensors[name]
    assert len(t.shape) == 2, (name, t.shape)
    r = min(rows, t.shape[0])
    nbytes = nbytes_for(t.ggml_type, (r, t.shape[1]))
    raw = torch.from_numpy(np.array(gf.raw(name)[:nbytes], copy=True))
    try:
        return dequantize(raw, t.ggml_type, (r, t.shape[1]))
    except Exception as e:
        raise ConfigError(f"{name}: cannot dequantize {ggml_type_name(t.ggml_type)}: {e}") from None


def gemv_rel_rmse(w: torch.Tensor, fmt: str, n_x: int, seed: int) -> float:
    """rel-RMSE of gemv(x, quantized w) against x @ w.T (float64) over n_x Gaussian x."""
    assert w.dim() == 2 and w.shape[1] % 32 == 0
    raw = quantize_bytes(w.numpy(), fmt)
    pw = PackedWeight.from_gguf_bytes(raw, "q4_0" if fmt == "q4_0_lloyd" else fmt, tuple(w.shape))
    x = torch.randn(n_x, w.shape[1], generator=torch.Generator().manual_seed(seed))
    ref = x.double() @ w.double().t()
    got = torch.cat([gemv(x[i:i + MAX_ROWS], pw) for i in range(0, n_x, MAX_ROWS)]).double()
    den = ref.pow(2).sum()
    return float(((got - ref).pow(2).sum() / den).sqrt()) if den > 0 else 0.0


def select(names, patterns) -> list[str]:
    """Names matching any glob, in pattern order then file order, without repeats."""
    out: list[str] = []
    for p in patterns:
        for n in names:
            if fnmatch.fnmatchcase(n, p) and n not in out:
                out.append(n)
    return out


def report_file(path, patterns, rows: int, n_x: int, seed: int, prefix: str = "",
                formats=REPORT_FORMATS) -> list[ReportRow]:
    from mtp_turbo.io.gguf_file import GGUFFile, ggml_type_name

    gf = GGUFFile(path)
    names = [n for n in select(list(gf.tensors), patterns)
             if len(gf.tensors[n].shape) == 2 and gf.tensors[n].shape[1] % 32 == 0]
    if not names:
        raise ConfigError(f"{path}: no 2-D tensor (cols % 32 == 0) matches {', '.join(patterns)}")
    out = []
    for i, name in enumerate(names):
        w = load_rows(gf, name, rows)
        errs = {f: gemv_rel_rmse(w, f, n_x, seed + i) for f in formats}
        out.append(ReportRow(prefix + name, ggml_type_name(gf.tensors[name].ggml_type), tuple(w.shape), errs))
    return out


def format_table(rows: list[ReportRow], formats=REPORT_FORMATS, n_x: int = 16) -> str:
    heads = {"q8_0": "Q8_0", "q5_0": "Q5_0", "q4_0": "Q4_0 (ggml)", "q4_0_lloyd": "Q4_0 (Lloyd)"}
    lines = [
        f"GEMV output rel-RMSE on {n_x} Gaussian x, first rows of each tensor. The source weights are "
        "already quantized (type in 'source'): errors are against the dequantized source, and a "
        "source already in a target format re-quantizes exactly (0).",
        "| tensor | source | rows x cols | " + " | ".join(heads[f] for f in formats) + " |",
        "|---|---|---|" + "---|" * len(formats),
    ]
    for r in rows:
        cells = " | ".join(f"{100 * r.rel_rmse[f]:.2f}%" for f in formats)
        lines.append(f"| {r.name} | {r.source_type} | {r.shape[0]}x{r.shape[1]} | {cells} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.rows <= 0 or args.n_x <= 0:
        raise ConfigError(f"--rows and --n-x must be > 0, got {args.rows}, {args.n_x}")
    model = args.model
    if model is None:
        from mtp_turbo.io.gguf_file import default_model_path

        model = default_model_path()
    patterns = tuple(p for p in args.tensors.split(",") if p) if args.tensors else DEFAULT_GLOBS
    rows = report_file(model, patterns, args.rows, args.n_x, args.seed)
    if args.drafter:
        rows += report_file(args.drafter, ("*",), args.rows, args.n_x, args.seed, prefix="drafter:")
    print(format_table(rows, n_x=args.n_x))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="main model GGUF (default: the Gemma-3-270M package file)")
    p.add_argument("--drafter", default=None, help="drafter GGUF: all its 2-D matrices are added")
    p.add_argument("--rows", type=int, default=256, help="rows taken from each tensor (default 256)")
    p.add_argument("--tensors", default=None,
                   help="comma-separated globs of tensor names (default: q/k/v/o/gate/up/down of "
                        f"layers {', '.join(map(str, DEFAULT_LAYERS))})")
    p.add_argument("--n-x", type=int, default=16, help="Gaussian input vectors (default 16)")
    p.add_argument("--seed", type=int, default=0)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("quant-report", help="quantization error table (GEMV rel-RMSE) on real tensors")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mtp-turbo quant-report")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
