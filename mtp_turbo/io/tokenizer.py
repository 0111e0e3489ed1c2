"""The tokenizer a GGUF file describes, as a SentencePiece BPE model built from its metadata.

Owns: turning `tokenizer.ggml.*` metadata of a SentencePiece-style vocabulary ("llama" model:
pieces + scores + token types, no merges) into a SentencePiece ModelProto (byte fallback, the
pieces' scores as merge priorities: Gemma's file order, control tokens matched whole in raw text)
that encodes exactly like transformers' GGUF conversion (GemmaTokenizer for the Gemma family), a
serialized copy of it in the user's cache, decoding on the piece table (byte fallback as
`tokenizers` decodes it), BOS/EOS and stop ids, incremental UTF-8-safe decoding (control tokens
silent unless asked for), Gemma's chat format, the file's own chat template
(`tokenizer.chat_template`, Jinja, rendered sandboxed), and the plain-text rendering of messages for
a model whose file has no template (a base model).
Ignores: byte-level (gpt2) and unigram vocabularies (refused with ModelFileError).
Why SentencePiece: it loads the 262 144-piece Gemma model in ~0.1 s where `tokenizers` parsed its
merges for 1.6 s (start-up, issue 20; bench/RESULTS.md session 22).
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mtp_turbo.errors import ConfigError, ModelFileError

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
    ns.add_dummy_prefix = False  # GGUFTokenizer.encode adds it where transformers' Metaspace does
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return m.SerializeToString()


def cache_file(path) -> str:
    """Where the serialized model of the GGUF at `path` is kept: the user's cache, keyed by the
    file's path, size and modification time (and CACHE_VERSION)."""
    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{CACHE_VERSION}".encode()).hexdigest()
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mtp-turbo", "tokenizers")
    return os.path.join(root, key[:32] + ".model")


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
    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        tmp = f"{file}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(proto)
        os.replace(tmp, file)
    except OSError:
        pass  # a read-only cache costs time, never the answer
    return sp


def _bytes_text(run: bytes) -> str:
    try:
        return run.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(run)


class GGUFTokenizer:
    """Encode/decode with the vocabulary of a GGUF file (pass a GGUFFile or its metadata dict)."""

    def __init__(self, source: Any, cache: bool = True):
        """cache: keep the built SentencePiece model in the user's cache (cache_file): building it
        walks the vocabulary (~0.7 s for Gemma's 262 144 pieces), loading it takes ~0.1 s."""
        metadata = source.metadata if hasattr(source, "metadata") else source
        self._name = str(getattr(source, "path", "metadata"))
        try:
            self._sp = _cached_processor(source.path, metadata) if cache and hasattr(source, "path") else \
                _load(build_model_proto(metadata))
        except KeyError as e:
            raise ModelFileError(f"{self._name}: tokenizer metadata lacks {e.args[0]}") from None
        except ModelFileError as e:
            raise ModelFileError(f"{self._name}: {e}") from None
        except RuntimeError as e:  # e.g. a piece twice in the vocabulary
            raise ModelFileError(f"{self._name}: SentencePiece refused the vocabulary: {e}") from None
        self._pieces: list[str] = list(metadata["tokenizer.ggml.tokens"])
        types = metadata.get("tokenizer.ggml.token_type")
        types = [] if types is None else [int(k) for k in types]
        self._control = frozenset(i for i, k in enumerate(types) if k == TOKEN_CONTROL)
        # Markup, not text: control tokens, and user-defined ones spelled as a tag (Gemma's
        # <start_of_image>, <end_of_image>, [multimodal]; its other user-defined pieces are runs of
        # newlines and tabs, which are text). Decoding drops them unless asked for (special).
        self._markup = self._control | frozenset(
            i for i, k in enumerate(types) if k == TOKEN_USER_DEFINED and _TAG.fullmatch(self._pieces[i]))
        # Non-Gemma SentencePiece vocabularies get a dummy '▁' prefix that decoding strips again.
        self.strips_first_space = (metadata.get("general.architecture") not in _GEMMA_ARCHS
                                   and bool(metadata.get("tokenizer.ggml.add_space_prefix", True)))
        # The prefix goes where transformers' Metaspace ("first") puts it: before text that starts
        # neither with a space (' ' or '▁') nor with a piece matched whole (control / user-defined).
        self._whole = tuple(self._pieces[i] for i, k in enumerate(types) if k in (TOKEN_CONTROL, TOKEN_USER_DEFINED)) \
            if self.strips_first_space else ()
        self.vocab_size = len(self._pieces)
        self.bos_id = int(metadata.get("tokenizer.ggml.bos_token_id", -1))
        self.eos_id = int(metadata.get("tokenizer.ggml.eos_token_id", -1))
        self.add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", True)) and self.bos_id >= 0
        for what, i in (("bos", self.bos_id), ("eos", self.eos_id)):
            if not 0 <= i < self.vocab_size:
                raise ModelFileError(f"{self._name}: {what} token id {i} is outside the vocabulary")
        stops = [self.eos_id]
        eot = metadata.get("tokenizer.ggml.eot_token_id")
        if eot is not None and 0 <= int(eot) < self.vocab_size:
            stops.append(int(eot))
        end_of_turn = self.token_to_id("<end_of_turn>")
        if end_of_turn is not None:
            stops.append(end_of_turn)
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))
        template = metadata.get("tokenizer.chat_template")
        self.chat_template: str | None = str(template) if template else None  # the file's Jinja, if any

    def token_to_id(self, piece: str) -> int | None:
        """The id of a piece as encode spells it ('▁' for a space), None if the vocabulary lacks it."""
        i = self._sp.piece_to_id(piece)
        return i if self._sp.id_to_piece(i) == piece else None

    def token_str(self, token_id: int) -> str:
        """The piece as the vocabulary spells it ('▁' for a space, '<0x0A>' for a byte)."""
        return self._pieces[token_id]

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of `text`; BOS first when add_bos and the file says to add it."""
        ids = self._sp.encode(self._prefixed(text)) if text else []
        return [self.bos_id, *ids] if add_bos and self.add_bos else ids

    def encode_batch(self, texts: Sequence[str], add_bos: bool = True) -> list[list[int]]:
        out = self._sp.encode([self._prefixed(t) for t in texts]) if texts else []
        return [[self.bos_id, *ids] for ids in out] if add_bos and self.add_bos else out

    def _prefixed(self, text: str) -> str:
        if not self.strips_first_space or not text or text.startswith((" ", SPIECE_SPACE)) or text.startswith(self._whole):
            return text
        return " " + text

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids`. A leading BOS (what encode adds) is dropped, so decode(encode(x)) == x;
        with skip_special every markup token (is_markup) is dropped. A run of byte pieces that is
        not valid UTF-8 gives one U+FFFD per byte, as `tokenizers`' ByteFallback decoder writes."""
        ids = [int(i) for i in ids]
        if ids and ids[0] == self.bos_id:
            ids = ids[1:]
        out: list[str] = []
        run = bytearray()  # consecutive byte pieces, decoded together
        for i in ids:
            if skip_special and i in self._markup:
                continue
            b = _byte_of(self._pieces[i])
            if b is not None:
                run.append(b)
                continue
            if run:
                out.append(_bytes_text(run))
                run.clear()
            out.append(self._pieces[i].replace(SPIECE_SPACE, " "))
        if run:
            out.append(_bytes_text(run))
        text = "".join(out)
        return text[1:] if self.strips_first_space and text.startswith(" ") else text

    def piece_bytes(self, token_id: int) -> bytes:
        """The bytes one id contributes to the text (one byte for a byte-fallback piece)."""
        piece = self._pieces[token_id]
        b = _byte_of(piece)
        return bytes((b,)) if b is not None else piece.replace(SPIECE_SPACE, " ").encode("utf-8")

    def is_control(self, token_id: int) -> bool:
        return token_id in self._control

    def is_markup(self, token_id: int) -> bool:
        """A control token or a tag-like user-defined one: no text unless decoded with special."""
        return token_id in self._markup

    def stream(self, special: bool = False) -> "StreamDecoder":
        """An incremental decoder. Markup tokens (is_markup: `<end_of_turn>`, `<start_of_image>`, ...)
        give no text unless `special`; their ids are still the caller's to see."""
        return StreamDecoder(self, special=special)

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None

    def chat_prompt(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> "ChatPrompt":
        """The prompt a chat request becomes (see the module function chat_prompt)."""
        return chat_prompt(messages, self.chat_template, self._pieces[self.bos_id], self._pieces[self.eos_id],
                           add_generation_prompt)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Gemma's chat format (built in, whatever the file carries), without BOS (encode adds
        it); the format of the MTP head's training rows. A leading system message is folded into
        the first user turn, as Gemma-3's own template does; roles must alternate."""
        msgs = list(messages)
        prefix = ""
        if msgs and msgs[0].get("role") == "system":
            prefix = msgs[0].get("content", "").strip() + "\n\n"
            msgs = msgs[1:]
        out = []
        for i, m in enumerate(msgs):
            role = {"assistant": "model"}.get(m.get("role", ""), m.get("role", ""))
            want = "user" if i % 2 == 0 else "model"
            if role != want:
                raise ConfigError(f"chat message {i}: role {m.get('role')!r} where {want!r} was expected "
                                  "(roles must alternate user/assistant, an optional system message first)")
            content = m.get("content", "")
            if not isinstance(content, str):
                raise ConfigError(f"chat message {i}: content must be a string")
            text = (prefix if i == 0 else "") + content.strip()
            out.append(f"<start_of_turn>{role}\n{text}<end_of_turn>\n")
        if add_generation_prompt:
            out.append("<start_of_turn>model\n")
        return "".join(out)


# The plain-text rendering of chat messages for a model whose file has no chat template: one line
# per message, "System: ", "User: " or "Assistant: " before its content, and "Assistant:" last for
# the reply. A base model continues such a transcript with more turns, so generation stops at the
# next "User:" line.
PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}
PLAIN_CHAT_STOPS = ("\nUser:",)


@dataclass(frozen=True)
class ChatPrompt:
    text: str  # the prompt, without BOS
    stop: tuple[str, ...]  # strings that end the reply besides the model's stop tokens
    template: str  # "model" (the file's chat template) or "plain"


def plain_chat(messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    lines = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content", "")
        if role not in PLAIN_ROLES:
            raise ConfigError(f"chat message {i}: role {role!r} is not one of {', '.join(PLAIN_ROLES)}")
        if not isinstance(content, str):
            raise ConfigError(f"chat message {i}: content must be a string")
        lines.append(f"{PLAIN_ROLES[role]}: {content.strip()}")
    if add_generation_prompt:
        lines.append("Assistant:")
    return "\n".join(lines)


def chat_prompt(messages: Sequence[dict[str, Any]], template: str | None, bos_token: str, eos_token: str,
                add_generation_prompt: bool = True) -> ChatPrompt:
    """The prompt chat messages become: the model's Jinja chat template where its file has one
    (rendered in a sandbox as transformers does, a leading BOS left out: encode adds it; the
    template's raise_exception becomes a ConfigError), else the plain-text rendering (plain_chat,
    with the stop strings that end the assistant's turn)."""
    if not template:
        return ChatPrompt(plain_chat(messages, add_generation_prompt), PLAIN_CHAT_STOPS, "plain")
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise ConfigError(f"chat template: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        text = env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                                bos_token=bos_token, eos_token=eos_token)
    except TemplateError as e:
        raise ConfigError(f"the model's chat template failed: {e}") from None
    return ChatPrompt(text[len(bos_token):] if bos_token and text.startswith(bos_token) else text, (), "model")


class StreamDecoder:
    """Turns ids fed one at a time into text pieces that never split a UTF-8 character.

    Byte-fallback pieces are held back until their character is complete; concatenating every
    piece and flush() gives decode(ids) for valid text (decode(ids, skip_special=True) unless
    `special`: markup tokens give no text). Bytes that can never form a character come out as
    U+FFFD (one per invalid sequence, where the batch decoder writes one per byte).
    """

    def __init__(self, tokenizer: GGUFTokenizer, special: bool = False):
        self._tok = tokenizer
        self._skip = not special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._started = False  # for vocabularies whose decoder strips the dummy-prefix space

    def feed(self, token_id: int) -> str:
        """Text completed by this id ('' while a character is still incomplete)."""
        token_id = int(token_id)
        if self._skip and self._tok.is_markup(token_id):
            return ""
        text = self._utf8.decode(self._tok.piece_bytes(token_id))
        if text and not self._started:
            self._started = True
            if self._tok.strips_first_space and text.startswith(" "):
                text = text[1:]
        return text

    def feed_many(self, ids: Iterable[int]) -> Iterator[str]:
        """Yield the non-empty pieces for `ids` (call flush() after the last id)."""
        for i in ids:
            piece = self.feed(i)
            if piece:
                yield piece

    def flush(self) -> str:
        """Whatever is held back (an incomplete character becomes U+FFFD); the decoder resets."""
        out = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        self._started = False
        return out
