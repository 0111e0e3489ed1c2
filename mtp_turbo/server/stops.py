"""Stop strings over streamed text (the OpenAI `stop` field, the CLI's --stop and plain-text chat).

Owns: finding the first of a set of strings in text that arrives in pieces, without ever letting
out text that might turn out to begin a stop string. Ignores: tokens (the engine stops on stop
tokens by itself).
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStrings:
    """feed(text) returns the text safe to emit now; once a stop string is complete, `hit` holds
    it, the text before it is the last returned, and everything after is dropped."""

    def __init__(self, stops: Sequence[str] = ()):
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self.hit: str | None = None
        self._held = ""  # a tail that is the start of some stop string

    def feed(self, text: str) -> str:
        if self.hit is not None:
            return ""
        if not self.stops:
            return text
        buf = self._held + text
        found = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        if found:
            i, self.hit = min(found)
            self._held = ""
            return buf[:i]
        keep = max((n for s in self.stops for n in range(min(len(s) - 1, len(buf)), 0, -1) if buf.endswith(s[:n])),
                   default=0)
        self._held = buf[len(buf) - keep:]
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The held-back tail, at the end of the text (it never became a stop string)."""
        out, self._held = self._held, ""
        return "" if self.hit is not None else out
