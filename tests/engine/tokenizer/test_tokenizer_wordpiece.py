"""WordPiece (BERT) against Hugging Face: the MiniLM oracle's 40 cases, and the rules alone.

Oracle: ../shared/oracle/families/minilm-l6/tokenize_cases.jsonl, made with
BertTokenizerFast from the real all-MiniLM-L6-v2 folder. The folder's tokenizer.json is not
in the oracle, so those tests read the fetched model (real_model). The rule tests below use a
hand-made vocabulary and need nothing.
"""
from __future__ import annotations

import json

import pytest

from engine.tokenizer.base import AddedToken, TokenizerLoadError
from engine.tokenizer.bert_basic import BertNormalizer, split_words
from engine.tokenizer.wordpiece import WordPieceTokenizer, wordpiece_from_folder
from tests.oracle import read_jsonl

CASES = read_jsonl("families/minilm-l6/tokenize_cases.jsonl")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _tiny(words: list[str], **normalizer) -> WordPieceTokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + words)}
    added = [AddedToken(id=vocab[s], content=s, is_special=True) for s in SPECIALS]
    return WordPieceTokenizer(vocab, added, normalizer=BertNormalizer(**normalizer))


# --- the oracle ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_tokenizer(minilm_dir):
    return wordpiece_from_folder(minilm_dir)


@pytest.mark.real_model
@pytest.mark.parametrize("case", CASES, ids=[c["category"] for c in CASES])
def test_every_oracle_case_is_exact(minilm_tokenizer, case):
    tok = minilm_tokenizer
    assert tok.encode(case["text"], add_special_tokens=True) == case["ids_with_special"]
    assert tok.encode(case["text"]) == case["ids_no_special"]
    assert [tok.id_to_token(i) for i in case["ids_with_special"]] == case["tokens_with_special"]
    assert tok.decode(case["ids_with_special"], skip_special_tokens=True) \
        == case["decode_skip_special"]


@pytest.mark.real_model
def test_vocab_txt_and_tokenizer_config_give_the_same_ids(minilm_dir, tmp_path):
    """The same vocabulary written as vocab.txt (id = line) reads to the same tokenizer."""
    data = json.loads((minilm_dir / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(
        (minilm_dir / "tokenizer_config.json").read_text(encoding="utf-8"), encoding="utf-8")
    tok = wordpiece_from_folder(tmp_path)
    assert [tok.encode(c["text"], add_special_tokens=True) for c in CASES] \
        == [c["ids_with_special"] for c in CASES]


# --- the rules on a hand-made vocabulary ----------------------------------------------------

def test_greedy_longest_match_with_continuation_pieces():
    tok = _tiny(["un", "unaff", "##aff", "##able", "##a", "##ble"])
    assert [tok.id_to_token(i) for i in tok.encode("unaffable")] == ["unaff", "##able"]


def test_a_word_with_an_unmatched_stretch_is_one_unk():
    tok = _tiny(["hello", "##x"])
    assert tok.encode("hello helloz") == [tok.token_to_id("hello"), tok.unk_token_id]


def test_a_word_over_100_characters_is_one_unk_and_100_is_not():
    tok = _tiny(["a", "##a"])
    assert len(tok.encode("a" * 100)) == 100
    assert tok.encode("a" * 101) == [tok.unk_token_id]


def test_cls_and_sep_wrap_only_when_asked_and_literal_specials_are_parsed():
    tok = _tiny(["cat"])
    assert tok.encode("cat", add_special_tokens=True) == [tok.cls_token_id, 5, tok.sep_token_id]
    assert tok.encode("[MASK]cat") == [tok.token_to_id("[MASK]"), 5]
    assert tok.encode("[mask]", parse_special=False) == [tok.unk_token_id,
                                                         tok.unk_token_id, tok.unk_token_id]


def test_normalizer_cleans_splits_cjk_strips_accents_and_lowercases():
    norm = BertNormalizer()
    assert norm.normalize("A\x00b\ufffd\u200bc\td\u3000E") == "abc d e"
    assert norm.normalize("中文") == " 中  文 "
    assert norm.normalize("Café Ångström") == "cafe angstrom"
    assert BertNormalizer(strip_accents=False).normalize("Café") == "café"
    assert BertNormalizer(lowercase=False).normalize("Café") == "Café"      # null follows lowercase


def test_lowercase_is_per_character_without_the_final_sigma_rule():
    """Rust's char::to_lowercase (the tokenizers library) has no final-sigma context."""
    assert BertNormalizer().normalize("ΟΔΟΣ") == "οδοσ"


def test_punctuation_is_bert_s_ascii_ranges_and_unicode_p():
    assert split_words("a-b $5 ^x ~ «q» 1+1") == ["a", "-", "b", "$", "5", "^", "x", "~",
                                                 "«", "q", "»", "1", "+", "1"]


def test_decode_joins_pieces_and_cleans_space_before_punctuation():
    tok = _tiny(["hello", "##s", ",", "world", "!", "'", "m", "i"])
    ids = tok.encode("hellos, world! i'm", add_special_tokens=True)
    assert tok.decode(ids, skip_special_tokens=True) == "hellos, world! i ' m"
    assert tok.decode(ids).startswith("[CLS] hellos,")


def test_tokenizer_json_other_than_bert_wordpiece_is_refused():
    data = {"model": {"type": "WordPiece", "vocab": {s: i for i, s in enumerate(SPECIALS)}},
            "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "Whitespace"}}
    with pytest.raises(TokenizerLoadError, match="pre_tokenizer 'Whitespace'"):
        WordPieceTokenizer.from_tokenizer_json(data)
    with pytest.raises(TokenizerLoadError, match="not WordPiece"):
        WordPieceTokenizer.from_tokenizer_json({**data, "model": {"type": "BPE"}})
