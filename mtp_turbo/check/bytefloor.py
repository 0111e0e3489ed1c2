"""`mtp-turbo byte-floor`: bytes a draft step must read, from tensor sizes, per quantization choice.

Owns: drafter descriptions as data (our Gemma-3-270M MTP drafter, built from the head's own
config and the drafter's real weight policy, models/mtp_head.policy_fmt; and the report's drafter
with the shapes derived from its MB figures), the byte arithmetic per format, the time floor at a
bandwidth, measuring device-to-device copy bandwidth, and the subcommand. Ignores: real files
(sizes come from the descriptions), kernels, whether a format costs acceptance.

Policy (the report's item 3): tensors marked `chosen` (q/o projections, fc_embedding, fc_hidden,
the FFN / shared expert) take the chosen format; everything else keeps its own (K/V, router,
HC matrices Q8_0; the head in its file format; norms f32).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConfigError
from ..models.mtp_head import MTPConfig, policy_fmt, tensor_names

# (elements per block, bytes per block)
FORMAT_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q5_0": (32, 22),
    "q4_0": (32, 18),
    "iq4_xs": (256, 136),  # 4.25 bits per weight (ggml)
    # The report's routed experts: not a ggml type. 13.8 MB for 10 experts of 3 x 640 x 2560
    # gives 2.25 bits per weight, i.e. 18 bytes per 64 (2-bit codes + one fp16 scale).
    "q2_0": (64, 18),
}
QUANT_CHOICES = ("bf16", "q8_0", "q5_0", "q4_0")


@dataclass(frozen=True)
class TensorDesc:
    name: str
    shape: tuple[int, ...]  # (N_out, K) for matrices; (n,) for norms
    fmt: str | None  # fixed format; None = the chosen format, through the description's policy
    count: int = 1  # identical tensors read (e.g. 10 routed experts)
    note: str = ""

    def nbytes(self, fmt: str, rows: int | None = None) -> int:
        """Bytes of one read in `fmt` (rows overrides the first dimension, for the head gather)."""
        shape = (rows,) + tuple(self.shape[1:]) if rows is not None else self.shape
        n = 1
        for s in shape:
            n *= s
        per, size = FORMAT_BLOCKS[fmt]
        assert n % per == 0, (self.name, shape, fmt)
        return n // per * size * self.count


@dataclass(frozen=True)
class Variant:
    """A way the step reads the tensors: some dropped, some read more than once."""

    drop: frozenset[str] = frozenset()
    reads: tuple[tuple[str, int], ...] = ()  # (tensor name, reads per step) overrides, default 1


@dataclass(frozen=True)
class ModelDesc:
    name: str
    title: str
    tensors: tuple[TensorDesc, ...]
    head: str  # name of the head tensor (its rows can be overridden: reduced-vocabulary gather)
    head_rows: int  # default rows of the head
    variants: dict[str, Variant] = field(default_factory=dict)
    columns: tuple[tuple[str, str], ...] = ()  # default (variant, quant) columns
    # (tensor name, chosen quant) -> the format of a tensor without a fixed one (None: the chosen)
    policy: Callable[[str, str], str] | None = None


def _hc(i: int) -> TensorDesc:
    return TensorDesc(f"hc_block{i}", (2560, 2560), "q8_0", note="HC mixing; 21 MB / 3 blocks, shape derived")


def _gemma_desc() -> ModelDesc:
    """The shipped Gemma-3-270M drafter: the head's tensors and shapes from MTPConfig, their
    formats from the drafter's own policy, the LM head rows in the main file's Q8_0."""
    c, vocab = MTPConfig(), 262144
    D, qd, kvd = c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    shapes = {"fc_e": (D, D), "fc_h": (D, D), "q": (qd, D), "k": (kvd, D), "v": (kvd, D), "o": (D, qd),
              "gate": (c.ffn, D), "up": (c.ffn, D), "down": (D, c.ffn), "q_norm": (c.head_dim,),
              "k_norm": (c.head_dim,)}
    names = {}  # desc name (the GGUF name's last part) -> the head's weight key
    tensors = []
    for key, gguf in tensor_names(c).items():
        name = gguf.split(".")[-2]
        names[name] = key
        norm = key.endswith("norm")
        tensors.append(TensorDesc(name, shapes.get(key, (D,)), "f32" if norm else None))
    tensors.append(TensorDesc("head", (vocab, D), "q8_0", note="tied token_embd (Q8_0 in the file)"))

    def policy(name: str, quant: str) -> str:
        pf = policy_fmt(quant, names[name])
        return "bf16" if pf is None else pf[0]

    return ModelDesc(
        "gemma3-270m-mtp", "Gemma-3-270M MTP drafter (one Gemma-3 block + main model's head)",
        tuple(tensors), head="head", head_rows=32768, variants={"mtp": Variant()},
        columns=tuple(("mtp", qn) for qn in QUANT_CHOICES), policy=policy,
    )


def _report_desc() -> ModelDesc:
    # Shapes derived from the report's MB at Q8_0 (34 B / 32 weights), hidden 2560:
    #   q 33.4 MB -> 12288 x 2560 (33.42 MB); o 16.7 MB -> 2560 x 6144 (16.71 MB);
    #   K/V 2.8 MB -> 2 x 512 x 2560 (2.79 MB); router 1.4 MB -> 512 x 2560 (1.39 MB);
    #   shared expert 5.2 MB -> 3 x 640 x 2560 (5.22 MB); HC 21 MB -> 3 x 2560 x 2560 (20.89 MB);
    #   routed experts 13.8 MB -> 10 x 3 x 640 x 2560 at 2.25 bpw (13.82 MB);
    #   head 40525 x 2560 IQ4_XS = 40525 x 1360 B (55.11 MB), fc_* 2560 x 2560 (6.96 MB).
    d = 2560
    t = (
        TensorDesc("fc_embedding", (d, d), None),
        TensorDesc("fc_hidden", (d, d), None, note="one GEMV per HC stream before, 4 rows of one after"),
        _hc(0), _hc(1), _hc(2),
        TensorDesc("attn_k", (512, d), "q8_0", note="K/V 2.8 MB, shape derived"),
        TensorDesc("attn_v", (512, d), "q8_0"),
        TensorDesc("indexer", (640, d), "q8_0", note="dropped by the patch"),
        TensorDesc("attn_q", (12288, d), None, note="33.4 MB at Q8_0, shape derived"),
        TensorDesc("attn_output", (d, 6144), None, note="16.7 MB at Q8_0, shape derived"),
        TensorDesc("router", (512, d), "q8_0", note="1.4 MB, shape derived"),
        TensorDesc("shared_gate", (640, d), None), TensorDesc("shared_up", (640, d), None),
        TensorDesc("shared_down", (d, 640), None),
        TensorDesc("expert_gate", (640, d), "q2_0", count=10, note="10 routed experts"),
        TensorDesc("expert_up", (640, d), "q2_0", count=10),
        TensorDesc("expert_down", (d, 640), "q2_0", count=10),
        TensorDesc("head", (40525, d), "iq4_xs", note="row gather of output.weight"),
    )
    return ModelDesc(
        "report", "The report's MTP drafter (hidden 2560, 4 HC streams)", t, head="head",
        head_rows=40525,
        variants={"before": Variant(reads=(("fc_hidden", 4),)), "patch": Variant(drop=frozenset({"indexer"}))},
        columns=(("before", "q8_0"), ("patch", "q8_0"), ("patch", "q5_0"), ("patch", "q4_0")),
    )


def model_descs() -> dict[str, ModelDesc]:
    return {d.name: d for d in (_gemma_desc(), _report_desc())}


def step_bytes(desc: ModelDesc, variant: str, quant: str, head_rows: int | None = None) -> dict[str, int]:
    """Bytes per draft step per tensor (name -> bytes; dropped tensors are absent)."""
    if quant not in QUANT_CHOICES:
        raise ConfigError(f"--quant {quant!r}: one of {', '.join(QUANT_CHOICES)}")
    if variant not in desc.variants:
        raise ConfigError(f"variant {variant!r} of {desc.name}: one of {', '.join(desc.variants)}")
    v = desc.variants[variant]
    reads = dict(v.reads)
    rows = desc.head_rows if head_rows is None else head_rows
    out: dict[str, int] = {}
    for t in desc.tensors:
        if t.name in v.drop:
            continue
        fmt = t.fmt or (desc.policy(t.name, quant) if desc.policy else quant)
        out[t.name] = t.nbytes(fmt, rows if t.name == desc.head else None) * reads.get(t.name, 1)
    return out


def measure_copy_bandwidth(nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written) on the current CUDA device."""
    import torch

    a = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * a.numel() * 4 / times[len(times) // 2] / 1e9


def format_table(desc: ModelDesc, columns, head_rows: int | None, bandwidth_gbs: float | None) -> str:
    """Markdown table: MB per tensor per (variant, quant) column, total, and ms floor."""
    per_col = [step_bytes(desc, v, q, head_rows) for v, q in columns]
    heads = [f"{v}/{q}" if len(desc.variants) > 1 else q for v, q in columns]
    rows = desc.head_rows if head_rows is None else head_rows
    lines = [f"Byte floor per draft step: {desc.title}; head rows {rows}; MB = 1e6 bytes",
             "| tensor | shape | fmt | " + " | ".join(heads) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for t in desc.tensors:
        shape = "x".join(str(s) for s in ((rows,) + t.shape[1:] if t.name == desc.head else t.shape))
        if t.count > 1:
            shape = f"{t.count} x {shape}"
        cells = [f"{c[t.name] / 1e6:.3f}" if t.name in c else "-" for c in per_col]
        lines.append(f"| {t.name} | {shape} | {t.fmt or ('policy' if desc.policy else 'chosen')} | " + " | ".join(cells) + " |")
    totals = [sum(c.values()) for c in per_col]
    lines.append("| **total MB** | | | " + " | ".join(f"{x / 1e6:.1f}" for x in totals) + " |")
    if bandwidth_gbs:
        lines.append(f"| **ms at {bandwidth_gbs:.0f} GB/s** | | | "
                     + " | ".join(f"{x / (bandwidth_gbs * 1e9) * 1e3:.3f}" for x in totals) + " |")
    else:
        lines.append("(no --bandwidth and no CUDA device: bytes only)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    descs = model_descs()
    if args.model_desc not in descs:
        raise ConfigError(f"--model-desc {args.model_desc!r}: one of {', '.join(descs)}")
    desc = descs[args.model_desc]
    if args.head_rows is not None and args.head_rows <= 0:
        raise ConfigError(f"--head-rows must be > 0, got {args.head_rows}")
    columns = desc.columns
    if args.quant:
        if args.quant not in QUANT_CHOICES:
            raise ConfigError(f"--quant {args.quant!r}: one of {', '.join(QUANT_CHOICES)}")
        columns = tuple((v, args.quant) for v in desc.variants)
    bw = args.bandwidth
    if bw is None:
        import torch

        if torch.cuda.is_available():
            bw = measure_copy_bandwidth()
            print(f"measured device-to-device copy bandwidth: {bw:.0f} GB/s (read + written)")
    elif bw <= 0:
        raise ConfigError(f"--bandwidth must be > 0 GB/s, got {bw}")
    print(format_table(desc, columns, args.head_rows, bw))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-desc", default="gemma3-270m-mtp", help="gemma3-270m-mtp | report")
    p.add_argument("--quant", default=None, help="one of bf16, q8_0, q5_0, q4_0 (default: all)")
    p.add_argument("--head-rows", type=int, default=None,
                   help="LM head rows read per step (reduced-vocabulary gather; default 32768 for "
                        "gemma3-270m-mtp, 40525 for report; 262144 = gemma's full vocabulary)")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="GB/s for the time floor (default: measured copy bandwidth on CUDA)")


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("byte-floor", help="bytes read per draft step and the time floor")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mtp-turbo byte-floor")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
