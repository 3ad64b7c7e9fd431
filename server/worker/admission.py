"""The door of the one waiting queue in front of the engine: a bounded gate and its 429s.

`EngineAdmission` is that door for one engine: `server/worker/bridge.py` asks it to `admit`
each generation and embeddings call before queueing it, and it answers with a reserved
slot or the 429 to raise at once, never a wait without bound. It holds:

* `AdmissionGate` — counts the requests admitted but not yet scheduled (at most
  `capacity`); a slot is released when the engine first schedules the request or it ends
  before that (`leave_queue`);
* the wait estimate (`WaitEstimator`, server/worker/waiting.py) — how long one more request
  would wait behind the running and queued ones, from the measured service time; past the
  queue deadline it is a 429 now. Only the requests running and queued now decide: one that
  finds a free batch slot and room in the gate is admitted, whatever was refused before;
* the clients refused earlier and not yet back (`RefusedClients`) — they only lengthen the
  Retry-After of every 429 and 503 (the spread of a herd).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from server.errors import ApiError
from server.worker.waiting import (MIN_RETRY_AFTER_S, RefusedClients, WaitEstimator, WaitInputs,
                                   retry_after_s)

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

    def release(self) -> None:
        with self._lock:
            if self._waiting <= 0:
                raise RuntimeError("admission gate released more often than reserved")
            self._waiting -= 1


@dataclass(frozen=True)
class EngineLoad:
    """What the engine is doing now, as the wait estimate reads it."""
    running_requests: int
    step_running_s: float = 0.0     # how long the step in progress has run (0: none)


class EngineAdmission:
    """One engine's door: the gate, the wait estimate and the refused clients. `admit` is
    called where a request is prepared (a pool thread, or the loop thread for a test's
    inline app): the gate and the refused clients are locked; the estimator is fed on the
    engine thread."""

    def __init__(self, policy: QueuePolicy, clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.gate = AdmissionGate(policy.capacity_requests)
        self.estimator = WaitEstimator()        # measured on the engine thread, read here
        self.refused = RefusedClients()         # 429s not yet back (locked: read by all)
        self._clock = clock

    def admit(self, load: EngineLoad) -> None:
        """Reserve a slot for one more request, or raise its 429 now."""
        inputs = self._inputs(load)
        wait_s = self.estimator.wait_s(inputs)          # who is queued now decides ...
        retry_s = retry_after_s(self.estimator.retry_wait_s(inputs))   # ... the refused spread
        refusal = reserve_or_refusal(self.gate, wait_s, self.policy.deadline_ms, retry_s)
        if refusal is not None:
            self.refused.refused(self._clock(), retry_s)
            raise refusal

    def wait_s(self, load: EngineLoad) -> float:
        """How long one more request would wait now (only the running and queued count)."""
        return self.estimator.wait_s(self._inputs(load))

    def retry_after_s(self, load: EngineLoad) -> int:
        """The Retry-After of a refusal now: the wait plus the refused clients still out."""
        return retry_after_s(self.estimator.retry_wait_s(self._inputs(load)))

    def _inputs(self, load: EngineLoad) -> WaitInputs:
        return WaitInputs(
            running_requests=load.running_requests, waiting_requests=self.gate.waiting,
            max_num_seqs=self.policy.batch_slots, step_running_s=load.step_running_s,
            returning_requests=self.refused.returning(self._clock()))


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
