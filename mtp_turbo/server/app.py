"""The HTTP face of one engine: an OpenAI-compatible FastAPI app.

Endpoints: GET /health (no key needed), GET /metrics (Prometheus text), GET /v1/models,
GET /v1/models/{id}, POST /v1/completions, POST /v1/chat/completions (JSON, or server-sent events
with "stream": true). Owns: the API key check, reading bodies (bounded, JSON only), turning a
validated request into a job for the worker (tokenizing it, checking it against the context,
capping max_tokens by it), answering in whole or as a stream, noticing a client that goes away,
and every error in OpenAI's JSON shape. Ignores: the engine's internals (worker.py drives it),
the wire format's field rules (protocol.py).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from . import metrics
from .config import ServeConfig
from .protocol import APIError, Defaults, GenRequest, Shapes, bad, parse_chat, parse_completion
from .worker import Counters, EngineWorker, Job

OPEN_PATHS = ("/health",)  # reachable without the API key
PATHS = ("/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions")  # /metrics labels


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
    """ASGI middleware: the API key check and the per-response counters."""

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
        finally:
            label = path if path in PATHS else "/v1/models/{id}" if path.startswith("/v1/models/") else "other"
            self.counters.response(label, status["code"] or 499)


async def read_json(request: Request, limit: int):
    """The body as JSON, at most `limit` bytes (413 beyond); NaN and Infinity are not JSON."""
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        raise APIError(413, f"the request body has {size} bytes; the limit is {limit} (--max-body)", None,
                       "request_too_large")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise APIError(413, f"the request body exceeds {limit} bytes (--max-body)", None, "request_too_large")

    def no_constants(name: str):
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(bytes(buf), parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"the body is not valid JSON: {e}") from None


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

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception):
        return _error(APIError(500, f"internal error: {type(e).__name__}: {e}"))

    def model_card() -> dict:
        return {"id": model_id, "object": "model", "created": started, "owned_by": "mtp-turbo",
                "max_model_len": engine.ctx_size}

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
        body = await read_json(request, cfg.max_body)
        return await answer(request, parse_completion(body, d))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await read_json(request, cfg.max_body)
        return await answer(request, parse_chat(body, d, engine.tokenizer.chat_prompt))

    async def next_event(job: Job, request: Request):
        """The job's next event; a client that closed the connection meanwhile cancels the job."""
        while True:
            try:
                return await asyncio.wait_for(job.events.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    raise ClientGone from None

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
        try:
            first = await next_event(job, request)  # errors before any text keep their HTTP status
        except ClientGone:
            return Response(status_code=499)
        except BaseException:
            job.cancel()
            raise
        if first[0] == "error":
            raise first[1]
        if req.stream:
            return EventStream(stream(job, shapes, req, first), job)
        event = first
        try:
            while event[0] == "text":  # the text is whole in the result
                event = await next_event(job, request)
        except ClientGone:
            return Response(status_code=499)
        finally:
            job.cancel()
        if event[0] == "error":
            raise event[1]
        return shapes.whole(event[1])

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
            else:
                yield _sse(shapes.chunk(None, finish_reason=value.finish_reason, with_usage=iu))
                if iu:
                    yield _sse(shapes.usage_chunk(value))
                yield "data: [DONE]\n\n"
                return
            event = await job.events.get()

    return app
