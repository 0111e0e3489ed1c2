"""Could SentencePiece's own loader replace the tokenizers parse that bounds start-up? (issue 20 item 4)

    pip install sentencepiece protobuf
    python bench/experiments/spm_tokenizer.py [--model PATH]

Builds a SentencePiece BPE ModelProto from the GGUF's tokenizer metadata (pieces, file order as the
score, token types, byte fallback, Gemma's identity normalizer without a dummy prefix), times its
load from the serialized proto against `tokenizers`' load of the engine's cached JSON, and compares
the ids of both on the repository's texts (MT-Bench and HumanEval prompts, The Tempest, in lines
and whole). Control tokens are split out of the text first, as the engine's added special tokens
are (SentencePiece never matches CONTROL pieces in text). Prints the timings and the first
disagreement, if any. Measures only; the engine does not use it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def spm_proto(metadata) -> bytes:
    from sentencepiece import sentencepiece_model_pb2 as pb

    from mtp_turbo.io.tokenizer import SPIECE_SPACE

    tokens = list(metadata["tokenizer.ggml.tokens"])
    types = [int(t) for t in metadata["tokenizer.ggml.token_type"]]
    m = pb.ModelProto()
    for i, (t, k) in enumerate(zip(tokens, types)):
        p = m.pieces.add()
        # Gemma stores runs of 2+ spaces with real spaces: respelled with '▁' as the engine does
        p.piece = SPIECE_SPACE * len(t) if " " in t and not t.strip() else t
        p.score = -float(i)  # Gemma's merge order is the file order (the engine's rank_of)
        p.type = k
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id = int(metadata.get("tokenizer.ggml.unknown_token_id", 3))
    ts.bos_id = int(metadata.get("tokenizer.ggml.bos_token_id", 2))
    ts.eos_id = int(metadata.get("tokenizer.ggml.eos_token_id", 1))
    ts.pad_id = int(metadata.get("tokenizer.ggml.padding_token_id", 0))
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return m.SerializeToString()


def texts() -> list[str]:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = []
    for name in ("mt_bench_first_turns.json", "humaneval_prompts.json"):
        with open(os.path.join(root, "mtp_turbo", "data", name)) as f:
            out += [p if isinstance(p, str) else json.dumps(p) for p in json.load(f)]
    with open(os.path.join(root, "bench", "data", "tempest.txt")) as f:
        t = f.read()
    out += t.splitlines() + [t[:40000], "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
                             "  two  spaces,\ttabs\t\tand\n\n\nnewlines ", "emoji 😀 and 中文 and é"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    import sentencepiece as spm

    from mtp_turbo.io.gguf_file import GGUFFile, default_model_path
    from mtp_turbo.io.tokenizer import TOKEN_CONTROL, GGUFTokenizer

    gf = GGUFFile(a.model or default_model_path())
    t0 = time.perf_counter()
    ref = GGUFTokenizer(gf)  # from the cached JSON when it exists
    t1 = time.perf_counter()
    proto = spm_proto(gf.metadata)
    t2 = time.perf_counter()
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    t3 = time.perf_counter()
    tokens = list(gf.metadata["tokenizer.ggml.tokens"])
    types = [int(k) for k in gf.metadata["tokenizer.ggml.token_type"]]
    control = {t: i for i, (t, k) in enumerate(zip(tokens, types)) if k == TOKEN_CONTROL}
    split = re.compile("(" + "|".join(map(re.escape, sorted(control, key=len, reverse=True))) + ")")
    t4 = time.perf_counter()
    print(f"tokenizers load {t1 - t0:.3f} s | proto built {t2 - t1:.3f} s | sentencepiece load {t3 - t2:.3f} s | "
          f"control-token regex {t4 - t3:.3f} s")

    def spm_encode(text):
        ids = []
        for part in split.split(text):
            if part in control:
                ids.append(control[part])
            elif part:
                ids += sp.encode(part)
        return ids

    n = same = 0
    for text in texts():
        n += 1
        a_ids, b_ids = ref.encode(text, add_bos=False), spm_encode(text)
        if a_ids == b_ids:
            same += 1
        elif n - same == 1:
            k = next((i for i, (x, y) in enumerate(zip(a_ids, b_ids)) if x != y), min(len(a_ids), len(b_ids)))
            print(f"first disagreement in text {n} at id {k}: tokenizers {a_ids[max(0, k - 2):k + 3]} "
                  f"sentencepiece {b_ids[max(0, k - 2):k + 3]} ({text[:60]!r})")
    print(f"same ids in {same} of {n} texts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
