"""SentencePiece vocabularies of GGUF files ("llama" model), built as a SentencePiece BPE model.

Owns: turning `tokenizer.ggml.*` metadata of a SentencePiece-style vocabulary (pieces + scores +
token types, no merges) into a SentencePiece ModelProto (byte fallback, the pieces' scores as merge
priorities: Gemma's file order, control tokens matched whole in raw text) that encodes exactly like
transformers' GGUF conversion (GemmaTokenizer for the Gemma family), a serialized copy of it in the
user's cache, and encoding / decoding on it (SpmVocab: the dummy-prefix space, byte fallback decoded
as `tokenizers` decodes it, Gemma's tag-like user-defined tokens as markup).
Ignores: BOS/EOS, stop ids, streaming and chat formats (io/tokenizer.py's GGUFTokenizer, the facade
that picks this backend or io/bpe.py's), byte-level vocabularies (io/bpe.py).
Why SentencePiece: it loads the 262 144-piece Gemma model in ~0.1 s where `tokenizers` parsed its
merges for 1.6 s (start-up, issue 20; bench/RESULTS.md session 22).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mtp_turbo.errors import ModelFileError

# llama.cpp token types (tokenizer.ggml.token_type); SentencePiece's ModelProto uses the same numbers.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
SPIECE_SPACE = "\u2581"  # '▁', SentencePiece's visible space
_TAG = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")  # '<start_of_image>', '[multimodal]'
_GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")
CACHE_VERSION = 2  # bump when build_model_proto changes what it builds


def _byte_of(piece: str) -> int | None:
    """The byte a '<0xXX>' byte-fallback piece stands for, else None (as tokenizers' ByteFallback)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


def build_model_proto(metadata: dict[str, Any]) -> bytes:
    """The serialized SentencePiece BPE ModelProto of a GGUF's "llama" vocabulary.

    Gemma files store pieces of 2+ spaces with real spaces and their scores do not follow the
    merge order, the file order does: respelled with '▁' and ranked by position, the two fixes
    transformers' GemmaTokenizer conversion makes. Control tokens become user-defined pieces, which
    SentencePiece matches whole in the text (longest first) and never merges, as `tokenizers` and
    transformers match special tokens.
    """
    model = metadata.get("tokenizer.ggml.model")
    if model != "llama":
        raise ModelFileError(f"unsupported tokenizer model {model!r} (only SentencePiece 'llama' vocabularies)")
    from sentencepiece import sentencepiece_model_pb2 as pb

    tokens = list(metadata["tokenizer.ggml.tokens"])
    n = len(tokens)
    types = metadata.get("tokenizer.ggml.token_type")
    types = [TOKEN_NORMAL] * n if types is None else [int(t) for t in types]
    if len(types) != n:
        raise ModelFileError(f"tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
    gemma = metadata.get("general.architecture") in _GEMMA_ARCHS
    if gemma:
        spaces = [" " in t and not t.strip() for t in tokens]
        tokens = [SPIECE_SPACE * len(t) if sp else t for t, sp in zip(tokens, spaces)]
        # a respelled run is user-defined in the file but not matched whole (transformers' BPE forms
        # it by merges: 40 spaces are 15 + 15 + 10, not 31 + 9)
        types = [TOKEN_NORMAL if sp else k for k, sp in zip(types, spaces)]
        scores = [-float(i) for i in range(n)]
    else:
        scores = metadata.get("tokenizer.ggml.scores")
        if scores is None or len(scores) != n:
            raise ModelFileError("tokenizer.ggml.scores is missing or does not match the vocabulary")
        scores = [float(s) for s in scores]
    unk_id = int(metadata.get("tokenizer.ggml.unknown_token_id", 0))
    if not 0 <= unk_id < n:
        raise ModelFileError(f"unknown token id {unk_id} is outside the vocabulary")
    m = pb.ModelProto()
    add = m.pieces.add
    for i, (t, k, s) in enumerate(zip(tokens, types, scores)):
        # one <unk> (SentencePiece wants exactly one); other unknown / unused pieces are ordinary
        # pieces, as in transformers' conversion, where BPE may form them
        kind = TOKEN_UNKNOWN if i == unk_id else TOKEN_USER_DEFINED if k == TOKEN_CONTROL else \
            TOKEN_NORMAL if k in (TOKEN_UNKNOWN, TOKEN_UNUSED) else k
        add(piece=t, score=s, type=kind)
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = n
    # byte fallback needs all 256 '<0xXX>' pieces; without them an unknown character is <unk>
    ts.byte_fallback = len({b for t, k in zip(tokens, types) if k == TOKEN_BYTE and (b := _byte_of(t)) is not None}) == 256
    ts.unk_id = unk_id
    ts.bos_id = ts.eos_id = ts.pad_id = -1  # ids come from the metadata, never from SentencePiece
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False  # SpmVocab.encode adds it where transformers' Metaspace does
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return m.SerializeToString()


def cache_file(path, suffix: str = ".model", version: int = CACHE_VERSION) -> str:
    """Where the serialized tokenizer of the GGUF at `path` is kept: the user's cache, keyed by the
    file's path, size and modification time (and the builder's version); `suffix` tells the
    SentencePiece model (.model) from io/bpe.py's tokenizer (.json)."""
    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{version}".encode()).hexdigest()
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mtp-turbo", "tokenizers")
    return os.path.join(root, key[:32] + suffix)


def write_cache(file: str, data: bytes) -> None:
    """Keep `data` at `file` (written whole, then renamed into place); a read-only cache costs
    start-up time, never the answer, so failures are ignored."""
    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        tmp = f"{file}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, file)
    except OSError:
        pass


def _load(proto: bytes) -> Any:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)  # RuntimeError if SentencePiece refuses it
    return sp


def _cached_processor(path, metadata: dict[str, Any]) -> Any:
    """A SentencePieceProcessor of build_model_proto(metadata), through a copy in the user's cache
    (written once per file): building the proto walks the vocabulary in Python (~0.7 s for
    Gemma's), loading it takes ~0.1 s. A cached copy that does not load is built again."""
    file = cache_file(path)
    try:
        with open(file, "rb") as f:
            return _load(f.read())
    except (OSError, RuntimeError):  # absent, unreadable or damaged: build it (and try to keep it)
        pass
    proto = build_model_proto(metadata)
    sp = _load(proto)
    write_cache(file, proto)
    return sp


def _bytes_text(run: bytes) -> str:
    try:
        return run.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(run)


class SpmVocab:
    """Encoding and decoding on a SentencePiece vocabulary (GGUFTokenizer's backend for "llama")."""

    def __init__(self, source: Any, metadata: dict[str, Any], cache: bool = True):
        """cache: keep the built SentencePiece model in the user's cache (cache_file): building it
        walks the vocabulary (~0.7 s for Gemma's 262 144 pieces), loading it takes ~0.1 s.
        Raises ModelFileError, KeyError (a missing key) or RuntimeError (SentencePiece refused it)."""
        self._sp = _cached_processor(source.path, metadata) if cache and hasattr(source, "path") else \
            _load(build_model_proto(metadata))
        self.pieces: list[str] = list(metadata["tokenizer.ggml.tokens"])
        types = metadata.get("tokenizer.ggml.token_type")
        kinds = np.zeros(0, dtype=np.int64) if types is None else np.asarray(types, dtype=np.int64)
        self.types: list[int] = kinds.tolist()
        # the few ids of each kind found by numpy: a walk over 262144 types in Python is ~45 ms of a start
        self._control = frozenset(np.flatnonzero(kinds == TOKEN_CONTROL).tolist())
        user = np.flatnonzero(kinds == TOKEN_USER_DEFINED).tolist()
        # Markup, not text: control tokens, and user-defined ones spelled as a tag (Gemma's
        # <start_of_image>, <end_of_image>, [multimodal]; its other user-defined pieces are runs of
        # newlines and tabs, which are text). Decoding drops them unless asked for (special).
        self._markup = self._control | frozenset(
            i for i in user if _TAG.fullmatch(self.pieces[i]))
        # Non-Gemma SentencePiece vocabularies get a dummy '▁' prefix that decoding strips again.
        self.strips_first_space = (metadata.get("general.architecture") not in _GEMMA_ARCHS
                                   and bool(metadata.get("tokenizer.ggml.add_space_prefix", True)))
        # The prefix goes where transformers' Metaspace ("first") puts it: before text that starts
        # neither with a space (' ' or '▁') nor with a piece matched whole (control / user-defined).
        self._whole = tuple(self.pieces[i] for i in sorted(self._control.union(user))) \
            if self.strips_first_space else ()

    def token_to_id(self, piece: str) -> int | None:
        i = self._sp.piece_to_id(piece)
        return i if self._sp.id_to_piece(i) == piece else None

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, without BOS."""
        return self._sp.encode([self._prefixed(t) for t in texts]) if texts else []

    def _prefixed(self, text: str) -> str:
        if not self.strips_first_space or not text or text.startswith((" ", SPIECE_SPACE)) or text.startswith(self._whole):
            return text
        return " " + text

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids` (the caller has dropped a leading BOS). A run of byte pieces that is not
        valid UTF-8 gives one U+FFFD per byte, as `tokenizers`' ByteFallback decoder writes."""
        out: list[str] = []
        run = bytearray()  # consecutive byte pieces, decoded together
        for i in ids:
            if skip_special and i in self._markup:
                continue
            b = _byte_of(self.pieces[i])
            if b is not None:
                run.append(b)
                continue
            if run:
                out.append(_bytes_text(run))
                run.clear()
            out.append(self.pieces[i].replace(SPIECE_SPACE, " "))
        if run:
            out.append(_bytes_text(run))
        text = "".join(out)
        return text[1:] if self.strips_first_space and text.startswith(" ") else text

    def piece_bytes(self, token_id: int) -> bytes:
        piece = self.pieces[token_id]
        b = _byte_of(piece)
        return bytes((b,)) if b is not None else piece.replace(SPIECE_SPACE, " ").encode("utf-8")

    def is_control(self, token_id: int) -> bool:
        return token_id in self._control

    def is_markup(self, token_id: int) -> bool:
        return token_id in self._markup
