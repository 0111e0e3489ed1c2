"""How `mtp-turbo serve` meets its sockets: uvicorn's h11 protocol with a deadline on a request's
head (the request line and headers), and the uvicorn settings built from ServeConfig.

uvicorn closes a keep-alive connection that stays idle between requests, but waits as long as a
client likes for the headers of a request that has begun, or for the first byte of a new
connection: a stalled or hostile client could hold connections open for good. Here the head must
be complete `read_timeout` seconds after the connection opens or its last answer ends; a partial
head is then answered 408 and the connection closed. The body's deadline is app.py's (it reads
the body). Ignores: everything after the headers.
"""

from __future__ import annotations

import asyncio
import json

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .config import ServeConfig
from .protocol import APIError


def _timeout_reply(seconds: float) -> bytes:
    body = json.dumps(APIError(408, f"the request's headers did not arrive within {seconds:g} s (--read-timeout)",
                               None, "request_timeout").body()).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


def protocol_with_deadline(seconds: float) -> type[H11Protocol]:
    """H11Protocol whose connections must complete each request's head within `seconds`."""
    reply = _timeout_reply(seconds)

    class DeadlineH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _after = None  # the request cycle whose answer the deadline runs from (None: from connecting)

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm(None)

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self._deadline is not None and self.cycle is not self._after:
                self._disarm()  # a new request's head is complete

        def on_response_complete(self) -> None:
            self._arm(self.cycle)  # before uvicorn reads a pipelined head, which disarms it again
            super().on_response_complete()

        def _arm(self, after) -> None:
            self._disarm()
            self._after = after
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:  # a head has begun
                self.transport.write(reply)
            self.transport.close()

    return DeadlineH11Protocol


def uvicorn_config(app, cfg: ServeConfig, **kw) -> uvicorn.Config:
    """uvicorn's settings for serving `app` under `cfg` (kw: more uvicorn.Config arguments)."""
    return uvicorn.Config(app, http=protocol_with_deadline(cfg.read_timeout), **kw)
