#!/usr/bin/env bash
# Steps of one GPU session (see bench/RESULTS.md). Each device call runs one step:
#   bench/gpu_session.sh recv DIR          copy a carried piece folder into /tmp/gguf
#   bench/gpu_session.sh llama-build       join the llama-cpp-python sdist, build llama-bench (background)
#   bench/gpu_session.sh model             join the model pieces, check sha256
#   bench/gpu_session.sh ours              GPU tests, GEMV bench, decode bench (+ transformers)
#   bench/gpu_session.sh llama             llama-bench tg128 / pp512 with flash attention
#   bench/gpu_session.sh fused             GPU tests of the fused step, decode bench (tile sweep, profile)
#   bench/gpu_session.sh gemv              packed GEMV: head tile sweep (bf16 vs int8 tensor cores), drafter shapes
#                                          (the portable kernels, the defaults before Hopper)
#   bench/gpu_session.sh draftq            drafter ms/step and acceptance per --draft-quant
#   bench/gpu_session.sh train             A/B head training (KL vs KL + acceptance term) on long rows + own
#                                          replies sampled with the temp-0.6 chain (.carry), in parallel
#   bench/gpu_session.sh accept            MT-Bench acceptance, shipped head vs the A/B candidates
#   bench/gpu_session.sh long              12k-token prompt: sink/window vs unbounded, draft time (DRAFTER=...)
#   bench/gpu_session.sh couple            temp-0.6 acceptance with coupled vs argmax drafts, GPU tests
#   bench/gpu_session.sh defaults          GPU GEMV tests; the dispatcher's default tiles on the head and 8192x8192
#   bench/gpu_session.sh ncu               Nsight Compute sections for the GEMV cases in $CASES, SASS of the kernels
#   bench/gpu_session.sh gputests          GPU tests of quant/
#   bench/gpu_session.sh frag8             int8 fragment GEMV (frag8_gemv): CUDA check of every frag8 tile, a sweep of
#                                          $TILES at 1-4 rows on the head and 8192x8192 beside the defaults
#   bench/gpu_session.sh frag8c            frag8 split up to 32 on 8192x8192 and the drafter shapes; GPU tests of quant/
#   bench/gpu_session.sh final8            session 8's frag8 defaults: CUDA check, the defaults on every shape, GPU tests of quant/
#   bench/gpu_session.sh frag8x            x made inside the GEMV: GPU tests of quant/ (frag8x vs frag8 bit for bit), A/B of
#                                          frag8 vs frag8x at the same tiles on every shape at 1-4 rows, the defaults and
#                                          a plain read of the same bytes beside them
#   bench/gpu_session.sh final9            session 9's defaults (frag8x on the drafter shapes) on every shape, cuBLAS and a plain
#                                          read of the same bytes beside them
#   bench/gpu_session.sh dqdecode          end to end: decode bench with MTP k = 3 rows per --draft-quant ($QUANTS), plain and
#                                          n-gram beside them (the model joined first)
#   bench/gpu_session.sh frag8xb           frag8x: a tile sweep ($TILES) at 1 and 4 rows on every shape, CUDA check of every tile
#
# Session 10 (one lease, back-to-back calls while the machine is warm; background jobs keep running):
#   bench/gpu_session.sh s10-start         .carry/llama.tar.gz -> build llama-bench + llama-completion (background);
#                                          GPU tests that need no model (quant, sampling) in the background; piece p0
#   bench/gpu_session.sh s10-recv N        copy piece N; show the background jobs' progress
#   bench/gpu_session.sh s10-tests         join + check the model; every other GPU test (foreground); prints all logs
#   bench/gpu_session.sh s10-bench         mtp-turbo bench, k = 1..4 fixed, beside llama-bench / llama-completion (MT-Bench)
#   bench/gpu_session.sh s10-bench2        adaptive k on MT-Bench and HumanEval, the draft/verify/accept split, a 12k
#                                          prompt, time to first token of a one-shot generate
#
# Session 11 (the lessons of 10: nothing beside a measurement; the sampler's GPU tests alone, first):
#   bench/gpu_session.sh s11-start         piece p0; llama.cpp build in the background (CPU only, -j 8)
#   bench/gpu_session.sh s11-recv N        copy piece N (1..5); the build's progress
#   bench/gpu_session.sh s11-sampling      join + check the model; tests/sampling's GPU tests alone, then the
#                                          sampler bench (both on a GPU nothing else uses)
#   bench/gpu_session.sh s11-tests         the other GPU tests (models, spec, quant, check)
#   bench/gpu_session.sh s11-bench         the table of record: plain / MTP / n-gram, k = 1..4 fixed, MT-Bench and
#                                          HumanEval, llama-bench + llama-completion in the same run (build done)
#   bench/gpu_session.sh s11-more          adaptive K = 4; the 12k prompt with --split; time to first token with a
#                                          profile of the engine build
#
# Session 12 (programmatic dependent launch):
#   bench/gpu_session.sh s13-start         piece p0; llama-bench alone built in the background (-j 16)
#   bench/gpu_session.sh s13-tests         join + check the model; the model's GPU tests (models, spec)
#   bench/gpu_session.sh s13-bench         (after the build) MT-Bench plain / MTP k = 3 at temp 0 and 0.6, pp512, with
#                                          llama-bench; the 12k prompt
#   bench/gpu_session.sh s12-probe         no model: the fused step on random weights with / without PDL (bitwise
#                                          check, per-kernel profile); tests/sampling's GPU tests (4 workers); sampler bench
#   bench/gpu_session.sh s12-start         piece p0; llama.cpp build in the background (-j 12); step_bench (random weights:
#                                          decode steps, prefill chunks vs 8-row steps, bitwise, gaps between kernels)
#   bench/gpu_session.sh s12-recv N        copy piece N (1..5); the build's progress
#   bench/gpu_session.sh s12-tests         join + check the model; GPU tests but the sampler's (4 workers)
#   bench/gpu_session.sh s12-bench         MT-Bench and HumanEval, plain / MTP / n-gram at k = 3, temp 0 and 0.6, pp512,
#                                          llama-bench + llama-completion in the same run
#   bench/gpu_session.sh s12-more          the 12k prompt; pp7000 beside llama-bench's; time to first token
#
# Session 14 (the Q8_0 head and the tiled attention merge, both unmeasured when written: no device was lent):
#   bench/gpu_session.sh s14-start         piece p0; llama-bench + llama-completion built in the background (-j 16);
#                                          step_bench: default vs head_q8=0 vs combine_chunks=1 at 256 and 7000 (head_q8: since removed)
#                                          (1-row step time, same logits), per-kernel profile at both depths
#   bench/gpu_session.sh s14-recv N        copy piece N (1..5); the build's progress
#   bench/gpu_session.sh s14-tests         join + check the model; the model's GPU tests (models, spec; the Q8_0 head
#                                          bit for bit against the dense one)
#   bench/gpu_session.sh s14-bench         (after the build) the table of record: MT-Bench plain / MTP / n-gram k = 3,
#                                          temp 0 and 0.6, pp512, floor and memory, llama-bench + llama-completion;
#                                          plain with --decode-steps 1 beside it
#   bench/gpu_session.sh s14-more          HumanEval; the 12k prompt (decode at depth); pp7000 beside llama-bench's; time
#                                          to first token (plain, MTP) with a profile
#
# Session 15 (the GEMV tile sweep; bench/experiments/linear_sweep.py, pick_tiles.py):
#   bench/gpu_session.sh s15-sweep         piece p0, llama.cpp's build; the sweep; step_bench A/B of its pick (the pick
#                                          kept in /tmp/tiles.sed when it wins by 2%: later s15 steps run with it)
#   bench/gpu_session.sh s14-recv N        pieces 1..5
#   bench/gpu_session.sh s15-tests | s15-bench | s15-more    the model's GPU tests; the table of record; HumanEval + 12k
#   bench/gpu_session.sh s15-profile       (pieces joined) bench/round_profile.py: device time per kernel per round
#
# Session 16 (written in session 15; its start and tests steps, the L2 prefetch's A/B, were folded into s17's):
#   bench/gpu_session.sh s16-profile       round_profile (decode only) on MT-Bench and 12k; bench --split at 12k
#
# Session 17 (the GEMV tails, FusedTiles.tails: the norms and the RoPE done by the last program of the GEMV before
# them in decode / verify forwards, 6 kernels a layer instead of 9):
#   bench/gpu_session.sh s17-start         piece p0, llama.cpp's build; step_bench A/B at 256 and 7000 of tails, the
#                                          split merge and both (1-row and 4-row steps, a 128-row prefill chunk, each
#                                          variant's bitwise checks); pick_ab keeps per family what wins (>= 2%,
#                                          bitwise, prefill <= 10% slower) in /tmp/tiles.sed (its first run, lease 1
#                                          of session 16, A/B'd the L2 prefetch too)
#   bench/gpu_session.sh s14-recv N        pieces 1..5
#   bench/gpu_session.sh s17-tests         (the picks applied) join + check; the model's GPU tests (models, spec)
#   bench/gpu_session.sh s15-bench | s16-profile | s15-more    the table of record; the round profile and the
#                                          12k split; HumanEval + 12k (all with the picks)
#   bench/gpu_session.sh s17-more          (after the build, the picks applied) pp7000 beside llama-bench; adaptive k on
#                                          MT-Bench; time to first token (plain, plain, MTP)
#   bench/gpu_session.sh s17-probe         no model: the tall / small GEMV tiles A/B'd under the tails; what a norm tail
#                                          costs (bench/experiments/tail_cost.py)
#
# Session 18 (the persistent kernel: every layer of a few-row forward in one launch):
#   bench/gpu_session.sh s18-start         piece p0, llama.cpp's build; step_bench A/B at 256 and 7000 of
#                                          persistent=1 with and without its L2 prefetches (bitwise against the
#                                          default and its own 1-row steps); pick_ab -> /tmp/tiles.sed
#   then s14-recv 1..5, s17-tests, s15-bench, s16-profile, s17-more as in session 17
#   AB="..." bench/gpu_session.sh s18-probe   no model: step_bench A/B of the variants in $AB at $POSITIONS (256)
#   bench/gpu_session.sh s18-begin         piece p0, llama.cpp's build in the background
#   bench/gpu_session.sh s18-bench         (after s17-tests) the table of record, then MT-Bench with --adaptive (k_counts)
#
# Session 19 (the drafter's attention a program a chunk of read cells; the greedy pick as one kernel):
#   bench/gpu_session.sh s18-begin, s14-recv 1..5, s17-tests as before
#   bench/gpu_session.sh s20-begin         (carry .carry .whl) llama.cpp's build in the background; then `recv .pieces/pN`
#                                          one call a piece (carry .pieces/pN), back to back
#   bench/gpu_session.sh s20-check         join the pieces; the GPU tests of tests/spec and tests/models
#   bench/gpu_session.sh s20-ab            MT-Bench plain / MTP k = 3, temp 0 and 0.6, --pipeline off then on
#   bench/gpu_session.sh s19-ab            MT-Bench plain / MTP k = 3, temp 0 and 0.6: the tree with .ab_before/'s files
#                                          (the code before the change) and this tree, back to back
#   bench/gpu_session.sh s19-profile       bench/round_profile.py on MT-Bench (device time per kernel per round)
#   then s18-bench (the table of record beside llama.cpp, then --adaptive)
#   bench/gpu_session.sh s19-check         (pieces copied) join; the drafter's and speculative-text GPU tests; the round's
#                                          host parts at temp 0 (bench/experiments/round_host_time.py, 3 prompts)
#
# Session 20 (the Q8_0 head, the device n-gram drafter, the round's glue kernels, the sampler's top-k path):
#   bench/gpu_session.sh s21-begin         (carry .carry .whl .ab_before .pieces/p5) llama.cpp's build in the background;
#                                          piece 5; the GPU tests that need no model; the sampler A/B (bench/sample_bench.py
#                                          --before .ab_before) and the head A/B on random weights (bench/step_bench.py)
#   bench/gpu_session.sh recv .pieces/pN   one call a piece (carry .pieces/pN), N = 0..4, back to back
#   bench/gpu_session.sh s21-check         join; the GPU tests that need the model; time to first token (plain, MTP)
#   bench/gpu_session.sh s21-ab            MT-Bench plain / MTP / n-gram, k = 2 and 3, temp 0 and 0.6: the session's
#                                          start (.ab_before's files over a copy of this tree) and this tree, back to back
#   bench/gpu_session.sh s21-table         (llama.cpp built) the table of record beside llama-bench and llama-completion
#   bench/gpu_session.sh s21-profile       device time per kernel per round (plain, MTP, n-gram at the default k); HumanEval
#
# Session 21 (the drafter on bf16 dense matrices and the main layers' tail kernels, attn_cells 64 cells a program):
#   bench/gpu_session.sh s23-begin         (carry .carry .whl .pieces/p5) llama.cpp's build in the background; piece 5;
#                                          step_bench: ffn_parts against the whole down GEMV, and bn_tall=16 ($AB)
#   bench/gpu_session.sh recv .pieces/pN   one call a piece (carry .pieces/pN), N = 0..4, back to back
#   bench/gpu_session.sh s23-check         join; GPU tests (models, spec); startup_order.py x 2 per order; ttft x 3
#   bench/gpu_session.sh s23-tiles         (carry .carry .whl .pieces/p5) llama.cpp's build in the background;
#                                          step_bench at 256 cells: the tall tile at BK 1024, stages, warps ($AB)
#   then s22-before (carry .ab_before), s22-table, s22-depth, s22-profile as in session 21
#   bench/gpu_session.sh s22-begin         (carry .carry .whl .pieces/p5) llama.cpp's build in the background; piece 5;
#                                          the drafter-step GPU test; bench/experiments/draft_step_time.py (random weights)
#   bench/gpu_session.sh recv .pieces/pN   one call a piece (carry .pieces/pN), N = 0..4, back to back
#   bench/gpu_session.sh s22-check         join; the GPU tests that need the model; the file's read speed; time to first token
#   bench/gpu_session.sh s22-before        (carry .ab_before) MT-Bench plain / MTP k = 2, 3, temp 0 and 0.6 at the session's start
#   bench/gpu_session.sh s22-table         the same and n-gram on this tree beside llama-bench and llama-completion (table of record)
#   bench/gpu_session.sh s22-depth         llama-bench tg128 / pp512 / pp7000 at depth 0 and 7000; ours pp7000 and decode after it
#   bench/gpu_session.sh s22-profile       device time per kernel per round (plain, MTP, n-gram at the default k); HumanEval
#   bench/gpu_session.sh s22-krange        (a second lease: recv p0 + p5, p1..p4, then this) join; MT-Bench plain / MTP
#                                          k = 1..4; adaptive K = 4; with SPLIT=1 k = 2 and 3 with the round's draft / verify / accept split
#
# Session 23 (the tokenizer on SentencePiece):
#   bench/gpu_session.sh s24-begin         (carry .whl .ab_before .pieces/p5) piece 5; sentencepiece / protobuf import
#   bench/gpu_session.sh recv .pieces/pN   one call a piece (carry .pieces/pN), N = 0..4, back to back
#   bench/gpu_session.sh s24-check         join; time to first token before (tokenizers) / after (SentencePiece) x 3;
#                                          startup_order.py serial / none x 2; GPU tests (models, spec)
#   bench/gpu_session.sh s24-ab            (carry .whl .ab_before) step_bench before / after x 2, outputs compared bitwise
#   bench/gpu_session.sh s25-begin         (carry .carry .whl .ab_before .ab_a .pieces/p5) llama.cpp's build in the
#                                          background; piece 5; step_bench on 327c78d, 43deda1 and this tree x 2, bitwise
#   bench/gpu_session.sh s25-lease         (carry .carry .whl .pieces/p5) llama-bench's build in the background; piece 5
#   then recv .pieces/p0..p4, s25-tests (join; GPU tests that need the model), s25-table (MT-Bench plain / MTP beside
#   llama-bench tg128 / pp512)
#
# Session 24 (programmatic dependent launch again; the reverted hoist's bits):
#   bench/gpu_session.sh s26-ab            (carry .whl .ab_a .ab_h) step_bench with the PDL variants; 43deda1 and 013813e
#                                          (twice) at 256 cells, outputs and K/V cells compared bit for bit
#   bench/gpu_session.sh s26-early         (carry .carry .whl .pieces/p5) llama-bench's build (background), piece 5,
#                                          step_bench: pdl_early beside the default; then recv .pieces/p0..p4,
#                                          s25-tests, s25-table
#
# Session 25 (models beyond Gemma-3-270M: Llama and Qwen2 families; pieces of 48 MiB, .pieces/pNN/<model>.<k>):
#   bench/gpu_session.sh s27-start DIR     (carry .carry .whl DIR) llama.cpp's build in the background (bench, completion,
#                                          quantize, perplexity, tokenize); the first piece
#   bench/gpu_session.sh recv .pieces/pNN  one call a piece, back to back
#   bench/gpu_session.sh s27-tests         join + check the three files; the GPU tests of models / spec / dequant on
#                                          Gemma-3-270M; the fused step's on SmolLM2-135M (llama) and Qwen2.5-Coder-1.5B (qwen2)
#   bench/gpu_session.sh s27-table         (built) per model: MT-Bench plain (+ MTP on Gemma, n-gram on the others) at temp 0
#                                          and 0.6, pp512, beside llama-bench tg128 / pp512; perplexity beside llama-perplexity;
#                                          llama-tokenize's ids of the tokenizer corpus
#   bench/gpu_session.sh s27-synth         (built) synthetic Gemma-3 1B / 4B and Qwen2.5-7B (bench/synth_model.py, Q4_K_M by
#                                          llama-quantize): plain decode and pp512 beside llama-bench
#
# Session 26 (serving: one program per sampler shape; the snapshot under test in .ab_head, the start in .ab_before):
#   bench/gpu_session.sh s28-begin         (carry .whl .ab_before .ab_head .pieces/p05) the snapshots to /tmp; piece 5;
#                                          the sampler's GPU tests in the background
#   bench/gpu_session.sh recv .pieces/pNN  one call a piece (p00..p04), back to back
#   bench/gpu_session.sh s28-check         join; GPU tests (spec, models, sampling's log); seed_calls before / after;
#                                          one-shot generate -n 64 wall and its parts (ttft.py), twice each
#   bench/gpu_session.sh s28-soak          (carry .whl .ab_head) bench/soak.py through the server, 1000 requests
#
# Session 27 (issue 37: the matrices as the file's own bytes):
#   bench/gpu_session.sh s29-start         (carry .carry .whl .pieces/meta) llama-bench + llama-quantize built
#                                          in the background; synthetic F16 models written in the background; the
#                                          planes' GPU tests
#   bench/gpu_session.sh recv .pieces/pNN  one call a piece (p00..p04), back to back
#   bench/gpu_session.sh s29-gemma         join; file weights vs dense: bits (ab_logits), GPU tests, bench beside llama-bench
#   bench/gpu_session.sh s29-synth SHAPE.. quantize the synthetic models (Q4_K_M); plain decode file weights vs dense
#                                          beside llama-bench, memory
#
# Session 28 (issue 38: the draft model on the GPU):
#   bench/gpu_session.sh s30-start         (carry .carry .whl) llama-bench + llama-speculative built in the background
#   bench/gpu_session.sh recv .pieces/pNN  one call a piece (p08..p30: Qwen2.5-Coder-1.5B; p31..p40: 0.5B), back to back
#   bench/gpu_session.sh s30-pair          join both; the pair's GPU test; HumanEval x 8 plain / draft model / n-gram
#   bench/gpu_session.sh s31-start         (carry .whl .carry/qtrain) the Qwen training rows (`train-data --model <1.5B>`)
#   bench/gpu_session.sh s31-train         (carry .carry/llama.tar.gz; after the qwen15 pieces) train-mtp for the 1.5B, head back in 15 MB pieces
#                                          (INIT=mtp_turbo/data/qwen2.5-coder-1.5b-instruct-mtp.gguf LR=5e-4: continue the shipped head)
#   bench/gpu_session.sh s31-bench         (after the qwen05 pieces) the head beside plain and the draft model, HumanEval --chat
#                                          beside llama-bench and llama-speculative (0.5B drafting) on the same prompts
#
# Session 30 (issue 38's checks and table). The tree is 33.7 MB now (two shipped heads), so a call carries at most
# ~30 MB more: the models cut with `split -b 31M -d -a 2 FILE .pieces/s/NAME.` into .pieces/aNN (qwen15.NN, 35 pieces)
# and .pieces/bNN (qwen05.NN, 16), the training rows into .pieces/qt0, qt1; each recv command makes /tmp/gguf first,
# and calls go back to back (30 s idle gives the machine back, with all it held). s30-start (carry .whl
# .carry/llama.tar.gz), the rows and the qwen15 pieces, s31-train (INIT, LR, TRAIN_S, GEN_S), the qwen05 pieces, then:
#   bench/gpu_session.sh s32-check         the draft model's GPU tests (pair, shipped head, rows' batch invariance); HumanEval
#                                          via chat: plain, the new head (/tmp/q15_head.gguf) and the shipped one, the draft
#                                          model, beside llama-bench and llama-speculative on the same chat prompts
#
# Session 31 (issue 41's start-up changes on CUDA: Triton imported only where it can run, the MTP head's rows made on
# first use). The default model cut in 28 MB pieces (.pieces/gNN/gemma.NN, 9 pieces), one call each
# (`mkdir -p /tmp/gguf && cp .pieces/gNN/* /tmp/gguf/`), then:
#   bench/gpu_session.sh s33-check         (carry .whl) Triton on CUDA; the GPU tests without a model; the real model's GPU
#                                          tests (fused step, drafters); MT-Bench plain / MTP against session 25's table
#
# The carried files (.carry/llama.tar.gz, .whl, .pieces/meta, .pieces/gNN) are git-ignored: a fresh checkout makes them
# with bench/make_carry.sh.
#
# Session 32 (issue 37: the file's bytes on integer tensor cores, FragMatrix; no device was lent in session 32):
#   bench/gpu_session.sh s34-start         (carry .carry .whl .pieces/meta) llama-bench + llama-quantize built and the
#                                          synthetic F16 models written in the background; the frag kernels' GPU tests;
#                                          the per-matrix microbench (bench/experiments/fragk_gemv_bench.py --quick)
#   pieces .pieces/g00..g08, one call each (`mkdir -p /tmp/gguf && cp .pieces/gNN/* /tmp/gguf/`), back to back
#   bench/gpu_session.sh s34-gemma         join; frag vs dense logits (ab_logits); perplexity frag / dense; plain + MTP,
#                                          frag and dense, beside llama-bench (~5 min)
#   bench/gpu_session.sh s34-gtest         the real model's GPU tests, dense and frag (~4 min)
#   bench/gpu_session.sh s34-trees         (session 34) draft trees: fused tree rows bit for bit, captured tree rounds = plain's
#                                          text; MT-Bench speed and tokens a round, chains beside trees
#   bench/gpu_session.sh s34-synth SHAPE.. quantize each synthetic model (Q4_K_M); plain frag and dense beside llama-bench
#                                          (~3 min a shape: gemma3-4b first, then gemma3-1b, qwen2.5-1.5b)
# Session 35: s35-go DIR.. (carry .carry .whl + a piece or .pieces/meta: llama-bench built in the background), one call a
#   piece, then s35-gemma (tree tests, plain/MTP beside llama-bench, tree sweep) or s35-last (after the tree capture fix)
# Next (session 36): s35-go with .carry .whl .pieces/meta, pieces g00..g08, s36-profile (the tree round's fixed ~1 ms),
#   s35-last's 4B pp512 with frag_gemm's 4 x 64 tiles (beside llama-bench), the tile sweep (fragk_gemv_bench.py, full)
#   bench/gpu_session.sh s34-blocks SHAPE. gemma3-12b gemma3-27b qwen2.5-7b qwen2.5-14b as random Q4_K_M blocks, the same
#   (30 device minutes do not hold all of it. Order (session 34): start (~3 with MICRO=0: the frag kernels' and the fused
#   tree rows' GPU tests), synth gemma3-4b (needs no pieces: the 0.97x shape), pieces, gemma, trees, synth gemma3-1b
#   qwen2.5-1.5b, gtest, blocks)
set -uo pipefail
step=$1; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/gguf
if [ -d .whl ]; then
  # compiled to .pyc as a user's pip install is (--no-compile made gguf's import 1.9 s of a start-up)
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1

llama_build() {  # JOBS [TARGETS]: unpack .carry/llama.tar.gz, build llama-bench + llama-completion in the background
  tar xzf .carry/llama.tar.gz -C /tmp && [ -d /tmp/llama.cpp ] || return 1
  (cd /tmp/llama.cpp && setsid nohup bash -c "cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=${LLAMA_EXAMPLES:-OFF} -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release \
    > /tmp/logs/llama-build.log 2>&1 && cmake --build build -j $1 --target ${2:-llama-bench llama-completion} \
    >> /tmp/logs/llama-build.log 2>&1; echo BUILD_DONE \$? >> /tmp/logs/llama-build.log" > /dev/null 2>&1 &)
}
join_qwen() {  # both Qwen files from /tmp/gguf's pieces into $M (the registry's folder), each checked by sha256
  mkdir -p $M
  local m n r f
  for m in qwen15:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046:qwen2.5-coder-1.5b-instruct-q4_k_m \
           qwen05:1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32:qwen2.5-coder-0.5b-instruct-q4_k_m; do
    n=${m%%:*}; r=${m#*:}; f=$M/${r#*:}.gguf
    [ -f $f ] || { cat /tmp/gguf/$n.[0-9]* > $f && echo "${r%%:*}  $f" | sha256sum -c - || return 1; }
  done
}
llama_spec() {  # PREFIX TAG DRAFT_MAXES: llama-speculative (0.5B drafting for 1.5B) on /tmp/PREFIX{0..7}.txt, temps 0 / 0.6
  local t dm i
  for t in 0 0.6; do for dm in $3; do
    for i in $(seq 0 7); do
      timeout 60 $L/llama-speculative -m $M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        -md $M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf -f /tmp/$1$i.txt -n 256 --temp $t --spec-draft-n-max $dm \
        -ngl 99 -ngld 99 -fa on --seed 1 2>&1 | grep -E "decoded|accept" | tr '\n' ' '; echo
    done | tee "$OUT/llama_spec_$2t${t}_d$dm.txt" | awk -v t=$t -v d=$dm -v k="${2%_}" '{for(i=1;i<=NF;i++) if($i=="speed:") {s+=$(i+1); n++}}
      END {printf "llama-speculative %stemp %s draft-max %s: mean %.1f tok/s over %d prompts\n", k ? "(" k ") " : "", t, d, s/n, n}'
  done; done
}
step_trees() {  # NAME... (the last: this tree): bench/step_bench.py on .ab_NAME's package for each other NAME and on
  # this tree, alternated twice; each tree's outputs compared bit for bit with the first's
  local t d i all="$*" last=${@: -1}
  for t in "$@"; do
    [ $t = $last ] && continue
    rm -rf /tmp/$t && mkdir -p /tmp/$t && cp -r .ab_$t/* /tmp/$t/ && cp bench/step_bench.py /tmp/$t/bench/
  done
  for i in 1 2; do for t in "$@"; do
    d=$PWD; [ $t != $last ] && d=/tmp/$t
    echo "== $t $i"
    (cd $d && PYTHONPATH=/tmp/site:$d timeout 240 python3 bench/step_bench.py --positions 256,7000 --prefill-rows 128 \
      --ab "" --save "/tmp/step_$t$i.pt" --out "$OUT/step_$t$i.json" 2>&1 | grep -v Warn > "$OUT/step_$t$i.txt")
    grep "position\|prefill chunk\|replayed" "$OUT/step_$t$i.txt"
  done; done
  python3 -c "
import torch
names = '$all'.split()
r = {t: torch.load(f'/tmp/step_{t}1.pt') for t in names}
for t in names[1:]:
    print(f'outputs bit for bit equal, {names[0]} vs {t}:', {k: torch.equal(r[names[0]][k], r[t][k]) for k in r[names[0]]})"
  for t in "$@"; do grep -h -A7 "eager 1-row step at 256" "$OUT/step_${t}2.txt"; done
}
join_model() {  # the pieces joined into /tmp/gguf/model.gguf, its SHA-256 checked
  cat /tmp/gguf/piece.* > /tmp/gguf/model.gguf
  echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/model.gguf" | sha256sum -c -
}
join_models() {  # the pieces of each model joined into /tmp/gguf/NAME.gguf, their SHA-256s checked
  local m ok=0
  for m in gemma:a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
           smol:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
           qwen15:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046; do
    cat /tmp/gguf/${m%%:*}.[0-9]* > /tmp/gguf/${m%%:*}.gguf && rm -f /tmp/gguf/${m%%:*}.[0-9]*
    echo "${m#*:}  /tmp/gguf/${m%%:*}.gguf" | sha256sum -c - || ok=1
  done
  return $ok
}
record_table() {  # (after llama.cpp's build) MT-Bench plain / MTP / n-gram k = 3 at temp 0 and 0.6, pp512, floor, llama.cpp
  local L=/tmp/llama.cpp/build/bin M=/tmp/gguf/model.gguf
  for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
  timeout 300 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 \
    --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
    --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_mtbench.json" 2>&1 \
    | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_mtbench.txt" | tail -16
}
humaneval_12k() {  # HumanEval x 20 and the 12k-token prompt (decode at depth), plain / MTP (/ n-gram) k = 3
  local M=/tmp/gguf/model.gguf
  timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 \
    --max-tokens 256 --n-prompts 20 --prompts humaneval --pp 0 --json "$OUT/bench_humaneval.json" 2>&1 \
    | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -9
  python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
  timeout 120 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
    --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 --json "$OUT/bench_12k.json" 2>&1 \
    | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -7
}
synth_f16() {  # SHAPE...: the synthetic F16 files written one after another in the background
  (setsid nohup bash -c "for s in $*; do like=/tmp/gguf/gemma-meta.gguf; case \$s in qwen*) like=/tmp/gguf/qwen-meta.gguf ;; esac;
     python3 bench/synth_model.py --like \$like --shape \$s --out /tmp/synth-\$s-f16.gguf > /tmp/logs/synth-\$s.log 2>&1;
     echo SYNTH_DONE >> /tmp/logs/synth-\$s.log; done" > /dev/null 2>&1 &)
}
bench_pair() {  # NAME MODEL [bench args]: plain decode with the file's bytes and with dense matrices, llama-bench beside
  local n=$1 m=$2 L=/tmp/llama.cpp/build/bin; shift 2
  timeout 200 python3 -m mtp_turbo.cli bench --model $m --modes ${MODES:-plain} --temps 0 --max-tokens 128 --n-prompts 8 \
    --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench --llama-args "-ngl 99" "$@" \
    --json "$OUT/bench_$n.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]\|layer/s\]" \
    | tee "$OUT/bench_$n.txt" | tail -12
  timeout 150 python3 -m mtp_turbo.cli bench --model $m --modes ${MODES:-plain} --temps 0 --max-tokens 128 --n-prompts 8 \
    --prompts mtbench --pp 512 --floor --file-weights off "$@" --json "$OUT/bench_${n}_dense.json" 2>&1 | tr '\r' '\n' \
    | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]\|layer/s\]" | tee "$OUT/bench_${n}_dense.txt" | tail -8
}

bench_frag() {  # NAME MODEL [bench args]: plain decode on the frag layouts and on dense matrices, llama-bench beside
  local n=$1 m=$2 L=/tmp/llama.cpp/build/bin; shift 2
  timeout 240 python3 -m mtp_turbo.cli bench --model $m --modes ${MODES:-plain} --temps 0 --max-tokens 128 --n-prompts 8 \
    --prompts mtbench --pp 512 --floor --file-weights on --llama-bench $L/llama-bench --llama-args "-ngl 99" "$@" \
    --json "$OUT/bench_${n}_frag.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]\|layer/s\]" \
    | tee "$OUT/bench_${n}_frag.txt" | tail -12
  timeout 150 python3 -m mtp_turbo.cli bench --model $m --modes ${MODES:-plain} --temps 0 --max-tokens 128 --n-prompts 8 \
    --prompts mtbench --pp 512 --floor --file-weights off "$@" --json "$OUT/bench_${n}_dense.json" 2>&1 | tr '\r' '\n' \
    | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]\|layer/s\]" | tee "$OUT/bench_${n}_dense.txt" | tail -8
}

case $step in
  s34-start)  # (carry .carry .whl .pieces/meta)
    mkdir -p /tmp/logs; cp .pieces/meta/* /tmp/gguf/
    llama_build 12 "llama-bench llama-quantize" || exit 1
    synth_f16 ${SHAPES:-gemma3-1b gemma3-4b qwen2.5-1.5b}
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 240 python3 -m pytest -q -m gpu tests/quant/test_fragk.py tests/quant/test_frag8_gemv.py tests/models/test_fused_tree.py \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_fragk.txt" | tail -4
    [ "${MICRO:-1}" = 0 ] || timeout 240 python3 bench/experiments/fragk_gemv_bench.py --quick --out "$OUT/fragk_gemv.json" 2>&1 \
      | tee "$OUT/fragk_gemv.txt" ;;
  s35-go)  # DIR...: (carry .carry .whl DIRs) llama-bench alone built in the background; the piece folders copied
    mkdir -p /tmp/logs /tmp/gguf; for d in "$@"; do cp "$d"/* /tmp/gguf/; done
    [ -d /tmp/llama.cpp ] || llama_build 16 "llama-bench" || exit 1
    ls /tmp/gguf; tail -n 1 /tmp/logs/llama-build.log ;;
  s35-gemma)  # (pieces copied) join; tree rows and captured tree rounds bit for bit / plain's text; plain + MTP with the
    # file's bytes beside llama-bench; the draft-tree sweep
    cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 150 python3 -m pytest -q -m gpu tests/models/test_fused_tree.py tests/spec/test_tree_round.py \
      --model-path /tmp/gguf/gemma.gguf -p no:cacheprovider -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_gpu_trees.txt" | tail -3
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    L=/tmp/llama.cpp/build/bin
    timeout 150 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench --llama-args "-ngl 99" \
      --no-progress --json "$OUT/bench_gemma.json" 2>&1 | tee "$OUT/bench_gemma.txt" | tail -12
    timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0.6,0 --draft-tokens 2,3 \
      --draft-trees "3:2,1;3:3,2,1;5:4,3,2,1" --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 0 --no-progress \
      --json "$OUT/bench_trees.json" 2>&1 | tee "$OUT/bench_trees.txt" | tail -14 ;;
  s36-a)  # DIR: (carry .whl DIR) the piece folder copied; the frag split / GEMM sweep started in the background
    mkdir -p /tmp/logs; cp "$1"/* /tmp/gguf/; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
    setsid nohup bash -c "PYTHONPATH=$PYTHONPATH timeout 560 python3 bench/experiments/frag_split_sweep.py \
      --out /tmp/logs/frag_split_sweep.json > /tmp/logs/frag_split_sweep.txt 2>&1; echo SWEEP_DONE >> /tmp/logs/frag_split_sweep.txt" \
      > /dev/null 2>&1 &
    sleep 20; tail -n 3 /tmp/logs/frag_split_sweep.txt ;;
  s36-wait)  # (after s36-a) the sweep's outputs into $OUT once it is done
    for i in $(seq ${WAIT:-100}); do grep -q SWEEP_DONE /tmp/logs/frag_split_sweep.txt && break; sleep 5; done
    cp /tmp/logs/frag_split_sweep.* "$OUT"/; grep -v "^ *$" /tmp/logs/frag_split_sweep.txt | cut -c1-400 | tail -n 80 ;;
  s37-start)  # (carry .carry .whl .pieces/meta) llama-bench + llama-quantize built in the background; the frag GPU
    # tests (Q5_K included); the prefill GEMM's pipelining depth; where a 4B shape's frag decode step goes
    mkdir -p /tmp/logs; cp .pieces/meta/* /tmp/gguf/
    [ -d /tmp/llama.cpp ] || llama_build 16 "llama-bench llama-quantize" || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
    timeout 200 python3 -m pytest -q -m gpu tests/quant/test_fragk.py tests/quant/test_frag8_gemv.py -p no:cacheprovider -rf \
      2>&1 | grep -v Warning | tee "$OUT/pytest_frag.txt" | tail -3
    timeout 240 python3 bench/experiments/frag_split_sweep.py --rows "" --shapes gemma3-4b,qwen2.5-1.5b \
      --gemm 2x64w4,2x64w4s1,2x64w4s2,2x64w4s3,2x64w4s4,1x64w4s3,2x32w4s3,2x128w8s2 --out "$OUT/gemm_stages.json" 2>&1 \
      | tee "$OUT/gemm_stages.txt" | grep "chunk\|error" | cut -c1-700
    timeout 60 python3 bench/synth_model.py --like /tmp/gguf/gemma-meta.gguf --shape gemma3-4b --blocks \
      --out /tmp/blocks-gemma3-4b.gguf 2>&1 | tail -1
    timeout 150 python3 bench/round_profile.py --model /tmp/blocks-gemma3-4b.gguf --modes "" --n-prompts 2 --max-tokens 64 \
      --top 24 --file-weights --out "$OUT/profile_4b_frag.json" 2>&1 | tee "$OUT/profile_4b_frag.txt" | grep -v "^ *$" \
      | cut -c1-200 | tail -30 ;;
  s37-models)  # (after s37-start, llama-bench built) the file's bytes beside llama-bench: Gemma-3 4B Q4_K_M and
    # Q5_K_M, 1B, Qwen2.5 1.5B (random blocks); dense beside at 1B and 1.5B
    L=/tmp/llama.cpp/build/bin
    for i in $(seq 80); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    for sm in gemma3-4b:q4_k_m gemma3-4b:q5_k_m gemma3-1b:q4_k_m qwen2.5-1.5b:q4_k_m; do
      shape=${sm%%:*}; mix=${sm#*:}; f=/tmp/blocks-$shape-$mix.gguf
      like=/tmp/gguf/gemma-meta.gguf; case $shape in qwen*) like=/tmp/gguf/qwen-meta.gguf ;; esac
      timeout 120 python3 bench/synth_model.py --like $like --shape $shape --blocks --mix $mix --out $f 2>&1 | tail -1
      if [ $shape = gemma3-4b ]; then
        timeout 240 python3 -m mtp_turbo.cli bench --model $f --modes plain --temps 0 --max-tokens 128 --n-prompts 8 \
          --prompts mtbench --pp 512 --floor --file-weights on --llama-bench $L/llama-bench --llama-args "-ngl 99" \
          --no-progress --json "$OUT/bench_blocks_${shape}_${mix}_frag.json" 2>&1 | tail -6
      else
        bench_frag blocks_$shape /tmp/blocks-$shape-$mix.gguf --no-progress
      fi
      rm -f $f
    done ;;
  s36-start)  # (carry .carry .whl .pieces/meta) llama-bench built in the background; frag GPU tests (the prefill GEMM's
    # rows against the GEMV's bits); the prefill GEMM per tile at three shapes; a 4B shape's plain decode profiled
    mkdir -p /tmp/logs; cp .pieces/meta/* /tmp/gguf/
    [ -d /tmp/llama.cpp ] || llama_build 16 "llama-bench" || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
    timeout 200 python3 -m pytest -q -m gpu tests/quant/test_fragk.py tests/quant/test_frag8_gemv.py -p no:cacheprovider -rf \
      2>&1 | grep -v Warning | tee "$OUT/pytest_frag.txt" | tail -3
    timeout 240 python3 bench/experiments/frag_split_sweep.py --rows "" --out "$OUT/gemm_sweep.json" 2>&1 \
      | tee "$OUT/gemm_sweep.txt" | grep "chunk\|error" | cut -c1-700
    timeout 60 python3 bench/synth_model.py --like /tmp/gguf/gemma-meta.gguf --shape gemma3-4b --blocks \
      --out /tmp/blocks-gemma3-4b.gguf 2>&1 | tail -1
    timeout 150 python3 bench/round_profile.py --model /tmp/blocks-gemma3-4b.gguf --modes "" --n-prompts 2 --max-tokens 64 \
      --top 24 --out "$OUT/profile_4b.json" 2>&1 | tee "$OUT/profile_4b.txt" | grep -v "^ *$" | cut -c1-200 | tail -45 ;;
  s36-models)  # (after s36-start, llama-bench built) plain decode + pp512 on the file's bytes beside llama-bench at the
    # 4B, 1B and Qwen 1.5B shapes (random Q4_K_M blocks); dense beside at 1B and 1.5B
    L=/tmp/llama.cpp/build/bin
    for i in $(seq 80); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    for shape in gemma3-4b gemma3-1b qwen2.5-1.5b; do
      like=/tmp/gguf/gemma-meta.gguf; case $shape in qwen*) like=/tmp/gguf/qwen-meta.gguf ;; esac
      [ -f /tmp/blocks-$shape.gguf ] || timeout 120 python3 bench/synth_model.py --like $like --shape $shape --blocks \
        --out /tmp/blocks-$shape.gguf 2>&1 | tail -1
      if [ $shape = gemma3-4b ]; then
        timeout 240 python3 -m mtp_turbo.cli bench --model /tmp/blocks-$shape.gguf --modes plain --temps 0 --max-tokens 128 \
          --n-prompts 8 --prompts mtbench --pp 512 --floor --file-weights on --llama-bench $L/llama-bench --llama-args "-ngl 99" \
          --no-progress --json "$OUT/bench_blocks_${shape}_frag.json" 2>&1 | tee "$OUT/bench_blocks_${shape}_frag.txt" | tail -8
      else
        bench_frag blocks_$shape /tmp/blocks-$shape.gguf --no-progress
      fi
      rm -f /tmp/blocks-$shape.gguf
    done
    python3 bench/scaling_table.py "$OUT" --md | tee "$OUT/scaling.md" ;;
  s36-gemma)  # (pieces copied, llama-bench built) join; the real model's fused GPU tests (prefill chunks = one-row
    # steps, speculative text = plain's) on the file's bytes; plain + MTP beside llama-bench
    [ -f /tmp/gguf/gemma.gguf ] || { cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]; }
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 240 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py --model-path /tmp/gguf/gemma.gguf \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_gemma.txt" | tail -3
    L=/tmp/llama.cpp/build/bin
    timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench --llama-args "-ngl 99" \
      --no-progress --json "$OUT/bench_gemma.json" 2>&1 | tee "$OUT/bench_gemma.txt" | tail -12 ;;
  s36-profile)  # (pieces copied) where a replayed tree round's time goes, beside a chain round (torch.profiler)
    [ -f /tmp/gguf/gemma.gguf ] || { cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]; }
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 200 python3 bench/experiments/tree_round_profile.py --model /tmp/gguf/gemma.gguf --tree "${TREE:-3:2,1}" \
      2>&1 | tee "$OUT/tree_round_profile.txt" | grep -v "^-" | cut -c1-160 | head -70 ;;
  s35-last)  # (pieces and .pieces/meta copied; no llama build) tree GPU tests and sweep; a 4B shape's pp512
    cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 90 python3 -m pytest -q -m gpu tests/models/test_fused_tree.py tests/spec/test_tree_round.py \
      --model-path /tmp/gguf/gemma.gguf -p no:cacheprovider -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_gpu_trees.txt" | tail -3
    timeout 90 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0.6,0 --draft-tokens 3 \
      --draft-trees "3:2,1;5:4,3,2,1" --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 0 --no-progress \
      --json "$OUT/bench_trees.json" 2>&1 | tee "$OUT/bench_trees.txt" | tail -9
    timeout 30 python3 bench/synth_model.py --like /tmp/gguf/gemma-meta.gguf --shape gemma3-4b --blocks \
      --out /tmp/blocks-gemma3-4b.gguf 2>&1 | tail -1
    timeout 60 python3 -m mtp_turbo.cli bench --model /tmp/blocks-gemma3-4b.gguf --modes plain --temps 0 --max-tokens 32 \
      --n-prompts 2 --prompts mtbench --pp 512 --file-weights on --no-progress 2>&1 | tee "$OUT/bench_blocks_4b.txt" | tail -4 ;;
  s34-gemma)  # (pieces copied) join; frag vs dense on the real model: logits, GPU tests, bench beside llama-bench
    cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 120 python3 bench/ab_logits.py --model /tmp/gguf/gemma.gguf --set file_weights=True --out /tmp/ab_file.pt 2>&1 | tail -1
    timeout 120 python3 bench/ab_logits.py --model /tmp/gguf/gemma.gguf --set file_weights=False --out /tmp/ab_dense.pt 2>&1 | tail -1
    python3 bench/ab_logits.py --compare /tmp/ab_dense.pt /tmp/ab_file.pt | tee "$OUT/ab_frag_vs_dense.txt"
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    for fw in "--file-weights on" "--file-weights off"; do  # the fused step's logits (scoring.step_logits), 16 chunks of 512
      timeout 120 python3 -m mtp_turbo.cli perplexity bench/data/tempest.txt --model /tmp/gguf/gemma.gguf --ctx 512 \
        --chunks 16 --no-progress $fw 2>&1 | tail -1 | sed "s/^/gemma $fw: /"
    done | tee "$OUT/ppl_frag.txt"
    MODES=plain,mtp bench_frag gemma /tmp/gguf/gemma.gguf --draft-tokens 3 ;;
  s34-gtest)  # (after s34-gemma) the real model's GPU tests, dense and file weights (frag): fused step, spec
    timeout 500 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py tests/spec -x --model-path /tmp/gguf/gemma.gguf \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_gemma.txt" | tail -4 ;;
  s34-trees)  # (after s34-gemma) draft trees on the GPU: the fused tree rows against one-row steps bit for bit, captured
    # tree rounds give plain's text; MT-Bench speed, tokens a round and same text, chains beside trees
    if [ ! -f /tmp/gguf/gemma.gguf ]; then  # (pieces copied, s34-gemma not run)
      cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
      echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    fi
    timeout 200 python3 -m pytest -q -m gpu tests/models/test_fused_tree.py tests/spec/test_tree_round.py \
      --model-path /tmp/gguf/gemma.gguf -p no:cacheprovider -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_gpu_trees.txt" | tail -3
    timeout 300 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0.6,0 --draft-tokens 2,3 \
      --draft-trees "3:1;3:2,1;3:3,2,1;4:3,2,1;5:4,3,2,1" --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 0 --no-progress \
      --json "$OUT/bench_trees.json" 2>&1 | tee "$OUT/bench_trees.txt" | tail -14 ;;
  s34-synth)  # SHAPE...: quantize (Q4_K_M) each synthetic model, then bench_frag
    L=/tmp/llama.cpp/build/bin
    for i in $(seq 80); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    for shape in "$@"; do
      for i in $(seq 60); do grep -q SYNTH_DONE /tmp/logs/synth-$shape.log 2>/dev/null && break; sleep 3; done
      timeout 200 $L/llama-quantize /tmp/synth-$shape-f16.gguf /tmp/synth-$shape.gguf Q4_K_M 16 > /tmp/logs/quant-$shape.log 2>&1 \
        || { tail -3 /tmp/logs/quant-$shape.log; continue; }
      rm -f /tmp/synth-$shape-f16.gguf; ls -la /tmp/synth-$shape.gguf
      bench_frag synth_$shape /tmp/synth-$shape.gguf
    done
    python3 bench/scaling_table.py "$OUT" --md | tee "$OUT/scaling.md" ;;
  s34-blocks)  # SHAPE...: random Q4_K_M blocks at larger published shapes (synth_model.py --blocks: no F16 file,
    # no llama-quantize), plain frag and dense beside llama-bench (needs s34-start's llama build and meta files)
    for shape in "$@"; do
      like=/tmp/gguf/gemma-meta.gguf; case $shape in qwen*) like=/tmp/gguf/qwen-meta.gguf ;; esac
      timeout 240 python3 bench/synth_model.py --like $like --shape $shape --blocks --out /tmp/blocks-$shape.gguf 2>&1 | tail -1
      ls -la /tmp/blocks-$shape.gguf || continue
      bench_frag blocks_$shape /tmp/blocks-$shape.gguf
      rm -f /tmp/blocks-$shape.gguf
    done
    python3 bench/scaling_table.py "$OUT" --md | tee "$OUT/scaling.md" ;;
  s33-check)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import mtp_turbo.models.triton_env as t; print('triton on CUDA:', t.triton.__version__)" || exit 1
    timeout 200 python3 -m pytest -q -m gpu -n 4 tests/models/test_fused.py tests/models/test_greedy.py \
      tests/spec/drafters/test_mtp_step_tails.py tests/sampling/test_fused_gpu.py -p no:cacheprovider -rf 2>&1 \
      | grep -v Warning | tee "$OUT/pytest_gpu_nomodel.txt" | tail -4
    cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 220 python3 -m pytest -q -m gpu -n 4 tests/models/test_fused_gpu.py tests/spec --model-path /tmp/gguf/gemma.gguf \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_gemma.txt" | tail -4
    timeout 120 python3 -m mtp_turbo.cli bench --model /tmp/gguf/gemma.gguf --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 256 --n-prompts 8 --prompts mtbench --no-progress --json "$OUT/bench_gemma.json" 2>&1 \
      | tee "$OUT/bench_gemma.txt" | tail -8 ;;
  s29-memory)  # (carry .whl .pieces/meta) the planes' GPU tests; 4B and Qwen2.5-1.5B shapes of random Q4_K_M blocks with
    # the file's bytes (the embedding's rows gathered from them): decode, memory
    cp .pieces/meta/* /tmp/gguf/
    timeout 150 python3 -m pytest -q -m gpu tests/quant/test_planes.py -p no:cacheprovider -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_planes_gpu.txt" | tail -3
    for shape in gemma3-4b qwen2.5-1.5b; do
      like=/tmp/gguf/gemma-meta.gguf; case $shape in qwen*) like=/tmp/gguf/qwen-meta.gguf ;; esac
      timeout 60 python3 bench/synth_model.py --like $like --shape $shape --blocks --out /tmp/blocks.gguf 2>&1 | tail -1
      timeout 120 python3 -m mtp_turbo.cli bench --model /tmp/blocks.gguf --modes plain --temps 0 --max-tokens 64 \
        --n-prompts 4 --prompts mtbench --pp 0 --floor --file-weights on --json "$OUT/bench_mem_$shape.json" 2>&1 \
        | tr '\r' '\n' | grep "^| plain\|memory\|floor"
    done ;;
  s29-planes)  # (carry .whl .pieces/meta) the plane GEMV per matrix and tile at 4B; a 4B model of random Q4_K_M blocks:
    # plain decode with the file's bytes and dense (no llama.cpp in this lease: its tg128 of the same shape is call 21's)
    cp .pieces/meta/* /tmp/gguf/
    timeout 240 python3 bench/experiments/plane_gemv_bench.py --out "$OUT/plane_gemv.json" 2>&1 | grep -v Warn \
      | tee "$OUT/plane_gemv.txt" | tail -14
    timeout 60 python3 bench/synth_model.py --like /tmp/gguf/gemma-meta.gguf --shape gemma3-4b --blocks \
      --out /tmp/blocks-4b.gguf 2>&1 | tail -1
    for fw in "--file-weights on" "--file-weights off"; do
      timeout 150 python3 -m mtp_turbo.cli bench --model /tmp/blocks-4b.gguf --modes plain --temps 0 --max-tokens 128 \
        --n-prompts 8 --prompts mtbench --pp 512 --floor $fw --json "$OUT/bench_blocks4b${fw// /_}.json" 2>&1 | tr '\r' '\n' \
        | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]\|layer/s\]\|^|---" | tail -6
    done ;;
  s29-start)  # (carry .carry .whl .pieces/meta)
    mkdir -p /tmp/logs; cp .pieces/meta/* /tmp/gguf/
    llama_build 16 "llama-bench llama-quantize" || exit 1
    synth_f16 ${SHAPES:-gemma3-1b gemma3-4b qwen2.5-1.5b}
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" ;;
  s29-gemma)  # join; the file's bytes vs dense on the real model: bits, GPU tests, bench beside llama-bench
    cat /tmp/gguf/gemma.0[0-9] > /tmp/gguf/gemma.gguf && rm -f /tmp/gguf/gemma.0[0-9]
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    timeout 120 python3 bench/ab_logits.py --model /tmp/gguf/gemma.gguf --out /tmp/ab_file.pt 2>&1 | tail -1
    timeout 120 python3 bench/ab_logits.py --model /tmp/gguf/gemma.gguf --set file_weights=False --out /tmp/ab_dense.pt 2>&1 | tail -1
    python3 bench/ab_logits.py --compare /tmp/ab_dense.pt /tmp/ab_file.pt | tee "$OUT/ab_file_vs_dense.txt"
    python3 -c "
import torch
a, b = torch.load('/tmp/ab_dense.pt'), torch.load('/tmp/ab_file.pt')
for k in a:
    if a[k].is_floating_point():
        d = (a[k].float() - b[k].float()).abs()
        print(k, 'elements differing', int((d > 0).sum()), 'of', d.numel(), 'max', float(d.max()))
print('greedy', a['greedy'].tolist() == b['greedy'].tolist(), 'sampled', a['sampled'].tolist() == b['sampled'].tolist())" | tee -a "$OUT/ab_file_vs_dense.txt"
    timeout 200 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py tests/spec -x --model-path /tmp/gguf/gemma.gguf \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_gemma.txt" | tail -4
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    MODES=plain,mtp bench_pair gemma /tmp/gguf/gemma.gguf --draft-tokens 3 ;;
  s29-synth)  # SHAPE...: quantize (Q4_K_M) each synthetic model, then bench_pair
    L=/tmp/llama.cpp/build/bin
    for shape in "$@"; do
      for i in $(seq 60); do grep -q SYNTH_DONE /tmp/logs/synth-$shape.log 2>/dev/null && break; sleep 3; done
      tail -n 2 /tmp/logs/synth-$shape.log | head -1
      timeout 200 $L/llama-quantize /tmp/synth-$shape-f16.gguf /tmp/synth-$shape.gguf Q4_K_M 16 > /tmp/logs/quant-$shape.log 2>&1 \
        || { tail -3 /tmp/logs/quant-$shape.log; continue; }
      rm -f /tmp/synth-$shape-f16.gguf; ls -la /tmp/synth-$shape.gguf
      python3 -c "
import collections, gguf
r = gguf.GGUFReader('/tmp/synth-$shape.gguf')
print(dict(collections.Counter(t.tensor_type.name for t in r.tensors)))"
      bench_pair synth_$shape /tmp/synth-$shape.gguf
    done ;;
  s28-begin)  # (carry .whl .ab_before .ab_head .pieces/p05)
    mkdir -p /tmp/logs; cp .pieces/p05/* /tmp/gguf/
    rm -rf /tmp/head /tmp/before && cp -r .ab_head /tmp/head && cp -r .ab_before /tmp/before
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    [ -n "${NOTESTS:-}" ] && { echo "no tests"; exit 0; }
    (cd /tmp/head && PYTHONPATH=/tmp/site:/tmp/head setsid nohup timeout 500 python3 -m pytest -q -m gpu tests/sampling \
      -n 4 -p no:cacheprovider -rf > /tmp/logs/sampling.txt 2>&1 &) ; echo started ;;
  s28-gputest)  # (pieces copied) join; the GPU tests of spec and the greedy / prefill checks on the snapshot
    cat /tmp/gguf/gemma.0* > /tmp/gguf/gemma.gguf
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    cd /tmp/head && PYTHONPATH=/tmp/site:/tmp/head timeout 150 python3 -m pytest -q -m gpu tests/spec tests/models/test_greedy.py \
      -n 4 --model-path /tmp/gguf/gemma.gguf -p no:cacheprovider --timeout 140 -rf 2>&1 | grep -v Warning | tail -6 ;;
  s28-soak)  # (pieces copied; carry .whl .ab_head) the soak through the server; generate through a running server and
    # in-process; MT-Bench plain / MTP before (.ab_before) and after
    cat /tmp/gguf/gemma.0* > /tmp/gguf/gemma.gguf
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    M=/tmp/gguf/gemma.gguf; H=/tmp/head; export PYTHONPATH=/tmp/site:$H
    [ -d .ab_head ] && rm -rf $H && cp -r .ab_head $H
    cd $H
    timeout 400 python3 bench/soak.py --model $M --requests 1000 --clients 4 -n 64 --out "$OUT/soak.json" 2>&1 | tee "$OUT/soak.txt" | tail -24
    setsid nohup python3 -m mtp_turbo.cli serve --model $M --port 0 --no-progress > /dev/null 2> /tmp/serve.log &
    for i in $(seq 120); do grep -q "serving" /tmp/serve.log && break; sleep 0.5; done; sleep 1; grep serving /tmp/serve.log
    for mode in server server server no-server no-server; do
      flag=""; [ $mode = no-server ] && flag=--no-server
      s=$(date +%s.%N); timeout 60 python3 -m mtp_turbo.cli generate --model $M -n 64 --stats $flag "Once upon a time" \
        > /tmp/gen.txt 2> /tmp/gen.err; e=$(date +%s.%N)
      echo "$mode: wall $(python3 -c "print(round($e - $s, 2))") s | $(grep -v Warn /tmp/gen.err | tail -n 2 | tr '\n' ' ')"
    done 2>&1 | tee "$OUT/generate_server.txt"
    pkill -f "mtp_turbo.cli serve"; sleep 1
    [ -n "${NOBENCH:-}" ] && exit 0
    for t in before head; do
      (cd /tmp && PYTHONPATH=/tmp/site:/tmp/$t timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp \
        --temps 0,0.6 --draft-tokens 3 --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
        --json "$OUT/bench_$t.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|it/s\]" | tail -6 | sed "s/^/$t: /")
    done | tee "$OUT/bench_ab.txt" ;;
  s28-check)  # (pieces copied) join; GPU tests; seed_calls before / after; one-shot generate
    cat /tmp/gguf/gemma.0* > /tmp/gguf/gemma.gguf
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/gguf/gemma.gguf" | sha256sum -c - || exit 1
    M=/tmp/gguf/gemma.gguf; H=/tmp/head
    [ -d .ab_head ] && rm -rf $H && cp -r .ab_head $H  # (carry .ab_head: a newer snapshot)
    (cd $H && PYTHONPATH=/tmp/site:$H timeout 200 python3 -m pytest -q -m gpu tests/sampling -n 4 -p no:cacheprovider \
      -rf 2>&1 | grep -v Warning | tail -4 | tee "$OUT/pytest_sampling.txt")
    (cd $H && PYTHONPATH=/tmp/site:$H timeout 330 python3 -m pytest -q -m gpu tests/spec tests/models/test_greedy.py -n 4 \
      --model-path $M -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_spec.txt" | tail -8)
    for t in before head before head; do
      (cd /tmp && PYTHONPATH=/tmp/site:/tmp/$t timeout 120 python3 $H/bench/seed_calls.py --model $M \
        --out "$OUT/seed_calls_$t.json" 2>&1 | tail -4 | sed "s/^/$t: /")
    done | tee "$OUT/seed_calls.txt"
    for t in before head before head; do
      (cd /tmp && s=$(date +%s.%N) && PYTHONPATH=/tmp/site:/tmp/$t timeout 60 python3 -m mtp_turbo.cli generate \
        --model $M -n 64 --stats "Once upon a time" > /tmp/gen.txt 2> /tmp/gen.err; e=$(date +%s.%N)
        echo "$t: generate -n 64 wall $(python3 -c "print(round($e - $s, 2))") s; $(tail -n 1 /tmp/gen.err)")
    done | tee "$OUT/generate_wall.txt"
    for t in head head; do (cd /tmp && PYTHONPATH=/tmp/site:/tmp/$t timeout 60 python3 $H/bench/ttft.py --model $M -n 64 \
      --profile 12 2>&1 | tail -40 > "$OUT/ttft_$t.txt"); done; tail -40 "$OUT/ttft_head.txt" ;;
  recv) for d in "$@"; do cp "$d"/* /tmp/gguf/; done; ls -la /tmp/gguf ;;
  s30-start)  # (carry .carry .whl)
    mkdir -p /tmp/logs
    LLAMA_EXAMPLES=ON llama_build 16 "llama-bench llama-speculative" || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" ;;
  s31-start)  # (carry .whl .carry/qtrain) the Qwen training rows into /tmp/qtrain
    mkdir -p /tmp/logs /tmp/qtrain /tmp/gguf && cp .carry/qtrain/* /tmp/qtrain/ && ls -la /tmp/qtrain
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv ;;
  s31-train)  # (carry .carry/llama.tar.gz) llama.cpp built in the background; an MTP head for Qwen2.5-Coder-1.5B
    [ -f /tmp/logs/llama-build.log ] || LLAMA_EXAMPLES=ON llama_build 8 "llama-bench llama-speculative"  # (s30-start builds it)
    M=$HOME/.cache/mtp-turbo/models; mkdir -p $M; f=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    [ -f $f ] || { cat /tmp/gguf/qwen15.[0-9]* > $f && echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  $f" \
      | sha256sum -c - || exit 1; }
    set -o pipefail
    timeout ${TRAIN_TO:-540} python3 -m mtp_turbo.cli train-mtp --model $f --data /tmp/qtrain/qwen_train.npy \
      --out /tmp/q15_head.gguf --device cuda --steps 100000 --time-budget ${TRAIN_S:-300} --batch 8 --lr ${LR:-1e-3} \
      ${INIT:+--init $INIT} \
      --warmup 100 --chain 3 --sink 64 --window 256 --block 256 --vocab-rows 32768 --ffn ${FFN:-1536} \
      --pos-offset 16384 --offset-frac 0.3 --eval-every 500 --eval-rows 16 --ckpt-every 0 --gen-rows 768 \
      --gen-batch 384 --gen-len 1024 --gen-time ${GEN_S:-60} --gen-frac 0.5 --gen-temps 0,0.6 2>&1 \
      | tr '\r' '\n' | grep -v "step/s\]\|tensor/s\]\|step/s, \|row/s\]" | tee "$OUT/train.txt" | tail -25
    ls -la /tmp/q15_head.gguf && sha256sum /tmp/q15_head.gguf | tee "$OUT/head.sha256"
    split -b 15M -d /tmp/q15_head.gguf "$OUT/head.p" && ls "$OUT"
    tail -n 1 /tmp/logs/llama-build.log ;;
  s31-bench)  # the Qwen head beside plain and the draft model, HumanEval through the chat template, llama.cpp beside
    M=$HOME/.cache/mtp-turbo/models; f=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    [ -f $f ] || { cat /tmp/gguf/qwen05.[0-9]* > $f && echo "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32  $f" \
      | sha256sum -c - || exit 1; }
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    L=/tmp/llama.cpp/build/bin
    timeout 500 python3 -m mtp_turbo.cli bench --model qwen2.5-coder-1.5b-instruct --modes ${MODES:-plain,mtp,model} \
      --drafter /tmp/q15_head.gguf --draft-model qwen2.5-coder-0.5b-instruct --temps 0,0.6 --draft-tokens ${KS:-2,3} \
      --max-tokens 256 --n-prompts 8 --prompts humaneval --chat --pp 512 --llama-bench $L/llama-bench \
      --llama-args "-ngl 99" --json "$OUT/bench_head.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" \
      | tee "$OUT/bench_head.txt" | tail -16 ;;
  s32-check)  # (after s31-train and the qwen05 pieces) GPU tests; one table on chat prompts beside llama.cpp
    M=$HOME/.cache/mtp-turbo/models; join_qwen || exit 1
    [ -n "${SKIP_TESTS:-}" ] || timeout 200 python3 -m pytest -q -m gpu tests/spec/drafters/test_model_drafter.py \
      -p no:cacheprovider -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_drafters.txt" | tail -4
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    L=/tmp/llama.cpp/build/bin
    timeout 260 python3 -m mtp_turbo.cli bench --model qwen2.5-coder-1.5b-instruct --modes plain,mtp,model \
      ${DRAFTER:+--drafter $DRAFTER} --draft-model qwen2.5-coder-0.5b-instruct --temps 0,0.6 --draft-tokens ${KS:-2,3} \
      --max-tokens 256 --n-prompts 8 --prompts humaneval --chat --llama-bench $L/llama-bench \
      --llama-args "-ngl 99" --json "$OUT/bench_chat.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" \
      | tee "$OUT/bench_chat.txt" | tail -16
    [ -z "${DRAFTER:-}" ] || timeout 120 python3 -m mtp_turbo.cli bench --model qwen2.5-coder-1.5b-instruct --modes mtp --temps 0,0.6 \
      --draft-tokens 2 --max-tokens 256 --n-prompts 8 --prompts humaneval --chat --json "$OUT/bench_shipped.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_shipped.txt" | tail -6
    python3 -c "
from mtp_turbo.benchmark.config import load_prompts; from mtp_turbo.cli import chat_prompt_of
from mtp_turbo.io.gguf_file import GGUFFile
g = GGUFFile('$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf')
for i, p in enumerate(load_prompts('humaneval', 8)):
    open(f'/tmp/hec{i}.txt', 'w').write(chat_prompt_of(g, [{'role': 'user', 'content': p}]).text)"
    llama_spec hec chat_ "${DMS:-4}" ;;
  s30-pair)  # join both Qwen files into the registry's folder; the pair's GPU test; the bench beside llama.cpp
    M=$HOME/.cache/mtp-turbo/models; join_qwen || exit 1
    timeout 200 python3 -m pytest -q -m gpu tests/spec/drafters/test_model_drafter.py -p no:cacheprovider -rf 2>&1 \
      | grep -v Warning | tee "$OUT/pytest_gpu_pair.txt" | tail -3
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    L=/tmp/llama.cpp/build/bin
    timeout 420 python3 -m mtp_turbo.cli bench --model qwen2.5-coder-1.5b-instruct --modes ${MODES:-plain,model,ngram} \
      --draft-model qwen2.5-coder-0.5b-instruct --temps 0,0.6 --draft-tokens ${KS:-3,5} --max-tokens 256 --n-prompts 8 \
      --prompts humaneval --pp 512 --llama-bench $L/llama-bench --llama-args "-ngl 99" --json "$OUT/bench_pair.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_pair.txt" | tail -14
    timeout 120 python3 -m mtp_turbo.cli bench --model qwen2.5-coder-0.5b-instruct --modes plain --temps 0 \
      --max-tokens 256 --n-prompts 8 --prompts humaneval 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" \
      | tee "$OUT/bench_draft_alone.txt" | tail -4
    python3 -c "
import json; from mtp_turbo.benchmark.config import load_prompts
for i, p in enumerate(load_prompts('humaneval', 8)): open(f'/tmp/he{i}.txt', 'w').write(p)"
    llama_spec he "" "${DMS:-4 8}" ;;
  llama-build)
    cat /tmp/gguf/llama.* > /tmp/llama.tar.gz && echo "$(cat .pieces/LLAMA_SHA256)  /tmp/llama.tar.gz" | sha256sum -c - || exit 1
    mkdir -p /tmp/llama && tar xzf /tmp/llama.tar.gz -C /tmp/llama
    cd /tmp/llama/llama_cpp_python-*/vendor/llama.cpp || exit 1
    setsid nohup bash -c "cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      -DCMAKE_BUILD_TYPE=Release > /tmp/llama-build.log 2>&1 && cmake --build build -j 12 --target llama-bench \
      >> /tmp/llama-build.log 2>&1; echo BUILD_DONE \$? >> /tmp/llama-build.log" > /dev/null 2>&1 &
    sleep 2; tail -2 /tmp/llama-build.log ;;
  model)
    join_model || exit 1 ;;
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
    # the head: every tile of the bf16 and int8 tensor-core kernels (q8_0); drafter shapes: default tiles
    timeout 250 python3 bench/gemv_bench.py --shapes 262144x640 --formats q8_0 --kernels dot_bf16x3,dot_i8w --sweep \
      --out "$OUT/gemv_head.json" > "$OUT/gemv_head.txt" 2>&1; grep -A40 "best tile" "$OUT/gemv_head.txt"
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,2048x640,640x2048,1024x640 \
      --kernels dot_bf16x3,dot_i8w --out "$OUT/gemv.json" > "$OUT/gemv.txt" 2>&1; grep -B2 -A30 "^| shape | fmt | M" "$OUT/gemv.txt"
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
  couple)
    timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider --model-path /tmp/gguf/model.gguf 2>&1 | tail -4 | tee "$OUT/pytest_gpu.txt"
    timeout 280 python3 bench/accept.py --model /tmp/gguf/model.gguf --device cuda --sets mt_bench --ks 3 \
      --samplers temp0.6 --prompts 20 --max-tokens 128 --draft-coupling on,off --out "$OUT/accept_coupling.json" 2>&1 | tail -12 ;;
  defaults)
    timeout 240 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    timeout 200 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels default \
      --out "$OUT/gemv_defaults.json" > "$OUT/gemv_defaults.txt" 2>&1; grep -A40 "^| shape | fmt | kernel | M" "$OUT/gemv_defaults.txt" | head -64 ;;
  ncu)
    # Nsight Compute on the GEMV kernels (CASES, as bench/ncu_gemv.py takes them), then the SASS and
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
    timeout 170 python3 bench/check_i8_cuda.py --kernels frag8 2>&1 | tee "$OUT/check_frag8.txt" | tail -6
    timeout 330 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192 --kernels default,frag8 --sweep \
      --sweep-rows 1,2,3,4 --tiles "${TILES:-}" --out "$OUT/frag8_sweep.json" > "$OUT/frag8_sweep.txt" 2>&1
    grep -A60 "best tile" "$OUT/frag8_sweep.txt"; grep -B2 -A30 "^| shape | fmt | kernel | M" "$OUT/frag8_sweep.txt" | head -60
    grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  frag8c)
    # frag8 split into up to 32 parts on 8192x8192 and the drafter shapes (1 and 4 rows) beside the defaults; GPU tests of quant/
    timeout 230 python3 bench/gemv_bench.py --shapes 8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels default,frag8 --sweep --sweep-rows 1,4 --tiles "${TILES:-}" --out "$OUT/frag8_split.json" \
      > "$OUT/frag8_split.txt" 2>&1; grep -A80 "best tile" "$OUT/frag8_split.txt" | grep "| 1 |\|| 4 |"
    timeout 330 python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu_quant.txt"
    grep -c "WRONG\|FAILED\|NONDET" "$OUT"/*.txt ;;
  final8)
    # session 8's defaults (frag8): CUDA check of every frag8 tile and the defaults, the table of record on the head,
    # 8192x8192 and the drafter shapes (cuBLAS beside), GPU tests of quant/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
    timeout 150 python3 bench/check_i8_cuda.py --kernels frag8 2>&1 | tee "$OUT/check_frag8.txt" | tail -3
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
  frag8xb)
    timeout 330 python3 bench/gemv_bench.py --shapes 262144x640,8192x8192,640x2048,2048x640,1024x640,640x1024,256x640 \
      --kernels frag8x --sweep --sweep-rows 1,4 --tiles "${TILES:-}" --out "$OUT/frag8x_sweep.json" > "$OUT/frag8x_sweep.txt" 2>&1
    grep -A60 "best tile" "$OUT/frag8x_sweep.txt"
    timeout 220 python3 bench/check_i8_cuda.py --kernels frag8x 2>&1 | tee "$OUT/check_frag8x.txt" | tail -3
    grep -c "WRONG\|FAILED" "$OUT"/*.txt ;;
  s10-start)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/
    llama_build 12 || exit 1
    setsid nohup bash -c "PYTHONPATH=$PYTHONPATH python3 -m pytest -q -m gpu tests/quant tests/sampling tests/check \
      -p no:cacheprovider --timeout 240 -rf > /tmp/logs/pytest_nomodel.txt 2>&1; echo TESTS_DONE >> /tmp/logs/pytest_nomodel.txt" \
      > /dev/null 2>&1 &
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
    sleep 20; tail -n 3 /tmp/logs/*.txt /tmp/logs/*.log ;;
  s10-recv)
    cp .pieces/p$1/piece.$1 /tmp/gguf/; ls /tmp/gguf; tail -n 2 /tmp/logs/*.txt /tmp/logs/*.log ;;
  s10-tests)
    join_model || exit 1
    timeout ${TEST_S:-480} python3 -m pytest -q -m gpu tests --ignore=tests/quant --ignore=tests/sampling \
      --ignore=tests/check --ignore=tests/server --model-path /tmp/gguf/model.gguf -p no:cacheprovider --timeout 240 --durations=15 -rf \
      2>&1 | tee /tmp/logs/pytest_model.txt | tail -40
    tail -30 /tmp/logs/pytest_nomodel.txt; tail -n 3 /tmp/logs/llama-build.log
    cp /tmp/logs/* "$OUT"/ ;;
  s10-bench)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    tail -1 /tmp/logs/llama-build.log
    timeout ${BENCH_S:-560} python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 \
      --draft-tokens ${KS:-1,2,3,4} --no-adaptive --max-tokens 256 --n-prompts ${NP:-20} --pp 512 --floor \
      --llama-bench $L/llama-bench --llama-completion $L/llama-completion --llama-args "-ngl 99" \
      --json "$OUT/bench_fixed.json" --plot "$OUT/bench_fixed.png" 2>&1 | tee "$OUT/bench_fixed.txt" | tail -32 ;;
  s10-bench2)
    M=/tmp/gguf/model.gguf
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    for set in mtbench humaneval; do
      timeout ${BENCH2_S:-150} python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 \
        --draft-tokens 4 --adaptive --max-tokens 256 --n-prompts 20 --prompts $set --pp 0 \
        --json "$OUT/bench_adaptive_$set.json" 2>&1 | tee "$OUT/bench_adaptive_$set.txt" | tail -9
    done
    timeout 100 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 --no-adaptive \
      --split --max-tokens 256 --n-prompts 8 --pp 0 --json "$OUT/bench_split.json" 2>&1 | tail -7
    timeout 120 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 4 \
      --adaptive --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 \
      --json "$OUT/bench_12k.json" 2>&1 | tail -9
    for d in none none mtp; do python3 bench/ttft.py --model $M --draft $d 2>&1 | tail -1; done | tee "$OUT/ttft.txt"
    timeout 150 python3 bench/exact_vs_lossy.py --model $M --out "$OUT/exact_vs_lossy.json" 2>&1 | tail -5
    timeout 90 python3 bench/sample_bench.py 2>&1 | tee "$OUT/sample_bench.txt" | tail -12 ;;
  s17-start|s18-start)  # the A/B of each session's variants ($AB overrides)
    [ "$step" = s17-start ] && ab="tails=1;combine_split=2,combine_chunks=32;tails=1,combine_split=2,combine_chunks=32" \
      || ab="persistent=1;persistent=1,prefetch=0"
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/; llama_build 16 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 420 python3 bench/step_bench.py --positions 256,7000 --prefill-rows 128 --ab "${AB:-$ab}" \
      --out "$OUT/step.json" 2>&1 | grep -v Warn | tee "$OUT/step.txt" | head -40
    python3 bench/experiments/pick_ab.py "$OUT/step.json" --sed /tmp/tiles.sed; cat /tmp/tiles.sed ;;
  s27-start)  # (carry .carry .whl .ab_before DIR...) llama.cpp's build in the background; the first pieces
    mkdir -p /tmp/logs; for d in "$@"; do cp "$d"/* /tmp/gguf/; done
    llama_build 16 "llama-bench llama-completion llama-quantize llama-perplexity llama-tokenize" || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import gguf, torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" ;;
  s27-tests)  # (pieces copied) join + check; GPU tests
    join_models || exit 1
    # the default model's bits against the session's start (.ab_before: a9ad8ca's package)
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r .ab_before/* /tmp/before/
    (cd /tmp && PYTHONPATH=/tmp/site:/tmp/before timeout 120 python3 $OLDPWD/bench/ab_logits.py \
      --model /tmp/gguf/gemma.gguf --out /tmp/ab_before.pt 2>&1 | tail -1)
    timeout 120 python3 bench/ab_logits.py --model /tmp/gguf/gemma.gguf --out /tmp/ab_after.pt 2>&1 | tail -1
    python3 bench/ab_logits.py --compare /tmp/ab_before.pt /tmp/ab_after.pt | tee "$OUT/ab_bits.txt"
    timeout 300 python3 -m pytest -q -m gpu tests/models tests/spec tests/quant/test_dequant.py -n 4 \
      --model-path /tmp/gguf/gemma.gguf -p no:cacheprovider --timeout 280 -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_gpu_gemma.txt" | tail -6
    for m in smol qwen15; do
      timeout 150 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py -n 4 --model-path /tmp/gguf/$m.gguf \
        -p no:cacheprovider --timeout 140 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_$m.txt" | tail -4
    done; tail -n 1 /tmp/logs/llama-build.log ;;
  s27-table)  # (built) per model: llama-bench and our bench (MT-Bench x 20, 256 tokens); perplexity; tokenizer ids
    L=/tmp/llama.cpp/build/bin
    for i in $(seq 80); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    for m in gemma qwen15 smol; do
      modes=plain,ngram; [ $m = gemma ] && modes=plain,mtp
      timeout 170 python3 -m mtp_turbo.cli bench --model /tmp/gguf/$m.gguf --modes $modes --temps 0,0.6 --draft-tokens 3 \
        --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
        --llama-args "-ngl 99" --json "$OUT/bench_$m.json" 2>&1 | tr '\r' '\n' \
        | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]" | tee "$OUT/bench_$m.txt" | tail -9
    done
    for m in gemma smol qwen15; do
      timeout 60 $L/llama-perplexity -m /tmp/gguf/$m.gguf -f bench/data/tempest.txt -c 512 --chunks 16 -ngl 99 -fa 1 \
        > "$OUT/ppl_llama_$m.txt" 2>&1; grep -o "Final estimate.*" "$OUT/ppl_llama_$m.txt" | sed "s/^/$m llama.cpp: /"
      timeout 90 python3 -m mtp_turbo.cli perplexity bench/data/tempest.txt --model /tmp/gguf/$m.gguf --ctx 512 \
        --chunks 16 --no-progress 2>&1 | tail -1 | sed "s/^/$m ours: /"
    done | tee "$OUT/ppl.txt"
    python3 bench/llama_tokens.py --tokenize $L/llama-tokenize --models /tmp/gguf/smol.gguf,/tmp/gguf/qwen15.gguf \
      --out "$OUT/llama_cpp_bpe_tokens.json" 2>&1 | tail -2 ;;
  s27-tune)  # the fused step's tiles on Qwen2.5-Coder-1.5B (1536 wide, 8960 FFN, 151936-row bf16 head): a sweep of
    # $TILES (decode_bench.py --tiles), the per-kernel profile and each GEMV part's time at the defaults
    timeout 400 python3 bench/decode_bench.py --model /tmp/gguf/qwen15.gguf --skip-hf --ks 3 --reps 2 --profile \
      --sweep-tiles --tiles "${TILES:-[{}, {\"bn_tall\": 16}, {\"bk_tall\": 256}, {\"bn_tall\": 16, \"bk_tall\": 256}, {\"bk_gated\": 256}, {\"bn_gated\": 16}, {\"bn_head\": 64}, {\"bk_head\": 256}]}" \
      --out "$OUT/decode_qwen15.json" 2>&1 | grep -v Warn | tee "$OUT/decode_qwen15.txt" | tail -40 ;;
  s27-synth)  # (built) synthetic models at published shapes, Q4_K_M by llama-quantize: plain decode, pp512, llama-bench
    L=/tmp/llama.cpp/build/bin
    for shape in ${SHAPES:-gemma3-1b gemma3-4b qwen2.5-7b}; do
      like=/tmp/gguf/gemma.gguf; case $shape in qwen*) like=/tmp/gguf/qwen15.gguf ;; esac
      timeout 120 python3 bench/synth_model.py --like $like --shape $shape --out /tmp/synth-f16.gguf 2>&1 | tail -1
      timeout 200 $L/llama-quantize /tmp/synth-f16.gguf /tmp/synth-$shape.gguf Q4_K_M 16 > /tmp/logs/quant-$shape.log 2>&1 \
        || { tail -3 /tmp/logs/quant-$shape.log; continue; }
      rm -f /tmp/synth-f16.gguf; ls -la /tmp/synth-$shape.gguf
      timeout 150 python3 -m mtp_turbo.cli bench --model /tmp/synth-$shape.gguf --modes plain --temps 0 \
        --max-tokens 128 --n-prompts 8 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
        --llama-args "-ngl 99" --json "$OUT/bench_synth_$shape.json" 2>&1 | tr '\r' '\n' \
        | grep -v "run/s\]\|s/run\]\|tensor/s\]\|it/s\]" | tee "$OUT/bench_synth_$shape.txt" | tail -6
    done ;;
  s25-begin)  # (carry .carry .whl .ab_before .ab_a .pieces/p5) llama.cpp's build in the background; piece 5;
    # bench/step_bench.py on 327c78d (.ab_before), 43deda1 (.ab_a) and this tree, alternated twice, outputs compared
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 12 || exit 1
    step_trees before a after ;;
  s26-ab)  # (carry .whl .ab_a .ab_h) this tree's step with the PDL variants beside its default (step_bench --ab); then
    # 43deda1 (.ab_a) once and 013813e (.ab_h) twice at 256 cells: outputs and K/V cells compared bit for bit
    timeout 300 python3 bench/step_bench.py --positions 256,7000 --prefill-rows 128 \
      --ab "pdl=1;pdl=2;pdl=1,pdl_w0=1;pdl_w0=1" --save /tmp/step_after1.pt --out "$OUT/step_pdl.json" 2>&1 \
      | grep -v Warn > "$OUT/step_pdl.txt"; grep "position\|prefill chunk\|variant\|replayed" "$OUT/step_pdl.txt"
    grep -A8 "eager 1-row step at 256" "$OUT/step_pdl.txt"
    for t in a h h; do
      [ -d /tmp/$t ] || { mkdir -p /tmp/$t && cp -r .ab_$t/* /tmp/$t/ && cp bench/step_bench.py /tmp/$t/bench/; }
      n=1; [ -f /tmp/step_${t}1.pt ] && n=2
      (cd /tmp/$t && PYTHONPATH=/tmp/site:/tmp/$t timeout 150 python3 bench/step_bench.py --positions 256 --prefill-rows 128 \
        --ab "" --save /tmp/step_$t$n.pt --out "$OUT/step_$t$n.json" 2>&1 | grep -v Warn > "$OUT/step_$t$n.txt")
      echo "== $t $n"; grep "position\|prefill chunk" "$OUT/step_$t$n.txt"
    done
    python3 - <<'PY' 2>&1 | tee "$OUT/bits.txt"
import torch
r = {n: torch.load(f"/tmp/step_{n}.pt") for n in ("after1", "a1", "h1", "h2")}
def cmp(x, y):
    out = {}
    for k in r[x]:
        if k not in r[y]:
            continue
        a, b = r[x][k], r[y][k]
        if torch.equal(a, b):
            out[k] = True
        elif k[0] in "kv" and a.dim() == 4:  # [layers, rows, HKV, DH]: the first layer and rows that differ
            bad = [(i, j) for i in range(a.shape[0]) for j in range(a.shape[1]) if not torch.equal(a[i, j], b[i, j])]
            out[k] = f"differ from layer {bad[0][0]} ({len(bad)} cells, rows {sorted({j for _, j in bad})})"
        else:
            rows = [j for j in range(a.shape[0]) if not torch.equal(a[j], b[j])]
            out[k] = f"differ in rows {rows}"
    return out
for x, y in (("a1", "after1"), ("a1", "h1"), ("h1", "h2")):
    print(f"{x} vs {y}:", cmp(x, y))
PY
    ;;
  s26-early)  # (carry .carry .whl .pieces/p5) llama-bench's build in the background; piece 5; step_bench: the default
    # (pdl 1 + pdl_w0) beside pdl_early (the attention kernels' positions and older cells before the wait)
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 16 llama-bench > /dev/null 2>&1 < /dev/null || exit 1
    timeout 200 python3 bench/step_bench.py --positions 256,7000 --prefill-rows 128 --ab "pdl_early=1" \
      --out "$OUT/step_early.json" 2>&1 | grep -v Warn > "$OUT/step_early.txt"
    grep "position\|prefill chunk\|variant\|replayed" "$OUT/step_early.txt" ;;
  s24-ab)  # (carry .whl .ab_before) bench/step_bench.py on the session's start (.ab_before, 327c78d) and this tree,
    # alternated twice; the outputs of both compared bit for bit; the fused step's GPU tests (random weights)
    step_trees before after
    timeout 200 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py -p no:cacheprovider -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_fused_gpu.txt" | tail -3 ;;
  s25-lease)  # (carry .carry .whl .pieces/p5) llama-bench's build in the background (16 jobs, llama-bench only); piece 5
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 16 llama-bench || exit 1; echo building ;;
  s25-table)  # (llama-bench built) MT-Bench plain / MTP, k = 2 and 3, temp 0 and 0.6, pp512, beside llama-bench
    # tg128 / pp512 (-fa 1 -ngl 99 -r 5) in the same call
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    for i in $(seq 80); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    timeout 60 $L/llama-bench -m $M -fa 1 -ngl 99 -p 512 -n 128 -r 5 -o json > "$OUT/llama_bench.json" 2> "$OUT/llama_bench.err"
    python3 -c "import json; [print('llama-bench', r['n_prompt'], r['n_gen'], round(r['avg_ts'], 1), '+-', round(r['stddev_ts'], 1)) for r in json.load(open('$OUT/llama_bench.json'))]"
    timeout 240 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 2,3 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --json "$OUT/bench_mtbench.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_mtbench.txt" | tail -16 ;;
  s25-tests)  # (pieces copied) join; the GPU tests that need the model
    join_model || exit 1
    timeout 330 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8 ;;
  s24-begin)  # piece 5; the carried sentencepiece / protobuf imported; the tokenizer's model built from piece 5's
    # metadata is not possible (the header is in p0), so only the import is checked here
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import sentencepiece, google.protobuf; from sentencepiece import sentencepiece_model_pb2; print('sentencepiece', sentencepiece.__version__, 'protobuf', google.protobuf.__version__)" ;;
  s24-check)  # (pieces copied) join; GPU tests (models, spec); time to first token, the session's start (.ab_before:
    # tokenizers) and this tree (SentencePiece) alternately, after one warm-up run each (Triton cache, tokenizer cache)
    join_model || exit 1
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r .ab_before/* /tmp/before/ && cp -r mtp_turbo/data /tmp/before/mtp_turbo/
    for t in after before; do
      d=$PWD; [ $t = before ] && d=/tmp/before
      (cd $d && PYTHONPATH=/tmp/site:$d timeout 90 python3 bench/ttft.py --model /tmp/gguf/model.gguf 2>&1 | tail -1 | sed "s/^/warm-up $t: /")
    done | tee "$OUT/ttft_warmup.txt"
    for i in 1 2 3; do for t in after before; do
      d=$PWD; [ $t = before ] && d=/tmp/before
      (cd $d && PYTHONPATH=/tmp/site:$d timeout 60 python3 bench/ttft.py --model /tmp/gguf/model.gguf 2>&1 | tail -1 | sed "s/^/$t: /")
    done; done | tee "$OUT/ttft_ab.txt"
    for d in mtp mtp; do timeout 60 python3 bench/ttft.py --model /tmp/gguf/model.gguf --draft $d 2>&1 | tail -1; done \
      | tee "$OUT/ttft_mtp.txt"
    for o in serial none serial none; do
      timeout 60 python3 bench/experiments/startup_order.py --model /tmp/gguf/model.gguf --order $o 2>&1 | tail -1
    done | tee "$OUT/startup_order.txt"
    timeout 330 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8 ;;
  s23-begin)  # llama.cpp's build (background), piece 5; the step A/B on random weights: ffn_parts off (the old
    # down GEMV with its tail), and the tall tile at 16 columns with the parts
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 12 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 300 python3 bench/step_bench.py --positions 256,7000 --prefill-rows 128 --ab "${AB:-ffn_parts=0;bn_tall=16}" \
      --out "$OUT/step_parts.json" 2>&1 | grep -v Warn | tee "$OUT/step_parts.txt" | head -60 ;;
  s23-check)  # (pieces copied) join; the GPU tests that need the model; start-up by order of its parts; time to first token
    join_model || exit 1
    timeout 330 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8
    for o in thread serial none thread serial none; do
      timeout 60 python3 bench/experiments/startup_order.py --model /tmp/gguf/model.gguf --order $o 2>&1 | tail -1
    done | tee "$OUT/startup_order.txt"
    for d in none none mtp; do timeout 60 python3 bench/ttft.py --model /tmp/gguf/model.gguf --draft $d 2>&1 | tail -1; done \
      | tee "$OUT/ttft.txt" ;;
  s23-tiles)  # llama.cpp's build (background), piece 5; step_bench at 256 cells: tall / small / gated tiles
    # not swept under the tails ($AB overrides)
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 12 || exit 1
    ab="bk_tall=1024,stages_tall=2;bk_tall=1024,stages_tall=1;bk_tall=1024,stages_tall=1,warps_tall=8;bn_tall=16"
    ab="$ab;bn_tall=16,bk_tall=1024,stages_tall=2;stages_tall=4;stages_small=2;stages_gated=2"
    timeout 400 python3 bench/step_bench.py --positions 256 --prefill-rows 128 --ab "${AB:-$ab}" \
      --out "$OUT/step_tiles.json" 2>&1 | grep -v Warn | tee "$OUT/step_tiles.txt" | grep "variant\|decode step" ;;
  s22-begin)  # llama.cpp's build (background), piece 5, the drafter step's GPU test and timing on random weights
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 12 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 120 python3 -m pytest -q -m gpu tests/spec/drafters/test_mtp_step_tails.py -p no:cacheprovider -rf 2>&1 \
      | grep -v Warning | tee "$OUT/pytest_gpu_tails.txt" | tail -3
    timeout 200 python3 bench/experiments/draft_step_time.py --out "$OUT/draft_step.json" 2>&1 | grep -v Warn \
      | tee "$OUT/draft_step.txt" | grep "draft step\|BS= 32 warps=4\|BS= 64 warps=4" ;;
  s22-check)  # (pieces copied) join; the GPU tests that need the model; the file's read speed; time to first token
    join_model || exit 1
    timeout 330 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8
    for i in 1 2; do dd if=/tmp/gguf/model.gguf of=/dev/null bs=16M 2>&1 | tail -1; done | tee "$OUT/read_speed.txt"
    for d in none none mtp; do timeout 60 python3 bench/ttft.py --model /tmp/gguf/model.gguf --draft $d 2>&1 | tail -1; done \
      | tee "$OUT/ttft.txt" ;;
  s22-before)  # the session's start: .ab_before's package (git archive 81cd06c, without data/) with this tree's data/
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r .ab_before/mtp_turbo /tmp/before/ && cp -r mtp_turbo/data /tmp/before/mtp_turbo/
    (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 300 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf \
      --modes plain,mtp --temps 0,0.6 --draft-tokens 2,3 --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
      --json "$OUT/bench_before.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -10) ;;
  s22-table)  # (llama.cpp built) this tree: the table of record beside llama-bench (tg256, as before) and llama-completion
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    timeout 400 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 2,3 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
      --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_mtbench.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_mtbench.txt" | tail -22 ;;
  s22-depth)  # llama-bench at depth 0 and 7000 (tg128, pp512, pp7000); ours: pp7000, decode after a 6924-token prompt
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    timeout 240 $L/llama-bench -m $M -fa 1 -ngl 99 -p 512,7000 -n 128 -d 0,7000 -r 3 -o json > "$OUT/llama_depth.json" \
      2> "$OUT/llama_depth.err"; python3 -c "import json; [print(r['n_prompt'], r['n_gen'], r['n_depth'], round(r['avg_ts'], 1)) for r in json.load(open('$OUT/llama_depth.json'))]"
    # a 6924-token prompt (The Tempest's first 23000 characters): decode at ~7000 cells of depth
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:23000]+'\n\nSummary of the play so far:'], open('/tmp/long7k.json','w'))"
    timeout 200 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 --max-tokens 128 \
      --prompts /tmp/long7k.json --n-prompts 1 --pp 7000 --ctx-size 8192 --json "$OUT/bench_depth7k.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -8 ;;
  s22-profile)  # device time per kernel per round at the default k; HumanEval plain / MTP / n-gram
    timeout 200 python3 bench/round_profile.py --model /tmp/gguf/model.gguf --modes mtp,ngram \
      --out "$OUT/round_profile.json" 2>&1 | grep -v "Warn\|USDT\|_warn_once" | tee "$OUT/round_profile.txt" | grep -v "^    "
    timeout 250 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf --modes plain,mtp,ngram --temps 0,0.6 \
      --draft-tokens 2,3 --max-tokens 256 --n-prompts 20 --prompts humaneval --pp 0 --json "$OUT/bench_humaneval.json" \
      2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -14 ;;
  s22-krange)  # (pieces copied) join; MT-Bench: MTP k = 1..4, adaptive K = 4, the round's parts timed apart (--split)
    join_model || exit 1
    B="python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0"
    timeout 240 $B --modes plain,mtp --temps 0,0.6 --draft-tokens 1,2,3,4 --json "$OUT/bench_k1234.json" 2>&1 \
      | tr '\r' '\n' | grep "^| \(plain\|mtp\)"
    timeout 150 $B --modes mtp --temps 0,0.6 --draft-tokens 4 --adaptive --json "$OUT/bench_adaptive.json" 2>&1 \
      | tr '\r' '\n' | grep "^| mtp"
    [ -n "${SPLIT:-}" ] && timeout 150 $B --modes mtp --temps 0,0.6 --draft-tokens 2,3 --split --json "$OUT/bench_split.json" \
      2>&1 | tr '\r' '\n' | grep "^| mtp" ;;
  s21-begin)  # llama.cpp's build (background), piece 5, the checks that need no model, the A/Bs on random inputs
    mkdir -p /tmp/logs; cp .pieces/p5/* /tmp/gguf/; llama_build 12 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 200 python3 -m pytest -q -m gpu tests/quant tests/sampling tests/spec/test_glue.py tests/models/test_greedy.py \
      -n 4 -p no:cacheprovider --timeout 150 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu_nomodel.txt" | tail -6
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r .ab_before/mtp_turbo /tmp/before/
    timeout 150 python3 bench/sample_bench.py --before /tmp/before --no-torch --kernels --json "$OUT/sample_ab.json" \
      --cases "top-k 40 chain,default chain,drafter greedy + penalties" \
      2>&1 | grep -v Warn | tee "$OUT/sample_ab.txt" | tail -45
    timeout 150 python3 bench/step_bench.py --positions 256,7000 --ab "head_q8=0" --out "$OUT/step_head.json" 2>&1 \
      | grep -v Warn | tee "$OUT/step_head.txt" | grep -v "^  [a-z_]\+ \+[0-9]" | head -30 ;;
  s21-check)  # (pieces copied) join; the GPU tests that need the model; time to first token
    join_model || exit 1
    timeout 330 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 300 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -10
    for d in none mtp; do timeout 60 python3 bench/ttft.py --model /tmp/gguf/model.gguf --draft $d --profile 20 \
      > "$OUT/ttft_$d.txt" 2>&1; tail -1 "$OUT/ttft_$d.txt"; done ;;
  s21-ab)  # the session's start (.ab_before's files over a copy of this tree) and this tree, back to back
    # .ab_before/mtp_turbo: the package at the session's start (git archive 6c161cf) without data/, which has not changed
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r .ab_before/mtp_turbo /tmp/before/ && cp -r mtp_turbo/data /tmp/before/mtp_turbo/
    for t in before after; do
      dir=$PWD; [ $t = before ] && dir=/tmp/before
      (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 280 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf \
        --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 2,3 --max-tokens 256 --n-prompts 20 --prompts mtbench \
        --pp 0 --json "$OUT/ab_$t.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -12 | sed "s/^/$t: /")
    done ;;
  s21-table)  # (llama.cpp built) the table of record: plain / MTP / n-gram, k = 2 and 3, beside llama.cpp
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    timeout 330 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 2,3 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
      --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_mtbench.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_mtbench.txt" | tail -20 ;;
  s21-profile)  # device time per kernel per round at the default k; HumanEval plain / MTP / n-gram
    timeout 200 python3 bench/round_profile.py --model /tmp/gguf/model.gguf --modes mtp,ngram \
      --out "$OUT/round_profile.json" 2>&1 | grep -v "Warn\|USDT\|_warn_once" | tee "$OUT/round_profile.txt" | grep -v "^    "
    timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf --modes plain,mtp,ngram --temps 0,0.6 \
      --draft-tokens 2,3 --max-tokens 256 --n-prompts 20 --prompts humaneval --pp 0 --json "$OUT/bench_humaneval.json" \
      2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -12 ;;
  s20-begin)  # llama.cpp's build (background) and nothing else (a piece would put the call over 64 MiB)
    mkdir -p /tmp/logs; llama_build 16 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv ;;
  s20-check)  # (pieces copied) join; the GPU tests of the round, the drafter and the fused step
    join_model || exit 1
    timeout 200 python3 -m pytest -q -m gpu tests/spec tests/models -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 150 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8 ;;
  s20-ab)  # rounds and plain programs read before the next launch (pipeline off) against launched ahead (on)
    for t in off on; do
      timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf --pipeline $t \
        --modes plain,mtp --temps 0,0.6 --draft-tokens 3 --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
        --json "$OUT/ab_$t.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -6 | sed "s/^/$t: /"
    done ;;
  s20-table)  # (llama.cpp built) the table of record with k = 2 and 3 rows; n-gram before (.ab_before) / after
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done
    timeout 300 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 2,3 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench \
      --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_mtbench.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_mtbench.txt" | tail -18
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r mtp_turbo /tmp/before/ && cp -r .ab_before/mtp_turbo /tmp/before/
    (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 120 python3 -m mtp_turbo.cli bench --model $M \
      --modes plain,ngram --temps 0,0.6 --draft-tokens 3 --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
      --json "$OUT/ngram_before.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -6 | sed "s/^/before: /")
    for d in none mtp; do timeout 60 python3 bench/ttft.py --model $M --draft $d > "$OUT/ttft_$d.txt" 2>&1; tail -1 "$OUT/ttft_$d.txt"; done ;;
  s19-ab)  # before (.ab_before's files over a copy of this tree) and after, back to back
    rm -rf /tmp/before && mkdir -p /tmp/before && cp -r mtp_turbo /tmp/before/ && cp -r .ab_before/mtp_turbo /tmp/before/
    for t in before after; do
      dir=$PWD; [ $t = before ] && dir=/tmp/before
      (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf \
        --modes plain,mtp --temps 0,0.6 --draft-tokens 3 --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
        --json "$OUT/ab_$t.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -6 | sed "s/^/$t: /")
    done ;;
  s19-check)  # (pieces copied) join; the drafter's and the speculative-text GPU tests; the round's host parts at temp 0
    join_model || exit 1
    timeout 100 python3 -m pytest -q -m gpu tests/spec/drafters tests/models/test_fused_gpu.py -k "mtp or speculative" \
      -n 4 --model-path /tmp/gguf/model.gguf -p no:cacheprovider --timeout 90 -rf 2>&1 | grep -v Warning \
      | tee "$OUT/pytest_gpu.txt" | tail -4
    timeout 60 python3 bench/experiments/round_host_time.py --model /tmp/gguf/model.gguf --prompts 3 --temps 0 2>&1 \
      | grep -v Warn | tee "$OUT/round_host_time.txt" | tail -16 ;;
  s19-profile)
    timeout 240 python3 bench/round_profile.py --model /tmp/gguf/model.gguf --out "$OUT/round_profile.json" 2>&1 \
      | grep -v "Warn\|USDT\|_warn_once" | tee "$OUT/round_profile.txt" | grep -v "^    " ;;
  s18-begin)  # piece p0 and llama.cpp's build (background), nothing else
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/; llama_build 16 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv ;;
  s18-probe)  # no model: the persistent kernel's contention variants (1-row / 4-row steps at 256 cells)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 400 python3 bench/step_bench.py --positions ${POSITIONS:-256} --prefill-rows 128 --ab "$AB" \
      --out "$OUT/step.json" 2>&1 | grep -v Warn | tee "$OUT/step.txt" | grep -v "^  [a-z_]\+ \+[0-9]" | head -40 ;;
  s18-bench)  # the table of record (fixed k = 3, llama.cpp beside it), then adaptive k right after it
    record_table
    timeout 200 python3 -m mtp_turbo.cli bench --model /tmp/gguf/model.gguf --modes plain,mtp --temps 0,0.6 \
      --draft-tokens 3 --adaptive --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 \
      --json "$OUT/bench_mtbench_adaptive.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -8
    python3 -c "import json; [print(r['mode'], r['temp'], r.get('k_counts')) for r in json.load(open('$OUT/bench_mtbench_adaptive.json'))['rows']]" ;;
  s17-tests)
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py
    grep -n "l2_prefetch: int\|tails: bool\|combine_split: int\|combine_chunks: int" mtp_turbo/models/fused.py | tr '\n' ' '; echo
    join_model || exit 1
    timeout 240 python3 -m pytest -q -m gpu tests/models tests/spec -n 4 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 200 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -8
    tail -n 1 /tmp/logs/llama-build.log ;;
  s17-more)
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain --temps 0 --max-tokens 64 --n-prompts 2 --pp 7000 \
      --ctx-size 8192 --llama-bench $L/llama-bench --llama-args "-ngl 99" --json "$OUT/bench_pp7000.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -6
    timeout 300 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 --adaptive \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 --json "$OUT/bench_mtbench_adaptive.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -9
    for d in none none mtp; do timeout 60 python3 bench/ttft.py --model $M --draft $d 2>&1 | tail -1; done ;;
  s17-probe)
    timeout 400 python3 bench/step_bench.py --positions 256 --prefill-rows 128 \
      --ab "bn_tall=16;bn_tall=16,bk_tall=256;bn_tall=64,bk_tall=256;warps_tall=8;bn_tall=16,warps_tall=2;bn_small=32;bn_small=32,bk_small=256" \
      --out "$OUT/step_tiles.json" 2>&1 | grep -v Warn | grep "position\|variant\|replayed"
    timeout 200 python3 bench/experiments/tail_cost.py 2>&1 | grep -v Warn | tail -4 ;;
  s16-profile)
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py
    M=/tmp/gguf/model.gguf
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    timeout 240 python3 bench/round_profile.py --model $M --long /tmp/long.json --out "$OUT/round_profile.json" 2>&1 \
      | grep -v "Warn\|USDT" | tee "$OUT/round_profile.txt" | grep -v "^    " 
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 --split \
      --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 --json "$OUT/bench_12k_split.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -7 ;;
  s15-sweep)  # piece p0, llama.cpp's build; the GEMV tile sweep; its pick A/B in the step (kept in /tmp/tiles.sed if it wins)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/; llama_build 16 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 330 python3 bench/experiments/linear_sweep.py --out "$OUT/linear_sweep.json" 2>&1 | grep -v Warn | tee "$OUT/linear_sweep.txt"
    AB=$(python3 bench/experiments/pick_tiles.py "$OUT/linear_sweep.json" --sed /tmp/tiles.sed); echo "pick: $AB"
    timeout 200 python3 bench/step_bench.py --positions 256 --prefill-rows 128 --ab "$AB" --out "$OUT/step.json" 2>&1 \
      | grep -v Warn | tee "$OUT/step.txt" | head -8
    python3 -c "
import json; r = json.load(open('$OUT/step.json'))['rows'][0]; v = [x for k, x in r.items() if k.startswith('ab ')][0]
win = v['ms1'] < 0.98 * v['ms1_default']; print('tiles', 'kept' if win else 'dropped', v['ms1'], v['ms1_default'])
win or open('/tmp/tiles.sed', 'w').close()" ;;
  s15-tests)  # the picked tiles (if any) as defaults; join + check; the model's GPU tests; the step bitwise checks at 256 / 7000
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py; grep -n "int = " mtp_turbo/models/fused.py | sed -n 1,18p | tr '\n' ' '; echo
    join_model || exit 1
    timeout 200 python3 -m pytest -q -m gpu tests/models tests/spec -n 3 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 180 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -6
    timeout 150 python3 bench/step_bench.py --ab "" --out "$OUT/step_after.json" 2>&1 | grep -v Warn | tee "$OUT/step_after.txt" | head -9
    tail -n 1 /tmp/logs/llama-build.log ;;
  s15-bench)  # the table of record with the picked tiles, llama.cpp beside it
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    record_table ;;
  s15-more)
    [ -f /tmp/tiles.sed ] && sed -i -f /tmp/tiles.sed mtp_turbo/models/fused.py
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    humaneval_12k ;;
  s15-profile)  # join + check; the Q8_0-head test; where a round's device time goes, short and 12k prompts
    join_model || exit 1
    timeout 100 python3 -m pytest -q -m gpu tests/models/test_fused_gpu.py -k q8_head --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider 2>&1 | tail -3
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    timeout 300 python3 bench/round_profile.py --model /tmp/gguf/model.gguf --long /tmp/long.json \
      --out "$OUT/round_profile.json" 2>&1 | grep -v "Warn\|USDT" | tee "$OUT/round_profile.txt" ;;
  s14-start)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/
    llama_build 16 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 300 python3 bench/step_bench.py --out "$OUT/step.json" 2>&1 | grep -v Warn | tee "$OUT/step.txt" ;;
  s14-bench)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    record_table
    timeout 60 python3 -m mtp_turbo.cli bench --model $M --modes plain --temps 0,0.6 --decode-steps 1 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 0 --json "$OUT/bench_mtbench_steps1.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -5 ;;
  s14-more)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    humaneval_12k
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain --temps 0 --max-tokens 64 --n-prompts 2 --pp 7000 \
      --ctx-size 8192 --llama-bench $L/llama-bench --llama-args "-ngl 99" --json "$OUT/bench_pp7000.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -9
    for d in none mtp; do timeout 60 python3 bench/ttft.py --model $M --draft $d --profile 25 > "$OUT/ttft_$d.txt" 2>&1; tail -1 "$OUT/ttft_$d.txt"; done ;;
  s13-start)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/
    llama_build 16 llama-bench || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv ;;
  s13-tests|s14-tests)
    join_model || exit 1
    timeout 300 python3 -m pytest -q -m gpu tests/models tests/spec -n 3 --model-path /tmp/gguf/model.gguf \
      -p no:cacheprovider --timeout 280 --durations=6 -rf 2>&1 | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -14
    tail -n 1 /tmp/logs/llama-build.log ;;
  s13-bench)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    for i in $(seq 60); do grep -q BUILD_DONE /tmp/logs/llama-build.log && break; sleep 5; done; tail -n 1 /tmp/logs/llama-build.log
    timeout 240 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 256 --n-prompts 20 --prompts mtbench --pp 512 --floor --llama-bench $L/llama-bench --llama-args "-ngl 99" \
      --json "$OUT/bench_mtbench.json" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tail -10
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 --json "$OUT/bench_12k.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -7 ;;
  s12-start)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/
    llama_build 12 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    timeout 240 python3 bench/step_bench.py --out "$OUT/step.json" 2>&1 | tee "$OUT/step.txt" ;;
  s12-recv|s14-recv)
    cp .pieces/p$1/piece.$1 /tmp/gguf/; ls /tmp/gguf; tail -n 1 /tmp/logs/llama-build.log ;;
  s12-tests)
    join_model || exit 1
    timeout 330 python3 -m pytest -q -m gpu tests --ignore=tests/sampling --ignore=tests/server -n 4 \
      --model-path /tmp/gguf/model.gguf -p no:cacheprovider --timeout 300 --durations=8 -rf 2>&1 \
      | grep -v Warning | tee "$OUT/pytest_gpu.txt" | tail -22; tail -n 1 /tmp/logs/llama-build.log ;;
  s12-bench)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf; tail -n 1 /tmp/logs/llama-build.log
    for set in mtbench humaneval; do
      timeout 280 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 \
        --max-tokens 256 --n-prompts 20 --prompts $set --pp 512 --floor --llama-bench $L/llama-bench \
        --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_$set.json" \
        --plot "$OUT/bench_$set.png" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_$set.txt" | tail -22
    done ;;
  s12-more)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 \
      --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 --json "$OUT/bench_12k.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -9
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain --temps 0 --max-tokens 64 --n-prompts 2 --pp 7000 \
      --ctx-size 8192 --llama-bench $L/llama-bench --llama-args "-ngl 99" --json "$OUT/bench_pp7000.json" 2>&1 \
      | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tail -9
    for d in none none mtp; do timeout 60 python3 bench/ttft.py --model $M --draft $d --profile 25 > "$OUT/ttft_$d.txt" 2>&1; tail -1 "$OUT/ttft_$d.txt"; done ;;
  s12-probe)
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
    timeout 200 python3 bench/step_bench.py --out "$OUT/step.json" 2>&1 | tee "$OUT/step.txt"
    timeout 270 python3 -m pytest -q -m gpu tests/sampling -n 4 -p no:cacheprovider --timeout 260 --durations=10 -rf \
      2>&1 | tee "$OUT/pytest_gpu_sampling.txt" | tail -25
    timeout 70 python3 bench/sample_bench.py 2>&1 | tee "$OUT/sample_bench.txt" | tail -14 ;;
  s11-start)
    mkdir -p /tmp/logs; cp .pieces/p0/piece.0 /tmp/gguf/
    llama_build 8 || exit 1
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" ;;
  s11-recv)
    cp .pieces/p$1/piece.$1 /tmp/gguf/; ls /tmp/gguf; tail -n 1 /tmp/logs/llama-build.log ;;
  s11-sampling)
    join_model || exit 1
    timeout ${TEST_S:-420} python3 -m pytest -q -m gpu tests/sampling -p no:cacheprovider --timeout 300 --durations=10 -rf \
      2>&1 | tee "$OUT/pytest_gpu_sampling.txt" | tail -25
    timeout 90 python3 bench/sample_bench.py 2>&1 | tee "$OUT/sample_bench.txt" | tail -14 ;;
  s11-tests)
    timeout ${TEST_S:-300} python3 -m pytest -q -m gpu tests --ignore=tests/sampling --ignore=tests/server \
      --model-path /tmp/gguf/model.gguf -p no:cacheprovider --timeout 240 --durations=10 -rf 2>&1 \
      | tee "$OUT/pytest_gpu.txt" | tail -25; tail -n 1 /tmp/logs/llama-build.log ;;
  s11-bench)
    L=/tmp/llama.cpp/build/bin; M=/tmp/gguf/model.gguf; tail -n 1 /tmp/logs/llama-build.log
    for set in mtbench humaneval; do
      timeout 270 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens ${KS:-1,2,3,4} \
        --max-tokens 256 --n-prompts 20 --prompts $set --pp 512 --floor --llama-bench $L/llama-bench \
        --llama-completion $L/llama-completion --llama-args "-ngl 99" --json "$OUT/bench_$set.json" \
        --plot "$OUT/bench_$set.png" 2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]\|tensor/s\]" | tee "$OUT/bench_$set.txt" | tail -24
    done ;;
  s11-more)
    M=/tmp/gguf/model.gguf
    python3 -c "import json; t=open('bench/data/tempest.txt').read(); json.dump([t[:39000]+'\n\nSummary of the play so far:'], open('/tmp/long.json','w'))"
    timeout 150 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp --temps 0,0.6 --draft-tokens 4 --adaptive \
      --max-tokens 256 --n-prompts 20 --pp 0 --json "$OUT/bench_adaptive.json" 2>&1 | tail -7
    timeout 120 python3 -m mtp_turbo.cli bench --model $M --modes plain,mtp,ngram --temps 0,0.6 --draft-tokens 3 --split \
      --max-tokens 256 --prompts /tmp/long.json --n-prompts 1 --ctx-size 16384 --pp 0 --json "$OUT/bench_12k.json" 2>&1 | tail -9
    for d in none none mtp; do timeout 60 python3 bench/ttft.py --model $M --draft $d --profile 25 > "$OUT/ttft_$d.txt" 2>&1; tail -1 "$OUT/ttft_$d.txt"; done ;;
  gputests)
    timeout ${TEST_S:-500} python3 -m pytest -q -m gpu tests/quant -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/pytest_gpu_quant.txt" ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
