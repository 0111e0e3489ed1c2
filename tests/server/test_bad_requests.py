"""A corpus of bad requests against the real `mtp-turbo serve` (CPU, context 128): each answered
4xx in OpenAI's error shape (never 500), the log free of tracebacks, the server serving on.

The corpus is built from tables: bad values of each field (wrong JSON types, bools for numbers,
NaN / Infinity literals, numbers past float64 (1e400 parses as inf), subnormals, out-of-range and
huge integers, lone surrogates) on both endpoints, each endpoint's own fields (prompt shapes,
message shapes), and malformed bodies (not JSON, not UTF-8, deep nesting, wrong content type,
empty, too large), methods, paths and keys. Then the ways a client can leave or stall: a
whole-answer request whose client disconnects is cancelled, a body cut short or never finished, a
head never finished."""

import json
import socket
import time

import httpx
import pytest

from .conftest import KEY, start_server, stop_server

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
NAME = {COMPLETIONS: "completions", CHAT: "chat"}
GOOD = {COMPLETIONS: {"prompt": '"Hi"', "max_tokens": "1"},  # raw JSON text of each field
        CHAT: {"messages": '[{"role": "user", "content": "Hi"}]', "max_tokens": "1"}}
READ_TIMEOUT = 1.0

# raw JSON text of values the API refuses (the body is assembled as text: NaN is no Python JSON value)
NOT_A_NUMBER = ['"1"', "true", "false", "[]", "{}", '{"v": 1}', "NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
NOT_AN_INT = [*NOT_A_NUMBER, "1.5", "1e30", "1.0", "123456789012345678901234567890", "-123456789012345678901234567890"]
SURROGATES = ['"\\ud800"', '"a\\udfffb"', '"\\ud800\\u0041"']
BOTH = {
    "temperature": [*NOT_A_NUMBER, "-0.1", "2.01", "1e-320", "5e-324", "0.0005", "1e300"],
    "top_p": [*NOT_A_NUMBER, "0", "-0.5", "1.01", "1e-400", "1" + "0" * 400],
    "min_p": [*NOT_A_NUMBER, "-0.01", "1.5", "-1e-320"],
    "top_k": [*NOT_AN_INT, "-1", "2147483648"],
    "repeat_penalty": [*NOT_A_NUMBER, "0", "-1", "1e-320", "1000", "-1e400"],
    "repetition_penalty": [*NOT_A_NUMBER, "0", "1e-320", "1e308"],
    "presence_penalty": [*NOT_A_NUMBER, "2.5", "-3", "1e-400e"],
    "frequency_penalty": [*NOT_A_NUMBER, "2.5", "-1e308"],
    "penalty_last_n": [*NOT_AN_INT, "-2"],
    "seed": [*NOT_AN_INT[:-2], "18446744073709551616", "-9223372036854775809"],
    "max_tokens": [*NOT_AN_INT, "-1", "2147483648", "1e20"],
    "n": [*NOT_AN_INT, "0", "2", "-1"],
    "stream": ['"yes"', "1", "0", "[]", "{}", '"true"'],
    "stream_options": ['"x"', "[1]", "5", '{"include_usage": "yes"}', '{"include_usage": 1}'],
    "stop": ["5", "true", '{"a": 1}', "[1]", '["a", 1]', '["a", "b", "c", "d", "e"]', '[["a"]]', '[null]',
             *SURROGATES, '["ok", "\\udc00"]'],
    "model": ["5", "true", "[]", '{"id": "x"}', '"gpt-4"', '""', *SURROGATES[:1]],
    "draft": ["5", "true", "[]", '"magic"', '"MTP"', '""'],
    "draft_tokens": [*NOT_AN_INT, "0", "8", "-1"],
    "logprobs": ["true", "5"],
    "logit_bias": ['{"1": 5}'],
    "tools": ['[{"type": "function"}]'],
    "user": [*SURROGATES[:1], "[" * 40 + "]" * 40],  # ignored fields are still read: Unicode, nesting
    "bogus_field": ["1", "null"],
    "\\ud800": ["1"],  # a lone surrogate as a key
}
OWN = {
    COMPLETIONS: {
        "prompt": ["5", "true", "null", '""', "[]", "[[]]", "[-1]", "[1.5]", "[true]", "[1099511627776]", '["a", "b"]',
                   "[[1], [2]]", '{"text": "hi"}', '[""]', "[262144]", '["hi", 5]', *SURROGATES, '["\\ud800"]',
                   "[" + ", ".join(["2"] * 200) + "]", json.dumps("word " * 200)],
        "echo": ["true"],
        "suffix": ['"x"'],
        "best_of": ["2", "true", "0", '"1"'],
        "messages": ['[{"role": "user", "content": "Hi"}]'],  # the other endpoint's field
        "max_completion_tokens": ["1"],
    },
    CHAT: {
        "messages": ['"hi"', "{}", "[]", "5", "null", "[1]", '["hi"]', "[{}]", "[[]]", '[{"role": "user"}]',
                     '[{"role": "user", "content": "Hi"}, 5]', json.dumps([{"role": "user", "content": "word " * 200}]),
                     *(f'[{{"role": {r}, "content": "x"}}]' for r in ['["user"]', '{"a": 1}', '"tool"', "null", "1",
                                                                      '"user\\ud800"', '"User"']),
                     *(f'[{{"role": "user", "content": {c}}}]' for c in [
                         "5", '["x"]', '{"text": "x"}', '[{"type": "text"}]', '[{"type": "text", "text": 5}]',
                         '[{"type": "image_url", "image_url": {"url": "x"}}]', "[null]", "null", *SURROGATES,
                         '[{"type": "text", "text": "\\udfff"}]'])],
        "max_completion_tokens": [*NOT_AN_INT, "-1", "2147483648"],
        "top_logprobs": ["5"],
        "tool_choice": ['"auto"', '{"type": "function"}'],
        "functions": ['[{"name": "f"}]'],
        "function_call": ['"auto"'],
        "response_format": ['{"type": "json_object"}', '"json"', "5"],
        "modalities": ['["audio"]', '"text"'],
        "audio": ["{}"],
        "prompt": ['"Hi"'],  # the other endpoint's field
        "echo": ["true"],
    },
}


def _body(path: str, field: str, raw: str) -> bytes:
    """A good request of `path` with `field` set to the raw JSON text `raw` (in place of a good field)."""
    parts = [f'"{k}": {v}' for k, v in GOOD[path].items() if k != field] + [f'"{field}": {raw}']
    return ("{" + ", ".join(parts) + "}").encode()


def _field_cases():
    for path in (COMPLETIONS, CHAT):
        for table in (BOTH, OWN[path]):
            for field, values in table.items():
                for v in values:
                    yield pytest.param(path, _body(path, field, v), {}, id=f"{NAME[path]}-{field}-{v[:24]}")


def _bad(name, body, headers=None):
    return name, body, headers or {}


BODIES = [
    _bad("empty", b""), _bad("space", b" "), _bad("open", b"{"), _bad("close", b"}"), _bad("null", b"null"),
    _bad("list", b"[]"), _bad("number", b"1"), _bad("string", b'"x"'), _bad("true", b"true"),
    _bad("empty-object", b"{}"), _bad("trailing-comma", b'{"max_tokens": 1,}'), _bad("single-quotes", b"{'a': 1}"),
    _bad("two-objects", b'{"max_tokens": 1} {"max_tokens": 1}'), _bad("nan", b"NaN"), _bad("comment", b"{/* x */}"),
    _bad("deep-lists", b"[" * 60_000), _bad("deep-objects", b'{"a": ' * 10_000),  # under --max-body 65536
    _bad("deep-valid", b'{"user": ' + b"[" * 500 + b"]" * 500 + b"}"),
    _bad("deep-33", b'{"user": ' + b"[" * 33 + b"]" * 33 + b"}"),
    _bad("utf16", '{"prompt": "Hi", "max_tokens": 1}'.encode("utf-16")),
    _bad("utf8-bom", b'\xef\xbb\xbf{"prompt": "Hi", "max_tokens": 1}'),
    _bad("latin1", b'{"prompt": "caf\xe9", "max_tokens": 1}'),
    _bad("utf8-surrogate-bytes", b'{"prompt": "\xed\xa0\x80", "max_tokens": 1}'),
    _bad("overlong-utf8", b'{"prompt": "\xc0\xaf", "max_tokens": 1}'),
    _bad("long-int", b'{"max_tokens": ' + b"9" * 5000 + b"}"),
    _bad("nul-byte", b'{"prompt": "Hi"\x00}'),
    _bad("text-plain", b'{"prompt": "Hi", "max_tokens": 1}', {"Content-Type": "text/plain"}),
    _bad("form", b"prompt=Hi&max_tokens=1", {"Content-Type": "application/x-www-form-urlencoded"}),
    _bad("multipart", b'{"prompt": "Hi", "max_tokens": 1}', {"Content-Type": "multipart/form-data; boundary=x"}),
    _bad("too-large", b'{"prompt": "' + b"word " * 20_000 + b'"}'),
    _bad("no-key", b'{"prompt": "Hi", "max_tokens": 1}', {"Authorization": ""}),
    _bad("wrong-key", b'{"prompt": "Hi", "max_tokens": 1}', {"Authorization": "Bearer nope"}),
    _bad("key-no-bearer", b'{"prompt": "Hi", "max_tokens": 1}', {"Authorization": KEY}),
]
ROUTES = [("GET", COMPLETIONS), ("PUT", CHAT), ("DELETE", COMPLETIONS), ("PATCH", CHAT), ("POST", "/v1/models"),
          ("POST", "/health"), ("GET", "/v1/nothing"), ("POST", "/v1/completions/x"), ("GET", "/v1/models/gpt-4"),
          ("GET", "/v1/models/%ED%A0%80"), ("POST", "/v1/embeddings"), ("GET", "/v1/../etc/passwd")]

CASES = [*_field_cases(),
         *(pytest.param(path, body, headers, id=f"{NAME[path]}-body-{name}")
           for path in (COMPLETIONS, CHAT) for name, body, headers in BODIES)]


@pytest.fixture(scope="module")
def server(model_path):
    srv = start_server(model_path, "--ctx-size", "128", "--api-key", KEY, "--max-queue", "4", "--max-body", "65536",
                       "--read-timeout", str(READ_TIMEOUT))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


def _is_error_shape(r: httpx.Response) -> dict:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"], err
    assert "Traceback" not in err["message"] and "/root" not in err["message"] and "site-packages" not in r.text
    return err


def test_corpus_is_large():
    assert len(CASES) + len(ROUTES) >= 200, len(CASES)


@pytest.mark.parametrize("path,body,headers", CASES)
def test_bad_request_is_a_4xx_in_openai_shape(http, path, body, headers):
    _is_error_shape(http.post(path, content=body, headers={"Content-Type": "application/json", **headers}))


@pytest.mark.parametrize("method,path", ROUTES)
def test_bad_route_is_a_4xx_in_openai_shape(http, method, path):
    _is_error_shape(http.request(method, path, content=b"{}" if method != "GET" else None))


def _field_error(http, path, field, raw) -> dict:
    r = http.post(path, content=_body(path, field, raw), headers={"Content-Type": "application/json"})
    return _is_error_shape(r)


@pytest.mark.parametrize("field,raw,words", [
    ("temperature", "1e-320", ["temperature", "0 (greedy)", "[0.001, 2]"]),
    ("temperature", "1e400", ["temperature", "finite"]),
    ("repeat_penalty", "1e400", ["repeat_penalty", "finite"]),
    ("repeat_penalty", "1e-320", ["repeat-penalty", "[0.01, 100]"]),
    ("repetition_penalty", "1000", ["repeat-penalty", "[0.01, 100]"]),
    ("top_p", "1e-400", ["top-p", "(0, 1]"]),
    ("top_k", "true", ["top_k", "integer", "true"]),
    ("seed", "1.5", ["seed", "integer"]),
    ("max_tokens", "2147483648", ["max_tokens", "2147483647"]),
    ("n", "0", ["'n'", "[1, 2147483647]"]),
    ("stop", '"\\ud800"', ["'stop'", "lone surrogate", "\\ud800"]),
])
def test_messages_name_the_field_and_the_range(http, field, raw, words):
    err = _field_error(http, COMPLETIONS, field, raw)
    assert err["param"] in (field, "repeat_penalty"), err
    for w in words:
        assert w in err["message"], (w, err)


def test_surrogates_and_nesting_are_400s_that_say_so(http):
    err = _field_error(http, CHAT, "messages", '[{"role": "user", "content": "\\ud800"}]')
    assert err["param"] == "messages" and "lone surrogate" in err["message"]
    r = http.post(COMPLETIONS, content=b"[" * 60_000, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "nests deeper than 32" in r.json()["error"]["message"]
    for lists, status in ((31, 200), (32, 400)):  # the body itself is the first of 32 levels
        r = http.post(COMPLETIONS, content=_body(COMPLETIONS, "user", "[" * lists + "]" * lists),
                      headers={"Content-Type": "application/json"})
        assert r.status_code == status, (lists, r.text)


def test_whole_answer_request_whose_client_leaves_is_cancelled(server, http):
    before = server.metric("cancelled_total")
    assert 'code="499"' not in server.get("/metrics").text
    with pytest.raises(httpx.TimeoutException):  # 120 tokens take a few seconds on the CPU; the client waits 1
        httpx.post(server.url + COMPLETIONS, json={"prompt": "Once upon a time", "max_tokens": 120, "temperature": 0},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=1.0)
    t0 = time.perf_counter()
    r = http.post(COMPLETIONS, json={"prompt": "Hello", "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200 and time.perf_counter() - t0 < 4, time.perf_counter() - t0
    assert server.metric("cancelled_total") == before + 1  # counted when the generation ends: before the answer
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="499"} 1' in server.get("/metrics").text


def _raw(server, data: bytes, close_after: float | None = None) -> tuple[bytes, float]:
    """Send `data` on a new connection; read until the server closes it (or close it ourselves
    after `close_after` s): (reply, seconds)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(data)
        t0, out = time.perf_counter(), b""
        if close_after is not None:
            time.sleep(close_after)
            return out, close_after
        s.settimeout(10)
        while chunk := s.recv(4096):
            out += chunk
        return out, time.perf_counter() - t0


def test_stalled_and_vanishing_clients(server):
    head = f"POST {COMPLETIONS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Length: 100\r\n"
    before = server.get("/metrics").text
    reply, took = _raw(server, head.encode())  # the head never ends
    assert reply.startswith(b"HTTP/1.1 408 ") and took < READ_TIMEOUT + 2, (reply, took)
    reply, took = _raw(server, head.encode() + b'\r\n{"prompt": ')  # the body never ends
    assert reply.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in reply and took < READ_TIMEOUT + 2, reply
    _raw(server, head.encode() + b'\r\n{"prompt": ', close_after=0.2)  # the body is cut short: the client left
    time.sleep(0.3)
    after = server.get("/metrics").text
    assert after.count('code="408"} 1') == 1 and 'code="408"' not in before
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="499"}' in after


def test_no_500_no_traceback_and_still_serving(server, http):
    r = http.post(CHAT, json={"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    m = server.get("/metrics").text
    assert 'code="500"' not in m and 'code="400"' in m
    log = "".join(server.log)
    assert "Traceback" not in log and "Exception in ASGI" not in log and "ERROR" not in log, log[-3000:]
    assert server.proc.poll() is None
