"""Fakes and a socket client for the loop tests: small Apps, scripted Streams, `serving()`."""
from __future__ import annotations


import collections
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from server.errors import kind_response
from server.http.limits import HttpLimits
from server.http.loop import EventLoop, Listener
from server.http.protocol import Response, ResponseHead, StreamPoll

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 5.0                       # generous upper bound for anything that should be quick


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

    error = staticmethod(kind_response)      # the server's own error documents


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

    def has_output(self):
        return True              # polled on every wake: the tests that count polls rely on it

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


AWAKE = "awake"                    # SelectWatch.asleep_s() while the loop is not in select


class SelectWatch:
    """Wraps a loop's selector before it runs and tells whether the loop sleeps in select now,
    and for how long it may: with a frozen injected clock that is a fixed number, so "the
    loop waits instead of spinning" is seen as a state, not measured as CPU over wall time."""

    def __init__(self):
        self._selector = None
        self._lock = threading.Lock()
        self._asleep_s = AWAKE                      # the timeout of the select in progress

    def attach(self, loop) -> None:
        """Before `loop.run()`: every select of the loop goes through this watch."""
        self._selector, loop._selector = loop._selector, self

    def select(self, timeout=None):
        with self._lock:
            self._asleep_s = timeout
        try:
            return self._selector.select(timeout)
        finally:
            with self._lock:
                self._asleep_s = AWAKE

    def asleep_s(self):
        """AWAKE, or the timeout of the select the loop sleeps in (None: no deadline)."""
        with self._lock:
            return self._asleep_s

    def is_waiting(self) -> bool:
        """In select with a timeout that is not zero: waiting for a socket or a deadline."""
        return self.asleep_s() not in (AWAKE, 0.0)

    def __getattr__(self, name):
        return getattr(self._selector, name)


def request(method="GET", path="/", body=b"", extra=b""):
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    return b"%s %s HTTP/1.1\r\nHost: t\r\n%s%s\r\n%s" % (
        method.encode(), path.encode(), length, extra, body)


@contextmanager
def serving(app=None, *, limits=HttpLimits(), health_app=None, watch=None, sinks=None,
            **kwargs):
    """A loop on a thread over 127.0.0.1:0; `watch` (a SelectWatch) sees its selects;
    `sinks` claim the API listener's uploads."""
    listeners = [Listener("api", "127.0.0.1:0", app or EchoApp(), True, sinks=sinks)]
    if health_app is not None:
        listeners.append(Listener("health", "127.0.0.1:0", health_app, False))
    loop = EventLoop(listeners, limits=limits, **kwargs)
    if watch is not None:
        watch.attach(loop)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield loop, thread
    finally:
        loop.stop()
        thread.join(WAIT_S)
        assert not thread.is_alive()
