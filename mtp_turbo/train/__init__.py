"""Training an MTP head for a model that has none (self-distillation): data (data.py), the batched
training forwards (forward.py), the loop (distill.py) and the head file writer (export.py).

`register(sub)` adds the `train-data` and `train-mtp` subcommands to the CLI."""


def register(sub) -> None:
    from . import data, distill

    data.add_parser(sub)
    distill.add_parser(sub)
