"""The engine thread with a fake engine: commands, dispatch, aborts, admission, deadlines."""
from __future__ import annotations

import base64
import struct
import time

import numpy as np

import pytest

from engine.api import (FINISH_DEADLINE, FINISH_LENGTH, EngineStats, GenRequest, PromptTooLong,
                        TokenOut)
from engine.core.embedding import EmbedDone
from server.worker.admission import QueuePolicy
from server.worker.bridge import EngineBridge
from server.worker.events import Expired, Failed, TooLong, expired_event
from server.errors import ApiError
from tests.polling import wait_for


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


def test_tokens_reach_the_ticket_and_release_the_slot():
    engine = FakeEngine()
    bridge = bridge_for(engine, capacity=1)
    gate = bridge.gate
    wakes = []
    bridge.wake = lambda: wakes.append(1)
    bridge.start()
    try:
        assert gate.waiting == 0                      # submit reserves the one slot
        ticket = bridge.submit(GenRequest(prompt=(10,), max_tokens=3))
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 3)
        assert [e.token for e in ticket.events] == [11, 12, 13]
        assert ticket.events[-1].finish == FINISH_LENGTH
        assert gate.waiting == 0 and wakes
        assert ticket.scheduled_s is not None and ticket.first_token_s is not None
    finally:
        bridge.stop()


def test_abort_reaches_the_engine():
    engine = FakeEngine()
    bridge = bridge_for(engine, step_delay_s=0.01)
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=10_000))
        assert wait_for(lambda: len(ticket.events) > 0)
        bridge.abort(ticket)
        assert wait_for(lambda: engine.aborted == [0])
        assert wait_for(lambda: bridge.stats.active_sequences == 0)
    finally:
        bridge.stop()


def test_engine_refusal_becomes_refused_and_frees_the_slot():
    engine = FakeEngine(running_limit=0)
    bridge = bridge_for(engine, capacity=2)
    gate = bridge.gate
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,)))
        assert wait_for(lambda: len(ticket.events) == 1)
        assert ticket.events[0] == TooLong("no room") and gate.waiting == 0
    finally:
        bridge.stop()


def test_an_engine_bug_in_add_request_is_a_failure_not_a_refusal():
    """A bare ValueError from the engine is a bug (500), never a client error (400)."""
    class Buggy(FakeEngine):
        def add_request(self, req):
            raise ValueError("bug")
    bridge = bridge_for(Buggy(), capacity=1)
    gate = bridge.gate
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,)))
        assert wait_for(lambda: len(ticket.events) == 1)
        assert isinstance(ticket.events[0], Failed) and gate.waiting == 0
    finally:
        bridge.stop()


def test_engine_deadline_event_reaches_the_ticket_and_frees_the_slot():
    """The engine expires unscheduled requests itself (Engine.step -> FINISH_DEADLINE); the
    bridge only delivers that event. The real engine path: tests/e2e/test_faults.py."""
    class NeverSchedules(FakeEngine):
        def step(self):                  # like Engine.step: expire past-deadline waiters
            now, outs = time.monotonic(), []
            for rid, (req, _) in list(self.seqs.items()):
                if now > req.deadline_s:
                    del self.seqs[rid]
                    outs.append(TokenOut(id=rid, token=None, finish=FINISH_DEADLINE))
            return outs
    engine = NeverSchedules()
    bridge = bridge_for(engine, capacity=1, deadline_ms=50)     # the bridge sets deadline_s
    gate = bridge.gate
    bridge.start()
    try:
        assert gate.waiting == 0
        ticket = bridge.submit(GenRequest(prompt=(1,)))
        assert ticket.request.deadline_s is not None
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 1)
        # the engine's FINISH_DEADLINE TokenOut crosses the boundary as Expired (503)
        assert ticket.events[0] == expired_event(50) and isinstance(ticket.events[0], Expired)
        assert ticket.events[0].error().status == 503
        assert gate.waiting == 0 and not engine.seqs
        assert engine.aborted == []                     # the bridge did not abort it again
    finally:
        bridge.stop()


def test_embeddings_run_on_the_engine_thread_in_both_formats():
    class SignedEmbeddings(FakeEngine):
        def embed(self, inputs):
            return np.array([[1.0, -2.5]] * len(inputs), dtype=np.float32)
    bridge = bridge_for(FakeEngine())
    signed = bridge_for(SignedEmbeddings())
    bridge.start()
    signed.start()
    try:
        floats = bridge.embed([[1, 2, 3], [4]], "float")
        b64 = bridge.embed([[1, 2, 3]], "base64")
        negative = signed.embed([[1]], "base64")
        assert wait_for(lambda: floats.done and b64.done and negative.done)
        assert floats.result == [[3.0, 0.5], [1.0, 0.5]]
        assert struct.unpack("<2f", base64.b64decode(b64.result[0])) == (3.0, 0.5)
        # little-endian float32, the format the official client decodes by default
        assert struct.unpack("<2f", base64.b64decode(negative.result[0])) == (1.0, -2.5)
    finally:
        bridge.stop()
        signed.stop()


def test_an_embedding_frees_its_admission_slot_when_the_engine_takes_it():
    bridge = bridge_for(FakeEngine(), capacity=1)
    gate = bridge.gate
    assert gate.waiting == 0
    ticket = bridge.embed([[1, 2]], "float")
    assert gate.waiting == 1 and not gate.try_reserve()       # queued: the slot is held
    bridge.start()
    try:
        assert wait_for(lambda: ticket.done)
        assert ticket.result == [[2.0, 0.5]] and gate.waiting == 0
    finally:
        bridge.stop()


def test_abort_of_a_finished_ticket_posts_nothing():
    bridge = bridge_for(FakeEngine())               # not started: commands stay in the inbox
    ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=1))
    ticket.is_finished = True
    bridge.abort(ticket)
    assert [verb for verb, _ in bridge._inbox] == ["add"] and not ticket.is_aborted
    ticket.is_finished = False
    bridge.abort(ticket)
    bridge.abort(ticket)                            # once only
    assert [verb for verb, _ in bridge._inbox] == ["add", "abort"] and ticket.is_aborted


def test_submit_and_embed_answer_429_when_the_queue_is_full():
    """The bridge is the one queue: a full gate refuses at once, and nothing is queued."""
    bridge = bridge_for(FakeEngine(), capacity=1)    # not started: the slot stays held
    bridge.submit(GenRequest(prompt=(1,)))
    for attempt in (lambda: bridge.submit(GenRequest(prompt=(1,))),
                    lambda: bridge.embed([[1]], "float")):
        with pytest.raises(ApiError) as info:
            attempt()
        assert info.value.status == 429 and ("Retry-After", "1") in info.value.headers
    assert [verb for verb, _ in bridge._inbox] == ["add"]


def test_aborting_a_queued_request_frees_its_admission_slot():
    from engine.api import EngineConfig, SamplingParams
    from engine.core.engine import Engine
    from tests.engine.core.engine_models import succ_model
    engine = Engine(succ_model(), EngineConfig(max_num_seqs=1))     # one runs, the next waits
    bridge = bridge_for(engine, capacity=1, step_delay_s=0.01)
    endless = SamplingParams(temperature=0.0, ignore_eos=True)
    bridge.start()
    try:
        running = bridge.submit(GenRequest(prompt=(1,), params=endless, max_tokens=60))
        assert wait_for(lambda: running.is_scheduled and bridge.gate.waiting == 0)
        queued = bridge.submit(GenRequest(prompt=(2,), params=endless, max_tokens=2))
        assert wait_for(lambda: queued.engine_id is not None)     # in the engine's queue
        assert bridge.gate.waiting == 1 and not queued.is_scheduled
        bridge.abort(queued)
        assert wait_for(lambda: bridge.gate.waiting == 0)
        again = bridge.submit(GenRequest(prompt=(3,), params=endless, max_tokens=2))
        assert wait_for(lambda: again.is_finished)                # the slot was free again
        bridge.abort(running)
    finally:
        bridge.stop()
