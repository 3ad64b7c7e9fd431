"""What every tokenizer here shares: errors, added (special) tokens, and the ids <-> bytes side.

A tokenizer in tl-serve is two tables and one function:
  - `token_bytes[id]`: the exact bytes a token stands for. Decoding is joining these bytes
    and reading them as UTF-8 (a character may be split across tokens; a lone fragment
    decodes to U+FFFD, as Hugging Face's `from_utf8_lossy` does).
  - `token_strings[id]`: the token's name in the vocabulary ("Ġworld" for b" world").
  - `_encode_ordinary(text)`: text with no special tokens in it -> ids. Subclasses supply it.

Added tokens ("<|im_start|>", "<|endoftext|>", ...) are found in the text *first*, before any
pre-tokenization, leftmost match first and the longest at one position (Hugging Face's
added-vocabulary rule). Only the text between them reaches the subclass. Special added
tokens (`is_special`) are matched only when `parse_special=True`; ordinary added tokens are
always matched.

Security note: a user's message that contains "<|im_end|>" text becomes the real control token
with the default `parse_special=True` (what Hugging Face, vLLM and llama.cpp do, and what the
oracle expects). Callers that tokenize untrusted text outside the chat template can pass
`parse_special=False` to keep such text plain.

No I/O here; loaders live in the subclasses.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import regex


class TokenizerError(Exception):
    """Base class of the tokenizer's errors."""


class TokenizerLoadError(TokenizerError):
    """A tokenizer.json or GGUF vocabulary that this package cannot build a tokenizer from."""


class UnknownTokenIdError(TokenizerError, ValueError):
    """An id outside the vocabulary (negative, too large, or a hole in the id space)."""

    def __init__(self, token_id: object) -> None:
        super().__init__(f"unknown token id {token_id!r}")
        self.token_id = token_id


@dataclass(frozen=True)
class AddedToken:
    """A token matched as a whole in the text before pre-tokenization."""

    id: int
    content: str
    is_special: bool          # parsed only when parse_special; dropped by skip_special_tokens
    lstrip: bool = False      # swallow whitespace on its left
    rstrip: bool = False      # swallow whitespace on its right


class AddedTokenMatcher:
    """Splits text into plain-text segments (str) and added-token ids (int)."""

    def __init__(self, tokens: Iterable[AddedToken]) -> None:
        # Longest first so that, at one position, alternation picks the longest match.
        ordered = sorted(tokens, key=lambda t: len(t.content), reverse=True)
        self._id_of = {t.content: t.id for t in ordered}
        self._pattern = _compile_alternation(ordered) if ordered else None

    def split(self, text: str) -> list[str | int]:
        if self._pattern is None:
            return [text] if text else []
        segments: list[str | int] = []
        end = 0
        for match in self._pattern.finditer(text):
            start, stop = match.span()
            if start > end:
                segments.append(text[end:start])
            segments.append(self._id_of[match.group("tok")])
            end = stop
        if end < len(text):
            segments.append(text[end:])
        return segments


def _compile_alternation(tokens: Sequence[AddedToken]) -> regex.Pattern:
    # The `regex` module allows one group name in several branches: "tok" is the content.
    branches = [
        ("\\s*" if t.lstrip else "") + "(?P<tok>" + regex.escape(t.content) + ")"
        + ("\\s*" if t.rstrip else "")
        for t in tokens
    ]
    return regex.compile("|".join(branches))


class Tokenizer:
    """The shared half of ByteTokenizer and BPETokenizer (see the module docstring)."""

    def __init__(
        self,
        *,
        token_strings: Sequence[str | None],
        token_bytes: Sequence[bytes | None],
        added_tokens: Sequence[AddedToken],
        bos_token_id: int | None,
        eos_token_ids: Sequence[int],
        add_bos_token: bool = False,
    ) -> None:
        if len(token_strings) != len(token_bytes):
            raise TokenizerLoadError("token_strings and token_bytes differ in length")
        self._token_strings = list(token_strings)
        self._token_bytes = list(token_bytes)
        self.vocab_size: int = len(self._token_bytes)
        self._id_of: dict[str, int] = {
            s: i for i, s in enumerate(self._token_strings) if s is not None}
        for token in added_tokens:
            self._check_id(token.id)
            self._id_of[token.content] = token.id
        self.special_ids: frozenset[int] = frozenset(
            t.id for t in added_tokens if t.is_special)
        self._matcher_all = AddedTokenMatcher(added_tokens)
        self._matcher_plain = AddedTokenMatcher(t for t in added_tokens if not t.is_special)
        self.bos_token_id: int | None = bos_token_id
        self.eos_token_ids: tuple[int, ...] = tuple(eos_token_ids)
        # Whether the model's text starts with BOS (tokenizer_config / GGUF add_bos_token).
        self.add_bos_token: bool = add_bos_token and bos_token_id is not None
        for token_id in ((bos_token_id,) if bos_token_id is not None else ()) + self.eos_token_ids:
            self._check_id(token_id)
        self.bos_token: str = self.id_to_token(bos_token_id) if bos_token_id is not None else ""
        self.eos_token: str = self.id_to_token(self.eos_token_ids[0]) if self.eos_token_ids else ""

    # -- text -> ids ---------------------------------------------------------------------
    def encode(self, text: str, *, parse_special: bool = True,
               add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Added tokens are matched first. With `add_special_tokens`
        BOS comes first when the model asks for it (`add_bos_token`); EOS is never added."""
        matcher = self._matcher_all if parse_special else self._matcher_plain
        ids: list[int] = []
        if add_special_tokens and self.add_bos_token:
            ids.append(self.bos_token_id)  # type: ignore[arg-type]
        follows_token = True          # the text's start counts as "after a token"
        for segment in matcher.split(text):
            if isinstance(segment, int):
                ids.append(segment)
                follows_token = True
            else:
                ids.extend(self._encode_ordinary(self._text_prefix(follows_token) + segment))
                follows_token = False
        return ids

    def _text_prefix(self, follows_token: bool) -> str:
        """Text put before a plain segment that starts the text or follows an added token
        (SentencePiece's space prefix); none here."""
        return ""

    def _encode_ordinary(self, text: str) -> list[int]:
        raise NotImplementedError

    # -- ids -> text ---------------------------------------------------------------------
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (a special token's bytes are its UTF-8 text)."""
        self._check_id(token_id)
        return self._token_bytes[token_id]  # type: ignore[return-value]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """The tokens' bytes joined and read as UTF-8, invalid bytes as U+FFFD."""
        ids = list(ids)
        if skip_special_tokens:
            ids = [i for i in ids if i not in self.special_ids]
        table = self._token_bytes
        try:
            parts = [table[i] for i in ids]  # fast path; negative ids and holes checked below
        except (IndexError, TypeError):
            parts = [None]
        if None in parts or (ids and min(ids) < 0):
            parts = [self.token_bytes(i) for i in ids]  # raises UnknownTokenIdError
        return b"".join(parts).decode("utf-8", errors="replace")  # type: ignore[arg-type]

    def id_to_token(self, token_id: int) -> str:
        """The token's vocabulary string ("Ġworld"), or an added token's text."""
        self._check_id(token_id)
        return self._token_strings[token_id]  # type: ignore[return-value]

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary string or added token's text; None if there is none."""
        return self._id_of.get(token)

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size or self._token_bytes[token_id] is None:
            raise UnknownTokenIdError(token_id)
