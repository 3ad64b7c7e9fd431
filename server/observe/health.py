"""The health listener's application: liveness, readiness, metrics, the engine view.

`/healthz` fails once the engine thread has died (an orchestrator restarts us); `/readyz`
fails while draining; `/metrics` is the Prometheus text of server/observe/metrics.py, with the
loop's worst stall when serve.py hands over the meter. It stays up during a drain.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from server.door.routes import Params
from server.replies import Headers, json_response
from server.state import ServerState
from server.worker.bridge import EngineBridge
from server.worker.encoder_worker import EncoderWorker
from server.observe.engine_view import EngineView, encoder_document, snapshot_document
from server.errors import ApiError, error_response, kind_response
from server.http.protocol import Request, Response
from server.observe.metrics import CONTENT_TYPE as METRICS_TYPE
from server.observe.metrics import metrics_text
from server.door.request_id import id_header
from server.door.routes import HEALTH_ROUTES, health_ok, resolve
from server.observe.static import ENGINE_PAGE, FAVICON, StaticFiles


class HealthApp:
    """The health listener: liveness, readiness, metrics. Stays up during a drain."""

    def __init__(self, *, bridge: EngineBridge | None, state: ServerState,
                 web: StaticFiles | None = None, view: EngineView | None = None,
                 loop_stall_s: Callable[[], tuple[float, float]] | None = None,
                 encoders: Sequence[EncoderWorker] = (), chat_model: str | None = None):
        self.bridge, self.state = bridge, state  # the chat engine (None: embedding models only)
        self.encoders = tuple(encoders)          # each sentence-embedding model's worker
        self.chat_model = chat_model             # the chat engine's `model` label
        self.view = view                         # the engine view, None when turned off
        self.loop_stall_s = loop_stall_s         # the loop's worst (wall, CPU), if measured
        self.web = web or StaticFiles.load()
        self.handlers = {"healthz": self.healthz, "readyz": self.readyz, "metrics": self.metrics,
                         "engine_page": self.engine_page, "engine_snapshot": self.engine_snapshot,
                         "favicon": lambda *_: self.web.response(FAVICON),
                         "static": lambda _, params, __: self.web.response(params["name"])}

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response:
        extra = id_header(request)            # stamped by the door (StampedApp in serve.py)
        try:
            route, params = resolve(HEALTH_ROUTES, request.method, request.path)
            result = self.handlers[route.handler](request, params, extra)
        except ApiError as err:
            return error_response(err, extra)
        return replace(result, headers=result.headers + extra)

    def healthz(self, request: Request, params: Params, extra: Headers) -> Response:
        """Liveness: fails once the engine thread has died, so an orchestrator restarts us."""
        workers = ([self.bridge] if self.bridge is not None else []) + list(self.encoders)
        for worker in workers:
            if not worker.is_healthy():
                raise ApiError("engine_unavailable", f"The engine thread has stopped: "
                                                     f"{worker.died or 'unknown reason'}.")
        return health_ok(request, params, extra)

    def readyz(self, request: Request, params: Params, extra: Headers) -> Response:
        if self.state.is_draining:
            raise ApiError("not_ready", "The server is draining.")
        return json_response(200, {"status": "ready"})

    def metrics(self, request: Request, params: Params, extra: Headers) -> Response:
        stall_s = self.loop_stall_s() if self.loop_stall_s is not None else None
        stats = self.bridge.stats if self.bridge is not None else None
        text = metrics_text(stats, self.state.metrics, stall_s,
                            encoders=[(w.model_id, w.stats) for w in self.encoders],
                            model=self.chat_model)
        return Response(status=200, headers=(("Content-Type", METRICS_TYPE),),
                        body=text.encode("utf-8"))

    def _view(self) -> EngineView:
        if self.view is None:
            raise ApiError("engine_view_off", "The engine view is turned off on this server "
                                              "([engine].engine_view = false).")
        return self.view

    def engine_page(self, request: Request, params: Params, extra: Headers) -> Response:
        self._view()
        return self.web.response(ENGINE_PAGE)

    def engine_snapshot(self, request: Request, params: Params, extra: Headers) -> Response:
        view = self._view()
        view.asked()
        latest = view.latest               # published by the engine thread, read as one value
        encoders = tuple(encoder_document(w.model_id, w.stats, w.max_batch_tokens)
                         for w in self.encoders)
        return json_response(200, snapshot_document(latest, self.chat_model, encoders),
                             (("Cache-Control", "no-store"),))


