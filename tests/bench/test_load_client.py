"""The measuring pieces of bench/load_sweep.py that numbers depend on: de-chunking, the SSE
event counter, the percentile, the window maths, `--set` -> TL_ENGINE__ (read back by the
server's own config reader) and h2load's report. The benchmark itself is never run here."""
from __future__ import annotations

import math
import selectors
import socket
import threading

import pytest

from bench import h2load_client
from bench.load_client import (ChunkedDecoder, LoadResult, SseCounter, StreamRecord, Target,
                               _Conn, percentile, run_load, summarize)
from bench.load_server import config_sets, settings_env
from server.config import ServeConfig

EVENTS = [b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
          b'data: {"choices":[{"delta":{"content":null}}]}\n\n',
          b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n',
          b": ping\n\n",
          b'data: {"choices":[{"delta":{"content": "lo"}}]}\n\n',
          b'data: {"choices":[{"delta":{"content":"\\"!"}}]}\n\n',
          b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n',
          b'data: {"choices":[],"usage":{"prompt_tokens":41,"completion_tokens":3}}\n\n',
          b"data: [DONE]\n\n"]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
def test_chunked_decoder_returns_the_payload_whatever_the_splits(step):
    body = chunked(EVENTS)
    decoder, out = ChunkedDecoder(), b""
    for i in range(0, len(body), step):
        assert not decoder.finished
        out += decoder.feed(body[i:i + step])
    assert decoder.finished
    assert out == b"".join(EVENTS)


def test_sse_counter_stamps_text_events_only_and_reads_the_usage():
    record = StreamRecord(sent_s=0.0)
    counter = SseCounter(record)
    body = b"".join(EVENTS).replace(b"\n", b"\r\n")       # CRLF line ends count too
    cut = body.index(b'"lo"') + 2                          # the "lo" event arrives in two parts
    counter.feed(body[:cut], 1.0)
    counter.feed(body[cut:], 2.0)
    assert record.event_s == [1.0, 2.0, 2.0]               # "Hel" at 1.0; "lo", '"!' at 2.0
    assert (record.usage_tokens, record.prompt_tokens) == (3, 41)


def test_an_idle_connection_the_server_closes_is_dropped_not_ended():
    # count mode leaves a finished client's keep-alive connection idle; llama-server closes
    # such connections, and that end of file belongs to no request
    sel = selectors.DefaultSelector()
    ours, theirs = socket.socketpair()
    conn = _Conn(Target("127.0.0.1", 1), sel, 0)
    conn.sock = ours
    sel.register(ours, selectors.EVENT_READ, conn)
    theirs.close()
    assert conn.on_ready(selectors.EVENT_READ) is None
    assert conn.sock is None and not sel.get_map()          # the next send connects anew
    sel.close()


def test_percentile_is_nearest_rank():
    values = [50.0, 10.0, 40.0, 20.0, 30.0]
    assert [percentile(values, q) for q in (0, 50, 99, 100)] == [10.0, 30.0, 50.0, 50.0]
    assert math.isnan(percentile([], 50))


def test_summarize_counts_the_window_only():
    ok = StreamRecord(sent_s=11.0, event_s=[11.5, 12.0, 12.0, 13.0], usage_tokens=8, status=200,
                      done=True, ended_s=13.0)              # 2 tokens per event
    warmup = StreamRecord(sent_s=1.0, event_s=[2.0, 3.0], status=200, done=True, ended_s=9.0)
    in_flight = StreamRecord(sent_s=5.0, event_s=[9.0, 10.5], status=200)
    refused = StreamRecord(sent_s=14.0, status=503, ended_s=14.1)
    out = summarize(LoadResult([ok, warmup, in_flight, refused], start_s=10.0, end_s=20.0,
                               client_cpu_s=0.5, wall_s=25.0))
    assert out["output_tokens"] == 4 * 2 + 1
    assert out["tok_s"] == 0.9
    assert (out["requests_ok"], out["requests_failed"], out["requests_unfinished"]) == (1, 1, 1)
    assert out["ttft_p50_s"] == 0.5                         # only requests sent in the window
    assert (out["itl_p50_s"], out["itl_p99_s"]) == (0.5, 1.0)   # 12.0 twice is one arrival
    assert out["client_cpu_share"] == 0.02


def test_set_pairs_become_overrides_the_server_reads():
    env = settings_env(config_sets("max_num_seqs=128, max_batched_tokens=512") +
                       ["speculative.method=prompt_lookup"])
    assert env == {"TL_ENGINE__MAX_NUM_SEQS": "128", "TL_ENGINE__MAX_BATCHED_TOKENS": "512",
                   "TL_ENGINE__SPECULATIVE__METHOD": "prompt_lookup"}
    cfg = ServeConfig.from_toml("", env)
    assert (cfg.engine.max_num_seqs, cfg.engine.max_batched_tokens) == (128, 512)
    assert cfg.engine.speculative.method == "prompt_lookup"
    assert config_sets("") == []
    with pytest.raises(ValueError, match="key=value"):
        settings_env(["max_num_seqs"])


H2LOAD_REPORT = """\
finished in 12.50s, 2.56 req/s, 40.96KB/s
requests: 32 total, 32 started, 32 done, 30 succeeded, 2 failed, 2 errored, 0 timeout
status codes: 30 2xx, 0 3xx, 0 4xx, 2 5xx
                     min         max         mean         sd        +/- sd
time for request:      1.20s      3.40s      2.10s    300.00ms    70.00%
time for connect:      150us      900us      400us      100us    60.00%
time to 1st byte:   250.50ms      1.50s   600.00ms    100.00ms    60.00%
"""


def test_h2load_report_gives_tokens_per_second_and_first_byte():
    out = h2load_client.parse(H2LOAD_REPORT, max_tokens=128)
    assert out["tok_s"] == round(30 * 128 / 12.5, 1)
    assert (out["requests_ok"], out["requests_failed"]) == (30, 2)
    assert (out["ttfb_min_s"], out["ttfb_max_s"]) == (0.2505, 1.5)
    with pytest.raises(ValueError):
        h2load_client.parse("connection refused", max_tokens=128)


def test_h2load_runs_in_turn_sum_their_tokens_over_their_wall_time():
    first = h2load_client.parse(H2LOAD_REPORT, max_tokens=128)
    second = {"wall_s": 7.5, "tok_s": 0.0, "requests_ok": 2, "requests_failed": 0,
              "ttfb_min_s": 0.1, "ttfb_max_s": 0.2, "ttfb_mean_s": 0.15}
    out = h2load_client.combined([first, second], max_tokens=128)
    assert out["tok_s"] == round(32 * 128 / 20.0, 1)
    assert (out["requests_ok"], out["requests_failed"], out["wall_s"]) == (32, 2, 20.0)
    assert (out["ttfb_min_s"], out["ttfb_max_s"]) == (0.1, 1.5)
    assert out["ttfb_mean_s"] == round((0.6 * 30 + 0.15 * 2) / 32, 4)


ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
          b"\r\n\r\n" + chunked(EVENTS))
GUARD_S = 30.0                  # a broken client must not hang the test: the server gives up


def _read_request(conn: socket.socket) -> bytes:
    """One HTTP request off `conn` (head and Content-Length body); its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += conn.recv(4096)
    return body


def _scripted_server(listener: socket.socket, script: list[list[str]], bodies: list[bytes]):
    """Per accepted connection a list of "answer" / "drop": read a request, then answer it
    (keep-alive) or close the connection without a byte (the close llama-server makes)."""
    listener.settimeout(GUARD_S)
    for actions in script:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.settimeout(GUARD_S)
        with conn:
            for action in actions:
                bodies.append(_read_request(conn))
                if action == "drop":
                    break
                conn.sendall(ANSWER)
            else:
                conn.recv(1)               # keep it open until the client closes it


def _load_against(script: list[list[str]]) -> tuple[list[StreamRecord], list[bytes]]:
    listener = socket.create_server(("127.0.0.1", 0))
    bodies: list[bytes] = []
    thread = threading.Thread(target=_scripted_server, args=(listener, script, bodies), daemon=True)
    thread.start()
    result = run_load(Target("127.0.0.1", listener.getsockname()[1]),
                      lambda i: b'{"request": %d}' % i, 1, requests=2)
    thread.join(GUARD_S)
    listener.close()
    return result.records, bodies


def test_a_request_whose_connection_closes_before_any_answer_byte_is_sent_again_once():
    # one stream back to back on keep-alive: the server closes the connection the second
    # request went out on without answering it; that request goes out again on a new one
    records, bodies = _load_against([["answer", "drop"], ["answer"]])
    assert [r.ok for r in records] == [True, True]
    assert [r.resent for r in records] == [0, 1]
    assert records[1].usage_tokens == 3                    # the answer of the resent request
    assert bodies == [b'{"request": 0}', b'{"request": 1}', b'{"request": 1}']


def test_a_second_close_before_any_answer_byte_stays_a_failure():
    records, bodies = _load_against([["answer", "drop"], ["drop"]])
    assert [r.ok for r in records] == [True, False]
    assert records[1].resent == 1 and records[1].status == 0
    assert bodies == [b'{"request": 0}', b'{"request": 1}', b'{"request": 1}']
    assert summarize(LoadResult(records, 0.0, 1e9, 0.0, 1.0))["requests_resent"] == 1
