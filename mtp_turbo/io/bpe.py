"""Byte-level BPE vocabularies of GGUF files ("gpt2" model: Qwen, SmolLM, Llama 3, ...), built with `tokenizers`.

Owns: turning `tokenizer.ggml.*` metadata of a byte-level vocabulary (tokens, merges, token types,
`tokenizer.ggml.pre`) into a `tokenizers.Tokenizer` that encodes as llama.cpp does: the
pre-tokenizer regexes llama.cpp's src/llama-vocab.cpp runs for each supported pre type (applied in
turn, each splitting the pieces the one before made), GPT-2's byte-to-unicode spelling, the merges'
ranks, `ignore_merges` where llama.cpp sets it, control (3) and user-defined (4) tokens matched whole
in the text; decoding ids back to bytes (BpeVocab: the GPT-2 byte map reversed; control, unknown
and user-defined tokens as their raw text, as llama.cpp's token_to_piece writes them).
Ignores: BOS/EOS, stop ids, streaming and chat formats (io/tokenizer.py's GGUFTokenizer, the facade
that picks this backend or io/spm.py's), pre types whose llama.cpp regexes need its custom code or
non-ASCII ranges (DeepSeek, Kimi, ...: refused with ModelFileError), SentencePiece-style BPE
(gemma4) and the cleanup of spaces before punctuation llama.cpp's detokenize does for some pre
types (decode(encode(x)) must give x back).
Start-up: building Qwen2.5's 151 936-token tokenizer takes ~0.22 s (0.27 s with the first import
of `tokenizers`; SmolLM2's 49 152: 0.06 s), loading a serialized copy of it (Tokenizer.from_file /
from_str) 0.26-0.41 s: the JSON parse costs more than the build, so nothing is cached
(tests/io/test_bpe_tokenizer.py checks the build stays under a second).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from mtp_turbo.errors import ModelFileError
from mtp_turbo.io.spm import TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED, _byte_of

# The pre-tokenizer regexes of llama.cpp's llm_tokenizer_bpe, verbatim (llama.cpp spells
# transformers' case-insensitive `(?i:'s|...)` as `(?:'[sS]|...)`; same matches).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
# llama.cpp's stand-ins for \p{Lu}... / \p{Ll}...: "a letter that is not a-z" / "not A-Z"
_UPPER, _LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
          rf"{_CONTRACTIONS}?|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _family(regexes: tuple[str, ...], ignore_merges: bool = False, add_bos: bool = False):
    return {"regexes": regexes, "ignore_merges": ignore_merges, "add_bos": add_bos}


_DEFAULT = _family((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_FAMILIES = [
    # (tokenizer.ggml.pre names, what llama.cpp's load() sets for them: regexes, ignore_merges,
    # add_bos when the file does not say)
    (("default",), _DEFAULT),
    (("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling", "gigachat", "a.x-4.0",
      "mellum"), _family((_GPT2,))),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"),
     _family((r"\p{N}", _GPT2))),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
     _family((_LLAMA3,), ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe"), _family((_LLAMA3,))),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2"), _family((_QWEN2,))),
    (("qwen35",), _family((_QWEN35,))),
    (("falcon",), _family((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"))),
    (("tekken",), _family((_TEKKEN,), ignore_merges=True, add_bos=True)),
    (("gpt-4o", "llama4", "kanana2", "talkie"), _family((_GPT4O,))),
]
PRE_TYPES: dict[str, dict[str, Any]] = {name: fam for names, fam in _FAMILIES for name in names}


def pre_type(metadata: dict[str, Any]) -> dict[str, Any]:
    """How llama.cpp pre-tokenizes this file's text. No `tokenizer.ggml.pre`: 'default' with a
    warning, as llama.cpp does; a pre type it does not know: llama.cpp refuses the file, so do we."""
    pre = metadata.get("tokenizer.ggml.pre")
    if not pre:
        warnings.warn("the GGUF names no tokenizer.ggml.pre: pre-tokenizing as llama.cpp's 'default' "
                      "(llama.cpp warns that generation quality will be degraded)", stacklevel=3)
        return _DEFAULT
    if pre not in PRE_TYPES:
        raise ModelFileError(f"unsupported tokenizer.ggml.pre {pre!r} (supported: {', '.join(sorted(PRE_TYPES))})")
    return PRE_TYPES[pre]


def byte_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode reversed: the character that spells each byte in a byte-level token."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    rest = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(rest)}}


_ALPHABET = byte_alphabet()
_TO_LATIN1 = str.maketrans({ch: chr(b) for ch, b in _ALPHABET.items()})


def _types(metadata: dict[str, Any], n: int) -> list[int]:
    types = metadata.get("tokenizer.ggml.token_type")
    types = [TOKEN_NORMAL] * n if types is None else [int(t) for t in types]
    if len(types) != n:
        raise ModelFileError(f"tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
    return types


def build_tokenizer(metadata: dict[str, Any], fam: dict[str, Any] | None = None) -> Any:
    """The `tokenizers.Tokenizer` of a GGUF's byte-level ("gpt2") vocabulary (`fam`: its
    pre_type, looked up when not given)."""
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ModelFileError(f"unsupported tokenizer model {model!r} (only byte-level 'gpt2' vocabularies)")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    fam = pre_type(metadata) if fam is None else fam
    tokens = list(metadata["tokenizer.ggml.tokens"])
    n = len(tokens)
    types = _types(metadata, n)
    merges = metadata.get("tokenizer.ggml.merges")
    if merges is None:
        raise ModelFileError("the byte-level vocabulary has no tokenizer.ggml.merges")
    vocab = dict(zip(tokens, range(n)))
    if len(vocab) != n:  # llama.cpp refuses these too
        seen: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in seen:
                raise ModelFileError(f"duplicate token in vocabulary: {t!r} has ids {seen[t]} and {i}")
            seen[t] = i
    # llama.cpp splits a merge at the first space after its first character; a merge without one
    # can never apply there, so it is left out (the others keep their relative rank)
    pairs = [(m[:p], m[p + 1:]) for m in merges if (p := m.find(" ", 1)) > 0]
    try:
        tk = Tokenizer(BPE(vocab=vocab, merges=pairs, ignore_merges=fam["ignore_merges"], fuse_unk=False))
    except Exception as e:  # tokenizers' own error: a merge whose parts are not tokens, ...
        raise ModelFileError(f"tokenizers refused the vocabulary: {e}") from None
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in fam["regexes"]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()  # unused here (BpeVocab decodes bytes); keeps the object whole
    # Matched whole in raw text before pre-tokenizing, as llama.cpp's tokenizer_st_partition does
    # (it parses control tokens in the text, the engine's prompts carry chat markup).
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i, k in enumerate(types) if k in (TOKEN_CONTROL, TOKEN_UNKNOWN)])
    tk.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                   for i, k in enumerate(types) if k == TOKEN_USER_DEFINED])
    return tk


class BpeVocab:
    """Encoding and decoding on a byte-level vocabulary (GGUFTokenizer's backend for "gpt2")."""

    strips_first_space = False  # no dummy prefix in byte-level vocabularies

    def __init__(self, metadata: dict[str, Any]):
        fam = pre_type(metadata)
        self._tk = build_tokenizer(metadata, fam)
        self.pieces: list[str] = list(metadata["tokenizer.ggml.tokens"])
        self.types = _types(metadata, len(self.pieces))
        # llama.cpp writes control and unknown tokens only when asked for (special); user-defined
        # ones (Qwen's <tool_call>) are text, so a tool-call parser sees them
        self._control = frozenset(i for i, k in enumerate(self.types) if k == TOKEN_CONTROL)
        self._markup = self._control | frozenset(i for i, k in enumerate(self.types) if k == TOKEN_UNKNOWN)
        self._bytes: list[bytes | None] = [None] * len(self.pieces)  # piece_bytes, filled as ids are seen

    def token_to_id(self, piece: str) -> int | None:
        return self._tk.token_to_id(piece)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, without BOS."""
        if len(texts) <= 1:  # the engine's prompts: skip the batch's thread pool
            return [self._tk.encode(t, add_special_tokens=False).ids for t in texts]
        return [e.ids for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def piece_bytes(self, token_id: int) -> bytes:
        b = self._bytes[token_id]
        if b is None:
            b = self._bytes[token_id] = self._piece_bytes(token_id)
        return b

    def _piece_bytes(self, i: int) -> bytes:
        piece, kind = self.pieces[i], self.types[i]
        if kind in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED):
            return piece.encode("utf-8")  # stored as raw text by llama.cpp's converter
        if kind == TOKEN_BYTE and (byte := _byte_of(piece)) is not None:
            return bytes((byte,))
        if kind not in (TOKEN_NORMAL, TOKEN_BYTE):
            return b""  # unused / undefined: llama.cpp's token_to_piece writes nothing for them
        if _ALPHABET.keys() >= set(piece):
            return piece.translate(_TO_LATIN1).encode("latin-1")
        # a character outside the byte alphabet (a mislabelled token): its own UTF-8 bytes, the
        # spelling transformers' GGUF conversion gives such a token
        return b"".join(bytes((_ALPHABET[c],)) if c in _ALPHABET else c.encode("utf-8") for c in piece)

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids` (the caller has dropped a leading BOS): their bytes joined, then decoded
        with one U+FFFD per invalid sequence, as the stream decoder does."""
        pb = self.piece_bytes
        markup = self._markup
        return b"".join(pb(i) for i in ids if not (skip_special and i in markup)).decode("utf-8", "replace")

    def is_control(self, token_id: int) -> bool:
        return token_id in self._control

    def is_markup(self, token_id: int) -> bool:
        return token_id in self._markup
