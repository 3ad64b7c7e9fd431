"""The OpenAI v1 response documents: chat.completion, chat.completion.chunk, text_completion,
usage, model list, embeddings, tokenize.

Pure functions from values to JSON-ready dicts; no I/O, no engine. Field names and the
order of the streamed chunks follow the OpenAI API reference (docs/CONTRACT.md):

    role chunk (delta.role = "assistant", content "") -> content chunks -> the last content
    chunk carries finish_reason -> usage chunk (choices = []) when asked -> [DONE]
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass


OWNED_BY = "tl-serve"


def new_id(prefix: str) -> str:
    """`chatcmpl-<24 hex>`, `cmpl-...`: a response id (separate from X-Request-Id)."""
    return f"{prefix}-{os.urandom(12).hex()}"


def usage(prompt_tokens: int, completion_tokens: int,
          completion_details: dict | None = None) -> dict:
    """`completion_details`: usage.completion_tokens_details, when the answer has any."""
    use = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens}
    if completion_details is not None:
        use["completion_tokens_details"] = completion_details
    return use


@dataclass(frozen=True)
class Header:
    """What every document of one response shares."""
    id: str
    created: int
    model: str

    @staticmethod
    def new(prefix: str, model: str) -> "Header":
        return Header(new_id(prefix), int(time.time()), model)


# --- chat ------------------------------------------------------------------------------------

def chat_completion(h: Header, text: str, finish: str, use: dict,
                    logprobs: list | None = None, *, index: int = 0) -> dict:
    return {"id": h.id, "object": "chat.completion", "created": h.created, "model": h.model,
            "system_fingerprint": None,
            "choices": [{"index": index, "message": {"role": "assistant", "content": text},
                         "logprobs": None if logprobs is None else {"content": logprobs},
                         "finish_reason": finish}],
            "usage": use}


def chat_chunk(h: Header, delta: dict, finish: str | None = None,
               logprobs: list | None = None, *, index: int = 0) -> dict:
    return {"id": h.id, "object": "chat.completion.chunk", "created": h.created,
            "model": h.model, "system_fingerprint": None,
            "choices": [{"index": index, "delta": delta,
                         "logprobs": None if logprobs is None else {"content": logprobs},
                         "finish_reason": finish}]}


def chat_usage_chunk(h: Header, use: dict) -> dict:
    return {"id": h.id, "object": "chat.completion.chunk", "created": h.created,
            "model": h.model, "system_fingerprint": None, "choices": [], "usage": use}


def chat_logprob_entry(text: str, raw: bytes, logprob: float,
                       top: list[tuple[str, bytes, float]]) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(raw),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(b)} for t, b, lp in top]}


# --- completions -----------------------------------------------------------------------------

def completion(h: Header, text: str, finish: str | None, use: dict | None,
               logprobs: dict | None = None, *, index: int = 0) -> dict:
    doc = {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
           "system_fingerprint": None,
           "choices": [{"index": index, "text": text, "logprobs": logprobs,
                        "finish_reason": finish}]}
    if use is not None:
        doc["usage"] = use
    return doc


def completion_usage_chunk(h: Header, use: dict) -> dict:
    return {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
            "system_fingerprint": None, "choices": [], "usage": use}


def merge_choices(documents: list[dict]) -> dict:
    """One document per choice (same header) -> one document with every choice, by index."""
    merged = dict(documents[0])
    merged["choices"] = sorted((c for d in documents for c in d["choices"]),
                               key=lambda c: c["index"])
    return merged


def _best_by_text(top: list[tuple[str, bytes, float]]) -> dict[str, float]:
    """The legacy top list is keyed by token text; tokens that decode alike (lone UTF-8
    bytes all read "\ufffd") keep the best logprob, as the list is best first."""
    out: dict[str, float] = {}
    for text, _, logprob in top:
        out.setdefault(text, logprob)
    return out


def completion_logprobs(entries: list[tuple[str, float | None, list | None]],
                        start_offset: int = 0) -> dict:
    """Legacy logprobs: tokens, token_logprobs, top_logprobs, text_offset. An echoed
    prompt's first token has no logprob and no top list (None: JSON null)."""
    offsets, offset = [], start_offset
    for text, _, _ in entries:
        offsets.append(offset)
        offset += len(text)
    return {"tokens": [t for t, _, _ in entries],
            "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [None if top is None else _best_by_text(top)
                             for _, _, top in entries],
            "text_offset": offsets}


# --- models, embeddings, tokenize ------------------------------------------------------------

def model_card(model_id: str, created: int, max_model_len: int, kind: str,
               tasks: tuple[str, ...], parent: str | None = None, root: str | None = None) -> dict:
    """OpenAI's model object, with the context length, the kind ("chat" | "embedding" |
    "lora") and what it serves (`capabilities`: "generate", "embeddings", "tokenize",
    "rerank", "score"); a LoRA adapter's also names its base (`parent`) and folder (`root`)."""
    card = {"id": model_id, "object": "model", "created": created, "owned_by": OWNED_BY,
            "max_model_len": max_model_len, "kind": kind, "capabilities": list(tasks)}
    if parent is not None:
        card.update(parent=parent, root=root)
    return card


def model_list(cards: list[dict]) -> dict:
    return {"object": "list", "data": cards}


def embeddings(model: str, vectors: list, prompt_tokens: int) -> dict:
    """The embeddings list; `vectors` are already in the asked encoding_format, one per input:
    a list of floats, or a base64 string of little-endian float32 bytes (the engine thread
    encodes them, server/worker/bridge.py), placed here as they are."""
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": v}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def tokenized(tokens: list[int], max_model_len: int) -> dict:
    return {"tokens": tokens, "count": len(tokens), "max_model_len": max_model_len}


def detokenized(text: str) -> dict:
    return {"prompt": text}
