"""`mtp-turbo generate` through a local `mtp-turbo serve` that already holds the model (as ollama's
command line does): no model load, the first token in milliseconds.

Owns: the discovery files (one per listening server, written by serve, removed on a clean exit),
the facts a server's model card carries for this check (`server_facts`), deciding whether a server
gives exactly what an in-process run would (same model file, every setting fixed at the server's
start equal, the rest sent per request), and the streaming client. Only the standard library:
this path never imports torch, numpy or an HTTP package. Ignores: generation (the server's),
printing and the in-process path (cli.py).

Discovery: $XDG_RUNTIME_DIR/mtp-turbo/ (else $XDG_CACHE_HOME/mtp-turbo/servers/), a folder only
its user can enter; `server-PID.json` holds host, port, pid, host name, the model file (resolved
path, size, mtime) and the API key where serve has one: the file is created 0600, and a file that
others could read (or that another user owns) is not trusted with a key. The key is already on
serve's command line, which every local user can read in /proc; the file adds no reader.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import MtpTurboError

SCHEMA = 1  # of the discovery file and of the card's "mtp_turbo" field
# EngineConfig fields that cannot change the text or speed of a request (all others must match)
ENGINE_FREE = ("model", "progress")
# SpecConfig fields a request sets (protocol.SPEC_FIELDS); the rest are fixed at the server's start
SPEC_PER_REQUEST = ("draft", "draft_tokens")
SAMPLER_PER_REQUEST = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                       "frequency_penalty", "penalty_last_n")
MAX_STOPS = 4  # the API's limit on 'stop' strings
CARD_TIMEOUT_S = 2.0  # a local server that does not answer its model card in this long is not used
READ_TIMEOUT_S = 600.0  # between two stream events (a busy server queues the request)


@dataclass(frozen=True)
class ClientConfig:
    server: bool = True  # stream from a matching local `mtp-turbo serve` when one is running


HELP = {
    "server": "stream from a local `mtp-turbo serve` that holds the same model with the same start-up settings "
    "(no model load here; the same text for the same seed); --no-server always generates in this process",
}


class Unavailable(Exception):
    """This server cannot give what an in-process run would; the message says why (for --stats)."""


# ---- the discovery files (serve's side) -------------------------------------------------------------
def servers_dir() -> Path:
    """Read at each call, so a test's XDG_RUNTIME_DIR is honoured."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and os.path.isdir(run):
        return Path(run) / "mtp-turbo"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp-turbo" / "servers"


def file_identity(path) -> dict | None:
    """A model file as generate and serve both see it without reading it: resolved path, size and
    mtime (hashing 253 MB would cost the client 0.2 s; the server hashed it when it loaded it)."""
    try:
        p = Path(path).resolve()
        st = p.stat()
    except OSError:
        return None
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def connect_host(host: str) -> str:
    """Where a local client reaches a server bound to `host` (a wildcard: the loopback)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def announce(host: str, port: int, api_key: str, model_path) -> Path | None:
    """Write this server's discovery file; None where it cannot be written (then it is simply not
    found: serving goes on)."""
    d = servers_dir()
    info = {"schema": SCHEMA, "host": connect_host(host), "port": port, "pid": os.getpid(),
            "hostname": socket.gethostname(), "model": file_identity(model_path), "key_required": bool(api_key)}
    if api_key:
        info["api_key"] = api_key
    path = d / f"server-{os.getpid()}.json"
    tmp = d / f".server-{os.getpid()}.tmp"
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # 0600 before the key is in it
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def withdraw(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def server_facts(engine, defaults) -> dict | None:
    """The card's "mtp_turbo" field: what generate compares with what it would load itself.
    None for an engine without a configuration (a test's stand-in)."""
    cfg = getattr(engine, "cfg", None)
    if not dataclasses.is_dataclass(cfg):
        return None
    spec = dataclasses.asdict(defaults.spec)
    spec["drafter"] = str(Path(spec["drafter"]).resolve()) if spec.get("drafter") else None
    return {"schema": SCHEMA, "pid": os.getpid(), "model": file_identity(engine.gguf.path),
            "engine": dataclasses.asdict(cfg), "device": str(engine.device), "ctx_size": engine.ctx_size,
            "spec": spec, "order": list(defaults.sampler.order),
            "chat_template": bool(getattr(engine.tokenizer, "chat_template", None))}


# ---- finding a server (generate's side) -------------------------------------------------------------
def model_identity(spec: str | None) -> dict | None:
    """The file `--model` names, as resolve_model finds it but without assembling, hashing or numpy;
    None where only the in-process path can tell (not installed yet, a bad name)."""
    from .io.registry import DEFAULT_MODEL, find_entry, model_path

    if spec:
        p = Path(spec).expanduser()
        if p.is_file():
            return file_identity(p)
    entry = find_entry(str(spec or DEFAULT_MODEL))
    return file_identity(model_path(entry)) if entry is not None else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OSError, OverflowError):
        return False
    return True


def _read_entry(path: Path) -> dict | None:
    """A discovery file's content, its key dropped unless only this user can read the file."""
    try:
        st = path.stat()
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("schema") != SCHEMA or st.st_uid != os.getuid():
        return None
    if st.st_mode & 0o077:
        info.pop("api_key", None)
    return info


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    api_key: str
    model_id: str
    facts: dict

    @property
    def where(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def headers(self) -> dict:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def mismatches(facts: dict, ecfg, sampler, spec) -> list[str]:
    """The settings fixed at the server's start that differ from this run's, as '--flag THEIRS
    (here MINE)'; a value the server resolved (device auto -> cpu, the context capped by the
    model) also counts as the same."""
    out = []
    resolved = {"device": facts.get("device"), "ctx_size": facts.get("ctx_size")}
    theirs_engine = facts.get("engine") or {}
    for f in dataclasses.fields(ecfg):
        if f.name in ENGINE_FREE:
            continue
        mine, theirs = getattr(ecfg, f.name), theirs_engine.get(f.name)
        if mine != theirs and (f.name not in resolved or mine != resolved[f.name]):
            out.append(f"{_flag(f.name)} {theirs} (here {mine})")
    theirs_spec = facts.get("spec") or {}
    mine_spec = dataclasses.asdict(spec)
    mine_spec["drafter"] = str(Path(spec.drafter).resolve()) if spec.drafter else None
    for name, mine in mine_spec.items():
        if name not in SPEC_PER_REQUEST and theirs_spec.get(name) != mine:
            out.append(f"{_flag(name)} {theirs_spec.get(name)} (here {mine})")
    if not spec.draft_tokens and theirs_spec.get("draft_tokens"):  # a request cannot ask for 0 (auto)
        out.append(f"--draft-tokens {theirs_spec['draft_tokens']} (here 0 = auto)")
    if facts.get("order") != list(sampler.order):
        out.append(f"--order {','.join(facts.get('order') or ())} (here {','.join(sampler.order)})")
    return out


def _get_card(host: str, port: int, api_key: str) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=CARD_TIMEOUT_S)
    try:
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise Unavailable(f"the server at {host}:{port} answered /v1/models with HTTP {resp.status}")
        return json.loads(body)["data"][0]
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as e:
        raise Unavailable(f"the server at {host}:{port} did not answer ({type(e).__name__}: {e})") from None
    finally:
        conn.close()


def _check(info: dict, want: dict, ecfg, sampler, spec) -> Server:
    host, port, pid = info.get("host"), info.get("port"), info.get("pid")
    if not (isinstance(host, str) and isinstance(port, int) and isinstance(pid, int)):
        raise Unavailable("a discovery file without host, port and pid")
    where = f"{host}:{port}"
    if info.get("hostname") != socket.gethostname():
        raise Unavailable(f"the server at {where} runs on {info.get('hostname')}")
    if not _alive(pid):
        raise Unavailable(f"the server at {where} is gone (process {pid} has exited; a stale discovery file)")
    if info.get("model") != want:
        raise Unavailable(f"the server at {where} holds another model ({(info.get('model') or {}).get('path')})")
    key = info.get("api_key") or ""
    if info.get("key_required") and not key:
        raise Unavailable(f"the server at {where} needs an API key its discovery file does not give this user")
    card = _get_card(host, port, key)
    facts = card.get("mtp_turbo") if isinstance(card, dict) else None
    if not isinstance(facts, dict) or facts.get("schema") != SCHEMA:
        raise Unavailable(f"the server at {where} does not describe its settings (another version?)")
    if facts.get("pid") != pid or facts.get("model") != want:
        raise Unavailable(f"the server at {where} is not the one its discovery file describes")
    diff = mismatches(facts, ecfg, sampler, spec)
    if diff:
        raise Unavailable(f"the server at {where} runs with {', '.join(diff)}")
    return Server(host, port, key, str(card.get("id")), facts)


def find_server(ecfg, sampler, spec) -> Server:
    """A running local server that gives exactly what generating here would; else Unavailable
    saying why (every server's reason, for --stats)."""
    want = model_identity(ecfg.model)
    if want is None:
        raise Unavailable("the model file is not there yet (it is assembled in-process)")
    try:
        files = sorted(servers_dir().glob("server-*.json"))
    except OSError:
        files = []
    reasons = []
    for path in files:
        info = _read_entry(path)
        if info is None:
            continue
        try:
            return _check(info, want, ecfg, sampler, spec)
        except Unavailable as e:
            reasons.append(str(e))
    raise Unavailable("; ".join(reasons) if reasons else "no local server is running")


# ---- the request ---------------------------------------------------------------------------------------
def request_body(srv: Server, prompt: str, chat: bool, sampler, spec, max_tokens: int, stops) -> dict:
    """Every per-request setting sent explicitly (the server's defaults may differ from this run's)."""
    body: dict = {"model": srv.model_id, "stream": True, "stream_options": {"include_usage": True},
                  "max_tokens": max_tokens, "seed": sampler.seed, "draft": spec.draft}
    body.update({name: getattr(sampler, name) for name in SAMPLER_PER_REQUEST})
    if spec.draft_tokens:
        body["draft_tokens"] = spec.draft_tokens
    if stops:
        body["stop"] = list(stops)
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _error_message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw.decode("utf-8", "replace").strip()[:200]


class Stream:
    """One streamed generation: iterate for the text pieces; then `usage`, `finish_reason`, and
    the client-side times (`first_s`: request to first text, `total_s`: request to the end)."""

    def __init__(self, srv: Server, body: dict, chat: bool):
        self.srv, self.chat = srv, chat
        self.usage: dict = {}
        self.finish_reason = ""
        self.first_s: float | None = None
        self.total_s = 0.0
        self.t0 = time.perf_counter()
        self.conn = http.client.HTTPConnection(srv.host, srv.port, timeout=CARD_TIMEOUT_S)
        try:
            self.conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions",
                              body=json.dumps(body).encode(), headers=srv.headers())
            self.conn.sock.settimeout(READ_TIMEOUT_S)  # the prompt is queued and prefilled before any answer
            self.resp = self.conn.getresponse()
            if self.resp.status != 200:
                raise Unavailable(f"the server at {srv.where} answered HTTP {self.resp.status}: "
                                  f"{_error_message(self.resp.read())}")
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Unavailable(f"the server at {srv.where} failed ({type(e).__name__}: {e})") from None
        except BaseException:
            self.close()
            raise

    def __iter__(self):
        try:
            for raw in self.resp:  # one SSE line at a time, as the chunks arrive
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise MtpTurboError(f"the server at {self.srv.where} failed mid-stream: "
                                        f"{event['error'].get('message')}")
                if event.get("usage"):
                    self.usage = event["usage"]
                for choice in event.get("choices") or ():
                    text = choice.get("delta", {}).get("content") if self.chat else choice.get("text")
                    if text:
                        if self.first_s is None:
                            self.first_s = time.perf_counter() - self.t0
                        yield text
                    if choice.get("finish_reason"):
                        self.finish_reason = choice["finish_reason"]
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise MtpTurboError(f"the server at {self.srv.where} broke off the stream "
                                f"({type(e).__name__}: {e})") from None
        finally:
            self.total_s = time.perf_counter() - self.t0
            self.close()

    def close(self) -> None:
        self.conn.close()  # a stream closed early ends the job on the server (it watches the disconnect)

    def summary(self) -> str:
        n = int(self.usage.get("completion_tokens", 0))
        cached = (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        first = f"{self.first_s * 1e3:.1f} ms" if self.first_s is not None else "none"
        return (f"prompt: {self.usage.get('prompt_tokens', 0)} tokens ({cached} cached) | first text after {first} "
                f"| {n} tokens in {self.total_s * 1e3:.1f} ms ({n / max(self.total_s, 1e-9):.1f} tok/s, measured "
                f"here) | finish: {self.finish_reason or 'none'}")
