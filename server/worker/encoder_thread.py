"""The encoder thread: a sentence-embedding model's own thread, queue and admission.

A sentence-embedding model (engine.api's `Encoder`: BERT, no KV cache, no sampling) is
served by an `EncoderThread`, the counterpart of the chat engine's `EngineBridge`:

    loop thread                                   encoder thread
    embed(rows) -> admission (429 + Retry-After)
                -> inbox.append(ticket)     -->   take the next job (its slot freed)
                                                  for each batch of <= max_batch_tokens:
                                                      with the compute turn: one forward
                                                  encode the vectors (floats | base64)
    stream.poll() <- ticket.done  <-- wake() --   ticket.result, wake()

The rows arrive already tokenized and checked (the API does that off the loop), so the
thread only computes. Jobs run first come, first served, one batch at a time: a client
that left is noticed between batches. Each batch takes the process-wide compute turn
(server/worker/compute_turn.py), so a 2,048-input call interleaves with the chat steps
instead of holding the CPU for seconds.

Admission is this model's own (each model has its queue): a call that would wait longer
than the queue deadline (queued tokens / measured tokens per second) or finds the gate
full is a 429 with Retry-After at once.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from engine.api import Encoder
from server.worker.admission import (AdmissionGate, QueuePolicy, engine_down_error, leave_queue,
                                     reserve_or_refusal)
from server.worker.compute_turn import ComputeTurn
from server.worker.embedding_jobs import EmbedTicket, encode_vectors
from server.worker.owned_thread import OwnedThread
from server.worker.waiting import retry_after_s
from server.replies import RawJson, json_bytes

log = logging.getLogger("tlserve.encoder")

# Padded tokens per forward: a chat step waits at most one such forward (the compute turn).
# Measured by bench/shared_cpu.py (16 smol-135m streams, one 2,048-input call, 2 cores):
# 256 -> chat ITL p99 0.16 s, 53 sentences/s; 384 -> p99 0.16 s, 72/s; 512 -> p99 0.49-0.58 s,
# 87/s. 384 keeps the streams' pace at 82% of 512's embedding throughput.
ENCODER_BATCH_TOKENS = 384
PRIOR_TOKENS_PER_S = 2000.0     # the admission estimate's rate before anything was measured
RATE_SMOOTHING = 0.2            # weight of the newest batch in the measured rate


@dataclass(frozen=True)
class EncoderStats:
    """Counters of one encoder thread (published after each job; read by /metrics)."""
    requests_total: int = 0
    inputs_total: int = 0
    tokens_total: int = 0
    batches_total: int = 0
    busy_s_total: float = 0.0          # time spent computing (inside the compute turn)
    queue_depth: int = 0               # calls admitted, not yet taken by the thread
    running: int = 0                   # 1 while a call is being computed


ENCODING_VECTORS = "vectors"     # float32 [H] arrays, for a caller that computes with them


def render_rows(vectors: np.ndarray, encoding_format: str) -> list:
    """A batch's vectors [b, H] as the answer holds them: "float" as each row's JSON text
    (placed verbatim in the document, so the JSON is written in the batch's turn, not in one
    long pass at the end that would hold the GIL against the chat engine), "base64" as
    strings, ENCODING_VECTORS as float32 rows (rerank and score take cosines of them)."""
    if encoding_format == ENCODING_VECTORS:
        return list(vectors.astype(np.float32, copy=False))
    if encoding_format == "float":
        return [RawJson(json_bytes(row)) for row in vectors.astype(np.float32).tolist()]
    return encode_vectors(vectors, encoding_format)


class EncoderThread(OwnedThread):
    """Owns one encoder's thread. Public methods are thread-safe unless noted."""

    def __init__(self, encoder: Encoder, *, model_id: str, queue: QueuePolicy,
                 turn: ComputeTurn | None = None,
                 max_batch_tokens: int = ENCODER_BATCH_TOKENS,
                 clock: Callable[[], float] = time.monotonic):
        self.encoder, self.model_id, self.queue = encoder, model_id, queue
        self.turn = turn or ComputeTurn()
        self.max_batch_tokens = max_batch_tokens
        self._clock = clock
        self.gate = AdmissionGate(queue.capacity_requests)
        self.tokens_per_s = PRIOR_TOKENS_PER_S          # measured on the encoder thread
        self._pending_tokens = 0                        # admitted and not yet computed
        self._cond = threading.Condition()
        self._inbox: deque[EmbedTicket] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.died: str | None = None
        self.stats = EncoderStats()
        self.wake: Callable[[], None] = lambda: None
        self.created = int(time.time())                 # the model card's `created`

    # -- loop-thread side ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"tl-encoder-{self.model_id}",
                                        daemon=True)
        self._thread.start()

    def is_healthy(self) -> bool:
        thread = self._thread
        return self.died is None and (thread is None or thread.is_alive() or self._stopping)

    def expected_wait_s(self) -> float:
        """How long a new call would wait: the tokens ahead of it at the measured rate."""
        return self._pending_tokens / self.tokens_per_s

    def embed(self, rows: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket:
        """Admit the call (or raise its 429 now) and queue it for the encoder thread."""
        if not self.is_healthy():
            raise engine_down_error()
        wait_s = self.expected_wait_s()
        refusal = reserve_or_refusal(self.gate, wait_s, self.queue.deadline_ms,
                                     retry_after_s(wait_s))
        if refusal is not None:
            raise refusal
        ticket = EmbedTicket(rows, encoding_format, self.gate.release, request_id)
        with self._cond:
            self._pending_tokens += sum(map(len, rows))
            self._inbox.append(ticket)
            self._cond.notify()
        return ticket

    # -- encoder-thread side -------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self.run_once(block=True):
                pass
        except BaseException as exc:                                   # noqa: BLE001
            log.critical("encoder thread %s died: %s", self.model_id, traceback.format_exc())
            self.died = f"{type(exc).__name__}: {exc}"
        self._fail_queued("the server is stopping" if self.died is None
                          else f"the encoder thread stopped: {self.died}")

    def run_once(self, block: bool = False) -> bool:
        """Take one call off the inbox and compute it; -> False when stopping (or, not
        blocking, when the inbox was empty). Tests call it on their own thread."""
        with self._cond:
            while block and not self._inbox and not self._stopping:
                self._cond.wait()
            if self._stopping or not self._inbox:
                return False
            ticket = self._inbox.popleft()
        leave_queue(ticket)                            # taken: its admission slot frees
        self._publish(running=1)
        try:
            self._compute(ticket)
        except Exception as exc:                                       # noqa: BLE001
            log.error("request %s: embeddings failed: %s", ticket.request_id,
                      traceback.format_exc())
            ticket.error = f"embedding failed: {exc}"
        finally:
            with self._cond:
                self._pending_tokens -= sum(map(len, ticket.inputs))
            ticket.done = True
            self._publish(running=0)
            self.wake()
        return True

    def _compute(self, ticket: EmbedTicket) -> None:
        """The call's batches, each inside the compute turn; stops early if the client left."""
        rows = ticket.inputs
        rendered: list = [None] * len(rows)             # each input's vector, as answered
        batches = self.encoder.iter_batches(rows, self.max_batch_tokens)
        while not ticket.is_cancelled:
            with self.turn.held():
                started_s = self._clock()
                batch = next(batches, None)
                if batch is not None:                   # encoded here, in the same turn
                    indices, batch_vectors = batch                      # [b], [b, H]
                    for i, row in zip(indices, render_rows(batch_vectors,
                                                           ticket.encoding_format)):
                        rendered[i] = row
                busy_s = self._clock() - started_s
            if batch is None:
                break
            self._measured(sum(len(rows[i]) for i in indices), busy_s)
        if ticket.is_cancelled:
            ticket.error = "cancelled: the client left"
            return
        ticket.result = rendered
        s = self.stats
        self.stats = replace(s, requests_total=s.requests_total + 1,
                                    inputs_total=s.inputs_total + len(rows))

    def _measured(self, tokens: int, busy_s: float) -> None:
        if busy_s > 0:
            rate = tokens / busy_s
            self.tokens_per_s += RATE_SMOOTHING * (rate - self.tokens_per_s)
        s = self.stats
        self.stats = replace(s, tokens_total=s.tokens_total + tokens,
                                    batches_total=s.batches_total + 1,
                                    busy_s_total=s.busy_s_total + busy_s)

    def _publish(self, running: int) -> None:
        self.stats = replace(self.stats, queue_depth=len(self._inbox), running=running)

    def _fail_queued(self, reason: str) -> None:
        with self._cond:
            queued, self._inbox = list(self._inbox), deque()
        for ticket in queued:
            leave_queue(ticket)
            ticket.error, ticket.done = reason, True
        self.wake()
