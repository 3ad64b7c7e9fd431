"""ByteTokenizer: ids 0..255 are bytes, named specials follow at 256, 257, ..."""
from __future__ import annotations

import pytest

from engine.tokenizer import ByteTokenizer, TokenizerLoadError, UnknownTokenIdError


def test_text_is_its_utf8_bytes():
    tok = ByteTokenizer()
    assert tok.encode("a") == [97]  # the worked example (docs/CONTRACT.md): prompt "a" -> [97]
    assert tok.encode("ab c") == [97, 98, 32, 99]
    assert tok.encode("é😀") == [0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80]
    assert tok.encode("") == []


def test_defaults_name_endoftext_as_special_256_and_eos():
    tok = ByteTokenizer()
    assert tok.vocab_size == 257
    assert tok.special_ids == frozenset({256})
    assert tok.eos_token_ids == (256,)
    assert tok.eos_token == "<|endoftext|>"
    assert tok.bos_token_id is None
    assert tok.bos_token == ""


def test_specials_are_numbered_in_order_and_matched_first():
    tok = ByteTokenizer(("<s>", "</s>", "<pad>"), bos_token="<s>", eos_token="</s>")
    assert (tok.bos_token_id, tok.eos_token_ids, tok.vocab_size) == (256, (257,), 259)
    assert tok.encode("<s>hi</s>") == [256, 104, 105, 257]
    assert tok.encode("<s>hi</s>", parse_special=False) == list(b"<s>hi</s>")
    assert tok.token_to_id("<pad>") == 258


def test_longest_special_wins_at_one_position():
    tok = ByteTokenizer(("<a>", "<a><b>"), eos_token=None)
    assert tok.encode("x<a><b><a>") == [120, 257, 256]
    assert tok.eos_token_ids == () and tok.eos_token == ""


def test_decode_joins_bytes_and_replaces_invalid_utf8():
    tok = ByteTokenizer()
    assert tok.decode([0xF0, 0x9F, 0x98, 0x80, 256]) == "😀<|endoftext|>"
    assert tok.decode([0xF0, 0x9F, 256], skip_special_tokens=True) == "\ufffd"
    assert tok.decode([0x80, 0x41]) == "\ufffdA"
    assert tok.decode([]) == ""


def test_every_id_round_trips_through_its_name_and_bytes():
    tok = ByteTokenizer()
    for token_id in range(tok.vocab_size):
        assert tok.token_to_id(tok.id_to_token(token_id)) == token_id
    assert tok.id_to_token(32) == "Ġ"
    assert tok.token_bytes(0) == b"\x00"
    assert tok.token_bytes(256) == b"<|endoftext|>"


def test_encode_decode_round_trip_on_arbitrary_text():
    tok = ByteTokenizer()
    text = "naïve café — 日本語 \t\n 🦀 <|endoftext|> end"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, parse_special=False)) == text


def test_unknown_ids_are_refused():
    tok = ByteTokenizer()
    for bad in (-1, 257):
        with pytest.raises(UnknownTokenIdError):
            tok.token_bytes(bad)
        with pytest.raises(UnknownTokenIdError):
            tok.decode([bad])


@pytest.mark.parametrize("kwargs", [
    {"special_tokens": ("<a>", "<a>")},
    {"special_tokens": ("",)},
    {"special_tokens": ("<a>",), "eos_token": "<b>"},
    {"special_tokens": ("<a>",), "eos_token": None, "bos_token": "<b>"},
])
def test_inconsistent_specials_are_load_errors(kwargs):
    specials = kwargs.pop("special_tokens")
    with pytest.raises(TokenizerLoadError):
        ByteTokenizer(specials, **kwargs)
