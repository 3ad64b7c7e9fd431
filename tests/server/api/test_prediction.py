"""`prediction` (predicted outputs): the request field on chat and completions, and the
answer's usage.completion_tokens_details summed over choices, whole and streamed (unit level:
a stream shell on a recording bridge, the engine's finishing TokenOuts written by hand)."""
from __future__ import annotations

import json

import pytest

from engine.api import FINISH_LENGTH, FINISH_STOP, TokenOut
from server.api import documents as docs
from server.api.chat.request import parse_chat
from server.api.chat.render import renderer as chat_renderer
from server.api.completions import parse_completion
from server.api.generation import GenSpec
from server.errors import ApiError
from tests.server.api.stream_helpers import generation_stream

HI = [{"role": "user", "content": "hi"}]
PREDICTED = {"type": "content", "content": "def f():\n    return 1\n"}


def chat(**fields) -> bytes:
    return json.dumps({"model": "m", "messages": HI, **fields}).encode()


def completion(**fields) -> bytes:
    return json.dumps({"model": "m", "prompt": "p", **fields}).encode()


# ---- the request field -------------------------------------------------------------------------

def test_a_string_prediction_is_its_text_on_chat_and_completions():
    assert parse_chat(chat(prediction=PREDICTED)).prediction == PREDICTED["content"]
    assert parse_completion(completion(prediction=PREDICTED)).prediction == PREDICTED["content"]
    assert parse_chat(chat(prediction={"type": "content", "content": ""})).prediction == ""


def test_text_parts_are_concatenated_in_order():
    parts = {"type": "content", "content": [{"type": "text", "text": "def f():\n"},
                                            {"type": "text", "text": "    return 1\n"}]}
    assert parse_chat(chat(prediction=parts)).prediction == "def f():\n    return 1\n"
    assert parse_completion(completion(prediction=parts)).prediction == "def f():\n    return 1\n"


def test_no_prediction_or_null_is_none():
    assert parse_chat(chat()).prediction is None
    assert parse_chat(chat(prediction=None)).prediction is None
    assert parse_completion(completion()).prediction is None


def test_n_logprobs_and_tools_are_accepted_beside_a_prediction():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    spec = parse_chat(chat(prediction=PREDICTED, n=2, logprobs=True, top_logprobs=2,
                           tools=tools))
    assert spec.prediction == PREDICTED["content"] and spec.n == 2 and spec.logprobs
    assert spec.tools is not None


@pytest.mark.parametrize("prediction, param", [
    ("def f(): pass", "prediction"), (["def"], "prediction"), (5, "prediction"),
    ({"content": "x"}, "prediction.type"), ({"type": "text", "content": "x"}, "prediction.type"),
    ({"type": "static", "content": "x"}, "prediction.type"),
    ({"type": "content"}, "prediction.content"), ({"type": "content", "content": 5},
                                                  "prediction.content"),
    ({"type": "content", "content": {"text": "x"}}, "prediction.content"),
    ({"type": "content", "content": ["x"]}, "prediction.content[0]"),
    ({"type": "content", "content": [{"type": "text", "text": "a"}, {"text": "b"}]},
     "prediction.content[1]"),
    ({"type": "content", "content": [{"type": "image_url", "image_url": {}}]},
     "prediction.content[0]"),
    ({"type": "content", "content": [{"type": "text", "text": 5}]}, "prediction.content[0].text"),
    ({"type": "content", "content": [{"type": "text"}]}, "prediction.content[0].text"),
])
def test_every_other_shape_is_a_400_naming_the_field(prediction, param):
    for parse, body in ((parse_chat, chat(prediction=prediction)),
                        (parse_completion, completion(prediction=prediction))):
        with pytest.raises(ApiError) as info:
            parse(body)
        err = info.value
        assert (err.status, err.param) == (400, param)
        assert err.document()["error"]["type"] == "invalid_request_error"


# ---- usage ------------------------------------------------------------------------------------

def finished(accepted: int, rejected: int, finish: str = FINISH_STOP) -> TokenOut:
    """The engine's last event of a request: its token and the prediction's counts."""
    return TokenOut(id=0, token=2, finish=finish, accepted_prediction_tokens=accepted,
                    rejected_prediction_tokens=rejected)


def answer(spec: GenSpec, *finishes: TokenOut) -> bytes:
    """The bytes a stream shell of len(finishes) choices sends: each choice "he" then its
    finishing event."""
    return answer_events(spec, *[[TokenOut(id=0, token=1), last] for last in finishes])


def answer_events(spec: GenSpec, *events: list[TokenOut]) -> bytes:
    """The bytes a stream shell sends for one choice per list of engine events."""
    header = docs.Header("chatcmpl-1", 0, "m")
    stream, tickets, bridge = generation_stream(spec, header, chat_renderer(spec, header),
                                                choices=len(events), prompt_tokens=3,
                                                route="chat")
    for ticket, choice_events in zip(tickets, events):
        bridge.feed(ticket, *choice_events)
    out = stream.poll(0.0)
    assert out.done
    return b"".join(out.chunks)


def streamed_usage(raw: bytes) -> dict:
    payloads = [block[len(b"data: "):] for block in raw.split(b"\n\n") if block]
    assert payloads[-1] == b"[DONE]"
    last = json.loads(payloads[-2])
    assert last["choices"] == []
    return last["usage"]


def test_a_whole_answer_reports_the_prediction_tokens_of_its_finish():
    spec = GenSpec(kind="chat", model="m", prediction="hello")
    usage = json.loads(answer(spec, finished(5, 2)))["usage"]
    assert usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                     "completion_tokens_details": {"accepted_prediction_tokens": 5,
                                                   "rejected_prediction_tokens": 2}}


def test_two_choices_sum_their_prediction_tokens():
    spec = GenSpec(kind="chat", model="m", n=2, prediction="hello")
    usage = json.loads(answer(spec, finished(5, 2), finished(1, 6, FINISH_LENGTH)))["usage"]
    assert usage["completion_tokens_details"] == {"accepted_prediction_tokens": 6,
                                                  "rejected_prediction_tokens": 8}
    assert usage["completion_tokens"] == 4


def test_the_streamed_usage_chunk_carries_them_too():
    spec = GenSpec(kind="chat", model="m", n=2, stream=True, include_usage=True,
                   prediction="hello")
    usage = streamed_usage(answer(spec, finished(5, 2), finished(3, 0)))
    assert usage["completion_tokens_details"] == {"accepted_prediction_tokens": 8,
                                                  "rejected_prediction_tokens": 2}


def test_a_choice_a_stop_string_ends_reports_the_running_counts_of_its_last_step():
    """The engine's counts are running totals on each step's last token (engine/types.py):
    the latest is the choice's, also when the server ends it before the engine's finish."""
    spec = GenSpec(kind="chat", model="m", prediction="hello", stop=("ll",))
    running = [TokenOut(id=0, token=1, accepted_prediction_tokens=2, rejected_prediction_tokens=1),
               TokenOut(id=0, token=2, accepted_prediction_tokens=3, rejected_prediction_tokens=1),
               TokenOut(id=0, token=1, finish=FINISH_STOP)]        # never read: "ll" stopped it
    body = json.loads(answer_events(spec, running))
    assert body["choices"][0]["message"]["content"] == "he"
    assert body["usage"]["completion_tokens_details"] == {"accepted_prediction_tokens": 3,
                                                          "rejected_prediction_tokens": 1}


def test_an_answer_without_a_prediction_keeps_the_plain_usage():
    usage = json.loads(answer(GenSpec(kind="chat", model="m"), finished(0, 0)))["usage"]
    assert usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    usage = streamed_usage(answer(GenSpec(kind="chat", model="m", stream=True,
                                          include_usage=True), finished(0, 0)))
    assert "completion_tokens_details" not in usage
