"""The `train-mtp` command's configuration and flags, without torch (so that `--help` is quick).

Owns: TrainConfig (one flag per field), its help text, the subparser and the command, which checks
the files and the config before the model loads. Ignores: training itself (distill.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch: int = 16
    seq_len: int = 0  # 0 = the data's row length; else a random crop of that many tokens (from position 0)
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.01
    chain: int = 3  # chain depth k trained (steps 1..k)
    vocab_rows: int = 32768  # 0 = full head
    ffn: int = 0  # the head's FFN width (0 = the main model's); narrower: a smaller, faster head
    sink: int = 64
    window: int = 256
    hidden_source: str = "pre_norm"
    eval_every: int = 250
    eval_rows: int = 32
    ckpt_every: int = 500
    time_budget: float = 0.0  # seconds of training (0 = no limit), not counting --gen-time
    seed: int = 0
    init: str = ""  # head GGUF to start from (its vocab ids and hidden source are kept)
    block: int = 256  # query rows per attention block of the head's banded attention
    pos_offset: int = 0  # max virtual gap after the sink (0 = off)
    offset_frac: float = 0.5  # share of batches that get a gap, uniform in [1, pos_offset]
    eval_offset: int = 12288  # eval also with this gap (0 = off)
    gen_rows: int = 0  # rows of the main model's own replies sampled before training (0 = off)
    gen_len: int = 0  # their length (0 = the data's row length)
    gen_batch: int = 256
    gen_time: float = 60.0  # seconds for sampling them
    gen_temps: str = "0,0.7"
    gen_frac: float = 0.3  # share of training batches drawn from them
    # the sampler chain of their sampled rows (temperature > 0; see sampling/config.py)
    gen_top_k: int = 0
    gen_top_p: float = 1.0
    gen_min_p: float = 0.05
    gen_repeat_penalty: float = 1.0
    gen_presence_penalty: float = 0.0
    gen_frequency_penalty: float = 0.0
    gen_penalty_last_n: int = 64
    # + accept_weight * (1 - sum_x p_s(x) q_s(x)) per chain step, p_s / q_s = main / head at
    # accept_temp with min-p accept_min_p: the chance a draft drawn from the head's sampled
    # distribution is accepted by exact verification; pulls the head's top token onto the main
    # model's where sampled decoding is uncertain (0 = off)
    accept_weight: float = 0.0
    accept_temp: float = 0.6
    accept_min_p: float = 0.05

    def __post_init__(self) -> None:
        if self.ffn < 0 or self.ffn % 32:
            raise ConfigError(f"ffn must be 0 (the main model's) or a positive multiple of 32, got {self.ffn}")
        if self.chain < 1 or self.steps < 1 or self.batch < 1 or self.block < 1:
            raise ConfigError("chain, steps, batch and block must be >= 1")
        if self.pos_offset < 0 or self.eval_offset < 0 or not (0 <= self.offset_frac <= 1) or not (0 <= self.gen_frac <= 1):
            raise ConfigError("pos-offset/eval-offset must be >= 0, offset-frac and gen-frac in [0, 1]")
        if self.accept_weight < 0 or not self.accept_temp > 0 or not (0 <= self.accept_min_p < 1):
            raise ConfigError("accept-weight must be >= 0, accept-temp > 0, accept-min-p in [0, 1)")
        if self.hidden_source not in ("pre_norm", "post_norm"):
            raise ConfigError(f"hidden-source must be pre_norm or post_norm, got {self.hidden_source!r}")


# `train-mtp --help`: one line per TrainConfig field (its flag is the field's name)
TRAIN_HELP = {
    "steps": "optimizer steps (the cosine schedule spans them, or --time-budget if that ends first)",
    "batch": "rows per step",
    "seq_len": "tokens per row: 0 = the data's row length, else a crop of that many from position 0",
    "lr": "peak AdamW learning rate",
    "warmup": "steps of linear learning-rate warmup",
    "weight_decay": "AdamW weight decay (not on the norms)",
    "chain": "chain depth k trained: the head predicts 1..k tokens ahead from its own states",
    "vocab_rows": "rows of the head's reduced vocabulary (the data's most frequent ids); 0 = the full head",
    "ffn": "the head's FFN width (0 = the main model's; narrower = a smaller file and a faster draft step, "
    "started from the first rows of the main layer's FFN)",
    "sink": "head attention: first cells always attended (as the drafter's --draft-sink)",
    "window": "head attention: most recent cells attended (as --draft-window)",
    "hidden_source": "main-model hidden state the head reads: pre_norm (before the final norm) or post_norm",
    "eval_every": "steps between held-out evaluations (KL, top-1 agreement, acceptance per chain step); 0 = at the start and the end only",
    "eval_rows": "held-out rows evaluated",
    "ckpt_every": "steps between checkpoints (OUT.ckpt); 0 = at the end only",
    "time_budget": "seconds of training, not counting --gen-time (0 = no limit); stops cleanly and writes the head",
    "seed": "seed of the initialisation, the batches and the sampled rows",
    "init": "warm start from this head GGUF (its vocab ids and hidden source are kept); empty = from the main "
    "model's last sliding layer",
    "block": "query rows per block of the head's banded attention (memory vs speed)",
    "pos_offset": "largest virtual position gap after the sink (the sink seen from far, as in a long prompt); 0 = off",
    "offset_frac": "share of batches that get a gap, uniform in [1, pos-offset]",
    "eval_offset": "also evaluate with the sink this many positions away; 0 = off",
    "gen_rows": "rows of the main model's own replies sampled before training and mixed into the batches; 0 = off",
    "gen_len": "tokens of each sampled row (0 = the data's row length)",
    "gen_batch": "rows sampled at once",
    "gen_time": "seconds at most for sampling them",
    "gen_temps": "comma list of temperatures the rows are sampled at (0 = greedy)",
    "gen_frac": "share of training batches drawn from the sampled rows",
    "gen_top_k": "sampled rows' chain: top-k (0 = off)",
    "gen_top_p": "sampled rows' chain: top-p (1 = off)",
    "gen_min_p": "sampled rows' chain: min-p (0 = off)",
    "gen_repeat_penalty": "sampled rows' chain: repetition penalty (1 = off)",
    "gen_presence_penalty": "sampled rows' chain: presence penalty",
    "gen_frequency_penalty": "sampled rows' chain: frequency penalty",
    "gen_penalty_last_n": "sampled rows' chain: tokens the penalties see (-1 = all)",
    "accept_weight": "weight of the acceptance term (1 - sum p_s q_s per chain step, at --accept-temp): pulls the "
    "head's top token onto the main model's where sampling is uncertain; 0 = off",
    "accept_temp": "temperature of the acceptance term's distributions",
    "accept_min_p": "min-p of the acceptance term's main-model distribution",
}


def _run(args) -> int:
    """`train-mtp`: the files and the config checked before the model loads, then distill.train."""
    import json
    from pathlib import Path

    from ..cli import config_from_args
    from ..engine import pick_device
    from ..io.gguf_file import GGUFFile, default_model_path
    from ..io.tokenizer import GGUFTokenizer
    from ..models.load import load_model
    from .distill import train

    tc = config_from_args(TrainConfig, args)
    for flag, path in (("--data", args.data), ("--init", tc.init)):
        if path and not Path(path).is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    if not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out {args.out}: its folder does not exist")
    device = pick_device(args.device)
    gf = GGUFFile(args.model or default_model_path())
    model = load_model(gf, device)
    res = train(model, gf.sha256(), args.data, args.out, tc, device, resume=args.resume, ckpt=args.ckpt,
                tokenizer=GGUFTokenizer(gf) if tc.gen_rows else None)
    if args.history:
        Path(args.history).write_text(json.dumps(res, indent=1))
    return 0


def add_parser(sub) -> None:
    """`train-mtp`: the files, then one flag per TrainConfig field (help from TRAIN_HELP)."""
    from ..cli import add_config_args

    p = sub.add_parser("train-mtp", help="train an MTP head for the main model by self-distillation",
                       description="Train an MTP head for the main model by self-distillation on rows from "
                       "`mtp-turbo train-data`; writes a head GGUF that `--draft mtp --drafter OUT` loads.")
    p.add_argument("--data", required=True, help="rows from `mtp-turbo train-data` (.npy)")
    p.add_argument("--out", required=True, help="head GGUF to write (checkpoint: OUT.ckpt)")
    p.add_argument("--model", default=None, help="main model GGUF (default: Gemma-3-270M)")
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument("--ckpt", default=None, help="checkpoint path (default: OUT.ckpt)")
    p.add_argument("--history", default=None, help="write eval history + recipe JSON here")
    add_config_args(p, TrainConfig, help=TRAIN_HELP)
    p.set_defaults(func=_run)
