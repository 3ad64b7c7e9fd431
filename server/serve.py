"""Start and stop the v1 server: `spawn(cfg)` for tests and embedding, `run(cfg)` for the CLI.

    load model -> Engine -> EngineBridge (engine thread) -> ApiApp + HealthApp
    -> EventLoop (binds both listeners at once, so port 0 resolves before serving)
    -> loop thread (spawn) or main thread (run, with SIGTERM = drain, second = exit)

Shutdown order (chapter 2.6): the loop drains (API listener closed, /readyz 503, new
requests 503, in-flight streams finish up to `drain_timeout_s`), `run()` returns, then the
engine thread stops. `/healthz` answers 200 until the process ends.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from engine.api import Engine, EngineConfig, load_model, model_name, tune_malloc
from server.app import ApiApp, HealthApp, ServedModel, ServerState
from server.bridge import EngineBridge, QueuePolicy
from server.config import ConfigError, ServeConfig
from server.engine_view import EngineView
from server.trace import TraceWriter
from server.http.loop import EventLoop, Listener

log = logging.getLogger("tlserve")

EngineWrapper = Callable[[Engine], Engine]      # tests: inject faults into engine steps


@dataclass
class ServerHandle:
    """A running server. `http_addr` / `health_addr` are "host:port" strings."""
    http_addr: str
    health_addr: str
    loop: EventLoop
    bridge: EngineBridge
    state: ServerState
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
        self.bridge.stop()
        return 0

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


def build(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> ServerHandle:
    """Load, construct and bind everything; nothing is served until the loop runs.
    `wrap_engine` is the tests' fault seam: it may wrap the Engine the bridge drives."""
    tuned = tune_malloc()                # process-wide: numpy's big temporaries stay on the heap
    log.info("malloc tuned for numpy temporaries: %s", "yes" if tuned else "no (not glibc)")
    t0 = time.perf_counter()
    model = load_model(cfg.model_dir)
    log.info("model %s loaded from %s in %.2f s", cfg.model_id, cfg.model_dir,
             time.perf_counter() - t0)
    engine_cfg = cfg.engine
    engine = Engine(model, engine_cfg)
    _log_kv(engine, engine_cfg)
    queue = QueuePolicy(capacity_requests=cfg.queue_capacity, deadline_ms=cfg.queue_deadline_ms,
                        batch_slots=engine_cfg.max_num_seqs)
    bridge = EngineBridge(wrap_engine(engine) if wrap_engine else engine, queue=queue,
                          step_delay_s=cfg.step_delay_s,
                          view=EngineView() if cfg.engine_view else None,
                          tracer=_tracer(cfg))
    state = ServerState()
    served = ServedModel(model, cfg.model_id, engine.max_model_len(),
                         kv_capacity_tokens=engine.kv.num_blocks * engine_cfg.block_size)
    api = ApiApp(served=served, bridge=bridge, state=state, ping_interval_s=cfg.ping_interval_s)
    health = HealthApp(bridge=bridge, state=state)

    def on_drain() -> None:              # the loop logs the drain itself
        state.is_draining = True

    loop = EventLoop([Listener("api", cfg.http_listen, api, True),
                      Listener("health", cfg.health_listen, health, False)],
                     handle_signals=cfg.handle_signals, drain_timeout_s=cfg.drain_timeout_s,
                     on_drain=on_drain)
    bridge.wake = loop.wake
    handle = ServerHandle(http_addr=_address(loop, "api"), health_addr=_address(loop, "health"),
                          loop=loop, bridge=bridge, state=state)
    log.info("listening: API on %s, health on %s", handle.http_addr, handle.health_addr)
    return handle


def _tracer(cfg: ServeConfig) -> TraceWriter | None:
    if not cfg.trace_file:
        return None
    log.info("step trace: writing %s (at most %d MiB)", cfg.trace_file, cfg.trace_max_mib)
    return TraceWriter(cfg.trace_file, cfg.trace_max_mib * 2**20, origin_s=time.monotonic())


def _log_kv(engine: Engine, engine_cfg: EngineConfig) -> None:
    log.info("KV cache: %d blocks of %d tokens, %.1f MiB", engine.kv.num_blocks,
             engine_cfg.block_size, engine.kv.nbytes / 2**20)


def spawn(cfg: ServeConfig, wrap_engine: EngineWrapper | None = None) -> ServerHandle:
    """Start a server on background threads and return once it is listening."""
    handle = build(replace(cfg, handle_signals=False), wrap_engine)
    handle.bridge.start()
    handle.thread = threading.Thread(target=handle.loop.run, name="tl-loop", daemon=True)
    handle.thread.start()
    return handle


def run(cfg: ServeConfig) -> int:
    """Serve on the main thread until SIGTERM/SIGINT drains it; 0 after a clean drain."""
    handle = build(replace(cfg, handle_signals=True))
    handle.bridge.start()
    try:
        handle.loop.run()
    finally:
        handle.bridge.stop()
    log.info("drained; exiting")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tlserve.py",
        description="Serve an OpenAI-compatible v1 API (chat, completions, embeddings, "
                    "tokenize, models) for one model, plus /healthz, /readyz and /metrics "
                    "on a health port. SIGTERM drains; a second SIGTERM exits at once.")
    p.add_argument("--config", metavar="PATH",
                   help="runtime.toml with an [engine] table; TL_ENGINE__<KEY> environment "
                        "variables override its keys")
    p.add_argument("--model-dir", metavar="DIR",
                   help="model directory (HF layout or one .gguf); overrides [engine].model_dir")
    p.add_argument("--port", type=int, metavar="N",
                   help="API port on all interfaces; overrides [engine].http_listen")
    p.add_argument("--health-port", type=int, metavar="N",
                   help="health/metrics port on all interfaces; overrides [engine].health_listen")
    p.add_argument("--trace-file", metavar="PATH",
                   help="write a Chrome trace-event JSON of the engine steps and requests "
                        "(Perfetto, chrome://tracing); overrides [engine].trace_file")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="logging verbosity (default INFO: one line per start-up phase)")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace, env=None) -> ServeConfig:
    import os
    env = os.environ if env is None else env
    cfg = ServeConfig.load(args.config, env) if args.config else ServeConfig.from_toml("", env)
    overrides = {}
    if args.model_dir:
        overrides["model_dir"] = args.model_dir
        if cfg.model_id == model_name(cfg.model_dir):            # derived, not chosen
            overrides["model_id"] = model_name(args.model_dir)
    if args.port is not None:
        overrides["http_listen"] = f":{args.port}"
    if args.health_port is not None:
        overrides["health_listen"] = f":{args.health_port}"
    if args.trace_file:
        overrides["trace_file"] = args.trace_file
    return replace(cfg, **overrides) if overrides else cfg


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        print(f"tlserve: config error: {exc}", file=sys.stderr)
        return 2
    try:
        return run(cfg)
    except OSError as exc:
        print(f"tlserve: cannot start: {exc}", file=sys.stderr)
        return 1
