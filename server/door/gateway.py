"""What stands in front of the API application: request id, CORS, the API key, the access log,
loading.

    request -> request id stamped (door/request_id.py) -> CORS preflight? (204)
            -> API key for /v1/*? (401) -> inner app
            -> Response: + CORS headers, one access line
            -> Stream:   wrapped in access.LoggedStream (CORS headers on its head, one line
                         when it ends)

One place for every route: a new handler behind `/v1/...` is covered without a line here.
The inner app is `LoadingApp` while the model loads (the listeners are bound before the
load, so a taken port fails at once), then `server.serve` swaps in the real `ApiApp`; the
health listener gets the same treatment through `Switch`. While loading: `/healthz` 200,
everything else that exists 503 `model_loading` with `Retry-After`, read from the route
table of the app that will answer (the door keeps no list of paths of its own).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Sequence

from server.door.access import AccessLog, LoggedStream
from server.door.auth import ApiKeyCheck
from server.door.cors import CorsPolicy
from server.door.request_id import id_header, stamped
from server.door.routes import LIVENESS, Route, health_ok, resolve
from server.errors import ApiError, error_response, kind_response
from server.http.protocol import App, Request, Response, Stream

log = logging.getLogger("tlserve.app")

LOADING_RETRY_AFTER_S = 5            # a client asking during the load tries again this late


class LoadingApp:
    """The answers of a listener whose model is still loading, from its app's route table
    (serve.py hands it in): the paths and methods only, never a handler."""

    def __init__(self, routes: Sequence[Route]):
        self.routes = routes

    error = staticmethod(kind_response)

    def handle(self, request: Request) -> Response:
        extra = id_header(request)
        try:
            route, _ = resolve(self.routes, request.method, request.path)
            if route.name == LIVENESS:
                result = health_ok()
                return replace(result, headers=result.headers + extra)
            raise ApiError("model_loading", "The model is still loading; retry shortly.",
                           headers=(("Retry-After", str(LOADING_RETRY_AFTER_S)),))
        except ApiError as err:
            return error_response(err, extra, request.path)


class Switch:
    """An App whose target is replaced once, when the model has loaded (loader thread writes
    one attribute; the loop thread reads it: an atomic reference swap)."""

    def __init__(self, current: App):
        self.current = current

    def handle(self, request: Request) -> Response | Stream:
        return self.current.handle(request)

    def error(self, kind: str, message: str, path: str = "") -> Response:
        return self.current.error(kind, message, path)


class GatewayApp:
    """The API listener's App: CORS, the key, the access log around `inner`."""

    def __init__(self, inner: App, *, auth: ApiKeyCheck = ApiKeyCheck(""),
                 cors: CorsPolicy = CorsPolicy(), access: AccessLog = AccessLog(None)):
        self.inner, self.auth, self.cors, self.access = inner, auth, cors, access

    error = staticmethod(kind_response)

    def handle(self, request: Request) -> Response | Stream:
        request = stamped(request)              # the one id, from here to the access line
        entry = self.access.begin(request)
        preflight = self.cors.preflight(request)
        if preflight is not None:               # complete with its own CORS headers
            result = replace(preflight, headers=preflight.headers + id_header(request))
            self.access.response(entry, result)
            return result
        cors_headers = self.cors.headers(request)
        result = self._answer(request)
        if isinstance(result, Response):
            if cors_headers:
                result = replace(result, headers=result.headers + cors_headers)
            self.access.response(entry, result)
            return result
        return LoggedStream(result, entry, self.access, cors_headers)

    def _answer(self, request: Request) -> Response | Stream:
        refusal = self.auth.refusal(request)
        if refusal is not None:
            return error_response(refusal, id_header(request), request.path)
        try:
            return self.inner.handle(request)
        except Exception:                                       # noqa: BLE001
            log.exception("request %s: %s %s failed", request.request_id, request.method,
                          request.path)
            return error_response(ApiError("internal_error", "Internal server error."),
                                  id_header(request), request.path)
