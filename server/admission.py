"""The bounded admission gate (chapter 2.2): full means 429 now, never an unbounded wait.

A request holds one slot from the moment the loop thread admits it until the engine first
schedules it (or it ends before that: finished, aborted, timed out). `try_reserve` runs on
the loop thread inside the request handler, so a full queue is answered at once with
429 `rate_limit_exceeded` and `Retry-After: 1`; `release` runs on whichever thread sees
the request leave the queue (usually the engine thread). This gate is the one bound on
queued requests: the engine's waiting list is fed only through it.

A request still unscheduled `queue_deadline_ms` after admission fails with 503
`no_capacity` (the engine enforces that in `Engine.step()`; see `GenRequest.deadline_s`).
"""
from __future__ import annotations

import threading

from server.errors import ApiError

RETRY_AFTER_S = 1        # what load balancers and the gateway honour before retrying


class AdmissionGate:
    """A counting gate: at most `capacity` admitted-but-unscheduled requests."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("queue capacity must be >= 1")
        self.capacity = capacity
        self._waiting = 0
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        return self._waiting

    def try_reserve(self) -> bool:
        with self._lock:
            if self._waiting >= self.capacity:
                return False
            self._waiting += 1
            return True

    def reserve_or_raise(self) -> None:
        """Reserve a slot or raise the 429 the client must see at once."""
        if not self.try_reserve():
            raise queue_full_error(self.capacity)

    def release(self) -> None:
        with self._lock:
            if self._waiting <= 0:
                raise RuntimeError("admission gate released more often than reserved")
            self._waiting -= 1


def queue_full_error(capacity: int) -> ApiError:
    return ApiError("rate_limit_exceeded",
                    f"The server's admission queue is full ({capacity} waiting requests); "
                    f"retry after {RETRY_AFTER_S} s.",
                    headers=(("Retry-After", str(RETRY_AFTER_S)),))


def no_capacity_error(deadline_ms: int) -> ApiError:
    return ApiError("no_capacity", f"The request waited longer than {deadline_ms} ms for the "
                                   "engine to schedule it; try again later.")
