"""JSON replies, for every listener: the server's one JSON encoding and whole JSON responses.

The API, the front door, the errors and the health port all answer in JSON; they share
this module (and not the OpenAI documents of server/api/documents.py) so that no room has
to import the API to write a JSON body.
"""
from __future__ import annotations

import json
from typing import Any

from server.http.protocol import Response

Headers = tuple[tuple[str, str], ...]           # extra response headers (X-Request-Id)

# The header of every JSON body (documents and errors); bodies come from json_bytes.
JSON_CONTENT_TYPE = ("Content-Type", "application/json")
# json_bytes_piecewise: a list of more items than this is split: containers member by
# member, numbers and strings in slices of PIECEWISE_SLICE_ITEMS (~1 ms of encoding each).
PIECEWISE_MIN_ITEMS = 16
PIECEWISE_SLICE_ITEMS = 4096


def json_bytes(document: Any) -> bytes:
    """The one JSON encoding of the server: compact, UTF-8, not ASCII-escaped.

    Every JSON body the server sends (documents, errors, SSE event payloads) goes through
    here, so they all look alike: `{"a":1,"b":"é"}`. json.dumps never emits a raw newline,
    so an encoded document is always one SSE `data:` line."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class RawJson(bytes):
    """JSON text already encoded (by `json_bytes`), placed verbatim by `json_bytes_piecewise`:
    an encoder thread that encodes its rows in short turns leaves only the joining to the end."""


def json_bytes_piecewise(document: Any) -> bytes:
    """The same bytes as `json_bytes`, encoded piece by piece: for big documents built off
    the loop thread. `json.dumps` is one C call that keeps the GIL for its whole run (a 20 MB
    embeddings document: ~0.5 s in which no other thread runs, the loop thread included);
    here every object and every long list is split (a list of containers into its members,
    a list of numbers or strings, such as /tokenize's 1.4M ids, into slices), so each call
    is short and the other threads get their turns between them. A `RawJson` is placed as
    it is (so a list of containers is always split, to find them)."""
    if isinstance(document, RawJson):
        return bytes(document)
    if isinstance(document, dict):
        return b"{" + b",".join(json_bytes(str(key)) + b":" + json_bytes_piecewise(value)
                                for key, value in document.items()) + b"}"
    if not isinstance(document, (list, tuple)) or not document:
        return json_bytes(document)
    if isinstance(document[0], (dict, list, tuple, RawJson)):
        parts = (json_bytes_piecewise(item) for item in document)
    elif len(document) <= PIECEWISE_MIN_ITEMS:
        return json_bytes(document)
    else:                                       # "[1,2]"[1:-1]: a slice's items, no brackets
        parts = (json_bytes(document[i:i + PIECEWISE_SLICE_ITEMS])[1:-1]
                 for i in range(0, len(document), PIECEWISE_SLICE_ITEMS))
    return b"[" + b",".join(parts) + b"]"


def json_response(status: int, document: dict,
                  headers: Headers = ()) -> Response:
    """A whole JSON answer."""
    return Response(status=status, headers=(JSON_CONTENT_TYPE,) + tuple(headers),
                    body=json_bytes(document))
