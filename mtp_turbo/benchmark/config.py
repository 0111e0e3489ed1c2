"""`mtp-turbo bench`'s settings (one frozen dataclass, flags 1:1) and its prompt sets. No torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..spec.config import DRAFTERS
from ..spec.tree_shape import SpineTree

DATA = Path(__file__).resolve().parents[1] / "data"
PROMPT_SETS = {"mtbench": "mt_bench_first_turns.json", "humaneval": "humaneval_prompts.json"}
# the sampled rows' chain unless flags say otherwise (temperature comes from --temps)
SAMPLED = dict(top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64)


def _floats(s: str, name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--{name} takes comma-separated numbers, got {s!r}") from None


@dataclass(frozen=True)
class BenchConfig:
    modes: str = "plain,mtp,ngram"  # comma list from none/plain, mtp, ngram, model
    draft_model: str = ""  # the draft model of the model rows: a GGUF path or a registry name
    drafter: str = ""  # the MTP head file of the mtp rows ("" = the one shipped for the model)
    temps: str = "0,0.6"  # 0 = greedy (no penalties); > 0 = the sampled chain at that temperature
    draft_tokens: str = "1,2,3,4"  # k of the speculative rows
    draft_trees: str = ""  # mtp rows with draft trees too, ";"-separated SpineTree specs (e.g. "3:2,1;3:3,2,1")
    max_tokens: int = 128  # generated per prompt
    prompts: str = "mtbench"  # mtbench | humaneval | FILE (.json list, or one prompt per line)
    n_prompts: int = 8
    chat: bool = False  # each prompt as a user message through the model's chat template (instruct models)
    reps: int = 1  # each prompt this many times per row
    adaptive: bool = False  # speculative rows choose each round's k in 0..K (off: always K drafts, the default)
    split: bool = False  # time draft / verify / accept apart (SpecConfig.round_split: three graphs, events between)
    ignore_eos: bool = True  # always generate max_tokens (as llama-bench does)
    warmup: bool = True  # each prompt generated once untimed per row first, as the timed runs will
    pp: int = 512  # a prompt of this many tokens is prefilled (plain) for prompt speed as llama-bench's ppN; 0 = skip
    floor: bool = False  # the bandwidth floor: weight + KV bytes a plain step reads / measured copy bandwidth
    llama_bench: str = ""  # llama.cpp's llama-bench binary: run beside us, tgN / ppN and our ratio to them
    llama_completion: str = ""  # llama.cpp's llama-completion binary: the same prompts and sampler chain
    llama_args: str = ""  # extra arguments for both llama.cpp tools (e.g. "-ngl 99")
    json: str = ""  # write every figure as JSON to this file ("-" = stdout, instead of the table)
    plot: str = ""  # draw decode tok/s per row into this image file (needs matplotlib: mtp-turbo[bench])

    def __post_init__(self) -> None:
        bad = [m for m in self.mode_list if m not in DRAFTERS]
        if bad or not self.mode_list or "auto" in self.mode_list:
            raise ConfigError(f"--modes takes names from plain, mtp, ngram, model; got {self.modes!r}")
        if ("model" in self.mode_list) != bool(self.draft_model):
            raise ConfigError("--modes model and --draft-model go together (the model rows' draft model)")
        if not self.temp_list or any(not t >= 0 for t in self.temp_list):
            raise ConfigError(f"--temps takes temperatures >= 0, got {self.temps!r}")
        ks = _floats(self.draft_tokens, "draft-tokens")
        if not ks or any(k != int(k) or not 1 <= k <= 7 for k in ks):
            raise ConfigError(f"--draft-tokens takes integers in [1, 7], got {self.draft_tokens!r}")
        for t in self.tree_list:
            try:
                SpineTree.parse(t)
            except ValueError as e:
                raise ConfigError(f"--draft-trees: {e}") from None
        if self.tree_list and "mtp" not in self.mode_list:
            raise ConfigError("--draft-trees are mtp rows: add mtp to --modes")
        for name in ("max_tokens", "n_prompts", "reps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.pp < 0:
            raise ConfigError(f"--pp must be >= 0, got {self.pp}")
        if self.drafter and not Path(self.drafter).is_file():
            raise ConfigError(f"--drafter {self.drafter}: no such file")
        for name in ("llama_bench", "llama_completion"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ConfigError(f"--{name.replace('_', '-')} {path}: no such file")
        for name in ("json", "plot"):
            path = getattr(self, name)
            if path and path != "-" and not Path(path).resolve().parent.is_dir():
                raise ConfigError(f"--{name} {path}: its folder does not exist")
        if self.prompts not in PROMPT_SETS and not Path(self.prompts).is_file():
            raise ConfigError(f"--prompts takes mtbench, humaneval or a file; {self.prompts!r} is none of them")

    @property
    def mode_list(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys("none" if m.strip() == "plain" else m.strip() for m in self.modes.split(",")
                                   if m.strip()))

    @property
    def temp_list(self) -> tuple[float, ...]:
        return _floats(self.temps, "temps")

    @property
    def tree_list(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.draft_trees.split(";") if t.strip())

    @property
    def k_list(self) -> tuple[int, ...]:
        return tuple(int(k) for k in _floats(self.draft_tokens, "draft-tokens"))


def load_prompts(source: str, n: int) -> list[str]:
    """The first n prompts of a set: the packaged MT-Bench first turns or HumanEval prompts, a JSON
    file (a list of strings, or {"prompts"|"questions": [{"prompt": ...}]}), or a text file with
    one prompt per line."""
    path = DATA / PROMPT_SETS[source] if source in PROMPT_SETS else Path(source)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"--prompts {path}: not valid JSON ({e})") from None
        items = obj if isinstance(obj, list) else obj.get("prompts") or obj.get("questions") or []
        out = [x if isinstance(x, str) else x.get("prompt") for x in items if isinstance(x, (str, dict))]
    else:
        out = text.splitlines()
    out = [p for p in out if isinstance(p, str) and p.strip()]
    if not out:
        raise ConfigError(f"--prompts {path}: no prompts in it")
    return out[:n]


HELP = {
    "modes": "rows to run: plain (no drafter), mtp (the model's MTP head), ngram (prompt lookup), model (a "
    "smaller model of the same tokenizer: --draft-model)",
    "draft_model": "the draft model of the model rows: a GGUF path or a known model's name (`mtp-turbo models`)",
    "drafter": "the MTP head file of the mtp rows (default: the head shipped for the model)",
    "temps": "temperatures; 0 = greedy, > 0 = the sampled chain (--top-k ... --penalty-last-n) at that temperature",
    "draft_tokens": "drafts per round (k) of the speculative rows, comma-separated",
    "draft_trees": "mtp rows drafting trees as well, ';'-separated --draft-tree specs (DEPTH:M1,M2,..)",
    "max_tokens": "tokens generated per prompt",
    "prompts": "mtbench (MT-Bench first turns), humaneval (HumanEval prompts) or a FILE (.json list of strings, "
    "or one prompt per line)",
    "n_prompts": "prompts of the set used",
    "chat": "send each prompt as a user message through the model's chat template (for instruct models; "
    "llama-completion gets the same rendered text)",
    "reps": "runs of each prompt per row",
    "adaptive": "speculative rows choose each round's k in 0..K from measured acceptance and round times "
    "(SpecConfig.adaptive); off: every round drafts K",
    "split": "time a round's draft / verify / accept apart (SpecConfig.round_split: on CUDA three graphs with "
    "events between, a little slower); off: the round's device time and host share only",
    "ignore_eos": "generate max-tokens every time (EOS is not a stop), as llama-bench does",
    "warmup": "each prompt generated once per row, untimed, exactly as the timed runs (compiles kernels and "
    "captures every CUDA graph shape the runs use; the table says where a timed run still captured one)",
    "pp": "prefill a prompt of this many tokens (plain) for the prompt speed llama-bench reports as ppN; 0 = skip",
    "floor": "add the bandwidth floor: the bytes a plain decode step reads (weights + K/V) over the measured "
    "copy bandwidth",
    "llama_bench": "llama.cpp's llama-bench binary: run `-m MODEL -fa 1 -p PP -n MAX_TOKENS -o json` in the same "
    "run and report our ratio to its tgN and ppN",
    "llama_completion": "llama.cpp's llama-completion binary: run the same prompts with the same sampler chain, "
    "seed and max-tokens, and report its decode tok/s beside ours",
    "llama_args": "extra arguments for both llama.cpp tools (e.g. '-ngl 99 -t 8')",
    "json": "write every figure as JSON to FILE ('-' = stdout, in place of the table)",
    "plot": "draw decode tok/s per row into FILE (.png, .svg, ...; needs matplotlib: pip install 'mtp-turbo[bench]')",
}
