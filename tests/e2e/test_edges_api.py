"""Edges over real sockets that a one-character slip would break without any other test
noticing: the context rule at exactly max_model_len, a stop string that must end the engine's
work too (not only the answer), the stop/EOS token never getting a logprobs entry, and the
earliest of several stop strings winning. On the succ bigram (byte i -> i + 1; EOS 256
only when biased)."""
from __future__ import annotations


import pytest

from engine.api import EngineConfig
from tests.e2e.helpers import (chat_body, chat_stream_text, metrics, post, server_fixture,
                               stream_chunks)
from tests.polling import wait_for

MAX_MODEL_LEN = 64
STOPPED_WITHIN_STEPS = 10              # prefill + "bcd" + the stop's own token, with room
STEP_DELAY_S = 0.02                     # decoding 300 tokens would take 6 s


server = server_fixture("succ_model_dir", step_delay_s=STEP_DELAY_S,
                        engine=EngineConfig(max_model_len=MAX_MODEL_LEN))


def completion(server, prompt, **fields):
    return post(server, "/v1/completions", {"model": "succ", "prompt": prompt,
                                            "temperature": 0, **fields})


def test_context_rule_at_exactly_max_model_len_and_one_past_it(server):
    assert post(server, "/v1/tokenize", {"model": "succ", "prompt": "a"}).json()[
        "max_model_len"] == MAX_MODEL_LEN
    prompt = [40] * 10
    fits = completion(server, prompt, max_tokens=MAX_MODEL_LEN - 10, ignore_eos=True)
    assert fits.status_code == 200, fits.text
    assert fits.json()["usage"]["completion_tokens"] == MAX_MODEL_LEN - 10
    assert fits.json()["choices"][0]["finish_reason"] == "length"
    past = completion(server, prompt, max_tokens=MAX_MODEL_LEN - 9)
    assert past.status_code == 400
    assert past.json()["error"]["code"] == "context_length_exceeded"
    chat_fits = post(server, "/v1/chat/completions",            # "a" is one prompt token
                     chat_body("a", max_tokens=MAX_MODEL_LEN - 1, temperature=0,
                               ignore_eos=True))
    assert chat_fits.status_code == 200
    chat_past = post(server, "/v1/chat/completions", chat_body("a", max_tokens=MAX_MODEL_LEN))
    assert chat_past.status_code == 400
    assert chat_past.json()["error"]["code"] == "context_length_exceeded"
    full = completion(server, [40] * MAX_MODEL_LEN)           # no room for even one token
    assert full.status_code == 400


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_ends_the_engine_request_right_after_the_answer(server, stream):
    body = chat_body("a", max_tokens=MAX_MODEL_LEN - 1, temperature=0, ignore_eos=True,
                     stop=["e"], stream=stream)
    steps_before = metrics(server)["tl_engine_steps_total"]
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 200
    text = (chat_stream_text(stream_chunks(answer)[0]) if stream
            else answer.json()["choices"][0]["message"]["content"])
    assert text == "bcd"

    def idle():
        m = metrics(server)
        return (m["tl_engine_active_sequences"] == 0
                and m['tl_engine_kv_blocks{state="used"}'] == 0)
    assert wait_for(idle)
    # counted in engine steps: the answer's few, not the ~60 that max_tokens allowed
    assert metrics(server)["tl_engine_steps_total"] - steps_before <= STOPPED_WITHIN_STEPS


def test_stop_and_eos_tokens_get_no_logprobs_entry(server):
    doc = post(server, "/v1/chat/completions",
               chat_body("a", max_tokens=10, temperature=0, logprobs=True,
                         stop_token_ids=[ord("d")])).json()
    choice = doc["choices"][0]
    assert choice["message"]["content"] == "bc" and choice["finish_reason"] == "stop"
    assert [e["token"] for e in choice["logprobs"]["content"]] == ["b", "c"]
    eos = completion(server, "a", max_tokens=5, logprobs=1,     # EOS (256) is sampled first
                     logit_bias={"256": 100}).json()
    choice = eos["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"] == ""
    assert eos["usage"]["completion_tokens"] == 1
    assert choice["logprobs"]["tokens"] == [] and choice["logprobs"]["token_logprobs"] == []


def test_the_earliest_of_several_stop_strings_wins(server):
    for stop in (["fg", "cd"], ["cd", "fg"]):
        doc = completion(server, "a", max_tokens=10, stop=stop).json()
        assert doc["choices"][0]["text"] == "b", stop
