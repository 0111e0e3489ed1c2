"""The real server for the server tests: `mtp-turbo serve` in a subprocess on a free port of
127.0.0.1, the default model on the CPU, a small context, an API key; started once per module."""

import os
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

KEY = "test-key-123"


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, model: str, log: list[str]):
        self.proc, self.url, self.model, self.log = proc, url, model, log

    def client(self, key: str | None = KEY, **kw):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=key or "none", max_retries=0, **kw)

    def post(self, path: str, key: str | None = KEY, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(self.url + path, headers=headers, timeout=120, **kw)

    def get(self, path: str, key: str | None = KEY) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(self.url + path, headers=headers, timeout=30)

    def metric(self, name: str) -> float:
        text = self.get("/metrics").text
        m = re.search(rf"^mtp_turbo_{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        assert m, (name, text)
        return float(m.group(1))


def start_server(model_path, *extra: str, timeout: float = 240.0) -> Server:
    cmd = [sys.executable, "-m", "mtp_turbo.cli", "serve", "--port", "0", "--device", "cpu", "--no-progress",
           "--model", str(model_path), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log: list[str] = []
    found = threading.Event()
    where: dict = {}

    def drain():  # keep reading: a full stderr pipe would block the server
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"serving (\S+) on (http://\S+)/v1", line)
            if m:
                where.update(model=m.group(1), url=m.group(2))
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    end = time.monotonic() + timeout
    while not found.is_set():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError("the server did not start:\n" + "".join(log))
        time.sleep(0.1)
    srv = Server(proc, where["url"], where["model"], log)
    while True:  # the banner is printed just before uvicorn starts listening on the bound socket
        try:
            if httpx.get(srv.url + "/health", timeout=2).status_code == 200:
                return srv
        except httpx.TransportError:
            pass
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError("the server does not answer /health:\n" + "".join(log))
        time.sleep(0.1)


def stop_server(srv: Server) -> None:
    srv.proc.terminate()
    try:
        srv.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        srv.proc.kill()


@pytest.fixture(scope="module")
def server(model_path):
    srv = start_server(model_path, "--ctx-size", "128", "--api-key", KEY, "--max-queue", "6", "--max-body", "65536")
    yield srv
    stop_server(srv)
