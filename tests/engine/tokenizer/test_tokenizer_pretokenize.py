"""Pre-tokenizers: the pieces each GGUF `pre` type and tokenizer.json pipeline cut text into."""
from __future__ import annotations

import random

import pytest

from engine.tokenizer import TokenizerLoadError
from engine.tokenizer.pretokenize import (
    LLAMA3_PATTERN, PRE_TYPE_STAGES, PreTokenizer, pre_tokenizer_for_gguf,
    pre_tokenizer_from_json)
from tests.oracle import read_jsonl

# Expected pieces worked out by hand from each regex (see pretokenize.py's comments).
HAND_CASES = {
    "gpt2": {
        "Hello  world 12345": ["Hello", " ", " world", " 12345"],
        "DON'T don't": ["DON", "'", "T", " don", "'t"],
        "a\n\nb": ["a", "\n", "\n", "b"],
        "a  1": ["a", " ", " 1"],
    },
    "smollm": {
        "Hello  world 12345": ["Hello", " ", " world", " ", "1", "2", "3", "4", "5"],
        "a  1": ["a", "  ", "1"],  # the oracle README's example: the run stays whole
        "x²½": ["x", "²", "½"],
    },
    "llama-bpe": {
        "Hello  world 12345": ["Hello", " ", " world", " ", "123", "45"],
        "DON'T don't": ["DON", "'T", " don", "'t"],
        "a\n\nb": ["a", "\n\n", "b"],
        "(x)": ["(x", ")"],
    },
    "qwen2": {
        "Hello  world 12345": ["Hello", " ", " world", " ", "1", "2", "3", "4", "5"],
        "DON'T": ["DON", "'T"],
        "a\n\nb": ["a", "\n\n", "b"],
    },
}


@pytest.mark.parametrize("pre_type", sorted(HAND_CASES))
def test_gguf_pre_types_cut_text_as_worked_out_by_hand(pre_type):
    pre = pre_tokenizer_for_gguf(pre_type)
    for text, pieces in HAND_CASES[pre_type].items():
        assert pre.split(text) == pieces, text


@pytest.mark.parametrize("pre_type", sorted(PRE_TYPE_STAGES))
def test_pieces_always_join_back_to_the_text(pre_type):
    alphabet = "ab Z9½\t\n\r'.-日😀\u0301\u200d "
    rng = random.Random(7)
    pre = pre_tokenizer_for_gguf(pre_type)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        pieces = pre.split(text)
        assert "".join(pieces) == text and all(pieces), (text, pieces)


def test_unknown_gguf_pre_type_is_a_load_error():
    with pytest.raises(TokenizerLoadError, match="tokenizer.ggml.pre"):
        pre_tokenizer_for_gguf("no-such-pre")


def test_tokenizer_json_sequence_matches_gguf_smollm():
    config = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    text = "a  1 Total:   42\n\n\n1 ½ ¾ don't"
    expected = pre_tokenizer_for_gguf("smollm").split(text)
    assert pre_tokenizer_from_json(config).split(text) == expected


def test_tokenizer_json_split_isolated_matches_gguf_llama3():
    config = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    text = "Hello  world 12345\n\nDON'T (x)"
    expected = pre_tokenizer_for_gguf("llama-bpe").split(text)
    assert pre_tokenizer_from_json(config).split(text) == expected


def test_split_keeps_unmatched_text_between_matches():
    config = {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated", "invert": False}
    assert pre_tokenizer_from_json(config).split("a-b--c") == ["a", "-", "b", "-", "-", "c"]


def test_byte_level_add_prefix_space_prepends_one_space():
    config = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
    assert pre_tokenizer_from_json(config).split("Hi there") == [" Hi", " there"]
    assert pre_tokenizer_from_json(config).split(" Hi") == [" Hi"]


@pytest.mark.parametrize("config", [
    {"type": "Metaspace"},
    {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Removed", "invert": False},
    {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Isolated", "invert": True},
])
def test_unsupported_tokenizer_json_pre_tokenizers_are_load_errors(config):
    with pytest.raises(TokenizerLoadError):
        pre_tokenizer_from_json(config)


def test_fused_smollm_regex_cuts_exactly_like_the_two_stages():
    staged = PreTokenizer(PRE_TYPE_STAGES["smollm"], use_fused=False)
    fused = PreTokenizer(PRE_TYPE_STAGES["smollm"])
    assert len(fused._compiled) == 1 and len(staged._compiled) == 2
    texts = [c["text"] for c in _oracle_cases()]
    rng = random.Random(5)
    alphabet = "ab Z9½²\t\n\r'.-日😀\u0301\u00a0 1s"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(16))) for _ in range(3000)]
    mismatches = [t for t in texts if fused.split(t) != staged.split(t)]
    assert not mismatches, mismatches[:5]


def _oracle_cases() -> list[dict]:
    return read_jsonl("tokenize_cases.jsonl")
