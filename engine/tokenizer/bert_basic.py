"""BERT's basic tokenisation: normalise the text, then split it into words and punctuation.

This is Hugging Face's `BertNormalizer` + `BertPreTokenizer` (the fast tokenizer that the
oracle used), in the same order:

  1. clean text: drop U+0000, U+FFFD and control/format characters (Unicode category C*,
     except tab, newline, carriage return); every whitespace character becomes a space;
  2. CJK ideographs get a space on each side, so each becomes a word of its own;
  3. strip accents (NFD, then drop non-spacing marks, category Mn) -- when the config says
     so, or, when it says nothing (null), whenever lower-casing is on;
  4. lower-case, one character at a time (Rust's `char::to_lowercase`: no final-sigma rule).

The pre-tokenizer then splits on whitespace and isolates every punctuation character
(BERT's definition: the ASCII ranges 33-47, 58-64, 91-96, 123-126, plus Unicode P*).
Word pieces are the next stage's business (wordpiece.py).
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

# Rust's `char::is_whitespace` (the White_Space property); the C* ones among them
# (U+000B, U+000C, U+0085) are removed as controls before whitespace is looked at.
WHITESPACE_CLASS = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
PUNCTUATION_CLASS = r"\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e\p{P}"
# The CJK Unified Ideographs blocks BERT splits (not Hiragana, Katakana or Hangul).
CJK_CLASS = (r"\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
             r"\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")

_DROPPED = regex.compile(r"[\x00\ufffd]|[^\P{C}\t\n\r]")
_WHITESPACE = regex.compile(f"[{WHITESPACE_CLASS}]")
_CJK = regex.compile(f"([{CJK_CLASS}])")
_NONSPACING_MARK = regex.compile(r"\p{Mn}")
_WORD_OR_PUNCTUATION = regex.compile(
    f"[^{WHITESPACE_CLASS}{PUNCTUATION_CLASS}]+|[{PUNCTUATION_CLASS}]")
CAPITAL_SIGMA = "\u03a3"          # the one letter whose str.lower() looks at its neighbours


@dataclass(frozen=True)
class BertNormalizer:
    """The normaliser's switches, as tokenizer.json / tokenizer_config.json spell them."""
    clean_text: bool = True
    handle_chinese_chars: bool = True
    strip_accents: bool | None = None     # None: follow `lowercase`
    lowercase: bool = True

    def normalize(self, text: str) -> str:
        if self.clean_text:
            text = _WHITESPACE.sub(" ", _DROPPED.sub("", text))
        if self.handle_chinese_chars:
            text = _CJK.sub(r" \1 ", text)
        strip = self.lowercase if self.strip_accents is None else self.strip_accents
        if strip:
            text = _NONSPACING_MARK.sub("", unicodedata.normalize("NFD", text))
        if self.lowercase:
            text = _lower_each_character(text)
        return text


def _lower_each_character(text: str) -> str:
    """Lower-case without Python's final-sigma context rule ("ΟΔΟΣ" -> "οδοσ", as Rust)."""
    if CAPITAL_SIGMA not in text:
        return text.lower()
    return "".join(char.lower() for char in text)


def split_words(normalized: str) -> list[str]:
    """BertPreTokenizer: whitespace separates words; each punctuation character is a word."""
    return _WORD_OR_PUNCTUATION.findall(normalized)
