"""llama.cpp's token ids (llama-tokenize) of the tokenizer corpus, for every model given: the reference
tests/io compares our byte-level BPE tokenizers with (beside transformers').

    python bench/llama_tokens.py --tokenize BUILD/bin/llama-tokenize --models A.gguf,B.gguf --out ids.json

Each text goes through a file (`-f`, escapes off, special tokens parsed, BOS as the file says); the
output maps each model file's general.name to a list of id lists, in the corpus's order.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mtp_turbo.io.gguf_file import GGUFFile  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data",
                      "tokenizer_corpus.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenize", required=True, help="llama-tokenize")
    p.add_argument("--models", required=True, help="comma-separated GGUF files")
    p.add_argument("--corpus", default=CORPUS)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    texts = json.load(open(a.corpus, encoding="utf-8"))
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for model in a.models.split(","):
            name = str(GGUFFile(model).metadata.get("general.name", os.path.basename(model)))
            ids = []
            for i, text in enumerate(texts):
                f = os.path.join(d, f"{i}.txt")
                with open(f, "w", encoding="utf-8", newline="") as fh:
                    fh.write(text)
                r = subprocess.run([a.tokenize, "-m", model, "-f", f, "--ids", "--no-escape", "--log-disable"],
                                   capture_output=True, text=True, timeout=60)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
                if r.returncode != 0 or not line:
                    print(f"{name} text {i}: llama-tokenize failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
                    return 1
                ids.append(json.loads(line[-1]))
            out[name] = ids
            print(f"{name}: {len(ids)} texts, {sum(map(len, ids))} tokens")
    json.dump(out, open(a.out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
