#!/usr/bin/env bash
# Time to first token of a one-shot generate on the CPU, ours beside llama.cpp's llama-completion on
# the same file and prompt, alternated RUNS times (each a fresh process: imports, load, prompt, one
# token), after one warm-up run of each (the page cache, the tokenizer's cached model):
#   bench/cpu_ttft.sh LLAMA_BIN_DIR [MODEL]
set -euo pipefail
bin=$1
model=${2:-$(python3 -c 'from mtp_turbo.io.registry import resolve_model; print(resolve_model(None))')}
prompt="The capital of France is"
ours() { mtp-turbo generate "$prompt" -n 1 --temperature 0 --device cpu --model "$model" --no-progress > /dev/null 2>&1; }
theirs() { "$bin/llama-completion" -m "$model" -p "$prompt" -n 1 --temp 0 -t 2 -no-cnv --no-warmup > /dev/null 2>&1 < /dev/null; }
t() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); python3 -c "print(f'{$e - $s:.2f}')"; }
ours; theirs
# Python writes its bytecode (.pyc) as a user's does unless PYTHONDONTWRITEBYTECODE is set (this sandbox
# sets it: every start then compiles the package again, ~0.05 s): say which
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) | $(date -u +%F) | PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
for i in $(seq ${RUNS:-3}); do
  a=$(t ours); b=$(t theirs)
  echo "run $i: mtp-turbo $a s | llama-completion $b s | $(python3 -c "print(f'{$a / $b:.2f}x')")"
done
