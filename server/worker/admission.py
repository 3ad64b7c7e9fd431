"""The door of the one waiting queue in front of the engine: a bounded gate and its 429s.

`AdmissionGate` counts the requests admitted but not yet scheduled (at most `capacity`);
`server/worker/bridge.py` reserves a slot in `submit`/`embed` and releases it when the engine first
schedules the request or it ends before that. Whether a request may wait at all is decided
with `server/worker/waiting.py`'s estimate (only the requests queued and running now count; a
request that finds a free batch slot and room in the gate is admitted, whatever was refused
before), and every refusal is a 429 at once with its Retry-After, never a wait without bound.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from server.errors import ApiError
from server.worker.waiting import MIN_RETRY_AFTER_S

RETRY_AFTER_S = MIN_RETRY_AFTER_S   # the Retry-After when nothing has been measured yet


@dataclass(frozen=True)
class QueuePolicy:
    """The admission queue's bounds (from ServeConfig.queue_capacity / queue_deadline_ms)
    and the engine's batch slots (EngineConfig.max_num_seqs) the wait estimate divides by."""
    capacity_requests: int
    deadline_ms: int
    batch_slots: int = 1


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

    def reserve_or_raise(self, retry_s: int = RETRY_AFTER_S) -> None:
        """Reserve a slot or raise the 429 the client must see at once."""
        if not self.try_reserve():
            raise queue_full_error(self.capacity, retry_s)

    def release(self) -> None:
        with self._lock:
            if self._waiting <= 0:
                raise RuntimeError("admission gate released more often than reserved")
            self._waiting -= 1


def queue_full_error(capacity: int, retry_s: int = RETRY_AFTER_S) -> ApiError:
    return ApiError("rate_limit_exceeded",
                    f"The server's admission queue is full ({capacity} waiting requests); "
                    f"retry after {retry_s} s.",
                    headers=(("Retry-After", str(retry_s)),))


def reserve_or_refusal(gate: AdmissionGate, wait_s: float, deadline_ms: int,
                       retry_s: int) -> ApiError | None:
    """Reserve a slot for a request that would wait `wait_s`, or the 429 to raise at once
    (nothing reserved): past the queue deadline, or the gate full."""
    if wait_s * 1000.0 > deadline_ms:
        return wait_too_long_error(wait_s, deadline_ms, retry_s)
    if not gate.try_reserve():
        return queue_full_error(gate.capacity, retry_s)
    return None


def engine_down_error() -> ApiError:
    return ApiError("engine_unavailable", "The engine thread has stopped; this server "
                                          "cannot serve requests until it is restarted.")


def wait_too_long_error(wait_s: float, deadline_ms: int, retry_s: int) -> ApiError:
    return ApiError("rate_limit_exceeded",
                    f"The server is busy: a new request would wait about {wait_s:.1f} s for a "
                    f"batch slot, longer than the {deadline_ms} ms it holds a request; "
                    f"retry after {retry_s} s.", headers=(("Retry-After", str(retry_s)),))


def leave_queue(ticket) -> None:
    """Release a ticket's admission slot (its `on_leave_queue`), exactly once: when the
    engine first takes it, or when it ends before that."""
    release, ticket.on_leave_queue = ticket.on_leave_queue, None
    if release is not None:
        release()
