"""The tokenizer a GGUF file describes, built in memory with the `tokenizers` library.

Owns: turning `tokenizer.ggml.*` metadata of a SentencePiece-style vocabulary ("llama" model:
pieces + scores + token types, no merges) into a byte-fallback BPE `tokenizers.Tokenizer` that
encodes exactly like transformers' GGUF conversion (GemmaTokenizer for the Gemma family), BOS/EOS
and stop ids, incremental UTF-8-safe decoding (control tokens silent unless asked for), Gemma's
chat format, the file's own chat template (`tokenizer.chat_template`, Jinja, rendered sandboxed),
and the plain-text rendering of messages for a model whose file has no template (a base model).
Ignores: byte-level (gpt2) and unigram vocabularies (refused with ModelFileError), any on-disk
caching.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mtp_turbo.errors import ConfigError, ModelFileError

# llama.cpp token types (tokenizer.ggml.token_type).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
SPIECE_SPACE = "\u2581"  # '▁', SentencePiece's visible space
_TAG = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")  # '<start_of_image>', '[multimodal]'
_GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")


def _byte_of(piece: str) -> int | None:
    """The byte a '<0xXX>' byte-fallback piece stands for, else None (as tokenizers' ByteFallback)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


def _merges(tokens: list[str], rank_of: dict[str, float], unique_ranks: bool) -> list[tuple[str, str]]:
    """Every (left, right) split of a vocabulary piece into two pieces, best merge first.

    The list transformers' generate_merges(vocab, rank_of) makes: sorted by (rank of the piece,
    len(left), len(right)), highest first, stable. With one rank per piece (Gemma: file order)
    that is one pass over the pieces in rank order, longer left part first, with no big sort.
    """
    vocab = {t: i for i, t in enumerate(tokens)}
    if unique_ranks:
        merges: list[tuple[str, str]] = []
        append = merges.append
        for piece in sorted(rank_of, key=rank_of.__getitem__, reverse=True):
            for cut in range(len(piece) - 1, 0, -1):
                left, right = piece[:cut], piece[cut:]
                if left in vocab and right in vocab:
                    append((left, right))
        return merges
    scored = []
    for piece, rank in rank_of.items():
        local = [(piece[:c], piece[c:]) for c in range(1, len(piece)) if piece[:c] in vocab and piece[c:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        scored.extend((rank, len(lt), len(rt), lt, rt) for lt, rt in local)
    scored.sort(key=lambda m: m[:3], reverse=True)
    return [(lt, rt) for _, _, _, lt, rt in scored]


def _cached_tokenizer(path, metadata: dict[str, Any]) -> Any:
    """build_tokenizer(metadata), through a JSON copy in the user's cache (written once per file)."""
    import hashlib
    import os

    from tokenizers import Tokenizer

    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{CACHE_VERSION}".encode()).hexdigest()
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mtp-turbo", "tokenizers")
    file = os.path.join(root, key[:32] + ".json")
    try:
        return Tokenizer.from_file(file)
    except Exception:  # absent or unreadable: build it (and try to keep it)
        tok = build_tokenizer(metadata)
        try:
            os.makedirs(root, exist_ok=True)
            tmp = f"{file}.{os.getpid()}.tmp"
            tok.save(tmp)
            os.replace(tmp, file)
        except OSError:
            pass  # a read-only cache costs time, never the answer
        return tok


CACHE_VERSION = 1  # bump when build_tokenizer changes what it builds


def build_tokenizer(metadata: dict[str, Any]) -> Any:
    """A tokenizers.Tokenizer (no post-processor: BOS is added by GGUFTokenizer.encode)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    model = metadata.get("tokenizer.ggml.model")
    if model != "llama":
        raise ModelFileError(f"unsupported tokenizer model {model!r} (only SentencePiece 'llama' vocabularies)")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    n = len(tokens)
    types = metadata.get("tokenizer.ggml.token_type")
    types = [TOKEN_NORMAL] * n if types is None else [int(t) for t in types]
    if len(types) != n:
        raise ModelFileError(f"tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
    gemma = metadata.get("general.architecture") in _GEMMA_ARCHS
    if gemma:
        # Gemma files store tokens of 2+ spaces with real spaces; the normalizer turns text spaces
        # into '▁', so they are respelled to match. Gemma's scores do not follow its merge order,
        # the file order does (transformers' gemma_tokenizer makes the same two fixes).
        tokens = [SPIECE_SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
        rank_of = {t: -i for i, t in enumerate(tokens)}
    else:
        scores = metadata.get("tokenizer.ggml.scores")
        if scores is None or len(scores) != n:
            raise ModelFileError("tokenizer.ggml.scores is missing or does not match the vocabulary")
        rank_of = {t: float(s) for t, s in zip(tokens, scores)}
    vocab = {t: i for i, t in enumerate(tokens)}
    unk_id = int(metadata.get("tokenizer.ggml.unknown_token_id", 0))
    bpe = BPE(vocab=vocab, merges=_merges(tokens, rank_of, unique_ranks=gemma), unk_token=tokens[unk_id],
              fuse_unk=True, byte_fallback=True, dropout=None)
    tok = Tokenizer(bpe)
    steps = [decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if gemma:  # GemmaTokenizer: spaces become '▁', no dummy prefix (Gemma-3: add_space_prefix False)
        tok.normalizer = normalizers.Replace(" ", SPIECE_SPACE)
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    else:  # LlamaTokenizer: Metaspace, with a dummy prefix that decoding strips again
        prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement=SPIECE_SPACE, prepend_scheme="first" if prefix else "never", split=False)
        if prefix:
            steps.append(decoders.Strip(content=" ", left=1))
    tok.decoder = decoders.Sequence(steps)
    # Control tokens are special and matched whole in raw text; user-defined ones (Gemma's runs of
    # newlines/tabs, '[multimodal]') are matched whole too but are ordinary text.
    control = [AddedToken(t, normalized=False, special=True) for t, k in zip(tokens, types) if k == TOKEN_CONTROL]
    tok.add_special_tokens(control)
    # (a respelled space run is not added: the file's spelling "  " is no longer a piece, as in transformers)
    original = metadata["tokenizer.ggml.tokens"]
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, o, k in zip(tokens, original, types) if k == TOKEN_USER_DEFINED and t == o])
    return tok


class GGUFTokenizer:
    """Encode/decode with the vocabulary of a GGUF file (pass a GGUFFile or its metadata dict)."""

    def __init__(self, source: Any, cache: bool = True):
        """cache: keep the built tokenizer beside the user's cache (~/.cache/mtp-turbo), keyed by
        the file's path, size and modification time: building it takes seconds, loading it not."""
        metadata = source.metadata if hasattr(source, "metadata") else source
        self._name = str(getattr(source, "path", "metadata"))
        try:
            self._tok = _cached_tokenizer(source.path, metadata) if cache and hasattr(source, "path") else \
                build_tokenizer(metadata)
        except KeyError as e:
            raise ModelFileError(f"{self._name}: tokenizer metadata lacks {e.args[0]}") from None
        except ModelFileError as e:
            raise ModelFileError(f"{self._name}: {e}") from None
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
        end_of_turn = self._tok.token_to_id("<end_of_turn>")
        if end_of_turn is not None:
            stops.append(end_of_turn)
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))
        template = metadata.get("tokenizer.chat_template")
        self.chat_template: str | None = str(template) if template else None  # the file's Jinja, if any

    @property
    def backend(self) -> Any:
        """The underlying tokenizers.Tokenizer."""
        return self._tok

    def token_str(self, token_id: int) -> str:
        """The piece as the vocabulary spells it ('▁' for a space, '<0x0A>' for a byte)."""
        return self._pieces[token_id]

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of `text`; BOS first when add_bos and the file says to add it."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos and self.add_bos else ids

    def encode_batch(self, texts: Sequence[str], add_bos: bool = True) -> list[list[int]]:
        out = [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]
        return [[self.bos_id, *ids] for ids in out] if add_bos and self.add_bos else out

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids`. A leading BOS (what encode adds) is dropped, so decode(encode(x)) == x;
        with skip_special every markup token (is_markup) is dropped."""
        ids = [int(i) for i in ids]
        if ids and ids[0] == self.bos_id:
            ids = ids[1:]
        if skip_special:
            ids = [i for i in ids if i not in self._markup]
        return self._tok.decode(ids, skip_special_tokens=skip_special)

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
