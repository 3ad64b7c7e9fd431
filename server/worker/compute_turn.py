"""The process-wide compute turn: how the engines of one server share the CPU.

Two cores, several engines (a chat engine stepping, an encoder running batches). Left
alone each would start its BLAS threads at once and both would slow down unpredictably,
or one thread would win the GIL and the cores over and over. Instead every unit of
compute -- one chat step, one encoder batch -- is done while holding the turn, and the
turn is handed out first come, first served (a ticket lock): a chat engine that steps in
a loop queues behind an encoder batch that asked first, and the encoder's next batch queues
behind the chat's next step. So while a long embeddings call runs, every chat step waits
at most one encoder batch, whose size the encoder thread bounds in tokens
(server/worker/encoder_thread.py: `ENCODER_BATCH_TOKENS`): the inter-token gap of the
chat streams is about one step plus one batch, whatever the size of the embeddings call.

A server with one engine pays one uncontended lock per step (microseconds).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class ComputeTurn:
    """A fair (FIFO) lock: `with turn.held(): ...` runs when every earlier asker is done."""

    def __init__(self):
        self._cond = threading.Condition()
        self._next_ticket = 0          # the ticket the next asker draws
        self._serving = 0              # the ticket whose holder may compute now
        self.waiters = 0               # askers queued now (for tests and the engine view)

    def acquire(self) -> None:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self.waiters += 1
            while ticket != self._serving:
                self._cond.wait()
            self.waiters -= 1

    def release(self) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()

    @contextmanager
    def held(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()
