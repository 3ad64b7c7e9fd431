"""A cheap closed-loop load client: one thread, non-blocking sockets, `selectors`, raw HTTP/1.1.

C connections each send streaming chat requests back to back (keep-alive; a new connection
only when the server closes one). A server may close a keep-alive connection just as the next
request goes out on it (llama-server does): a request whose connection ends before any byte
of its answer arrived is sent again, once, on a new connection (`StreamRecord.resent`; its
`sent_s` stays the first send, so the lost time counts); a second such end is a failure. Each answer is de-chunked and cut into SSE events as the
bytes arrive; an event is only searched (a regex, no JSON parse), and every event that carries
text is timestamped at its `recv`. The final usage chunk (`stream_options.include_usage`)
gives a stream's real token count, so a chunk carrying several tokens (speculation) still
counts them all. No per-stream threads, no per-chunk JSON: the client stays a small fraction
of one core, so it does not take the server's time (bench/load_sweep.py prints how small).

The window: a warm-up (at least `warmup_s` and until every connection has seen a token) is
not counted; then `duration_s` of load (or `requests` requests, all counted), after which the
connections are closed and the server aborts what is left. Tokens count where their events
fall inside the window; TTFT is measured on requests sent inside it; ITL is every gap between
two arrivals of text of one stream inside it (text events that came in one `recv`, e.g. the
tokens of one speculative step, are one arrival: the gap a reader sees).
"""
from __future__ import annotations

import re
import selectors
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

RECV_BYTES = 256 * 1024
RESENDS_MAX = 1                  # sends again of a request whose connection closed unanswered
SELECT_TICK_S = 0.25
WARMUP_CAP_S = 600.0             # the warm-up ends by then even if a connection saw no token
# a text event: "content" followed by a non-empty string ("" and null are role/finish chunks)
TEXT_EVENT = re.compile(rb'"(?:content|text)"\s*:\s*"(?!")')
COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of `values`; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


@dataclass
class StreamRecord:
    """One request as the client saw it; times are time.perf_counter() seconds."""
    sent_s: float
    event_s: list[float] = field(default_factory=list)   # arrival of each text event
    usage_tokens: int = 0           # completion_tokens of the usage chunk (0: none seen)
    prompt_tokens: int = 0          # prompt_tokens of the usage chunk
    status: int = 0                 # HTTP status; 0: no head (connection failed or cut)
    done: bool = False              # the body ended (the stream reached its end)
    ended_s: float = 0.0
    resent: int = 0                 # sent again: the connection closed before any answer byte

    @property
    def ok(self) -> bool:
        return self.done and self.status == 200

    @property
    def tokens(self) -> int:
        return self.usage_tokens or len(self.event_s)

    @property
    def tokens_per_event(self) -> float:
        """Tokens a text event carried, on average (from the usage chunk; 1 without one)."""
        if self.ok and self.usage_tokens and self.event_s:
            return self.usage_tokens / len(self.event_s)
        return 1.0


class ChunkedDecoder:
    """Incremental HTTP/1.1 chunked transfer decoding: feed bytes, get payload bytes."""

    def __init__(self):
        self.buf = b""
        self.left = 0              # payload bytes still due in the current chunk
        self.skip = 0              # bytes of the CRLF after a chunk still to skip
        self.last = False          # the zero-size chunk was read: its CRLF ends the body
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = []
        while not self.finished:
            if self.left:
                take = self.buf[:self.left]
                out.append(take)
                self.buf, self.left = self.buf[len(take):], self.left - len(take)
                if self.left:
                    break
                self.skip = 2
            if self.skip:
                dropped = min(self.skip, len(self.buf))
                self.buf, self.skip = self.buf[dropped:], self.skip - dropped
                if self.skip:
                    break
                if self.last:
                    self.finished = True
                    break
            line_end = self.buf.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buf[:line_end].split(b";")[0], 16)
            self.buf = self.buf[line_end + 2:]
            self.left = size
            if size == 0:              # the last chunk (these servers send no trailers)
                self.last, self.skip = True, 2
        return b"".join(out)


class SseCounter:
    """Cuts de-chunked body bytes into SSE events and records them on a StreamRecord."""

    def __init__(self, record: StreamRecord):
        self.record = record
        self.pending = b""

    def feed(self, data: bytes, now_s: float) -> None:
        self.pending += data.replace(b"\r\n", b"\n")
        *events, self.pending = self.pending.split(b"\n\n")
        for event in events:
            self._event(event, now_s)

    def _event(self, event: bytes, now_s: float) -> None:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue                  # ": ping" comments, event: names
            payload = line[5:]
            if TEXT_EVENT.search(payload):
                self.record.event_s.append(now_s)
            if b'"usage"' in payload:
                found = COMPLETION_TOKENS.search(payload)
                if found:
                    self.record.usage_tokens = int(found.group(1))
                found = PROMPT_TOKENS.search(payload)
                if found:
                    self.record.prompt_tokens = int(found.group(1))


@dataclass(frozen=True)
class Target:
    """Where the requests go: host, port, path, and extra header lines (auth)."""
    host: str
    port: int
    path: str = "/v1/chat/completions"
    headers: bytes = b""

    def request(self, body: bytes) -> bytes:
        return (b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                b"Accept: text/event-stream\r\n%sContent-Length: %d\r\n\r\n"
                % (self.path.encode(), self.host.encode(), self.port, self.headers, len(body))
                + body)


class _Conn:
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, target: Target, sel: selectors.BaseSelector, index: int):
        self.target, self.sel, self.index = target, sel, index
        self.sock: socket.socket | None = None
        self.record: StreamRecord | None = None

    def connect(self) -> None:
        self.sock = socket.create_connection((self.target.host, self.target.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.sel.register(self.sock, selectors.EVENT_READ, self)

    def send(self, body: bytes) -> None:
        self.body = body
        self.record = StreamRecord(sent_s=time.perf_counter())
        self._transmit()

    def _transmit(self) -> None:
        """Send self.body (the request of self.record), connecting first if need be."""
        if self.sock is None:
            self.connect()
        self.head, self.body_left, self.close_after, self.until_close = b"", -1, False, False
        self.decoder: ChunkedDecoder | None = None
        self.sse = SseCounter(self.record)
        self.out = self.target.request(self.body)
        self._flush()

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            sent = 0
        except OSError:            # closed by the server: the next read sees its end
            sent = len(self.out)
        self.out = self.out[sent:]
        self.sel.modify(self.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0),
                        self)

    def on_ready(self, mask: int) -> StreamRecord | None:
        """Handle readiness; the finished request's record when one ended."""
        if mask & selectors.EVENT_WRITE and self.out:
            self._flush()
        if not mask & selectors.EVENT_READ:
            return None
        try:
            data = self.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        now = time.perf_counter()
        if not data:
            if self.record is None:        # the server closed an idle keep-alive connection
                self.close()
                return None
            if not self.head and self.record.resent < RESENDS_MAX:
                self._resend()             # closed before any byte of the answer
                return None
            return self._end(now, closed=True)
        if self.decoder is None and self.body_left < 0:
            data = self._read_head(data)
            if data is None:
                return None
        if self.decoder is not None:
            payload = self.decoder.feed(data)
            finished = self.decoder.finished
        else:                      # Content-Length, or until close (a huge body_left)
            payload = data[:self.body_left]
            self.body_left -= len(payload)
            finished = self.body_left == 0
        self.sse.feed(payload, now)
        return self._end(now, closed=False) if finished else None

    def _read_head(self, data: bytes) -> bytes | None:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            return None
        head, rest = self.head[:end].lower(), self.head[end + 4:]
        self.record.status = int(head.split(b" ", 2)[1])
        self.close_after = b"connection: close" in head
        if b"transfer-encoding: chunked" in head:
            self.decoder = ChunkedDecoder()
        else:
            length = re.search(rb"content-length:\s*(\d+)", head)
            self.until_close = length is None            # the body ends when the server closes
            self.body_left = int(length.group(1)) if length else 1 << 62
        return rest

    def _end(self, now: float, closed: bool) -> StreamRecord:
        record, self.record = self.record, None
        record.done = not closed or self.until_close
        record.ended_s = now
        if closed or self.close_after:
            self.close()
        return record

    def _resend(self) -> None:
        """The same request again on a new connection (the old one closed unanswered)."""
        self._drop_socket()
        self.record.resent += 1
        self._transmit()

    def _drop_socket(self) -> None:
        if self.sock is not None:
            self.sel.unregister(self.sock)
            self.sock.close()
            self.sock = None

    def close(self) -> StreamRecord | None:
        """Close the socket; the request in flight (if any) is returned unfinished."""
        self._drop_socket()
        record, self.record = self.record, None
        return record


@dataclass
class LoadResult:
    records: list[StreamRecord]
    start_s: float                 # the window, perf_counter seconds
    end_s: float
    client_cpu_s: float            # this process's CPU time over the whole run
    wall_s: float


def run_load(target: Target, make_body: Callable[[int], bytes], concurrency: int, *,
             warmup_s: float = 0.0, duration_s: float = 0.0, requests: int = 0,
             on_window: Callable[[str], None] | None = None) -> LoadResult:
    """Closed loop: `concurrency` connections, each sending make_body(i) (i counts every
    request sent) as soon as its previous answer ended. `requests` > 0: stop after that many
    counted requests; else after `duration_s` of counted load. `on_window("open")` and
    `on_window("close")` run as the counted window opens and closes (the server's counters)."""
    on_window = on_window or (lambda phase: None)
    sel = selectors.DefaultSelector()
    conns = [_Conn(target, sel, i) for i in range(concurrency)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    sent, counted, records = 0, 0, []
    warm = [False] * concurrency        # has this connection seen a token yet?
    start = None if warmup_s > 0 else wall0
    if start is not None:
        on_window("open")
    for conn in conns:                  # connect first: the first requests leave together
        conn.connect()
    for conn in conns:
        conn.send(make_body(sent))
        sent += 1
    counted = 0 if start is None else sent
    while True:
        now = time.perf_counter()
        if start is None and ((now - wall0 >= warmup_s and all(warm))
                              or now - wall0 >= warmup_s + WARMUP_CAP_S):
            on_window("open")
            start = time.perf_counter()
        if start is not None and not requests and now >= start + duration_s:
            break
        if requests and start is not None and counted >= requests and not any(
                c.record for c in conns):
            break
        for key, mask in sel.select(SELECT_TICK_S):
            conn = key.data
            finished = conn.on_ready(mask)
            if conn.record is not None and conn.record.event_s:
                warm[conn.index] = True
            if finished is None:
                continue
            warm[conn.index] = True
            records.append(finished)
            if start is None or not requests or counted < requests:
                conn.send(make_body(sent))
                sent += 1
                counted += start is not None
    end = time.perf_counter()
    on_window("close")
    for conn in conns:
        left = conn.close()
        if left is not None:
            records.append(left)
    sel.close()
    return LoadResult(records, start, end, time.process_time() - cpu0, end - wall0)


def rounded_percentile(values: list[float], q: float) -> float | None:
    """A percentile rounded for the report; None (JSON null) when there are no values."""
    return round(percentile(values, q), 4) if values else None


def summarize(result: LoadResult) -> dict:
    """Output tok/s, TTFT and ITL percentiles, request counts over the result's window."""
    t0, t1 = result.start_s, result.end_s
    tokens = 0.0
    ttft, itl = [], []
    ok = failed = unfinished = resent = 0
    for r in result.records:
        inside = [t for t in r.event_s if t0 <= t <= t1]
        tokens += len(inside) * r.tokens_per_event
        arrivals = list(dict.fromkeys(inside))         # one per recv: a burst is one chunk
        itl += [b - a for a, b in zip(arrivals, arrivals[1:])]
        if r.sent_s >= t0 and r.event_s:
            ttft.append(r.event_s[0] - r.sent_s)
        if r.ended_s and r.ended_s < t0:
            continue                                    # a warm-up request
        resent += r.resent
        if r.ok:
            ok += 1
        elif r.ended_s:
            failed += 1                                 # an error status, or cut by the server
        else:
            unfinished += 1                             # in flight when the window closed
    window_s = max(t1 - t0, 1e-9)
    return {"output_tokens": round(tokens), "window_s": round(window_s, 2),
            "tok_s": round(tokens / window_s, 1),
            "ttft_p50_s": rounded_percentile(ttft, 50), "ttft_p99_s": rounded_percentile(ttft, 99),
            "ttft_max_s": rounded_percentile(ttft, 100),
            "itl_p50_s": rounded_percentile(itl, 50), "itl_p99_s": rounded_percentile(itl, 99),
            "requests_ok": ok, "requests_failed": failed, "requests_unfinished": unfinished,
            "requests_resent": resent,
            "client_cpu_s": round(result.client_cpu_s, 2),
            "client_cpu_share": round(result.client_cpu_s / max(result.wall_s, 1e-9), 3)}
