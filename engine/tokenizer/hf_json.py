"""What every tokenizer.json loader reads alike: the file, its added tokens, bos/eos and BOS.

Hugging Face's tokenizer.json holds the model (BPE vocab + merges), the `added_tokens` list
and the pipeline (normalizer, pre_tokenizer, post_processor, decoder); tokenizer_config.json
beside it names `bos_token` / `eos_token` and says whether BOS is added (`add_bos_token`).
bpe.py (byte-level) and spm.py (SentencePiece-style) both build on these helpers.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from engine.tokenizer.base import AddedToken, TokenizerLoadError


def read_tokenizer_json(path: str | os.PathLike) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise TokenizerLoadError(
            f"cannot read tokenizer.json {os.fspath(path)!r}: {error}") from error


def added_tokens_from_json(data: Mapping[str, Any]) -> list[AddedToken]:
    """tokenizer.json's `added_tokens`; `special: true` ones are the special ids. All are
    matched in the raw text (the files served here mark every one `normalized: false`;
    Hugging Face would match `normalized: true` ones after the normalizer)."""
    return [AddedToken(id=t["id"], content=t["content"], is_special=bool(t.get("special")),
                       lstrip=bool(t.get("lstrip")), rstrip=bool(t.get("rstrip")))
            for t in data.get("added_tokens", [])]


def config_token_id(value: Any, content_ids: Mapping[str, int], role: str) -> int | None:
    """tokenizer_config.json's bos_token / eos_token: a string, {"content": ...}, or null."""
    if isinstance(value, Mapping):
        value = value.get("content")
    if value is None or value == "":
        return None
    if value not in content_ids:
        raise TokenizerLoadError(f"tokenizer_config {role} {value!r} is not in the vocabulary")
    return content_ids[value]


def json_adds_bos(data: Mapping[str, Any], config: Mapping[str, Any],
                  bos_id: int | None) -> bool:
    """Does encoding with special tokens put BOS first? tokenizer_config's `add_bos_token`
    when it says so; else whether the post_processor's single-text template starts with a
    special token whose id is BOS (Llama 3 says it only there)."""
    if isinstance(config.get("add_bos_token"), bool):
        return config["add_bos_token"] and bos_id is not None
    for processor in _processors(data.get("post_processor")):
        if processor.get("type") != "TemplateProcessing":
            continue
        single = processor.get("single") or [{}]
        first = single[0].get("SpecialToken")
        if first is None:
            return False
        ids = (processor.get("special_tokens", {}).get(first.get("id"), {}) or {}).get("ids")
        return bool(ids) and bos_id is not None and ids[0] == bos_id
    return False


def _processors(config: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if config is None:
        return []
    if config.get("type") == "Sequence":
        return list(config.get("processors", []))
    return [config]
