"""Run a batch's tasks through the API application, many in flight at once, with no sockets.

Each `Task` becomes a `Request` (POST, its url, its body) answered by the very `App` the
server's API listener uses (`ApiApp`), so validation, defaults and documents are the live
routes' own. What the app hands back is a whole `Response` or a `Stream`; the runner does
for streams what the socket loop does, minus the sockets: it polls those with output after
a wake (the engine thread and the off-loop pool call `wake`, which sets an event), polls
any stream at its own deadline, and collects each stream's body until it is done.

    up to max_in_flight:  task -> Request -> app.handle -> Response (answered now) | Stream
    wake event:           poll the streams with output -> head + chunks -> done: an Answer

The engine batches whatever is in flight (continuous batching): the runner keeps
`max_in_flight` requests submitted, and a request the admission queue refuses for now
(429, 503 no_capacity) goes back to the front of the line, and submitting pauses for its
Retry-After (at most `MAX_HOLD_S`: the runner is no herd of clients, and a slot freed by an
answer ends the pause sooner). A request whose handling or stream raises (a bug) is
answered with the server's 500 document, and the run goes on. Each answer goes to
`on_answer` as it completes (in completion order, not file order).
`stop()` (a signal) stops the submitting; what is in flight is finished, then `run` returns.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from server.batch.lines import Task
from server.batch.output import Answer
from server.door.request_id import MINTED_ID_BYTES
from server.http.protocol import App, AppFailure, Request, Response, Stream

log = logging.getLogger("tlserve.batch")
JSON_HEADERS = (("content-type", "application/json"),)

# Refused for now by admission (a full queue, a queue deadline): run again later. Any
# other error (a dead engine's 503 too) is the task's answer.
RETRY_CODES = ("rate_limit_exceeded", "no_capacity")
MAX_HOLD_S = 1.0                   # the longest pause after a refusal (and its default)
MAX_WAIT_S = 1.0                   # the longest wait between polls with nothing due


@dataclass
class InFlight:
    """A task's stream and what its polls have given so far."""
    task: Task
    request_id: str
    stream: Stream
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()   # the head's, once polled
    chunks: list[bytes] = field(default_factory=list)


class Wake:
    """The wake the engine and the pool call from their threads: sets an event the
    runner waits on (cleared before each round of polls, so no wake is lost)."""

    def __init__(self):
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()


class BatchRunner:
    def __init__(self, app: App, wake: Wake, *, max_in_flight: int,
                 clock: Callable[[], float] = time.monotonic):
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.app, self.wake, self.clock = app, wake, clock
        self.max_in_flight = max_in_flight
        self._stopping = False
        self._hold_until_s = 0.0            # no submitting before this (a 429's Retry-After)

    def stop(self) -> None:
        """Submit nothing more; finish what is in flight (thread-safe: sets a flag)."""
        self._stopping = True
        self.wake()

    def run(self, tasks: Iterable[Task], on_answer: Callable[[Answer], None], *,
            is_expired: Callable[[], bool] = lambda: False) -> int:
        """Answer every task (until `stop`, or until `is_expired()` says the batch's window
        has passed: no task is submitted from then on, those in flight finish); returns how
        many were left unsubmitted."""
        waiting = deque(tasks)
        flying: list[InFlight] = []
        while True:
            self.wake.event.clear()
            now = self.clock()
            if not self._stopping and is_expired():
                self._stopping = True         # as a stop: submit nothing, finish the flying
            if not self._stopping and now >= self._hold_until_s:
                self._submit(waiting, flying, on_answer, is_expired)
            for item in [i for i in flying if i.stream.has_output() or _due(i, now)]:
                if self._poll(item, now, waiting, on_answer):
                    flying.remove(item)
            if not flying and (self._stopping or not waiting):
                return len(waiting)
            self.wake.event.wait(self._wait_s(flying, waiting))

    def _submit(self, waiting: deque, flying: list[InFlight], on_answer: Callable[[Answer], None],
                is_expired: Callable[[], bool]) -> None:
        while (waiting and len(flying) < self.max_in_flight and not self._stopping
               and not is_expired()):
            task = waiting.popleft()
            request_id = f"req-{os.urandom(MINTED_ID_BYTES).hex()}"
            request = Request(method="POST", path=task.url, headers=JSON_HEADERS,
                              body=task.body, peer="run-batch", request_id=request_id)
            try:
                answer = self.app.handle(request)
            except Exception:                                  # noqa: BLE001
                log.exception("run-batch: line %d (%s) failed", task.line_no, task.custom_id)
                answer = self.app.error("internal_error", "Internal server error.")
            if isinstance(answer, Response):
                if self._retry(task, answer.headers, answer.body, waiting):
                    return
                on_answer(_answer(task, request_id, answer.status, [answer.body]))
            else:
                flying.append(InFlight(task, request_id, answer))

    def _poll(self, item: InFlight, now: float, waiting: deque,
              on_answer: Callable[[Answer], None]) -> bool:
        """Poll one stream; True once it is done (answered, or sent back to wait)."""
        try:
            polled = item.stream.poll(now)
        except AppFailure:                  # the stream logged it, with its request id
            return self._failed(item, on_answer)
        except Exception:                                      # noqa: BLE001
            log.exception("run-batch: line %d (%s) failed", item.task.line_no,
                          item.task.custom_id)
            return self._failed(item, on_answer)
        if polled.successor is not None:    # the pool's stand-in hands its answer over
            item.stream = polled.successor
        if polled.head is not None:
            item.status, item.headers = polled.head.status, polled.head.headers
        item.chunks.extend(polled.chunks)
        if not polled.done:
            return False
        if not self._retry(item.task, item.headers, b"".join(item.chunks), waiting):
            on_answer(_answer(item.task, item.request_id, item.status, item.chunks))
        return True

    def _failed(self, item: InFlight, on_answer: Callable[[Answer], None]) -> bool:
        """A stream that raised: cancelled, and answered with the server's 500."""
        item.stream.cancel()
        failure = self.app.error("internal_error", "Internal server error.")
        on_answer(_answer(item.task, item.request_id, failure.status, [failure.body]))
        return True

    def _retry(self, task: Task, headers: tuple[tuple[str, str], ...], raw_body: bytes,
               waiting: deque) -> bool:
        """A refusal for now: the task goes back to the front, submitting pauses."""
        if _error_code(raw_body) not in RETRY_CODES:
            return False
        waiting.appendleft(task)
        self._hold_until_s = self.clock() + min(_retry_after_s(headers), MAX_HOLD_S)
        return True

    def _wait_s(self, flying: list[InFlight], waiting: deque) -> float:
        now = self.clock()
        deadlines = [d for d in (i.stream.next_deadline_s() for i in flying) if d is not None]
        if waiting and not self._stopping and len(flying) < self.max_in_flight:
            deadlines.append(self._hold_until_s)
        if not deadlines:
            return MAX_WAIT_S
        return max(0.0, min(MAX_WAIT_S, min(deadlines) - now))


def _retry_after_s(headers: tuple[tuple[str, str], ...]) -> float:
    """A refusal's Retry-After in seconds (MAX_HOLD_S when it gives none readable)."""
    for name, value in headers:
        if name.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    return MAX_HOLD_S


def _error_code(raw_body: bytes) -> str | None:
    """The OpenAI error code of an error document (None for anything else)."""
    try:
        error = json.loads(raw_body).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _due(item: InFlight, now: float) -> bool:
    deadline = item.stream.next_deadline_s()
    return deadline is not None and deadline <= now


def _answer(task: Task, request_id: str, status: int, chunks: list[bytes]) -> Answer:
    raw = b"".join(chunks)
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return Answer(task, status, request_id, body, output_tokens=_output_tokens(body))


def _output_tokens(body: object) -> int:
    """The tokens an answer generated (its usage), for the progress line's tokens/s."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0
    for name in ("completion_tokens", "output_tokens", "total_tokens"):
        value = usage.get(name)
        if isinstance(value, int):
            return value
    return 0
