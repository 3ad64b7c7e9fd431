"""Byte-level BPE (GPT-2 family: SmolLM2, Llama 3, Qwen2), from tokenizer.json or GGUF.

Encoding one text, step by step (SmolLM2, "Hi <|im_end|> 2024"):
  1. added tokens first:   "Hi "  <|im_end|>=2  " 2024"          (base.AddedTokenMatcher)
     then the tokenizer.json normalizer, if any, on each text segment (Qwen: NFC;
     normalize.py; a GGUF has none)
  2. pre-tokenize each text segment into words; SmolLM2 cuts every digit out, then applies
     the GPT-2 regex:      "Hi" " " | " " "2" "0" "2" "4"         (pretokenize.py)
  3. each word -> bytes -> byte-level symbols -> merges by rank -> ids  (merges.py)
Decoding joins each token's bytes and reads them as UTF-8 (base.Tokenizer.decode).

Two loaders build the same tokenizer; the tests check both against the oracle:
  - `BPETokenizer.from_tokenizer_json(path_or_dict, tokenizer_config=...)`: Hugging Face's
    file; `added_tokens` with `special: true` are the special ids; tokenizer_config.json (if
    given) names the bos/eos tokens.
  - `BPETokenizer.from_gguf_metadata(metadata)`: llama.cpp's `tokenizer.ggml.*` keys; the
    token type decides what is matched in text (`GGUF_TOKEN_KINDS`), and `tokenizer.ggml.pre`
    picks the pre-tokenizer.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.tokenizer.base import AddedToken, Tokenizer, TokenizerLoadError
from engine.tokenizer.hf_json import (
    added_tokens_from_json, config_token_id, json_adds_bos, read_tokenizer_json)
from engine.tokenizer.bytes_unicode import byte_chars_to_bytes
from engine.tokenizer.merges import Pair, WordEncoder
from engine.tokenizer.normalize import Normalizer, normalizer_from_json
from engine.tokenizer.pretokenize import (
    PRE_TYPES_IGNORING_MERGES, PreTokenizer, pre_tokenizer_for_gguf, pre_tokenizer_from_json)


@dataclass(frozen=True)
class TokenKind:
    """How a GGUF token type behaves."""

    is_added: bool       # matched as a whole in the text before pre-tokenization;
                         # its bytes are its text's UTF-8 (as for every added token)
    is_special: bool     # matched only with parse_special; dropped by skip_special_tokens


# llama.cpp's token types (llama_token_type). Control and unknown tokens are Hugging Face's
# `special: true` added tokens; user-defined are its non-special added tokens (always
# matched in text, kept when skipping specials).
GGUF_TOKEN_KINDS: dict[int, TokenKind] = {
    0: TokenKind(is_added=False, is_special=False),     # undefined
    1: TokenKind(is_added=False, is_special=False),     # normal
    2: TokenKind(is_added=True, is_special=True),       # unknown
    3: TokenKind(is_added=True, is_special=True),       # control
    4: TokenKind(is_added=True, is_special=False),      # user-defined
    5: TokenKind(is_added=False, is_special=False),     # unused
    6: TokenKind(is_added=False, is_special=False),     # byte ("<0x41>"): raw_text_ids
}
GGUF_NORMAL_TOKEN_TYPE = 1
GGUF_BYTE_TOKEN_TYPE = 6
# The GGUF tokenizer model this class implements (llama.cpp calls byte-level BPE "gpt2").
GGUF_BPE_MODEL = "gpt2"
# The pre-tokenizer assumed when a GGUF has no `tokenizer.ggml.pre` key.
GGUF_DEFAULT_PRE = "default"


class BPETokenizer(Tokenizer):
    """Byte-level BPE; build it with `from_tokenizer_json` or `from_gguf_metadata`."""

    def __init__(
        self,
        *,
        vocab: dict[str, int],
        merges: Sequence[Pair],
        pre_tokenizer: PreTokenizer,
        added_tokens: Sequence[AddedToken],
        bos_token_id: int | None,
        eos_token_ids: Sequence[int],
        ignore_merges: bool = False,
        raw_text_ids: frozenset[int] = frozenset(),
        normalizer: Normalizer = Normalizer(),
        add_bos_token: bool = False,
    ) -> None:
        token_strings = _token_strings(vocab, added_tokens)
        token_bytes = [
            None if s is None else _bytes_of_token(s, is_raw_text=i in raw_text_ids)
            for i, s in enumerate(token_strings)]
        for token in added_tokens:
            token_bytes[token.id] = token.content.encode("utf-8")
        super().__init__(token_strings=token_strings, token_bytes=token_bytes,
                         added_tokens=added_tokens, bos_token_id=bos_token_id,
                         eos_token_ids=eos_token_ids, add_bos_token=add_bos_token)
        self._normalizer = normalizer
        self._pre_tokenizer = pre_tokenizer
        self._words = WordEncoder(vocab, merges, ignore_merges=ignore_merges)

    def _encode_ordinary(self, text: str) -> list[int]:
        text = self._normalizer.apply(text)
        return self._words.encode_words(self._pre_tokenizer.split(text))

    # -- loaders -------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(
        cls, source: str | os.PathLike | Mapping[str, Any], *,
        tokenizer_config: Mapping[str, Any] | None = None,
    ) -> BPETokenizer:
        """From Hugging Face's tokenizer.json (a path or the parsed dict); the optional
        parsed tokenizer_config.json names the bos_token and eos_token."""
        data = source if isinstance(source, Mapping) else read_tokenizer_json(source)
        model = data.get("model") or {}
        if model.get("type") != "BPE":
            raise TokenizerLoadError(f"tokenizer.json model type {model.get('type')!r} is not BPE")
        if model.get("byte_fallback") or (data.get("decoder") or {}).get("type") not in (
                "ByteLevel", None):
            raise TokenizerLoadError("only byte-level BPE tokenizer.json files are supported")
        added = added_tokens_from_json(data)
        content_ids = {t.content: t.id for t in added} | dict(model["vocab"])
        config = tokenizer_config or {}
        bos_id = config_token_id(config.get("bos_token"), content_ids, "bos_token")
        eos_id = config_token_id(config.get("eos_token"), content_ids, "eos_token")
        return cls(
            vocab=dict(model["vocab"]),
            merges=[parse_merge(m) for m in model.get("merges", [])],
            pre_tokenizer=pre_tokenizer_from_json(data.get("pre_tokenizer")),
            added_tokens=added,
            bos_token_id=bos_id,
            eos_token_ids=() if eos_id is None else (eos_id,),
            ignore_merges=bool(model.get("ignore_merges", False)),
            normalizer=normalizer_from_json(data.get("normalizer")),
            add_bos_token=json_adds_bos(data, config, bos_id),
        )

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> BPETokenizer:
        """From a GGUF file's `tokenizer.ggml.*` metadata (strings as str, arrays as lists)."""
        model = metadata.get("tokenizer.ggml.model")
        if model != GGUF_BPE_MODEL:
            raise TokenizerLoadError(
                f"tokenizer.ggml.model {model!r} is not supported (only {GGUF_BPE_MODEL!r})")
        tokens = list(metadata["tokenizer.ggml.tokens"])
        types = [int(t) for t in metadata.get(
            "tokenizer.ggml.token_type", [GGUF_NORMAL_TOKEN_TYPE] * len(tokens))]
        if len(types) != len(tokens):
            raise TokenizerLoadError("tokenizer.ggml.token_type and tokens differ in length")
        kinds = [gguf_kind(t) for t in types]
        pre_type = metadata.get("tokenizer.ggml.pre", GGUF_DEFAULT_PRE)
        added = [AddedToken(id=i, content=tok, is_special=kind.is_special)
                 for i, (tok, kind) in enumerate(zip(tokens, kinds)) if kind.is_added]
        bos_id = metadata.get("tokenizer.ggml.bos_token_id")
        return cls(
            vocab={tok: i for i, tok in enumerate(tokens)},
            merges=[parse_merge(m) for m in metadata.get("tokenizer.ggml.merges", [])],
            pre_tokenizer=pre_tokenizer_for_gguf(pre_type),
            added_tokens=added,
            bos_token_id=None if bos_id is None else int(bos_id),
            eos_token_ids=gguf_eos_ids(metadata),
            ignore_merges=pre_type in PRE_TYPES_IGNORING_MERGES,
            raw_text_ids=frozenset(i for i, t in enumerate(types) if t == GGUF_BYTE_TOKEN_TYPE),
            add_bos_token=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        )


def parse_merge(merge: str | Sequence[str]) -> Pair:
    """A merge as stored: "Ġ t" (older files, GGUF) or ["Ġ", "t"] (newer tokenizer.json)."""
    if isinstance(merge, str):
        left, sep, right = merge.partition(" ")
        if not sep:
            raise TokenizerLoadError(f"malformed merge {merge!r}")
        return left, right
    left, right = merge
    return left, right


def _token_strings(vocab: Mapping[str, int], added: Sequence[AddedToken]) -> list[str | None]:
    size = 1 + max([*vocab.values(), *(t.id for t in added)], default=-1)
    strings: list[str | None] = [None] * size
    for token, token_id in vocab.items():
        strings[token_id] = token
    for token in added:
        strings[token.id] = token.content
    return strings


def _bytes_of_token(token: str, *, is_raw_text: bool) -> bytes:
    """A vocabulary string's bytes: byte-level characters mapped back to bytes; a GGUF byte
    token "<0x0A>" is its byte; text outside the byte alphabet is its own UTF-8 (as
    Hugging Face's ByteLevel decoder does)."""
    if is_raw_text:
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.encode("utf-8")
    from_chars = byte_chars_to_bytes(token)
    return token.encode("utf-8") if from_chars is None else from_chars


def gguf_kind(token_type: int) -> TokenKind:
    try:
        return GGUF_TOKEN_KINDS[token_type]
    except KeyError:
        raise TokenizerLoadError(f"unknown GGUF token type {token_type}") from None


def gguf_eos_ids(metadata: Mapping[str, Any]) -> tuple[int, ...]:
    """The GGUF's end ids: eos and (if another) eot, in that order."""
    return _distinct_ids(metadata.get("tokenizer.ggml.eos_token_id"),
                         metadata.get("tokenizer.ggml.eot_token_id"))


def _distinct_ids(*maybe_ids: Any) -> tuple[int, ...]:
    ids: list[int] = []
    for token_id in maybe_ids:
        if token_id is not None and int(token_id) not in ids:
            ids.append(int(token_id))
    return tuple(ids)
