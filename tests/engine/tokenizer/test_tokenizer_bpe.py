"""BPETokenizer on small hand-built vocabularies: merge order, loaders, token kinds, caching."""
from __future__ import annotations

import json
import random

import pytest

from engine.tokenizer import BPETokenizer, TokenizerLoadError, UnknownTokenIdError
from engine.tokenizer import merges as merges_module
from engine.tokenizer.bytes_unicode import BYTE_TO_CHAR
from engine.tokenizer.merges import merge_heap, merge_rescan
from tests.oracle import HF_DIR

HF_TOKENIZER_JSON = HF_DIR / "tokenizer.json"


def _tiny_json(*, merges, extra_vocab=(), added=(), ignore_merges=False, pre=None) -> dict:
    """A byte-level tokenizer.json: ids 0..255 the byte characters, then extra_vocab."""
    vocab = {c: i for i, c in enumerate(BYTE_TO_CHAR)}
    for token in extra_vocab:
        vocab[token] = len(vocab)
    return {
        "added_tokens": [dict(t) for t in added],
        "pre_tokenizer": pre or {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": list(merges),
                  "ignore_merges": ignore_merges},
    }


def test_lowest_rank_merges_first_and_leftmost_among_equals():
    data = _tiny_json(merges=["a a", "b aa", "aa a"], extra_vocab=["aa", "baa", "aaa"])
    tok = BPETokenizer.from_tokenizer_json(data)
    # "aaa": (a,a) rank 0 merges leftmost first -> "aa a" -> (aa,a) rank 2 -> "aaa".
    assert [tok.id_to_token(i) for i in tok.encode("aaa")] == ["aaa"]
    # "baaa": a a at 1 merges first -> b aa a; then (b,aa) rank 1 beats (aa,a) rank 2.
    assert [tok.id_to_token(i) for i in tok.encode("baaa")] == ["baa", "a"]


def test_merges_as_pairs_or_strings_give_the_same_tokenizer():
    as_strings = BPETokenizer.from_tokenizer_json(
        _tiny_json(merges=["Ġ t", "h e", "Ġt he"], extra_vocab=["Ġt", "he", "Ġthe"]))
    as_pairs = BPETokenizer.from_tokenizer_json(
        _tiny_json(merges=[["Ġ", "t"], ["h", "e"], ["Ġt", "he"]],
                   extra_vocab=["Ġt", "he", "Ġthe"]))
    assert as_strings.encode("a the") == as_pairs.encode("a the") == [97, 258]


def test_ignore_merges_looks_the_whole_word_up_first():
    kwargs = {"merges": ["a b"], "extra_vocab": ["ab", "abc"]}
    merging = BPETokenizer.from_tokenizer_json(_tiny_json(**kwargs))
    ignoring = BPETokenizer.from_tokenizer_json(_tiny_json(ignore_merges=True, **kwargs))
    assert merging.encode("abc") == [256, 99]
    assert ignoring.encode("abc") == [257]


def _random_merges(rng: random.Random, alphabet: str, count: int) -> dict:
    """Arbitrary (even nonsensical) merge tables: both merge routines must still agree."""
    symbols = list(alphabet)
    ranks = {}
    while len(ranks) < count:
        pair = (rng.choice(symbols), rng.choice(symbols))
        if pair not in ranks:
            ranks[pair] = len(ranks)
            symbols.append(pair[0] + pair[1])
    return ranks


def test_heap_and_rescan_merging_agree_on_random_tables():
    rng = random.Random(11)
    for _ in range(200):
        ranks = _random_merges(rng, "abc", rng.randrange(1, 30))
        word = [rng.choice("abc") for _ in range(rng.randrange(1, 80))]
        assert merge_heap(list(word), ranks) == merge_rescan(list(word), ranks), (word, ranks)


def test_heap_and_rescan_merging_agree_on_smollm_long_words():
    model = json.loads(HF_TOKENIZER_JSON.read_text(encoding="utf-8"))["model"]
    ranks = {tuple(m): r for r, m in enumerate(model["merges"])}
    for word in ("Ġ" + "ab" * 120, "z" * 1000, "thisisaverylongwordwithoutanyspaces" * 9,
                 "ðŁĺĢ" * 50, "-" * 300, "Ġ" * 200):
        assert merge_heap(list(word), ranks) == merge_rescan(list(word), ranks), word[:20]


def test_word_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(merges_module, "MAX_CACHED_WORDS", 8)
    tok = BPETokenizer.from_tokenizer_json(_tiny_json(merges=["a b"], extra_vocab=["ab"]))
    words = " ".join(f"ab{i}" for i in range(50))
    first = tok.encode(words)
    assert len(tok._words._cache) <= 8
    assert tok.encode(words) == first


def test_added_tokens_lstrip_rstrip_and_special_flag():
    added = [
        {"id": 256, "content": "<mask>", "special": True, "lstrip": True, "rstrip": False},
        {"id": 257, "content": "[X]", "special": False, "lstrip": False, "rstrip": True},
    ]
    tok = BPETokenizer.from_tokenizer_json(_tiny_json(merges=[], added=added))
    assert tok.encode("a  <mask> b") == [97, 256, 32, 98]
    assert tok.encode("a[X]  b") == [97, 257, 98]
    # Non-special added tokens are matched even when specials are not parsed.
    assert tok.encode("<mask>[X]", parse_special=False) == [*b"<mask>", 257]
    assert tok.special_ids == frozenset({256})
    assert tok.decode([97, 256, 257], skip_special_tokens=True) == "a[X]"


def test_bos_eos_from_tokenizer_config_strings_or_dicts():
    added = [{"id": 256, "content": "<s>", "special": True},
             {"id": 257, "content": "</s>", "special": True}]
    data = _tiny_json(merges=[], added=added)
    tok = BPETokenizer.from_tokenizer_json(
        data, tokenizer_config={"bos_token": {"content": "<s>"}, "eos_token": "</s>"})
    assert (tok.bos_token_id, tok.eos_token_ids) == (256, (257,))
    assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>")
    bare = BPETokenizer.from_tokenizer_json(data)
    assert (bare.bos_token_id, bare.eos_token_ids) == (None, ())
    assert (bare.bos_token, bare.eos_token) == ("", "")
    with pytest.raises(TokenizerLoadError):
        BPETokenizer.from_tokenizer_json(data, tokenizer_config={"eos_token": "<nope>"})


def test_holes_in_the_id_space_are_unknown_ids():
    data = _tiny_json(merges=[], added=[{"id": 300, "content": "<late>", "special": True}])
    tok = BPETokenizer.from_tokenizer_json(data)
    assert tok.vocab_size == 301
    assert tok.token_bytes(300) == b"<late>"
    with pytest.raises(UnknownTokenIdError):
        tok.token_bytes(280)


@pytest.mark.parametrize("change", [
    {"model": {"type": "WordPiece", "vocab": {}}},
    {"decoder": {"type": "Metaspace"}},
])
def test_non_byte_level_tokenizer_json_is_a_load_error(change):
    with pytest.raises(TokenizerLoadError):
        BPETokenizer.from_tokenizer_json({**_tiny_json(merges=[]), **change})


def test_missing_tokenizer_json_file_is_a_load_error(tmp_path):
    with pytest.raises(TokenizerLoadError):
        BPETokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")


def _tiny_gguf(**overrides) -> dict:
    tokens = list(BYTE_TO_CHAR) + ["ab", "<|eot|>", "<tool>", "<0x0A>", "<unk>"]
    types = [1] * 256 + [1, 3, 4, 6, 2]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.bos_token_id": 257,
            "tokenizer.ggml.eos_token_id": 257, "tokenizer.ggml.eot_token_id": 260,
            **overrides}


def test_gguf_token_types_decide_matching_and_skipping():
    tok = BPETokenizer.from_gguf_metadata(_tiny_gguf())
    assert tok.special_ids == frozenset({257, 260})       # control and unknown
    assert tok.encode("ab<|eot|><tool>") == [256, 257, 258]
    assert tok.encode("<|eot|><tool>", parse_special=False) == [*b"<|eot|>", 258]
    assert tok.encode("<0x0A>") == list(b"<0x0A>")       # a byte token is not matched in text
    assert tok.token_bytes(259) == b"\n"
    assert tok.decode([256, 257, 258], skip_special_tokens=True) == "ab<tool>"
    assert tok.eos_token_ids == (257, 260) and tok.bos_token == "<|eot|>"


@pytest.mark.parametrize("overrides", [
    {"tokenizer.ggml.model": "llama"},
    {"tokenizer.ggml.pre": "unheard-of"},
    {"tokenizer.ggml.token_type": [1, 1]},
    {"tokenizer.ggml.merges": ["ab"]},
])
def test_bad_gguf_tokenizer_metadata_is_a_load_error(overrides):
    with pytest.raises(TokenizerLoadError):
        BPETokenizer.from_gguf_metadata(_tiny_gguf(**overrides))
