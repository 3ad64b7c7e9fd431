"""Waiting for something another thread or process does, without sleeping a fixed time."""
from __future__ import annotations

import time


def wait_for(predicate, timeout_s: float = 5.0, interval_s: float = 0.01):
    """Poll `predicate()` until it is truthy (return that value) or `timeout_s` passes
    (return its last value, so `assert wait_for(...)` fails with a falsy result)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    return predicate()
