"""The byte tokenizer: every UTF-8 byte is its own token. The teaching baseline.

Ids 0..255 are the byte values themselves, so `encode("ab") == [97, 98]` and any text at all
round-trips with no vocabulary file. Named special tokens follow at 256, 257, ... in the
order given; with the defaults, "<|endoftext|>" is 256 and is also the end-of-sequence token.

A byte token's vocabulary name is its GPT-2 byte-level stand-in character ("Ġ" for the
space byte), so names are printable and `token_to_id(id_to_token(i)) == i` for every id.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.tokenizer.base import AddedToken, Tokenizer, TokenizerLoadError
from engine.tokenizer.bytes_unicode import BYTE_TO_CHAR, NUM_BYTE_VALUES


class ByteTokenizer(Tokenizer):
    """256 byte ids plus named specials; see the module docstring."""

    def __init__(
        self,
        special_tokens: Sequence[str] = ("<|endoftext|>",),
        *,
        bos_token: str | None = None,
        eos_token: str | None = "<|endoftext|>",
    ) -> None:
        specials = tuple(special_tokens)
        if len(set(specials)) != len(specials) or "" in specials:
            raise TokenizerLoadError(f"special tokens must be distinct and non-empty: {specials!r}")
        special_id = {text: NUM_BYTE_VALUES + i for i, text in enumerate(specials)}
        added = [AddedToken(id=special_id[text], content=text, is_special=True)
                 for text in specials]
        super().__init__(
            token_strings=list(BYTE_TO_CHAR) + list(specials),
            token_bytes=[bytes([b]) for b in range(NUM_BYTE_VALUES)]
            + [text.encode("utf-8") for text in specials],
            added_tokens=added,
            bos_token_id=_special_id_of(bos_token, special_id, "bos_token"),
            eos_token_ids=_eos_ids(eos_token, special_id),
        )

    def _encode_ordinary(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def _special_id_of(token: str | None, special_id: dict[str, int], role: str) -> int | None:
    if token is None or token == "":
        return None
    if token not in special_id:
        raise TokenizerLoadError(f"{role} {token!r} is not one of the special tokens")
    return special_id[token]


def _eos_ids(eos_token: str | None, special_id: dict[str, int]) -> tuple[int, ...]:
    eos_id = _special_id_of(eos_token, special_id, "eos_token")
    return () if eos_id is None else (eos_id,)
