"""`mtp-turbo tokenize`: the token ids of a text under a model file's tokenizer, printed as JSON.

Owns: the command's parser and its output: one line, `[id, id, ...]` as llama.cpp's
`llama-tokenize --ids` prints it (BOS first where the file adds it, control tokens written in the
text matched whole), or `[[id, piece], ...]` with --show-pieces (the text each id stands for).
Ignores: how text becomes ids (io/tokenizer.py), loading any weights (only the file's metadata is
read).
"""

from __future__ import annotations

import json
import sys

HELP_LINE = "token ids of a text as JSON (as llama.cpp's llama-tokenize prints them)"


def add_parser(sub) -> None:
    from ..cli import HELP

    p = sub.add_parser("tokenize", help=HELP_LINE,
                       description="Print the token ids of TEXT under the model file's tokenizer as a JSON list on "
                       "one line (BOS first where the file adds it; control tokens such as <|im_start|> written "
                       "in the text count as one token each).")
    p.add_argument("text", metavar="TEXT", help='the text ("-" reads stdin)')
    p.add_argument("--model", default=None, help=HELP["model"])
    p.add_argument("--no-bos", action="store_true", help="leave BOS out where the file adds it")
    p.add_argument("--show-pieces", action="store_true",
                   help="print [id, piece] pairs, the piece being the text the id stands for (part of a character "
                   "shows as U+FFFD)")
    p.set_defaults(func=cmd_tokenize)


def cmd_tokenize(args) -> int:
    from ..cli import model_file
    from .gguf_file import GGUFFile
    from .tokenizer import GGUFTokenizer

    text = sys.stdin.read() if args.text == "-" else args.text
    tok = GGUFTokenizer(GGUFFile(model_file(args)))  # --model, else the default model; ModelFileError if absent
    ids = tok.encode(text, add_bos=not args.no_bos)
    if args.show_pieces:
        out = [[i, tok.piece_bytes(i).decode("utf-8", "replace")] for i in ids]
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(json.dumps(ids))
    return 0
