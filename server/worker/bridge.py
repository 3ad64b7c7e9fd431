"""The engine thread and the one bounded queue in front of it (docs/CONTRACT.md).

The loop thread and the engine thread share exactly three things:

* the **inbox** — a list of commands (add, abort, embed) guarded by a Condition; the
  engine thread drains it between steps, so aborts and embeddings never race a step;
* one **Ticket per request** — its `events` deque receives the request's `Event`s
  (deque.append / popleft are atomic under the GIL: one producer, one consumer);
* a **wake callback** — after each step that produced events the engine thread calls
  `EventLoop.wake()`, and the loop polls the streams.

    loop thread                                   engine thread
    submit(GenRequest) -> inbox.append(add)  -->  loop: take commands (add/abort/embed)
                                                        step() -> ticket.events.append
    stream.poll() <- ticket.events  <-- wake() --       publish stats, wake()

Admission lives here, because the bridge IS the queue to the engine: `submit` and `embed`
reserve one slot of the `AdmissionGate` or raise the 429 at once (never an unbounded wait);
the slot is released when the engine first schedules the request or it ends before that.
Before the slot, `submit` asks `server/worker/waiting.py` how long the request would wait behind
the running and queued ones (measured service time): past the queue deadline it is a 429
now, never a failure later. Only the requests running and queued now decide: one that finds a
free slot is admitted whatever was refused before; the clients refused earlier and not yet
back only lengthen the Retry-After of every 429 and 503 (the spread of a herd).
The engine's waiting list is fed only through here. A request still unscheduled
`QueuePolicy.deadline_ms` after admission is expired by `Engine.step()` (`FINISH_DEADLINE`);
the bridge delivers that as `Expired` (503 no_capacity).

Each outcome crosses the thread boundary as its own event type (server/worker/events.py).
The step trace and the engine view are observers passed in (server/worker/observers.py);
the refusals (429, 503) are built on the admission side (server/worker/admission.py).

The engine thread never formats text; the loop thread never touches numpy (embeddings
are engine jobs packed into the steps; server/worker/embedding_jobs.py hands their vectors back
as Python floats or base64 bytes, which is cheap).
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import replace
from typing import Callable

from engine.api import (FINISH_DEADLINE, Engine, EngineStats, GenRequest, KvSize,
                        PromptLogprobs, PromptTooLong, RequestRefused, StepRecord,
                        TokenOut)
from server.worker.admission import (AdmissionGate, QueuePolicy, engine_down_error, leave_queue,
                                     reserve_or_refusal)
from server.worker.arrivals import ArrivalWindow
from server.worker.compute_turn import ComputeTurn
from server.worker.embedding_jobs import EmbedTicket, EmbeddingJobs
from server.worker.events import Event, Failed, Invalid, TooLong, expired_event
from server.worker.observers import EngineWatcher, StepTracer
from server.worker.owned_thread import OwnedThread
from server.worker.waiting import RefusedClients, WaitEstimator, WaitInputs, retry_after_s

log = logging.getLogger("tlserve.bridge")


# ---- tickets --------------------------------------------------------------------------------

class Ticket:
    """One generation request as both threads see it."""

    __slots__ = ("request", "request_id", "events", "engine_id", "is_aborted", "is_scheduled",
                 "is_finished", "on_leave_queue", "scheduled_s", "first_token_s", "last_token_s",
                 "queued_s", "started_s", "token_gaps_s")

    def __init__(self, request: GenRequest, on_leave_queue: Callable[[], None] | None,
                 request_id: str = ""):
        self.request = request
        self.request_id = request_id            # X-Request-Id, for the logs
        self.events: deque[Event] = deque()
        self.engine_id: int | None = None       # set on the engine thread
        self.is_aborted = False                 # set on the loop thread
        self.is_scheduled = False
        self.is_finished = False
        self.on_leave_queue = on_leave_queue    # releases the admission slot, once
        self.scheduled_s: float | None = None   # start of the step of its first output
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.queued_s = 0.0                     # admitted at (bridge clock), for the trace
        # Start of its first engine step: a long prompt is prefilled in chunks over several
        # steps before its first output. Read from the step record while the engine keeps
        # one (engine view or trace on); without one, the step of its first output.
        self.started_s: float | None = None
        # The inter-token latencies: for each step after the first that gave it tokens,
        # the time since the previous one (appended on the engine thread, read at the end)
        self.token_gaps_s: list[float] = []


class EngineBridge(OwnedThread):
    """Owns the engine thread. Public methods are thread-safe unless noted."""

    def __init__(self, engine: Engine, *, queue: QueuePolicy,
                 clock: Callable[[], float] = time.monotonic, view: EngineWatcher | None = None,
                 tracer: StepTracer | None = None, arrivals: ArrivalWindow = ArrivalWindow(0),
                 turn: ComputeTurn | None = None, kv_size: KvSize | None = None):
        self._engine = engine
        self.kv_size = kv_size                  # the KV cache's fixed size (/metrics), if known
        self.turn = turn or ComputeTurn()       # one per process: every engine's compute
        self._arrivals = arrivals               # an idle engine's wait for the rest of a burst
        self._clock = clock                     # the engine's clock: deadlines are compared there
        self.queue = queue
        self.gate = AdmissionGate(queue.capacity_requests)
        self.estimator = WaitEstimator()        # measured on the engine thread, read here
        self.refused = RefusedClients()         # loop thread: 429s not yet back
        self.step_started_s: float | None = None    # engine thread: the step in progress
        self.died: str | None = None            # why the engine thread ended abnormally
        self._cond = threading.Condition()
        self._inbox: list[tuple] = []
        self._stopping = False
        self._closed = False                    # the engine thread takes no more commands
        self._thread: threading.Thread | None = None
        self._live: dict[int, Ticket] = {}      # engine id -> ticket (engine thread only)
        self._embeds = EmbeddingJobs()          # embeddings jobs (engine thread only)
        self.wake: Callable[[], None] = lambda: None
        self.stats: EngineStats = engine.stats()  # latest snapshot, replaced atomically
        # The engine view and the step trace (both None: the engine records nothing extra).
        self.view, self.tracer = view, tracer
        engine.record_steps = view is not None or tracer is not None
        if view is not None:
            view.update(engine, self.stats, stepped=False)    # a first picture, before start

    # -- loop-thread side --------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tl-engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenRequest, *, request_id: str = "") -> Ticket:
        """Admit the request (or raise the 429 ApiError now) and queue it for the engine,
        with the queue deadline counted from this moment."""
        self._admit_or_raise()
        queued_s = self._clock()
        deadline_s = queued_s + self.queue.deadline_ms / 1000.0
        ticket = Ticket(replace(request, deadline_s=deadline_s), self.gate.release, request_id)
        ticket.queued_s = queued_s
        self._post(("add", ticket))
        return ticket

    def abort(self, ticket: Ticket) -> None:
        """End the request in the engine; a no-op for one already aborted or finished, so
        callers (a cancelled stream, a stop string, an error) just call it."""
        if ticket.is_aborted or ticket.is_finished:
            return
        ticket.is_aborted = True
        self._post(("abort", ticket))

    def embed(self, inputs: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket:
        """Admit like a generation (429 when full); the slot frees when the engine thread
        takes the command off the inbox."""
        self._admit_or_raise()
        ticket = EmbedTicket(inputs, encoding_format, self.gate.release, request_id)
        self._post(("embed", ticket))
        return ticket

    def expected_wait_s(self) -> float:
        """The admission estimate for one more request now (server/worker/waiting.py): only the
        requests running and queued count, never the clients refused before."""
        return self.estimator.wait_s(self._wait_inputs())

    def retry_after_s(self) -> int:
        """The Retry-After of a refusal now: the wait plus the refused clients still out."""
        return retry_after_s(self.estimator.retry_wait_s(self._wait_inputs()))

    def _wait_inputs(self) -> WaitInputs:
        now, started = self._clock(), self.step_started_s
        return WaitInputs(
            running_requests=self.stats.active_sequences, waiting_requests=self.gate.waiting,
            max_num_seqs=self.queue.batch_slots,
            step_running_s=0.0 if started is None else now - started,
            returning_requests=self.refused.returning(now))

    def is_healthy(self) -> bool:
        """False once the engine thread has died (started, not stopping, not running)."""
        thread = self._thread
        return self.died is None and (thread is None or thread.is_alive() or self._stopping)

    def _admit_or_raise(self) -> None:
        if not self.is_healthy():
            raise engine_down_error()
        inputs = self._wait_inputs()
        wait_s = self.estimator.wait_s(inputs)          # who is queued now decides ...
        retry_s = retry_after_s(self.estimator.retry_wait_s(inputs))   # ... the refused spread
        refusal = reserve_or_refusal(self.gate, wait_s, self.queue.deadline_ms, retry_s)
        if refusal is not None:
            self.refused.refused(self._clock(), retry_s)
            raise refusal

    def _post(self, command: tuple) -> None:
        with self._cond:
            if not self._closed:
                self._inbox.append(command)
                self._cond.notify()
                return
        self._refuse(command, "the engine thread has stopped")   # nobody would take it

    @staticmethod
    def _refuse(command: tuple, reason: str) -> None:
        """End a command the engine thread will never run (it stopped or died)."""
        verb, ticket = command
        leave_queue(ticket)
        if verb == "embed":
            ticket.error, ticket.done = reason, True
        elif verb == "add":
            ticket.is_finished = True
            ticket.events.append(Failed(reason))

    # -- engine-thread side ------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:                               # noqa: BLE001
            # Only a bug outside the per-command and per-step guards gets here: every
            # request in flight ends with a 500 and /healthz fails, so the process restarts.
            log.critical("engine thread died: %s", traceback.format_exc())
            self.died = f"{type(exc).__name__}: {exc}"
            with self._cond:
                self._stopping = True
            self._shutdown(f"the engine thread stopped: {self.died}")
            return
        self._shutdown("the server is stopping")

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self._stopping and not self._engine.has_work():
                    self._cond.wait()
                if self._stopping:
                    break
                if not self._engine.has_work():                    # idle: let a burst land
                    self._arrivals.gather(self._cond, lambda: len(self._inbox),
                                          lambda: self._stopping)
                commands, self._inbox = self._inbox, []
            self._turn(commands)

    def run_once(self) -> bool:
        """One turn of the engine thread on the caller's thread, for a bridge that was never
        started (tests with an injected clock drive it step by step): -> whether it stepped."""
        with self._cond:
            commands, self._inbox = self._inbox, []
        return self._turn(commands)

    def _turn(self, commands: list[tuple]) -> bool:
        """Apply the commands taken off the inbox, step once if there is work, publish."""
        for command in commands:
            self._apply(command)
        stepped = self._engine.has_work()
        if stepped:
            self._step()
        self._embeds.collect(self._engine)                         # finished jobs, left clients
        self.stats = self._engine.stats()
        if self.view is not None:
            self.view.update(self._engine, self.stats, stepped)
        self.wake()
        return stepped

    def _apply(self, command: tuple) -> None:
        verb, ticket = command
        try:
            {"add": self._add, "abort": self._abort, "embed": self._embed}[verb](ticket)
        except Exception as exc:                                   # noqa: BLE001
            # Never let one bad command kill the engine thread: fail that request only.
            log.error("request %s: engine command %s failed: %s", ticket.request_id, verb,
                      traceback.format_exc())
            if verb == "add" and not ticket.is_finished:
                leave_queue(ticket)
                ticket.is_finished = True
                ticket.events.append(Failed(f"engine refused the request: {exc}"))

    def _add(self, ticket: Ticket) -> None:
        if ticket.is_aborted:
            leave_queue(ticket)
            return
        try:
            ticket.engine_id = self._engine.add_request(ticket.request)
        except RequestRefused as exc:              # anything else is a bug: _apply -> Failed (500)
            leave_queue(ticket)
            ticket.is_finished = True
            kind = TooLong if isinstance(exc, PromptTooLong) else Invalid
            ticket.events.append(kind(str(exc)))
            return
        self._live[ticket.engine_id] = ticket
        if self.tracer is not None:
            self.tracer.queued(ticket.engine_id, ticket.request_id, ticket.queued_s)

    def _abort(self, ticket: Ticket) -> None:
        if ticket.engine_id is not None and ticket.engine_id in self._live:
            self._engine.abort(ticket.engine_id)
            del self._live[ticket.engine_id]
            if self.tracer is not None:
                self.tracer.finished(ticket.engine_id, "aborted", self._clock())
        leave_queue(ticket)
        ticket.is_finished = True

    def _embed(self, ticket: EmbedTicket) -> None:
        leave_queue(ticket)                                  # taken off the inbox: slot free
        self._embeds.start(self._engine, ticket)                   # steps pack its inputs

    def _step(self) -> None:
        with self.turn.held():          # the CPU, shared with other engines (compute_turn.py)
            self._step_held()

    def _step_held(self) -> None:
        started_s = self.step_started_s = self._clock()
        try:
            outs = self._engine.step()
        except Exception as exc:                                   # noqa: BLE001
            log.error("engine step failed: %s", traceback.format_exc())
            self.step_started_s = None
            self._fail_all(f"engine step failed: {exc}")
            return
        now = self._clock()
        if self.tracer is not None:
            self.tracer.step(self._engine.last_step, outs, now)
        self.step_started_s = None
        self.estimator.observe_step(now - started_s)
        if self.estimator.mean_service_s == 0.0:        # cold: what the running show so far
            self.estimator.observe_running(max(
                (now - t.scheduled_s for t in self._live.values() if t.scheduled_s is not None),
                default=0.0))
        if self._engine.record_steps:
            self._mark_started(self._engine.last_step, started_s)
        stepped: set[int] = set()               # requests this step has given a token
        for out in outs:
            ticket = self._live.get(out.id)
            if ticket is not None:
                # a scored prompt chunk (PromptLogprobs) carries no token
                gives_token = not isinstance(out, PromptLogprobs) and out.token is not None
                if not ticket.is_scheduled and (isinstance(out, PromptLogprobs) or gives_token):
                    ticket.scheduled_s = started_s
                    if ticket.started_s is None:           # no step record: this step
                        ticket.started_s = started_s
                if gives_token and out.id not in stepped:
                    stepped.add(out.id)
                    if ticket.last_token_s is not None:      # a step's tokens: one gap
                        ticket.token_gaps_s.append(now - ticket.last_token_s)
                self._deliver(ticket, out, now)

    def _mark_started(self, record: StepRecord | None, started_s: float) -> None:
        """Every request in the step's rows (a prefill chunk, a decode) has started: the
        first such step of each is its `started_s`."""
        for row in record.rows if record is not None else ():
            ticket = self._live.get(row.seq_id)
            if ticket is not None and ticket.started_s is None:
                ticket.started_s = started_s

    def _deliver(self, ticket: Ticket, out: TokenOut | PromptLogprobs, now: float) -> None:
        if isinstance(out, PromptLogprobs):     # a scored prefill chunk: scheduled, no token
            ticket.is_scheduled = True
            leave_queue(ticket)
            ticket.events.append(out)
            return
        if out.token is not None:
            ticket.is_scheduled = True
            ticket.first_token_s = ticket.first_token_s or now
            ticket.last_token_s = now
        if out.token is not None or out.finish is not None:
            leave_queue(ticket)
        if out.finish is not None:
            ticket.is_finished = True
            self._live.pop(out.id, None)
            if ticket.scheduled_s is not None:
                self.estimator.observe_service(now - ticket.scheduled_s)
        if out.token is None and out.finish == FINISH_DEADLINE:
            ticket.events.append(expired_event(self.queue.deadline_ms, self.retry_after_s()))
        else:
            ticket.events.append(out)

    def _fail_all(self, message: str) -> None:
        for ticket in list(self._live.values()):
            log.warning("request %s failed: %s", ticket.request_id, message)
            leave_queue(ticket)
            ticket.is_finished = True
            ticket.events.append(Failed(message))
        self._live.clear()
        self._embeds.fail_all(message)
        try:
            self._engine.abort_all()
        except Exception:                                          # noqa: BLE001
            log.error("abort_all failed: %s", traceback.format_exc())

    def _shutdown(self, reason: str) -> None:
        self._fail_all(reason)
        with self._cond:
            inbox, self._inbox, self._closed = self._inbox, [], True
        for command in inbox:
            self._refuse(command, reason)
        if self.tracer is not None:
            self.tracer.close(self._clock())
        self.wake()
