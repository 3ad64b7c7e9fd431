"""Generations without sockets or an engine: the text unit, each renderer, and the shell
(head timing, pings, errors before and after the head)."""
from __future__ import annotations

import json

from engine.api import FINISH_LENGTH, FINISH_STOP, TokenOut
from server.api import documents as docs
from server.worker.events import Expired, Failed, Invalid, TooLong
from server.errors import ApiError
from server.api.chat.render import ChatChunks, ChatDocument
from server.api.chat.render import renderer as chat_renderer
from server.api.completions import CompletionChunks, CompletionDocument
from server.api.completions import renderer as completion_renderer
from server.api.generation import GenSpec
from server.text.client import GenerationText, Piece, TokenLogprob
from sse import PING
from tests.fakes import FakeTokenizer, tok
from tests.server.api.stream_helpers import generation_stream


def _answer(event) -> tuple[int, dict]:
    spec, header = GenSpec(kind="completion", model="m"), docs.Header("cmpl-1", 0, "m")
    stream, (ticket,), bridge = generation_stream(spec, header, completion_renderer(spec, header),
                                                  prompt_tokens=1, route="completions")
    bridge.feed(ticket, event)
    out = stream.poll(0.0)
    assert out.done
    return out.head.status, json.loads(b"".join(out.chunks))["error"]


def test_engine_refusals_are_400s_of_their_kind_and_failures_are_500s():
    status, error = _answer(TooLong("prompt does not fit in the KV cache"))
    assert (status, error["code"]) == (400, "context_length_exceeded")
    status, error = _answer(Invalid("a request needs at least one prompt token"))
    assert (status, error["type"], error["code"]) == (400, "invalid_request_error", None)
    status, error = _answer(Failed("engine refused the request: bug"))
    assert status == 500 and error["type"] == "server_error"


# ---- helpers for the unit tests below -----------------------------------------------------

def text_unit(stop=(), logprobs=False, top_logprobs=0):
    return GenerationText(tokenizer=FakeTokenizer(), stop=stop, logprobs=logprobs,
                          top_logprobs=top_logprobs)


def sse_events(raw: bytes) -> list:
    """SSE bytes -> decoded payloads (dicts, "[DONE]" or ": ping" comments)."""
    out = []
    for block in raw.split(b"\n\n")[:-1]:
        if block.startswith(b":"):
            out.append(block.decode())
        else:
            payload = block[len(b"data: "):]
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


HEADER = docs.Header("id-1", 0, "m")
USAGE = docs.usage(2, 3)


# ---- 1. the text unit -------------------------------------------------------------------------

def test_text_unit_turns_tokens_into_pieces_and_counts_them():
    unit = text_unit()
    assert unit.feed(tok(1)) == Piece("he")
    assert unit.feed(tok(2, finish=FINISH_LENGTH)) == Piece("llo", finish="length")
    assert unit.completion_tokens == 2


def test_text_unit_holds_a_split_character_until_it_is_whole():
    unit = text_unit()
    assert unit.feed(tok(3)).text == ""
    assert unit.feed(tok(4)).text == "😀"


def test_text_unit_stop_string_ends_the_request_in_the_engine():
    unit = text_unit(stop=("ll",))
    assert unit.feed(tok(1)) == Piece("he") and not unit.stopped
    assert unit.feed(tok(2)) == Piece("", finish="stop", stop_sequence="ll")
    assert unit.stopped                              # the caller ends the engine request


def test_text_unit_names_the_stop_string_that_matched_first():
    unit = text_unit(stop=("xyz", "lo", "el"))       # "hello": "el" ends it at index 1
    assert unit.feed(tok(1)) == Piece("h")          # "e" held back: it may start "el"
    assert unit.feed(tok(2)) == Piece("", finish="stop", stop_sequence="el")


def test_text_unit_never_sends_the_eos_text_nor_its_logprob():
    unit = text_unit(logprobs=True)
    assert unit.feed(tok(9, finish=FINISH_STOP, logprob=-0.1)) == Piece("", None, "stop")
    assert unit.completion_tokens == 1 and not unit.stopped


def test_text_unit_finish_without_a_token_flushes_held_text():
    unit = text_unit(stop=("hex",))
    assert unit.feed(tok(1)) == Piece("")                    # "he" may start "hex": held
    assert unit.feed(TokenOut(id=0, token=None, finish=FINISH_LENGTH)) == Piece("he",
                                                                               finish="length")
    assert unit.completion_tokens == 1


def test_text_unit_makes_logprob_entries_with_the_asked_top():
    unit = text_unit(logprobs=True, top_logprobs=1)
    piece = unit.feed(tok(1, logprob=-0.5, top=((1, -0.5), (2, -1.0))))
    assert piece.logprob == TokenLogprob("he", b"he", -0.5, (("he", b"he", -0.5),))


def test_text_unit_turns_ending_events_into_their_errors():
    unit = text_unit()
    cases = [(TooLong("m"), 400, "context_length_exceeded"), (Invalid("m"), 400, None),
             (Failed("m"), 500, "internal_error"), (Expired("m"), 503, "no_capacity")]
    for ev, status, code in cases:
        err = unit.feed(ev)
        assert isinstance(err, ApiError)
        assert (err.status, err.document()["error"]["code"]) == (status, code)


# ---- 2. the renderers ---------------------------------------------------------------------------

def test_chat_chunks_send_the_role_first_then_content_usage_and_done():
    render = ChatChunks(HEADER, GenSpec(kind="chat", model="m", stream=True, include_usage=True))
    assert render.streamed
    first = sse_events(render.piece(Piece("he")))
    assert [c["choices"][0]["delta"] for c in first] == [{"role": "assistant", "content": ""},
                                                        {"content": "he"}]
    last = sse_events(render.piece(Piece("llo", finish="stop")))
    assert len(last) == 1 and last[0]["choices"][0]["finish_reason"] == "stop"
    assert last[0]["object"] == "chat.completion.chunk"
    end = sse_events(render.finish(USAGE))
    assert end[0]["choices"] == [] and end[0]["usage"] == USAGE and end[1] == "[DONE]"


def test_chat_chunks_carry_logprobs_and_errors_as_events():
    render = ChatChunks(HEADER, GenSpec(kind="chat", model="m", stream=True, logprobs=True))
    lp = TokenLogprob("he", b"he", -0.5, (("he", b"he", -0.5),))
    chunk = sse_events(render.piece(Piece("he", lp)))[1]
    assert chunk["choices"][0]["logprobs"]["content"][0]["bytes"] == list(b"he")
    assert sse_events(render.finish(USAGE)) == ["[DONE]"]        # no usage unless asked
    error = sse_events(render.error(ApiError("internal_error", "boom")))
    assert error[0]["error"]["message"] == "boom" and error[1] == "[DONE]"


def test_chat_document_collects_the_pieces_into_one_answer():
    render = ChatDocument(HEADER, GenSpec(kind="chat", model="m", logprobs=True))
    assert not render.streamed
    lp = TokenLogprob("he", b"he", -0.5, ())
    assert render.piece(Piece("he", lp)) == b""
    assert render.piece(Piece("llo", finish="length")) == b""
    doc = json.loads(render.finish(USAGE))
    choice = doc["choices"][0]
    assert doc["object"] == "chat.completion" and doc["usage"] == USAGE
    assert choice["message"] == {"role": "assistant", "content": "hello"}
    assert choice["finish_reason"] == "length"
    assert [e["token"] for e in choice["logprobs"]["content"]] == ["he"]
    assert json.loads(render.error(ApiError("no_capacity", "m")))["error"]["code"] == "no_capacity"


def test_completion_chunks_run_text_offset_across_chunks():
    render = CompletionChunks(HEADER, GenSpec(kind="completion", model="m", stream=True,
                                              logprobs=True, include_usage=True))
    a = sse_events(render.piece(Piece("he", TokenLogprob("he", b"he", -0.1, ()))))
    b = sse_events(render.piece(Piece("llo", TokenLogprob("llo", b"llo", -0.2, ()),
                                      finish="stop")))
    assert [c["choices"][0]["text"] for c in a + b] == ["he", "llo"]      # no role chunk
    assert [c["choices"][0]["logprobs"]["text_offset"] for c in a + b] == [[0], [2]]
    assert b[0]["choices"][0]["finish_reason"] == "stop" and a[0]["object"] == "text_completion"
    end = sse_events(render.finish(USAGE))
    assert end[0]["usage"] == USAGE and end[1] == "[DONE]"


def test_completion_document_collects_text_and_legacy_logprobs():
    render = CompletionDocument(HEADER, GenSpec(kind="completion", model="m", logprobs=True))
    render.piece(Piece("he", TokenLogprob("he", b"he", -0.1, ())))
    render.piece(Piece("llo", TokenLogprob("llo", b"llo", -0.2, ()), finish="stop"))
    doc = json.loads(render.finish(USAGE))
    choice = doc["choices"][0]
    assert (choice["text"], choice["finish_reason"], doc["usage"]) == ("hello", "stop", USAGE)
    assert choice["logprobs"]["tokens"] == ["he", "llo"]
    assert choice["logprobs"]["text_offset"] == [0, 2]


def test_renderers_are_chosen_by_kind_and_stream():
    for choose, kind, stream, cls in [(chat_renderer, "chat", True, ChatChunks),
                                      (chat_renderer, "chat", False, ChatDocument),
                                      (completion_renderer, "completion", True, CompletionChunks),
                                      (completion_renderer, "completion", False, CompletionDocument)]:
        assert type(choose(GenSpec(kind=kind, model="m", stream=stream), HEADER)) is cls


# ---- 3. the shell: head timing, pings, errors before and after the head -------------------

def shell(kind="chat", stream=True, ping_interval_s=15.0):
    statuses, finished = [], []
    spec = GenSpec(kind=kind, model="m", stream=stream)
    choose = chat_renderer if kind == "chat" else completion_renderer
    stream_, (ticket,), bridge = generation_stream(
        spec, HEADER, choose(spec, HEADER), prompt_tokens=1, statuses=statuses,
        finished=finished, ping_interval_s=ping_interval_s)
    return stream_, ticket, bridge, statuses, finished


def test_no_head_and_no_ping_until_the_engine_schedules_the_request():
    """A queued request sends nothing (so a queue deadline can still be a 503 status);
    after its first token the head goes out and quiet periods get a ping."""
    stream_, ticket, bridge, statuses, _ = shell()
    idle = stream_.poll(1.0)
    assert idle.head is None and idle.chunks == [] and not idle.done
    assert stream_.next_deadline_s() is None
    waiting = stream_.poll(100.0)                           # long past the ping interval
    assert waiting.head is None and waiting.chunks == [] and statuses == []
    bridge.feed(ticket, tok(1))
    first = stream_.poll(101.0)
    assert first.head.status == 200 and statuses == [200]
    assert ("Content-Type", "text/event-stream; charset=utf-8") in first.head.headers
    assert stream_.next_deadline_s() == 116.0
    assert stream_.poll(110.0).chunks == []                 # no ping before the interval
    ping = stream_.poll(116.0)
    assert ping.head is None and ping.chunks == [PING]
    assert stream_.next_deadline_s() == 131.0


def test_streamed_answer_sends_head_with_the_first_bytes_then_finishes():
    stream_, ticket, bridge, statuses, finished = shell()
    bridge.feed(ticket, tok(1))
    first = stream_.poll(0.5)
    assert first.head.status == 200 and len(sse_events(b"".join(first.chunks))) == 2
    bridge.feed(ticket, tok(2, finish=FINISH_LENGTH))
    last = stream_.poll(0.6)
    assert last.head is None and last.done and sse_events(b"".join(last.chunks))[-1] == "[DONE]"
    assert statuses == [200] and finished[0].completion_tokens == 2
    assert stream_.next_deadline_s() is None


def test_error_before_the_head_is_a_status_response():
    stream_, ticket, bridge, statuses, _ = shell()
    bridge.feed(ticket, Expired("waited too long"))
    out = stream_.poll(0.5)
    assert out.done and out.head.status == 503 and statuses == [503]
    assert ("Content-Type", "application/json") in out.head.headers
    assert json.loads(b"".join(out.chunks))["error"]["code"] == "no_capacity"
    assert bridge.aborted == []             # the engine ended it itself: nothing to abort


def test_error_after_the_head_is_an_sse_error_event_then_done():
    stream_, ticket, bridge, statuses, finished = shell(kind="completion")
    bridge.feed(ticket, tok(1))
    assert stream_.poll(0.5).head.status == 200
    bridge.feed(ticket, Failed("engine step failed"))
    out = stream_.poll(0.6)
    assert out.head is None and out.done
    events = sse_events(b"".join(out.chunks))
    assert events[0]["error"]["type"] == "server_error" and events[1] == "[DONE]"
    assert statuses == [200] and bridge.aborted == [] and finished == []


def test_whole_answer_is_one_document_and_never_pings():
    stream_, ticket, bridge, statuses, finished = shell(kind="completion", stream=False)
    assert stream_.next_deadline_s() is None and stream_.poll(100.0).head is None
    bridge.feed(ticket, tok(1), tok(2), tok(9, finish=FINISH_STOP))
    out = stream_.poll(100.5)
    assert out.done and out.head.status == 200 and out.head.content_length == len(out.chunks[0])
    doc = json.loads(out.chunks[0])
    assert doc["choices"][0]["text"] == "hello" and doc["usage"]["completion_tokens"] == 3
    assert statuses == [200] and len(finished) == 1


def test_cancel_aborts_the_engine_request():
    stream_, ticket, bridge, _, _ = shell()
    stream_.cancel()
    assert bridge.aborted == [ticket] and stream_.poll(1.0).done


def test_an_error_in_one_choice_ends_the_others():
    spec = GenSpec(kind="chat", model="m", stream=True, n=2)
    stream_, tickets, bridge = generation_stream(spec, HEADER, chat_renderer(spec, HEADER),
                                                 choices=2)
    bridge.feed(tickets[0], tok(1))
    bridge.feed(tickets[1], tok(1))
    assert stream_.poll(0.5).head.status == 200
    bridge.feed(tickets[0], Failed("engine refused the request: bug"))
    out = stream_.poll(0.6)
    assert out.done and sse_events(b"".join(out.chunks))[-1] == "[DONE]"
    assert bridge.aborted == [tickets[1]]   # the failed one had ended; its sibling is ended


def test_a_stop_string_ends_the_engine_request_at_the_step_it_matched():
    """The abort is the output's answer to the step's events, before any stream polls."""
    spec = GenSpec(kind="completion", model="m", stream=True, stop=("ll",))
    stream_, (ticket,), bridge = generation_stream(spec, HEADER, completion_renderer(spec, HEADER))
    bridge.feed(ticket, tok(1))
    assert bridge.aborted == [] and stream_.has_output()
    bridge.feed(ticket, tok(2))
    assert bridge.aborted == [ticket]
    out = stream_.poll(0.5)
    assert out.done and [e["choices"][0]["text"] for e in sse_events(b"".join(out.chunks))[:-1]] \
        == ["he", ""]
