"""SIGTERM and SIGINT for the loop: the first asks for a drain, the second for an exit.

A Python signal handler runs between bytecodes of the main thread, which is usually blocked
in `select()`. `signal.set_wakeup_fd` makes the interpreter write a byte to the loop's
wake-up socket when a signal arrives, so `select()` returns at once and the loop sees the flag
the handler set. The handler itself only flips flags: all real work happens in the loop.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)   # Kubernetes stops with SIGTERM; Ctrl-C is SIGINT


def install_stop_signals(wake_fd: int, on_signal: Callable[[], None]) -> Callable[[], None]:
    """Route STOP_SIGNALS to `on_signal()` and wake `wake_fd`; return a function that undoes it.

    Python delivers signals only to the main thread: elsewhere (a loop run on a background
    thread, as in tests) this installs nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        on_signal()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)

    def restore() -> None:
        signal.set_wakeup_fd(previous_fd)
        for sig, old in previous.items():
            signal.signal(sig, old)
    return restore
