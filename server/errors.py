"""Every error a client can see, and the ONE table that maps it to an HTTP status.

Whatever goes wrong — a bad field, an unknown model, a full queue, an oversized header —
is raised as `ApiError(kind, message, param=...)`. `ERROR_KINDS` alone decides the status,
the OpenAI `type` and the `code`; `error_response` renders the OpenAI error document:

    {"error":{"message":"...","type":"invalid_request_error","param":"temperature","code":null}}
"""
from __future__ import annotations

from dataclasses import dataclass

from server.replies import JSON_CONTENT_TYPE, json_bytes
from server.http.protocol import Response


@dataclass(frozen=True)
class ErrorKind:
    status: int
    type: str            # OpenAI error "type"
    code: str | None     # OpenAI error "code" (machine-readable), None when OpenAI sends null


# kind -> (status, type, code). The only place a status is chosen for an error.
ERROR_KINDS: dict[str, ErrorKind] = {
    # request content: 400 a bad value, 422 a value this server does not serve
    "invalid_request": ErrorKind(400, "invalid_request_error", None),
    "invalid_json": ErrorKind(400, "invalid_request_error", "invalid_json"),
    "context_length_exceeded": ErrorKind(400, "invalid_request_error", "context_length_exceeded"),
    "template_error": ErrorKind(400, "invalid_request_error", "chat_template_error"),
    "unsupported_parameter": ErrorKind(422, "invalid_request_error", "unsupported_parameter"),
    "model_not_found": ErrorKind(404, "invalid_request_error", "model_not_found"),
    "kv_handle_not_found": ErrorKind(404, "invalid_request_error", "kv_handle_not_found"),
    "engine_view_off": ErrorKind(404, "invalid_request_error", "engine_view_disabled"),
    # authentication (server/door/auth.py)
    "invalid_api_key": ErrorKind(401, "invalid_request_error", "invalid_api_key"),
    # routing
    "route_not_found": ErrorKind(404, "invalid_request_error", "not_found"),
    "method_not_allowed": ErrorKind(405, "invalid_request_error", "method_not_allowed"),
    # admission (a full queue, a deadline) and lifecycle (loading, draining, a dead engine)
    "rate_limit_exceeded": ErrorKind(429, "rate_limit_error", "rate_limit_exceeded"),
    "no_capacity": ErrorKind(503, "server_error", "no_capacity"),
    "shutting_down": ErrorKind(503, "server_error", "server_shutting_down"),
    "not_ready": ErrorKind(503, "server_error", "not_ready"),
    "engine_unavailable": ErrorKind(503, "server_error", "engine_unavailable"),
    "model_loading": ErrorKind(503, "server_error", "model_loading"),
    # the Batch API (server/api/files.py, batches.py)
    "file_not_found": ErrorKind(404, "invalid_request_error", "file_not_found"),
    "batch_not_found": ErrorKind(404, "invalid_request_error", "batch_not_found"),
    "batch_api_off": ErrorKind(404, "invalid_request_error", "batch_api_disabled"),
    "batch_not_cancellable": ErrorKind(409, "invalid_request_error", "batch_not_cancellable"),
    "storage_full": ErrorKind(507, "server_error", "storage_full"),
    # HTTP framing (server/http/http11.py)
    "malformed_http": ErrorKind(400, "invalid_request_error", "malformed_request"),
    "request_timeout": ErrorKind(408, "invalid_request_error", "request_timeout"),
    "length_required": ErrorKind(411, "invalid_request_error", "length_required"),
    "body_too_large": ErrorKind(413, "invalid_request_error", "request_too_large"),
    "expectation_failed": ErrorKind(417, "invalid_request_error", "expectation_failed"),
    "headers_too_large": ErrorKind(431, "invalid_request_error", "request_header_fields_too_large"),
    "not_implemented": ErrorKind(501, "invalid_request_error", "not_implemented"),
    "http_version_not_supported": ErrorKind(505, "invalid_request_error", "http_version_not_supported"),
    # our fault
    "internal_error": ErrorKind(500, "server_error", "internal_error"),
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

    def document(self) -> dict:
        info = ERROR_KINDS[self.kind]
        return {"error": {"message": self.message, "type": info.type,
                          "param": self.param, "code": info.code}}


def error_response(err: ApiError, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """Render an ApiError as a complete JSON response (its message noted for the access log)."""
    all_headers = (JSON_CONTENT_TYPE,) + err.headers + tuple(headers)
    notes = (("error", err.message),) + ((("model", err.model),) if err.model else ())
    return Response(status=err.status, headers=all_headers, body=json_bytes(err.document()),
                    notes=notes)


def kind_response(kind: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """The document for an error kind the transport found (`App.error`): a framing error
    kind from server/http/http11.py, or "internal_error" when the application raised."""
    return error_response(ApiError(kind, message), headers)


def bad(param: str, message: str) -> ApiError:
    """A field's value is wrong: 400 naming the field (the one constructor every room uses)."""
    return ApiError("invalid_request", message, param=param)


def unsupported(param: str, message: str) -> ApiError:
    """A real OpenAI field this server does not serve: 422 naming it."""
    return ApiError("unsupported_parameter", message, param=param)
