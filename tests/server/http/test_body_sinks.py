"""Bodies a `BodySink` claims (uploads): the parser hands each piece to the sink as it
arrives and keeps none of it, fed at every split; the sink's own limit replaces the usual
one; a body that never completes is discarded; a sink without room pauses the body; a
request the sinks do not claim is read into memory as before."""
from __future__ import annotations

from server.http.http11 import Connection, HttpError
from server.http.limits import HttpLimits
from server.http.connstate import wants_read
from server.http.protocol import Landing, Request, SpooledBody

LIMITS = HttpLimits(max_body_bytes=16)        # small, so "above the usual limit" is cheap
LANDING = Landing()


class MemorySink:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.pieces: list[bytes] = []
        self.finished = self.discarded = False
        self.has_room = True

    def write(self, data: bytes) -> None:
        self.pieces.append(data)

    def finish(self) -> SpooledBody:
        self.finished = True
        return SpooledBody("/spool/x", sum(map(len, self.pieces)), LANDING)

    def discard(self) -> None:
        self.discarded = True


class Sinks:
    """Claims POST /upload, with a sink of `max_bytes`."""

    def __init__(self, max_bytes: int = 1000):
        self.max_bytes = max_bytes
        self.made: list[MemorySink] = []

    def sink_for(self, method, path, headers):
        if (method, path) != ("POST", "/upload"):
            return None
        self.made.append(MemorySink(self.max_bytes))
        return self.made[-1]


def post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def feed(conn: Connection, raw: bytes, step: int):
    """`raw` in pieces of `step` bytes; the first event that is not a wait."""
    for at in range(0, len(raw), step):
        conn.receive_data(raw[at:at + step])
        event = conn.next_event()
        if isinstance(event, (Request, HttpError)):
            return event
    return conn.next_event()


def test_a_claimed_body_goes_to_the_sink_in_pieces_at_every_split():
    body = bytes(range(256)) * 2                  # 512 bytes: far above the usual 16
    for step in (1, 3, 64, len(body) + 100):
        sinks = Sinks()
        conn = Connection(limits=LIMITS, sinks=sinks)
        request = feed(conn, post("/upload", body), step)
        assert isinstance(request, Request), request
        assert request.body == b"" and request.spooled == SpooledBody("/spool/x", len(body), LANDING)
        [sink] = sinks.made
        assert b"".join(sink.pieces) == body and sink.finished and not sink.discarded
        assert conn.buffered_bytes == 0


def test_the_sinks_limit_replaces_the_usual_one():
    sinks = Sinks(max_bytes=100)
    event = feed(Connection(limits=LIMITS, sinks=sinks), post("/upload", b"x" * 101), 1000)
    assert isinstance(event, HttpError) and event.kind == "body_too_large"
    assert sinks.made[0].discarded and sinks.made[0].pieces == []


def test_a_body_cut_off_is_discarded():
    sinks = Sinks()
    conn = Connection(limits=LIMITS, sinks=sinks)
    conn.receive_data(post("/upload", b"y" * 50)[:-10])
    assert not isinstance(conn.next_event(), (Request, HttpError))
    conn.abandon()                                # the loop closes the connection
    assert sinks.made[0].discarded and not sinks.made[0].finished
    sinks = Sinks()
    conn = Connection(limits=LIMITS, sinks=sinks)
    conn.receive_data(post("/upload", b"y" * 50)[:-10])
    conn.next_event()
    conn.receive_data(b"")                        # the client closed mid-body
    assert isinstance(conn.next_event(), HttpError) and sinks.made[0].discarded


def test_an_unclaimed_body_is_read_into_memory_under_the_usual_limit():
    sinks = Sinks()
    request = feed(Connection(limits=LIMITS, sinks=sinks), post("/other", b"z" * 16), 5)
    assert isinstance(request, Request) and request.body == b"z" * 16
    assert request.spooled is None and sinks.made == []
    refused = feed(Connection(limits=LIMITS, sinks=sinks), post("/other", b"z" * 17), 100)
    assert isinstance(refused, HttpError) and refused.kind == "body_too_large"


class Conn:
    """What `wants_read` looks at besides the parser."""
    is_lingering = False

    def __init__(self, http):
        self.http = http


def test_a_sink_without_room_pauses_its_body_until_it_has_room():
    sinks = Sinks()
    conn = Connection(limits=LIMITS, sinks=sinks)
    conn.receive_data(post("/upload", b"w" * 40)[:-20])
    assert not isinstance(conn.next_event(), (Request, HttpError))
    [sink] = sinks.made
    assert not conn.is_body_paused and wants_read(Conn(conn), LIMITS)
    sink.has_room = False                         # its pieces wait for the disk
    assert conn.is_body_paused and not wants_read(Conn(conn), LIMITS)
    sink.has_room = True
    assert wants_read(Conn(conn), LIMITS)
    conn.receive_data(b"w" * 20)
    assert isinstance(conn.next_event(), Request)
    assert not conn.is_body_paused                # the body is whole: the sink is let go
    other = Connection(limits=LIMITS, sinks=sinks)
    other.receive_data(post("/other", b"z" * 10)[:-5])
    other.next_event()
    assert not other.is_body_paused and wants_read(Conn(other), LIMITS)
