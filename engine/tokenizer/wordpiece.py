"""WordPiece, as Hugging Face's BertTokenizer(Fast) does it: BERT-family vocabularies.

Text -> ids in three stages: added tokens ("[CLS]", "[SEP]", ... found first in the raw
text, base.py's rule), BERT's basic tokenisation of the text between them (bert_basic.py),
then each word cut into vocabulary pieces greedily, longest match first, every piece after
the first spelled with the continuation prefix `##`. A word longer than
`max_input_chars_per_word` characters, or one with a stretch no piece matches, is one
`[UNK]`. `encode(..., add_special_tokens=True)` wraps the ids in `[CLS] ... [SEP]`.

Read from tokenizer.json (model type WordPiece, a BertNormalizer, a BertPreTokenizer) or
from vocab.txt (one token per line, the id is the line number) + tokenizer_config.json.
tokenizer.json's own `truncation` / `padding` blocks are ignored on purpose: transformers and
sentence-transformers override them, and the raw `tokenizers` library's padding of every
text to 128 ids is not what a model was trained or evaluated with.

Decoding follows the tokenizers library's WordPiece decoder: pieces joined by spaces, `##`
pieces glued to the previous one, and its clean-up applied to each piece on its own (so " ,"
loses its space but "i ' m" stays: the contraction rules never see a whole " ' " or " 'm").
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.tokenizer.base import AddedToken, Tokenizer, TokenizerLoadError
from engine.tokenizer.bert_basic import BertNormalizer, split_words
from engine.tokenizer.hf_json import added_tokens_from_json, read_tokenizer_json

CONTINUATION_PREFIX = "##"
MAX_INPUT_CHARS_PER_WORD = 100
WORD_CACHE_ENTRIES = 1 << 16     # words seen -> their piece ids; cleared when full
SPECIAL_ROLES = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
DEFAULT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                    "cls_token": "[CLS]", "mask_token": "[MASK]"}
# Hugging Face's clean-up rules (spaces dropped before these), applied piece by piece.
CLEANUP_REPLACEMENTS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                        (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                        (" 're", "'re"))


class WordPieceTokenizer(Tokenizer):
    """A BERT tokenizer: `encode(text, add_special_tokens=True)` -> [CLS] ids [SEP]."""

    def __init__(self, vocab: Mapping[str, int], added_tokens: Iterable[AddedToken], *,
                 normalizer: BertNormalizer, unk_token: str = "[UNK]",
                 cls_token: str = "[CLS]", sep_token: str = "[SEP]", pad_token: str = "[PAD]",
                 prefix: str = CONTINUATION_PREFIX,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD) -> None:
        size = max(vocab.values(), default=-1) + 1
        strings: list[str | None] = [None] * size
        for token, token_id in vocab.items():
            strings[token_id] = token
        super().__init__(token_strings=strings,
                         token_bytes=[s.encode() if s is not None else None for s in strings],
                         added_tokens=list(added_tokens), bos_token_id=None, eos_token_ids=())
        self._vocab = dict(vocab)
        self.normalizer = normalizer
        self.prefix = prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        self.unk_token_id = self._required_id(unk_token, "unk_token")
        self.cls_token_id = self._required_id(cls_token, "cls_token")
        self.sep_token_id = self._required_id(sep_token, "sep_token")
        self.pad_token_id = self._required_id(pad_token, "pad_token")
        self._word_cache: dict[str, tuple[int, ...]] = {}

    def _required_id(self, token: str, role: str) -> int:
        token_id = self.token_to_id(token)
        if token_id is None:
            raise TokenizerLoadError(f"{role} {token!r} is not in the vocabulary")
        return token_id

    # -- text -> ids ---------------------------------------------------------------------
    def encode(self, text: str, *, parse_special: bool = True,
               add_special_tokens: bool = False) -> list[int]:
        ids = super().encode(text, parse_special=parse_special)
        if add_special_tokens:
            return [self.cls_token_id, *ids, self.sep_token_id]
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in split_words(self.normalizer.normalize(text)):
            pieces = self._word_cache.get(word)
            if pieces is None:
                pieces = self._word_pieces(word)
                if len(self._word_cache) >= WORD_CACHE_ENTRIES:
                    self._word_cache.clear()
                self._word_cache[word] = pieces
            ids.extend(pieces)
        return ids

    def _word_pieces(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first pieces of one word, or (unk,) if any stretch fails."""
        if len(word) > self.max_input_chars_per_word:
            return (self.unk_token_id,)
        pieces: list[int] = []
        start = 0
        while start < len(word):
            found = None
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                found = self._vocab.get(piece)
                if found is not None:
                    start = end
                    break
            if found is None:
                return (self.unk_token_id,)
            pieces.append(found)
        return tuple(pieces)

    # -- ids -> text ---------------------------------------------------------------------
    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        ids = [i for i in ids if not (skip_special_tokens and i in self.special_ids)]
        pieces = []
        for position, token in enumerate(self.id_to_token(i) for i in ids):
            if position and token.startswith(self.prefix):
                token = token[len(self.prefix):]
            elif position:
                token = " " + token
            for before, after in CLEANUP_REPLACEMENTS:     # per piece, as the decoder does
                token = token.replace(before, after)
            pieces.append(token)
        return "".join(pieces)

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(cls, data: Mapping[str, Any]) -> WordPieceTokenizer:
        """tokenizer.json (parsed): a WordPiece model, BertNormalizer, BertPreTokenizer."""
        model = data.get("model") or {}
        if model.get("type") != "WordPiece":
            raise TokenizerLoadError(f"model type {model.get('type')!r} is not WordPiece")
        _require_type(data, "pre_tokenizer", "BertPreTokenizer")
        normalizer = _require_type(data, "normalizer", "BertNormalizer")
        specials = _post_processor_specials(data.get("post_processor") or {})
        return cls(model["vocab"], added_tokens_from_json(data),
                   normalizer=BertNormalizer(
                       clean_text=bool(normalizer.get("clean_text", True)),
                       handle_chinese_chars=bool(normalizer.get("handle_chinese_chars", True)),
                       strip_accents=normalizer.get("strip_accents"),
                       lowercase=bool(normalizer.get("lowercase", True))),
                   unk_token=model.get("unk_token", "[UNK]"),
                   prefix=model.get("continuing_subword_prefix", CONTINUATION_PREFIX),
                   max_input_chars_per_word=int(model.get("max_input_chars_per_word",
                                                          MAX_INPUT_CHARS_PER_WORD)),
                   **specials)

    @classmethod
    def from_vocab_txt(cls, path: str | os.PathLike,
                       tokenizer_config: Mapping[str, Any]) -> WordPieceTokenizer:
        """vocab.txt (token = line, id = line number) + tokenizer_config.json's switches."""
        try:
            lines = Path(path).read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as error:
            raise TokenizerLoadError(f"cannot read {os.fspath(path)!r}: {error}") from error
        if lines and lines[-1] == "":
            lines.pop()
        vocab = {token.rstrip("\r"): token_id for token_id, token in enumerate(lines)}
        names = {role: _token_text(tokenizer_config.get(role, default))
                 for role, default in DEFAULT_SPECIALS.items()}
        added = [AddedToken(id=vocab[name], content=name, is_special=True)
                 for name in names.values() if name in vocab]
        lowercase = bool(tokenizer_config.get("do_lower_case", True))
        return cls(vocab, added,
                   normalizer=BertNormalizer(
                       handle_chinese_chars=bool(tokenizer_config.get("tokenize_chinese_chars",
                                                                      True)),
                       strip_accents=tokenizer_config.get("strip_accents"),
                       lowercase=lowercase),
                   unk_token=names["unk_token"], cls_token=names["cls_token"],
                   sep_token=names["sep_token"], pad_token=names["pad_token"])


def _token_text(value: Any) -> str:
    """tokenizer_config's "[UNK]" or {"content": "[UNK]", ...}."""
    return value.get("content", "") if isinstance(value, Mapping) else str(value)


def _require_type(data: Mapping[str, Any], key: str, expected: str) -> Mapping[str, Any]:
    block = data.get(key) or {}
    if block.get("type") != expected:
        raise TokenizerLoadError(f"{key} {block.get('type')!r} is not supported with WordPiece "
                                 f"(expected {expected})")
    return block


def _post_processor_specials(post: Mapping[str, Any]) -> dict[str, str]:
    """[CLS]/[SEP] as the post-processor names them (TemplateProcessing or BertProcessing)."""
    if post.get("type") == "BertProcessing":
        return {"cls_token": post["cls"][0], "sep_token": post["sep"][0]}
    if post.get("type") == "TemplateProcessing":
        single = [piece["SpecialToken"]["id"] for piece in post.get("single", [])
                  if "SpecialToken" in piece]
        if len(single) == 2:
            return {"cls_token": single[0], "sep_token": single[1]}
    if post:
        raise TokenizerLoadError(f"post_processor {post.get('type')!r}: expected [CLS] text "
                                 f"[SEP] (BertProcessing or TemplateProcessing)")
    return {}


def wordpiece_from_folder(directory: str | os.PathLike) -> WordPieceTokenizer:
    """A BERT folder's tokenizer: tokenizer.json if present, else vocab.txt."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return WordPieceTokenizer.from_tokenizer_json(
            read_tokenizer_json(directory / "tokenizer.json"))
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    if not (directory / "vocab.txt").is_file():
        raise TokenizerLoadError(f"{os.fspath(directory)!r}: no tokenizer.json and no vocab.txt")
    return WordPieceTokenizer.from_vocab_txt(directory / "vocab.txt", config)
