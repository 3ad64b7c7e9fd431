"""A seeded generator of hostile HTTP requests, and the client that sends one and judges it.

Every case is a request the server must refuse: a malformed request line, bad headers,
broken chunked framing, a body that is not JSON, JSON of a wrong type or depth at a field
that has one type, numbers too big for any field, invalid UTF-8, or something oversized.
`send_case` writes it on a fresh connection and reads until a full response or the close:
the verdict is the status (4xx expected) or None (closed without an answer, also fine);
a hang past `REPLY_TIMEOUT_S` or a 2xx/5xx is a finding. Used by
tests/e2e/test_fuzz_http.py (1,000 cases) and bench/fuzz_http.py (10,000).
"""
from __future__ import annotations

import json
import random
import socket
from dataclasses import dataclass

REPLY_TIMEOUT_S = 15.0
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/tokenize",
          "/v1/detokenize")
WRONG_VALUES = ("x", 1.5, -7, True, [], {}, [[]], {"a": {"b": []}}, "\u0000", [1, "a"])
# Fields whose type is fixed: any value from WRONG_VALUES that is not of that type is a 400.
TYPED_FIELDS = {"model": (str,), "messages": (list,), "max_tokens": (int,), "n": (int,),
                "temperature": (int, float), "top_p": (int, float), "stream": (bool,),
                "seed": (int,), "presence_penalty": (int, float), "logit_bias": (dict,),
                "prompt": (str, list), "input": (str, list), "tokens": (list,)}
ROUTE_FIELDS = {"/v1/chat/completions": ("model", "messages", "max_tokens", "n", "temperature",
                                         "top_p", "stream", "seed", "presence_penalty",
                                         "logit_bias"),
                "/v1/completions": ("model", "prompt", "max_tokens", "temperature", "stream"),
                "/v1/embeddings": ("model", "input"), "/v1/tokenize": ("model", "prompt"),
                "/v1/detokenize": ("model", "tokens")}

# Fields where any number past these (or a number at all) is out of range or of the wrong type.
HUGE_FIELDS = {"/v1/chat/completions": ("model", "max_tokens", "temperature", "n", "top_p",
                                        "presence_penalty"),
               "/v1/completions": ("model", "max_tokens", "temperature", "prompt"),
               "/v1/embeddings": ("model", "input"), "/v1/tokenize": ("model", "prompt"),
               "/v1/detokenize": ("model", "tokens")}


@dataclass(frozen=True)
class Case:
    kind: str
    data: bytes
    truncated: bool = False          # the request is incomplete: the client half-closes


def valid_body(route: str, model: str) -> dict:
    return {"/v1/chat/completions": {"model": model, "max_tokens": 2,
                                     "messages": [{"role": "user", "content": "a"}]},
            "/v1/completions": {"model": model, "prompt": "a", "max_tokens": 2},
            "/v1/embeddings": {"model": model, "input": "a"},
            "/v1/tokenize": {"model": model, "prompt": "a"},
            "/v1/detokenize": {"model": model, "tokens": [97]}}[route]


def request(route: str, body: bytes, *, method: str = "POST", headers: str = "") -> bytes:
    return (f"{method} {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n").encode() + body


class Fuzzer:
    def __init__(self, seed: int, model: str):
        self.rng = random.Random(seed)
        self.model = model
        self.kinds = [getattr(self, name) for name in sorted(dir(self)) if name.startswith("k_")]

    def case(self) -> Case:
        make = self.rng.choice(self.kinds)
        return make()

    def _route(self) -> str:
        return self.rng.choice(ROUTES)

    def _junk(self, n: int) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(n))

    # ---- the request line and headers
    def k_request_line(self) -> Case:
        lines = [b"GARBAGE", b"POST", b"POST /v1/completions", b"POST /v1/completions HTTP/9.9",
                 b"P\x00ST / HTTP/1.1", b"POST  /v1/completions  HTTP/1.1",
                 b"POST /" + b"a" * 70_000 + b" HTTP/1.1", self._junk(self.rng.randrange(1, 200)),
                 b"POST http://[::1 HTTP/1.1", b"\xff\xfe / HTTP/1.1"]
        line = self.rng.choice(lines).replace(b"\r", b"").replace(b"\n", b"")
        return Case("request_line", line + b"\r\nHost: x\r\n\r\n")

    def k_headers(self) -> Case:
        bad = self.rng.choice([
            "NoColon\r\n", " Leading: space\r\n", "Bad Name: x\r\n", "X: " + "v" * 20_000 + "\r\n",
            "".join(f"X-{i}: {i}\r\n" for i in range(200)), "Content-Length: 5\r\n",
            "Content-Length: -1\r\n", "Content-Length: 1e3\r\n", "Transfer-Encoding: gzip\r\n",
            "Content-Length: 99999999999999999999999\r\n", "X: \x00\x01\r\n",
            "Transfer-Encoding: chunked\r\n"])
        body = json.dumps(valid_body(self._route(), self.model)).encode()
        head = (f"POST {self._route()} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                + bad + "\r\n").encode()
        return Case("headers", head + body)

    def k_chunked(self) -> Case:
        frames = self.rng.choice([b"zz\r\nab\r\n0\r\n\r\n", b"5\r\nab\r\n0\r\n\r\n",
                                  b"FFFFFFFFFFFFFFFFFFFF\r\n", b"3;" + b"e" * 9000 + b"\r\nabc\r\n",
                                  b"-1\r\n", b"2\r\n{}XX0\r\n\r\n", b"0\r\nBad Trailer\r\n\r\n"])
        head = (f"POST {self._route()} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                "\r\n").encode()
        return Case("chunked", head + frames, truncated=True)

    def k_truncated(self) -> Case:
        body = json.dumps(valid_body(self._route(), self.model)).encode()
        data = request(self._route(), body)
        return Case("truncated", data[:self.rng.randrange(1, len(data) - 1)], truncated=True)

    # ---- bodies
    def k_not_json(self) -> Case:
        body = self.rng.choice([self._junk(self.rng.randrange(1, 300)), b"{", b"[1,2", b"nul",
                                b"{'a': 1}", b"\xef\xbb\xbf{}", b'{"model": "\xff\xfe"}',
                                b'{"a": 1,}', b"NaN", b'"just a string"', b"[]", b"123"])
        return Case("not_json", request(self._route(), body))

    def k_depth(self) -> Case:
        depth = self.rng.choice([50, 1_000, 100_000])
        open_, close = self.rng.choice([("[", "]"), ('{"a":', "}")])
        field = self.rng.choice(["messages", "input", "prompt", "stop", "tokens"])
        body = '{"model": "%s", "%s": %s1%s}' % (self.model, field, open_ * depth, close * depth)
        return Case("depth", request(self._route(), body.encode()))

    def k_wrong_type(self) -> Case:
        route = self._route()
        body = valid_body(route, self.model)
        field = self.rng.choice(ROUTE_FIELDS[route])
        allowed = TYPED_FIELDS[field]
        choices = [v for v in WRONG_VALUES if not isinstance(v, allowed)
                   or (isinstance(v, bool) and bool not in allowed)]
        body[field] = self.rng.choice(choices)
        return Case("wrong_type", request(route, json.dumps(body).encode()))

    def k_huge_number(self) -> Case:
        route = self._route()
        text = json.dumps(valid_body(route, self.model))
        number = self.rng.choice(["1" * 5_000, "1e999999", "-1e999999", "9" * 400 + ".5",
                                  "123456789012345678901234567890"])
        field = self.rng.choice(HUGE_FIELDS[route])
        body = text[:-1] + f', "{field}": {number}}}'
        return Case("huge_number", request(route, body.encode()))

    def k_invalid_utf8(self) -> Case:
        route = self._route()
        text = json.dumps(valid_body(route, self.model)).encode()
        at = self.rng.randrange(1, len(text) - 1)
        return Case("invalid_utf8", request(route, text[:at] + b"\xc3\x28\xa0\xa1\xff" + text[at:]))

    def k_oversized(self) -> Case:
        route = self._route()
        if self.rng.random() < 0.5:                 # a declared body past the limit
            head = (f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Length: {64 * 1024 * 1024}"
                    "\r\n\r\n").encode()
            return Case("oversized", head + b"{" * 1000, truncated=True)
        big = {"model": self.model, "messages": [{"role": "user", "content": "a" * 9_000_000}]}
        return Case("oversized", request(route, json.dumps(big).encode()))

    def k_wrong_route_or_method(self) -> Case:
        body = json.dumps(valid_body("/v1/completions", self.model)).encode()
        method, path = self.rng.choice([("PATCH", "/v1/completions"), ("GET", "/v1/completions"),
                                        ("POST", "/v1/nothing"), ("POST", "/" + "a/" * 500),
                                        ("DELETE", "/v1/models"), ("POST", "/v1/models/x")])
        return Case("route", request(path, body, method=method))


def send_case(addr: tuple[str, int], case: Case) -> int | None:
    """Send one case on a fresh connection; the response status, or None if the server
    closed without one. Raises TimeoutError if nothing ends within REPLY_TIMEOUT_S."""
    with socket.create_connection(addr, timeout=REPLY_TIMEOUT_S) as sock:
        try:
            sock.sendall(case.data)
            if case.truncated:
                sock.shutdown(socket.SHUT_WR)
        except OSError:                             # the server already answered and closed
            pass
        received = b""
        while True:
            status, complete = _parse(received)
            if complete:
                return status
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return status
            received += data


def _parse(received: bytes) -> tuple[int | None, bool]:
    """(status or None, whether a whole response with its Content-Length body is here)."""
    head, sep, body = received.partition(b"\r\n\r\n")
    if not sep:
        return None, False
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                   if line.lower().startswith(b"content-length:")), None)
    return status, length is not None and len(body) >= length
