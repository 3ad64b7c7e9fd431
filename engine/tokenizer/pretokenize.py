"""Pre-tokenization: cutting text into the "words" that BPE merges never cross.

BPE runs inside each pre-token, never across two, so this step decides, for example, that
" world" is one word (the space travels with the word that follows it) and that "2024" is
four words in SmolLM2 (every digit alone). A pre-tokenizer here is a short pipeline of
regex *stages*: each stage cuts every piece from the previous stage into the regex's
matches, and the text between matches (if any) stays a piece too ("Isolated" in Hugging
Face's words). Nothing is ever dropped, so the pieces always join back to the input.

Two ways to name a pipeline:
  - GGUF: `tokenizer.ggml.pre` names one of llama.cpp's known types (`PRE_TYPE_STAGES`).
  - tokenizer.json: the `pre_tokenizer` object (`Sequence`, `Digits`, `ByteLevel`, `Split`).

Patterns use the `regex` module for `\\p{L}` (letters) and `\\p{N}` (numbers, which also
covers '²', '½' and Roman numeral characters, exactly like Rust's `char::is_numeric`).

This module knows nothing about the byte alphabet or the vocabulary; it is str -> list[str].
"""
from __future__ import annotations

from dataclasses import dataclass

import regex

from engine.tokenizer.base import TokenizerLoadError

# GPT-2's split: English contractions, a letter run with one optional leading space, a number
# run, a punctuation run, whitespace not followed by a non-space (so the last space of a run
# is left to prefix the next word), and any other whitespace.
GPT2_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)
# Llama 3: case-insensitive contractions, a letter run with one optional non-letter prefix,
# numbers in groups of at most three, punctuation with trailing newlines, newline runs.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2: Llama 3's split with every digit alone.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Hugging Face's Digits pre-tokenizer as a regex stage: each numeric character alone
# (individual_digits=True) or whole numeric runs, with the text between them kept whole.
DIGITS_INDIVIDUAL_PATTERN = r"\p{N}|\P{N}+"
DIGITS_RUNS_PATTERN = r"\p{N}+|\P{N}+"

# SmolLM2's two stages (each digit alone, then GPT-2) as ONE regex, ~1.5x faster: digits
# match alone first, and the whitespace lookahead also stops before a digit, because in the
# staged form a digit ends the piece and `\s+(?!\S)` then sees the end of its text.
# `PreTokenizer` swaps it in for the staged pair; a test checks that both cut alike.
DIGITS_THEN_GPT2_FUSED_PATTERN = (
    r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"
)
FUSED_STAGES: dict[tuple[str, ...], str] = {
    (DIGITS_INDIVIDUAL_PATTERN, GPT2_PATTERN): DIGITS_THEN_GPT2_FUSED_PATTERN,
}

# llama.cpp's `tokenizer.ggml.pre` names -> the stages they run. "default" is read as plain
# GPT-2 here (a deliberate simplification of llama.cpp's own fallback).
PRE_TYPE_STAGES: dict[str, tuple[str, ...]] = {
    "gpt2": (GPT2_PATTERN,),
    "gpt-2": (GPT2_PATTERN,),
    "default": (GPT2_PATTERN,),
    "smollm": (DIGITS_INDIVIDUAL_PATTERN, GPT2_PATTERN),
    "starcoder": (DIGITS_INDIVIDUAL_PATTERN, GPT2_PATTERN),
    "refact": (DIGITS_INDIVIDUAL_PATTERN, GPT2_PATTERN),
    "llama-bpe": (LLAMA3_PATTERN,),
    "llama3": (LLAMA3_PATTERN,),
    "qwen2": (QWEN2_PATTERN,),
}
# llama.cpp looks a whole Llama 3 word up in the vocabulary before merging (HF's
# `ignore_merges`); the other pre types always merge.
PRE_TYPES_IGNORING_MERGES = frozenset({"llama-bpe", "llama3"})


@dataclass(frozen=True)
class PreTokenizer:
    """A pipeline of regex stages; `split(text)` returns pieces that join back to `text`."""

    patterns: tuple[str, ...]
    # Hugging Face ByteLevel(add_prefix_space=True) prepends " " to every piece that reaches
    # it without one; this is the index of the stage it sits before (None: never).
    prefix_space_stage: int | None = None
    # Run a known equivalent single regex (FUSED_STAGES) instead of the stages.
    use_fused: bool = True

    def __post_init__(self) -> None:
        patterns = self.patterns
        if self.use_fused and self.prefix_space_stage is None and patterns in FUSED_STAGES:
            patterns = (FUSED_STAGES[patterns],)
        object.__setattr__(self, "_compiled", tuple(regex.compile(p) for p in patterns))

    def split(self, text: str) -> list[str]:
        pieces = [text] if text else []
        for stage, pattern in enumerate(self._compiled):  # type: ignore[attr-defined]
            if stage == self.prefix_space_stage:
                pieces = [p if p.startswith(" ") else " " + p for p in pieces]
            next_pieces: list[str] = []
            for piece in pieces:
                next_pieces.extend(_split_isolated(pattern, piece))
            pieces = next_pieces
        if self.prefix_space_stage == len(self.patterns):
            pieces = [p if p.startswith(" ") else " " + p for p in pieces]
        return pieces


def _split_isolated(pattern: regex.Pattern, piece: str) -> list[str]:
    """The matches of `pattern` in `piece`, with any unmatched text between them kept."""
    matches = pattern.findall(piece)
    if sum(map(len, matches)) == len(piece):
        return matches  # the common case: the pattern covers every character
    pieces: list[str] = []
    end = 0
    for match in pattern.finditer(piece):
        start, stop = match.span()
        if start > end:
            pieces.append(piece[end:start])
        if stop > start:
            pieces.append(piece[start:stop])
        end = stop
    if end < len(piece):
        pieces.append(piece[end:])
    return pieces


def pre_tokenizer_for_gguf(pre_type: str) -> PreTokenizer:
    """The pipeline for a GGUF `tokenizer.ggml.pre` value, or TokenizerLoadError."""
    try:
        return PreTokenizer(PRE_TYPE_STAGES[pre_type])
    except KeyError:
        known = ", ".join(sorted(PRE_TYPE_STAGES))
        raise TokenizerLoadError(
            f"unsupported tokenizer.ggml.pre {pre_type!r} (known: {known})") from None


def pre_tokenizer_from_json(config: dict | None) -> PreTokenizer:
    """The pipeline for a tokenizer.json `pre_tokenizer` object (byte-level family only)."""
    patterns: list[str] = []
    prefix_space_stage: int | None = None
    for step in _flatten(config):
        kind = step.get("type")
        if kind == "Digits":
            individual = step.get("individual_digits", False)
            patterns.append(DIGITS_INDIVIDUAL_PATTERN if individual else DIGITS_RUNS_PATTERN)
        elif kind == "ByteLevel":
            if step.get("add_prefix_space", False):
                prefix_space_stage = len(patterns)
            if step.get("use_regex", True):
                patterns.append(GPT2_PATTERN)
        elif kind == "Split":
            patterns.append(_split_step_pattern(step))
        else:
            raise TokenizerLoadError(f"unsupported pre_tokenizer type {kind!r}")
    return PreTokenizer(tuple(patterns), prefix_space_stage=prefix_space_stage)


def _flatten(config: dict | None) -> list[dict]:
    if config is None:
        return []
    if config.get("type") == "Sequence":
        return [s for child in config.get("pretokenizers", []) for s in _flatten(child)]
    return [config]


def _split_step_pattern(step: dict) -> str:
    if step.get("behavior") != "Isolated" or step.get("invert", False):
        raise TokenizerLoadError(
            f"unsupported Split pre_tokenizer behavior {step.get('behavior')!r} "
            f"(invert={step.get('invert')!r}); only Isolated is implemented")
    pattern = step.get("pattern", {})
    if "Regex" in pattern:
        return pattern["Regex"]
    if "String" in pattern:
        return regex.escape(pattern["String"])
    raise TokenizerLoadError(f"unsupported Split pattern {pattern!r}")
