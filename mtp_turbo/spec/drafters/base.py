"""The drafter interface: what proposes the k tokens a speculative round verifies.

Owns: `Drafter`, the base class every drafter derives from, with no-op hooks, so the engine and
the round call every hook unconditionally (no `hasattr`). Ignores: how any drafter drafts.

The round calls `begin(tokens)` at the start of a generation (the committed sequence),
`propose(tokens, k)` for at most k drafts that would follow `tokens`, and `observe(tokens,
accepted, hidden)` after each verify with the new committed sequence, how many drafts were
accepted and the main model's hidden states of the verified rows that were committed. The engine
calls `on_prefill` for each prefill chunk, `truncate(n)` when the committed sequence is cut to n
tokens, and `reset()` when it is replaced wholesale (a session load). `reads_hidden` says whether
the drafter needs the main model's hidden states (then the engine re-encodes a prompt it already
holds, so that the drafter sees every chunk).
"""

from __future__ import annotations

import torch


class Drafter:
    name = "drafter"
    reads_hidden = False  # needs the main model's hidden rows of prefill chunks and verified rows
    # drafts on the device inside the round's program (prepare / device_drafts / prepare_after /
    # device_drafts_after / launched_after, store_hidden_rows: see mtp.py, ngram.py) instead of
    # returning them from propose
    on_device = False
    # ranks its candidates at each depth: a tree round's device program calls prepare(tokens, depth)
    # and device_tree(staged, rows, tree) (see mtp.py, spec/tree_round.py)
    drafts_trees = False
    caught_up = 0  # rows a device drafter's last prepare encoded ahead of its round (a switching cost)

    def begin(self, tokens: list[int]) -> None:
        pass

    def propose(self, tokens: list[int], k: int) -> list[int]:
        raise NotImplementedError

    def observe(self, tokens: list[int], accepted: int, hidden: torch.Tensor | None, stored: bool = False) -> None:
        """stored: a device round already stored the verified rows' states (reads_hidden drafters)."""

    def on_prefill(self, c0: int, c1: int, hidden: torch.Tensor, tokens: list[int]) -> None:
        """Main rows [c0, c1) of the committed `tokens` were just encoded; hidden [c1 - c0, D]
        is a buffer the next forward overwrites (copy what is kept)."""

    def truncate(self, n: int) -> None:
        """Only the first n committed tokens stay."""

    def reset(self) -> None:
        """Nothing committed is known any more."""

    def hidden_rows_buffer(self) -> torch.Tensor | None:
        """A reads_hidden drafter's [positions, D] rows the round may copy verified states into as
        they are (instead of store_hidden_rows), or None."""
        return None

    def set_sampler(self, sampler, coupling: bool = False) -> None:
        """The SamplerConfig the verifier uses (None: raw argmax drafts), for drafters that use it."""

    def glue_to_torch(self) -> bool:
        """A device drafter's index work (spec/glue.py) with torch ops from now on (a round's
        capture failed); False if it has none or already does."""
        return False
