#!/usr/bin/env bash
# Steps of one GPU session (see bench/RESULTS.md). Each device call runs one step:
#   bench/gpu_session.sh recv DIR          copy a carried piece folder into /tmp/gguf
#   bench/gpu_session.sh llama-build       join the llama-cpp-python sdist, build llama-bench (background)
#   bench/gpu_session.sh model             join the model pieces, check sha256
#   bench/gpu_session.sh ours              GPU tests, GEMV bench, decode bench (+ transformers)
#   bench/gpu_session.sh llama             llama-bench tg128 / pp512 with flash attention
#   bench/gpu_session.sh fused             GPU tests of the fused step, decode bench (tile sweep, profile)
#   bench/gpu_session.sh gemv              packed GEMV: head tile sweep (bf16 vs int8 tensor cores), drafter shapes
#   bench/gpu_session.sh draftq            drafter ms/step and acceptance per --draft-quant
#   bench/gpu_session.sh train             A/B head training (KL vs KL + acceptance term) on long rows + own
#                                          replies sampled with the temp-0.6 chain (.carry), in parallel
#   bench/gpu_session.sh accept            MT-Bench acceptance, shipped head vs the A/B candidates
#   bench/gpu_session.sh long              12k-token prompt: sink/window vs unbounded, draft time (DRAFTER=...)
#   bench/gpu_session.sh i8                integer GEMV kernels: CUDA check (+ PTX vs plain nibble split), tile
#                                          sweeps on the head (q8_0 dot_i8w, q4_0/q5_0 dot_i8n) and 8192x8192 (split-K)
#   bench/gpu_session.sh couple            temp-0.6 acceptance with coupled vs argmax drafts, GPU tests
#   bench/gpu_session.sh defaults          GPU GEMV tests; the dispatcher's default tiles on the head and 8192x8192
#   bench/gpu_session.sh ncu               Nsight Compute sections for the GEMV cases in $CASES, SASS of the kernels
#   bench/gpu_session.sh nib               block-pair dot_i8n: tile sweeps at 1-4 rows (head, 8192x8192; q4_0, q5_0)
#   bench/gpu_session.sh final             dot_i8 nibble sweep at 3-4 rows, defaults on every shape, GPU tests of quant/
#   bench/gpu_session.sh q8n               dot_i8n on q8_0: sweep at 1-4 rows (head, 8192x8192), CUDA check of the winners
#   bench/gpu_session.sh nibcheck          head q4_0/q5_0: defaults vs dot_i8; CUDA check of the integer kernels, GPU tests of quant/
#   bench/gpu_session.sh bf16n             dot_bf16n (nibbles as bf16 A operand): CUDA check (+ q8_0 dot_i8n defaults), tile
#                                          sweep at 1-4 rows on the head and 8192x8192 (q4_0, q5_0) beside the defaults
#   bench/gpu_session.sh gputests          GPU tests of quant/
#   bench/gpu_session.sh groups            frag with one vs two mma groups at 1-2 rows (A/B, same tiles, head and
#                                          8192x8192), a frag sweep at 1-4 rows, the defaults on every shape
#                                          (+ frag beside them), the CUDA check of every frag tile, GPU tests of quant/
#   bench/gpu_session.sh defaults5         CUDA check of the default tiles (1-4 rows, every shape); the defaults on every shape
#   bench/gpu_session.sh frag              fragment-layout GEMV: CUDA check of every frag tile, a frag tile sweep at 1 and
#                                          4 rows on the head and 8192x8192 ($TILES to narrow it), the defaults on every shape
#   bench/gpu_session.sh frag8             int8 fragment GEMV (gemv_frag8): CUDA check of every frag8 tile, a sweep of
#                                          $TILES at 1-4 rows on the head and 8192x8192 beside the defaults
#   bench/gpu_session.sh frag8b            frag8's fused split-K sum: CUDA check, A/B against torch.sum with a bitwise
#                                          repeat check, frag8 beside the defaults on 8192x8192 and the drafter shapes
#   bench/gpu_session.sh frag8c            frag8 split up to 32 on 8192x8192 and the drafter shapes; GPU tests of quant/
#   bench/gpu_session.sh frag8d            frag8 two chunks ahead and an L2 prefetch: A/B on 8192x8192, 640x2048, the head
#   bench/gpu_session.sh final8            session 8's frag8 defaults: CUDA check, the defaults on every shape, GPU tests of quant/
#   bench/gpu_session.sh frag8x            x made inside the GEMV: GPU tests of quant/ (frag8x vs frag8 bit for bit), A/B of
#                                          frag8 vs frag8x at the same tiles on every shape at 1-4 rows, the defaults and
#                                          a plain read of the same bytes beside them
#   bench/gpu_session.sh final9            session 9's defaults (frag8x on the drafter shapes) on every shape, cuBLAS and a plain
#                                          read of the same bytes beside them
#   bench/gpu_session.sh dqdecode          end to end: decode bench with MTP k = 3 rows per --draft-quant ($QUANTS), plain and
#                                          n-gram beside them (the model joined first)
#   bench/gpu_session.sh final10           GPU tests of quant/ on the final code; frag8 / frag8x with and without making x's
#                                          words (frag_ab make_x) on the head, 8192x8192 and 640x2048
#   bench/gpu_session.sh frag8xb           frag8x: a tile sweep ($TILES) at 1 and 4 rows on every shape, CUDA check of every tile
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
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/model.gguf" | sha256sum -c - || exit 1 ;;
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
    # the head: every tile of the bf16 and int8 tensor-core variants (q8_0); drafter shapes: default tiles
    timeout 250 python3 bench/gemv_bench.py --shapes 262144x640 --formats q8_0 --kernels dot_bf16x3,dot_i8 --sweep \
      --out "$OUT/gemv_head.json" > "$OUT/gemv_head.txt" 2>&1; grep -A40 "best tile" "$OUT/gemv_head.txt"
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,2048x640,640x2048,1024x640 \
      --kernels dot_bf16x3,dot_i8 --out "$OUT/gemv.json" > "$OUT/gemv.txt" 2>&1; grep -B2 -A30 "^| shape | fmt | M" "$OUT/gemv.txt"
    grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  draftq)
    timeout 300 python3 bench/draft_quant.py --model /tmp/gguf/model.gguf --prompts 5 --max-tokens 96 \
      --out "$OUT/draft_quant.json" 2>&1 | grep -v Warning | tail -25 ;;
  train)
    # A/B in parallel on one GPU, same own-reply rows (same seed), sampled with the temp-0.6 bench chain:
    # A = KL only, B = KL + the sampled-acceptance term
    common="--model /tmp/gguf/model.gguf --device cuda --data .carry/mtp_train.npy --init mtp_turbo/data/gemma3-270m-mtp.gguf
      --steps 100000 --time-budget ${TRAIN_S:-330} --batch 8 --lr 4e-4 --warmup 50 --chain 3 --sink 64 --window 256 --block 256
      --pos-offset 16384 --offset-frac 0.3 --eval-offset 12288 --eval-every 1000 --eval-rows 32 --ckpt-every 0
      --gen-rows 1536 --gen-batch 384 --gen-len 1024 --gen-time ${GEN_S:-100} --gen-frac 0.5 --gen-temps 0,0.6,0.6
      --gen-top-k 40 --gen-top-p 0.95 --gen-min-p 0.05 --gen-repeat-penalty 1.08 --gen-presence-penalty 0.4"
    for v in A B; do
      w=0; [ $v = B ] && w=${ACCEPT_W:-1.0}
      timeout 590 python3 -m mtp_turbo.cli train-mtp $common --accept-weight $w --out "$OUT/mtp-$v.gguf" \
        --ckpt /tmp/mtp-$v.ckpt --history "$OUT/train_history_$v.json" > "$OUT/train_$v.log" 2>&1 &
    done
    wait
    for v in A B; do echo "== $v"; grep -v Warning "$OUT/train_$v.log" | tr '\r' '\n' | grep -v "it/s\]$\|tok/s\]$" | tail -14; done ;;
  accept)
    # shipped head vs the candidates of `train` (copied into .carry/ beforehand)
    timeout 420 python3 bench/accept.py --model /tmp/gguf/model.gguf --device cuda \
      --drafter ${DRAFTERS:-mtp_turbo/data/gemma3-270m-mtp.gguf,.carry/mtp-A.gguf,.carry/mtp-B.gguf} --sets mt_bench --ks 3 \
      --samplers temp0,temp0.6 --prompts 20 --max-tokens 128 --out "$OUT/accept.json" 2>&1 | tail -24 ;;
  long)
    timeout 240 python3 bench/long_prompt.py --model /tmp/gguf/model.gguf --device cuda \
      --drafter ${DRAFTER:-mtp_turbo/data/gemma3-270m-mtp.gguf} --tokens 256 --out "$OUT/long_prompt.json" 2>&1 | tail -20 ;;
  i8)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 170 python3 bench/check_i8_cuda.py 2>&1 | tee "$OUT/check_i8_cuda.txt" | tail -8
    timeout 150 python3 bench/gemv_bench.py --shapes 262144x640 --formats q8_0 --kernels dot_i8w --sweep \
      --out "$OUT/gemv_head_q8.json" > "$OUT/gemv_head_q8.txt" 2>&1; grep -A12 "best tile" "$OUT/gemv_head_q8.txt"
    timeout 150 python3 bench/gemv_bench.py --shapes 262144x640 --formats q4_0,q5_0 --kernels dot_i8,dot_i8n --sweep \
      --out "$OUT/gemv_head_nib.json" > "$OUT/gemv_head_nib.txt" 2>&1; grep -A12 "best tile" "$OUT/gemv_head_nib.txt"
    timeout 110 python3 bench/gemv_bench.py --shapes 8192x8192 --formats q8_0,q4_0 --kernels dot_i8w,dot_i8n --sweep \
      --out "$OUT/gemv_large.json" > "$OUT/gemv_large.txt" 2>&1; grep -A12 "best tile" "$OUT/gemv_large.txt"
    grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  couple)
    timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider --model-path /tmp/gguf/model.gguf 2>&1 | tail -4 | tee "$OUT/pytest_gpu.txt"
    timeout 280 python3 bench/accept.py --model /tmp/gguf/model.gguf --device cuda --sets mt_bench --ks 3 \
      --samplers temp0.6 --prompts 20 --max-tokens 128 --draft-coupling on,off --out "$OUT/accept_coupling.json" 2>&1 | tail -12 ;;
  defaults)
    timeout 240 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels default,dot_i8n \
      --out "$OUT/gemv_defaults.json" > "$OUT/gemv_defaults.txt" 2>&1; grep -A40 "^| shape | fmt | kernel | M" "$OUT/gemv_defaults.txt" | head -64 ;;
  ncu)
    # Nsight Compute on the integer kernels (CASES, as bench/ncu_gemv.py takes them), then the SASS and
    # metadata (registers, shared memory) of every compiled gemv kernel
    nc=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    "$nc" --query-metrics 2>/dev/null | grep -i "pipe_tensor\|imma\|mem_shared\|pipe_alu\|pipe_fma\|inst_executed_pipe" > "$OUT/ncu_metrics.txt"
    timeout 420 "$nc" --clock-control none --profile-from-start off -k regex:'^gemv' --print-details all \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section Occupancy --section LaunchStats --section InstructionStats --section SchedulerStats \
      python3 bench/ncu_gemv.py --cases "$CASES" > "$OUT/ncu.txt" 2>&1; grep "rel err\|Duration\|DRAM Throughput" "$OUT/ncu.txt"
    mkdir -p "$OUT/sass"
    for f in $(find ~/.triton/cache -name 'gemv*.cubin'); do
      d=$(dirname "$f"); b=$(basename "$f" .cubin); h=$(basename "$d" | cut -c1-8)
      cuobjdump --dump-sass "$f" > "$OUT/sass/${b}_$h.sass"; cp "$d/$b.json" "$OUT/sass/${b}_$h.json" 2>/dev/null
    done; ls "$OUT/sass" | wc -l ;;
  frag8)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 170 python3 bench/check_i8_cuda.py --kernels frag8 --no-timing 2>&1 | tee "$OUT/check_frag8.txt" | tail -6
    timeout 330 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels default,frag8 --sweep \
      --sweep-rows 1,2,3,4 --tiles "${TILES:-}" --out "$OUT/frag8_sweep.json" > "$OUT/frag8_sweep.txt" 2>&1
    grep -A60 "best tile" "$OUT/frag8_sweep.txt"; grep -B2 -A30 "^| shape | fmt | kernel | M" "$OUT/frag8_sweep.txt" | head -60
    grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  frag8b)
    # frag8's fused split-K sum: CUDA check of every frag8 tile; A/B fused vs torch.sum (+ bitwise repeat check)
    # on 8192x8192 and the drafter shapes; frag8 sweep beside the defaults and cuBLAS there; GPU tests of quant/
    timeout 150 python3 bench/check_i8_cuda.py --kernels frag8 --no-timing 2>&1 | tee "$OUT/check_frag8.txt" | tail -4
    timeout 150 python3 bench/frag_ab.py --shapes 8192x8192,640x2048,2048x640 --rows 1,4 \
      --tiles "frag8,32,64,2,2,8;frag8,32,64,4,2,8;frag8,32,64,4,2,4" --variants "fuse=0;fuse=1" \
      --out "$OUT/fuse_ab.json" 2>&1 | tee "$OUT/fuse_ab.txt" | grep -v "^  "
    timeout 200 python3 bench/gemv_bench.py --shapes 8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default,frag8 --sweep --sweep-rows 1,4 --tiles "${TILES:-}" --out "$OUT/frag8_small.json" \
      > "$OUT/frag8_small.txt" 2>&1; grep -A40 "best tile" "$OUT/frag8_small.txt"
    timeout 150 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    grep -c "WRONG\|FAILED\|NONDET" "$OUT"/*.txt ;;
  frag8c)
    # frag8 split into up to 32 parts on 8192x8192 and the drafter shapes (1 and 4 rows) beside the defaults; GPU tests of quant/
    timeout 230 python3 bench/gemv_bench.py --shapes 8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default,frag8 --sweep --sweep-rows 1,4 --tiles "${TILES:-}" --out "$OUT/frag8_split.json" \
      > "$OUT/frag8_split.txt" 2>&1; grep -A80 "best tile" "$OUT/frag8_split.txt" | grep "| 1 |\|| 4 |"
    timeout 330 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    grep -c "WRONG\|FAILED\|NONDET" "$OUT"/*.txt ;;
  frag8d)
    # frag8: weights two chunks ahead (num_stages 3) and an L2 prefetch of each warp's range (A/B, bitwise repeat check)
    timeout 200 python3 bench/frag_ab.py --shapes 8192x8192,640x2048 --rows 1,4 \
      --tiles "frag8,32,64,4,2,16;frag8,32,64,4,3,16;frag8,32,64,4,2,8;frag8,32,64,4,3,8" --variants "prefetch=0;prefetch=1" \
      --out "$OUT/ahead_pf_ab.json" 2>&1 | tee "$OUT/ahead_pf_ab.txt" | grep -v "^  "
    timeout 150 python3 bench/frag_ab.py --shapes 262144x640 --rows 1,4 \
      --tiles "frag8,32,64,2,2;frag8,32,64,2,3;frag8,32,64,4,2;frag8,32,64,4,3" --variants "prefetch=0" \
      --out "$OUT/ahead_head.json" 2>&1 | tee "$OUT/ahead_head.txt" | grep -v "^  "
    grep -c "WRONG\|FAILED\|NONDET" "$OUT"/*.txt ;;
  final8)
    # session 8's defaults (frag8): CUDA check of every frag8 tile and the defaults, the table of record on the head,
    # 8192x8192 and the drafter shapes (cuBLAS beside), GPU tests of quant/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 150 python3 bench/check_i8_cuda.py --kernels frag8 --no-timing 2>&1 | tee "$OUT/check_frag8.txt" | tail -3
    timeout 170 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default --out "$OUT/defaults.json" > "$OUT/defaults.txt" 2>&1; grep -A90 "^| shape | fmt | kernel | M" "$OUT/defaults.txt" | head -90
    timeout 330 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    grep -c "WRONG\|FAILED\|NONDET" "$OUT"/*.txt ;;
  frag8x)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 200 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -4 | tee "$OUT/pytest_gpu_quant.txt"
    timeout 340 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default,frag8,frag8x --read-floor --out "$OUT/frag8x_ab.json" > "$OUT/frag8x_ab.txt" 2>&1
    grep -A260 "^| shape | fmt | kernel | M" "$OUT/frag8x_ab.txt" | grep -v "| torch |" | head -200
    grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  final9)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default --read-floor --out "$OUT/defaults.json" > "$OUT/defaults.txt" 2>&1
    grep -A130 "^| shape | fmt | kernel | M" "$OUT/defaults.txt" | head -130; grep -c "WRONG\|FAILED" "$OUT"/defaults.txt ;;
  dqdecode)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 420 python3 bench/decode_bench.py --model /tmp/gguf/model.gguf --skip-hf --ks 3 --mtp-ks 3 \
      --draft-quants "${QUANTS:-bf16,q8_0}" --reps 3 --out "$OUT/decode_dq.json" 2>&1 | grep -v Warning | tee "$OUT/decode_dq.txt" | tail -24 ;;
  final10)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 330 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -4 | tee "$OUT/pytest_gpu_quant.txt"
    timeout 150 python3 bench/frag_ab.py --shapes 262144x640,8192x8192,640x2048 --formats q4_0,q8_0 --rows 1,4 \
      --tiles "frag8,32,64,4,2;frag8,32,64,4,2,16;frag8x,32,64,4,2,16" --variants "make_x=1;make_x=0" \
      --out "$OUT/make_x_ab.json" 2>&1 | grep -v Warning | tee "$OUT/make_x_ab.txt" | tail -40 ;;
  frag8xb)
    timeout 330 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels frag8x --sweep --sweep-rows 1,4 --tiles "${TILES:-}" --out "$OUT/frag8x_sweep.json" > "$OUT/frag8x_sweep.txt" 2>&1
    grep -A60 "best tile" "$OUT/frag8x_sweep.txt"
    timeout 220 python3 bench/check_i8_cuda.py --kernels frag8x --no-timing 2>&1 | tee "$OUT/check_frag8x.txt" | tail -3
    grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  nib)
    # block-pair dot_i8n: every tile at every row count (head + 8192x8192, q4_0/q5_0), the defaults beside it
    timeout 400 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --formats q4_0,q5_0 --kernels default,dot_i8n \
      --sweep --sweep-rows 1,2,3,4 --out "$OUT/gemv_nib.json" > "$OUT/gemv_nib.txt" 2>&1; grep -A40 "best tile" "$OUT/gemv_nib.txt"
    grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  bf16n)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 150 python3 bench/check_i8_cuda.py --no-timing --tiles "${TILES:-dot_i8n,64,128,4,2;dot_i8n,64,128,4,2,8;dot_bf16n,128,128,4,3,1,2;dot_bf16n,128,128,4,2;dot_bf16n,64,128,4,3,4}" \
      2>&1 | tee "$OUT/check_cuda.txt" | grep -v "^  " | tail -6
    timeout ${SWEEP_S:-330} python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --formats q4_0,q5_0 --kernels default,dot_bf16n \
      --sweep --sweep-rows 1,2,3,4 --out "$OUT/gemv_bf16n.json" > "$OUT/gemv_bf16n.txt" 2>&1; grep -A40 "best tile" "$OUT/gemv_bf16n.txt"
    grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  defaults5)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    TILES="dot_i8n,64,128,4,2;dot_i8n,64,128,4,2,8;dot_bf16n,128,128,4,3,1,2;dot_bf16n,128,128,4,2;dot_bf16n,64,128,4,3,4"
    timeout 150 python3 bench/check_i8_cuda.py --no-timing --tiles "$TILES" 2>&1 | tee "$OUT/check_cuda.txt" | grep -v "^  " | tail -4
    timeout 250 python3 bench/gemv_bench.py --kernels default --out "$OUT/gemv_defaults.json" > "$OUT/gemv_defaults.txt" 2>&1
    grep -A80 "^| shape | fmt | kernel | M" "$OUT/gemv_defaults.txt"; grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  frag)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 150 python3 bench/check_i8_cuda.py --no-timing --kernels frag 2>&1 | tee "$OUT/check_frag.txt" | tail -1
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels frag --sweep --sweep-rows 1,4 \
      ${TILES:+--tiles "$TILES"} --out "$OUT/frag_sweep.json" > "$OUT/frag_sweep.txt" 2>&1
    grep -A40 "^best tile per" "$OUT/frag_sweep.txt"
    timeout 200 python3 bench/gemv_bench.py --kernels default --out "$OUT/gemv_defaults.json" > "$OUT/gemv_defaults.txt" 2>&1
    grep -A90 "^best variant" "$OUT/gemv_defaults.txt"; grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  groups)
    # session 7's runs 3, 4, 5 and 16 (bench/RESULTS.md), in one step
    timeout 300 python3 bench/frag_ab.py --rows 1,2 --variants "groups=2;groups=0" \
      --tiles "frag,32,64,2,3;frag,32,64,4,3;frag,32,64,4,3,8;frag,32,64,2,2;frag,32,64,8,2;frag,16,64,4,2,8,8" \
      --out "$OUT/groups_ab.json" > "$OUT/groups_ab.txt" 2>&1; tail -3 "$OUT/groups_ab.txt"
    timeout 500 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels frag --sweep --sweep-rows 1,2,3,4 \
      --tiles "frag,32,64,2,2;frag,32,64,4,2;frag,32,64,8,2;frag,32,64,2,3;frag,32,64,4,3;frag,32,64,4,3,8;frag,16,64,4,2,8,8;frag,16,64,4,2,4,8;frag,16,64,2,2,8,8;frag,32,64,4,2,8" \
      --out "$OUT/frag_sweep.json" > "$OUT/frag_sweep.txt" 2>&1; grep -A30 "^best tile per" "$OUT/frag_sweep.txt"
    timeout 330 python3 bench/gemv_bench.py --kernels default,frag --out "$OUT/gemv_defaults.json" \
      > "$OUT/gemv_defaults.txt" 2>&1; grep -c "WRONG\|FAILED" "$OUT/gemv_defaults.txt"
    timeout 150 python3 bench/check_i8_cuda.py --no-timing --kernels frag > "$OUT/check_frag.txt" 2>&1; tail -1 "$OUT/check_frag.txt"
    timeout 230 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -2 | tee "$OUT/pytest_gpu_quant.txt" ;;
  gputests)
    timeout ${TEST_S:-500} python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/pytest_gpu_quant.txt" ;;
  nibcheck)
    timeout 100 python3 bench/gemv_bench.py --shapes 262144x640 --formats q4_0,q5_0 --kernels default,dot_i8 \
      --out "$OUT/gemv_nib_i8.json" > "$OUT/gemv_nib_i8.txt" 2>&1; grep -A20 "^| shape | fmt | kernel | M" "$OUT/gemv_nib_i8.txt"
    timeout 250 python3 bench/check_i8_cuda.py 2>&1 | tee "$OUT/check_i8_cuda.txt" | grep -v "^  " | tail -6
    timeout 300 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt" ;;
  final)
    # dot_i8 (pair loads) swept at 3-4 rows on the nibble head; the dispatcher's defaults on the drafter
    # shapes, the head and 8192x8192 (cuBLAS bf16 beside); the GPU tests of quant/
    timeout 150 python3 bench/gemv_bench.py --shapes 262144x640 --formats q4_0,q5_0 --kernels dot_i8 --sweep \
      --sweep-rows 3,4 --out "$OUT/gemv_i8_nib.json" > "$OUT/gemv_i8_nib.txt" 2>&1; grep -A10 "best tile" "$OUT/gemv_i8_nib.txt"
    timeout 200 python3 bench/gemv_bench.py --kernels default --out "$OUT/gemv_defaults.json" > "$OUT/gemv_defaults.txt" 2>&1
    grep -A80 "^| shape | fmt | kernel | M" "$OUT/gemv_defaults.txt" | grep "262144\|8192x8192\|^| shape"
    timeout 200 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    grep -c "WRONG\|FAILED" "$OUT"/gemv*.txt ;;
  q8n)
    # dot_i8n on q8_0 (lines as the A operand): every tile at 1-4 rows on the head and 8192x8192, then
    # the CUDA check of each (shape, rows)'s fastest tile on every shape, format and row count
    timeout 140 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --formats q8_0 --kernels dot_i8n --sweep \
      --sweep-rows 1,2,3,4 --out "$OUT/gemv_q8n.json" > "$OUT/gemv_q8n.txt" 2>&1; grep -A10 "best tile" "$OUT/gemv_q8n.txt"
    T=$(python3 -c "import json; r=[x for x in json.load(open('$OUT/gemv_q8n.json'))['rows'] if x['kernel'] == 'dot_i8n' and x['us'] == x['us']]
print(';'.join(sorted({min((x for x in r if (x['shape'], x['M']) == k), key=lambda x: x['us'])['tile'] for k in {(x['shape'], x['M']) for x in r}})))")
    echo "checking: $T"; timeout 90 python3 bench/check_i8_cuda.py --no-timing --tiles "$T" 2>&1 | tee "$OUT/check_q8n.txt" | tail -3 ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
