#!/usr/bin/env bash
# The CPU figures of the README, as anyone can rerun them on a machine without a GPU:
#   bench/cpu_table.sh [LLAMA_CPP_DIR]
# builds llama.cpp's llama-bench and llama-completion for the CPU (-j 2, about 11 minutes on 2 cores)
# from LLAMA_CPP_DIR (default: the vendor tree of the llama-cpp-python 0.3.36 sdist, fetched with pip
# download into /tmp/llcpu), then runs `mtp-turbo bench --device cpu` on the default model (MT-Bench and
# HumanEval x 8, 64 tokens) with plain, n-gram and MTP decoding at temperature 0 and 0.6 beside
# `llama-bench -t $THREADS` (tg64 / pp64) in the same run. The machine's load average is printed before and after. BUSY=1 keeps one other busy process
# on the cores for the whole run (THREADS=1 then gives llama.cpp its best count there).
set -euo pipefail
THREADS=${THREADS:-2}
src=${1:-}
if [ -z "$src" ]; then
  mkdir -p /tmp/llcpu
  if [ ! -d /tmp/llcpu/llama_cpp_python-0.3.36 ]; then
    python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/llcpu -q
    tar xzf /tmp/llcpu/llama_cpp_python-0.3.36.tar.gz -C /tmp/llcpu
  fi
  src=/tmp/llcpu/llama_cpp_python-0.3.36/vendor/llama.cpp
fi
bin=$src/build-cpu/bin
if [ ! -x "$bin/llama-bench" ]; then
  cmake -S "$src" -B "$src/build-cpu" -G Ninja -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/llcpu-build.log
  cmake --build "$src/build-cpu" -j 2 --target llama-bench llama-completion >> /tmp/llcpu-build.log
fi
busy=""
if [ "${BUSY:-0}" = 1 ]; then  # one other busy process on the cores for the whole run
  python3 -c "while True: pass" & busy=$!
  trap 'kill $busy 2>/dev/null' EXIT
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | $(nproc) cores | $(date -u +%F) | busy process: ${busy:-none}"
# what --draft auto does on the CPU: the MTP head, k = 2, adaptive k (n-gram the same way beside it)
for prompts in mtbench humaneval; do
  peer=(); [ $prompts = mtbench ] && peer=(--llama-bench "$bin/llama-bench" --llama-args "-t $THREADS")
  mtp-turbo bench --device cpu --modes plain,ngram,mtp --temps 0,0.6 --draft-tokens 2 --adaptive --max-tokens 64 \
    --n-prompts 8 --prompts $prompts --pp 64 --no-progress "${peer[@]}" ${BENCH_ARGS:-}
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
