"""`mtp-turbo serve`'s own settings (one frozen dataclass; its CLI flags map 1:1 to the fields).
The model, the default sampler chain and the default speculation come from EngineConfig,
SamplerConfig and SpecConfig as for `generate`; a request may override the sampler fields and
`draft` / `draft_tokens`."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"  # loopback only unless told otherwise
    port: int = 8000
    api_key: str = ""  # "" = no key; else every endpoint but /health needs "Authorization: Bearer KEY"
    model_alias: str = ""  # the model id clients name ("" = the GGUF file name without .gguf)
    max_queue: int = 8  # requests waiting or running at once; one more gets 429
    max_body: int = 1 << 20  # bytes of a request body; a larger one gets 413
    read_timeout: float = 15.0  # seconds for a request's headers, and again for its body; a slower client gets 408

    def __post_init__(self) -> None:
        if not (0 <= self.port <= 65535):
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.max_queue < 1:
            raise ConfigError(f"max-queue must be >= 1, got {self.max_queue}")
        if self.max_body < 1024:
            raise ConfigError(f"max-body must be >= 1024 bytes, got {self.max_body}")
        if not (0.1 <= self.read_timeout <= 3600):
            raise ConfigError(f"read-timeout must be in [0.1, 3600] seconds, got {self.read_timeout}")


HELP = {
    "host": "address to bind; the default serves this machine only (0.0.0.0: every interface, then set --api-key)",
    "port": "TCP port (0 = any free port; the one bound is printed)",
    "api_key": "require 'Authorization: Bearer KEY' on every endpoint but /health (401 otherwise); "
    "empty = no key",
    "model_alias": "the model id of /v1/models, which requests must name (default: the GGUF file name without .gguf)",
    "max_queue": "requests waiting or running at once (one engine serves them in arrival order); one more gets 429",
    "max_body": "largest request body in bytes; a larger one gets 413",
    "read_timeout": "seconds a client has to send a request's headers (from connecting, or from its last answer), "
    "and again to send its body; a slower client gets 408 and is disconnected, so a stalled or hostile one cannot "
    "hold a connection open",
}
