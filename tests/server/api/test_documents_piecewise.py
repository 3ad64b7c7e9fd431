"""`json_bytes_piecewise`: the same bytes as `json_bytes`, built member by member."""
from __future__ import annotations

from server.replies import PIECEWISE_MIN_ITEMS, PIECEWISE_SLICE_ITEMS, json_bytes, json_bytes_piecewise


def test_piecewise_bytes_equal_the_one_call_encoding():
    many = PIECEWISE_MIN_ITEMS + 3
    document = {
        "object": "list", "empty": [], "none": None, "flag": True, "é": "ünï\n\"q\"",
        "data": [{"index": i, "embedding": [0.5 * i, -1e-9, 3.0], "text": f"t{i}"}
                 for i in range(many)],
        "pairs": tuple((i, f"{i}") for i in range(many)),
        "rows": [[i, [i, {"deep": i}]] for i in range(many)],
        "few": [{"a": 1}],
        "tokens": list(range(2 * PIECEWISE_SLICE_ITEMS + 5)),           # three slices
        "words": tuple(f"w{i}\u00e9" for i in range(PIECEWISE_SLICE_ITEMS)),  # one whole slice
    }
    assert json_bytes_piecewise(document) == json_bytes(document)
    assert json_bytes_piecewise([{"a": i} for i in range(many)]) == json_bytes(
        [{"a": i} for i in range(many)])
    assert json_bytes_piecewise("plain") == json_bytes("plain")
