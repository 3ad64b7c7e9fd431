"""What the API's threads hand the engine thread, and what they get back: tickets and commands.

A `Ticket` is one generation request as both threads see it: the engine thread appends the
request's `Event`s (server/worker/events.py) to `ticket.events` and keeps its timings; the
loop thread reads them. When the ticket has an `output` (the text layer's side of it,
server/text/client.py), the engine thread hands it the events once per engine step,
right after the step, and the output says whether the request must end now (a stop
string matched, a repeated tool call): that abort comes back as data and the engine
thread applies it before its next step. A ticket without an output (the CLI, tests) keeps
its events for whoever reads them.

The inbox carries four typed commands, one per thing the API can ask: `Add` a generation
(from the pool thread that prepared it), `Abort` one (the loop thread: the client left; a
refused choice's siblings), `Embed` a batch of inputs, `ForgetAdapter` (a LoRA adapter was
unloaded: the engine frees what it keeps for it, its merged weights).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol, Union

from engine.api import GenRequest, LoraAdapter
from server.worker.embedding_jobs import EmbedTicket
from server.worker.events import Event


class TicketOutput(Protocol):
    """The text layer's side of a ticket, called on the engine thread after each step that
    gave the ticket events (and for an ending it gets outside a step)."""

    def take(self, events: deque[Event]) -> bool:
        """Consume `events` (popleft each); True: end the request in the engine now."""
        ...


class Ticket:
    """One generation request as both threads see it."""

    __slots__ = ("request", "request_id", "events", "output", "engine_id", "is_aborted",
                 "is_scheduled", "is_finished", "on_leave_queue", "scheduled_s",
                 "first_token_s", "last_token_s", "queued_s", "started_s", "token_gaps_s")

    def __init__(self, request: GenRequest, on_leave_queue: Callable[[], None] | None,
                 request_id: str = "", output: TicketOutput | None = None):
        self.request = request
        self.request_id = request_id            # X-Request-Id, for the logs
        self.events: deque[Event] = deque()
        self.output = output                    # the text layer's side (None: events kept)
        self.engine_id: int | None = None       # set on the engine thread
        self.is_aborted = False                 # set by `EngineBridge.abort` (API side)
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


@dataclass(frozen=True)
class Add:
    """Queue a generation for the engine (admitted already)."""
    ticket: Ticket


@dataclass(frozen=True)
class Abort:
    """End a generation: a client gone, a stop string, an error elsewhere in its answer."""
    ticket: Ticket


@dataclass(frozen=True)
class Embed:
    """Start an embeddings job (admitted already)."""
    ticket: EmbedTicket


@dataclass(frozen=True)
class ForgetAdapter:
    """A LoRA adapter was unloaded: free its merged weights (`Engine.forget_adapter`)."""
    adapter: LoraAdapter


Command = Union[Add, Abort, Embed, ForgetAdapter]
