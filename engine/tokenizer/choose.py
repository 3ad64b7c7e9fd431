"""Which tokenizer class a model file asks for: byte-level BPE or SentencePiece-style BPE.

  - GGUF: `tokenizer.ggml.model` "gpt2" (SmolLM2, Llama 3, Qwen2/3) -> BPETokenizer;
    "llama" (Gemma, Llama 2, Mistral, Phi-3) -> SentencePieceBPE.
  - tokenizer.json: a BPE model with `byte_fallback` -> SentencePieceBPE; else BPETokenizer
    (which refuses what it cannot reproduce).
The model loader (engine/model/loader.py) calls these two functions and nothing else here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engine.tokenizer.base import Tokenizer, TokenizerLoadError
from engine.tokenizer.bpe import GGUF_BPE_MODEL, BPETokenizer
from engine.tokenizer.hf_json import read_tokenizer_json
from engine.tokenizer.spm import GGUF_SPM_MODEL, SentencePieceBPE

GGUF_TOKENIZER_CLASSES = {GGUF_BPE_MODEL: BPETokenizer, GGUF_SPM_MODEL: SentencePieceBPE}


def tokenizer_from_gguf_metadata(metadata: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer of a GGUF's `tokenizer.ggml.*` metadata, or TokenizerLoadError."""
    model = metadata.get("tokenizer.ggml.model")
    cls = GGUF_TOKENIZER_CLASSES.get(model)  # type: ignore[arg-type]
    if cls is None:
        known = ", ".join(repr(k) for k in GGUF_TOKENIZER_CLASSES)
        raise TokenizerLoadError(f"tokenizer.ggml.model {model!r} is not supported "
                                 f"(known: {known})")
    return cls.from_gguf_metadata(metadata)


def tokenizer_from_json(path: str | os.PathLike,
                        tokenizer_config: Mapping[str, Any] | None = None) -> Tokenizer:
    """The tokenizer of a tokenizer.json file (+ the parsed tokenizer_config.json)."""
    data = read_tokenizer_json(path)
    model = data.get("model") or {}
    cls = SentencePieceBPE if model.get("type") == "BPE" and model.get("byte_fallback") \
        else BPETokenizer
    return cls.from_tokenizer_json(data, tokenizer_config=tokenizer_config)
