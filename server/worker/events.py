"""What crosses from the engine thread to a request's stream: one event type per outcome.

`TokenOut` and `PromptLogprobs` come from the engine as they are; the endings are ours:
`TooLong` and `Invalid` (the engine refused the request: 400s), `Failed` (a server error:
500, logged with the request id), `Expired` (the queue deadline: 503). Every ending knows
its `ApiError` by a kind of server/errors.py's one table, so the status is chosen there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

from engine.api import PromptLogprobs, TokenOut
from server.errors import ApiError
from server.worker.admission import RETRY_AFTER_S


@dataclass(frozen=True)
class _Ending:
    """An event that ends a request with an error; `KIND` is a key of server.errors.ERROR_KINDS."""
    message: str
    KIND: ClassVar[str] = "internal_error"

    def error(self) -> ApiError:
        return ApiError(self.KIND, self.message)


@dataclass(frozen=True)
class TooLong(_Ending):
    """Refused by the engine: the prompt cannot fit (`engine.api.PromptTooLong`)."""
    KIND: ClassVar[str] = "context_length_exceeded"


@dataclass(frozen=True)
class Invalid(_Ending):
    """Refused by the engine: the request is invalid as it is (any other RequestRefused)."""
    KIND: ClassVar[str] = "invalid_request"


@dataclass(frozen=True)
class Failed(_Ending):
    """The engine raised while serving this request (a bug, never the client's fault): 500."""
    KIND: ClassVar[str] = "internal_error"


@dataclass(frozen=True)
class Expired(_Ending):
    """The request waited past the queue deadline without being scheduled: 503 (always
    before the response head: a streamed head waits for the first token)."""
    retry_after_s: int = RETRY_AFTER_S
    KIND: ClassVar[str] = "no_capacity"

    def error(self) -> ApiError:
        return ApiError(self.KIND, self.message,
                        headers=(("Retry-After", str(self.retry_after_s)),))


Event = Union[TokenOut, PromptLogprobs, TooLong, Invalid, Failed, Expired]


def expired_event(deadline_ms: int, retry_s: int = RETRY_AFTER_S) -> Expired:
    return Expired(f"The request waited longer than {deadline_ms} ms for the engine to "
                   "schedule it; try again later.", retry_s)
