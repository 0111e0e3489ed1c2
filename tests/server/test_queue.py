"""The server's scheduling on a scripted engine (no model: fast and exact about timing): arrival
order, 429 when the queue is full, a disconnect ends the generation at once (streamed or not), a
request whose client left while it waited never runs and gives its place back at once, engine
errors answered (400 for the user's, 500 for a bug, no server paths in either) with the server
serving on and /metrics counting the codes sent, the deadlines on a request's head and body; and
the parts with no HTTP at all (stop strings, metrics text)."""

import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import uvicorn

from mtp_turbo.errors import ConfigError, ModelFileError
from mtp_turbo.io.tokenizer import ChatPrompt
from mtp_turbo.server.app import create_app
from mtp_turbo.server.config import ServeConfig
from mtp_turbo.server.stops import StopStrings
from mtp_turbo.server.transport import uvicorn_config


@dataclass(frozen=True)
class Piece:
    text: str
    token_ids: tuple


def encode(text: str) -> list[int]:
    if text.startswith("crash"):  # a bug outside the engine's thread
        raise RuntimeError("tokenizer bug in /srv/secret/tokenizer.py")
    return [1] + list(text.encode())


class ScriptedEngine:
    """Emits one letter per token of the prompt text ("a" * n -> n tokens), `delay` s each; a
    prompt starting "raise" raises (and "crash" in the tokenizer); records what ran and whether
    the generator was closed."""

    ctx_size = 64

    def __init__(self, delay: float):
        self.delay = delay
        self.ran: list[str] = []
        self.closed: list[tuple[str, int]] = []  # (prompt, tokens emitted) at close
        self.gate = threading.Event()
        self.gate.set()
        self.gguf = SimpleNamespace(path=Path("scripted.gguf"))
        self.tokenizer = SimpleNamespace(vocab_size=256, encode=encode,
                                         chat_prompt=lambda msgs: ChatPrompt(msgs[-1]["content"], (), "plain"))
        self.last_stats = None

    def generate(self, ids, sampler, max_tokens, spec, special):
        prompt = bytes(ids[1:]).decode()
        self.ran.append(prompt)
        if prompt.startswith("raise user"):
            raise ConfigError("a problem the user can fix")
        if prompt.startswith("raise path"):
            raise ModelFileError("MTP head file /opt/site/mtp_turbo/heads/head.gguf does not exist")
        if prompt.startswith("raise"):
            raise RuntimeError("a bug")
        n = 0
        try:
            self.gate.wait()
            for n in range(1, max_tokens + 1):
                time.sleep(self.delay)
                yield Piece(chr(96 + n % 26 + 1), (n,))
        finally:
            self.closed.append((prompt, n))
            self.last_stats = SimpleNamespace(prompt_tokens=len(ids), prompt_cached=0, prompt_s=0.001, gen_tokens=n,
                                              decode_s=0.01, finish_reason="length", spec=None, decode_tps=n / 0.01,
                                              prompt_tps=len(ids) / 0.001)


@pytest.fixture
def serve():
    servers = []

    def start(delay=0.001, **cfg):
        eng = ScriptedEngine(delay)
        sc = ServeConfig(port=0, **cfg)
        server = uvicorn.Server(uvicorn_config(create_app(eng, sc), sc, host="127.0.0.1", port=0, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        servers.append(server)
        return eng, f"http://127.0.0.1:{port}"

    yield start
    for s in servers:
        s.should_exit = True


def post(url, prompt, max_tokens=3, timeout=30, **kw):
    return httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, **kw}, timeout=timeout)


def test_requests_run_in_arrival_order(serve):
    eng, url = serve()
    eng.gate.clear()  # the first request holds the engine until every other one is queued
    out = {}
    threads = []
    for name in ("first", "second", "third", "fourth"):
        t = threading.Thread(target=lambda n=name: out.__setitem__(n, post(url, n)))
        t.start()
        threads.append(t)
        time.sleep(0.15)
    eng.gate.set()
    for t in threads:
        t.join()
    assert eng.ran == ["first", "second", "third", "fourth"]
    assert all(r.status_code == 200 and r.json()["choices"][0]["text"] == "bcd" for r in out.values())


def test_full_queue_gets_429_then_serves_again(serve):
    eng, url = serve(max_queue=2)
    eng.gate.clear()
    held = [threading.Thread(target=post, args=(url, f"held {i}")) for i in range(2)]
    for t in held:
        t.start()
    time.sleep(0.3)
    r = post(url, "one too many")
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full" and "max-queue" in r.text
    eng.gate.set()
    for t in held:
        t.join()
    assert "one too many" not in eng.ran and post(url, "again").status_code == 200


def test_disconnect_mid_stream_closes_the_generation(serve):
    eng, url = serve(delay=0.02)
    with httpx.stream("POST", url + "/v1/completions", json={"prompt": "long", "max_tokens": 60, "stream": True},
                      timeout=30) as s:
        lines = [line for _, line in zip(range(6), s.iter_lines())]
    assert sum(line.startswith("data: ") for line in lines) == 3
    t0 = time.perf_counter()
    while not eng.closed and time.perf_counter() - t0 < 5:
        time.sleep(0.005)
    assert eng.closed and eng.closed[0][0] == "long" and eng.closed[0][1] < 10  # of 60: ended at once
    assert time.perf_counter() - t0 < 0.5


def test_request_abandoned_while_waiting_never_runs(serve):
    eng, url = serve()
    eng.gate.clear()
    holder = threading.Thread(target=post, args=(url, "holder"))
    holder.start()
    time.sleep(0.2)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + "/v1/completions", json={"prompt": "impatient"}, timeout=0.5)
    time.sleep(0.5)  # the server notices the closed connection while the job waits
    eng.gate.set()
    holder.join()
    assert post(url, "later").status_code == 200
    assert eng.ran == ["holder", "later"]


def test_engine_errors_are_answered_and_the_server_lives(serve):
    eng, url = serve()
    r = post(url, "raise user")
    assert r.status_code == 400 and r.json()["error"]["message"] == "a problem the user can fix"
    r = post(url, "raise bug")
    assert r.status_code == 500 and "RuntimeError: a bug" in r.json()["error"]["message"]
    r = post(url, "fine", stream=True)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    m = httpx.get(url + "/metrics").text
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="500"} 1' in m
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="400"} 1' in m
    assert "mtp_turbo_generated_tokens_total 3" in m and "mtp_turbo_queue_depth 0" in m


def test_disconnect_while_waiting_for_a_whole_answer_closes_the_generation(serve):
    eng, url = serve(delay=0.02)
    with pytest.raises(httpx.TimeoutException):  # 60 tokens take 1.2 s; the client leaves after 0.3
        post(url, "long", max_tokens=60, timeout=0.3)
    t0 = time.perf_counter()
    while not eng.closed and time.perf_counter() - t0 < 5:
        time.sleep(0.005)
    assert eng.closed and eng.closed[0][0] == "long" and eng.closed[0][1] < 30, eng.closed
    m = httpx.get(url + "/metrics").text
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="499"} 1' in m and "mtp_turbo_cancelled_total 1" in m
    assert post(url, "after").json()["choices"][0]["text"] == "bcd"


def test_request_abandoned_while_waiting_gives_its_place_back_at_once(serve):
    eng, url = serve(max_queue=2)
    eng.gate.clear()
    holder = threading.Thread(target=post, args=(url, "holder"))
    holder.start()
    time.sleep(0.2)
    with pytest.raises(httpx.TimeoutException):
        post(url, "impatient", timeout=0.3)
    time.sleep(0.2)  # the engine is still held: only the disconnect can have freed the place
    assert httpx.get(url + "/health").json()["queue"] == 1
    out = {}
    third = threading.Thread(target=lambda: out.setdefault("r", post(url, "third")))
    third.start()
    time.sleep(0.2)
    assert httpx.get(url + "/health").json()["queue"] == 2 and not out  # admitted (no 429), waiting
    eng.gate.set()
    holder.join()
    third.join()
    assert out["r"].status_code == 200 and eng.ran == ["holder", "third"]
    assert "mtp_turbo_cancelled_total 1" in httpx.get(url + "/metrics").text


def test_a_bug_outside_the_engine_is_a_counted_500_without_paths(serve):
    eng, url = serve()
    r = post(url, "crash now")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "RuntimeError" in r.json()["error"]["message"] and "/srv" not in r.text and "tokenizer.py" in r.text
    r = post(url, "raise path")
    assert r.status_code == 400 and r.json()["error"]["message"] == "MTP head file head.gguf does not exist"
    assert post(url, "fine").status_code == 200
    m = httpx.get(url + "/metrics").text
    assert 'mtp_turbo_requests_total{path="/v1/completions",code="500"} 1' in m
    assert 'code="499"' not in m and 'code="200"} 1' in m


def _raw(url: str, data: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    """Send `data` on a new connection and read until the server closes it: (reply, seconds)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(data)
        s.settimeout(wait)
        t0, out = time.perf_counter(), b""
        while chunk := s.recv(4096):
            out += chunk
        return out, time.perf_counter() - t0


def test_slow_clients_get_408_and_are_disconnected(serve):
    eng, url = serve(read_timeout=0.5)
    reply, took = _raw(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app")  # a partial head
    assert reply.startswith(b"HTTP/1.1 408 ") and 0.4 < took < 2, (reply, took)
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    reply, took = _raw(url, b"")  # connected, and silent
    assert reply == b"" and 0.4 < took < 2, (reply, took)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    reply, took = _raw(url, head + b'{"prompt": ')  # a body that stops coming
    assert reply.startswith(b"HTTP/1.1 408 ") and b"--read-timeout" in reply and took < 2, reply
    # between requests on one connection, the deadline starts again from the last answer
    body = b'{"prompt": "a", "max_tokens": 1}'
    reply, took = _raw(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body))
    assert reply.startswith(b"HTTP/1.1 200 ") and 0.4 < took < 2 and eng.ran == ["a"], reply
    assert post(url, "fine").status_code == 200


def test_stream_of_text_pieces_with_stop_strings():
    s = StopStrings(["END", "xyz"])
    fed = [s.feed(t) for t in ["ab", "cE", "N", "x", "yq E", "ND more", "ignored"]]
    assert fed == ["ab", "c", "", "EN", "xyq ", "", ""] and s.hit == "END" and s.flush() == ""
    s = StopStrings(["aab"])
    assert [s.feed(c) for c in "aaab"] == ["", "", "a", ""] and s.hit == "aab"
    s = StopStrings(["\nUser:"])
    assert s.feed("Paris.\nUs") == "Paris." and s.flush() == "\nUs" and s.hit is None
    assert StopStrings().feed("anything") == "anything"
