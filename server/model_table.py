"""`[[models]]` in runtime.toml: more models beside `[engine]`'s, one table each.

    [engine]
    model_dir = "artifacts/models/smol-135m"        # the first model, as before
    [[models]]
    id = "all-minilm-l6-v2"                         # the served id (default: the folder's name)
    model_dir = "artifacts/models/all-minilm-l6-v2"
    kind = "embedding"                              # "chat" | "embedding" (default: the folder's)
    max_batch_tokens = 384                          # an embedding model: padded tokens a forward
    queue_capacity = 256                            # any of PER_MODEL_KEYS, for this model only

    [[models]]
    id = "smol-sql"                                 # a LoRA adapter served by name
    kind = "lora"
    base = "smol-135m"                              # the id of a chat model served here
    adapter_dir = "adapters/smol-sql"               # a PEFT folder (no model_dir)
    scale = 1.0                                     # its products times this (default 1)

A config without `[[models]]` is today's single-model config, unchanged. A table's own
settings override `[engine]`'s for its model; the keys that belong to the whole server
(listeners, keys, logs, drain) stay in `[engine]`. The values are checked by config.py's key
table (`check`), so a message names the table and the key.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.api import KIND_CHAT, KIND_EMBEDDING, model_name
from server.api.adapters import KIND_LORA
from server.worker.encoder_thread import ENCODER_BATCH_TOKENS

MODEL_KINDS = (KIND_CHAT, KIND_EMBEDDING, KIND_LORA)
LORA_KEYS = ("id", "kind", "base", "adapter_dir", "scale")
MAX_LORA_SCALE = 100.0
# [engine] keys a model may set for itself (its engine, its queue, its template).
PER_MODEL_KEYS = ("prefill_chunk", "block_size", "kv_cache_mib", "num_kv_blocks", "max_num_seqs",
                  "max_loras", "lora_merge",
                  "max_batched_tokens", "tokens_beside_decode", "itl_target_ms", "max_model_len",
                  "prefix_cache", "queue_capacity", "queue_deadline_ms", "chat_template",
                  "arrival_window_ms")
MAX_ENCODER_BATCH_TOKENS = 65_536      # a forward's [B, T, 4H] temporaries stay in memory


class ModelTableError(ValueError):
    """A `[[models]]` table was refused; the message names the table and the key."""


@dataclass(frozen=True)
class ModelEntry:
    """One served model: its id, folder or file, kind ("" = read from the folder), the
    encoder's batch bound, and its own `[engine]` settings as (key, value) pairs; a LoRA
    adapter (kind "lora") its base's id, its folder and its scale instead."""
    id: str
    model_dir: str = ""
    kind: str = ""
    max_batch_tokens: int = ENCODER_BATCH_TOKENS
    settings: tuple[tuple[str, Any], ...] = ()
    base: str = ""                     # lora: the served chat model it runs on
    adapter_dir: str = ""              # lora: the PEFT folder
    scale: float = 1.0                 # lora: its products times this


Check = Callable[[str, str, Any], Any]      # (where, key, value) -> the checked value


def parse_models(tables: Any, check: Check, base_dir: str | os.PathLike | None,
                 source: str = "[[models]]") -> tuple[ModelEntry, ...]:
    """The `[[models]]` array of tables -> entries (paths relative to the config file);
    `source` names where the tables came from in messages (or TL_ENGINE__MODELS)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ModelTableError(f"{source} must be an array of tables (one per model)")
    return tuple(_entry(f"{source} #{i + 1}", table, check, base_dir)
                 for i, table in enumerate(tables))


def _entry(where: str, table: dict, check: Check, base_dir) -> ModelEntry:
    if table.get("kind") == KIND_LORA:
        return _lora_entry(where, table, base_dir)
    unknown = sorted(set(table) - {"id", "model_dir", "kind", "max_batch_tokens"}
                     - set(PER_MODEL_KEYS))
    if unknown:
        raise ModelTableError(f"{where}.{unknown[0]}: unknown key (a model may set id, "
                              f"model_dir, kind, max_batch_tokens, {', '.join(PER_MODEL_KEYS)})")
    model_dir = table.get("model_dir")
    if not isinstance(model_dir, str) or not model_dir:
        raise ModelTableError(f"{where}.model_dir: expected a non-empty path")
    if base_dir is not None and not Path(model_dir).is_absolute():
        model_dir = str(Path(base_dir) / model_dir)
    model_id = table.get("id", model_name(model_dir))
    if not isinstance(model_id, str) or not model_id:
        raise ModelTableError(f"{where}.id: expected a non-empty string")
    kind = table.get("kind", "")
    if kind not in ("",) + MODEL_KINDS:
        raise ModelTableError(f"{where}.kind: expected \"chat\", \"embedding\" or \"lora\", "
                              f"got {kind!r}")
    batch = table.get("max_batch_tokens", ENCODER_BATCH_TOKENS)
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_ENCODER_BATCH_TOKENS:
        raise ModelTableError(f"{where}.max_batch_tokens: expected an integer from 1 to "
                              f"{MAX_ENCODER_BATCH_TOKENS}, got {batch!r}")
    settings = tuple(sorted((key, check(where, key, value)) for key, value in table.items()
                            if key in PER_MODEL_KEYS))
    return ModelEntry(id=model_id, model_dir=model_dir, kind=kind, max_batch_tokens=batch,
                      settings=settings)


def _lora_entry(where: str, table: dict, base_dir) -> ModelEntry:
    """A `kind = "lora"` table: id, base, adapter_dir, scale; nothing of an engine's own."""
    unknown = sorted(set(table) - set(LORA_KEYS))
    if unknown:
        raise ModelTableError(f"{where}.{unknown[0]}: unknown key (a lora table may set "
                              f"{', '.join(LORA_KEYS)}; it runs in its base's engine)")
    folder = table.get("adapter_dir")
    if not isinstance(folder, str) or not folder:
        raise ModelTableError(f"{where}.adapter_dir: expected a non-empty path (the PEFT folder)")
    if base_dir is not None and not Path(folder).is_absolute():
        folder = str(Path(base_dir) / folder)
    base = table.get("base")
    if not isinstance(base, str) or not base:
        raise ModelTableError(f"{where}.base: expected the id of a chat model served here")
    model_id = table.get("id", Path(folder).name)
    if not isinstance(model_id, str) or not model_id:
        raise ModelTableError(f"{where}.id: expected a non-empty string")
    scale = table.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
            not 0 < scale <= MAX_LORA_SCALE:
        raise ModelTableError(f"{where}.scale: expected a number > 0 and <= "
                              f"{MAX_LORA_SCALE:g}, got {scale!r}")
    return ModelEntry(id=model_id, kind=KIND_LORA, base=base, adapter_dir=folder,
                      scale=float(scale))


def lora_option(text: str) -> dict[str, str]:
    """`--lora NAME=DIR` -> the `[[models]]` table it stands for (its base: the first
    chat model, filled in by the caller)."""
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise ModelTableError(f"--lora {text!r}: expected NAME=DIR (a PEFT adapter folder)")
    return {"id": name, "kind": KIND_LORA, "adapter_dir": folder}


def check_unique_ids(first_id: str, entries: tuple[ModelEntry, ...]) -> None:
    """Every served id once: the request's `model` picks exactly one model."""
    seen = {first_id}
    for index, entry in enumerate(entries):
        if entry.id in seen:
            raise ModelTableError(f"[[models]] #{index + 1}.id: {entry.id!r} is already served "
                                  "(give each model its own id)")
        seen.add(entry.id)
