"""The health listener's application: liveness, readiness, metrics, the engine view.

`/healthz` (also as `/health`, the name vLLM and llm-d probe) fails once any model's engine
thread has died (an orchestrator restarts us); `/readyz` fails while draining or while any
model's thread is down (it is swapped in once every model has loaded, so it is ready when
every model is); `/metrics` is the Prometheus text of server/observe/metrics.py, every
engine's samples labelled with its model (and their `vllm:*` twins, with the KV cache's
size the bridge knows), with the loop's worst stall when serve.py hands over the meter.
`/engine/snapshot?model=ID` is one chat engine's picture (default: the first chat model's),
listing every engine's id in `engines`. It stays up during a drain.

`HEALTH_ROUTES`, at the end, is the listener's route table: each row a path, its method,
its name and the `HealthApp` method (or page file) that answers it; serve.py hands the same
table to the door's `LoadingApp` while the models load.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence, Union
from urllib.parse import parse_qs

from server.replies import Headers, json_response
from server.state import ServerState
from server.worker.bridge import EngineBridge
from server.worker.encoder_thread import EncoderThread
from server.observe.engine_view import EngineView, encoder_document, snapshot_document
from server.errors import ApiError, error_response, kind_response
from server.http.protocol import Request, Response
from server.observe.metrics import CONTENT_TYPE as METRICS_TYPE
from server.observe.metrics import BatchReading, batch_metrics_text, metrics_text
from server.observe.vllm_metrics import EngineReading
from server.door.request_id import id_header
from server.door.routes import LIVENESS, Params, Route, health_ok, resolve
from server.observe.static import ENGINE_PAGE, FAVICON, StaticFiles, WebFile


class HealthApp:
    """The health listener: liveness, readiness, metrics. Stays up during a drain."""

    def __init__(self, *, state: ServerState, engines: Mapping[str, EngineBridge] | None = None,
                 views: Mapping[str, EngineView] | None = None, engine_view: bool = True,
                 web: StaticFiles | None = None,
                 loop_stall_s: Callable[[], tuple[float, float]] | None = None,
                 encoders: Sequence[EncoderThread] = (),
                 batch_reading: Callable[[], BatchReading] | None = None):
        self.state = state
        self.batch_reading = batch_reading       # the Batch API's numbers, when it is on
        self.engines = dict(engines or {})       # chat model id -> its engine thread
        self.views = dict(views or {})           # chat model id -> its engine view
        self.engine_view = engine_view           # False: /engine and its JSON are 404
        self.encoders = tuple(encoders)          # each sentence-embedding model's thread
        self.loop_stall_s = loop_stall_s         # the loop's worst (wall, CPU), if measured
        self.web = web or StaticFiles.load()

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response:
        extra = id_header(request)            # stamped by the door (StampedApp in serve.py)
        try:
            route, params = resolve(HEALTH_ROUTES, request.method, request.path)
            if isinstance(route.handler, WebFile):
                result = self.web.answer(route.handler, params)
            else:
                result = route.handler(self, request, params, extra)
        except ApiError as err:
            return error_response(err, extra)
        return replace(result, headers=result.headers + extra)

    def healthz(self, request: Request, params: Params, extra: Headers) -> Response:
        """Liveness: fails once the engine thread has died, so an orchestrator restarts us."""
        self._check_model_threads("engine_unavailable")
        return health_ok()

    def readyz(self, request: Request, params: Params, extra: Headers) -> Response:
        if self.state.is_draining:
            raise ApiError("not_ready", "The server is draining.")
        self._check_model_threads("not_ready")
        return json_response(200, {"status": "ready"})

    def _check_model_threads(self, kind: str) -> None:
        """`kind` (naming the model) when any model's own thread has stopped."""
        owners = list(self.engines.items()) + [(e.model_id, e) for e in self.encoders]
        for model_id, owner in owners:
            if not owner.is_healthy():
                raise ApiError(kind, f"The engine thread of model {model_id} has stopped: "
                                     f"{owner.died or 'unknown reason'}.")

    def metrics(self, request: Request, params: Params, extra: Headers) -> Response:
        stall_s = self.loop_stall_s() if self.loop_stall_s is not None else None
        text = metrics_text(None, self.state.metrics, stall_s,
                            encoders=[(e.model_id, e.stats) for e in self.encoders],
                            engines=[EngineReading(m, b.stats, b.kv_size)
                                     for m, b in self.engines.items()])
        if self.batch_reading is not None:
            text += batch_metrics_text(self.batch_reading())
        return Response(status=200, headers=(("Content-Type", METRICS_TYPE),),
                        body=text.encode("utf-8"))

    def _view_on(self) -> None:
        if not self.engine_view:
            raise ApiError("engine_view_off", "The engine view is turned off on this server "
                                              "([engine].engine_view = false).")

    def engine_page(self, request: Request, params: Params, extra: Headers) -> Response:
        self._view_on()
        return self.web.response(ENGINE_PAGE)

    def engine_snapshot(self, request: Request, params: Params, extra: Headers) -> Response:
        """One chat engine's picture (`?model=ID`, default the first chat model's), every
        encoder's part and every chat engine's id (`engines`: the page's choice)."""
        self._view_on()
        model = parse_qs(request.query).get("model", [next(iter(self.views), None)])[0]
        if model is not None and model not in self.views:
            raise ApiError("model_not_found", f"No chat engine serves '{model}'; the engines "
                                              f"are {', '.join(self.views) or 'none'}.",
                           param="model")
        latest = None
        if model is not None:
            view = self.views[model]
            view.asked()
            latest = view.latest           # published by the engine thread, read as one value
        encoders = tuple(encoder_document(w.model_id, w.stats, w.max_batch_tokens)
                         for w in self.encoders)
        return json_response(200, snapshot_document(latest, model, encoders, tuple(self.views)),
                             (("Cache-Control", "no-store"),))


HealthHandler = Union[Callable[[HealthApp, Request, Params, Headers], Response], WebFile]

HEALTH_ROUTES: tuple[Route[HealthHandler], ...] = (
    Route("GET", "/healthz", LIVENESS, HealthApp.healthz),
    Route("GET", "/health", LIVENESS, HealthApp.healthz),  # the name vLLM and llm-d probe
    Route("GET", "/readyz", "readyz", HealthApp.readyz),
    Route("GET", "/metrics", "metrics", HealthApp.metrics),
    Route("GET", "/engine", "engine_page", HealthApp.engine_page),     # the engine view
    Route("GET", "/engine/snapshot", "engine_snapshot", HealthApp.engine_snapshot),
    Route("GET", "/static/{name}", "static", WebFile(param="name")),
    Route("GET", "/favicon.ico", "favicon", WebFile(FAVICON)),
)
