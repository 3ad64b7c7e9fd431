"""What the engine thread tells whoever watches it: the step trace and the engine view.

The worker defines these two small protocols and calls them; the watchers live in
server/observe/ (`TraceWriter`, `EngineView`) and server/serve.py passes them in, so the
engine's side imports nothing of observation. Both are called on the engine thread only.
"""
from __future__ import annotations

from typing import Protocol

from engine.api import Engine, EngineStats, StepRecord, TokenOut


class StepTracer(Protocol):
    """Follows each request through the queue and the steps (server/observe/trace.py)."""

    def queued(self, engine_id: int, request_id: str, now_s: float) -> None: ...

    def step(self, record: StepRecord | None, outs: list[TokenOut], now_s: float) -> None: ...

    def finished(self, engine_id: int, reason: str, now_s: float) -> None: ...

    def close(self, now_s: float | None = None) -> None: ...


class EngineWatcher(Protocol):
    """Takes a picture of the engine after each turn (server/observe/engine_view.py)."""

    def update(self, engine: Engine, stats: EngineStats, stepped: bool) -> None: ...
