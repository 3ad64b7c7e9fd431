"""What an endpoint's handler hands back: every outcome it can have, as declared types.

A handler runs in two halves (server/api/app.py): it parses, checks and prepares (off the
loop for the heavy routes), and the loop thread finishes. What crosses between the halves
is a `Prepared` value, one of

    Response   the whole answer, ready to send (`/v1/models`, `/v1/tokenize`, a page)
    Launch     work for the engine: its `start` runs on the loop thread, where admission
               and the tickets live (429 now if the queue is full), and gives the Stream

or an `ApiError` raised (the OpenAI error document); anything else is a bug, a logged 500.
The app matches these types by name (`isinstance`), never by shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from server.http.protocol import Response, Stream


@dataclass(frozen=True)
class Launch:
    """A request prepared for the engine, not yet admitted."""
    start: Callable[[], Stream]     # admission -> the stream; loop thread only


Prepared = Union[Response, Launch]
