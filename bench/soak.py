"""A soak through the server: many seedless requests of mixed temperatures, top-p and draft modes
from concurrent clients, beside the same server's warm figure for each kind of request.

    python bench/soak.py --model PATH [--requests 1000] [--clients 4] [-n 64] [--out FILE.json]

Starts `mtp-turbo serve` on this machine's GPU (a free port), then
  1. reference: for each cell (draft mode x temperature x top-p) `--ref` warm-up requests (not
     counted: a cell's first rounds compile and capture), then one streamed request a prompt with
     one fixed seed, one at a time: the warm per-request decode speed the benchmark measures;
  2. soak: `--requests` streamed requests without a seed, each of a random cell and prompt, from
     `--clients` threads at once; every 50 the server process's GPU memory (nvidia-smi).
A request's decode speed is (completion tokens - 1) / (last text chunk - first text chunk), client
side. Prints per cell the reference and soak medians and their ratio, the share of soak requests
at >= 0.9x the reference of their cell and prompt (at temperature 0 the very same text), failed
requests, and the memory trace.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

MODES = ("none", "mtp", "ngram")
SAMPLERS = ((0.0, 1.0), (0.7, 0.95), (0.7, 1.0), (1.0, 0.95), (1.2, 0.9))


def start(model: str, extra: list[str]) -> tuple[subprocess.Popen, str, list[str]]:
    cmd = [sys.executable, "-m", "mtp_turbo.cli", "serve", "--port", "0", "--no-progress", "--model", model, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log: list[str] = []
    url: list[str] = []

    def drain():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"serving \S+ on (http://\S+)/v1", line)
            if m:
                url.append(m.group(1))

    threading.Thread(target=drain, daemon=True).start()
    end = time.monotonic() + 300
    while time.monotonic() < end and proc.poll() is None:
        if url:
            try:
                if httpx.get(url[0] + "/health", timeout=2).status_code == 200:
                    return proc, url[0], log
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start:\n" + "".join(log[-30:]))


def gpu_mib(pid: int) -> float:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
    except OSError:  # no GPU here (a dry run on the CPU)
        return float("nan")
    for line in out.splitlines():
        p, mib = (x.strip() for x in line.split(","))
        if int(p) == pid:
            return float(mib)
    return float("nan")


def request(client: httpx.Client, url: str, prompt: str, cell: tuple, n: int, seed: int | None) -> dict:
    mode, temp, top_p = cell
    body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "top_p": top_p, "draft": mode, "stream": True,
            "stream_options": {"include_usage": True}}
    if seed is not None:
        body["seed"] = seed
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    with client.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
        if r.status_code != 200:
            return {"cell": cell, "status": r.status_code, "error": r.read().decode()[:200]}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                last = time.perf_counter()
                first = first or last
    tps = (tokens - 1) / (last - first) if first and last and last > first and tokens > 1 else float("nan")
    return {"cell": cell, "status": 200, "tokens": tokens, "tps": tps, "ttft": (first or t0) - t0,
            "wall": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--ref", type=int, default=3, help="warm-up requests a cell before the reference (not counted)")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--server-args", default="", help="more `mtp-turbo serve` flags")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from mtp_turbo.benchmark.config import load_prompts

    prompts = load_prompts("mtbench", 20)
    cells = [(m, t, p) for m in MODES for t, p in SAMPLERS]
    proc, url, log = start(a.model, ["--max-queue", str(4 * a.clients), *a.server_args.split()])
    try:
        client = httpx.Client()
        t = time.perf_counter()
        for cell in cells:  # warm-up, not counted: each cell's first rounds compile and capture
            for i in range(a.ref):
                request(client, url, prompts[i], cell, a.n, seed=1)
        ref: dict[tuple, float] = {}  # (cell, prompt index) -> tok/s with seed 1
        for cell in cells:
            for i, p in enumerate(prompts):
                r = request(client, url, p, cell, a.n, seed=1)
                if r["status"] == 200:
                    ref[cell, i] = r["tps"]
        print(f"reference: {len(cells)} cells x ({a.ref} warm-up + {len(prompts)}) requests in "
              f"{time.perf_counter() - t:.1f} s")
        rng = random.Random(0)
        plan = [(rng.randrange(len(prompts)), cells[rng.randrange(len(cells))]) for _ in range(a.requests)]
        mem = [(0, gpu_mib(proc.pid))]
        done: list[dict] = []
        lock = threading.Lock()

        def one(item):
            with httpx.Client() as c:
                r = request(c, url, prompts[item[0]], item[1], a.n, seed=None)
            r["prompt"] = item[0]
            r["ratio"] = r.get("tps", float("nan")) / ref.get((item[1], item[0]), float("nan"))
            with lock:
                done.append(r)
                if len(done) % 50 == 0:
                    mem.append((len(done), gpu_mib(proc.pid)))
            return r

        t = time.perf_counter()
        with ThreadPoolExecutor(a.clients) as ex:
            list(ex.map(one, plan))
        wall = time.perf_counter() - t
        bad = [r for r in done if r["status"] != 200]
        print(f"soak: {len(done)} requests, {a.clients} clients, {wall:.1f} s; failed: {len(bad)}"
              + (f" (first: {bad[0]})" if bad else ""))
        print(f"{'cell':24s} {'ref tok/s':>10s} {'soak tok/s':>11s} {'ratio':>6s} {'>=0.9x':>7s} {'n':>4s}")
        table = []
        for cell in cells:
            rows = [r for r in done if r["status"] == 200 and r["cell"] == cell and r["tps"] == r["tps"]]
            got = [r["tps"] for r in rows]
            refs = [v for (c, _), v in ref.items() if c == cell and v == v]
            rm = statistics.median(refs) if refs else float("nan")
            sm = statistics.median(got) if got else float("nan")
            share = sum(r["ratio"] >= 0.9 for r in rows) / max(len(rows), 1)  # beside its own prompt's reference
            table.append({"cell": cell, "ref": rm, "soak": sm, "ratio": sm / rm, "share_0.9": share, "n": len(got)})
            print(f"{str(cell):24s} {rm:10.1f} {sm:11.1f} {sm / rm:6.2f} {share:7.0%} {len(got):4d}")
        after = [m for n_, m in mem if n_ >= 50]
        print("GPU memory (MiB) every 50 requests:", [round(m) if m == m else None for _, m in mem])
        if after:
            print(f"after the first 50: {min(after):.0f} .. {max(after):.0f} MiB "
                  f"({(max(after) - min(after)) / min(after):.1%} spread)")
        if a.out:
            json.dump({"ref": {str(k): v for k, v in ref.items()}, "soak": done, "table": table, "memory": mem,
                       "wall_s": wall, "failed": len(bad)}, open(a.out, "w"), default=str)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    tb = [line for line in log if "Traceback" in line]
    print(f"server log: {len(log)} lines, {len(tb)} tracebacks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
