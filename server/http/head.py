"""The request head, read: request line and fields -> a `RequestHead` with its framing.

Pure functions over bytes already split off by `server/http/http11.py` (the `Connection`
finds where a head ends and feeds it here): every RFC 9112 rule about the request line,
the field lines, Content-Length, Transfer-Encoding, Expect and keep-alive is checked here
and a breach is raised as `Rejected(kind, message)`, which the `Connection` turns into its
`HttpError` event.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from server.http.limits import HttpLimits

# RFC 9110 5.6.2 token characters (method and header names).
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# RFC 9112 3: request-line = method SP request-target SP HTTP-version
_REQUEST_LINE = re.compile(r"(" + _TOKEN.decode() + r") ([^\x00-\x20\x7f]+) (HTTP/[0-9]\.[0-9])")
# RFC 9112 5: field-line = field-name ":" OWS field-value OWS. No space before the colon
# (5.1 requires a 400), no obs-fold (5.2 lets a server reject it with 400), no CR/LF/NUL.
FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*")
# The same, for every line of a decoded header block at once (findall; one match per line).
_FIELD_LINES = re.compile(r"^(" + _TOKEN.decode() + r"):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*\r?$",
                          re.MULTILINE)
_DIGITS = re.compile(r"[0-9]{1,18}")

SUPPORTED_VERSIONS = ("HTTP/1.1", "HTTP/1.0")
# Request fields that decide framing, continue and keep-alive (the rest pass through).
_FRAMING_FIELDS = frozenset({"host", "content-length", "transfer-encoding", "expect", "connection"})


class Rejected(Exception):
    """Rejected(kind, message), raised deep in the parser; `Connection.next_event` returns it
    as an `HttpError` event."""


@dataclass(frozen=True)
class RequestHead:
    """A parsed request head: everything of a Request but its body, plus its framing."""
    method: str
    target_path: str
    query: str
    version: str
    headers: tuple[tuple[str, str], ...]
    content_length: int | None      # None with is_chunked, or no body
    is_chunked: bool
    expects_continue: bool
    keep_alive: bool


def asks_close(headers) -> bool:
    return any(name.lower() == "connection" and "close" in tokens(value)
               for name, value in headers)


def tokens(value: str) -> list[str]:
    return [part.strip().lower() for part in value.split(",") if part.strip()]


def interpret_head(raw: bytes, limits: HttpLimits) -> RequestHead:
    """Request line + fields -> RequestHead, checking every framing rule of RFC 9112."""
    line_end = raw.find(b"\n")
    first = raw if line_end < 0 else raw[:line_end]
    method, path, query, version = _parse_request_line(first[:-1] if first.endswith(b"\r") else first)
    block = b"" if line_end < 0 else raw[line_end + 1:]
    pairs = _FIELD_LINES.findall(block.decode("latin-1")) if block else []
    num_lines = block.count(b"\n") + 1 if block else 0
    if num_lines > limits.max_header_count:
        raise Rejected("headers_too_large", f"more than {limits.max_header_count} header fields")
    if len(pairs) != num_lines:                      # some line did not match the grammar
        raise Rejected("malformed_http", "invalid header field line")
    headers = tuple((name.lower(), value) for name, value in pairs)
    return _framing(method, path, query, version, headers)


def _parse_request_line(line: bytes) -> tuple[str, str, str, str]:
    match = _REQUEST_LINE.fullmatch(line.decode("latin-1"))
    if match is None:
        raise Rejected("malformed_http", "invalid request line")
    method, target, version = match.groups()
    if version not in SUPPORTED_VERSIONS:
        raise Rejected("http_version_not_supported", f"{version} is not supported")
    path, query = _split_target(target)
    return method, path, query, version


def _split_target(target: str) -> tuple[str, str]:
    """RFC 9112 3.2: origin-form "/p?q", absolute-form "http://h/p?q", asterisk-form "*"."""
    if target == "*":
        return "*", ""
    lowered = target[:8].lower()
    if lowered.startswith("http://") or lowered.startswith("https://"):
        rest = target.split("//", 1)[1]
        slash, qmark = rest.find("/"), rest.find("?")
        if slash < 0 or 0 <= qmark < slash:         # "http://host" or "http://host?q"
            target = "/" + (rest[qmark:] if qmark >= 0 else "")
        else:
            target = rest[slash:]
    if not target.startswith("/"):
        raise Rejected("malformed_http", "invalid request target")
    target = target.split("#", 1)[0]
    path, _, query = target.partition("?")
    return path, query


def _framing(method, path, query, version, headers) -> RequestHead:
    """Body length, continue and keep-alive from the fields (RFC 9112 6, 9.3; RFC 9110 10.1.1)."""
    fields: dict[str, list[str]] = {}
    for name, value in headers:
        if name in _FRAMING_FIELDS:
            fields.setdefault(name, []).append(value)
    if len(fields.get("host", ())) > 1:
        raise Rejected("malformed_http", "more than one Host header")
    content_length = _content_length(fields.get("content-length"))
    is_chunked = False
    if "transfer-encoding" in fields:
        if content_length is not None:
            raise Rejected("malformed_http", "both Content-Length and Transfer-Encoding")
        if version == "HTTP/1.0":
            raise Rejected("malformed_http", "Transfer-Encoding in an HTTP/1.0 request")
        codings = tokens(",".join(fields["transfer-encoding"]))
        if codings == ["chunked"]:
            is_chunked = True
        elif "chunked" in codings[:-1]:
            raise Rejected("malformed_http", "chunked is not the final transfer coding")
        else:
            raise Rejected("not_implemented", "only the chunked transfer coding is supported")
    expects_continue = False
    if "expect" in fields and version == "HTTP/1.1":
        if tokens(",".join(fields["expect"])) != ["100-continue"]:
            raise Rejected("expectation_failed", "only Expect: 100-continue is supported")
        expects_continue = True
    connection = tokens(",".join(fields.get("connection", ())))
    if version == "HTTP/1.1":
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection and "close" not in connection
    return RequestHead(method=method, target_path=path, query=query, version=version,
                 headers=headers, content_length=content_length, is_chunked=is_chunked,
                 expects_continue=expects_continue, keep_alive=keep_alive)


def _content_length(values: list[str] | None) -> int | None:
    """RFC 9112 6.3: a list of identical decimal values is one value; anything else is 400."""
    if values is None:
        return None
    parts = {part.strip() for value in values for part in value.split(",")}
    if len(parts) != 1:
        raise Rejected("malformed_http", "conflicting Content-Length values")
    (text,) = parts
    if _DIGITS.fullmatch(text) is None:
        raise Rejected("malformed_http", "invalid Content-Length")
    return int(text)
