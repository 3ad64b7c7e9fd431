"""The encoder thread and the compute turn, with a fake encoder and injected clocks.

Admission per model (429 + Retry-After when the gate is full or the wait too long), batches
bounded in tokens and each computed inside the compute turn, a client that left noticed
between batches, vectors in the caller's order; the turn handed out first come, first
served, and the chat engine's step taken inside it too.
"""
from __future__ import annotations

import base64
import threading

import numpy as np
import pytest

from engine.api import GenRequest
from server.errors import ApiError
from server.worker.admission import QueuePolicy
from server.worker.compute_turn import ComputeTurn
from server.replies import RawJson, json_bytes, json_bytes_piecewise
from server.worker.encoder_thread import ENCODING_VECTORS, EncoderThread
from tests.fakes import Clock, FakeEngine, bridge_for
from tests.polling import wait_for

HIDDEN = 3


class FakeEncoder:
    """Vectors [first id, length, batch number]; batches of rows in input order, each at
    most max_batch_tokens (rows x longest), recorded with whether the turn was held."""
    hidden_size = HIDDEN

    def __init__(self, turn: ComputeTurn, clock: Clock | None = None, batch_s: float = 0.0):
        self.turn, self.clock, self.batch_s = turn, clock, batch_s
        self.batches: list[tuple[list[int], bool]] = []     # (indices, turn held by someone)
        self.after_batch = lambda: None

    def iter_batches(self, rows, max_batch_tokens):
        batch: list[int] = []
        for i, row in enumerate(rows):
            if batch and (len(batch) + 1) * max(len(rows[j]) for j in batch + [i]) > max_batch_tokens:
                yield self._run(rows, batch)
                batch = []
            batch.append(i)
        if batch:
            yield self._run(rows, batch)

    def _run(self, rows, batch):
        held = self.turn._serving < self.turn._next_ticket         # someone holds the turn
        self.batches.append((list(batch), held))
        if self.clock is not None:
            self.clock.advance(self.batch_s)
        vectors = np.array([[rows[i][0], len(rows[i]), len(self.batches)] for i in batch],
                           dtype=np.float32)
        self.after_batch()
        return np.array(batch), vectors


def enc_thread_for(capacity: int = 4, deadline_ms: int = 30_000, max_batch_tokens: int = 8,
                   clock: Clock | None = None, batch_s: float = 0.0):
    turn = ComputeTurn()
    encoder = FakeEncoder(turn, clock, batch_s)
    enc_thread = EncoderThread(encoder, model_id="enc", turn=turn,
                               max_batch_tokens=max_batch_tokens,
                               queue=QueuePolicy(capacity_requests=capacity,
                                                 deadline_ms=deadline_ms),
                               clock=clock or Clock())
    return enc_thread, encoder


def test_batches_are_bounded_in_tokens_computed_in_the_turn_and_returned_in_order():
    enc_thread, encoder = enc_thread_for(max_batch_tokens=8)
    rows = [[10, 1, 1], [20], [30, 1, 1, 1, 1, 1], [40, 1]]
    ticket = enc_thread.embed(rows, ENCODING_VECTORS)
    assert enc_thread.run_once()
    assert ticket.done and ticket.error is None
    assert [b for b, _ in encoder.batches] == [[0, 1], [2], [3]]      # 2x3, 1x6, 1x2 tokens
    assert all(held for _, held in encoder.batches)
    assert [v[:2].tolist() for v in ticket.result] == [[10, 3], [20, 1], [30, 6], [40, 2]]
    assert enc_thread.stats.tokens_total == 12 and enc_thread.stats.batches_total == 3
    assert enc_thread.stats.requests_total == 1 and enc_thread.gate.waiting == 0


def test_a_full_queue_is_a_429_with_retry_after_for_this_model_only():
    enc_thread, _ = enc_thread_for(capacity=1)
    other, _ = enc_thread_for(capacity=1)
    enc_thread.embed([[1]], "float")
    with pytest.raises(ApiError) as info:
        enc_thread.embed([[2]], "float")
    assert info.value.status == 429 and dict(info.value.headers)["Retry-After"] == "1"
    other.embed([[3]], "float")                          # another model's queue is its own
    assert enc_thread.run_once() and enc_thread.gate.waiting == 0
    enc_thread.embed([[4]], "float")                     # taken off the inbox: the slot is free


def test_a_wait_past_the_deadline_is_a_429_at_once_from_the_measured_rate():
    clock = Clock()
    enc_thread, _ = enc_thread_for(deadline_ms=2_000, clock=clock, batch_s=1.0,
                                   max_batch_tokens=1000)
    enc_thread.embed([[1] * 100], "float")
    assert enc_thread.run_once()             # measured: 100 tokens in 1 s, about 100 tokens/s
    enc_thread.tokens_per_s = 100.0          # (the smoothing's first step, made exact)
    enc_thread.embed([[1] * 150], "float")   # nothing ahead: admitted
    enc_thread.embed([[1] * 100], "float")   # 1.5 s ahead: admitted
    with pytest.raises(ApiError) as info:
        enc_thread.embed([[1]], "float")     # 2.5 s ahead > the 2 s deadline
    assert info.value.status == 429 and int(dict(info.value.headers)["Retry-After"]) >= 2


def test_a_client_that_left_is_noticed_between_batches():
    enc_thread, encoder = enc_thread_for(max_batch_tokens=1)
    ticket = enc_thread.embed([[1], [2], [3], [4]], "float")
    encoder.after_batch = lambda: setattr(ticket, "is_cancelled", True)
    assert enc_thread.run_once()
    assert len(encoder.batches) == 1 and ticket.done and ticket.result is None


def test_float_results_are_each_row_s_json_placed_verbatim_in_the_document():
    enc_thread, _ = enc_thread_for()
    ticket = enc_thread.embed([[7, 1], [5]], "float")
    enc_thread.run_once()
    assert all(isinstance(row, RawJson) for row in ticket.result)
    assert json_bytes_piecewise({"data": [{"embedding": r} for r in ticket.result]}) == \
        json_bytes({"data": [{"embedding": [7.0, 2.0, 1.0]}, {"embedding": [5.0, 1.0, 1.0]}]})


def test_base64_results_are_little_endian_float32():
    enc_thread, _ = enc_thread_for()
    ticket = enc_thread.embed([[7, 1]], "base64")
    enc_thread.run_once()
    assert np.frombuffer(base64.b64decode(ticket.result[0]), "<f4").tolist()[:2] == [7.0, 2.0]


def test_the_turn_is_first_come_first_served():
    turn = ComputeTurn()
    order: list[str] = []
    turn.acquire()                                       # the test holds the CPU

    def ask(name: str) -> threading.Thread:
        def run():
            with turn.held():
                order.append(name)
        thread = threading.Thread(target=run)
        waiting = turn.waiters
        thread.start()
        assert wait_for(lambda: turn.waiters == waiting + 1)    # queued before the next
        return thread
    threads = [ask(name) for name in ("encoder", "chat", "encoder again")]
    turn.release()
    for thread in threads:
        thread.join(5)
    assert order == ["encoder", "chat", "encoder again"]


def test_the_chat_engine_steps_only_inside_the_turn():
    turn = ComputeTurn()
    bridge = bridge_for(FakeEngine(), turn=turn)
    bridge.start()
    try:
        turn.acquire()                                   # an encoder batch in progress
        ticket = bridge.submit(GenRequest(prompt=(10,), max_tokens=2))
        assert wait_for(lambda: turn.waiters == 1)       # the engine thread waits its turn
        assert not ticket.events
        turn.release()
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 2)
    finally:
        bridge.stop()
