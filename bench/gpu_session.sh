#!/usr/bin/env bash
# Steps of one GPU session (see bench/RESULTS.md). Each device call runs one step:
#   bench/gpu_session.sh recv DIR          copy a carried piece folder into /tmp/gguf
#   bench/gpu_session.sh llama-build       join the llama-cpp-python sdist, build llama-bench (background)
#   bench/gpu_session.sh model             join the model pieces, check sha256
#   bench/gpu_session.sh ours              GPU tests, GEMV bench, decode bench (+ transformers)
#   bench/gpu_session.sh llama             llama-bench tg128 / pp512 with flash attention
set -uo pipefail
step=$1; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/gguf
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
case $step in
  recv) for d in "$@"; do cp "$d"/* /tmp/gguf/; done; ls -la /tmp/gguf ;;
  llama-build)
    cat /tmp/gguf/llama.* > /tmp/llama.tar.gz && echo "$(cat .pieces/LLAMA_SHA256)  /tmp/llama.tar.gz" | sha256sum -c - || exit 1
    mkdir -p /tmp/llama && tar xzf /tmp/llama.tar.gz -C /tmp/llama
    cd /tmp/llama/llama_cpp_python-*/vendor/llama.cpp || exit 1
    setsid nohup bash -c "cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      -DCMAKE_BUILD_TYPE=Release > /tmp/llama-build.log 2>&1 && cmake --build build -j 12 --target llama-bench \
      >> /tmp/llama-build.log 2>&1; echo BUILD_DONE \$? >> /tmp/llama-build.log" > /dev/null 2>&1 &
    sleep 2; tail -2 /tmp/llama-build.log ;;
  model)
    cat /tmp/gguf/piece.* > /tmp/gguf/model.gguf
    echo "$(cat .pieces/SHA256)  /tmp/gguf/model.gguf" | sha256sum -c - || exit 1 ;;
  ours)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu.txt"
    timeout 200 python3 bench/gemv_bench.py --out "$OUT/gemv.json" > "$OUT/gemv.txt" 2>&1; tail -40 "$OUT/gemv.txt"
    timeout 420 python3 bench/decode_bench.py --model /tmp/gguf/model.gguf --out "$OUT/decode.json" 2>&1 \
      | grep -v Warning | tee "$OUT/decode.txt" | tail -25
    tail -1 /tmp/llama-build.log ;;
  llama)
    tail -1 /tmp/llama-build.log
    b=$(ls -d /tmp/llama/llama_cpp_python-*/vendor/llama.cpp/build/bin)
    "$b/llama-bench" -m /tmp/gguf/model.gguf -p 512 -n 128 -fa 1 -ngl 99 -r 5 -o md 2>&1 | tee "$OUT/llama_bench.md" | tail -8
    "$b/llama-bench" -m /tmp/gguf/model.gguf -p 512 -n 128 -fa 1 -ngl 99 -r 5 -o json > "$OUT/llama_bench.json" 2>/dev/null ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
