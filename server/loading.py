"""Load the served models and build their threads: what `serve.load` assembles the apps from.

Each model is one `ModelEntry` (its id, its folder or file, its kind): a chat model
becomes an `Engine` behind its own `EngineBridge` (its engine thread) with its text layer
(`ServedModel`) and sampling defaults -- a `ChatModel` --, a sentence-embedding model an
`Encoder` behind an `EncoderThread`. Any number of each, ids unique (config.py). Every
model's thread shares one `ComputeTurn` (server/worker/compute_turn.py): the CPU is handed
to one chat step or one encoder batch at a time, first come first served. The kind is read from the folder
(`engine.api.model_kind`) unless the configuration names it. A LoRA adapter (kind "lora")
is no engine of its own: it is read for its base's model (which must be a chat model served
here) into the `AdapterTable` the API picks it from by name.

Every failure is a `StartupError`: one line naming the path (and the fetch command where
fetching would help), never a traceback.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from engine.api import (KIND_CHAT, Engine, KvSize, ModelFormatError, UnsupportedModel,
                        load_encoder, load_model, model_kind)
from server.api import defaults as sampling
from server.api.adapters import AdapterTable, ServedAdapter, read_adapter
from server.api.launch import ChatModel
from server.config import ENGINE_FIELDS, REASONING_OFF, ServeConfig
from server.model_table import KIND_LORA, ModelEntry
from server.observe.engine_view import EngineView
from server.observe.trace import TraceWriter
from server.text.served import ServedModel, TemplateFileError, read_chat_template
from server.worker.admission import QueuePolicy
from server.worker.arrivals import ArrivalWindow
from server.worker.bridge import EngineBridge
from server.worker.compute_turn import ComputeTurn
from server.worker.encoder_thread import EncoderThread

log = logging.getLogger("tlserve")
EngineWrapper = Callable[[Engine], Engine]      # tests: inject faults into engine steps
NO_TEMPLATE_WARNING = ("model %s ships no chat template: chats render with the plain default "
                       "(<|role|> lines); give one with chat_template = \"path\" in runtime.toml "
                       "([engine]) or --chat-template FILE")


class StartupError(Exception):
    """The server cannot start; the message is the one line to print."""


@dataclass
class LoadedModels:
    """Every served model and its own thread, by id in configuration order."""
    chats: dict[str, ChatModel] = field(default_factory=dict)          # id -> chat model
    views: dict[str, EngineView] = field(default_factory=dict)        # id -> its engine view
    encoders: dict[str, EncoderThread] = field(default_factory=dict)   # id -> its thread
    adapters: AdapterTable = field(default_factory=AdapterTable)       # LoRA adapters by name

    @property
    def bridge(self) -> EngineBridge | None:
        """The first chat model's engine thread (None: embedding models only)."""
        return next(iter(self.chats.values())).bridge if self.chats else None

    def set_wake(self, wake: Callable[[], None]) -> None:
        for owner in self.model_threads():
            owner.wake = wake

    def model_threads(self) -> list[EngineBridge | EncoderThread]:
        """What owns each model's thread: a chat model's bridge, an encoder's thread."""
        return [chat.bridge for chat in self.chats.values()] + list(self.encoders.values())

    def start(self) -> None:
        for owner in self.model_threads():
            owner.start()

    def stop(self) -> None:
        for owner in self.model_threads():
            owner.stop()


def fetch_hint() -> str:
    """The command that fetches the default model, as this process was started."""
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "tlserve"
    prefix = "python tlserve.py" if script == "tlserve.py" else "tlserve"
    return f"{prefix} fetch-model (or {prefix} fetch-model --user; or pass --model-dir DIR)"


def model_entries(cfg: ServeConfig) -> tuple[ModelEntry, ...]:
    """Every model to serve: `[engine].model_dir`'s first, then `[[models]]`'s."""
    return (ModelEntry(id=cfg.model_id, model_dir=cfg.model_dir),) + cfg.models


def model_config(cfg: ServeConfig, entry: ModelEntry) -> ServeConfig:
    """`cfg` as one model sees it: its folder and id, its own settings over `[engine]`'s."""
    own = dict(entry.settings)
    engine = {k: v for k, v in own.items() if k in ENGINE_FIELDS}
    serve = {k: v for k, v in own.items() if k not in ENGINE_FIELDS}
    return replace(cfg, model_dir=entry.model_dir, model_id=entry.id, models=(),
                   engine=replace(cfg.engine, **engine), **serve)


def load_models(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> LoadedModels:
    """Every configured model, as a chat engine or an encoder by its kind, all on one
    compute turn (each chat model its own engine thread, each encoder its own thread)."""
    turn = ComputeTurn()                        # one per process: see the module docstring
    loaded = LoadedModels()
    entries = model_entries(cfg)
    for entry in entries:
        if entry.kind == KIND_LORA:
            continue                            # after every base is loaded
        own = model_config(cfg, entry)
        if _kind(entry) == KIND_CHAT:
            _add_chat(own, loaded, turn, wrap_engine)
        else:
            loaded.encoders[entry.id] = _encoder_thread(own, entry, turn)
    for entry in entries:
        if entry.kind == KIND_LORA:
            loaded.adapters.add(_served_adapter(entry, loaded))
    return loaded


def _served_adapter(entry: ModelEntry, loaded: LoadedModels) -> ServedAdapter:
    """A `kind = "lora"` table's adapter, read for its base's model."""
    base = loaded.chats.get(entry.base)
    if base is None:
        raise StartupError(f"LoRA adapter {entry.id}: base = \"{entry.base}\" is not a chat "
                           f"model served here (chat models: {', '.join(loaded.chats) or 'none'})")
    try:
        adapter = read_adapter(entry.adapter_dir, entry.id, base.served.model.config, entry.scale)
    except (ModelFormatError, OSError) as exc:
        why = exc.problem if isinstance(exc, ModelFormatError) else (exc.strerror or str(exc))
        raise StartupError(f"cannot serve the LoRA adapter {entry.id} at {entry.adapter_dir}: "
                           f"{why}") from None
    return ServedAdapter(entry.id, entry.base, adapter, int(time.time()))


def _add_chat(cfg: ServeConfig, loaded: LoadedModels, turn: ComputeTurn,
              wrap_engine: EngineWrapper | None) -> None:
    """One more chat model (`cfg` as it sees it): its engine view, and the step trace
    when it is the first (one file, one writer)."""
    view = EngineView() if cfg.engine_view else None
    if view is not None:
        loaded.views[cfg.model_id] = view
    if loaded.chats and cfg.trace_file:
        log.info("step trace: %s's engine is not traced (the first chat model's is)",
                 cfg.model_id)
        cfg = replace(cfg, trace_file="")
    loaded.chats[cfg.model_id] = _load_chat(cfg, view, turn, wrap_engine)


def _kind(entry: ModelEntry) -> str:
    """The folder's kind; a configured `kind` must agree with it."""
    try:
        found = model_kind(entry.model_dir)
    except (ModelFormatError, OSError) as exc:
        raise StartupError(_cannot_load(entry.model_dir, exc)) from None
    if entry.kind and entry.kind != found:
        raise StartupError(f"model {entry.id}: kind = \"{entry.kind}\" but {entry.model_dir} "
                           f"holds a {found} model")
    return found


def _cannot_load(path: str, exc: Exception) -> str:
    if isinstance(exc, UnsupportedModel):       # present and well formed: fetching will not help
        return f"cannot serve the model {exc.path}: {exc.problem}"
    why = exc.problem if isinstance(exc, ModelFormatError) else (exc.strerror or str(exc))
    return f"cannot load the model at {path}: {why}; fetch it with: {fetch_hint()}"


def _encoder_thread(cfg: ServeConfig, entry: ModelEntry, turn: ComputeTurn) -> EncoderThread:
    path, model_id = entry.model_dir, entry.id
    t0 = time.perf_counter()
    try:
        encoder = load_encoder(path)
    except (ModelFormatError, OSError) as exc:
        raise StartupError(_cannot_load(path, exc)) from None
    log.info("embedding model %s loaded from %s in %.2f s (max_seq_length %d, %d dimensions)",
             model_id, path, time.perf_counter() - t0, encoder.max_seq_length,
             encoder.hidden_size)
    queue = QueuePolicy(capacity_requests=cfg.queue_capacity, deadline_ms=cfg.queue_deadline_ms)
    return EncoderThread(encoder, model_id=model_id, queue=queue, turn=turn,
                         max_batch_tokens=entry.max_batch_tokens)


def _load_chat(cfg: ServeConfig, view: EngineView | None, turn: ComputeTurn,
               wrap_engine: EngineWrapper | None) -> ChatModel:
    try:
        given_template = read_chat_template(cfg.chat_template) if cfg.chat_template else None
    except TemplateFileError as exc:
        raise StartupError(str(exc)) from None
    t0 = time.perf_counter()
    try:
        model = load_model(cfg.model_dir)
    except (ModelFormatError, OSError) as exc:
        raise StartupError(_cannot_load(cfg.model_dir, exc)) from None
    log.info("model %s loaded from %s in %.2f s", cfg.model_id, cfg.model_dir,
             time.perf_counter() - t0)
    _log_chat_template(cfg, model.chat_template, given_template)
    defaults = sampling.resolve(cfg.model_dir, dict(cfg.default_overrides))
    log.info("sampling defaults: %s (model %s)", defaults.changed() or "OpenAI's (none set)",
             cfg.model_id)
    engine_cfg = cfg.engine
    engine = Engine(model, engine_cfg)
    _log_kv(engine.kv_size())
    queue = QueuePolicy(capacity_requests=cfg.queue_capacity, deadline_ms=cfg.queue_deadline_ms,
                        batch_slots=engine_cfg.max_num_seqs)
    bridge = EngineBridge(wrap_engine(engine) if wrap_engine else engine, queue=queue,
                          arrivals=ArrivalWindow(cfg.arrival_window_ms),
                          view=view, tracer=_tracer(cfg), turn=turn,
                          kv_size=engine.kv_size())
    try:                                 # the model's own template is parsed here
        served = ServedModel(model, cfg.model_id, engine.max_model_len(),
                                    kv_capacity_tokens=engine.kv_size().capacity_tokens,
                                    chat_template=given_template,
                                    reasoning=cfg.reasoning != REASONING_OFF)
    except ModelFormatError as exc:
        raise StartupError(f"cannot serve the model {exc.path}: {exc.problem}; give a working "
                           "template with --chat-template FILE ([engine].chat_template)") from None
    if served.thinks:
        log.info("chat template of %s thinks: reasoning kept apart as reasoning_content "
                 "([engine].reasoning)", cfg.model_id)
    return ChatModel(served, bridge, defaults)


def _log_chat_template(cfg: ServeConfig, model_template: str | None, given: str | None) -> None:
    if given is not None:
        log.info("chat template: %s (replaces the model's own)", cfg.chat_template)
    elif not (model_template and model_template.strip()):
        log.warning(NO_TEMPLATE_WARNING, cfg.model_id)


def _tracer(cfg: ServeConfig) -> TraceWriter | None:
    if not cfg.trace_file:
        return None
    log.info("step trace: writing %s (at most %d MiB)", cfg.trace_file, cfg.trace_max_mib)
    return TraceWriter(cfg.trace_file, cfg.trace_max_mib * 2**20, origin_s=time.monotonic())


def _log_kv(kv: KvSize) -> None:
    log.info("KV cache: %d blocks of %d tokens, %.1f MiB", kv.num_blocks,
             kv.block_size_tokens, kv.nbytes / 2**20)
