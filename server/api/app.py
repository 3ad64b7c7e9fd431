"""The OpenAI API application (the health/metrics listener is server/observe/health.py).

`ApiApp.handle(request)` is the thin dispatcher: it answers an API request in two halves.

    loop thread:   route table -> draining? -> hand the endpoint's handler to the off-loop pool
    pool thread:   the endpoint parses, checks and prepares: a `Launch` (or a whole Response,
                   e.g. /tokenize). One module or package per endpoint family:
                   chat/, completions.py, responses/, embeddings.py, rerank.py (and
                   score), tokenize.py, models.py
                   (generations share server/api/launch.py)
    loop thread:   launch: bridge.submit (admission: 429 now if the queue is full)
                   -> GenerationStream; count the status, add X-Request-Id

The heavy, pure half of chat, completions, responses, embeddings and tokenize
(`OFFLOOP_ROUTES`) runs on a thread of `server/offloop/pool.py` (the one seam), so the loop
never blocks on a grammar compile or a long history; admission, metrics and tickets stay
on the loop thread. Small routes (models, detokenize, healthz) answer at once. Every
response, errors and 404s included, carries `X-Request-Id` (echoed when the client sent a
sane one). Drain (SIGTERM, server/http/connstate.py) flips `ServerState.is_draining`: new API requests get 503,
`/readyz` 503, `/healthz` stays 200; a request already being prepared is still answered.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import Callable, Mapping

from server.api.chat import chat
from server.api.completions import completions
from server.api.defaults import SamplingDefaults
from server.api.generation import DEFAULT_MAX_STOP_STRINGS
from server.replies import json_response
from server.api.embeddings import embeddings
from server.api.launch import ApiContext, ChatModel
from server.api.models import model, models
from server.offloop.pool import Inline, OffLoop, Outcome, outcome_of
from server.api.rerank import rerank, score
from server.api.responses import responses
from server.api.streams import StreamContext
from server.api.tokenize import detokenize, tokenize
from server.door.request_id import id_header
from server.door.routes import API_ROUTES, Params, health_ok, resolve
from server.errors import ApiError, error_response, kind_response
from server.replies import Headers
from server.state import ServerState
from server.http.protocol import Request, Response, Stream
from server.observe.static import CHAT_PAGE, FAVICON, StaticFiles
from server.text.served import ServedModel
from server.worker.bridge import EngineBridge
from server.worker.encoder_thread import EncoderThread

__all__ = ["ApiApp", "OFFLOOP_ROUTES"]
log = logging.getLogger("tlserve.app")


# The routes whose handler is the heavy, pure half, run off the loop (server/offloop/pool.py):
# it returns a `Launch` for the loop thread, or a whole Response.
OFFLOOP_ROUTES = frozenset({"chat", "completions", "responses", "embeddings", "tokenize",
                            "rerank", "score"})




class ApiApp:
    """The OpenAI v1 API listener."""

    def __init__(self, *, served: ServedModel | None = None, bridge: EngineBridge | None = None,
                 state: ServerState, ping_interval_s: float,
                 clock: Callable[[], float] = time.monotonic, web: StaticFiles | None = None,
                 defaults: SamplingDefaults = SamplingDefaults(), offloop: OffLoop = Inline(),
                 encoders: Mapping[str, EncoderThread] | None = None,
                 chats: Mapping[str, ChatModel] | None = None,
                 max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS):
        """`chats`: every chat model by id, the first answering where one is needed before
        a request names its model; or one chat model as `served`, `bridge`, `defaults`."""
        if chats is None:
            chats = {served.id: ChatModel(served, bridge, defaults)} if served is not None else {}
        first = next(iter(chats.values()), None)
        self.served = first.served if first else None      # the first chat model's
        self.bridge = first.bridge if first else None
        self.state = state
        self.offloop = offloop                   # where OFFLOOP_ROUTES are prepared
        self.web = web or StaticFiles.load()
        metrics = state.metrics
        self.stream_ctx = StreamContext(
            bridge=self.bridge, tokenizer=self.served.tokenizer if first else None,
            ping_interval_s=ping_interval_s,
            on_status=metrics.count_request,
            on_finish=metrics.observe_generation, offloop=offloop)
        self.ctx = ApiContext(served=self.served,
                              defaults=first.defaults if first else defaults,
                              bridge=self.bridge,
                              stream_ctx=self.stream_ctx, offloop=offloop,
                              count_request=metrics.count_request, clock=clock,
                              encoders=dict(encoders or {}), chats=dict(chats),
                              max_stop_strings=max_stop_strings)
        endpoints = {"chat": chat, "completions": completions, "responses": responses,
                     "embeddings": embeddings, "tokenize": tokenize, "detokenize": detokenize,
                     "models": models, "model": model, "rerank": rerank, "score": score}
        self.handlers = {label: partial(handler, self.ctx) for label, handler in endpoints.items()}
        self.handlers.update({
            "healthz": health_ok,
            "page": lambda *_: self.web.response(CHAT_PAGE),
            "favicon": lambda *_: self.web.response(FAVICON),
            "static": lambda _, params, __: self.web.response(params["name"])})

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response | Stream:
        extra = id_header(request)            # the id the front door stamped
        try:
            route, params = resolve(API_ROUTES, request.method, request.path)
        except ApiError as err:
            return self._answer("unmatched", request, extra, Outcome(error=err))
        label = route.handler
        if self.state.is_draining and label != "healthz":
            refusal = ApiError("shutting_down", "The server is shutting down; retry elsewhere.")
            return self._answer(label, request, extra, Outcome(error=refusal))
        handler = partial(self.handlers[label], request, params, extra)
        if label in OFFLOOP_ROUTES:     # prepared on a pool thread; launched back on the loop
            return self.offloop.run(handler, partial(self._answer, label, request, extra))
        return self._answer(label, request, extra, outcome_of(handler))

    def _answer(self, label: str, request: Request, extra: Headers,
                outcome: Outcome) -> Response | Stream:
        """A handler's outcome as the answer, on the loop thread: a `Launch` is launched
        (admission), an ApiError becomes its OpenAI error, anything else a logged 500; the
        status of a whole Response is counted here (a stream counts its own)."""
        try:
            result = outcome.get()
            if not isinstance(result, Response) and callable(result):
                result = result()                   # a Launch: tickets, on this thread
        except ApiError as err:
            self._count(label, err.status, err.model)
            return error_response(err, extra)
        except Exception:                                      # noqa: BLE001
            log.exception("request %s: handler %s failed", request.request_id, label)
            self._count(label, 500, None)
            return error_response(ApiError("internal_error", "Internal server error."), extra)
        if isinstance(result, Response):
            self._count(label, result.status, dict(result.notes).get("model"))
            return replace(result, headers=result.headers + extra)
        return result

    def _count(self, label: str, status: int, model: str | None) -> None:
        """The request counter, labelled with the model when it is one this server serves
        (a client's unknown id never becomes a label: the series stay bounded)."""
        served = model if model in self.ctx.model_ids() else ""
        self.state.metrics.count_request(label, status, model=served)
