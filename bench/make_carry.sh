#!/usr/bin/env bash
# The git-ignored files a GPU session carries (bench/gpu_session.sh), made on a fresh checkout:
#   .carry/llama.tar.gz   llama.cpp from the llama-cpp-python 0.3.36 sdist's vendor tree (models/, docs/, media/,
#                         benches/ and the GPU backends but CUDA's removed; the CPU backend kept: ggml needs it)
#   .whl/                 gguf and protobuf wheels for the device's Python 3.12 (it has no registry)
#   .pieces/meta/         the default model's and Qwen2.5-Coder-0.5B's metadata without tensors (bench/synth_model.py --like)
#   .pieces/gNN/gemma.NN  the default model in 28 MB pieces, one call each (sha256 a5fd3b62...)
# Needs the engine installed (the README's first command) and network for PyPI. Usage: bash bench/make_carry.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "llama.cpp sources..."
url=$(curl -s https://pypi.org/simple/llama-cpp-python/ | grep -o 'https://[^"#]*python-0.3.36.tar.gz' | head -1)
curl -s -o "$tmp/l.tar.gz" "$url"
tar xzf "$tmp/l.tar.gz" -C "$tmp"
src="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
rm -rf "$src/models" "$src/docs" "$src/media" "$src/benches"
for d in "$src"/ggml/src/ggml-*/; do
  case $d in *ggml-cuda/|*ggml-cpu/) ;; *) rm -rf "$d" ;; esac
done
mv "$src" "$tmp/llama.cpp"
mkdir -p .carry
tar czf .carry/llama.tar.gz -C "$tmp" llama.cpp

echo "wheels..."
mkdir -p .whl
pip download -q --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 gguf "protobuf>=4.21" -d .whl

echo "metadata files..."
mtp-turbo models install qwen2.5-coder-0.5b-instruct > /dev/null
mkdir -p .pieces/meta
python3 - <<'PY'
from mtp_turbo.io.gguf_file import GGUFFile, default_model_path
from mtp_turbo.io.gguf_write import write_gguf
from mtp_turbo.io.registry import resolve_model

for src, dst in [(default_model_path(), ".pieces/meta/gemma-meta.gguf"),
                 (resolve_model("qwen2.5-coder-0.5b-instruct"), ".pieces/meta/qwen-meta.gguf")]:
    md = GGUFFile(src).metadata
    write_gguf(dst, md["general.architecture"], md, {})
PY

echo "the default model in pieces..."
model=$(python3 -c "from mtp_turbo.io.gguf_file import default_model_path as d; print(d())")
split -b 28M -d -a 2 "$model" "$tmp/gemma."
for f in "$tmp"/gemma.*; do
  n=${f##*.}
  mkdir -p ".pieces/g$n"
  mv "$f" ".pieces/g$n/"
done
du -sh .carry .whl .pieces/meta .pieces/g*
