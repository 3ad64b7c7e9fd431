"""Every error a client can see, and the ONE table that maps it to an HTTP status.

Whatever goes wrong — a bad field, an unknown model, a full queue, an oversized header —
is raised as `ApiError(kind, message, param=...)`. `ERROR_KINDS` alone decides the status,
the OpenAI `type` and the `code`; `error_response` renders the OpenAI error document:

    {"error":{"message":"...","type":"invalid_request_error","param":"temperature","code":null}}

The Anthropic Messages routes (`/v1/messages...`, `ErrorShape.for_path`) get the same kinds in
Anthropic's document, `{"type":"error","error":{"type":"invalid_request_error","message":...}}`,
with the table's Anthropic type; a kind whose row names an `anthropic_kind` is answered as
that kind there (a full engine or a draining server: 529 `overloaded_error`, the status the
Anthropic SDKs retry), and a 422 as a 400 (Anthropic's API has no 422).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from server.replies import JSON_CONTENT_TYPE, json_bytes
from server.http.protocol import Response


ANTHROPIC_PATH = "/v1/messages"     # this path and those under it answer in Anthropic's shape


class ErrorShape(Enum):
    """Which API's error document a request gets: chosen by its path."""
    OPENAI = "openai"
    ANTHROPIC = "anthropic"

    @classmethod
    def for_path(cls, path: str) -> ErrorShape:
        if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
            return cls.ANTHROPIC
        return cls.OPENAI


@dataclass(frozen=True)
class ErrorKind:
    status: int
    type: str            # OpenAI error "type"
    code: str | None     # OpenAI error "code" (machine-readable), None when OpenAI sends null
    anthropic: str = "invalid_request_error"   # Anthropic error "type"
    anthropic_kind: str | None = None          # on Anthropic routes, answered as this kind


# kind -> (status, type, code). The only place a status is chosen for an error.
ERROR_KINDS: dict[str, ErrorKind] = {
    # request content: 400 a bad value, 422 a value this server does not serve
    "invalid_request": ErrorKind(400, "invalid_request_error", None),
    "invalid_json": ErrorKind(400, "invalid_request_error", "invalid_json"),
    "context_length_exceeded": ErrorKind(400, "invalid_request_error", "context_length_exceeded"),
    "template_error": ErrorKind(400, "invalid_request_error", "chat_template_error"),
    "unsupported_parameter": ErrorKind(422, "invalid_request_error", "unsupported_parameter",
                                       anthropic_kind="invalid_request"),
    "model_not_found": ErrorKind(404, "invalid_request_error", "model_not_found", "not_found_error"),
    "kv_handle_not_found": ErrorKind(404, "invalid_request_error", "kv_handle_not_found",
                                     "not_found_error"),
    "engine_view_off": ErrorKind(404, "invalid_request_error", "engine_view_disabled", "not_found_error"),
    "lora_not_found": ErrorKind(404, "invalid_request_error", "lora_not_found", "not_found_error"),
    "runtime_lora_disabled": ErrorKind(404, "invalid_request_error", "runtime_lora_disabled",
                                       "not_found_error"),
    # authentication (server/door/auth.py)
    "invalid_api_key": ErrorKind(401, "invalid_request_error", "invalid_api_key", "authentication_error"),
    # routing
    "route_not_found": ErrorKind(404, "invalid_request_error", "not_found", "not_found_error"),
    "method_not_allowed": ErrorKind(405, "invalid_request_error", "method_not_allowed"),
    # admission (a full queue, a deadline) and lifecycle (loading, draining, a dead engine)
    "rate_limit_exceeded": ErrorKind(429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"),
    "no_capacity": ErrorKind(503, "server_error", "no_capacity", "api_error", "overloaded"),
    "shutting_down": ErrorKind(503, "server_error", "server_shutting_down", "api_error", "overloaded"),
    "not_ready": ErrorKind(503, "server_error", "not_ready", "api_error", "overloaded"),
    "engine_unavailable": ErrorKind(503, "server_error", "engine_unavailable", "api_error"),
    "model_loading": ErrorKind(503, "server_error", "model_loading", "api_error", "overloaded"),
    # the Anthropic routes' answer for a full engine or a server that cannot take work now
    "overloaded": ErrorKind(529, "server_error", "overloaded", "overloaded_error"),
    # the Batch API (server/api/files.py, batches.py)
    "file_not_found": ErrorKind(404, "invalid_request_error", "file_not_found", "not_found_error"),
    "batch_not_found": ErrorKind(404, "invalid_request_error", "batch_not_found", "not_found_error"),
    "batch_api_off": ErrorKind(404, "invalid_request_error", "batch_api_disabled", "not_found_error"),
    "batch_not_cancellable": ErrorKind(409, "invalid_request_error", "batch_not_cancellable"),
    "storage_full": ErrorKind(507, "server_error", "storage_full", "api_error"),
    # HTTP framing (server/http/http11.py)
    "malformed_http": ErrorKind(400, "invalid_request_error", "malformed_request"),
    "request_timeout": ErrorKind(408, "invalid_request_error", "request_timeout", "timeout_error"),
    "length_required": ErrorKind(411, "invalid_request_error", "length_required"),
    "body_too_large": ErrorKind(413, "invalid_request_error", "request_too_large", "request_too_large"),
    "expectation_failed": ErrorKind(417, "invalid_request_error", "expectation_failed"),
    "headers_too_large": ErrorKind(431, "invalid_request_error", "request_header_fields_too_large"),
    "not_implemented": ErrorKind(501, "invalid_request_error", "not_implemented"),
    "http_version_not_supported": ErrorKind(505, "invalid_request_error", "http_version_not_supported"),
    # our fault
    "internal_error": ErrorKind(500, "server_error", "internal_error", "api_error"),
}


class ApiError(Exception):
    """An error for the client. `kind` must be a key of ERROR_KINDS."""

    def __init__(self, kind: str, message: str, *, param: str | None = None,
                 headers: tuple[tuple[str, str], ...] = ()):
        if kind not in ERROR_KINDS:
            raise KeyError(f"unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.headers = headers          # extra response headers, e.g. Retry-After
        self.model: str | None = None   # the model the request named, once its body parsed

    def about(self, model: str) -> ApiError:
        """This error, noted as about `model` (for the access log); returns it."""
        self.model = self.model or model
        return self

    @property
    def status(self) -> int:
        return ERROR_KINDS[self.kind].status

    def document(self, shape: ErrorShape = ErrorShape.OPENAI) -> dict:
        if shape is ErrorShape.ANTHROPIC:
            return {"type": "error", "error": {"type": ERROR_KINDS[self._kind_in(shape)].anthropic,
                                               "message": self.message}}
        info = ERROR_KINDS[self.kind]
        return {"error": {"message": self.message, "type": info.type,
                          "param": self.param, "code": info.code}}

    def status_in(self, shape: ErrorShape) -> int:
        """The status this error answers with in `shape` (529 for an overloaded engine on
        the Anthropic routes)."""
        return ERROR_KINDS[self._kind_in(shape)].status

    def _kind_in(self, shape: ErrorShape) -> str:
        if shape is ErrorShape.ANTHROPIC:
            return ERROR_KINDS[self.kind].anthropic_kind or self.kind
        return self.kind


def error_response(err: ApiError, headers: tuple[tuple[str, str], ...] = (),
                   path: str = "") -> Response:
    """Render an ApiError as a complete JSON response (its message noted for the access log),
    in the error shape of the request's `path`."""
    shape = ErrorShape.for_path(path)
    all_headers = (JSON_CONTENT_TYPE,) + err.headers + tuple(headers)
    notes = (("error", err.message),) + ((("model", err.model),) if err.model else ())
    return Response(status=err.status_in(shape), headers=all_headers,
                    body=json_bytes(err.document(shape)), notes=notes)


def kind_response(kind: str, message: str, path: str = "") -> Response:
    """The document for an error kind the transport found (`App.error`): a framing error
    kind from server/http/http11.py, or "internal_error" when the application raised;
    `path`, when the request's head was read, chooses the error shape."""
    return error_response(ApiError(kind, message), path=path)


def bad(param: str, message: str) -> ApiError:
    """A field's value is wrong: 400 naming the field (the one constructor every room uses)."""
    return ApiError("invalid_request", message, param=param)


def unsupported(param: str, message: str) -> ApiError:
    """A real OpenAI field this server does not serve: 422 naming it."""
    return ApiError("unsupported_parameter", message, param=param)
