"""One engine, one thread: requests run in arrival order from a bounded queue.

Owns: the jobs (a validated request + its prompt ids), admission (a full queue refuses), running
the engine's blocking generator in the worker thread and handing each piece of text to the
request's asyncio queue, stop strings, cancellation (a client that goes away: its job ends at the
next piece; one that has not started gives its place in the queue back at once and never runs),
and the serving counters /metrics reports. Ignores: HTTP and the wire format (app.py, protocol.py).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass, field

from ..errors import MtpTurboError
from .protocol import APIError, GenRequest, Result, without_paths
from .stops import StopStrings

log = logging.getLogger("mtp_turbo.server")


class Job:
    """A request in the queue. Events on `events`: ("text", str), ("done", Result), ("error", APIError);
    app.py adds ("gone", None) when the client leaves."""

    def __init__(self, req: GenRequest, ids: list[int], max_tokens: int, loop: asyncio.AbstractEventLoop):
        self.req, self.ids, self.max_tokens = req, ids, max_tokens
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.waiting = False  # queued and not yet taken by the worker (under the worker's lock)
        self._withdraw = None  # the worker's hook that gives a waiting job's place back
        self._loop = loop

    def emit(self, kind: str, value) -> None:
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is gone (server shutting down)
            self.cancelled.set()

    def cancel(self) -> None:
        """End the job: a running one stops at its next piece, a waiting one leaves the queue now."""
        self.cancelled.set()
        if self._withdraw is not None:
            self._withdraw(self)


@dataclass
class Counters:
    """What the server has done since it started (read by /metrics under `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    responses: dict = field(default_factory=dict)  # (path, status) -> count
    generations: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_s: float = 0.0
    gen_tokens: int = 0
    decode_s: float = 0.0
    spec_rounds: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_emitted: float = 0.0
    last_decode_tps: float = 0.0
    last_prompt_tps: float = 0.0

    def response(self, path: str, status: int) -> None:
        with self.lock:
            self.responses[(path, status)] = self.responses.get((path, status), 0) + 1

    def generation(self, stats, cancelled: bool) -> None:
        sp = stats.spec
        with self.lock:
            self.generations += 1
            self.cancelled += cancelled
            self.prompt_tokens += stats.prompt_tokens
            self.prompt_cached += stats.prompt_cached
            self.prompt_s += stats.prompt_s
            self.gen_tokens += stats.gen_tokens
            self.decode_s += stats.decode_s
            if stats.gen_tokens:
                self.last_decode_tps = stats.decode_tps
            if stats.prompt_tokens > stats.prompt_cached:
                self.last_prompt_tps = stats.prompt_tps
            if sp is not None:
                self.spec_rounds += sp.rounds
                self.spec_drafted += sp.drafted
                self.spec_accepted += sp.accepted
                self.spec_emitted += sp.emitted


FINISH = {"stop": "stop", "length": "length", "context": "length", "cancelled": "length"}


class EngineWorker:
    """Runs jobs on `engine` one at a time in a thread of its own; at most `max_queue` jobs wait
    or run at once."""

    def __init__(self, engine, max_queue: int, counters: Counters):
        self.engine, self.max_queue, self.counters = engine, max_queue, counters
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self.current: Job | None = None
        self._thread = threading.Thread(target=self._loop, name="mtp-turbo-engine", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, job: Job) -> bool:
        """Queue the job; False (and nothing queued) when max_queue jobs already wait or run."""
        with self._lock:
            if self._pending >= self.max_queue:
                return False
            self._pending += 1
            job.waiting, job._withdraw = True, self._withdraw
        self._jobs.put(job)
        return True

    def _withdraw(self, job: Job) -> None:
        """A waiting job that was cancelled: its place is free at once (the thread skips it later)."""
        with self._lock:
            if not job.waiting:
                return
            job.waiting = False
            self._pending -= 1
        with self.counters.lock:
            self.counters.cancelled += 1

    def stop(self) -> None:
        """Cancel the running job and end the thread after it (jobs still queued are skipped)."""
        if self.current is not None:
            self.current.cancel()
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                if not job.waiting:  # withdrawn: its place was given back then
                    continue
                job.waiting = False
            self.current = job
            try:
                self._run(job)
            except MtpTurboError as e:
                job.emit("error", APIError(400, without_paths(str(e))))
            except Exception as e:  # a bug: answer it, log it, keep serving
                log.exception("generation failed")
                job.emit("error", APIError(500, without_paths(f"internal error: {type(e).__name__}: {e}")))
            finally:
                self.current = None
                with self._lock:
                    self._pending -= 1

    def _run(self, job: Job) -> None:
        req, eng = job.req, self.engine
        if job.cancelled.is_set():  # cancelled as the thread took it: not worth a prefill
            with self.counters.lock:
                self.counters.cancelled += 1
            return
        stops = StopStrings(req.stop)
        spec = req.spec if req.spec.draft != "none" else None
        gen = eng.generate(job.ids, sampler=req.sampler, max_tokens=job.max_tokens, spec=spec, special=False)
        text: list[str] = []
        n = 0
        try:
            for piece in gen:
                n += len(piece.token_ids)
                t = stops.feed(piece.text)
                if t:
                    text.append(t)
                    job.emit("text", t)
                if stops.hit is not None or job.cancelled.is_set():
                    break
        finally:
            gen.close()  # ends the generation now; the engine stays consistent
        tail = stops.flush()
        if tail:
            text.append(tail)
            job.emit("text", tail)
        st = eng.last_stats
        self.counters.generation(st, job.cancelled.is_set())
        finish = "stop" if stops.hit is not None else FINISH.get(st.finish_reason, "length")
        job.emit("done", Result("".join(text), st.prompt_tokens, st.prompt_cached, n, finish))

