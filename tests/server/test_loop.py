"""The selectors loop over real sockets on 127.0.0.1 port 0, with small fake Apps and Streams."""
from __future__ import annotations

import collections
import json
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from server.limits import HttpLimits
from server.loop import EventLoop, Listener, parse_address
from server.protocol import Response, ResponseHead, StreamPoll
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 5.0                       # generous upper bound for anything that should be quick


# ---- fakes --------------------------------------------------------------------------------

class EchoApp:
    """Answers every request with a body naming it; /boom raises; /stream/<name> streams."""

    def __init__(self, streams=None):
        self.streams = streams or {}
        self.seen = []

    def handle(self, request):
        self.seen.append(request)
        if request.path == "/boom":
            raise RuntimeError("app bug")
        if request.path.startswith("/stream/"):
            return self.streams[request.path[len("/stream/"):]]
        body = f"{request.method} {request.path} {request.body.decode()}".encode()
        return Response(status=200, headers=(("Content-Type", "text/plain"),), body=body)


class ScriptedStream:
    """A stream fed from other threads: push() chunks, finish(); records polls and cancel."""

    def __init__(self, *, head=ResponseHead(status=200), deadline_step_s=None):
        self.pending = collections.deque()
        self.head = head
        self.head_sent = False
        self.is_done = False
        self.cancelled = threading.Event()
        self.num_polls = 0
        self.deadline_step_s = deadline_step_s
        self.send_head_first = head is not None

    def push(self, data: bytes):
        self.pending.append(data)

    def finish(self):
        self.pending.append(None)

    def poll(self, now_s):
        self.num_polls += 1
        result = StreamPoll()
        if self.send_head_first and not self.head_sent:
            result.head, self.head_sent = self.head, True
        while self.pending:
            item = self.pending.popleft()
            if item is None:
                result.done = True
                break
            if not self.head_sent:
                result.head, self.head_sent = self.head or ResponseHead(status=200), True
            result.chunks.append(item)
        return result

    def next_deadline_s(self):
        return None if self.deadline_step_s is None else time.monotonic() + self.deadline_step_s

    def cancel(self):
        self.cancelled.set()


class Client:
    """A blocking raw-socket HTTP client that reads exactly what the server framed."""

    def __init__(self, address, *, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(WAIT_S)
        self.sock.connect(address)
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("server closed the connection")
        self.buf += data

    def read_until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            self._fill()
        out, self.buf = self.buf.split(sep, 1)
        return out

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        lines = self.read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        fields = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        return status, fields

    def read_chunk(self) -> bytes:
        size = int(self.read_until(b"\r\n"), 16)
        data = self.read_exact(size)
        assert self.read_exact(2) == b"\r\n"
        return data

    def read_response(self):
        status, fields = self.read_head()
        if "content-length" in fields:
            return status, fields, self.read_exact(int(fields["content-length"]))
        if fields.get("transfer-encoding") == "chunked":
            body = b""
            while chunk := self.read_chunk():      # the last chunk "0\r\n\r\n" (no trailers)
                body += chunk
            return status, fields, body
        return status, fields, self.read_to_eof()

    def read_to_eof(self) -> bytes:
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return out

    def is_closed_by_server(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def request(method="GET", path="/", body=b"", extra=b""):
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    return b"%s %s HTTP/1.1\r\nHost: t\r\n%s%s\r\n%s" % (
        method.encode(), path.encode(), length, extra, body)


@contextmanager
def serving(app=None, *, limits=HttpLimits(), health_app=None, **kwargs):
    listeners = [Listener("api", "127.0.0.1:0", app or EchoApp(), True)]
    if health_app is not None:
        listeners.append(Listener("health", "127.0.0.1:0", health_app, False))
    loop = EventLoop(listeners, limits=limits, **kwargs)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield loop, thread
    finally:
        loop.stop()
        thread.join(WAIT_S)
        assert not thread.is_alive()


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
        time.sleep(0.2)
        assert [r.path for r in app.seen] == ["/a", "/stream/s"]   # /c waits its turn
        stream.push(b"streamed")
        stream.finish()
        loop.wake()
        assert client.read_response()[2] == b"streamed"
        assert client.read_response()[2] == b"POST /c body"
        assert client.read_response()[2] == b"POST /d hi"


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
                time.sleep(0.005)
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
                if i % 50 == 0:
                    time.sleep(0.001)
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
        started = time.monotonic()
        status, _, body = client.read_response()
        assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
        assert client.is_closed_by_server()
        assert time.monotonic() - started < WAIT_S


def test_slow_body_sender_gets_408():
    with serving(limits=HttpLimits(body_timeout_s=0.3)) as (loop, _):
        client = Client(loop.bound_address("api"))
        client.send(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        assert client.read_response()[0] == 408


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
    """Wraps a listening socket; accept() fails for 0.3 s like a process out of descriptors."""

    def __init__(self, sock):
        self.sock, self.num_accepts, self.failing_until = sock, 0, None

    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def accept(self):
        self.num_accepts += 1
        if self.failing_until is None:
            self.failing_until = time.monotonic() + 0.3
        if time.monotonic() < self.failing_until:
            raise OSError(24, "Too many open files")
        return self.sock.accept()

    def close(self):
        self.sock.close()


def test_failing_accept_pauses_instead_of_spinning_then_recovers():
    loop = EventLoop([Listener("api", "127.0.0.1:0", EchoApp(), True)])
    state = loop._listeners["api"]
    state.sock = flaky = FlakyListenSocket(state.sock)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        client = Client(loop.bound_address("api"))
        client.send(request(path="/late"))
        assert client.read_response()[2] == b"GET /late "
        assert flaky.num_accepts < 10                       # paused, not retried in a spin
    finally:
        loop.stop()
        thread.join(WAIT_S)


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
    """A stream that always has another 64 KiB ready, until stopped."""

    def __init__(self):
        self.produced_bytes, self.is_stopped = 0, False
        self.cancelled = threading.Event()

    def poll(self, now_s):
        if self.is_stopped:
            return StreamPoll(done=True)
        self.produced_bytes += 65536
        return StreamPoll(head=ResponseHead(status=200) if self.produced_bytes == 65536 else None,
                          chunks=[b"z" * 65536])

    def next_deadline_s(self):
        return time.monotonic()                       # always due: polled as fast as allowed

    def cancel(self):
        self.cancelled.set()


def test_client_that_does_not_read_does_not_grow_server_memory():
    stream = Firehose()
    limits = HttpLimits(max_send_buffer_bytes=256 * 1024)
    with serving(EchoApp({"s": stream}), limits=limits) as (loop, _):
        client = Client(loop.bound_address("api"), rcvbuf=64 * 1024)
        client.send(request(path="/stream/s"))
        time.sleep(0.5)
        produced = stream.produced_bytes
        cpu_before, wall_before = time.process_time(), time.monotonic()
        time.sleep(0.5)
        cpu_s, wall_s = time.process_time() - cpu_before, time.monotonic() - wall_before
        assert stream.produced_bytes == produced         # stopped: the buffer is full
        assert cpu_s < 0.5 * wall_s                      # and waiting, not spinning
        assert produced < 32 * 1024 * 1024
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

    def next_deadline_s(self):
        return time.monotonic() + 0.01

    def cancel(self):
        self.cancelled.set()


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
    from server.loop import EventLoop, Listener
    from server.protocol import StreamPoll, ResponseHead

    class Forever:
        def poll(self, now_s): return StreamPoll(head=ResponseHead(status=200))
        def next_deadline_s(self): return None
        def cancel(self): print("cancelled", flush=True)

    class App:
        def handle(self, request): return Forever()

    loop = EventLoop([Listener("api", "127.0.0.1:0", App(), True)], handle_signals=True,
                     on_drain=lambda: print("draining", flush=True))
    print(loop.bound_address("api")[1], flush=True)
    loop.run()
    print("returned", flush=True)
""")


def test_first_sigterm_drains_and_second_exits_at_once():
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_SCRIPT.format(repo=str(REPO))],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        client = Client(("127.0.0.1", port))
        client.send(request(path="/stream"))
        client.read_head()                               # a stream that never ends is open
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "draining"
        time.sleep(0.2)
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
    with serving() as (loop, _):
        clients = [socket.create_connection(loop.bound_address("api")) for _ in range(num_connections)]
        try:
            probe = Client(loop.bound_address("api"))
            probe.send(request(path="/probe"))
            assert probe.read_response()[2] == b"GET /probe "   # all accepted and served
            time.sleep(0.1)
            cpu_before, wall_before = time.process_time(), time.monotonic()
            time.sleep(1.0)
            cpu_s = time.process_time() - cpu_before
            wall_s = time.monotonic() - wall_before
            assert cpu_s < 0.25 * wall_s, f"{cpu_s:.3f} s CPU in {wall_s:.3f} s: a busy loop?"
        finally:
            for sock in clients:
                sock.close()
