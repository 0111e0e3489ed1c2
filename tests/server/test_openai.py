"""`mtp-turbo serve` driven by the official openai client: every endpoint, streaming, usage, stop
strings, same seed -> same text, bad requests (4xx in OpenAI's error shape, the server alive after),
the API key, a client that disconnects mid-stream, and a bounded soak. The real model on the CPU,
a context of 128 tokens, a few tokens per request."""

import json
import threading
import time

import httpx
import openai
import pytest

from .conftest import KEY


def test_models_and_health(server):
    c = server.client()
    models = c.models.list().data
    assert [m.id for m in models] == [server.model] and server.model == "gemma-3-270m-q4_k_m"
    assert c.models.retrieve(server.model).id == server.model
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("gpt-4")
    h = server.get("/health", key=None)
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["queue_capacity"] == 6


def test_completion_whole_and_streamed(server):
    c = server.client()
    prompt = "The capital of France is"
    r = c.completions.create(model=server.model, prompt=prompt, max_tokens=4, temperature=0)
    text = r.choices[0].text
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and text.strip()
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens == 6 and r.usage.total_tokens == 10  # <bos> + 5 words
    chunks = list(c.completions.create(model=server.model, prompt=prompt, max_tokens=4, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == text
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    # the prompt was seen before: its prefix came from the cache
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 5


def test_chat_whole_and_streamed(server):
    c = server.client()
    msgs = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}]
    r = c.chat.completions.create(model=server.model, messages=msgs, max_tokens=8, temperature=0)
    m = r.choices[0].message
    assert r.object == "chat.completion" and m.role == "assistant" and "Paris" in m.content
    assert "User:" not in m.content  # the plain-text rendering's stop string ended the turn
    parts = list(c.chat.completions.create(model=server.model, messages=msgs, max_tokens=8, temperature=0,
                                           stream=True))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == m.content
    assert parts[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_same_seed_same_text(server):
    c = server.client()

    def sample(seed, **kw):
        return c.completions.create(model=server.model, prompt="Once upon a time", max_tokens=6, temperature=1.2,
                                    top_p=1.0, seed=seed, extra_body={"top_k": 0, "min_p": 0.0, **kw}).choices[0].text

    a = sample(7)
    assert sample(7) == a
    assert sample(7, draft="ngram", draft_tokens=2) == a  # speculation does not change the text
    assert len({a, sample(8), sample(9), sample(10)}) > 1


def test_stop_strings(server):
    c = server.client()
    r = c.completions.create(model=server.model, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    assert r.choices[0].text.startswith(" 5, 6, 7")
    r = c.completions.create(model=server.model, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[" 7", "xyz"])
    assert r.choices[0].text == " 5, 6," and r.choices[0].finish_reason == "stop"


def test_max_tokens_capped_by_context(server):
    c = server.client()
    prompt = "one two three four five six seven eight nine ten " * 11  # 112 tokens with <bos>
    r = c.completions.create(model=server.model, prompt=prompt, max_tokens=10_000, temperature=0)
    assert r.usage.prompt_tokens == 112 and r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.total_tokens == 128 if r.choices[0].finish_reason == "length" else r.usage.total_tokens < 128


def _error(resp: httpx.Response, status: int, *words: str, param=None, code=None):
    assert resp.status_code == status, (resp.status_code, resp.text)
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"]
    for w in words:
        assert w in err["message"], (w, err)
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err


@pytest.mark.parametrize("body,status,words,param", [
    ({"prompt": "x", "temperature": 3}, 400, ["temperature", "[0.0, 2.0]"], "temperature"),
    ({"prompt": "x", "top_p": 0}, 400, ["top-p"], "top_p"),
    ({"prompt": "x", "top_k": -5}, 400, ["top_k"], "top_k"),
    ({"prompt": "x", "presence_penalty": 9}, 400, ["presence_penalty"], "presence_penalty"),
    ({"prompt": "x", "max_tokens": -1}, 400, ["max_tokens"], "max_tokens"),
    ({"prompt": "x", "max_tokens": "many"}, 400, ["max_tokens", "integer"], "max_tokens"),
    ({"prompt": "x", "n": 2}, 400, ["n > 1"], "n"),
    ({"prompt": "x", "logprobs": 2}, 400, ["logprobs", "exact"], "logprobs"),
    ({"prompt": "x", "draft": "magic"}, 400, ["draft"], "draft"),
    ({"prompt": "x", "draft_tokens": 0}, 400, ["draft_tokens"], "draft_tokens"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, ["at most 4"], "stop"),
    ({"prompt": "x", "bogus_field": 1}, 400, ["bogus_field"], "bogus_field"),
    ({"prompt": ""}, 400, ["prompt"], "prompt"),
    ({"prompt": ["a", "b"]}, 400, ["one prompt per request"], "prompt"),
    ({"prompt": [1, 2, 999_999_999]}, 400, ["token ids"], "prompt"),
    ({"prompt": "x", "stream": "yes"}, 400, ["stream"], "stream"),
    ({"prompt": "x", "model": "gpt-4"}, 404, ["gpt-4", "does not exist"], "model"),
])
def test_bad_completion_requests(server, body, status, words, param):
    _error(server.post("/v1/completions", json=body), status, *words, param=param)


@pytest.mark.parametrize("body,status,words", [
    ({"messages": []}, 400, ["messages"]),
    ({"messages": [{"role": "tool", "content": "x"}]}, 400, ["role 'tool'"]),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     ["text content"]),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, 400, ["logprobs"]),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, 400, ["tool"]),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, 400,
     ["response_format"]),
])
def test_bad_chat_requests(server, body, status, words):
    _error(server.post("/v1/chat/completions", json=body), status, *words)


def test_bad_bodies_and_routes(server):
    _error(server.post("/v1/completions", content=b"{not json"), 400, "not valid JSON")
    _error(server.post("/v1/completions", content=b'{"prompt": "x", "temperature": NaN}'), 400, "NaN")
    _error(server.post("/v1/completions", content=b'["a list"]'), 400, "JSON object")
    big = json.dumps({"prompt": "word " * 20_000}).encode()
    _error(server.post("/v1/completions", content=big), 413, "65536", code="request_too_large")
    _error(server.post("/v1/completions", json={"prompt": "word " * 200}), 400, "context holds 128", param="prompt",
           code="context_length_exceeded")
    _error(server.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "word " * 200}]}), 400,
           "context holds 128", param="messages", code="context_length_exceeded")
    _error(server.get("/v1/completions"), 405, "GET")
    _error(server.get("/v1/nothing-here"), 404, "no such endpoint")
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        server.client().completions.create(model=server.model, prompt="x", logprobs=1)
    assert server.get("/health").json()["status"] == "ok"
    assert server.metric("requests_total", ) >= 1


def test_api_key(server):
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").models.list()
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").completions.create(model=server.model, prompt="x", max_tokens=1)
    _error(server.get("/v1/models", key=None), 401, "missing API key", code="invalid_api_key")
    _error(server.get("/metrics", key=None), 401)
    _error(server.post("/v1/chat/completions", key=None, json={"messages": []}), 401)
    assert server.get("/health", key=None).status_code == 200  # the one open endpoint
    assert server.client(key=KEY).models.list().data


def test_disconnect_mid_stream_frees_the_engine(server):
    before = server.metric("cancelled_total")
    body = {"model": server.model, "prompt": "Once upon a time", "max_tokens": 100, "temperature": 0.8, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as s:
        got = [line for _, line in zip(range(6), s.iter_lines()) if line.startswith("data: ")]
    assert len(got) >= 3  # a few tokens arrived, then the client hung up (97 tokens: ~15 s more)
    t0 = time.perf_counter()
    r = server.client().completions.create(model=server.model, prompt="Hello", max_tokens=2, temperature=0)
    waited = time.perf_counter() - t0
    assert r.usage.completion_tokens == 2 and waited < 8, waited
    assert server.metric("cancelled_total") == before + 1
    assert server.metric("queue_depth") == 0


def test_soak(server):
    """4 clients x 25 requests (completions and chats, whole and streamed): every one answered."""
    before = server.metric("generations_total")
    errors: list = []
    answered = [0] * 4

    def client(i: int) -> None:
        c = server.client()
        for j in range(25):
            try:
                kind = (i + j) % 4
                if kind == 0:
                    r = c.completions.create(model=server.model, prompt=f"Number {i} {j}:", max_tokens=1, temperature=0)
                    ok = r.usage.completion_tokens == 1
                elif kind == 1:
                    r = c.chat.completions.create(model=server.model, max_tokens=1, seed=j,
                                                  messages=[{"role": "user", "content": f"Say {j}"}])
                    ok = r.choices[0].message.role == "assistant"
                else:
                    parts = list(c.completions.create(model=server.model, prompt=f"Client {i} says", max_tokens=2,
                                                      stream=True, seed=j, stream_options={"include_usage": True}))
                    ok = parts[-1].usage.completion_tokens <= 2
                answered[i] += ok
            except Exception as e:  # noqa: BLE001 - every failure is reported below
                errors.append(f"client {i} request {j}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=170)
    assert not errors, errors[:5]
    assert answered == [25] * 4
    assert server.get("/health").json() == {"status": "ok", "queue": 0, "queue_capacity": 6}
    assert server.metric("generations_total") == before + 100
    assert server.proc.poll() is None
