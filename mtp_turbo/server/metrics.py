"""/metrics in the Prometheus text exposition format (version 0.0.4), from the worker's counters."""

from __future__ import annotations

from .worker import Counters

PREFIX = "mtp_turbo_"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(c: Counters, queue_depth: int, queue_capacity: int, model: str) -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, help: str, samples) -> None:
        lines.append(f"# HELP {PREFIX}{name} {help}")
        lines.append(f"# TYPE {PREFIX}{name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
            lines.append(f"{PREFIX}{name}{{{lab}}} {value}" if lab else f"{PREFIX}{name} {value}")

    with c.lock:
        metric("requests_total", "counter", "HTTP responses by path and status code",
               [({"path": p, "code": s}, n) for (p, s), n in sorted(c.responses.items())])
        metric("generations_total", "counter", "generations the engine ran (cancelled ones included)",
               [({"model": model}, c.generations)])
        metric("cancelled_total", "counter", "requests whose client went away before the end",
               [({}, c.cancelled)])
        metric("prompt_tokens_total", "counter", "prompt tokens of the generations", [({}, c.prompt_tokens)])
        metric("prompt_tokens_cached_total", "counter", "prompt tokens reused from the cache (common prefix)",
               [({}, c.prompt_cached)])
        metric("generated_tokens_total", "counter", "tokens generated", [({}, c.gen_tokens)])
        metric("prompt_seconds_total", "counter", "seconds spent prefilling prompts", [({}, f"{c.prompt_s:.6f}")])
        metric("decode_seconds_total", "counter", "seconds spent generating", [({}, f"{c.decode_s:.6f}")])
        uncached = c.prompt_tokens - c.prompt_cached
        metric("prompt_tokens_per_second", "gauge", "prefill speed over all generations (uncached tokens / s)",
               [({}, f"{uncached / c.prompt_s:.3f}" if c.prompt_s > 0 else 0)])
        metric("decode_tokens_per_second", "gauge", "decode speed over all generations",
               [({}, f"{c.gen_tokens / c.decode_s:.3f}" if c.decode_s > 0 else 0)])
        metric("last_decode_tokens_per_second", "gauge", "decode speed of the last generation",
               [({}, f"{c.last_decode_tps:.3f}")])
        metric("spec_rounds_total", "counter", "speculative rounds (draft + verify)", [({}, c.spec_rounds)])
        metric("spec_draft_tokens_total", "counter", "tokens drafted", [({}, c.spec_drafted)])
        metric("spec_accepted_tokens_total", "counter", "drafted tokens accepted by verification",
               [({}, c.spec_accepted)])
        metric("spec_acceptance_ratio", "gauge", "accepted / drafted over all speculative generations",
               [({}, f"{c.spec_accepted / c.spec_drafted:.4f}" if c.spec_drafted else 0)])
        metric("spec_tokens_per_round", "gauge", "tokens emitted per speculative round over all generations",
               [({}, f"{c.spec_emitted / c.spec_rounds:.4f}" if c.spec_rounds else 0)])
    metric("queue_depth", "gauge", "requests waiting or running", [({}, queue_depth)])
    metric("queue_capacity", "gauge", "requests that may wait or run at once (--max-queue)", [({}, queue_capacity)])
    return "\n".join(lines) + "\n"
