"""The drain's deadline on an injected clock: a real SIGTERM starts the drain, and a stream
that never ends is cancelled when the loop's clock reaches drain start + `drain_timeout_s`,
not a moment before and not later. The loop runs on the test's main thread (signals reach
only that thread); a helper thread plays the client and moves the clock."""
from __future__ import annotations

import os
import signal
import threading

from server.http.loop import EventLoop, Listener
from tests.server.http.loop_harness import WAIT_S, Client, EchoApp, ScriptedStream, request

DRAIN_TIMEOUT_S = 30.0          # on the fake clock; the test never waits for it for real
START_S = 1000.0                # the fake clock's reading when SIGTERM arrives
JUST_BEFORE_S = 0.001           # how far short of the deadline the stream must still be live


def test_sigterm_cancels_a_never_ending_stream_exactly_at_drain_timeout():
    handler_before = signal.getsignal(signal.SIGTERM)
    now_s = [START_S]
    stream = ScriptedStream()                    # never finishes by itself
    drained = threading.Event()
    loop = EventLoop([Listener("api", "127.0.0.1:0", EchoApp({"s": stream}), True)],
                     handle_signals=True, drain_timeout_s=DRAIN_TIMEOUT_S,
                     on_drain=drained.set, clock=lambda: now_s[0])
    seen: dict[str, object] = {}

    def one_chunk_through(client: Client, data: bytes) -> None:
        """Push a chunk and read it back: the loop has woken and polled at the clock's time."""
        stream.push(data)
        loop.wake()
        try:
            assert client.read_chunk() == data
        except (EOFError, ConnectionResetError):
            raise AssertionError("the stream was cut before drain_timeout_s had passed") from None

    def client_and_clock() -> None:
        try:
            client = Client(loop.bound_address("api"))
            client.send(request(path="/stream/s"))
            client.read_head()                   # run() is serving: its handlers are installed
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
            os.kill(os.getpid(), signal.SIGTERM)
            assert drained.wait(WAIT_S), "SIGTERM did not start the drain"
            now_s[0] = START_S + DRAIN_TIMEOUT_S - JUST_BEFORE_S
            one_chunk_through(client, b"still")  # this wake's iteration checked the deadline,
            one_chunk_through(client, b"here")   # ... and this one proves the loop went on
            seen["cancelled_before"] = stream.cancelled.is_set()
            now_s[0] = START_S + DRAIN_TIMEOUT_S
            loop.wake()
            seen["cancelled_at"] = stream.cancelled.wait(WAIT_S)
        except BaseException as exc:             # reported on the main thread below
            seen["error"] = exc
        finally:
            if not stream.cancelled.is_set():
                loop.stop()                      # never leave run() blocking the test

    helper = threading.Thread(target=client_and_clock, daemon=True)
    helper.start()
    loop.run()                                   # returns by itself once the drain ends
    helper.join(WAIT_S)
    assert "error" not in seen, seen.get("error")
    assert seen["cancelled_before"] is False, "cancelled before drain_timeout_s had passed"
    assert seen["cancelled_at"] is True, "not cancelled when drain_timeout_s had passed"
    assert signal.getsignal(signal.SIGTERM) is handler_before      # run() put it back
