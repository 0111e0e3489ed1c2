"""llama.cpp beside us in the same run: llama-bench (tgN / ppN) and llama-completion (the same
prompts through the same sampler chain), run as subprocesses and parsed. No torch."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import MtpTurboError


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MtpTurboError(f"{Path(cmd[0]).name} failed to run: {e}") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise MtpTurboError(f"{Path(cmd[0]).name} exited with {r.returncode}: {' | '.join(tail)}")
    return r


def parse_llama_bench(text: str) -> dict:
    """llama-bench -o json: {"tg": {n, tps, std}, "pp": {n, tps, std}, "build", "backends", "model_type"}."""
    rows = json.loads(text)
    out: dict = {}
    for r in rows:
        kind = "pp" if r["n_prompt"] and not r["n_gen"] else "tg" if r["n_gen"] and not r["n_prompt"] else None
        if kind:
            n = r["n_prompt"] or r["n_gen"]
            out[kind] = {"n": n, "tps": float(r["avg_ts"]), "std": float(r["stddev_ts"]), "name": f"{kind}{n}"}
        out.update(build=r.get("build_commit"), backends=r.get("backends"), model_type=r.get("model_type"),
                   gpu=r.get("gpu_info") or r.get("cpu_info"))
    if "tg" not in out and "pp" not in out:
        raise MtpTurboError("llama-bench printed no pp or tg result")
    return out


def run_llama_bench(path: str, model: str, pp: int, tg: int, extra: str = "", timeout: float = 3600) -> dict:
    cmd = [path, "-m", model, "-fa", "1", "-p", str(pp or 512), "-n", str(tg), "-o", "json", *shlex.split(extra)]
    return {**parse_llama_bench(_run(cmd, timeout).stdout), "command": shlex.join(cmd)}


_TIME = r"=\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)"


def parse_completion_timings(stderr: str) -> dict:
    """The perf lines llama-completion prints at exit (common_perf_print / llama_perf_context_print):
    prompt eval ms and tokens, eval ms and runs (the decoded tokens after the first)."""
    pe = re.search(r"prompt eval time\s*" + _TIME, stderr)
    ev = re.search(r"(?<!prompt )eval time\s*" + _TIME, stderr)
    if not pe or not ev:
        raise MtpTurboError("llama-completion printed no timings (prompt eval time / eval time lines)")
    return {"prompt_ms": float(pe.group(1)), "prompt_tokens": int(pe.group(2)),
            "eval_ms": float(ev.group(1)), "eval_tokens": int(ev.group(2))}


def completion_args(sampler, temperature: float, max_tokens: int, ignore_eos: bool, ctx: int) -> list[str]:
    """llama-completion's flags for our sampler chain (same stages, same order, same values)."""
    order = ";".join(sampler.order)
    args = ["-n", str(max_tokens), "-c", str(ctx), "-s", str(sampler.seed), "--temp", str(temperature),
            "--top-k", str(sampler.top_k), "--top-p", str(sampler.top_p), "--min-p", str(sampler.min_p),
            "--repeat-penalty", str(sampler.repeat_penalty), "--presence-penalty", str(sampler.presence_penalty),
            "--frequency-penalty", str(sampler.frequency_penalty), "--repeat-last-n", str(sampler.penalty_last_n),
            "--samplers", order, "-no-cnv", "--no-display-prompt", "--simple-io", "--no-escape", "-fa", "on"]
    return args + (["--ignore-eos"] if ignore_eos else [])


def run_llama_completion(path: str, model: str, prompts: list[str], sampler, temperature: float, max_tokens: int,
                         ignore_eos: bool, ctx: int, extra: str = "", timeout: float = 3600) -> dict:
    """Every prompt once through llama-completion: summed decode and prompt speeds."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, prompt in enumerate(prompts):
            f = Path(tmp) / f"prompt{i}.txt"
            f.write_text(prompt, encoding="utf-8")
            cmd = [path, "-m", model, "-f", str(f),
                   *completion_args(sampler, temperature, max_tokens, ignore_eos, ctx), *shlex.split(extra)]
            runs.append(parse_completion_timings(_run(cmd, timeout).stderr))
    ev_ms, ev_n = sum(r["eval_ms"] for r in runs), sum(r["eval_tokens"] for r in runs)
    pr_ms, pr_n = sum(r["prompt_ms"] for r in runs), sum(r["prompt_tokens"] for r in runs)
    return {"decode_tps": ev_n / ev_ms * 1e3 if ev_ms else 0.0, "prompt_tps": pr_n / pr_ms * 1e3 if pr_ms else 0.0,
            "runs": runs, "command": shlex.join(cmd[:4] + ["PROMPT_FILE"] + cmd[5:])}
