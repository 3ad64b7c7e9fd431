"""The BPE tokenizer against the oracle (Hugging Face tokenizers 0.23 on SmolLM2-135M):
every tokenize and decode case, exact, built from tokenizer.json AND from the GGUF."""
from __future__ import annotations

import codecs
import json

import pytest

from engine.tokenizer import BPETokenizer, UnknownTokenIdError
from tests.oracle import HF_DIR, read_jsonl

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCES = ("tokenizer_json", pytest.param("gguf", marks=pytest.mark.real_model))
# Characters a byte-level token boundary may split (the decode cases flagged splits_utf8_char).
REPLACEMENT_CHAR = "\ufffd"


TOKENIZE_CASES = read_jsonl("tokenize_cases.jsonl")
DECODE_CASES = read_jsonl("decode_cases.jsonl")


@pytest.fixture(scope="module")
def gguf_metadata(real_model_dir) -> dict:
    from engine.formats.gguf import GGUFFile
    return GGUFFile(real_model_dir / GGUF_NAME).metadata


@pytest.fixture(scope="module", params=SOURCES)
def tokenizer(request) -> BPETokenizer:
    if request.param == "gguf":
        return BPETokenizer.from_gguf_metadata(request.getfixturevalue("gguf_metadata"))
    config = json.loads((HF_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    return BPETokenizer.from_tokenizer_json(HF_DIR / "tokenizer.json", tokenizer_config=config)


def _report(mismatches: list[str], total: int) -> str:
    return f"{len(mismatches)} of {total} cases differ:\n" + "\n".join(mismatches[:20])


def test_encode_reproduces_every_oracle_case(tokenizer):
    mismatches = []
    for case in TOKENIZE_CASES:
        got = tokenizer.encode(case["text"])
        if got != case["ids"]:
            mismatches.append(
                f"[{case['category']}] {case['text'][:60]!r}: {got[:12]} != {case['ids'][:12]}")
    assert not mismatches, _report(mismatches, len(TOKENIZE_CASES))


def test_special_text_stays_plain_without_parse_special(tokenizer):
    cases = [c for c in TOKENIZE_CASES if "ids_split_special_tokens" in c]
    assert len(cases) >= 10
    mismatches = []
    for case in cases:
        got = tokenizer.encode(case["text"], parse_special=False)
        if got != case["ids_split_special_tokens"] or tokenizer.special_ids & set(got):
            mismatches.append(f"{case['text'][:60]!r}: {got[:12]}")
    assert not mismatches, _report(mismatches, len(cases))


def test_token_names_match_the_oracle_tokens(tokenizer):
    mismatches = []
    for case in TOKENIZE_CASES:
        names = [tokenizer.id_to_token(i) for i in case["ids"]]
        if names != case["tokens"]:
            mismatches.append(f"{case['text'][:40]!r}: {names[:8]} != {case['tokens'][:8]}")
        if [tokenizer.token_to_id(name) for name in case["tokens"]] != case["ids"]:
            mismatches.append(f"token_to_id differs for {case['text'][:40]!r}")
    assert not mismatches, _report(mismatches, len(TOKENIZE_CASES))


def test_decode_of_encode_round_trips(tokenizer):
    mismatches = [c["text"][:40] for c in TOKENIZE_CASES
                  if c["roundtrip_ok"] and tokenizer.decode(c["ids"]) != c["text"]]
    assert not mismatches, _report(mismatches, len(TOKENIZE_CASES))


def test_decode_reproduces_every_oracle_case(tokenizer):
    mismatches = []
    for case in DECODE_CASES:
        ids = case["ids"]
        got = {
            "text": tokenizer.decode(ids),
            "text_skip_special": tokenizer.decode(ids, skip_special_tokens=True),
            "token_bytes_hex": [tokenizer.token_bytes(i).hex() for i in ids],
            "per_token_text": [tokenizer.decode([i]) for i in ids],
        }
        for key, value in got.items():
            if value != case[key]:
                mismatches.append(f"{ids[:8]} {key}: {value!r:.80} != {case[key]!r:.80}")
    assert not mismatches, _report(mismatches, len(DECODE_CASES))


def test_decode_split_at_every_offset_keeps_characters_whole(tokenizer):
    """Split the ids of each multi-byte case at every offset: the two halves' bytes, fed to an
    incremental UTF-8 reader, give the whole text; each half alone decodes to a prefix /
    suffix of it with only U+FFFD where a character was cut."""
    cases = [c for c in DECODE_CASES if c["splits_utf8_char"]]
    assert len(cases) >= 10
    for case in cases:
        ids, text = case["ids"], case["text"]
        for cut in range(len(ids) + 1):
            head = b"".join(tokenizer.token_bytes(i) for i in ids[:cut])
            tail = b"".join(tokenizer.token_bytes(i) for i in ids[cut:])
            reader = codecs.getincrementaldecoder("utf-8")(errors="replace")
            assert reader.decode(head) + reader.decode(tail, final=True) == text, (ids, cut)
            if REPLACEMENT_CHAR not in text:
                head_text = tokenizer.decode(ids[:cut]).rstrip(REPLACEMENT_CHAR)
                tail_text = tokenizer.decode(ids[cut:]).lstrip(REPLACEMENT_CHAR)
                assert text.startswith(head_text) and text.endswith(tail_text), (ids, cut)


def test_special_tokens_and_bos_eos_agree_with_hugging_face(tokenizer):
    added = json.loads((HF_DIR / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    assert tokenizer.special_ids == frozenset(t["id"] for t in added if t["special"])
    assert tokenizer.vocab_size == 49152
    assert (tokenizer.bos_token_id, tokenizer.bos_token) == (1, "<|im_start|>")
    assert tokenizer.eos_token_ids == (2,)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.token_bytes(2) == b"<|im_end|>"
    assert tokenizer.token_to_id("<|endoftext|>") == 0
    assert tokenizer.token_to_id("no such token") is None


def test_unknown_ids_are_refused(tokenizer):
    for bad in (-1, 49152, 10**9):
        with pytest.raises(UnknownTokenIdError):
            tokenizer.token_bytes(bad)
        with pytest.raises(UnknownTokenIdError):
            tokenizer.decode([17, bad])


@pytest.mark.real_model
def test_gguf_pre_type_gpt2_is_plain_byte_level(gguf_metadata):
    """Without SmolLM2's digit split (`pre` = gpt2) the ids are Hugging Face's plain
    ByteLevel pre-tokenizer ids, which the oracle records where they differ."""
    plain = BPETokenizer.from_gguf_metadata({**gguf_metadata, "tokenizer.ggml.pre": "gpt2"})
    cases = [c for c in TOKENIZE_CASES if "ids_plain_bytelevel_pretok" in c]
    assert len(cases) >= 5
    mismatches = [c["text"][:40] for c in cases
                  if plain.encode(c["text"]) != c["ids_plain_bytelevel_pretok"]]
    assert not mismatches, _report(mismatches, len(cases))
