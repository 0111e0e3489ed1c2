#!/usr/bin/env bash
# Steps of one GPU session (see bench/RESULTS.md). Each device call runs one step:
#   bench/gpu_session.sh recv DIR          copy a carried piece folder into /tmp/gguf
#   bench/gpu_session.sh llama-build       join the llama-cpp-python sdist, build llama-bench (background)
#   bench/gpu_session.sh model             join the model pieces, check sha256
#   bench/gpu_session.sh ours              GPU tests, GEMV bench, decode bench (+ transformers)
#   bench/gpu_session.sh llama             llama-bench tg128 / pp512 with flash attention
#   bench/gpu_session.sh fused             GPU tests of the fused step, decode bench (tile sweep, profile)
#   bench/gpu_session.sh gemv              packed GEMV bench (head + drafter shapes) and drafter per quant
#   bench/gpu_session.sh train             warm-started head training on long rows + own replies (.carry)
#   bench/gpu_session.sh accept            MT-Bench acceptance old vs new head, 12k long prompt (new head)
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
  fused)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 240 python3 -m pytest -q -m gpu tests/models -p no:cacheprovider --model-path /tmp/gguf/model.gguf 2>&1 | tail -25 | tee "$OUT/pytest_gpu.txt"
    timeout 400 python3 bench/decode_bench.py --model /tmp/gguf/model.gguf --sweep-tiles --profile --skip-hf \
      --ks 3 --mtp-ks 3 --reps 2 --out "$OUT/decode.json" 2>&1 | grep -v Warning | tee "$OUT/decode.txt" | tail -60
    tail -1 /tmp/llama-build.log ;;
  gemv)
    timeout 240 python3 bench/gemv_bench.py --shapes 262144x640,2048x640,640x2048,1024x640 \
      --out "$OUT/gemv.json" > "$OUT/gemv.txt" 2>&1; tail -45 "$OUT/gemv.txt" ;;
  draftq)
    timeout 300 python3 bench/draft_quant.py --model /tmp/gguf/model.gguf --prompts 5 --max-tokens 96 \
      --out "$OUT/draft_quant.json" 2>&1 | grep -v Warning | tail -25 ;;
  train)
    timeout 560 python3 -m mtp_turbo.cli train-mtp --model /tmp/gguf/model.gguf --device cuda \
      --data .carry/mtp_train.npy --init mtp_turbo/data/gemma3-270m-mtp.gguf --out "$OUT/gemma3-270m-mtp.gguf" \
      --ckpt /tmp/mtp.ckpt --history "$OUT/train_history.json" --steps 100000 --time-budget 330 --batch 8 \
      --lr 5e-4 --warmup 50 --chain 3 --sink 64 --window 256 --block 256 --pos-offset 16384 --offset-frac 0.5 \
      --eval-offset 12288 --eval-every 500 --eval-rows 32 --ckpt-every 0 --gen-rows 768 --gen-batch 384 \
      --gen-time 45 --gen-frac 0.3 --gen-temps 0,0.7 2>&1 | grep -v Warning | tr '\r' '\n' | grep -v "it/s\]$" | tail -40 ;;
  accept)
    timeout 300 python3 bench/accept.py --model /tmp/gguf/model.gguf --device cuda \
      --drafter mtp_turbo/data/gemma3-270m-mtp.gguf,.carry/mtp-new.gguf --sets mt_bench --ks 3 \
      --samplers temp0,temp0.6 --prompts 20 --max-tokens 128 --out "$OUT/accept.json" 2>&1 | tail -20
    timeout 240 python3 bench/long_prompt.py --model /tmp/gguf/model.gguf --device cuda \
      --drafter .carry/mtp-new.gguf --tokens 256 --out "$OUT/long_prompt.json" 2>&1 | tail -20 ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
