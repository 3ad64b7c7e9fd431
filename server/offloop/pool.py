"""Work off the loop thread: the one seam between the loop and the heavy, pure part of a request.

The loop thread must never block (it serves every socket), yet some requests
need seconds of pure Python before the engine sees them — compiling a grammar, rendering a
long history, tokenizing large inputs — and some answers need a big JSON document built.
`OffLoopPool.run(work, finish)` hands `work` to a small pool of threads and returns at once
an `OffLoopStream`, which the loop polls like any other `Stream`:

    loop thread                          pool thread
      pool.run(work, finish) -> stream     work() -> Outcome: a Stream, a Response, or
                                           the exception it raised
      stream.poll(): nothing yet     <---  stream.deliver(outcome); wake()
      stream.poll(): the answer's first poll, naming the answer as its `successor`

`work` may start engine work itself (a generation is admitted on the pool thread: admission
is thread-safe, server/worker/admission.py); the `Stream` it returns is the answer as it
is. What is not yet a stream, a whole `Response` or an error, goes through `finish` on the
loop thread (headers, the status counted, the error document) and is sent as one poll
(head with its Content-Length, the body, done). The first poll with the answer names it
as `StreamPoll.successor`: the holder (the access log's wrapper, the loop) polls the answer
itself from then on; a holder that does not is still served, each poll passed on.
`cancel()` marks the stream: a job not started yet is skipped, an outcome that comes later
is dropped, and a stream the work already started (tickets admitted) is cancelled at once,
so nothing runs for a client that has left.

What crosses threads: the job (stream + work) through a `queue.SimpleQueue`, and the
outcome through `deliver`, which a lock orders against `cancel`; the loop is told by
`wake()` — the same thread-safe wake the engine bridge uses. `Inline` runs the work at once
on the caller's thread (tests, and apps with nothing heavy): the same stream, already done.

The cyclic garbage collector stops every thread while it scans the live heap, and heavy
work grows that heap: during a Zod integer schema's compile full collections paused the whole
process for ~0.5 s each (and made the compile 5x slower). So while off-loop work runs,
automatic collection is paused (`CollectorPause`: process-wide, as the collector is);
it resumes when no work runs, or after `GC_PAUSE_MAX_S` of back-to-back work. The work
frees most of its garbage by reference counting; cycles wait until then.
"""
from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeVar

from server.http.protocol import Logged
from server.errors import ApiError
from server.http.protocol import Response, ResponseHead, Stream, StreamPoll

log = logging.getLogger("tlserve.offloop")

T = TypeVar("T")

# Two threads: one long compile (seconds) never holds up every other request's preparation.
# More would only share the GIL with the loop thread: the work is pure Python.
OFFLOOP_THREADS = 2
# stop() waits this long for a thread still inside a job; they are daemons, the rest is
# cut when the process exits.
STOP_JOIN_S = 2.0
_STOP = None                     # the job a pool thread reads as "exit"
# The longest automatic garbage collection stays paused while work keeps running.
GC_PAUSE_MAX_S = 10.0


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What the work produced: its value, or the exception it raised (re-raised by `get`)."""
    value: T | None = None
    error: Exception | None = None

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


def outcome_of(work: Callable[[], T]) -> Outcome[T]:
    try:
        return Outcome(value=work())
    except ApiError as err:                     # expected: its message is all that is used
        return Outcome(error=_without_frames(err))
    except Exception as exc:                    # noqa: BLE001 - a bug: logged with its traceback
        return Outcome(error=exc)


def _without_frames(err: ApiError) -> ApiError:
    """Drop what an expected error drags along: its traceback and the exception it replaced
    hold the work's frames, and with them everything it built (a refused grammar's
    automaton: millions of objects the collector would scan once it resumes)."""
    err.__traceback__ = err.__context__ = err.__cause__ = None
    return err


# What makes a Response or an error the answer, on the loop (engine.api.Finish is another thing:
# a finish reason).
AnswerFinish = Callable[[Outcome], "Response | Stream"]


class ResponseStream:
    """A whole `Response` as a `Stream`: one poll with the head (Content-Length), body, done.
    `Logged`: its access fields are what the app noted on the Response (model, error)."""

    def __init__(self, response: Response):
        self.response = response
        self.done = False

    def access_fields(self) -> dict:
        return dict(self.response.notes)

    def poll(self, now_s: float) -> StreamPoll:
        if self.done:
            return StreamPoll(done=True)
        self.done = True
        r = self.response
        return StreamPoll(head=ResponseHead(status=r.status, headers=r.headers,
                                            content_length=len(r.body)),
                          chunks=[r.body] if r.body else [], done=True)

    def has_output(self) -> bool:
        return True                             # the whole answer, or its end, is ready

    def next_deadline_s(self) -> float | None:
        return None

    def cancel(self) -> None:
        self.done = True


def as_stream(result: Response | Stream) -> Stream:
    return ResponseStream(result) if isinstance(result, Response) else result


class OffLoopStream:
    """Stands for work running off the loop; becomes the answer once the work is done."""

    def __init__(self, finish: AnswerFinish):
        self._finish: AnswerFinish | None = finish
        self._outcome: Outcome | None = None    # written once by a pool thread, read by the loop
        self._lock = threading.Lock()           # orders `deliver` (pool) against `cancel` (loop)
        self.delegate: Stream | None = None     # the real answer, once the outcome is in
        self.is_cancelled = False

    def deliver(self, outcome: Outcome) -> None:
        """Called by a pool thread (any thread): the loop picks it up at its next poll. A
        stream delivered after `cancel` is cancelled here: its client has gone."""
        with self._lock:
            late = self.is_cancelled
            if not late:
                self._outcome = outcome
        if late and isinstance(outcome.value, Stream):
            outcome.value.cancel()

    def poll(self, now_s: float) -> StreamPoll:
        if self.delegate is not None:           # a holder that ignored `successor`
            return self.delegate.poll(now_s)
        outcome = self._outcome
        if self.is_cancelled or outcome is None:
            return StreamPoll(done=self.is_cancelled)
        self.delegate = self._answer(outcome)
        out = self.delegate.poll(now_s)
        out.successor = self.delegate
        return out

    def _answer(self, outcome: Outcome) -> Stream:
        """The outcome as the stream to send: a Stream the work made is the answer; the rest
        is finished on this (the loop) thread, once."""
        if outcome.error is None and isinstance(outcome.value, Stream):
            return outcome.value
        finish, self._finish = self._finish, None
        return as_stream(finish(outcome))

    def has_output(self) -> bool:
        """The worker's outcome has arrived (or the real answer has output), or the
        cancel's end is due; while the work runs, a wake has nothing to fetch here."""
        if self.delegate is not None:
            return self.delegate.has_output()
        return self.is_cancelled or self._outcome is not None

    def next_deadline_s(self) -> float | None:
        return None if self.delegate is None else self.delegate.next_deadline_s()

    def cancel(self) -> None:
        with self._lock:
            self.is_cancelled = True
            outcome, self._outcome = self._outcome, None
        started = self.delegate or (outcome.value if outcome is not None else None)
        if isinstance(started, Stream):         # tickets exist: the answer aborts them
            started.cancel()

    def access_fields(self) -> dict:
        """`Logged`: the access log's fields of the real answer (server/door/access.py)."""
        return dict(self.delegate.access_fields()) if isinstance(self.delegate, Logged) else {}


class OffLoop(Protocol):
    def run(self, work: Callable[[], Any], finish: AnswerFinish) -> OffLoopStream:
        """Start `work` away from the loop; `finish` turns an outcome that is not yet a
        Stream (a Response, an error) into the answer, on the loop thread."""


class Inline:
    """Runs the work at once on the caller's thread: for tests and tools without a loop."""

    def run(self, work: Callable[[], Any], finish: AnswerFinish) -> OffLoopStream:
        stream = OffLoopStream(finish)
        stream.deliver(outcome_of(work))
        return stream


class CollectorPause:
    """Automatic garbage collection paused while any job runs (see the module docstring).
    Only a pause it began is ended here: a collector someone else disabled stays so."""

    def __init__(self, *, max_s: float = GC_PAUSE_MAX_S,
                 clock: Callable[[], float] = time.monotonic):
        self.max_s, self._clock = max_s, clock
        self._lock = threading.Lock()
        self._running_jobs = 0
        self._paused_since_s: float | None = None

    def begin(self) -> None:
        with self._lock:
            if self._running_jobs == 0 and gc.isenabled():
                gc.disable()
                self._paused_since_s = self._clock()
            self._running_jobs += 1

    def end(self) -> None:
        with self._lock:
            self._running_jobs -= 1
            since_s = self._paused_since_s
            if since_s is not None and (self._running_jobs == 0
                                        or self._clock() - since_s > self.max_s):
                gc.enable()
                self._paused_since_s = None


class OffLoopPool:
    """`threads` daemon threads that run jobs in arrival order and wake the loop after each.
    `wake` is set before `start()` (serve.py: the loop's `wake`, safe from any thread)."""

    def __init__(self, *, threads: int = OFFLOOP_THREADS, wake: Callable[[], None] = lambda: None,
                 name: str = "tl-offloop", collector: CollectorPause | None = None):
        self.wake = wake
        self.collector = collector or CollectorPause()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._is_stopped = False
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, join_s: float = STOP_JOIN_S) -> None:
        """Let each thread finish its job and exit; jobs still queued are skipped (the loop
        that would poll them has ended)."""
        self._is_stopped = True
        for _ in self._threads:
            self._jobs.put(_STOP)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(join_s)

    def run(self, work: Callable[[], Any], finish: AnswerFinish) -> OffLoopStream:
        stream = OffLoopStream(finish)
        self._jobs.put((stream, work))
        return stream

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            stream, work = job
            if stream.is_cancelled or self._is_stopped:   # nobody waits for it any more
                continue
            self.collector.begin()
            try:
                outcome = outcome_of(work)
            finally:
                self.collector.end()
            stream.deliver(outcome)
            try:
                self.wake()
            except Exception:                   # noqa: BLE001 - a pool thread must outlive it
                log.exception("off-loop wake failed")
