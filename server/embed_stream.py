"""The answer of `/v1/embeddings`: wait for the engine thread's job, then one JSON document.

The engine thread runs the inputs (packed into its steps, server/embedding_jobs.py) and
hands back the vectors already in the asked encoding; the document is built once, here.
"""
from __future__ import annotations

from typing import Callable

from server import documents as docs
from server.documents import JSON_CONTENT_TYPE, json_bytes
from server.embedding_jobs import EmbedTicket
from server.errors import ApiError
from server.http.protocol import ResponseHead, StreamPoll


class EmbedStream:
    """Waits for the engine to run the inputs (packed into its steps), then answers once."""

    def __init__(self, *, ticket: EmbedTicket, model_id: str, prompt_tokens: int,
                 headers: tuple[tuple[str, str], ...], on_status: Callable[[str, int], None]):
        self.ticket, self.model_id, self.prompt_tokens = ticket, model_id, prompt_tokens
        self.headers, self.on_status = headers, on_status
        self.done = False

    def access_fields(self) -> dict:
        """What the access log (server/access.py) records of this request."""
        return {"model": self.model_id, "prompt_tokens": self.prompt_tokens,
                "error": self.ticket.error if self.ticket.done else None}

    def poll(self, now_s: float) -> StreamPoll:
        out = StreamPoll()
        if self.done or not self.ticket.done:
            out.done = self.done
            return out
        if self.ticket.error is not None:
            err = ApiError("internal_error", self.ticket.error)
            status, body = err.status, json_bytes(err.document())
        else:
            doc = docs.embeddings(self.model_id, self.ticket.result, self.prompt_tokens)
            status, body = 200, json_bytes(doc)
        out.head = ResponseHead(status=status, headers=(JSON_CONTENT_TYPE,) + self.headers,
                                content_length=len(body))
        out.chunks = [body]
        out.done = self.done = True
        self.on_status("embeddings", status)
        return out

    def next_deadline_s(self) -> float | None:
        return None

    def cancel(self) -> None:
        self.ticket.is_cancelled = True         # the engine thread drops the job
        self.done = True
