"""Renderers with several choices and an echoed, scored prompt (unit level, no engine)."""
from __future__ import annotations

import json

from server.api import documents as docs
from server.api.chat.render import ChatChunks
from server.api.completions import CompletionChunks, CompletionDocument
from server.api.generation import GenSpec
from server.api.streams import Piece, TokenLogprob

HEADER = docs.Header("id-1", 0, "m")
USAGE = docs.usage(3, 2)


def _lp(text: str, logprob, top=()) -> TokenLogprob:
    return TokenLogprob(text, text.encode(), logprob, None if logprob is None else tuple(top))


def test_whole_completion_orders_choices_by_index_with_echo_scores_first():
    render = CompletionDocument(HEADER, GenSpec(kind="completion", model="m", logprobs=True))
    render.piece(Piece("x", _lp("x", -0.5), "length", index=1))
    render.piece(Piece("ab", index=0, prompt=(_lp("a", None), _lp("b", -1.0, [("b", b"b", -1.0)]))))
    render.piece(Piece("c", _lp("c", -2.0), "length", index=0))
    doc = json.loads(render.finish(USAGE))
    first, second = doc["choices"]
    assert (first["index"], second["index"]) == (0, 1)
    assert first["text"] == "abc" and second["text"] == "x"
    assert first["logprobs"] == {"tokens": ["a", "b", "c"], "token_logprobs": [None, -1.0, -2.0],
                                 "top_logprobs": [None, {"b": -1.0}, {}],
                                 "text_offset": [0, 1, 2]}
    assert doc["usage"] == USAGE


def test_streamed_chat_sends_a_role_chunk_per_choice_and_names_the_index():
    render = ChatChunks(HEADER, GenSpec(kind="chat", model="m", stream=True))
    events = [render.piece(Piece("a", index=0)), render.piece(Piece("b", index=1)),
              render.piece(Piece("c", index=0))]
    chunks = [[json.loads(line[6:]) for line in e.decode().split("\n") if line.startswith("data: ")]
              for e in events]
    assert [len(c) for c in chunks] == [2, 2, 1]          # role chunk once per index
    assert [c[-1]["choices"][0]["index"] for c in chunks] == [0, 1, 0]
    assert chunks[1][0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_streamed_completion_offsets_run_on_per_choice():
    render = CompletionChunks(HEADER, GenSpec(kind="completion", model="m", stream=True,
                                              logprobs=True))
    render.piece(Piece("ab", index=0, prompt=(_lp("a", None), _lp("b", -1.0))))
    other = json.loads(render.piece(Piece("q", _lp("q", -1.0), index=1)).decode()[6:])
    mine = json.loads(render.piece(Piece("c", _lp("c", -1.0), index=0)).decode()[6:])
    assert other["choices"][0]["logprobs"]["text_offset"] == [0]
    assert mine["choices"][0]["logprobs"]["text_offset"] == [2]
