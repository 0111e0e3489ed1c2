"""The tokenizer a GGUF file describes, behind one interface whatever its kind.

Owns: GGUFTokenizer, the facade the engine uses: it picks the backend by `tokenizer.ggml.model`
("llama": SentencePiece, io/spm.py; "gpt2": byte-level BPE, io/bpe.py), and holds what is the same
for both: BOS/EOS and whether encode adds BOS, stop ids, incremental UTF-8-safe decoding
(StreamDecoder: control tokens silent unless asked for), Gemma's chat format, the file's own chat
template (`tokenizer.chat_template`, Jinja, rendered sandboxed), and the plain-text rendering of
messages for a model whose file has no template (a base model).
Ignores: how a vocabulary turns text into ids (the backends), unigram / WordPiece / RWKV
vocabularies (refused with ModelFileError).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mtp_turbo.errors import ConfigError, ModelFileError
# Re-exported: callers and tests import the SentencePiece builder and the token types from here.
from mtp_turbo.io.spm import (CACHE_VERSION, SPIECE_SPACE, TOKEN_BYTE, TOKEN_CONTROL,  # noqa: F401
                              TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_UNUSED, TOKEN_USER_DEFINED, build_model_proto,
                              cache_file)

SUPPORTED_MODELS = {"llama": "SentencePiece", "gpt2": "byte-level BPE"}
# End-of-turn tokens of the chat formats (ChatML, Llama 3, Gemma, GPT-2 style): stop ids where the
# vocabulary has them as control tokens, as llama.cpp's end-of-generation set has them.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


def _backend(source: Any, metadata: dict[str, Any], cache: bool) -> Any:
    model = metadata.get("tokenizer.ggml.model")
    if model == "llama":
        from mtp_turbo.io.spm import SpmVocab

        return SpmVocab(source, metadata, cache)
    if model == "gpt2":
        from mtp_turbo.io.bpe import BpeVocab

        return BpeVocab(metadata)
    kinds = ", ".join(f"{k!r} ({v})" for k, v in SUPPORTED_MODELS.items())
    raise ModelFileError(f"unsupported tokenizer model {model!r} (supported: {kinds})")


def add_bos_of(metadata: dict[str, Any]) -> bool:
    """Whether encode puts BOS first for this file: `tokenizer.ggml.add_bos_token`, else llama.cpp's
    default (SentencePiece: yes; byte-level: only for the pre types llama.cpp adds it to, Llama 3's
    and Tekken's), and never without a BOS id. Read from the metadata alone (no tokenizer built)."""
    default = True
    if metadata.get("tokenizer.ggml.model") == "gpt2":
        from mtp_turbo.io.bpe import PRE_TYPES

        default = PRE_TYPES.get(metadata.get("tokenizer.ggml.pre") or "default", {}).get("add_bos", False)
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    return bool(metadata.get("tokenizer.ggml.add_bos_token", default)) and bos is not None and int(bos) >= 0


class GGUFTokenizer:
    """Encode/decode with the vocabulary of a GGUF file (pass a GGUFFile or its metadata dict)."""

    def __init__(self, source: Any, cache: bool = True):
        """cache: keep the built SentencePiece model in the user's cache (io/spm.py cache_file):
        building it walks the vocabulary (~0.7 s for Gemma's 262 144 pieces), loading it takes
        ~0.1 s. Byte-level vocabularies are built each time (io/bpe.py says why)."""
        metadata = source.metadata if hasattr(source, "metadata") else source
        self._name = str(getattr(source, "path", "metadata"))
        try:
            self._vocab = _backend(source, metadata, cache)
        except KeyError as e:
            raise ModelFileError(f"{self._name}: tokenizer metadata lacks {e.args[0]}") from None
        except ModelFileError as e:
            raise ModelFileError(f"{self._name}: {e}") from None
        except RuntimeError as e:  # e.g. a piece twice in the vocabulary
            raise ModelFileError(f"{self._name}: SentencePiece refused the vocabulary: {e}") from None
        self._pieces: list[str] = self._vocab.pieces
        self.strips_first_space: bool = self._vocab.strips_first_space
        self.vocab_size = len(self._pieces)
        spm = metadata.get("tokenizer.ggml.model") == "llama"
        # SentencePiece files must name both (as before); a byte-level one may lack a BOS (Qwen's
        # base files name <|endoftext|>, others none), then it is -1 and never added
        self.bos_id = int(metadata.get("tokenizer.ggml.bos_token_id", -1))
        self.eos_id = int(metadata.get("tokenizer.ggml.eos_token_id", -1))
        self.add_bos = add_bos_of(metadata)
        if metadata.get("tokenizer.ggml.add_bos_token") and self.bos_id < 0:  # llama.cpp refuses it too
            raise ModelFileError(f"{self._name}: tokenizer.ggml.add_bos_token is set but the file names no BOS id")
        for what, i in (("bos", self.bos_id), ("eos", self.eos_id)):
            if not 0 <= i < self.vocab_size and (spm or what == "eos" or i != -1):
                raise ModelFileError(f"{self._name}: {what} token id {i} is outside the vocabulary")
        # decode drops a leading BOS, the one encode adds (SentencePiece: always, as it did)
        self._drop_bos = self.bos_id >= 0 and (spm or self.add_bos)
        stops = [self.eos_id]
        eot = metadata.get("tokenizer.ggml.eot_token_id")
        if eot is not None and 0 <= int(eot) < self.vocab_size:
            stops.append(int(eot))
        for piece in END_OF_TURN:
            i = self.token_to_id(piece)
            if i is not None and self.is_control(i):
                stops.append(i)
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))
        template = metadata.get("tokenizer.chat_template")
        self.chat_template: str | None = str(template) if template else None  # the file's Jinja, if any

    def token_to_id(self, piece: str) -> int | None:
        """The id of a piece as the vocabulary spells it ('▁' for a SentencePiece space, 'Ġ' for a
        byte-level one), None if the vocabulary lacks it."""
        return self._vocab.token_to_id(piece)

    def token_str(self, token_id: int) -> str:
        """The piece as the vocabulary spells it ('▁hello' / 'Ġhello', '<0x0A>' for a byte)."""
        return self._pieces[token_id]

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of `text`; BOS first when add_bos and the file says to add it. Control tokens
        written in the text (`<|im_start|>`, `<start_of_turn>`) are matched whole."""
        ids = self._vocab.encode_batch([text])[0] if text else []
        return [self.bos_id, *ids] if add_bos and self.add_bos else ids

    def encode_batch(self, texts: Sequence[str], add_bos: bool = True) -> list[list[int]]:
        out = self._vocab.encode_batch(texts)
        return [[self.bos_id, *ids] for ids in out] if add_bos and self.add_bos else out

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids`. A leading BOS (what encode adds) is dropped, so decode(encode(x)) == x;
        with skip_special every markup token (is_markup) is dropped. Bytes that are not UTF-8 give
        U+FFFD: one per byte for SentencePiece byte pieces (as `tokenizers`' ByteFallback), one per
        invalid sequence for byte-level tokens (as `tokenizers`' ByteLevel decoder)."""
        ids = [int(i) for i in ids]
        if ids and self._drop_bos and ids[0] == self.bos_id:
            ids = ids[1:]
        return self._vocab.decode(ids, skip_special)

    def piece_bytes(self, token_id: int) -> bytes:
        """The bytes one id contributes to the text (one byte for a byte piece, part of a
        character for a byte-level token that splits one)."""
        return self._vocab.piece_bytes(token_id)

    def is_control(self, token_id: int) -> bool:
        return self._vocab.is_control(token_id)

    def is_markup(self, token_id: int) -> bool:
        """A control token (or a tag-like user-defined one in a SentencePiece vocabulary): no text
        unless decoded with special."""
        return self._vocab.is_markup(token_id)

    def stream(self, special: bool = False) -> "StreamDecoder":
        """An incremental decoder. Markup tokens (is_markup: `<end_of_turn>`, `<start_of_image>`, ...)
        give no text unless `special`; their ids are still the caller's to see."""
        return StreamDecoder(self, special=special)

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None

    def chat_prompt(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> "ChatPrompt":
        """The prompt a chat request becomes (see the module function chat_prompt)."""
        bos = self._pieces[self.bos_id] if self.bos_id >= 0 else ""
        return chat_prompt(messages, self.chat_template, bos, self._pieces[self.eos_id],
                           add_generation_prompt, strip_bos=self.add_bos)

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
    text: str  # the prompt, without the BOS encode adds
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
                add_generation_prompt: bool = True, strip_bos: bool = True) -> ChatPrompt:
    """The prompt chat messages become: the model's Jinja chat template where its file has one
    (rendered in a sandbox as transformers does, a leading BOS left out when strip_bos: encode adds
    it, where the file says so, add_bos_of; the template's raise_exception becomes a ConfigError),
    else the plain-text rendering (plain_chat, with the stop strings that end the assistant's
    turn). SmolLM2's BOS is <|im_start|>, which encode does not add: it must stay (strip_bos off)."""
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
    strip = strip_bos and bos_token and text.startswith(bos_token)
    return ChatPrompt(text[len(bos_token):] if strip else text, (), "model")


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
