"""Hostile input at scale: 1,000 seeded malformed requests (tests/fuzz_http.py) against a
real server on the succ bigram. Every one is answered 4xx (505 for an HTTP version other
than 1.x, as HTTP says) or closed, none hangs, the server
logs no traceback or error, and it serves a normal request afterwards.
`python bench/fuzz_http.py --requests 10000` is the long run."""
from __future__ import annotations

import logging
from collections import Counter

import pytest

from tests.e2e.helpers import chat_body, post, running_server
from tests.fuzz_http import Fuzzer, send_case

FUZZ_REQUESTS = 1_000
SEED = 9


class ErrorRecords(logging.Handler):
    """Keeps every record at ERROR or above, and any that carries a traceback."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.levelno >= logging.ERROR or record.exc_info or "Traceback" in text:
            self.records.append(text[:500])


@pytest.fixture
def error_records():
    handler = ErrorRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)


def test_a_thousand_hostile_requests_are_refused_and_the_server_lives(succ_model_dir,
                                                                       error_records):
    with running_server(succ_model_dir) as server:
        host, port = server.http_addr.rsplit(":", 1)
        fuzzer = Fuzzer(SEED, "succ")
        verdicts, findings = Counter(), []
        for index in range(FUZZ_REQUESTS):
            case = fuzzer.case()
            status = send_case((host, int(port)), case)
            verdicts[(case.kind, status)] += 1
            if status is not None and not 400 <= status < 500 and not (
                    case.kind == "request_line" and status == 505):   # HTTP/9.9: the HTTP answer
                findings.append((index, case.kind, status, case.data[:300]))
        assert findings == []
        assert sum(n for (_, status), n in verdicts.items() if status is not None) > 500
        assert len({kind for kind, _ in verdicts}) >= 10            # every kind was tried
        after = post(server, "/v1/chat/completions", chat_body("a", max_tokens=3, temperature=0))
        assert after.status_code == 200
        assert after.json()["choices"][0]["message"]["content"] == "bcd"
    assert error_records == []
