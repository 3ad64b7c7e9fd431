"""TextStream: stop-prefix hold-back and incremental UTF-8, fed byte by byte (docs/CONTRACT.md)."""
from __future__ import annotations

import itertools

import pytest

from sse import TextStream
from tests.oracle import read_jsonl


def feed(stream: TextStream, pieces) -> list[str]:
    out = [stream.push(p) for p in pieces]
    out.append(stream.finish())
    return out


def test_text_stream_holds_back_stop_prefixes():
    # The worked example: tokens b, c, d, e with stop "de".
    s = TextStream(["de"])
    assert s.push(b"b") == "b"
    assert s.push(b"c") == "c"
    assert s.push(b"d") == ""            # "d" may begin "de": held back
    assert not s.stopped()
    assert s.push(b"e") == ""            # "de" complete: nothing more, the stop is not sent
    assert s.stopped()
    assert s.push(b"f") == ""
    assert s.finish() == ""


def test_held_prefix_is_released_when_it_stops_matching():
    s = TextStream(["de"])
    assert s.push(b"d") == ""
    assert s.push(b"x") == "dx"
    assert s.finish() == ""
    assert not s.stopped()


def test_held_prefix_is_flushed_at_finish():
    s = TextStream(["dex"])
    assert s.push(b"ade") == "a"
    assert s.finish() == "de"


def test_earliest_stop_wins_and_longest_prefix_is_held():
    s = TextStream(["xyz", "yq"])
    assert s.push(b"axy") == "a"          # "xy" is a prefix of "xyz"
    assert s.push(b"q") == "x"            # "yq" occurs at 2: send up to it
    assert s.stopped()


@pytest.mark.parametrize("stops", [["cd", "b"], ["b", "cd"], ["bcd", "cde", "b"]])
def test_of_two_stops_in_one_push_the_earliest_occurrence_wins(stops):
    s = TextStream(stops)                 # whatever their order in the list
    assert s.push(b"abcdef") == "a"
    assert s.stopped()


def test_stop_inside_one_token_cuts_there():
    s = TextStream(["</s>"])
    assert s.push(b"hello</s>world") == "hello"
    assert s.stopped()


@pytest.mark.parametrize("text, stops", [
    ("abcdefg", ["de"]),
    ("aaaab", ["aab"]),
    ("héllo wörld 😀 done", ["wö", "😀"]),
    ("no stop here at all", ["zz", "q"]),
    ("ababac", ["abac"]),
])
def test_byte_by_byte_equals_whole_text(text, stops):
    data = text.encode("utf-8")
    expected = text
    cuts = [expected.find(s) for s in stops if expected.find(s) >= 0]
    if cuts:
        expected = expected[:min(cuts)]
    for size in (1, 2, 3):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        out = feed(TextStream(stops), pieces)
        assert "".join(out) == expected
        for piece in out:
            assert not any(s in piece for s in stops)


def test_stop_string_never_leaks_a_prefix_in_any_split():
    text = b"xxabcdyy"
    for a, b in itertools.combinations(range(1, len(text)), 2):
        pieces = [text[:a], text[a:b], text[b:]]
        out = feed(TextStream(["cd"]), pieces)
        assert "".join(out) == "xxab"


def test_utf8_split_across_tokens_waits_for_the_whole_character():
    s = TextStream()
    emoji = "😀".encode("utf-8")               # f0 9f 98 80
    assert s.push(emoji[:1]) == ""
    assert s.push(emoji[1:2]) == ""
    assert s.push(emoji[2:3]) == ""
    assert s.push(emoji[3:]) == "😀"


def test_invalid_bytes_become_replacement_characters():
    s = TextStream()
    assert s.push(b"a\x80b") == "a\ufffdb"     # lone continuation byte
    assert s.push(b"\xe2\x82") == ""          # incomplete: waits
    assert s.finish() == "\ufffd"             # ... and is replaced at the end
    data = b"x\xff\xe2\x82y\xf0\x9f\x98"
    out = feed(TextStream(), [data[i:i + 1] for i in range(len(data))])
    assert "".join(out) == data.decode("utf-8", errors="replace")


def test_decode_oracle_cases_byte_by_byte():
    cases = read_jsonl("decode_cases.jsonl")
    assert cases
    for case in cases:
        token_bytes = [bytes.fromhex(h) for h in case["token_bytes_hex"]]
        out = feed(TextStream(), token_bytes)
        assert "".join(out) == case["text"]

