"""The OpenAI wire format: request bodies -> a validated GenRequest, results -> response bodies.

Owns: which fields are accepted and their ranges, what is refused and why (n > 1, logprobs, tools,
...), the JSON error shape, and the shapes of completions, chat completions and their stream
chunks. Ignores: HTTP (app.py), the engine (worker.py).

Sampler fields a request may set: temperature, top_p, presence_penalty, frequency_penalty, seed
(OpenAI's) and top_k, min_p, repeat_penalty (alias repetition_penalty), penalty_last_n (extra body
fields); speculation: draft, draft_tokens. Unset fields take the server's defaults (its sampler and
speculation flags). Without a seed a request gets the server's --seed, or a random one (the
default, -1).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..sampling.config import INT_MAX, TEMPERATURE, SamplerConfig
from ..spec.config import DRAFTERS, SpecConfig

# Fields accepted and ignored (they do not change the text): OpenAI bookkeeping.
IGNORED = ("user", "metadata", "store", "service_tier", "parallel_tool_calls", "stream_options")
SAMPLER_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                  "frequency_penalty", "penalty_last_n")
ALIASES = {"repetition_penalty": "repeat_penalty"}  # vLLM's name for llama.cpp's
SPEC_FIELDS = ("draft", "draft_tokens")
COMMON = ("model", "max_tokens", "stream", "stop", "seed", "n", "logprobs", *SAMPLER_FIELDS, *ALIASES, *SPEC_FIELDS,
          *IGNORED)
COMPLETION_FIELDS = (*COMMON, "prompt", "echo", "suffix", "best_of", "logit_bias")
CHAT_FIELDS = (*COMMON, "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "functions",
               "function_call", "response_format", "logit_bias", "modalities", "audio")
LOGPROBS = ("logprobs are not available: the engine cannot yet give exact log-probabilities of the emitted "
            "tokens (it would have to return the verifier's distribution for every token, speculative or not)")


class APIError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        message, param = _printable(message), _printable(param)
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _printable(text: str | None) -> str | None:
    """`text` that can be sent as UTF-8: a lone surrogate a client sent is shown as its escape."""
    return text if text is None or text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


# an absolute POSIX path of two or more parts (not a URL's, not a/b), or a Windows one
_ABS_PATH = re.compile(r"(?<![\w.~:/-])(?:/[^\s/'\"]+){2,}|\b[A-Za-z]:\\[^\s'\"]+")


def without_paths(message: str) -> str:
    """`message` with each absolute file path cut to its last part, for messages that come from
    the engine: a client has no business with the server's file layout."""
    return _ABS_PATH.sub(lambda m: re.split(r"[\\/]", m.group())[-1], message)


@dataclass(frozen=True)
class Defaults:
    """What a request gets for what it does not say."""

    model_id: str
    sampler: SamplerConfig = SamplerConfig()
    spec: SpecConfig = SpecConfig()
    random_seed: bool = True  # a request without a seed gets a random one (else sampler.seed)


@dataclass(frozen=True)
class GenRequest:
    """One validated request, ready for the engine once its prompt is tokenized."""

    chat: bool
    prompt: str | list[int]  # text (chat: already rendered) or token ids (no BOS added to ids)
    sampler: SamplerConfig
    spec: SpecConfig
    max_tokens: int | None  # None = up to the context
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool


def _show(v: Any) -> str:
    """A client's value in an error message, cut short (a body may hold a megabyte of it)."""
    try:
        r = repr(v) if isinstance(v, str) else json.dumps(v)
    except ValueError:  # an int too long to print
        return "a huge integer"
    return r if len(r) <= 40 else r[:37] + "..."


def _number(body: dict, name: str, lo: float, hi: float, integer: bool = False) -> Any:
    """body[name], a JSON number (an integer if `integer`; never a bool, NaN or infinite) in [lo, hi]."""
    v = body[name]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool):
        raise bad(f"'{name}' must be {'an integer' if integer else 'a number'}, got {_show(v)}", name)
    if isinstance(v, float) and not math.isfinite(v):  # 1e400 parses as inf
        raise bad(f"'{name}' must be a finite number, got {_show(v)}", name)
    if not (lo <= v <= hi):
        raise bad(f"'{name}' must be in [{lo}, {hi}], got {_show(v)}", name)
    return v


def _known_fields(body: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise bad(f"unrecognized request field(s): {', '.join(unknown)}", unknown[0])


def _refuse_unsupported(body: dict) -> None:
    if body.get("n") is not None and _number(body, "n", 1, INT_MAX, integer=True) != 1:
        raise bad("n > 1 is not supported: the server decodes one stream per request (send n requests)", "n")
    if body.get("best_of") is not None and _number(body, "best_of", 1, INT_MAX, integer=True) != 1:
        raise bad("best_of is not supported: the server decodes one stream per request", "best_of")
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") is not None:
        raise bad(LOGPROBS, "logprobs")
    if body.get("echo"):
        raise bad("echo is not supported", "echo")
    if body.get("suffix"):
        raise bad("suffix (insertion) is not supported", "suffix")
    if body.get("logit_bias"):
        raise bad("logit_bias is not supported", "logit_bias")
    for name in ("tools", "functions"):
        if body.get(name):
            raise bad("tool and function calling are not supported", name)
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none"):
            raise bad("tool and function calling are not supported", name)
    rf = body.get("response_format")
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") == "text"):
        raise bad("response_format other than {'type': 'text'} is not supported", "response_format")
    if body.get("modalities") not in (None, ["text"]) or body.get("audio") is not None:
        raise bad("only text output is supported", "modalities")


def _stop(body: dict) -> tuple[str, ...]:
    s = body.get("stop")
    if s is None:
        return ()
    stops = [s] if isinstance(s, str) else s
    if not isinstance(stops, list) or not all(isinstance(x, str) for x in stops):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(stops) > 4:
        raise bad(f"'stop' takes at most 4 strings, got {len(stops)}", "stop")
    return tuple(x for x in stops if x)


def _sampler(body: dict, d: Defaults) -> SamplerConfig:
    for alias, name in ALIASES.items():
        if alias in body:
            if name in body and body[name] != body[alias]:
                raise bad(f"'{alias}' and '{name}' are the same setting; give one", alias)
            body = {**body, name: body[alias]}
    over: dict[str, Any] = {}
    for name in SAMPLER_FIELDS:
        if body.get(name) is None:
            continue
        if name == "temperature":  # OpenAI's range, and SamplerConfig's floor above 0
            over[name] = t = float(_number(body, name, 0.0, 2.0))
            if 0 < t < TEMPERATURE[0]:
                raise bad(f"'temperature' must be 0 (greedy) or in [{TEMPERATURE[0]:g}, 2], got {t}", name)
        elif name in ("presence_penalty", "frequency_penalty"):  # OpenAI's range
            over[name] = float(_number(body, name, -2.0, 2.0))
        elif name in ("top_k", "penalty_last_n"):
            over[name] = _number(body, name, -1 if name == "penalty_last_n" else 0, INT_MAX, integer=True)
        else:  # top_p, min_p, repeat_penalty: SamplerConfig's ranges (and its message)
            v = _number(body, name, -math.inf, math.inf)
            over[name] = float(v) if abs(v) < 1e300 else math.inf if v > 0 else -math.inf  # an int past float's
    seed = body.get("seed")
    if seed is not None:
        over["seed"] = _number(body, "seed", -(2**63), 2**64 - 1, integer=True) % 2**63
    elif d.random_seed:
        over["seed"] = random.randrange(2**31)
    try:
        return dataclasses.replace(d.sampler, **over)
    except ConfigError as e:
        raise bad(str(e), next((n for n in over if n.replace("_", "-") in str(e)), None)) from None


def _spec(body: dict, default: SpecConfig) -> SpecConfig:
    over = {k: body[k] for k in SPEC_FIELDS if body.get(k) is not None}
    if "draft" in over and over["draft"] not in DRAFTERS:
        raise bad(f"'draft' must be one of {', '.join(DRAFTERS)}, got {_show(over['draft'])}", "draft")
    if "draft_tokens" in over:
        _number(body, "draft_tokens", 1, 7, integer=True)
    try:
        return dataclasses.replace(default, **over)
    except ConfigError as e:
        raise bad(str(e), next(iter(over), None)) from None


def _max_tokens(body: dict, *names: str) -> int | None:
    for name in names:
        if body.get(name) is not None:
            return _number(body, name, 0, INT_MAX, integer=True)
    return None


def _common(body: Any, allowed: tuple[str, ...], d: Defaults) -> dict:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    _known_fields(body, allowed)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad(f"'model' must be a string, got {_show(model)}", "model")
    if model is not None and model != d.model_id:
        raise APIError(404, f"the model {_show(model)} does not exist; this server serves '{d.model_id}'", "model",
                       "model_not_found")
    _refuse_unsupported(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("'stream' must be true or false", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
        raise bad("'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
    return dict(sampler=_sampler(body, d), spec=_spec(body, d.spec), stop=_stop(body), stream=stream,
                include_usage=bool(stream and opts.get("include_usage")))


def parse_completion(body: Any, d: Defaults) -> GenRequest:
    kw = _common(body, COMPLETION_FIELDS, d)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        prompt: str | list[int] = list(p)
    elif isinstance(p, str) and p:
        prompt = p
    elif isinstance(p, list) and len(p) > 1:
        raise bad("one prompt per request: the server decodes one stream (send one request per prompt)", "prompt")
    else:
        raise bad("'prompt' must be a non-empty string or list of token ids", "prompt")
    mt = _max_tokens(body, "max_tokens")
    return GenRequest(chat=False, prompt=prompt, max_tokens=16 if mt is None else mt, **kw)  # OpenAI's default


def chat_messages(body: dict) -> list[dict[str, str]]:
    """The messages as {role, content: str}: text parts joined; 'developer' is a system message."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object", "messages")
        role = m.get("role")
        role = "system" if role == "developer" else role
        if role not in ("system", "user", "assistant"):
            raise bad(f"messages[{i}]: role {_show(m.get('role'))} is not supported (system, developer, user, "
                      "assistant)", "messages")
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                       for c in content):
                raise bad(f"messages[{i}]: only text content parts are supported", "messages")
            content = "".join(c["text"] for c in content)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise bad(f"messages[{i}]: content must be a string or a list of text parts", "messages")
        out.append({"role": role, "content": content})
    return out


def parse_chat(body: Any, d: Defaults, render) -> GenRequest:
    """render(messages) -> ChatPrompt (the tokenizer's chat_prompt); its stop strings are added."""
    kw = _common(body, CHAT_FIELDS, d)
    try:
        cp = render(chat_messages(body))
    except ConfigError as e:
        raise bad(str(e), "messages") from None
    kw["stop"] = tuple(dict.fromkeys(kw["stop"] + tuple(cp.stop)))
    return GenRequest(chat=True, prompt=cp.text, max_tokens=_max_tokens(body, "max_completion_tokens", "max_tokens"),
                      **kw)


# ---- responses ------------------------------------------------------------------------------------
@dataclass
class Result:
    text: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    finish_reason: str  # stop | length


def usage(r: Result) -> dict:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": r.cached_tokens}}


class Shapes:
    """The bodies of one response: the whole one, or its stream chunks (same id and time)."""

    def __init__(self, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, r: Result) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": r.text}, "logprobs": None,
                      "finish_reason": r.finish_reason}
            return {**self._head("chat.completion"), "choices": [choice], "usage": usage(r)}
        choice = {"index": 0, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason}
        return {**self._head("text_completion"), "choices": [choice], "usage": usage(r)}

    def chunk(self, text: str | None, finish_reason: str | None = None, first: bool = False,
              with_usage: bool = False) -> dict:
        if self.chat:
            delta: dict = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
            out = {**self._head("text_completion"), "choices": [choice]}
        if with_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, r: Result) -> dict:
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [],
                "usage": usage(r)}
