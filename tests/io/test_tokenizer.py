"""GGUFTokenizer against transformers' GGUF tokenizer on real text; streaming decode (control tokens
silent unless asked for); Gemma's chat format, the file's own template, the plain-text rendering."""

import importlib
import unicodedata
import warnings

import pytest

from mtp_turbo.errors import ConfigError, ModelFileError
from mtp_turbo.io.tokenizer import (PLAIN_CHAT_STOPS, GGUFTokenizer, StreamDecoder, build_model_proto, cache_file,
                                   plain_chat)

_MODULES = ["os", "re", "json", "collections", "itertools", "functools", "inspect", "string", "textwrap",
            "pathlib", "argparse", "logging", "subprocess", "unicodedata", "datetime", "decimal", "fractions",
            "statistics", "heapq", "bisect", "shutil", "tempfile", "csv", "zipfile", "struct", "codecs", "enum",
            "abc", "random", "math", "operator", "contextlib", "difflib", "pprint", "calendar", "email.message",
            "http.client", "urllib.parse", "sqlite3", "threading", "queue", "socket", "tarfile", "gzip"]


def _docstrings(limit=300):
    """Docstrings of standard-library modules and their members (text nobody on the project wrote)."""
    out, seen = [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _MODULES:
            mod = importlib.import_module(name)
            for obj in [mod, *(getattr(mod, k) for k in sorted(vars(mod)) if not k.startswith("_"))]:
                doc = getattr(obj, "__doc__", None)
                if isinstance(doc, str) and len(doc.strip()) > 20 and doc not in seen:
                    seen.add(doc)
                    out.append(doc)
                if len(out) >= limit:
                    return out
    return out


_EDGE = [
    "", " ", "  ", "   leading spaces", "trailing   ", " " * 40 + "x" + " " * 33, "a" + " " * 100 + "b",
    "\t", "\t\ttabs\tand\n\nnewlines\n\n\n", "\n" * 35, "x\r\ny\r\n", "mixed \t \n \t\n  end",
    "你好，世界！这是一个测试。", "こんにちは、世界。カタカナ", "안녕하세요 세계", "Ελληνικά και русский язык",
    "😀🎉👍🏽 family 👨‍👩‍👧 flags 🇯🇵🇫🇷", "café naïve résumé Ångström Zürich", "e\u0301 (combining) vs é",
    "3.14159 1234567890 -42 1e-9 0x1F 1,000,000.00", "2024-01-31T23:59:59Z", "٠١٢٣٤٥٦٧٨٩ ١٢٣",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos>x<eos>", "[multimodal] <mask>",
    "<unused0><unused1> <b>html</b> &amp; <0x41>", "def f(x):\n    return x ** 2  # comment\n",
    "\x00\x01\x7f control bytes", "\u200b\u200d zero width \ufeff bom",
]


@pytest.fixture(scope="module")
def tok(model):
    return GGUFTokenizer(model)


@pytest.fixture(scope="module")
def hf_tok(model_path):
    """transformers' own conversion of the GGUF tokenizer (slow: ~25 s), built once."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)


@pytest.fixture(scope="module")
def texts():
    docs = _docstrings()
    assert len(docs) == 300
    return docs + _EDGE


def test_ids_match_transformers(tok, hf_tok, texts):
    ours = tok.encode_batch(texts)
    theirs = hf_tok(texts)["input_ids"]
    mismatches = [(t[:50], a[:12], b[:12]) for t, a, b in zip(texts, ours, theirs) if a != b]
    assert not mismatches, mismatches[:3]
    assert ours == [tok.encode(t) for t in texts]
    assert all(ids[0] == tok.bos_id for ids in ours)
    assert [tok.encode(t, add_bos=False) for t in texts[:20]] == [ids[1:] for ids in ours[:20]]


def test_decode_round_trip_and_matches_transformers(tok, hf_tok, texts):
    for t in texts:
        ids = tok.encode(t)
        assert tok.decode(ids) == t
        assert tok.decode(ids) == hf_tok.decode(ids[1:])
    # '▁' in the text is SentencePiece's space: it comes back as ' ', as with transformers.
    ids = tok.encode("a\u2581b")
    assert tok.decode(ids) == hf_tok.decode(ids[1:]) == "a b"


def test_decode_of_any_ids_matches_transformers(tok, hf_tok):
    """Ids no encoder wrote: byte pieces that are not UTF-8 (one U+FFFD per byte, as transformers),
    markup in the middle, space runs; with and without skip_special."""
    import random

    rng = random.Random(0)
    byte0 = tok.token_to_id("<0x00>")
    assert tok.token_str(byte0 + 255) == "<0xFF>"
    some = [tok.bos_id, tok.eos_id, *tok.stop_ids, tok.token_to_id("<start_of_image>"), tok.token_to_id("\n\n"),
            tok.token_to_id("\u2581" * 3), *tok.encode("Zürich 😀 中文", add_bos=False)]
    for _ in range(300):
        ids = [rng.randrange(byte0, byte0 + 256) if r < 0.5 else rng.choice(some) if r < 0.7 else
               rng.randrange(tok.vocab_size) for r in (rng.random() for _ in range(rng.randint(1, 10)))]
        ids = [2000, *ids]  # not BOS first: decode drops a leading BOS (encode's), transformers does not
        assert tok.decode(ids) == hf_tok.decode(ids), ids
        assert tok.decode(ids, skip_special=True) == hf_tok.decode(
            [i for i in ids if not tok.is_markup(i)], skip_special_tokens=True), ids


def test_special_tokens_and_ids(tok, hf_tok, model):
    md = model.metadata
    assert tok.vocab_size == len(md["tokenizer.ggml.tokens"]) == len(hf_tok)
    assert tok.bos_id == md["tokenizer.ggml.bos_token_id"] == hf_tok.bos_token_id
    assert tok.eos_id == md["tokenizer.ggml.eos_token_id"] == hf_tok.eos_token_id
    eot = hf_tok.convert_tokens_to_ids("<end_of_turn>")
    assert tok.stop_ids == (tok.eos_id, eot)
    assert tok.token_str(eot) == "<end_of_turn>" and tok.token_str(tok.bos_id) == "<bos>"
    for i in (0, 5, 107, 138, 1000, 236761, 262143):
        assert tok.token_str(i) == md["tokenizer.ggml.tokens"][i]
    # control tokens stay whole; skip_special drops them in decode
    ids = tok.encode("<start_of_turn>user\nhi<end_of_turn>", add_bos=False)
    assert ids[0] == hf_tok.convert_tokens_to_ids("<start_of_turn>") and ids[-1] == eot
    assert tok.decode(ids, skip_special=True) == "user\nhi"


def _byte_fallback_chars(tok, n):
    """Characters this vocabulary has no piece for (they encode as 3-4 <0xXX> byte pieces)."""
    found = []
    for start in (0x20000, 0x1FA70, 0x13000, 0x10900, 0x2A700):
        for cp in range(start, start + 400):
            ch = chr(cp)
            if unicodedata.category(ch) == "Cn":
                continue
            ids = tok.encode(ch, add_bos=False)
            if len(ids) > 1 and all(tok.token_str(i).startswith("<0x") for i in ids):
                found.append(ch)
                break
    for cp in range(0x20000, 0x21000):
        if len(found) >= n:
            break
        ch = chr(cp)
        ids = tok.encode(ch, add_bos=False)
        if ch not in found and len(ids) > 1 and all(tok.token_str(i).startswith("<0x") for i in ids):
            found.append(ch)
    return found


def test_stream_decode_never_breaks_characters(tok, hf_tok):
    rare = _byte_fallback_chars(tok, 12)
    assert len(rare) >= 12
    samples = ["".join(rare), f"mix {rare[0]} 你好 {rare[1]}😀{rare[2]} end", "😀🎉👍🏽🇯🇵 日本語テキスト",
               rare[3] + " " + rare[4] * 3 + "\n" + rare[5]]
    for text in samples:
        ids = tok.encode(text, add_bos=False)
        assert ids == hf_tok(text, add_special_tokens=False)["input_ids"]
        dec = StreamDecoder(tok)
        pieces = [dec.feed(i) for i in ids]
        tail = dec.flush()
        assert "".join(pieces) + tail == text and tail == ""
        assert not any("\ufffd" in p for p in pieces)
        if any(ch in text for ch in rare):
            assert "" in pieces  # an incomplete character was held back
        assert list(tok.stream().feed_many(ids)) == [p for p in pieces if p]


def test_stream_flushes_an_incomplete_character_as_replacement(tok):
    (ch,) = _byte_fallback_chars(tok, 1)[:1]
    ids = tok.encode(ch, add_bos=False)
    dec = tok.stream()
    assert [dec.feed(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert dec.flush() == "\ufffd"
    assert "".join(dec.feed(i) for i in ids) + dec.flush() == ch  # reset after flush


def test_chat_template(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi there \n"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    text = tok.apply_chat_template(msgs)
    assert text == ("<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
                    "<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    assert not tok.apply_chat_template(msgs[1:2], add_generation_prompt=False).endswith("model\n")
    ids = tok.encode(text)
    assert ids.count(tok.bos_id) == 1 and ids.count(tok.stop_ids[1]) == 3
    with pytest.raises(ConfigError, match="role"):
        tok.apply_chat_template([{"role": "assistant", "content": "x"}])
    with pytest.raises(ConfigError, match="role"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_unsupported_vocabularies_are_refused(model):
    """A unigram (t5) vocabulary is refused naming the kinds supported; a file that says byte-level
    BPE (gpt2) but carries Gemma's SentencePiece pieces has no merges (io/bpe.py's tests cover real
    byte-level files); the SentencePiece builder refuses anything but 'llama'."""
    with pytest.raises(ModelFileError, match=r"unsupported tokenizer model 't5' \(supported: 'llama'.*'gpt2'"):
        GGUFTokenizer(dict(model.metadata, **{"tokenizer.ggml.model": "t5"}))
    md = dict(model.metadata, **{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default"})
    with pytest.raises(ModelFileError, match="has no tokenizer.ggml.merges"):
        GGUFTokenizer(md)
    with pytest.raises(ModelFileError, match="unsupported tokenizer model"):
        build_model_proto({"tokenizer.ggml.model": "t5"})


def test_the_model_is_cached_and_a_damaged_copy_is_built_again(model, tok, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    file = cache_file(model.path)
    assert str(file).startswith(str(tmp_path))
    text = "Cached tokenizers give the same ids: <start_of_turn>user\n  two spaces 😀<end_of_turn>"
    first = GGUFTokenizer(model)
    with open(file, "rb") as f:
        assert f.read() == build_model_proto(model.metadata)
    assert GGUFTokenizer(model).encode(text) == first.encode(text) == tok.encode(text)
    with open(file, "wb") as f:
        f.write(b"not a SentencePiece model")
    assert GGUFTokenizer(model).encode(text) == tok.encode(text)
    with open(file, "rb") as f:
        assert f.read() == build_model_proto(model.metadata)  # written again


def test_a_piece_twice_is_a_model_file_error():
    md = {"general.architecture": "llama", "tokenizer.ggml.model": "llama",
          "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "a", "b", "a"], "tokenizer.ggml.scores": [0.0] * 6,
          "tokenizer.ggml.token_type": [2, 3, 3, 1, 1, 1], "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
    with pytest.raises(ModelFileError, match="SentencePiece refused the vocabulary"):
        GGUFTokenizer(md)


def test_llama_style_vocabulary_matches_transformers():
    """A toy non-Gemma SentencePiece vocabulary (scores with ties, dummy prefix) against the
    conversion transformers applies to such a GGUF."""
    import numpy as np
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    pieces = ["▁", "a", "b", "c", "d", "▁a", "ab", "▁ab", "abc", "cd", "▁the", "t", "h", "e", "th", "he",
              "▁t", "▁th", "the", "▁c", "dd", "▁d", "<ctl>"]
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{i:02X}>" for i in range(256)), *pieces]
    types = [2, 3, 3, *[6] * 256, *[1] * (len(pieces) - 1), 3]
    rng = np.random.default_rng(1)
    scores = [0.0] * 259 + (-np.arange(len(pieces)) - rng.integers(0, 3, len(pieces))).astype(np.float32).tolist()
    ref, _ = convert_gguf_tokenizer("llama", {"tokenizer_type": "llama", "tokens": tokens, "scores": scores,
                                              "token_type": types, "bos_token_id": 1, "eos_token_id": 2,
                                              "unk_token_id": 0})
    tok = GGUFTokenizer({
        "general.architecture": "llama", "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": np.array(scores, np.float32), "tokenizer.ggml.token_type": np.array(types, np.int32),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0})
    for text in ["the cab abc", "  a b  cd dd", "thethe ab<ctl>c", "ünï 😀", " leading", "abcd\nthe",
                 "<ctl>the", "the<ctl> ab", "<ctl><ctl> dd<ctl>", "▁a ▁the"]:
        ids = tok.encode(text, add_bos=False)
        assert ids == ref.encode(text, add_special_tokens=False).ids, text
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=False)
        assert tok.encode(text) == [1, *ids]
        dec = tok.stream(special=True)
        assert "".join(dec.feed_many(ids)) + dec.flush() == tok.decode(ids)
        dec = tok.stream()
        assert "".join(dec.feed_many(ids)) + dec.flush() == tok.decode(ids, skip_special=True)
    assert tok.stop_ids == (2,)


def test_stream_is_silent_on_control_tokens_unless_special(tok):
    """A sampled <start_of_image> (user-defined in the file, but a tag) prints nothing by default,
    as text with special; control tokens likewise; user-defined newline runs are text."""
    img = tok.token_to_id("<start_of_image>")
    assert img is not None and tok.is_markup(img) and not tok.is_control(img)
    eot, nl2 = tok.stop_ids[1], tok.token_to_id("\n\n")
    assert tok.is_markup(eot) and tok.is_control(eot) and not tok.is_markup(nl2)
    assert tok.stream().feed(nl2) == "\n\n" and tok.stream().feed(eot) == ""
    assert tok.stream(special=True).feed(eot) == "<end_of_turn>"
    assert tok.decode([img, nl2, eot], skip_special=True) == "\n\n"
    ids = tok.encode("Rain falls", add_bos=False) + [img, img] + tok.encode(" softly", add_bos=False)
    dec = tok.stream()
    assert "".join(dec.feed_many(ids)) + dec.flush() == "Rain falls softly"
    dec = tok.stream(special=True)
    assert "".join(dec.feed_many(ids)) + dec.flush() == "Rain falls<start_of_image><start_of_image> softly"
    normal = tok.encode(" softly", add_bos=False)[0]
    assert not tok.is_control(normal) and tok.stream().feed(normal) == " softly"


def test_base_model_has_no_template_and_chats_in_plain_text(tok):
    msgs = [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": " What is rain?\n"},
            {"role": "assistant", "content": "Water."}, {"role": "user", "content": "And snow?"}]
    assert not tok.has_chat_template and tok.chat_template is None
    cp = tok.chat_prompt(msgs)
    assert cp.template == "plain" and cp.stop == PLAIN_CHAT_STOPS == ("\nUser:",)
    assert cp.text == plain_chat(msgs) == ("System: Be brief.\nUser: What is rain?\nAssistant: Water.\n"
                                           "User: And snow?\nAssistant:")
    assert plain_chat(msgs[1:2], add_generation_prompt=False) == "User: What is rain?"
    with pytest.raises(ConfigError, match="role 'tool'"):
        plain_chat([{"role": "tool", "content": "x"}])
    with pytest.raises(ConfigError, match="content must be a string"):
        plain_chat([{"role": "user", "content": ["x"]}])


def test_file_chat_template_is_rendered(model):
    """A file that carries a chat template gets it, rendered by Jinja (llama.cpp's copy of Gemma-2's
    template): the same text as the built-in Gemma format, BOS left to encode, and the template's
    own errors as ConfigError."""
    from pathlib import Path

    template = (Path(__file__).parents[1] / "data" / "gemma2_chat_template.jinja").read_text()
    tok = GGUFTokenizer(dict(model.metadata, **{"tokenizer.chat_template": template}))
    assert tok.has_chat_template
    convs = [[{"role": "user", "content": "Hi"}],
             [{"role": "user", "content": " Hi there \n"}, {"role": "assistant", "content": "Hello."},
              {"role": "user", "content": "Bye"}]]
    for msgs in convs:
        for gen in (True, False):
            cp = tok.chat_prompt(msgs, add_generation_prompt=gen)
            assert cp.template == "model" and cp.stop == ()
            assert cp.text == tok.apply_chat_template(msgs, add_generation_prompt=gen)
            assert not cp.text.startswith("<bos>") and tok.encode(cp.text).count(tok.bos_id) == 1
    with pytest.raises(ConfigError, match="System role not supported"):
        tok.chat_prompt([{"role": "system", "content": "x"}, {"role": "user", "content": "y"}])
    with pytest.raises(ConfigError, match="alternate"):
        tok.chat_prompt([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    broken = GGUFTokenizer(dict(model.metadata, **{"tokenizer.chat_template": "{% for m in messages %}"}))
    with pytest.raises(ConfigError, match="chat template failed"):
        broken.chat_prompt(convs[0])
