"""SentencePiece-style BPE (engine/tokenizer/spm.py) and normalizers on hand-made vocabularies:
score order, byte fallback, <unk>, the GGUF space prefix, USER_DEFINED runs, ByteFallback
decoding, and the files that are refused. The real vocabularies are in
test_tokenizer_families.py."""
from __future__ import annotations

import json

import pytest

from engine.tokenizer.base import TokenizerLoadError
from engine.tokenizer.choose import tokenizer_from_gguf_metadata, tokenizer_from_json
from engine.tokenizer.normalize import normalizer_from_json
from engine.tokenizer.spm import SentencePieceBPE

CONTROL, USER_DEFINED, NORMAL, UNKNOWN, BYTE = 3, 4, 1, 2, 6
SPECIALS = [("<pad>", CONTROL), ("<eos>", CONTROL), ("<bos>", CONTROL), ("<unk>", UNKNOWN),
            ("<start_of_turn>", CONTROL), ("  ", USER_DEFINED)]
BYTES = [(f"<0x{b:02X}>", BYTE) for b in range(256)]
FIRST_NORMAL_ID = len(SPECIALS) + len(BYTES)


def _gguf(normal: dict[str, float], *, with_bytes: bool = True, **extra) -> dict:
    """GGUF metadata: the specials, (the 256 byte pieces), then `normal` {piece: score}."""
    rows = SPECIALS + (BYTES if with_bytes else [])
    tokens = [t for t, _ in rows] + list(normal)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [0.0] * len(rows) + list(normal.values()),
            "tokenizer.ggml.token_type": [k for _, k in rows] + [NORMAL] * len(normal),
            "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
            "tokenizer.ggml.unknown_token_id": 3, "tokenizer.ggml.add_space_prefix": False,
            **extra}


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.id_to_token(i) for i in ids]


@pytest.mark.parametrize("bc_first", [True, False])
def test_the_piece_with_the_higher_score_merges_first(bc_first):
    # "abc" is no piece: the first merge decides between a|bc and ab|c.
    scores = {"a": -1.0, "b": -2.0, "c": -3.0, "ab": -5.0, "bc": -4.0 if bc_first else -6.0}
    tokenizer = tokenizer_from_gguf_metadata(_gguf(scores))
    assert _pieces(tokenizer, tokenizer.encode("abc")) == (
        ["a", "bc"] if bc_first else ["ab", "c"])


def test_a_character_outside_the_vocabulary_falls_back_to_its_bytes():
    tokenizer = tokenizer_from_gguf_metadata(_gguf({"a": -1.0, "▁": -2.0}))
    assert _pieces(tokenizer, tokenizer.encode("a é")) == ["a", "▁", "<0xC3>", "<0xA9>"]


def test_without_byte_pieces_a_run_of_unknown_characters_is_one_unk():
    tokenizer = tokenizer_from_gguf_metadata(_gguf({"a": -1.0}, with_bytes=False))
    assert tokenizer.encode("aéüa") == [FIRST_NORMAL_ID - 256, 3, FIRST_NORMAL_ID - 256]


def test_space_prefix_goes_before_the_text_and_after_every_added_token():
    metadata = _gguf({"a": -1.0, "▁": -2.0, "▁a": -0.5},
                     **{"tokenizer.ggml.add_space_prefix": True})
    tokenizer = tokenizer_from_gguf_metadata(metadata)
    assert _pieces(tokenizer, tokenizer.encode("a<start_of_turn>a")) == [
        "▁a", "<start_of_turn>", "▁a"]
    plain = tokenizer_from_gguf_metadata(_gguf({"a": -1.0, "▁": -2.0, "▁a": -0.5}))
    assert _pieces(plain, plain.encode("a<start_of_turn>a")) == ["a", "<start_of_turn>", "a"]


def test_user_defined_space_runs_are_matched_before_merging_and_kept_by_skip_special():
    tokenizer = tokenizer_from_gguf_metadata(_gguf({"a": -1.0, "▁": -2.0, "▁▁": -0.1}))
    ids = tokenizer.encode("a  a")
    assert _pieces(tokenizer, ids) == ["a", "  ", "a"]
    assert tokenizer.decode([2, *ids], skip_special_tokens=True) == "a  a"
    assert tokenizer.decode([2, *ids]) == "<bos>a  a"


def test_byte_pieces_decode_as_one_utf8_run_or_one_replacement_per_byte():
    tokenizer = tokenizer_from_gguf_metadata(_gguf({"a": -1.0, "▁": -2.0}))
    byte = {b: tokenizer.token_to_id(f"<0x{b:02X}>") for b in (0xC3, 0xA9, 0xF0, 0x9F)}
    a_id = tokenizer.token_to_id("a")
    assert tokenizer.decode([byte[0xC3], byte[0xA9], a_id]) == "éa"
    assert tokenizer.decode([byte[0xF0], byte[0x9F], a_id]) == "\ufffd\ufffda"
    # Hugging Face reads the whole run: one bad byte spoils the é before it.
    assert tokenizer.decode([byte[0xC3], byte[0xA9], byte[0xF0]]) == "\ufffd" * 3
    assert tokenizer.token_bytes(byte[0xF0]) == b"\xf0"


def test_gguf_defaults_add_bos_and_the_space_prefix():
    metadata = _gguf({"a": -1.0, "▁": -2.0, "▁a": -0.5})
    del metadata["tokenizer.ggml.add_space_prefix"]
    tokenizer = tokenizer_from_gguf_metadata(metadata)
    assert tokenizer.encode("a", add_special_tokens=True) == [2, tokenizer.token_to_id("▁a")]


def _json_tokenizer(**changes) -> dict:
    vocab = {"<unk>": 0, "<bos>": 1, "<0xC3>": 2, "<0xA9>": 3, "a": 4, "▁": 5, "b": 6,
             "ab": 7, "▁ab": 8}
    data = {
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "added_tokens": [{"id": 1, "content": "<bos>", "special": True}],
        "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": vocab,
                  "merges": [["a", "b"], ["▁", "ab"]]},
    }
    return data | changes


def test_tokenizer_json_with_byte_fallback_is_read_as_sentencepiece(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_json_tokenizer()), encoding="utf-8")
    tokenizer = tokenizer_from_json(path, {"bos_token": "<bos>", "add_bos_token": True})
    assert isinstance(tokenizer, SentencePieceBPE)
    assert tokenizer.encode("ab abé", add_special_tokens=True) == [1, 7, 8, 2, 3]
    assert tokenizer.decode([1, 7, 8, 2, 3], skip_special_tokens=True) == "ab abé"


@pytest.mark.parametrize("change", [
    {"decoder": {"type": "Sequence", "decoders": [{"type": "Strip", "content": " "}]}},
    {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁"}},
    {"normalizer": {"type": "Lowercase"}},
])
def test_tokenizer_json_steps_we_cannot_reproduce_are_refused(change):
    with pytest.raises(TokenizerLoadError, match="unsupported"):
        SentencePieceBPE.from_tokenizer_json(_json_tokenizer(**change))


def test_an_unknown_gguf_tokenizer_model_is_refused_naming_the_known_ones():
    with pytest.raises(TokenizerLoadError, match="'bert'.*known: 'gpt2', 'llama'"):
        tokenizer_from_gguf_metadata({"tokenizer.ggml.model": "bert"})


def test_normalizers_compose_in_order():
    nfc = normalizer_from_json({"type": "NFC"})
    assert nfc.apply("e\u0301") == "\u00e9"
    llama2 = normalizer_from_json({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})
    assert llama2.apply("a b") == "▁a▁b" and llama2.apply("") == ""
    assert normalizer_from_json(None).apply("e\u0301") == "e\u0301"
    with pytest.raises(TokenizerLoadError, match="Regex"):
        normalizer_from_json({"type": "Replace", "pattern": {"Regex": " +"}, "content": "▁"})
