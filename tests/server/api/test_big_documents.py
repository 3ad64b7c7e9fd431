"""Big documents are built off the loop (server/offloop/pool.py): a whole answer with many
logprobs and a large embeddings document wait for the pool; small ones answer at once."""
from __future__ import annotations

import json

from server.api import documents as docs
from server.api.chat.render import renderer as chat_renderer
from server.api.embeddings import INLINE_DOCUMENT_MAX_VALUES, EmbedStream
from server.api.generation import GenSpec
from server.api.streams import INLINE_DOCUMENT_MAX_ENTRIES
from server.http.protocol import Response
from server.worker.embedding_jobs import EmbedTicket
from tests.fakes import ManualOffLoop, tok
from tests.server.api.stream_helpers import generation_stream


def test_a_large_whole_document_is_built_off_the_loop_then_counted():
    offloop, statuses, finished = ManualOffLoop(), [], []
    spec = GenSpec(kind="chat", model="m", logprobs=True, top_logprobs=2)
    header = docs.Header("i", 0, "m")
    stream, (ticket,), bridge = generation_stream(
        spec, header, chat_renderer(spec, header), prompt_tokens=1, route="chat",
        statuses=statuses, finished=finished, offloop=offloop)
    tokens = INLINE_DOCUMENT_MAX_ENTRIES // 3 + 1          # 3 entries a token: just over
    for _ in range(tokens - 1):
        bridge.feed(ticket, tok(1, top=((1, -0.1), (2, -0.2))))
    bridge.feed(ticket, tok(2, finish="length", top=((1, -0.1), (2, -0.2))))
    waiting = stream.poll(1.0)
    assert waiting.head is None and not waiting.done and len(offloop.jobs) == 1
    assert statuses == [] and finished == []
    offloop.finish_all()
    out = stream.poll(2.0)
    assert out.head.status == 200 and out.done and statuses == [200] and len(finished) == 1
    document = json.loads(b"".join(out.chunks))
    assert len(document["choices"][0]["logprobs"]["content"]) == tokens


def embed_stream(vectors: list, offloop, statuses: list) -> EmbedStream:
    ticket = EmbedTicket([[1]] * len(vectors), "float")
    ticket.result, ticket.done = vectors, True
    return EmbedStream(ticket=ticket, model_id="m", prompt_tokens=len(vectors), headers=(),
                       on_status=lambda route, s: statuses.append(s), offloop=offloop)


def test_a_large_embeddings_document_is_built_off_the_loop_a_small_one_at_once():
    offloop, statuses = ManualOffLoop(), []
    small = embed_stream([[0.5, 0.25]], offloop, statuses).poll(0.0)
    assert small.head.status == 200 and small.done and offloop.jobs == []
    values = [[0.5] * 64 for _ in range(INLINE_DOCUMENT_MAX_VALUES // 64 + 1)]
    large = embed_stream(values, offloop, statuses)
    assert large.poll(0.0).head is None and len(offloop.jobs) == 1 and statuses == [200]
    offloop.finish_all()
    out = large.poll(1.0)
    assert out.head.status == 200 and out.done and statuses == [200, 200]
    assert len(json.loads(b"".join(out.chunks))["data"]) == len(values)


def test_a_wake_finds_output_only_once_the_work_or_the_engine_is_done():
    offloop, statuses = ManualOffLoop(), []
    stream = offloop.run(lambda: b"built", lambda outcome: Response(status=200, body=outcome.get()))
    assert not stream.has_output()              # the work runs: a wake has nothing to fetch
    offloop.finish_all()
    assert stream.has_output()
    assert stream.poll(0.0).chunks == [b"built"]
    cancelled = offloop.run(lambda: None, lambda outcome: Response(status=200))
    cancelled.cancel()
    assert cancelled.has_output()               # its end is due
    ticket = EmbedTicket([[1]], "float")
    embed = EmbedStream(ticket=ticket, model_id="m", prompt_tokens=1, headers=(),
                        on_status=lambda route, s: statuses.append(s), offloop=offloop)
    assert not embed.has_output()               # the engine has not run the input yet
    ticket.result, ticket.done = [[0.5]], True
    assert embed.has_output() and embed.poll(0.0).done and statuses == [200]
