"""The selectors loop over real sockets on 127.0.0.1 port 0: addresses, requests and responses,
errors, limits and timeouts (fakes in tests/server/http/loop_harness.py)."""
from __future__ import annotations


import json
import socket
import threading

import pytest

from server.http.limits import HttpLimits
from server.http.loop import ACCEPT_RETRY_S, EventLoop, Listener, parse_address
from server.http.protocol import ResponseHead
from tests.fakes import Clock
from tests.polling import wait_for
from tests.server.http.loop_harness import (WAIT_S, Client, EchoApp, ScriptedStream, SelectWatch,
                                            request, serving)

FLAKY_S = 0.3                   # how long FlakyListenSocket's accept fails, on the loop's clock


# ---- addresses ----------------------------------------------------------------------------

def test_listen_addresses_parse_and_port_zero_resolves_before_run():
    assert parse_address(":8000") == ("", 8000)
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError):
        parse_address("localhost")
    loop = EventLoop([Listener("api", "127.0.0.1:0", EchoApp(), True)])
    try:
        host, port = loop.bound_address("api")
        assert host == "127.0.0.1" and port > 0
    finally:
        loop.stop()
        loop.run()                               # returns at once and closes everything
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1)


# ---- requests and responses ---------------------------------------------------------------

def test_keep_alive_serves_sequential_requests_on_one_connection():
    with serving() as (loop, _):
        client = Client(loop.bound_address("api"))
        for i in range(5):
            client.send(request("POST", f"/n{i}", body=b"x" * i))
            status, fields, body = client.read_response()
            assert (status, body) == (200, f"POST /n{i} {'x' * i}".encode())
            assert fields["connection"] == "keep-alive"


def test_pipelined_requests_are_answered_in_order_even_behind_a_stream():
    stream = ScriptedStream(head=None)
    app = EchoApp({"s": stream})
    with serving(app) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/a") + request(path="/stream/s") + request("POST", "/c", b"body")
                    + b"POST /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
        assert client.read_response()[2] == b"GET /a "
        assert wait_for(lambda: len(app.seen) == 2)
        # One whole loop iteration after the bytes of /c and /d were readable: a wake polls
        # the stream after that iteration's reads, so a poll seen means /c had its chance.
        polls = stream.num_polls
        loop.wake()
        assert wait_for(lambda: stream.num_polls > polls)
        assert [r.path for r in app.seen] == ["/a", "/stream/s"]   # /c waits its turn
        stream.push(b"streamed")
        stream.finish()
        loop.wake()
        assert client.read_response()[2] == b"streamed"
        assert client.read_response()[2] == b"POST /c body"
        assert client.read_response()[2] == b"POST /d hi"


class OutputStream(ScriptedStream):
    """Says it has output only when a chunk or its end is pushed (a stream of a generation
    whose request got no token this step says False)."""

    def has_output(self):
        return bool(self.pending)


def test_a_wake_polls_only_the_streams_with_output():
    busy, quiet = OutputStream(), OutputStream()
    with serving(EchoApp({"busy": busy, "quiet": quiet})) as (loop, _):
        busy_client, quiet_client = Client(loop.bound_address("api")), Client(loop.bound_address("api"))
        busy_client.send(request(path="/stream/busy"))
        quiet_client.send(request(path="/stream/quiet"))
        busy_client.read_head()                  # each head: that stream's first poll is done
        quiet_client.read_head()
        assert (busy.num_polls, quiet.num_polls) == (1, 1)
        busy.push(b"token")
        loop.wake()
        assert busy_client.read_chunk() == b"token"
        # A request sent after the chunk arrived is answered in a later iteration than the
        # wake's: by its answer, the wake's polls are all done.
        other = Client(loop.bound_address("api"))
        other.send(request(path="/after"))
        assert other.read_response()[0] == 200
        assert (busy.num_polls, quiet.num_polls) == (2, 1)
        quiet.finish()
        loop.wake()
        assert quiet_client.read_chunk() == b""  # once it has its end, the wake polls it
        busy.finish()
        loop.wake()
        assert busy_client.read_chunk() == b""


def test_many_pipelined_requests_in_one_write_all_answered():
    with serving(limits=HttpLimits(max_pipelined_requests=4)) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"".join(request(path=f"/{i}") for i in range(50)))
        bodies = [client.read_response()[2] for _ in range(50)]
        assert bodies == [f"GET /{i} ".encode() for i in range(50)]


def test_stream_is_written_incrementally_each_chunk_before_the_next_exists():
    stream = ScriptedStream(head=ResponseHead(status=200, headers=(("Content-Type", "text/event-stream"),)))
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        status, fields = client.read_head()
        assert status == 200 and fields["transfer-encoding"] == "chunked"
        for i in range(3):
            stream.push(b"data: %d\n\n" % i)
            loop.wake()
            assert client.read_chunk() == b"data: %d\n\n" % i   # arrives before the next push
        stream.finish()
        loop.wake()
        assert client.read_chunk() == b""
        client.send(request(path="/after"))                     # connection still usable
        assert client.read_response()[2] == b"GET /after "


def test_wake_from_another_thread_delivers_without_any_deadline():
    stream = ScriptedStream()
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        client.read_head()

        def producer():
            for i in range(20):
                stream.push(b"%d," % i)
                loop.wake()
                # taken by a poll: the loop goes back to sleep before the next wake
                assert wait_for(lambda: not stream.pending)
            stream.finish()
            loop.wake()

        thread = threading.Thread(target=producer)
        thread.start()
        body = b""
        while chunk := client.read_chunk():
            body += chunk
        thread.join()
        assert body == b"".join(b"%d," % i for i in range(20))


def test_wakes_racing_with_the_loop_are_never_lost():
    streams = {str(i): ScriptedStream() for i in range(4)}
    with serving(EchoApp(streams)) as (loop, _):
        clients = []
        for name in streams:
            client = Client(loop.bound_address("api"))
            client.send(request(path=f"/stream/{name}"))
            client.read_head()
            clients.append(client)

        def producer(stream):
            for i in range(300):
                stream.push(b"%d," % i)
                loop.wake()
                if i % 50 == 0:             # now and then the loop catches up and sleeps
                    assert wait_for(lambda: not stream.pending)
            stream.finish()
            loop.wake()

        threads = [threading.Thread(target=producer, args=(s,)) for s in streams.values()]
        for thread in threads:
            thread.start()
        for client in clients:                      # every byte arrives, none waits forever
            body = b""
            while chunk := client.read_chunk():
                body += chunk
            assert body == b"".join(b"%d," % i for i in range(300))
        for thread in threads:
            thread.join()


def test_stream_deadline_polls_it_without_a_wake():
    stream = ScriptedStream(deadline_step_s=0.05)
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/stream/s"))
        client.read_head()
        stream.push(b"ping")                      # no wake(): only the deadline finds it
        assert client.read_chunk() == b"ping"


def test_http10_client_gets_close_delimited_stream_and_closed_plain_response():
    stream = ScriptedStream()
    with serving(EchoApp({"s": stream})) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"GET /plain HTTP/1.0\r\n\r\n")
        status, fields, body = client.read_response()
        assert (fields["connection"], body) == ("close", b"GET /plain ")
        assert client.is_closed_by_server()
        client = Client(loop.bound_address("api"))
        client.send(b"GET /stream/s HTTP/1.0\r\n\r\n")
        stream.push(b"abc")
        stream.push(b"def")
        stream.finish()
        loop.wake()
        status, fields, body = client.read_response()
        assert "transfer-encoding" not in fields and body == b"abcdef"


def test_expect_continue_over_the_socket():
    with serving() as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert client.read_until(b"\r\n\r\n") == b"HTTP/1.1 100 Continue"
        client.send(b"data")
        assert client.read_response()[2] == b"POST /e data"


def test_app_exception_is_500_and_the_loop_keeps_serving():
    with serving() as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request(path="/boom"))
        status, _, body = client.read_response()
        assert status == 500 and json.loads(body)["error"]["code"] == "internal_error"
        client.send(request(path="/fine"))
        assert client.read_response()[:1] == (200,)


def test_stall_meter_records_the_longest_iteration_of_callbacks():
    clock = Clock(now_s=100.0)         # the loop's clock: frozen unless the app moves it

    class SlowApp(EchoApp):
        def handle(self, request):
            if request.path == "/slow":
                clock.now_s += 0.25                  # a handler that blocks the loop 250 ms
            return super().handle(request)

    with serving(SlowApp(), clock=clock) as (loop, _):
        assert loop.stall.max_s == 0.0
        client = Client(loop.bound_address("api"))
        client.send(request(path="/slow"))
        assert client.read_response()[0] == 200
        client.send(request(path="/fast"))           # a later iteration: the slow one is noted
        assert client.read_response()[0] == 200
        assert loop.stall.max_s == pytest.approx(0.25)
        assert 0.0 < loop.stall.max_cpu_s < 0.25        # the app's 250 ms were not CPU


# ---- errors, limits and timeouts ----------------------------------------------------------

@pytest.mark.parametrize("raw, status", [
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 300 + b"\r\n\r\n", 431),
    (b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n", 501),
])
def test_bad_request_gets_its_status_then_close(raw, status):
    limits = HttpLimits(max_header_bytes=256, max_body_bytes=100)
    with serving(limits=limits) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(raw)
        got, fields, body = client.read_response()
        assert got == status and fields["connection"] == "close"
        assert "error" in json.loads(body)
        assert client.is_closed_by_server()


def test_slow_header_sender_gets_408_and_is_closed():
    with serving(limits=HttpLimits(header_timeout_s=0.3)) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"GET / HTTP/1.1\r\nHost: slow")
        status, _, body = client.read_response()     # the client's socket gives up at WAIT_S
        assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
        assert client.is_closed_by_server()


def test_slow_body_sender_gets_408():
    with serving(limits=HttpLimits(body_timeout_s=0.3)) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        assert client.read_response()[0] == 408


def test_transport_errors_on_the_messages_path_take_anthropics_shape():
    """The head named /v1/messages: a slow body's 408 and an oversized body's 413 are
    Anthropic's error document; a head that never arrived keeps the OpenAI one."""
    with serving(limits=HttpLimits(body_timeout_s=0.3, max_body_bytes=100)) as (loop, _):
        slow = Client(loop.bound_address("api"))
        slow.send(b"POST /v1/messages HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        status, _, body = slow.read_response()
        assert status == 408 and json.loads(body) == {
            "type": "error", "error": {"type": "timeout_error",
                                       "message": "request not received in time"}}
        big = Client(loop.bound_address("api"))
        big.send(b"POST /v1/messages/count_tokens HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
        status, _, body = big.read_response()
        assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large"
        assert json.loads(body)["type"] == "error"
        other = Client(loop.bound_address("api"))
        other.send(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
        status, _, body = other.read_response()
        assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"


def test_idle_keep_alive_connection_is_closed_silently():
    with serving(limits=HttpLimits(idle_timeout_s=0.3)) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(request())
        client.read_response()
        assert client.is_closed_by_server() and client.buf == b""
        fresh = Client(loop.bound_address("api"))
        assert fresh.is_closed_by_server()       # a connection that never sent anything


def test_max_connections_holds_newcomers_until_one_closes():
    with serving(limits=HttpLimits(max_connections=2)) as (loop, _):
        first, second = Client(loop.bound_address("api")), Client(loop.bound_address("api"))
        for client in (first, second):
            client.send(request())
            client.read_response()
        third = Client(loop.bound_address("api"))   # accepted by the kernel backlog only
        third.send(request(path="/third"))
        third.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            third.read_response()
        first.close()
        third.sock.settimeout(WAIT_S)
        assert third.read_response()[2] == b"GET /third "


class FlakyListenSocket:
    """Wraps a listening socket; accept() fails for FLAKY_S of `clock` like a process out of
    descriptors."""

    def __init__(self, sock, clock):
        self.sock, self.clock, self.num_accepts, self.failing_until = sock, clock, 0, None

    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def accept(self):
        self.num_accepts += 1
        if self.failing_until is None:
            self.failing_until = self.clock() + FLAKY_S
        if self.clock() < self.failing_until:
            raise OSError(24, "Too many open files")
        return self.sock.accept()

    def close(self):
        self.sock.close()


def test_failing_accept_pauses_instead_of_spinning_then_recovers():
    """On a frozen clock: one failed accept, then the loop sleeps until its retry time (not
    a spin); moved past it (and past the fault), it accepts again and answers."""
    clock, watch = Clock(now_s=100.0), SelectWatch()
    loop = EventLoop([Listener("api", "127.0.0.1:0", EchoApp(), True)], clock=clock)
    state = loop._listeners["api"]
    state.sock = flaky = FlakyListenSocket(state.sock, clock)
    watch.attach(loop)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        client = Client(loop.bound_address("api"))
        client.send(request(path="/late"))
        assert wait_for(lambda: flaky.num_accepts == 1 and watch.asleep_s() == ACCEPT_RETRY_S)
        clock.advance(max(ACCEPT_RETRY_S, FLAKY_S))
        loop.wake()
        assert client.read_response()[2] == b"GET /late "
        # paused once, not retried in a spin: the failure, the client, the empty backlog
        assert flaky.num_accepts == 3
    finally:
        loop.stop()
        thread.join(WAIT_S)
