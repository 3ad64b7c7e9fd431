"""The fakes the unit tests share: engines the bridge can drive without a model, a manual
clock, bridges that record or never run, a table tokenizer, and a token-out shorthand.

Every fake or helper that more than one test module uses lives here (or in a helper module
beside its tests, such as tests/server/http/loop_harness.py): a test module never imports
another test module (tests/test_layout.py checks it)."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np

from engine.api import (FINISH_LENGTH, FINISH_STOP, EngineStats, GenRequest, PromptTooLong,
                        PromptLogprobs, TokenOut)
from engine.core.embedding import EmbedDone
from server.offloop.pool import OffLoopStream, outcome_of
from server.worker.admission import QueuePolicy
from server.worker.bridge import EngineBridge
from server.worker.tickets import Add, Embed, Ticket

STEP_S = 0.05                   # what one SlotEngine step takes on the manual clock
ANSWER_TOKENS = 48              # a SlotEngine answer stops here (EOS)
IDLE_BRIDGE_DEADLINE_MS = 1000  # an IdleBridge's queue deadline (it never runs anyway)
PERMIT_WAIT_S = 30.0            # a PacedSteps step waits this long for its permit, then fails
PREDICTION_REJECTED_TOKENS = 2  # what PredictionCounts reports rejected per finished request
EMOJI_TABLE = {1: b"he", 2: b"llo", 3: b"\xf0\x9f", 4: b"\x98\x80", 9: b"</s>"}


class Clock:
    """A manual clock: `clock()` reads `now_s`; a test (or a fake engine) moves it on."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


def bridge_for(engine, *, capacity: int = 8, deadline_ms: int = 30_000, **kw) -> EngineBridge:
    return EngineBridge(engine, queue=QueuePolicy(capacity_requests=capacity,
                                                  deadline_ms=deadline_ms), **kw)


class FakeEngine:
    """Emits prompt[-1] + 1, +2, ... one token per step per request; refuses past running_limit."""

    def __init__(self, *, running_limit: int = 8):
        self.seqs: dict[int, list] = {}
        self.aborted: list[int] = []
        self.next_id = 0
        self.running_limit = running_limit
        self.jobs: list[EmbedDone] = []          # embeddings finished, not yet taken
        self.next_job = 0
        self.forgotten: list = []                 # adapters `forget_adapter` was told of

    def add_request(self, req: GenRequest) -> int:
        if len(self.seqs) >= self.running_limit:
            raise PromptTooLong("no room")
        self.seqs[self.next_id] = [req, 0]
        self.next_id += 1
        return self.next_id - 1

    def abort(self, rid: int) -> None:
        if self.seqs.pop(rid, None) is not None:
            self.aborted.append(rid)

    def abort_all(self) -> None:
        for rid in list(self.seqs):
            self.abort(rid)

    def has_work(self) -> bool:
        return bool(self.seqs)

    def step(self) -> list[TokenOut]:
        outs = []
        for rid, entry in list(self.seqs.items()):
            req, n = entry
            entry[1] = n + 1
            finish = FINISH_LENGTH if n + 1 >= req.max_tokens else None
            outs.append(TokenOut(id=rid, token=req.prompt[-1] + n + 1, finish=finish))
            if finish:
                del self.seqs[rid]
        return outs

    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=len(self.seqs))

    def embed(self, inputs):
        return np.array([[float(len(x)), 0.5] for x in inputs], dtype=np.float32)

    def add_embedding(self, inputs) -> int:
        """A job finished at once: its vectors wait for `take_embeddings`."""
        self.next_job += 1
        self.jobs.append(EmbedDone(self.next_job, self.embed(inputs)))
        return self.next_job

    def take_embeddings(self) -> list:
        done, self.jobs = self.jobs, []
        return done

    def cancel_embedding(self, job_id: int) -> None:
        pass

    def forget_adapter(self, adapter) -> None:
        self.forgotten.append(adapter)


class SlotEngine:
    """`slots` sequences run at once, the rest wait in order; a step takes `step_s` of the
    manual clock and gives every running sequence one token; an answer ends at ANSWER_TOKENS."""

    def __init__(self, clock: Clock, slots: int, step_s: float = STEP_S):
        self.clock, self.slots, self.step_s = clock, slots, step_s
        self.waiting: list[int] = []
        self.running: dict[int, int] = {}          # engine id -> tokens made
        self.next_id = 0

    def add_request(self, request: GenRequest) -> int:
        self.next_id += 1
        self.waiting.append(self.next_id)
        return self.next_id

    def abort(self, rid: int) -> None:
        self.running.pop(rid, None)
        if rid in self.waiting:
            self.waiting.remove(rid)

    def abort_all(self) -> None:
        self.waiting.clear()
        self.running.clear()

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[TokenOut]:
        while self.waiting and len(self.running) < self.slots:
            self.running[self.waiting.pop(0)] = 0
        self.clock.advance(self.step_s)
        outs = []
        for rid in list(self.running):
            self.running[rid] += 1
            done = self.running[rid] >= ANSWER_TOKENS
            outs.append(TokenOut(id=rid, token=1, finish=FINISH_STOP if done else None))
            if done:
                del self.running[rid]
        return outs

    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=len(self.running))

    def take_embeddings(self) -> list:
        return []


class WrappedEngine:
    """An engine seen through a wrapper (server/serve.py's EngineWrapper seam): whatever the
    wrapper does not define goes to the engine, attributes the bridge sets included."""

    def __init__(self, engine):
        object.__setattr__(self, "_engine", engine)

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:                                       # e.g. the bridge's `record_steps`
            setattr(self._engine, name, value)


class StepDelay(WrappedEngine):
    """Each step takes `delay_s` longer, as a slower model's would: requests run long enough
    for an end-to-end test to watch them run and queue. The time is spent inside the step,
    before its outputs exist, so the bridge measures it and publishes a coherent state after
    it (a pause between steps would let the loop see a finished answer beside stale stats).
    Not a synchronisation: the tests still wait on what they observe."""

    def __init__(self, engine, delay_s: float):
        super().__init__(engine)
        self._delay_s = delay_s

    def step(self):
        outs = self._engine.step()
        time.sleep(self._delay_s)                   # the work of a slower model, not a sync
        return outs


def step_delay(delay_s: float):
    """The EngineWrapper that slows every step by `delay_s` (for `spawn`/`main`)."""
    return lambda engine: StepDelay(engine, delay_s)


class ScriptedAnswers(WrappedEngine):
    """Every request is answered with the same token ids, one per step, the last with
    FINISH_STOP; the model's forward never runs. So an end-to-end test gets exactly the text
    it needs (a model thinking, say) through the real server's tokenizer, template and
    text layer. `requests` holds the GenRequests it was given, in order."""

    def __init__(self, engine, script: tuple[int, ...]):
        super().__init__(engine)
        self._script = tuple(script)
        self._made: dict[int, int] = {}          # engine id -> tokens sent
        self._requests: list[GenRequest] = []

    @property
    def requests(self) -> list[GenRequest]:
        return self._requests

    def add_request(self, req: GenRequest) -> int:
        self._requests.append(req)
        self._made[len(self._requests)] = 0
        return len(self._requests)

    def abort(self, rid: int) -> None:
        self._made.pop(rid, None)

    def abort_all(self) -> None:
        self._made.clear()

    def has_work(self) -> bool:
        return bool(self._made)

    def step(self) -> list[TokenOut]:
        outs = []
        for rid, made in list(self._made.items()):
            last = made + 1 >= len(self._script)
            outs.append(TokenOut(id=rid, token=self._script[made],
                                 finish=FINISH_STOP if last else None))
            self._made[rid] = made + 1
            if last:
                del self._made[rid]
        return outs

    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=len(self._made))


class PredictionCounts(WrappedEngine):
    """Reports what a speculating engine would for a request with a `prediction`: on its
    finishing TokenOut, `len(prediction)` accepted and PREDICTION_REJECTED_TOKENS rejected
    tokens; in `stats()`, the "prediction" draft source's running totals. The answers are
    the wrapped engine's. `requests` holds the GenRequests it was given, in order."""

    def __init__(self, engine):
        super().__init__(engine)
        self._predictions: dict[int, tuple[int, ...]] = {}     # engine id -> prediction
        self._requests: list[GenRequest] = []
        self._drafted_tokens = self._accepted_tokens = 0

    @property
    def requests(self) -> list[GenRequest]:
        return self._requests

    def add_request(self, req: GenRequest) -> int:
        rid = self._engine.add_request(req)
        self._requests.append(req)
        if req.prediction:
            self._predictions[rid] = req.prediction
        return rid

    def step(self) -> list[TokenOut]:
        return [self._counted(out) for out in self._engine.step()]

    def _counted(self, out: TokenOut) -> TokenOut:
        if out.finish is None or out.id not in self._predictions:
            return out
        accepted = len(self._predictions.pop(out.id))
        self._accepted_tokens += accepted
        self._drafted_tokens += accepted + PREDICTION_REJECTED_TOKENS
        return replace(out, accepted_prediction_tokens=accepted,
                       rejected_prediction_tokens=PREDICTION_REJECTED_TOKENS)

    def stats(self) -> EngineStats:
        return replace(self._engine.stats(), spec_by_source=(
            ("prediction", self._drafted_tokens, self._accepted_tokens),))


class PacedSteps(WrappedEngine):
    """Each step waits for a permit the test hands out: the engine thread steps exactly as
    often as the test says, so "the request is still queued" holds until the test moves on."""

    def __init__(self, engine):
        super().__init__(engine)
        self._permits = threading.Semaphore(0)

    def permit(self, steps: int = 1) -> None:
        self._permits.release(steps)

    def step(self):
        if not self._permits.acquire(timeout=PERMIT_WAIT_S):
            raise AssertionError(f"no step permitted within {PERMIT_WAIT_S} s")
        return self._engine.step()


class FeedingBridge:
    """The engine thread's side of a generation, by hand: `submit` makes the ticket (with
    the text layer's output), `feed` delivers events as the bridge does after a step (an
    ending marks the ticket finished; an output that ends the request aborts it), `abort`
    is the real one's no-op rule for an ended ticket. `aborted`: every abort that would
    reach the engine."""

    def __init__(self):
        self.aborted = []

    def submit(self, request, *, request_id="", output=None):
        return Ticket(request, None, request_id, output)

    def abort(self, ticket):
        if ticket.is_aborted or ticket.is_finished:
            return
        ticket.is_aborted = True
        self.aborted.append(ticket)

    def feed(self, ticket, *events):
        for event in events:
            if not isinstance(event, (TokenOut, PromptLogprobs)) or (
                    isinstance(event, TokenOut) and event.finish is not None):
                ticket.is_finished = True
            ticket.events.append(event)
        if ticket.output.take(ticket.events):
            self.abort(ticket)


class FakeServed:
    """What `EngineClient.generate` reads of a served model: its tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


class StatsOnly:
    def stats(self) -> EngineStats:
        return EngineStats()


class IdleBridge(EngineBridge):
    """A bridge whose engine thread never runs: whatever is admitted stays queued (kept:
    `embedded` the embeddings inputs, `added` the generation requests)."""

    def __init__(self, capacity: int):
        super().__init__(StatsOnly(), queue=QueuePolicy(capacity_requests=capacity,
                                                        deadline_ms=IDLE_BRIDGE_DEADLINE_MS))
        self.embedded = []
        self.added = []

    def _post(self, command):
        if isinstance(command, Embed):
            self.embedded.append(command.ticket.inputs)
        elif isinstance(command, Add):
            self.added.append(command.ticket.request)
        super()._post(command)


class FakeTokenizer:
    """Token id -> bytes from a table; by default 3 and 4 split one emoji and 9 is the EOS."""

    def __init__(self, table: dict[int, bytes] | None = None):
        self.table = EMOJI_TABLE if table is None else table

    def token_bytes(self, token: int) -> bytes:
        return self.table[token]


def tok(token, finish=None, logprob=0.0, top=()) -> TokenOut:
    """One engine output of request 0."""
    return TokenOut(id=0, token=token, finish=finish, logprob=logprob, top_logprobs=top)


class ManualOffLoop:
    """An OffLoop whose work runs when the test says so, on the test's thread."""

    def __init__(self):
        self.jobs = []

    def run(self, work, finish):
        stream = OffLoopStream(finish)
        self.jobs.append((stream, work))
        return stream

    def finish_all(self):
        for stream, work in self.jobs:
            stream.deliver(outcome_of(work))
