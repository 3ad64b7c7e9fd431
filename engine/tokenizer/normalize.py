"""Normalizers: the text rewrite a tokenizer.json applies before pre-tokenization.

Hugging Face runs the `normalizer` on each stretch of text between added tokens, before the
pre-tokenizer and BPE see it. Two families here need one:
  - Qwen2/Qwen3: `NFC`, so "e" + U+0301 (combining acute) becomes the one character "é"
    and gets the same ids as a typed "é".
  - Gemma 3 (SentencePiece-style BPE): `Replace(" " -> "▁")`, the space marker that the
    vocabulary's pieces carry ("▁world"); Llama 2 style files also `Prepend("▁")`.

A `Normalizer` is a tuple of steps applied in order (a `Sequence` is flattened). Unknown
step types are refused at load time (TokenizerLoadError) rather than silently skipped, since
a skipped step gives wrong ids without any error. A GGUF has no field for a normalizer: its
tokenizers run none (as llama.cpp and transformers' GGUF reader do).
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from engine.tokenizer.base import TokenizerLoadError

UNICODE_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


@dataclass(frozen=True)
class NormalizeStep:
    """One step: a Unicode form ("NFC"...), a literal replace, or a prepend."""

    kind: str                 # "unicode" | "replace" | "prepend"
    form: str = ""            # the Unicode normal form, for kind "unicode"
    old: str = ""             # the text replaced, for kind "replace"
    new: str = ""             # the replacement (replace) or the prefix (prepend)

    def apply(self, text: str) -> str:
        if not text:
            return text       # Hugging Face prepends nothing to an empty string
        if self.kind == "unicode":
            return unicodedata.normalize(self.form, text)
        if self.kind == "replace":
            return text.replace(self.old, self.new)
        return self.new + text


@dataclass(frozen=True)
class Normalizer:
    """The steps in order; `Normalizer(())` leaves text as it is."""

    steps: tuple[NormalizeStep, ...] = ()

    def apply(self, text: str) -> str:
        for step in self.steps:
            text = step.apply(text)
        return text


def normalizer_from_json(config: dict[str, Any] | None) -> Normalizer:
    """The Normalizer of a tokenizer.json `normalizer` object (None: no normalizer)."""
    return Normalizer(tuple(_step(item) for item in _flatten(config)))


def _flatten(config: dict[str, Any] | None) -> list[dict[str, Any]]:
    if config is None:
        return []
    if config.get("type") == "Sequence":
        return [s for child in config.get("normalizers", []) for s in _flatten(child)]
    return [config]


def _step(config: dict[str, Any]) -> NormalizeStep:
    kind = config.get("type")
    if kind in UNICODE_FORMS:
        return NormalizeStep(kind="unicode", form=kind)
    if kind == "Replace":
        pattern = config.get("pattern", {})
        if "String" not in pattern:
            raise TokenizerLoadError(f"unsupported Replace normalizer pattern {pattern!r} "
                                     "(only a literal String is implemented)")
        return NormalizeStep(kind="replace", old=pattern["String"], new=config["content"])
    if kind == "Prepend":
        return NormalizeStep(kind="prepend", new=config["prepend"])
    raise TokenizerLoadError(f"unsupported normalizer type {kind!r}")
