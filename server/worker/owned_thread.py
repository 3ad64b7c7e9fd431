"""The lifecycle the models' own threads share (the chat engine's bridge, each encoder's
thread): one daemon thread that waits on a condition between turns, and a stop that sets
the flag the thread checks, wakes it and joins it."""
from __future__ import annotations

import threading

STOP_JOIN_S = 10.0              # how long `stop` waits for the thread to finish its turn


class OwnedThread:
    """A mixin: the class sets `_cond`, `_stopping` and `_thread` (None until started)."""

    _cond: threading.Condition
    _stopping: bool
    _thread: threading.Thread | None

    def stop(self, timeout_s: float = STOP_JOIN_S) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
