"""The HTTP face of one engine: an OpenAI-compatible FastAPI app.

Endpoints: GET /health (no key needed), GET /metrics (Prometheus text), GET /v1/models,
GET /v1/models/{id}, POST /v1/completions, POST /v1/chat/completions (JSON, or server-sent events
with "stream": true). Owns: the API key check, reading bodies (bounded in size, time and nesting,
JSON in UTF-8 only), turning a validated request into a job for the worker (tokenizing it,
checking it against the context, capping max_tokens by it), answering in whole or as a stream,
noticing a client that goes away (its job is cancelled, whole answer or stream), the status codes
/metrics counts, and every error in OpenAI's JSON shape (a bug is a logged 500, the server serves
on). Ignores: the engine's internals (worker.py drives it), the wire format's field rules
(protocol.py), a request's head (transport.py bounds the time it may take).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from . import metrics
from .config import ServeConfig
from .protocol import APIError, Defaults, GenRequest, Shapes, bad, parse_chat, parse_completion, without_paths
from .worker import Counters, EngineWorker, Job

OPEN_PATHS = ("/health",)  # reachable without the API key
PATHS = ("/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions")  # /metrics labels
MAX_DEPTH = 32  # nesting of a request body; OpenAI's bodies need 5
GONE = 499  # nginx's "client closed request": what /metrics counts for a client that left first

log = logging.getLogger("mtp_turbo.server")


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class EventStream(StreamingResponse):
    """A server-sent event stream tied to a job: the job is cancelled when the stream ends for any
    reason, and as soon as the client disconnects (not only at the next write)."""

    def __init__(self, chunks: AsyncIterator[str], job: Job):
        super().__init__(chunks, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.job = job

    async def __call__(self, scope, receive, send) -> None:
        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.job.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await self.stream_response(send)
        except OSError:  # the client went away mid-stream
            pass
        finally:
            watcher.cancel()
            self.job.cancel()
            await self.body_iterator.aclose()


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class Guard:
    """ASGI middleware: the API key check, the per-response counters, and the last word on an
    exception nothing else answered (a 500 in OpenAI's shape, its traceback in the log; uvicorn
    would answer plain text and Starlette's outer layer runs after the counting)."""

    def __init__(self, app, api_key: str, counters: Counters):
        self.app, self.counters = app, counters
        self.expected = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        status = {"code": 0}

        async def counted(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.expected is not None and path not in OPEN_PATHS:
                got = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(got, self.expected):
                    msg = ("missing API key: send 'Authorization: Bearer KEY'" if not got else
                           "incorrect API key provided")
                    await _error(APIError(401, msg, None, "invalid_api_key"))(scope, receive, counted)
                    return
            await self.app(scope, receive, counted)
        except Exception as e:
            if status["code"]:  # the answer had begun: nothing to say; uvicorn closes the connection
                raise
            log.exception("request failed: %s %s", scope["method"], path)
            msg = without_paths(f"internal error: {type(e).__name__}: {e}")
            await _error(APIError(500, msg))(scope, receive, counted)
        finally:
            label = path if path in PATHS else "/v1/models/{id}" if path.startswith("/v1/models/") else "other"
            self.counters.response(label, status["code"] or GONE)


async def read_json(request: Request, limit: int, timeout: float):
    """The body as JSON: at most `limit` bytes (413 beyond), all of it within `timeout` s (408
    after), UTF-8 (RFC 8259), no NaN or Infinity (not JSON), nesting at most MAX_DEPTH, every
    string encodable as UTF-8 (a lone surrogate "\\ud800" is not). A client that leaves while
    it sends raises ClientGone."""
    ctype = request.headers.get("content-type")
    media = (ctype or "").split(";")[0].strip().lower()
    if ctype is not None and media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"the body must be JSON sent as 'Content-Type: application/json', not {ctype!r}", None,
                       "unsupported_media_type")
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        raise APIError(413, f"the request body has {size} bytes; the limit is {limit} (--max-body)", None,
                       "request_too_large")
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > limit:
                    raise APIError(413, f"the request body exceeds {limit} bytes (--max-body)", None,
                                   "request_too_large")
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout:g} s (--read-timeout)", None,
                       "request_timeout") from None
    except ClientDisconnect:
        raise ClientGone from None

    def no_constants(name: str):
        raise ValueError(f"{name} is not valid JSON")

    if not buf.strip():
        raise bad("the body is empty: send a JSON object")
    try:
        text = bytes(buf).decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"the body is not UTF-8: {e.reason} at byte {e.start}") from None
    try:
        body = json.loads(text, parse_constant=no_constants)
    except ValueError as e:
        raise bad(f"the body is not valid JSON: {e}") from None
    except RecursionError:  # the parser recurses once a level
        raise bad(f"the body nests deeper than {MAX_DEPTH} levels") from None
    check_tree(body)
    return body


def check_tree(body) -> None:
    """Refuse what JSON allows but the server will not take: nesting deeper than MAX_DEPTH, and a
    string with a lone surrogate, which no tokenizer can encode (param: the top-level field)."""
    todo = [(body, 0, None)]
    while todo:
        v, depth, field = todo.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    where = f"'{field}'" if field else "the body"
                    raise bad(f"{where} holds a lone surrogate (\\u{ord(v[e.start]):04x}), which is not a character: "
                              "text must be valid Unicode", field) from None
        elif isinstance(v, (dict, list)):
            if depth >= MAX_DEPTH:
                raise bad(f"the body nests deeper than {MAX_DEPTH} levels", field)
            if isinstance(v, list):
                todo += [(x, depth + 1, field) for x in v]
                continue
            for k, x in v.items():
                f = field if field is not None else k
                todo += [(k, depth, f), (x, depth + 1, f)]


def model_id_of(engine, cfg: ServeConfig) -> str:
    return cfg.model_alias or engine.gguf.path.name.removesuffix(".gguf")


def create_app(engine, cfg: ServeConfig, defaults: Defaults | None = None) -> FastAPI:
    """The app serving `engine` (an Engine, or anything with its generate / tokenizer / ctx_size /
    last_stats / gguf.path). Its worker thread starts now; shutdown stops it."""
    d = defaults or Defaults(model_id_of(engine, cfg))
    model_id = d.model_id
    counters = Counters()
    worker = EngineWorker(engine, cfg.max_queue, counters)
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.stop()

    app = FastAPI(title="mtp-turbo", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.worker, app.state.counters, app.state.model_id = worker, counters, model_id
    app.add_middleware(Guard, api_key=cfg.api_key, counters=counters)

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return _error(e)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException):
        msg = {404: f"no such endpoint: {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return _error(APIError(e.status_code, msg, None, "not_found" if e.status_code == 404 else None))

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, e: ClientGone):
        return Response(status_code=GONE)  # nobody reads it: it is for the counters and the access log

    def model_card() -> dict:
        # mtp_turbo: the model file and the settings fixed at start, which `mtp-turbo generate`
        # compares with its own before it streams from this server instead of loading the model
        from ..client import server_facts

        return {"id": model_id, "object": "model", "created": started, "owned_by": "mtp-turbo",
                "max_model_len": engine.ctx_size, "mtp_turbo": server_facts(engine, d)}

    @app.get("/health")
    async def health():
        return {"status": "ok", "queue": worker.pending, "queue_capacity": cfg.max_queue}

    @app.get("/metrics")
    async def get_metrics():
        return PlainTextResponse(metrics.render(counters, worker.pending, cfg.max_queue, model_id),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str):
        if name != model_id:
            raise APIError(404, f"the model '{name}' does not exist; this server serves '{model_id}'", "model",
                           "model_not_found")
        return model_card()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await read_json(request, cfg.max_body, cfg.read_timeout)
        return await answer(request, parse_completion(body, d))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await read_json(request, cfg.max_body, cfg.read_timeout)
        return await answer(request, parse_chat(body, d, engine.tokenizer.chat_prompt))

    async def watch(request: Request, job: Job) -> None:
        """Cancel the job when the client disconnects: its body is read, so the next message is that."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        job.cancel()
        job.events.put_nowait(("gone", None))

    async def next_event(job: Job):
        event = await job.events.get()
        if event[0] == "gone":
            raise ClientGone
        return event

    async def answer(request: Request, req: GenRequest):
        tok = engine.tokenizer
        param = "messages" if req.chat else "prompt"
        if isinstance(req.prompt, str):
            ids = await asyncio.to_thread(tok.encode, req.prompt)
        else:
            ids = req.prompt
            if any(not 0 <= t < tok.vocab_size for t in ids):
                raise bad(f"token ids must be in [0, {tok.vocab_size})", "prompt")
        ctx = engine.ctx_size
        if len(ids) >= ctx:
            raise bad(f"this model's context holds {ctx} tokens; the prompt has {len(ids)} (and the reply needs "
                      "at least one more)", param, "context_length_exceeded")
        room = ctx - len(ids)
        job = Job(req, ids, room if req.max_tokens is None else min(req.max_tokens, room), asyncio.get_running_loop())
        if not worker.submit(job):
            raise APIError(429, f"the server is busy: {cfg.max_queue} requests already wait or run (--max-queue); "
                           "retry later", None, "queue_full", "rate_limit_error")
        shapes = Shapes(req.chat, model_id)
        watcher = asyncio.ensure_future(watch(request, job))
        streamed = False
        try:
            event = await next_event(job)  # errors before any text keep their HTTP status
            if event[0] == "error":
                raise event[1]
            if req.stream:  # from here EventStream watches the client and ends the job
                streamed = True
                return EventStream(stream(job, shapes, req, event), job)
            while event[0] == "text":  # the text is whole in the result
                event = await next_event(job)
            if event[0] == "error":
                raise event[1]
            return shapes.whole(event[1])
        finally:
            watcher.cancel()
            if not streamed:
                job.cancel()

    async def stream(job: Job, shapes: Shapes, req: GenRequest, event) -> AsyncIterator[str]:
        iu = req.include_usage
        if req.chat:
            yield _sse(shapes.chunk(None, first=True, with_usage=iu))
        while True:
            kind, value = event
            if kind == "text":
                yield _sse(shapes.chunk(value, with_usage=iu))
            elif kind == "error":
                yield _sse(value.body())
                return
            elif kind == "gone":  # the watcher of answer() saw the client leave
                return
            else:
                yield _sse(shapes.chunk(None, finish_reason=value.finish_reason, with_usage=iu))
                if iu:
                    yield _sse(shapes.usage_chunk(value))
                yield "data: [DONE]\n\n"
                return
            event = await job.events.get()

    return app
