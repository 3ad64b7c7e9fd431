"""Start and stop the v1 server: `spawn(cfg)` for tests and embedding, `run(cfg)` for the CLI.

    bind both listeners (a taken port fails now, naming the address and its config key)
    -> serve at once: /healthz 200, /readyz and the API 503 + Retry-After (LoadingApp)
    -> load the models (server/loading.py): each chat model -> Engine -> EngineBridge (its
       engine thread); each sentence-embedding model -> Encoder -> EncoderThread (its thread)
    -> ApiApp + HealthApp swapped in
    -> loop thread (spawn: after the load) or main thread (run: during the load, which
       runs on a loader thread; SIGTERM = drain, a second = exit)

A model that is missing or unreadable ends the start-up with ONE line naming the path and
the fetch command (`StartupError`), never a traceback. The start-up log names the config
file, every setting that differs from its default (the API key redacted) and the sampling
defaults in force.

The chat template: `[engine].chat_template` (or `--chat-template FILE`) replaces the model's
own; a file that cannot be read or does not parse ends the start-up with one line naming it.
A model with no template and none given renders with `DEFAULT_TEMPLATE`'s `<|role|>` lines, and the
start-up log warns once, saying how to give one.

Shutdown order (SIGTERM): the loop drains (API listener closed, /readyz 503, new
requests 503, in-flight streams finish up to `drain_timeout_s`), `run()` returns, then the
engine thread stops. `/healthz` answers 200 until the process ends.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from engine.api import model_name, tune_malloc
from server.door.access import AccessLog, open_access_log
from server.api.adapters import RuntimeLora
from server.api.app import ApiApp
from server.api.routes import API_ROUTES
from server.batch.spool import UploadSpool
from server.batch_serving import BatchService, FanOutWake
from server.state import ServerState
from server.door.auth import ApiKeyCheck
from server.worker.bridge import EngineBridge
from server.config import (REASONING_MODES, ConfigError, ServeConfig,
                           settings_changed)
from server.door.cors import CorsPolicy
from server.door.gateway import GatewayApp, LoadingApp, Switch
from server.door.request_id import StampedApp
from server.observe.health import HEALTH_ROUTES, HealthApp
from server.http.connstate import BindError
from server.http.loop import EventLoop, Listener
from server.offloop.pool import OffLoopPool
from server.model_table import (KIND_LORA, ModelTableError, check_unique_ids, lora_option,
                                parse_models)
from server.loading import (NO_TEMPLATE_WARNING, EngineWrapper, LoadedModels, StartupError,
                            fetch_hint, load_models, model_entries)

__all__ = ["NO_TEMPLATE_WARNING", "StartupError", "fetch_hint", "spawn", "run", "main"]
log = logging.getLogger("tlserve")
PACKAGE = "tl-serve"


@dataclass
class ServerHandle:
    """A running server. `http_addr` / `health_addr` are "host:port" strings; `bridge` is
    None until the model has loaded."""
    http_addr: str
    health_addr: str
    loop: EventLoop
    state: ServerState
    api: GatewayApp
    health: Switch
    bridge: EngineBridge | None = None      # the first chat model's engine thread, once loaded
    models: LoadedModels | None = None      # every model's own thread, once loaded
    offloop_pool: OffLoopPool | None = None  # started once the models load
    batch: BatchService | None = None        # the Batch API ([batch].dir), once loaded
    drain_timeout_s: float = 60.0            # how long the batch worker may finish its requests
    thread: threading.Thread | None = None

    def drain(self) -> None:
        """What SIGTERM does: stop taking work, finish in-flight streams, then exit."""
        self.loop.request_drain()

    def stop(self) -> None:
        """Stop at once (a second SIGTERM): streams are cut."""
        self.loop.stop()
        self.join(10.0)

    def join(self, timeout: float | None = None) -> int:
        """Wait for the loop to end; stop the engine thread; 0 on a clean exit."""
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                return 1
        self.stop_threads()
        return 0

    def start_threads(self) -> None:
        """Once loaded: the models' threads, then the batch worker (it resumes at once)."""
        self.models.start()
        if self.batch is not None:
            self.batch.start()

    def stop_threads(self) -> None:
        """After the loop: the batch worker (its requests in flight finished), the
        off-loop pool, then the engine thread."""
        if self.batch is not None:
            self.batch.stop(self.drain_timeout_s)
        if self.offloop_pool is not None:
            self.offloop_pool.stop()
        if self.models is not None:
            self.models.stop()

    @property
    def http_url(self) -> str:
        return f"http://{self.http_addr}"

    @property
    def health_url(self) -> str:
        return f"http://{self.health_addr}"


def _address(loop: EventLoop, name: str) -> str:
    host, port = loop.bound_address(name)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_model_path(cfg: ServeConfig) -> None:
    for entry in model_entries(cfg):
        if entry.kind == KIND_LORA:
            if not Path(entry.adapter_dir).is_dir():
                raise StartupError(f"no LoRA adapter folder at {entry.adapter_dir} "
                                   f"([[models]] {entry.id})")
            continue
        if not Path(entry.model_dir).exists():
            key = "[engine].model_dir" if entry.id == cfg.model_id else f"[[models]] {entry.id}"
            raise StartupError(f"no model at {entry.model_dir} ({key}); "
                               f"fetch it with: {fetch_hint()}")


def bind(cfg: ServeConfig) -> ServerHandle:
    """Bind both listeners and answer in the loading state; the model is not loaded yet."""
    check_model_path(cfg)
    state = ServerState()
    # While loading, the door answers from the route tables of the apps swapped in later.
    api = GatewayApp(LoadingApp(API_ROUTES), auth=ApiKeyCheck(cfg.api_key),
                     cors=CorsPolicy.parse(cfg.cors_allow_origins),
                     access=AccessLog(open_access_log(cfg.access_log)))
    health = Switch(LoadingApp(HEALTH_ROUTES))

    def on_drain() -> None:              # the loop logs the drain itself
        state.is_draining = True

    keys = {cfg.http_listen: "[engine].http_listen", cfg.health_listen: "[engine].health_listen"}
    try:
        loop = EventLoop([Listener("api", cfg.http_listen, api, True,
                                   sinks=_upload_spool(cfg)),
                          Listener("health", cfg.health_listen, StampedApp(health), False)],
                         handle_signals=cfg.handle_signals,
                         drain_timeout_s=cfg.drain_timeout_s, on_drain=on_drain)
    except BindError as exc:
        raise StartupError(f"{exc.strerror} (set by {keys.get(exc.address, 'a listen key')}; "
                           "choose a free port)") from None
    handle = ServerHandle(http_addr=_address(loop, "api"), health_addr=_address(loop, "health"),
                          loop=loop, state=state, api=api, health=health)
    log.info("listening: API on %s, health on %s (loading the model)", handle.http_addr,
             handle.health_addr)
    return handle


def _upload_spool(cfg: ServeConfig) -> UploadSpool | None:
    """Where uploads go as they arrive, when the Batch API is on."""
    if not cfg.batch.is_on:
        return None
    return UploadSpool(Path(cfg.batch.dir) / "spool", auth=ApiKeyCheck(cfg.api_key),
                       max_file_bytes=cfg.batch.max_file_mib * 2**20)


def load(cfg: ServeConfig, handle: ServerHandle, wrap_engine: EngineWrapper | None = None) -> None:
    """Load the models and swap the real applications in; StartupError if one cannot load.
    `wrap_engine` is the tests' fault seam: it may wrap the Engine the bridge drives."""
    tuned = tune_malloc()                # process-wide: numpy's big temporaries stay on the heap
    log.info("malloc tuned for numpy temporaries: %s", "yes" if tuned else "no (not glibc)")
    loaded = load_models(cfg, wrap_engine)
    batch = (BatchService.build(cfg.batch, loaded, ping_interval_s=cfg.ping_interval_s,
                                max_stop_strings=cfg.max_stop_strings)
             if cfg.batch.is_on else None)
    loaded.set_wake(FanOutWake(handle.loop.wake, batch.wake) if batch else handle.loop.wake)
    pool = OffLoopPool(wake=handle.loop.wake)      # the heavy, pure half of requests
    handle.models, handle.bridge, handle.offloop_pool = loaded, loaded.bridge, pool
    handle.batch, handle.drain_timeout_s = batch, cfg.drain_timeout_s
    pool.start()
    handle.api.inner = ApiApp(chats=loaded.chats, state=handle.state,
                              ping_interval_s=cfg.ping_interval_s, offloop=pool,
                              encoders=loaded.encoders, max_stop_strings=cfg.max_stop_strings,
                              adapters=loaded.adapters,
                              runtime_lora=RuntimeLora(cfg.allow_runtime_lora, bool(cfg.api_key),
                                                       cfg.lora_root),
                              batches=batch.backend if batch else None)
    loop = handle.loop
    handle.health.current = HealthApp(
        engines={model_id: chat.bridge for model_id, chat in loaded.chats.items()},
        views=loaded.views, engine_view=cfg.engine_view, state=handle.state,
        loop_stall_s=lambda: (loop.stall.max_s, loop.stall.max_cpu_s),
        encoders=list(loaded.encoders.values()),
        batch_reading=batch.reading if batch else None)


def build(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> ServerHandle:
    """Bind, then load: everything constructed; nothing is served until the loop runs."""
    handle = bind(cfg)
    load(cfg, handle, wrap_engine)
    return handle


def log_settings(cfg: ServeConfig) -> None:
    log.info("tl-serve %s; config file: %s", version(), cfg.config_path or "(none)")
    for line in settings_changed(cfg):
        log.info("setting %s", line)


def spawn(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> ServerHandle:
    """Start a server on background threads and return once the model is loaded."""
    cfg = replace(cfg, handle_signals=False)
    handle = bind(cfg)
    try:
        load(cfg, handle, wrap_engine)
    except BaseException:
        handle.loop.stop()
        handle.loop.run()                       # closes the listeners
        raise
    handle.start_threads()
    handle.thread = threading.Thread(target=handle.loop.run, name="tl-loop", daemon=True)
    handle.thread.start()
    return handle


def run(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> int:
    """Serve on the main thread until SIGTERM/SIGINT drains it; 0 after a clean drain.

    The model loads on a loader thread while the loop already answers (health 200,
    readiness 503); a load that fails stops the loop and raises its StartupError here."""
    cfg = replace(cfg, handle_signals=True)
    check_model_path(cfg)                       # one line, before any other
    log_settings(cfg)
    handle = bind(cfg)
    failure: list[StartupError] = []

    def loader() -> None:
        try:
            load(cfg, handle, wrap_engine)
            handle.start_threads()
            log.info("ready: API on %s, health on %s", handle.http_addr, handle.health_addr)
        except StartupError as exc:
            failure.append(exc)
            handle.loop.stop()
        except BaseException:                   # a bug: its traceback, then stop
            log.exception("start-up failed")
            failure.append(StartupError("start-up failed (traceback above)"))
            handle.loop.stop()

    thread = threading.Thread(target=loader, name="tl-loader", daemon=True)
    thread.start()
    try:
        handle.loop.run()
    finally:
        thread.join()
        handle.stop_threads()
    if failure:
        raise failure[0]
    log.info("drained; exiting")
    return 0


def version() -> str:
    from importlib import metadata
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tlserve",
        description="Serve an OpenAI-compatible v1 API (chat, completions, embeddings, "
                    "tokenize, models) for its models ([[models]]), plus /healthz, /readyz and /metrics "
                    "on a health port. SIGTERM drains; a second SIGTERM exits at once.")
    p.add_argument("--version", action="version", version=f"tl-serve {version()}")
    p.add_argument("--config", metavar="PATH",
                   help="runtime.toml with [engine] and [defaults] tables; TL_ENGINE__<KEY> "
                        "and TL_DEFAULTS__<KEY> environment variables override its keys")
    p.add_argument("--model-dir", metavar="DIR",
                   help="model directory (HF layout or one .gguf); overrides [engine].model_dir")
    p.add_argument("--port", type=int, metavar="N",
                   help="API port, on the host of [engine].http_listen (default loopback)")
    p.add_argument("--health-port", type=int, metavar="N",
                   help="health/metrics port, on the host of [engine].health_listen")
    p.add_argument("--trace-file", metavar="PATH",
                   help="write a Chrome trace-event JSON of the engine steps and requests "
                        "(Perfetto, chrome://tracing); overrides [engine].trace_file")
    p.add_argument("--chat-template", metavar="FILE",
                   help="a Jinja chat template that replaces the model's own (or gives one to a "
                        "model without); overrides [engine].chat_template")
    p.add_argument("--reasoning", choices=REASONING_MODES,
                   help="auto: a thinking template's reasoning kept apart (reasoning_content); "
                        "off: answers as generated; overrides [engine].reasoning")
    p.add_argument("--lora", action="append", default=[], metavar="NAME=DIR",
                   help="serve the PEFT LoRA adapter in DIR as model NAME on the first chat "
                        "model (repeatable; as a [[models]] table with kind = \"lora\")")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="logging verbosity (default INFO: one line per start-up phase)")
    return p.parse_args(argv)


def _with_port(address: str, port: int) -> str:
    host = address.rpartition(":")[0]
    return f"{host}:{port}"


def config_from_args(args: argparse.Namespace, env=None) -> ServeConfig:
    env = os.environ if env is None else env
    cfg = ServeConfig.load(args.config, env) if args.config else ServeConfig.from_toml("", env)
    overrides = {}
    if args.model_dir:
        overrides["model_dir"] = args.model_dir
        if cfg.model_id == model_name(cfg.model_dir):            # derived, not chosen
            overrides["model_id"] = model_name(args.model_dir)
    if args.port is not None:
        overrides["http_listen"] = _with_port(cfg.http_listen, args.port)
    if args.health_port is not None:
        overrides["health_listen"] = _with_port(cfg.health_listen, args.health_port)
    if args.trace_file:
        overrides["trace_file"] = args.trace_file
    if args.chat_template:
        overrides["chat_template"] = args.chat_template
    if args.reasoning:
        overrides["reasoning"] = args.reasoning
    cfg = replace(cfg, **overrides) if overrides else cfg
    return _with_loras(cfg, args.lora) if args.lora else cfg


def _with_loras(cfg: ServeConfig, options: list[str]) -> ServeConfig:
    """`--lora NAME=DIR` options as `[[models]]` tables on the first chat model."""
    try:
        tables = [{**lora_option(text), "base": cfg.model_id} for text in options]
        entries = parse_models(tables, lambda where, key, value: value, None, source="--lora")
        check_unique_ids(cfg.model_id, cfg.models + entries)
    except ModelTableError as exc:
        raise ConfigError(str(exc)) from None
    return replace(cfg, models=cfg.models + entries)


def main(argv: list[str], wrap_engine: EngineWrapper | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        print(f"tlserve: config error: {exc}", file=sys.stderr)
        return 2
    try:
        return run(cfg, wrap_engine)
    except StartupError as exc:
        print(f"tlserve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tlserve: cannot start: {exc}", file=sys.stderr)
        return 1
