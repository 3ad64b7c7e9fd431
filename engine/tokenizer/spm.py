"""SentencePiece-style BPE with byte fallback (Gemma, Llama 2, Mistral, Phi-3).

Unlike byte-level BPE (bpe.py), the symbols are Unicode characters and a space is the
marker "▁" (U+2581) inside the pieces ("▁world"). Encoding one text:
  1. added tokens first (base.AddedTokenMatcher): "<start_of_turn>", and Gemma's "\\n" runs,
     tab runs and runs of 2..31 spaces, leftmost, longest at one position;
  2. each plain segment: " " -> "▁" (the tokenizer.json normalizer, or always for a GGUF),
     optionally "▁" in front (GGUF `add_space_prefix`, llama.cpp's rule: at the start of
     the text and after every added token);
  3. merges over the characters: the pair whose merge ranks first, leftmost on ties (the
     same routines as byte-level BPE, merges.py);
  4. byte fallback: a character the vocabulary lacks becomes the pieces "<0xF0>"... of its
     UTF-8 bytes (or `<unk>` if those are missing).
Decoding is Hugging Face's decoder Replace("▁" -> " ") + ByteFallback + Fuse: consecutive
byte pieces are read as UTF-8 together; a run that is not valid UTF-8 gives one U+FFFD per
byte (so "<0xF0><0x9F>" alone decodes to two U+FFFD, not Python's one).

Two loaders (both checked against ../shared/oracle/families/gemma3-270m):
  - `from_tokenizer_json`: merges ranked by their order in the file (`model.merges`).
  - `from_gguf_metadata` (`tokenizer.ggml.model = "llama"`): no merge list; as SentencePiece
    and llama.cpp do, two symbols merge when their concatenation is a NORMAL piece, the
    piece with the highest `tokenizer.ggml.scores` first (`PairRanks`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import regex

from engine.tokenizer.base import AddedToken, Tokenizer, TokenizerLoadError
from engine.tokenizer.bpe import (
    GGUF_BYTE_TOKEN_TYPE, GGUF_NORMAL_TOKEN_TYPE, gguf_eos_ids, gguf_kind, parse_merge)
from engine.tokenizer.hf_json import (
    added_tokens_from_json, config_token_id, json_adds_bos, read_tokenizer_json)
from engine.tokenizer.merges import Pair, PairRanks, WordEncoder
from engine.tokenizer.normalize import NormalizeStep, Normalizer, normalizer_from_json

SPACE_MARKER = "\u2581"                 # "▁": a space inside a piece
REPLACEMENT_CHAR = "\ufffd"
# The GGUF tokenizer model this class implements (llama.cpp's name for SentencePiece).
GGUF_SPM_MODEL = "llama"
# llama.cpp's defaults for a SentencePiece GGUF without these keys.
GGUF_SPM_DEFAULT_ADD_BOS = True
GGUF_SPM_DEFAULT_SPACE_PREFIX = True
# The tokenizer.json decoder steps this class reproduces (see the module docstring).
SUPPORTED_DECODERS = frozenset({"Replace", "ByteFallback", "Fuse"})
BYTE_PIECE = regex.compile(r"<0x([0-9A-Fa-f]{2})>")


class SentencePieceBPE(Tokenizer):
    """Character-level BPE with "▁" for spaces and byte fallback (module docstring)."""

    def __init__(
        self, *, pieces: Sequence[str | None], merges: Sequence[Pair] | PairRanks,
        added_tokens: Sequence[AddedToken], byte_piece_ids: frozenset[int],
        unk_id: int | None, bos_token_id: int | None, eos_token_ids: Sequence[int],
        normalizer: Normalizer, split_after: str | None = None,
        space_prefix: bool = False, add_bos_token: bool = False,
    ) -> None:
        strings = list(pieces)
        for token in added_tokens:
            strings[token.id] = token.content
        token_bytes = [None if s is None else _piece_bytes(s, i in byte_piece_ids)
                       for i, s in enumerate(strings)]
        super().__init__(token_strings=strings, token_bytes=token_bytes,
                         added_tokens=added_tokens, bos_token_id=bos_token_id,
                         eos_token_ids=eos_token_ids, add_bos_token=add_bos_token)
        vocab: dict[str, int] = {}
        for i, piece in enumerate(pieces):
            if piece is not None and i not in byte_piece_ids:
                vocab.setdefault(piece, i)
        byte_ids = {token_bytes[i][0]: i for i in byte_piece_ids}  # type: ignore[index]
        self._words = _PieceEncoder(vocab, merges, byte_ids, unk_id)
        self._byte_piece_ids = byte_piece_ids
        self._normalizer = normalizer
        self._split_after = split_after
        self._space_prefix = space_prefix

    # -- text -> ids ---------------------------------------------------------------------
    def _text_prefix(self, follows_token: bool) -> str:
        return " " if self._space_prefix and follows_token else ""

    def _encode_ordinary(self, text: str) -> list[int]:
        text = self._normalizer.apply(text)
        if self._split_after:
            # Hugging Face Split(behavior=MergedWithPrevious): each piece ends with the mark.
            cut = text.split(self._split_after)
            words = [w + self._split_after for w in cut[:-1]] + cut[-1:]
            return self._words.encode_words(w for w in words if w)
        return self._words.encode_words([text] if text else [])

    # -- ids -> text ---------------------------------------------------------------------
    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Pieces' text joined; each run of byte pieces read as UTF-8 as a whole, or one
        U+FFFD per byte when the run is not valid UTF-8 (Hugging Face's ByteFallback)."""
        ids = list(ids)
        if skip_special_tokens:
            ids = [i for i in ids if i not in self.special_ids]
        parts: list[str] = []
        run = bytearray()
        for token_id in ids:
            data = self.token_bytes(token_id)  # raises UnknownTokenIdError
            if token_id in self._byte_piece_ids:
                run += data
                continue
            if run:
                parts.append(_byte_run_text(run))
                run = bytearray()
            parts.append(data.decode("utf-8"))
        if run:
            parts.append(_byte_run_text(run))
        return "".join(parts)

    # -- loaders -------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(
        cls, source: str | os.PathLike | Mapping[str, Any], *,
        tokenizer_config: Mapping[str, Any] | None = None,
    ) -> SentencePieceBPE:
        """From a tokenizer.json whose BPE model has `byte_fallback` (Gemma 3's)."""
        data = source if isinstance(source, Mapping) else read_tokenizer_json(source)
        model = data.get("model") or {}
        if model.get("type") != "BPE" or not model.get("byte_fallback"):
            raise TokenizerLoadError("not a byte-fallback BPE tokenizer.json")
        _check_decoder(data.get("decoder"))
        vocab: dict[str, int] = dict(model["vocab"])
        pieces: list[str | None] = [None] * (1 + max(vocab.values(), default=-1))
        for piece, token_id in vocab.items():
            pieces[token_id] = piece
        added = added_tokens_from_json(data)
        pieces += [None] * max(0, 1 + max((t.id for t in added), default=-1) - len(pieces))
        content_ids = {t.content: t.id for t in added} | vocab
        config = tokenizer_config or {}
        bos_id = config_token_id(config.get("bos_token"), content_ids, "bos_token")
        eos_id = config_token_id(config.get("eos_token"), content_ids, "eos_token")
        return cls(
            pieces=pieces, merges=[parse_merge(m) for m in model.get("merges", [])],
            added_tokens=added,
            byte_piece_ids=frozenset(i for p, i in vocab.items() if BYTE_PIECE.fullmatch(p)),
            unk_id=vocab.get(model.get("unk_token")), bos_token_id=bos_id,
            eos_token_ids=() if eos_id is None else (eos_id,),
            normalizer=normalizer_from_json(data.get("normalizer")),
            split_after=_split_after(data.get("pre_tokenizer")),
            add_bos_token=json_adds_bos(data, config, bos_id),
        )

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> SentencePieceBPE:
        """From a GGUF's `tokenizer.ggml.*` keys with model "llama" (pieces + scores).

        USER_DEFINED pieces (Gemma's runs of 2..31 spaces, "\\n" runs, HTML tags) are added
        tokens, matched in the text first, longest first. This is what SentencePiece, llama.cpp
        and the model's own tokenizer.json do, so a GGUF load follows them. transformers'
        GGUF reader differs on runs of 32+ spaces (it merges them as ordinary pieces: 40
        spaces = 16 + 24 where everyone else gives 31 + 9; see the oracle README); its ids are
        not reproduced."""
        if metadata.get("tokenizer.ggml.model") != GGUF_SPM_MODEL:
            raise TokenizerLoadError("not a SentencePiece (\"llama\") GGUF tokenizer")
        tokens = list(metadata["tokenizer.ggml.tokens"])
        scores = [float(s) for s in metadata.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
        types = [int(t) for t in metadata.get(
            "tokenizer.ggml.token_type", [GGUF_NORMAL_TOKEN_TYPE] * len(tokens))]
        if not len(tokens) == len(scores) == len(types):
            raise TokenizerLoadError("tokenizer.ggml tokens, scores and token_type differ "
                                     "in length")
        added = [AddedToken(id=i, content=tok, is_special=gguf_kind(t).is_special)
                 for i, (tok, t) in enumerate(zip(tokens, types)) if gguf_kind(t).is_added]
        bos_id = metadata.get("tokenizer.ggml.bos_token_id")
        unk_id = metadata.get("tokenizer.ggml.unknown_token_id")
        return cls(
            pieces=tokens, merges=_score_ranks(tokens, scores, types), added_tokens=added,
            byte_piece_ids=frozenset(
                i for i, t in enumerate(types) if t == GGUF_BYTE_TOKEN_TYPE),
            unk_id=None if unk_id is None else int(unk_id),
            bos_token_id=None if bos_id is None else int(bos_id),
            eos_token_ids=gguf_eos_ids(metadata),
            # llama.cpp escapes every space as "▁"; a GGUF carries no other normalizer.
            normalizer=Normalizer((NormalizeStep(kind="replace", old=" ", new=SPACE_MARKER),)),
            space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix",
                                           GGUF_SPM_DEFAULT_SPACE_PREFIX)),
            add_bos_token=bool(metadata.get("tokenizer.ggml.add_bos_token",
                                            GGUF_SPM_DEFAULT_ADD_BOS)),
        )


class _PieceEncoder(WordEncoder):
    """WordEncoder over characters (not bytes), with byte fallback for unknown ones."""

    __slots__ = ("_byte_ids", "_unk_id")

    def __init__(self, vocab: dict[str, int], merges: Sequence[Pair] | PairRanks,
                 byte_ids: dict[int, int], unk_id: int | None) -> None:
        super().__init__(vocab, merges)
        self._byte_ids = byte_ids
        self._unk_id = unk_id

    def _symbols_of(self, word: str) -> str:
        return word

    def _ids_of(self, symbols: list[str]) -> list[int]:
        vocab, byte_ids = self._vocab, self._byte_ids
        ids: list[int] = []
        for symbol in symbols:
            token_id = vocab.get(symbol)
            if token_id is not None:
                ids.append(token_id)
                continue
            data = symbol.encode("utf-8")
            if all(b in byte_ids for b in data):
                ids.extend(byte_ids[b] for b in data)
            elif self._unk_id is not None and (not ids or ids[-1] != self._unk_id):
                ids.append(self._unk_id)       # fuse_unk: one <unk> for a run
        return ids


def _score_ranks(tokens: Sequence[str], scores: Sequence[float],
                 types: Sequence[int]) -> PairRanks:
    """Rank of each NORMAL piece: higher score first, lower id on ties (llama.cpp's order)."""
    normal = [i for i, t in enumerate(types) if t == GGUF_NORMAL_TOKEN_TYPE]
    normal.sort(key=lambda i: (-scores[i], i))
    rank_of: dict[str, int] = {}
    for rank, token_id in enumerate(normal):
        rank_of.setdefault(tokens[token_id], rank)
    return PairRanks(rank_of)


def _piece_bytes(piece: str, is_byte_piece: bool) -> bytes:
    if is_byte_piece:
        return bytes([int(piece[3:5], 16)])
    return piece.replace(SPACE_MARKER, " ").encode("utf-8")


def _byte_run_text(run: bytearray) -> str:
    try:
        return run.decode("utf-8")
    except UnicodeDecodeError:
        return REPLACEMENT_CHAR * len(run)


def _split_after(config: Mapping[str, Any] | None) -> str | None:
    """A pre_tokenizer we follow: none, or Split on a literal string, MergedWithPrevious."""
    if config is None:
        return None
    pattern = config.get("pattern") or {}
    if (config.get("type") == "Split" and "String" in pattern and not config.get("invert")
            and config.get("behavior") == "MergedWithPrevious"):
        return pattern["String"]
    raise TokenizerLoadError(f"unsupported pre_tokenizer for a byte-fallback BPE: {config!r}")


def _check_decoder(config: Mapping[str, Any] | None) -> None:
    steps = (config or {}).get("decoders", [config] if config else [])
    kinds = {step.get("type") for step in steps}
    if not kinds <= SUPPORTED_DECODERS:
        raise TokenizerLoadError(
            f"unsupported decoder steps {sorted(kinds - SUPPORTED_DECODERS)} for a "
            "byte-fallback BPE")
