"""LoRA adapters served by name, vLLM's way: a request's `model` names an adapter, which runs
in its base chat model's engine (the base's engine thread, text layer and sampling
defaults), its rows beside the base's rows in the same steps.

`AdapterTable` is the one table of served adapters by name, read by every request (the
model check, `/v1/models`) and written by the configuration at start-up and, when
`[engine].allow_runtime_lora` is on, by two routes (vLLM's):

    POST /v1/load_lora_adapter    {"lora_name": ..., "lora_path": ...}   -> 200, or 400 / 404
    POST /v1/unload_lora_adapter  {"lora_name": ...}                     -> 200, or 404

Both are refused (404 `runtime_lora_disabled`) unless the setting is on AND an API key is
set: loading reads files the operator did not name. `lora_path` is resolved (symlinks
followed, relative paths against the root) and must lie inside `[engine].lora_root`; a
refused folder is a 400 naming which file was refused, never quoting it (the reason goes to
the server's log). Loading runs on an off-loop pool thread (the route's `off_loop`), never
on the loop or the engine thread. A request holds its adapter from the model check on
(`ModelContext.adapter`, then `GenRequest.scope`), so unloading lets requests in flight
finish while new ones get 404.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.api import LoraAdapter, ModelFormatError, ModelConfig, load_adapter
from server import replies
from server.api.fields import load_json_object
from server.errors import ApiError, bad
from server.replies import Headers

log = logging.getLogger("tlserve")
KIND_LORA = "lora"                 # a model card's kind, and a `[[models]]` table's


@dataclass(frozen=True)
class ServedAdapter:
    """One adapter served by name: its base chat model's id and the loaded products."""
    name: str
    base: str                      # the id of the chat model whose engine runs it
    adapter: LoraAdapter
    created: int                   # unix seconds: the model card's `created`


class AdapterTable:
    """Served adapters by name. Requests read it on pool threads and the loop thread; the
    load and unload routes write it on pool threads: one lock, held for dict work only."""

    def __init__(self, adapters: tuple[ServedAdapter, ...] = ()):
        self._lock = threading.Lock()
        self._by_name: dict[str, ServedAdapter] = {a.name: a for a in adapters}

    def get(self, name: str) -> ServedAdapter | None:
        with self._lock:
            return self._by_name.get(name)

    def all(self) -> list[ServedAdapter]:
        """Every served adapter, in the order they were added."""
        with self._lock:
            return list(self._by_name.values())

    def add(self, served: ServedAdapter) -> None:
        with self._lock:
            if served.name in self._by_name:
                raise bad("lora_name", f"The LoRA adapter '{served.name}' is already loaded.")
            self._by_name[served.name] = served

    def remove(self, name: str) -> ServedAdapter:
        with self._lock:
            served = self._by_name.pop(name, None)
        if served is None:
            raise ApiError("lora_not_found", f"No LoRA adapter named '{name}' is loaded.",
                           param="lora_name")
        return served


@dataclass(frozen=True)
class RuntimeLora:
    """Whether adapters may be loaded and unloaded at run time, and from where."""
    enabled: bool = False          # [engine].allow_runtime_lora
    api_key_set: bool = False      # the routes need one: they read files on request
    root: str = ""                 # [engine].lora_root: runtime folders must lie inside it

    def check(self) -> None:
        if not self.enabled:
            raise ApiError("runtime_lora_disabled", "Loading LoRA adapters at run time is off "
                                                    "([engine].allow_runtime_lora).")
        if not self.api_key_set:
            raise ApiError("runtime_lora_disabled", "Loading LoRA adapters at run time needs "
                                                    "an API key ([engine].api_key).")
        if not self.root:
            raise ApiError("runtime_lora_disabled", "Loading LoRA adapters at run time needs "
                                                    "[engine].lora_root.")

    def resolve(self, given: str) -> Path:
        """`lora_path` inside the root, symlinks followed; a 400 otherwise."""
        root = Path(self.root).resolve()
        resolved = (root / given).resolve()
        if not resolved.is_relative_to(root):
            raise bad("lora_path", f"lora_path {given!r} is outside the server's LoRA root.")
        if not resolved.is_dir():
            raise bad("lora_path", f"lora_path {given!r} is not a folder.")
        return resolved


def read_adapter(folder: str | Path, name: str, base: ModelConfig, scale: float = 1.0
                 ) -> LoraAdapter:
    """Load a folder for `base`; ModelFormatError / OSError as the loader raised them."""
    t0 = time.perf_counter()
    adapter = load_adapter(folder, base, name=name, scale=scale)
    log.info("LoRA adapter %s loaded from %s in %.2f s (modules %d, max rank %d)", name,
             folder, time.perf_counter() - t0, len(adapter.modules), adapter.max_rank)
    return adapter


def _text_field(doc: dict, name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise bad(name, f"'{name}' must be a non-empty string.")
    return value


def load_request(body: bytes, policy: RuntimeLora, table: AdapterTable, served_ids: list[str],
                 base: str, base_config: ModelConfig) -> ServedAdapter:
    """`POST /v1/load_lora_adapter`'s work (a pool thread): check, resolve, load, serve."""
    policy.check()
    doc = load_json_object(body)
    name, given = _text_field(doc, "lora_name"), _text_field(doc, "lora_path")
    if name in served_ids or table.get(name) is not None:
        raise bad("lora_name", f"The name '{name}' is already served.")
    folder = policy.resolve(given)
    try:
        adapter = read_adapter(folder, name, base_config)
    except (ModelFormatError, OSError) as exc:
        log.warning("LoRA adapter %s refused: %s", name, exc)
        which = Path(getattr(exc, "path", "") or getattr(exc, "filename", "") or "").name
        raise bad("lora_path", f"lora_path {given!r} is not a LoRA adapter this server can "
                               f"serve ({which or 'the folder'} was refused; the server log "
                               "says why).") from None
    served = ServedAdapter(name, base, adapter, int(time.time()))
    table.add(served)
    return served


def unload_request(body: bytes, policy: RuntimeLora, table: AdapterTable) -> ServedAdapter:
    """`POST /v1/unload_lora_adapter`'s work: the name out of the table (requests holding
    it run on to their end)."""
    policy.check()
    name = _text_field(load_json_object(body), "lora_name")
    served = table.remove(name)
    log.info("LoRA adapter %s unloaded", name)
    return served


def done_response(message: str, extra: Headers):
    """vLLM answers these routes with a line of text; we answer the same words as JSON."""
    return replies.json_response(200, {"status": "ok", "message": message}, extra)
