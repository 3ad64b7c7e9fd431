"""n > 1 on a real server (tiny random Llama): choice 0 is the n = 1 answer, seeded choices
are reproducible and distinct, greedy ones identical, streams interleave by index, usage
counts the prompt once, and the prompt is computed once (the prefix-cache counters)."""
from __future__ import annotations

import json

import pytest

from server.api.launch import choice_seed
from tests.e2e.helpers import post, running_server, sse_events, openai_client

PROMPT = "the quick brown fox jumps over the lazy dog " * 3


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    from engine.api import EngineConfig
    with running_server(tiny_llama_dir, engine=EngineConfig(block_size=4)) as handle:
        yield handle, tiny_llama_dir.name


def _complete(handle, name, **fields):
    r = post(handle, "/v1/completions", {"model": name, "prompt": PROMPT, "max_tokens": 6,
                                         **fields})
    assert r.status_code == 200, r.text
    return r.json()


def test_seeded_choices_reproducible_distinct_and_choice_zero_is_n1(tiny):
    handle, name = tiny
    sampled = dict(temperature=1.5, seed=11)
    three = _complete(handle, name, n=3, **sampled)
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    texts = [c["text"] for c in three["choices"]]
    assert texts[0] == _complete(handle, name, **sampled)["choices"][0]["text"]
    assert texts == [c["text"] for c in _complete(handle, name, n=3, **sampled)["choices"]]
    assert len(set(texts)) > 1
    one = three["usage"]["prompt_tokens"]
    assert three["usage"]["completion_tokens"] == 3 * 6
    assert one == _complete(handle, name, **sampled)["usage"]["prompt_tokens"]


def test_greedy_n2_gives_two_identical_choices_each_with_its_finish(tiny):
    handle, name = tiny
    client = openai_client(handle)
    done = client.chat.completions.create(model=name, messages=[{"role": "user",
                                                                 "content": PROMPT}],
                                          n=2, max_tokens=5, temperature=0)
    assert [c.index for c in done.choices] == [0, 1]
    assert done.choices[0].message.content == done.choices[1].message.content
    assert [c.finish_reason for c in done.choices] == ["length", "length"]
    assert done.usage.completion_tokens == 10


def test_streamed_choices_interleave_by_index(tiny):
    handle, name = tiny
    r = post(handle, "/v1/chat/completions", {
        "model": name, "messages": [{"role": "user", "content": PROMPT}], "n": 2,
        "max_tokens": 4, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    chunks = [json.loads(e) for e in sse_events(r.content) if e != "[DONE]"]
    by_index = {0: [], 1: []}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        by_index[choice["index"]].append(choice)
    for choices in by_index.values():
        assert choices[0]["delta"] == {"role": "assistant", "content": ""}
        assert [c["finish_reason"] for c in choices][-1] == "length"
    assert "".join(c["delta"]["content"] for c in by_index[0]) == \
        "".join(c["delta"]["content"] for c in by_index[1])
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_the_prompt_is_computed_once_for_n_choices(tiny_llama_dir):
    from engine.api import EngineConfig
    with running_server(tiny_llama_dir, engine=EngineConfig(block_size=4)) as handle:
        name = tiny_llama_dir.name
        doc = _complete(handle, name, n=4, temperature=0)
        prompt_tokens = doc["usage"]["prompt_tokens"]
        stats = handle.bridge.stats                         # the engine's counters
        shared = (prompt_tokens - 1) // 4 * 4               # whole blocks of the prompt
        assert stats.prompt_tokens == 4 * prompt_tokens
        assert stats.prefix_hit_tokens == 3 * shared        # 3 forks: only their tails computed


def test_choice_seeds_keep_choice_zero_and_derive_the_rest():
    assert choice_seed(5, 0) == 5 and choice_seed(None, 3) is None
    assert choice_seed(5, 1) == choice_seed(5, 1) != choice_seed(5, 2)
    assert 0 <= choice_seed(5, 1) < 2 ** 63
