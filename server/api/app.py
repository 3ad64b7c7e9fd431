"""The OpenAI API application (the health/metrics listener is server/observe/health.py).

`ApiApp.handle(request)` is the thin dispatcher:

    loop thread:   route table (server/api/routes.py) -> draining? -> the row's handler,
                   handed to the off-loop pool when the row says so
    pool thread:   the endpoint parses, checks, prepares and starts its work: one module or
                   package per endpoint family (chat/, completions.py, responses/,
                   messages/ (Anthropic's), embeddings.py, rerank.py (and score),
                   tokenize.py, models.py; generations share server/api/launch.py). A
                   generation is admitted here (client.generate: 429 now if the queue is
                   full) and the handler returns its Stream; a short answer is a whole
                   Response.
    loop thread:   a Stream is the answer as it is (it counts its own status and carries
                   X-Request-Id); a Response or an ApiError is finished here: the status
                   counted, X-Request-Id added, an error as its OpenAI document
                   (Anthropic's on /v1/messages*).

The heavy, pure half of chat, completions, responses, embeddings and tokenize (the rows
marked `off_loop`) runs on a thread of `server/offloop/pool.py`, so the loop never blocks on
a grammar compile or a long history; metrics and sockets stay on the loop thread. Small
routes (models, detokenize, healthz) answer at once. Every response, errors and 404s
included, carries `X-Request-Id` (echoed when the client sent a sane one). Drain (SIGTERM,
server/http/connstate.py) flips `ServerState.is_draining`: new API requests get 503,
`/readyz` 503, `/healthz` stays 200; a request already being prepared is still answered.
A handler's result is matched by type (`Response`, or the declared `Stream` protocol);
anything else is a bug: a logged 500.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import Callable, Mapping

from server.api.adapters import AdapterTable, RuntimeLora
from server.api.generation import DEFAULT_MAX_STOP_STRINGS
from server.api.launch import ApiContext, ChatModel
from server.offloop.pool import Inline, OffLoop, Outcome, outcome_of
from server.api.routes import API_ROUTES, ApiHandler, task_paths
from server.api.streams import StreamContext
from server.api.batch_backend import BatchBackend
from server.door.request_id import id_header
from server.door.routes import LIVENESS, Params, Route, resolve
from server.errors import ApiError, ErrorShape, error_response, kind_response
from server.replies import Headers
from server.state import ServerState
from server.http.protocol import Request, Response, Stream
from server.observe.static import StaticFiles, WebFile
from server.worker.encoder_thread import EncoderThread

__all__ = ["ApiApp"]
log = logging.getLogger("tlserve.app")


class ApiApp:
    """The OpenAI v1 API listener."""

    def __init__(self, *, chats: Mapping[str, ChatModel], state: ServerState,
                 ping_interval_s: float, clock: Callable[[], float] = time.monotonic,
                 web: StaticFiles | None = None, offloop: OffLoop = Inline(),
                 encoders: Mapping[str, EncoderThread] | None = None,
                 max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS,
                 adapters: AdapterTable | None = None, runtime_lora: RuntimeLora = RuntimeLora(),
                 batches: BatchBackend | None = None, fixed_priority: int | None = None):
        """`chats`: every chat model by id (none in a server of embedding models only),
        the first answering where one is needed before a request names its model;
        `batches`: the Batch API's backend (None: its routes answer 404); `fixed_priority`:
        every generation's priority (the batch worker's own application)."""
        self.state = state
        self.offloop = offloop                   # where the off-loop rows are prepared
        self.web = web or StaticFiles.load()
        metrics = state.metrics
        self.stream_ctx = StreamContext(
            ping_interval_s=ping_interval_s, on_status=metrics.count_request,
            on_finish=metrics.observe_generation, offloop=offloop)
        self.ctx = ApiContext(stream_ctx=self.stream_ctx, offloop=offloop,
                              count_request=metrics.count_request, clock=clock,
                              encoders=dict(encoders or {}), chats=dict(chats),
                              max_stop_strings=max_stop_strings, task_paths=task_paths(),
                              adapters=adapters if adapters is not None else AdapterTable(),
                              runtime_lora=runtime_lora,
                              batches=batches, fixed_priority=fixed_priority)

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response | Stream:
        extra = id_header(request)            # the id the front door stamped
        try:
            route, params = resolve(API_ROUTES, request.method, request.path)
        except ApiError as err:
            return self._answer("unmatched", request, extra, Outcome(error=err))
        label = route.name
        if self.state.is_draining and label != LIVENESS:
            refusal = ApiError("shutting_down", "The server is shutting down; retry elsewhere.")
            return self._answer(label, request, extra, Outcome(error=refusal))
        prepare = self._preparation(route, request, params, extra)
        if route.off_loop:      # prepared and started on a pool thread
            return self.offloop.run(prepare, partial(self._answer, label, request, extra))
        return self._answer(label, request, extra, outcome_of(prepare))

    def _preparation(self, route: Route[ApiHandler], request: Request, params: Params,
                     extra: Headers) -> Callable[[], Response | Stream]:
        """The work that prepares the answer of `route` (a page file needs no context)."""
        if isinstance(route.handler, WebFile):
            return partial(self.web.answer, route.handler, params)
        return partial(route.handler, self.ctx, request, params, extra)

    def _answer(self, label: str, request: Request, extra: Headers,
                outcome: Outcome[Response | Stream]) -> Response | Stream:
        """A handler's outcome as the answer, on the loop thread: a Stream as it is, an
        ApiError as its OpenAI error, anything else (a handler's bug) a logged 500; the
        status of a whole Response is counted here (a stream counts its own)."""
        try:
            prepared = outcome.get()
            if isinstance(prepared, Stream):
                return prepared
            if not isinstance(prepared, Response):
                raise TypeError(f"handler {label} returned a {type(prepared).__name__}, "
                                "neither a Response nor a Stream")
        except ApiError as err:
            self._count(label, err.status_in(ErrorShape.for_path(request.path)), err.model)
            return error_response(err, extra, request.path)
        except Exception:                                      # noqa: BLE001
            log.exception("request %s: handler %s failed", request.request_id, label)
            self._count(label, 500, None)
            return error_response(ApiError("internal_error", "Internal server error."), extra,
                                  request.path)
        self._count(label, prepared.status, dict(prepared.notes).get("model"))
        return replace(prepared, headers=prepared.headers + extra)

    def _count(self, label: str, status: int, model: str | None) -> None:
        """The request counter, labelled with the model when it is one this server serves
        (a client's unknown id never becomes a label: the series stay bounded)."""
        served = model if model in self.ctx.model_ids() else ""
        self.state.metrics.count_request(label, status, model=served)
