"""The selectors loop over real sockets: disconnects and backpressure, drain and signals, idle
connections (fakes in tests/server/http/loop_harness.py)."""
from __future__ import annotations


import json
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from server.http.limits import HttpLimits
from server.http.protocol import ResponseHead, StreamPoll
from tests.fakes import Clock
from tests.polling import wait_for
from tests.server.http.loop_harness import (REPO, WAIT_S, Client, EchoApp, ScriptedStream,
                                            SelectWatch, request, serving)


# ---- disconnects and backpressure ---------------------------------------------------------

@pytest.mark.parametrize("head_sent", [True, False], ids=["streaming", "waiting-in-queue"])
def test_client_disconnect_cancels_the_stream_at_once(head_sent):
    stream = ScriptedStream(head=ResponseHead(status=200) if head_sent else None)
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        if head_sent:
            client.read_head()
        else:
            assert wait_for(lambda: stream.num_polls >= 1)
        client.close()
        assert stream.cancelled.wait(2.0)            # noticed by reading, not by writing


class Firehose:
    """A stream that always has another 64 KiB ready, until stopped; always due on `clock`."""

    def __init__(self, clock=time.monotonic):
        self.produced_bytes, self.is_stopped, self.clock = 0, False, clock
        self.cancelled = threading.Event()

    def poll(self, now_s):
        if self.is_stopped:
            return StreamPoll(done=True)
        self.produced_bytes += 65536
        return StreamPoll(head=ResponseHead(status=200) if self.produced_bytes == 65536 else None,
                          chunks=[b"z" * 65536])

    def has_output(self):
        return True

    def next_deadline_s(self):
        return self.clock()                           # always due: polled as fast as allowed

    def cancel(self):
        self.cancelled.set()


def test_client_that_does_not_read_does_not_grow_server_memory():
    """The loop's clock is frozen and the stream always due: a loop that kept polling it (or
    spun on the full socket) would never sleep in select; this one sleeps there, waiting
    for the socket, once the send buffer is full."""
    clock, watch = Clock(now_s=100.0), SelectWatch()
    stream = Firehose(clock)
    limits = HttpLimits(max_send_buffer_bytes=256 * 1024)
    with serving(EchoApp({"s": stream}), limits=limits, clock=clock, watch=watch) as (loop, _):
        client = Client(loop.bound_address("api"), rcvbuf=64 * 1024)
        client.send(request(path="/stream/s"))
        assert wait_for(lambda: stream.produced_bytes > 0 and watch.is_waiting())
        produced = stream.produced_bytes                 # stopped: the buffer is full
        assert limits.max_send_buffer_bytes <= produced < 32 * 1024 * 1024
        assert watch.asleep_s() == limits.send_timeout_s     # the one deadline: the send timeout
        assert stream.produced_bytes == produced
        stream.is_stopped = True
        status, _, body = client.read_response()         # reading drains it and resumes
        assert status == 200 and len(body) == stream.produced_bytes
        assert not stream.cancelled.is_set()


def test_client_that_stops_reading_is_dropped_after_the_send_timeout():
    stream = Firehose()
    limits = HttpLimits(max_send_buffer_bytes=64 * 1024, send_timeout_s=0.3)
    with serving(EchoApp({"s": stream}), limits=limits) as (loop, _):
        client = Client(loop.bound_address("api"), rcvbuf=16 * 1024)
        client.send(request(path="/stream/s"))
        assert stream.cancelled.wait(WAIT_S)
        client.close()


class FailingStream:
    def __init__(self, *, fail_after_head):
        self.fail_after_head, self.num_polls = fail_after_head, 0
        self.cancelled = threading.Event()

    def poll(self, now_s):
        self.num_polls += 1
        if self.fail_after_head and self.num_polls == 1:
            return StreamPoll(head=ResponseHead(status=200), chunks=[b"partial"])
        raise RuntimeError("stream bug")

    def has_output(self):
        return True

    def next_deadline_s(self):
        return time.monotonic() + 0.01

    def cancel(self):
        self.cancelled.set()


class UnsureStream(ScriptedStream):
    """A stream whose has_output raises: the wake must still reach it, and the loop go on."""

    def has_output(self):
        raise RuntimeError("has_output bug")


def test_a_stream_whose_has_output_raises_is_polled_and_the_loop_goes_on():
    stream = UnsureStream()
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        client.read_head()
        stream.push(b"still here")
        loop.wake()
        assert client.read_chunk() == b"still here"
        stream.finish()
        loop.wake()
        assert client.read_chunk() == b""


def test_stream_failure_before_head_is_500_and_after_head_closes():
    early, late = FailingStream(fail_after_head=False), FailingStream(fail_after_head=True)
    with serving(EchoApp({"early": early, "late": late})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/early"))
        status, _, body = client.read_response()
        assert status == 500 and json.loads(body)["error"]["code"] == "internal_error"
        assert early.cancelled.is_set()
        client.send(request(path="/stream/late"))          # same connection still works
        assert client.read_head()[0] == 200
        assert client.read_chunk() == b"partial"
        with pytest.raises((EOFError, ConnectionResetError)):
            client.read_chunk()                             # cut short: no zero chunk
        assert late.cancelled.is_set()


# ---- drain and signals --------------------------------------------------------------------

def test_drain_closes_api_listener_finishes_open_stream_and_keeps_health():
    stream = ScriptedStream()
    drained = threading.Event()
    health = EchoApp()
    with serving(EchoApp({"s": stream}), health_app=health, on_drain=drained.set) as (loop, thread):
        api_address, health_address = loop.bound_address("api"), loop.bound_address("health")
        streaming = Client(api_address)
        streaming.send(request(path="/stream/s"))
        streaming.read_head()
        idle = Client(api_address)
        idle.send(request(path="/before"))
        idle.read_response()
        loop.request_drain()
        assert drained.wait(WAIT_S)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(api_address, timeout=1)
        idle.send(request(path="/during"))                 # open connection still answered
        status, fields, _ = idle.read_response()
        assert status == 200 and fields["connection"] == "close"
        probe = Client(health_address)
        probe.send(request(path="/healthz"))
        assert probe.read_response()[0] == 200
        stream.push(b"last words")
        stream.finish()
        loop.wake()
        assert streaming.read_chunk() == b"last words"
        assert streaming.read_chunk() == b""
        thread.join(WAIT_S)
        assert not thread.is_alive()                       # run() returned by itself
        assert not stream.cancelled.is_set()


def test_drain_timeout_cancels_streams_that_do_not_finish():
    stream = ScriptedStream()
    with serving(EchoApp({"s": stream}), drain_timeout_s=0.3) as (loop, thread):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        client.read_head()
        loop.request_drain()
        assert stream.cancelled.wait(WAIT_S)
        thread.join(WAIT_S)
        assert not thread.is_alive()


SIGNAL_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from server.http.loop import EventLoop, Listener
    from server.http.protocol import Response, StreamPoll, ResponseHead
    from server.errors import kind_response

    class Forever:
        def poll(self, now_s): return StreamPoll(head=ResponseHead(status=200))
        def has_output(self): return True
        def next_deadline_s(self): return None
        def cancel(self): print("cancelled", flush=True)

    class App:
        error = staticmethod(kind_response)
        def handle(self, request): return Forever()

    class Health:                 # open through the drain: shows the loop still turns
        error = staticmethod(kind_response)
        def handle(self, request): return Response(status=200, headers=(), body=b"ok")

    loop = EventLoop([Listener("api", "127.0.0.1:0", App(), True),
                      Listener("health", "127.0.0.1:0", Health(), False)], handle_signals=True,
                     on_drain=lambda: print("draining", flush=True))
    print(loop.bound_address("api")[1], loop.bound_address("health")[1], flush=True)
    loop.run()
    print("returned", flush=True)
""")


def test_first_sigterm_drains_and_second_exits_at_once():
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_SCRIPT.format(repo=str(REPO))],
                            stdout=subprocess.PIPE, text=True)
    try:
        port, health_port = map(int, proc.stdout.readline().split())
        client = Client(("127.0.0.1", port))
        client.send(request(path="/stream"))
        client.read_head()                               # a stream that never ends is open
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "draining"
        # an answer after the drain began: the loop went round with the stream still open
        # (each round checks whether the drain is done) and did not return
        health = Client(("127.0.0.1", health_port))
        health.send(request(path="/healthz"))
        assert health.read_response()[0] == 200
        assert proc.poll() is None                       # still waiting for the stream
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=WAIT_S)
        assert out.split() == ["cancelled", "returned"] and proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_handle_signals_off_the_main_thread_installs_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with serving(handle_signals=True) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request())
        assert client.read_response()[0] == 200
        assert signal.getsignal(signal.SIGTERM) is before


# ---- idle connections cost no CPU ---------------------------------------------------------

def test_a_thousand_idle_connections_cost_no_cpu():
    num_connections = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * num_connections + 100               # both ends live in this process
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    clock, watch, limits = Clock(now_s=100.0), SelectWatch(), HttpLimits()
    with serving(limits=limits, clock=clock, watch=watch) as (loop, _):
        clients = [socket.create_connection(loop.bound_address("api")) for _ in range(num_connections)]
        try:
            probe = Client(loop.bound_address("api"))
            probe.send(request(path="/probe"))
            assert probe.read_response()[2] == b"GET /probe "   # all accepted and served
            # the clock is frozen: a loop that sleeps does so until the idle connections'
            # deadline, a fixed number of seconds; a busy loop never sleeps in select
            assert wait_for(watch.is_waiting)
            assert watch.asleep_s() == limits.idle_timeout_s
        finally:
            for sock in clients:
                sock.close()
