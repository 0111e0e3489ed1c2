"""Perplexity computed as llama.cpp's llama-perplexity, against llama.cpp's own figure, and
tokenizer ids against llama.cpp's tokenizer.

llama.cpp figures were measured once (2026-11-29) with llama-perplexity / llama-tokenize built
from the llama.cpp vendored in llama-cpp-python 0.3.36 (CPU build, this machine), on the same GGUF:
    llama-perplexity -m gemma-3-270m-q4_k_m.gguf -f tests/data/tempest_act1.txt -c 512 --chunks 4
    -> [1]27.5302,[2]31.9727,[3]37.9352,[4]36.2900  Final estimate: PPL = 36.2900
"""

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
LLAMA_CPP_RUNNING_PPL = [27.5302, 31.9727, 37.9352, 36.2900]


def test_perplexity_matches_llama_cpp_within_1pct(engine):
    text = (DATA / "tempest_act1.txt").read_text()
    r = engine.perplexity(text, ctx=512, max_chunks=2, progress=False)
    assert r["chunks"] == 2 and r["tokens_scored"] == 2 * 255
    for ours, theirs in zip(r["running"], LLAMA_CPP_RUNNING_PPL):
        assert abs(ours / theirs - 1) < 0.01, (r["running"], LLAMA_CPP_RUNNING_PPL)


def test_perplexity_too_short_text(engine):
    from mtp_turbo.errors import ConfigError

    with pytest.raises(ConfigError, match="needs at least"):
        engine.perplexity("too short", ctx=512)


def test_tokenizer_ids_match_llama_cpp(engine):
    cases = json.loads((DATA / "llama_cpp_tokens.json").read_text())["cases"]
    assert len(cases) >= 5
    for c in cases:
        assert engine.tokenizer.encode(c["text"]) == c["ids"], c["text"][:60]
