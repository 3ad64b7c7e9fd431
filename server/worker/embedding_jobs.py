"""Embeddings calls on the engine thread: tickets in, engine jobs, vectors out.

An embeddings call is admitted like a generation (server/worker/bridge.py) and becomes an
`EmbedTicket`. On the engine thread `EmbeddingJobs.start` hands its inputs to the engine
as one job (`Engine.add_embedding`): the engine packs them into its steps as prefill-only
rows beside running generations. After each step `collect` takes the finished jobs'
vectors [n, d] and turns them into what the response needs (Python floats or base64 of
little-endian float32, prepared here so the loop thread never touches numpy). A ticket
whose client left is cancelled; on a failed step or a stop every job ends with an error.
"""
from __future__ import annotations

import base64
import logging
from typing import Callable

import numpy as np

from engine.api import Engine, RequestRefused

log = logging.getLogger("tlserve.bridge")


class EmbedTicket:
    """One embeddings call: token-id lists in, vectors out (engine thread fills it)."""

    __slots__ = ("inputs", "encoding_format", "request_id", "result", "error", "done",
                 "on_leave_queue", "is_cancelled")

    def __init__(self, inputs: list[list[int]], encoding_format: str,
                 on_leave_queue: Callable[[], None] | None = None, request_id: str = ""):
        self.inputs = inputs
        self.encoding_format = encoding_format
        self.request_id = request_id
        self.on_leave_queue = on_leave_queue    # releases the admission slot, once
        self.result: list | None = None         # list[float] or base64 str per input
        self.error: str | None = None
        self.done = False
        self.is_cancelled = False               # set on the loop thread: the client left


def encode_vectors(vectors: np.ndarray, encoding_format: str) -> list:
    """[n, d] float32 -> one list of floats, or one base64 string, per input."""
    if encoding_format == "base64":
        little = vectors.astype("<f4")                                 # [n, d] little-endian f32
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    return vectors.astype("float32").tolist()


class EmbeddingJobs:
    """The engine thread's live embeddings jobs (engine job id -> ticket)."""

    def __init__(self):
        self._live: dict[int, EmbedTicket] = {}

    def start(self, engine: Engine, ticket: EmbedTicket) -> None:
        try:
            job_id = engine.add_embedding(ticket.inputs)
        except RequestRefused as exc:
            ticket.error, ticket.done = f"embedding refused: {exc}", True
            return
        self._live[job_id] = ticket

    def collect(self, engine: Engine) -> None:
        """Deliver finished jobs; cancel those whose client has left."""
        for done in engine.take_embeddings():
            ticket = self._live.pop(done.job_id, None)
            if ticket is None:
                continue
            try:
                ticket.result = encode_vectors(done.vectors, ticket.encoding_format)
            except Exception as exc:                               # noqa: BLE001
                log.error("request %s: embeddings failed: %s", ticket.request_id, exc)
                ticket.error = f"embedding failed: {exc}"
            ticket.done = True
        for job_id, ticket in list(self._live.items()):
            if ticket.is_cancelled:
                engine.cancel_embedding(job_id)
                del self._live[job_id]
                ticket.done = True

    def fail_all(self, message: str) -> None:
        for ticket in self._live.values():
            ticket.error, ticket.done = message, True
        self._live.clear()
