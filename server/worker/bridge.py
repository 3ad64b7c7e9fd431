"""The engine thread and the one bounded queue in front of it (docs/CONTRACT.md).

The threads that submit (the pool threads that prepare requests; the loop thread, which
aborts) and the engine thread share exactly three things:

* the **inbox** — typed commands (`Add`, `Abort`, `Embed`, `ForgetAdapter`:
  server/worker/tickets.py) guarded by a Condition; the engine thread drains it between
  steps, so aborts, embeddings and an unloaded adapter's release never race a step;
* one **Ticket per request** — the engine thread appends the request's `Event`s to it and,
  right after each step, hands them to the ticket's `output` (the text layer's side:
  detokenising, stop strings, tool calls). An output may answer "end this request now"
  (a stop string matched): the engine thread aborts it at once, before the next step;
* a **wake callback** — after each turn that produced events the engine thread calls
  `EventLoop.wake()`, and the loop polls the streams that have something to send.

    pool thread / loop thread                  engine thread
    submit(GenRequest) -> inbox: Add    -->    take commands (Add / Abort / Embed)
                                               step() -> ticket.events -> ticket.output
                                               abort what the outputs ended
    stream.poll() <- the text's pieces  <--    publish stats, wake()

Admission is the door of this queue (server/worker/admission.py, `EngineAdmission`):
`submit` and `embed` reserve a slot or raise the 429 at once, from the wait the running and
queued requests make now. The slot is released when the engine first schedules the
request or it ends before that. The engine's waiting list is fed only through here. A
request still unscheduled `QueuePolicy.deadline_ms` after admission is expired by
`Engine.step()` (`FINISH_DEADLINE`); the bridge delivers that as `Expired` (503).

Each outcome crosses the thread boundary as its own event type (server/worker/events.py).
The step trace and the engine view are observers passed in (server/worker/observers.py).
The engine thread formats no documents: the outputs it calls turn tokens into text pieces
(server/text/client.py); the loop thread renders them. Embeddings are engine jobs
packed into the steps; server/worker/embedding_jobs.py hands their vectors back as Python
floats or base64 bytes, so the loop thread never touches numpy.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import replace
from typing import Callable

from engine.api import (FINISH_DEADLINE, Engine, EngineStats, GenRequest, KvSize,
                        LoraAdapter, PromptLogprobs, PromptTooLong, RequestRefused, StepRecord,
                        TokenOut)
from server.worker.admission import (EngineAdmission, EngineLoad, QueuePolicy,
                                     engine_down_error, leave_queue)
from server.worker.arrivals import ArrivalWindow
from server.worker.compute_turn import ComputeTurn
from server.worker.embedding_jobs import EmbedTicket, EmbeddingJobs
from server.worker.events import Event, Failed, Invalid, TooLong, expired_event
from server.worker.observers import EngineWatcher, StepTracer
from server.worker.owned_thread import OwnedThread
from server.worker.tickets import (Abort, Add, Command, Embed, ForgetAdapter, Ticket,
                                   TicketOutput)

log = logging.getLogger("tlserve.bridge")


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
        self.admission = EngineAdmission(queue, clock)
        self.step_started_s: float | None = None    # engine thread: the step in progress
        self.died: str | None = None            # why the engine thread ended abnormally
        self._cond = threading.Condition()
        self._inbox: list[Command] = []
        self._stopping = False
        self._closed = False                    # the engine thread takes no more commands
        self._thread: threading.Thread | None = None
        self._live: dict[int, Ticket] = {}      # engine id -> ticket (engine thread only)
        self._touched: dict[int, Ticket] = {}   # id -> ticket given events this turn (engine thread)
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

    def submit(self, request: GenRequest, *, request_id: str = "",
               output: TicketOutput | None = None) -> Ticket:
        """Admit the request (or raise the 429 ApiError now) and queue it for the engine,
        with the queue deadline counted from this moment. `output`: the text layer's side
        of the ticket, handed its events after each step (None: they stay on the ticket)."""
        self._admit_or_raise()
        queued_s = self._clock()
        deadline_s = queued_s + self.admission.policy.deadline_ms / 1000.0
        ticket = Ticket(replace(request, deadline_s=deadline_s), self.admission.gate.release,
                        request_id, output)
        ticket.queued_s = queued_s
        self._post(Add(ticket))
        return ticket

    def abort(self, ticket: Ticket) -> None:
        """End the request in the engine; a no-op for one already aborted or finished, so
        callers (a cancelled stream, an error) just call it."""
        if ticket.is_aborted or ticket.is_finished:
            return
        ticket.is_aborted = True
        self._post(Abort(ticket))

    def embed(self, inputs: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket:
        """Admit like a generation (429 when full); the slot frees when the engine thread
        takes the command off the inbox."""
        self._admit_or_raise()
        ticket = EmbedTicket(inputs, encoding_format, self.admission.gate.release, request_id)
        self._post(Embed(ticket))
        return ticket

    def forget_adapter(self, adapter: LoraAdapter) -> None:
        """The adapter was unloaded: the engine thread frees its merged weights at its next
        turn (requests still on it run on to their end)."""
        self._post(ForgetAdapter(adapter))

    def load(self) -> EngineLoad:
        """What the engine runs now, for the admission estimate."""
        started = self.step_started_s
        return EngineLoad(running_requests=self.stats.active_sequences,
                          step_running_s=0.0 if started is None else self._clock() - started)

    def retry_after_s(self) -> int:
        """The Retry-After of a refusal now (503 drain, expiry): the wait plus the refused
        clients still out."""
        return self.admission.retry_after_s(self.load())

    def is_healthy(self) -> bool:
        """False once the engine thread has died (started, not stopping, not running)."""
        thread = self._thread
        return self.died is None and (thread is None or thread.is_alive() or self._stopping)

    def _admit_or_raise(self) -> None:
        if not self.is_healthy():
            raise engine_down_error()
        self.admission.admit(self.load())

    def _post(self, command: Command) -> None:
        with self._cond:
            if not self._closed:
                self._inbox.append(command)
                self._cond.notify()
                return
        self._refuse(command, "the engine thread has stopped")   # nobody would take it

    def _refuse(self, command: Command, reason: str) -> None:
        """End a command the engine thread will never run (it stopped or died)."""
        if isinstance(command, ForgetAdapter):
            return                          # nothing waits on it: the engine holds nothing now
        leave_queue(command.ticket)
        if isinstance(command, Embed):
            command.ticket.error, command.ticket.done = reason, True
        elif isinstance(command, Add):      # on the thread that found the inbox closed
            ticket = command.ticket
            ticket.is_finished = True
            ticket.events.append(Failed(reason))
            if ticket.output is not None:
                ticket.output.take(ticket.events)

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

    def _turn(self, commands: list[Command]) -> bool:
        """Apply the commands taken off the inbox, step once if there is work, hand every
        ticket's new events to its output, publish."""
        for command in commands:
            self._apply(command)
        stepped = self._engine.has_work()
        if stepped:
            self._step()
        self._take_outputs()
        self._embeds.collect(self._engine)                         # finished jobs, left clients
        self.stats = self._engine.stats()
        if self.view is not None:
            self.view.update(self._engine, self.stats, stepped)
        self.wake()
        return stepped

    def _emit(self, ticket: Ticket, event: Event) -> None:
        """An event for the ticket's stream; its output takes it after this turn's step."""
        ticket.events.append(event)
        if ticket.output is not None:
            self._touched[id(ticket)] = ticket

    def _take_outputs(self) -> None:
        """The turn's output processing: each touched ticket's output takes its events
        (text, stop strings, tool calls); the requests an output ended are aborted now,
        before the next step computes another token for them."""
        touched, self._touched = self._touched, {}
        for ticket in touched.values():
            try:
                ends = ticket.output.take(ticket.events)
            except Exception:                                      # noqa: BLE001
                log.error("request %s: output processing failed: %s", ticket.request_id,
                          traceback.format_exc())
                ends = True
            if ends and not ticket.is_finished:
                ticket.is_aborted = True
                self._abort(ticket)

    def _apply(self, command: Command) -> None:
        if isinstance(command, ForgetAdapter):
            self._engine.forget_adapter(command.adapter)
            return
        ticket = command.ticket
        try:
            if isinstance(command, Add):
                self._add(ticket)
            elif isinstance(command, Abort):
                self._abort(ticket)
            else:
                self._embed(ticket)
        except Exception as exc:                                   # noqa: BLE001
            # Never let one bad command kill the engine thread: fail that request only.
            log.error("request %s: engine command %s failed: %s", ticket.request_id,
                      type(command).__name__, traceback.format_exc())
            if isinstance(command, Add) and not ticket.is_finished:
                leave_queue(ticket)
                ticket.is_finished = True
                self._emit(ticket, Failed(f"engine refused the request: {exc}"))

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
            self._emit(ticket, kind(str(exc)))
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
        estimator = self.admission.estimator
        estimator.observe_step(now - started_s)
        if estimator.mean_service_s == 0.0:             # cold: what the running show so far
            estimator.observe_running(max(
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
            self._emit(ticket, out)
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
                self.admission.estimator.observe_service(now - ticket.scheduled_s)
        if out.token is None and out.finish == FINISH_DEADLINE:
            self._emit(ticket, expired_event(self.admission.policy.deadline_ms,
                                             self.retry_after_s()))
        else:
            self._emit(ticket, out)

    def _fail_all(self, message: str) -> None:
        for ticket in list(self._live.values()):
            log.warning("request %s failed: %s", ticket.request_id, message)
            leave_queue(ticket)
            ticket.is_finished = True
            self._emit(ticket, Failed(message))
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
        self._take_outputs()
        if self.tracer is not None:
            self.tracer.close(self._clock())
        self.wake()
