"""`mtp-turbo serve`: load the engine once, serve it over HTTP with uvicorn (server/app.py).

The socket is bound before the model loads, so a port in use is reported at once."""

from __future__ import annotations

import signal
import socket
import sys

from ..errors import ConfigError
from .config import HELP, ServeConfig


def add_parser(sub) -> None:
    from ..cli import COMMANDS
    from ..cli import HELP as FIELD_HELP
    from ..cli import add_config_args, engine_config_class
    from ..sampling.config import SamplerConfig
    from ..spec.config import SpecConfig

    p = sub.add_parser(
        "serve", help=COMMANDS["serve"][0],
        description="Serve the model over an OpenAI-compatible HTTP API: GET /v1/models, POST /v1/completions, "
        "POST /v1/chat/completions (streaming as server-sent events), GET /health, GET /metrics (Prometheus). "
        "One engine serves the requests in arrival order. The sampler and speculation flags are the defaults "
        "of requests that do not set them (a request may set temperature, top_p, top_k, min_p, "
        "repeat_penalty / repetition_penalty, presence_penalty, frequency_penalty, penalty_last_n, seed, "
        "draft, draft_tokens).")
    add_config_args(p, ServeConfig, help=HELP)
    add_config_args(p, engine_config_class())
    add_config_args(p, SamplerConfig, help={**FIELD_HELP, "seed": "seed of requests that send none (-1 = a random one "
                                            "per request)"})
    add_config_args(p, SpecConfig)
    p.set_defaults(func=cmd_serve, seed=-1)


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: {e.strerror}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def cmd_serve(args) -> int:
    import uvicorn

    from ..cli import check_drafter, config_from_args, engine_config_class
    from ..client import announce, withdraw
    from ..sampling.config import SamplerConfig
    from ..spec.config import SpecConfig
    from .app import create_app, model_id_of
    from .protocol import Defaults
    from .transport import uvicorn_config

    cfg = config_from_args(ServeConfig, args)
    sampler = config_from_args(SamplerConfig, args, seed=max(args.seed, 0))
    spec = config_from_args(SpecConfig, args)
    ecfg = config_from_args(engine_config_class(), args)
    check_drafter(spec)
    sock = bind(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]

    from ..engine import Engine

    eng = Engine(ecfg)
    if eng.device.type == "cuda":  # the default request's device programs compiled and captured now,
        for _ in eng.generate("Hello", sampler=sampler, max_tokens=8, spec=spec):  # not in a client's wait
            pass
        eng.reset()
    d = Defaults(model_id_of(eng, cfg), sampler, spec, random_seed=args.seed < 0)
    app = create_app(eng, cfg, d)
    where = f"[{host}]" if ":" in host else host
    print(f"mtp-turbo: serving {d.model_id} on http://{where}:{port}/v1 (device {eng.device}, context {eng.ctx_size}, "
          f"draft {spec.draft}{', API key required' if cfg.api_key else ''})", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn_config(app, cfg, log_level="info", timeout_graceful_shutdown=5))
    # `mtp-turbo generate` finds this server by this file (client.py); uvicorn ends on SIGTERM by
    # raising it again after its shutdown: a handler that returns lets the file go first
    found_by = announce(host, port, cfg.api_key, eng.gguf.path)
    term = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        withdraw(found_by)
        signal.signal(signal.SIGTERM, term)
    return 0
