"""Embeddings, `POST /v1/embeddings`: the request (`parse_embeddings`), the handler (inputs ->
token ids -> one job for the model's thread) and the answer: wait for the job, then one JSON
document.

Two kinds of model answer it. A sentence-embedding model (all-MiniLM-L6-v2: `model` names
one of `ApiContext.encoders`) tokenizes with its WordPiece vocabulary here, refuses an input
over its `max_seq_length` (400 naming the input's index and token count) unless
`truncate_prompt_tokens` asks for a cut, and runs on its encoder thread
(server/worker/encoder_thread.py). The chat model mean-pools its own hidden states: its
engine thread runs the inputs (packed into its steps, server/worker/embedding_jobs.py).
Either hands back the vectors already in the asked encoding. The document is then built once: on
the loop thread when it is small, off it (server/offloop/pool.py) when it is large — 2,048
float vectors of 576 values are ~23 MB of JSON, about half a second of `json.dumps` —
and then piece by piece (`json_bytes_piecewise`), so the encoder never holds the GIL long.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from engine.api import Encoder, InputTooLong, InvalidRequest

from server.api import documents as docs
from server.replies import JSON_CONTENT_TYPE, json_bytes, json_bytes_piecewise
from server.api.fields import bad, is_int, load_json_object, model_name, token_ids, unsupported
from server.api.launch import TASK_EMBED, ApiContext, ModelContext
from server.door.routes import Params
from server.replies import Headers
from server.worker.embedding_jobs import EmbedTicket
from server.errors import ApiError
from server.http.protocol import Request, Response, Stream, StreamPoll
from server.offloop.pool import Inline, OffLoop, ResponseStream

MAX_EMBEDDING_INPUTS = 2048     # inputs in one call (OpenAI's limit)

# A document of more values than this is built off the loop. `json.dumps` takes ~0.4 us a
# float: 8,192 of them ~3 ms. A base64 vector counts its characters (cheaper per value:
# so the count errs on the side of the off-loop pool).
INLINE_DOCUMENT_MAX_VALUES = 8192


TRUNCATE_TO_MAX = -1            # vLLM's `truncate_prompt_tokens: -1`: cut at the model's max


@dataclass(frozen=True, kw_only=True)
class EmbedSpec:
    model: str
    inputs: tuple[str | tuple[int, ...], ...]   # texts or token-id lists, in input order
    encoding_format: str = "float"              # "float" | "base64"
    truncate_tokens: int | None = None          # vLLM's truncate_prompt_tokens (-1: the max)


def parse_embeddings(body: bytes) -> EmbedSpec:
    doc = load_json_object(body)
    model = model_name(doc)
    v = doc.get("input")
    if isinstance(v, str):
        inputs: tuple = (v,)
    elif isinstance(v, list) and v and all(is_int(t) for t in v):
        inputs = (token_ids(v, "input"),)
    elif isinstance(v, list) and v and all(isinstance(x, (str, list)) for x in v):
        inputs = tuple(x if isinstance(x, str) else token_ids(x, "input") for x in v)
    else:
        raise bad("input", "'input' must be a string, a list of strings, or token ids.")
    if any(len(x) == 0 for x in inputs if not isinstance(x, str)):
        raise bad("input", "'input' cannot contain an empty token list.")
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise bad("input", f"'input' allows at most {MAX_EMBEDDING_INPUTS} entries.")
    fmt = doc.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", f"{fmt!r} is not valid for 'encoding_format': "
                                     "expected 'float' or 'base64'.")
    if doc.get("dimensions") is not None:
        raise unsupported("dimensions", "'dimensions' is not supported: the served model was "
                                        "not trained for reduced dimensions (Matryoshka "
                                        "representation learning), so a shortened embedding "
                                        "would not keep its meaning.")
    return EmbedSpec(model=model, inputs=inputs, encoding_format=fmt,
                     truncate_tokens=_truncate_tokens(doc.get("truncate_prompt_tokens")))


def _truncate_tokens(v) -> int | None:
    if v is None:
        return None
    if not is_int(v) or not (v == TRUNCATE_TO_MAX or v >= 1):
        raise bad("truncate_prompt_tokens", f"{v!r} is not valid for 'truncate_prompt_tokens': "
                                            "expected -1 (the model's maximum) or a count >= 1.")
    return v


def encoder_rows(encoder: Encoder, inputs: Sequence[str | tuple[int, ...]],
                 cut: int | None, name_of: Callable[[int], tuple[str, str]] = lambda i: (
                     "input", f"Input {i}")) -> list[list[int]]:
    """Each input as the encoder's token ids: [CLS] ... [SEP] for a text, an id list as
    given. With a `cut` (k, or -1 for the model's max_seq_length: vLLM's
    truncate_prompt_tokens) a longer input is cut as sentence-transformers cuts at a
    max_seq_length of k: a text keeps [CLS], its first k-2 pieces and [SEP]; an id list its
    first k ids. Without it a longer input is a 400 naming it (`name_of(index)`: the field
    and the words for that input) and its token count."""
    limit = encoder.max_seq_length
    try:
        rows = encoder.token_ids(inputs, truncate=cut is not None)
    except InputTooLong as exc:
        param, words = name_of(exc.input_index)
        raise ApiError("context_length_exceeded", f"{words} has {exc.prompt_tokens} tokens, "
                       f"more than the model's maximum of {exc.max_model_len}; shorten it or "
                       "set truncate_prompt_tokens (-1 cuts at the maximum).",
                       param=param) from None
    except InvalidRequest as exc:
        raise bad(name_of(0)[0], f"{exc}.") from None
    if cut is None or cut == TRUNCATE_TO_MAX or cut >= limit:
        return rows
    return [row if len(row) <= cut else (row[:cut - 1] + row[-1:] if isinstance(x, str)
                                         else row[:cut])
            for x, row in zip(inputs, rows)]


def embeddings(api: ApiContext, request: Request, params: Params, extra: Headers) -> EmbedStream:
    spec = parse_embeddings(request.body)
    with api.serving(spec.model, TASK_EMBED) as ctx:
        enc_thread = ctx.encoder
        if enc_thread is not None:
            rows = encoder_rows(enc_thread.encoder, spec.inputs, spec.truncate_tokens)
            return launch_embedding(ctx, enc_thread, spec.model, rows,
                                    spec.encoding_format, extra, request.request_id)
        if spec.truncate_tokens is not None:
            raise unsupported("truncate_prompt_tokens", "'truncate_prompt_tokens' is served "
                              "for sentence-embedding models only; this chat model embeds "
                              "inputs of up to its context length whole.")
        if any(x == "" for x in spec.inputs):     # an encoder embeds "" as [CLS] [SEP]
            raise bad("input", "'input' cannot contain an empty string.")
        for x in spec.inputs:
            if isinstance(x, tuple):
                ctx.served.check_token_ids(x, "input")
        inputs = [list(x) if isinstance(x, tuple) else ctx.served.encode(x) for x in spec.inputs]
        for ids in inputs:
            ctx.served.check_input_length(ids, "input")
        return launch_embedding(ctx, ctx.client, ctx.served.id, inputs,
                                spec.encoding_format, extra, request.request_id)


Render = Callable[[list, int], dict]       # (vectors, prompt tokens) -> the answer's document


class Embedder(Protocol):
    """The engine bridge (chat model) or an encoder thread: admission, then a job."""
    def embed(self, inputs: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket: ...


def launch_embedding(ctx: ModelContext, embedder: Embedder, model_id: str,
                     inputs: list[list[int]], encoding_format: str, extra: Headers,
                     request_id: str, route: str = "embeddings",
                     render: Render | None = None) -> EmbedStream:
    """Admission where the handler runs (429 when the model's queue is full), then the stream
    that answers with `render(vectors, prompt_tokens)` (default: the embeddings list)."""
    try:
        ticket = embedder.embed(inputs, encoding_format,    # 429 when its queue is full
                                request_id=request_id)
    except ApiError as err:
        raise err.about(model_id)
    return EmbedStream(ticket=ticket, model_id=model_id,
                       prompt_tokens=sum(map(len, inputs)), headers=extra,
                       on_status=ctx.count_request, offloop=ctx.offloop, route=route,
                       render=render)


def document_values(vectors: list) -> int:
    """The size of the embeddings document to build: floats, or base64 characters."""
    return sum(len(v) for v in vectors)


class EmbedStream:
    """Waits for the engine to run the inputs (packed into its steps), then answers once."""

    def __init__(self, *, ticket: EmbedTicket, model_id: str, prompt_tokens: int,
                 headers: tuple[tuple[str, str], ...], on_status: Callable[[str, int], None],
                 offloop: OffLoop = Inline(), route: str = "embeddings",
                 render: Render | None = None):
        self.ticket, self.model_id, self.prompt_tokens = ticket, model_id, prompt_tokens
        self.route = route                            # the metrics' route label
        self.render = render or (lambda vectors, tokens: docs.embeddings(model_id, vectors,
                                                                         tokens))
        self.headers, self.on_status, self.offloop = headers, on_status, offloop
        self.tail: Stream | None = None         # the answer (its document perhaps built off the loop)
        self.done = False

    def access_fields(self) -> dict:
        """What the access log (server/door/access.py) records of this request."""
        return {"model": self.model_id, "prompt_tokens": self.prompt_tokens,
                "error": self.ticket.error if self.ticket.done else None}

    def poll(self, now_s: float) -> StreamPoll:
        if self.tail is None:
            if self.done or not self.ticket.done:
                return StreamPoll(done=self.done)
            self.tail = self._answer()
        return self.tail.poll(now_s)

    def _answer(self) -> Stream:
        if self.ticket.error is not None:
            err = ApiError("internal_error", self.ticket.error)
            return ResponseStream(self._response(err.status, json_bytes(err.document())))
        if document_values(self.ticket.result) > INLINE_DOCUMENT_MAX_VALUES:
            return self.offloop.run(self._document,
                                    lambda body: self._response(200, body.get()))
        return ResponseStream(self._response(200, self._document()))

    def _document(self) -> bytes:
        return json_bytes_piecewise(self.render(self.ticket.result, self.prompt_tokens))

    def _response(self, status: int, body: bytes) -> Response:
        """The answer, counted; on the loop thread (a large body was built off it)."""
        self.done = True
        self.on_status(self.route, status)
        return Response(status=status, headers=(JSON_CONTENT_TYPE,) + self.headers, body=body)

    def has_output(self) -> bool:
        """The engine has run the inputs (it sets `ticket.done` before it wakes the loop),
        or the answer built from them has output, or the end is due."""
        if self.tail is not None:
            return self.tail.has_output()
        return self.done or self.ticket.done

    def next_deadline_s(self) -> float | None:
        return None if self.tail is None else self.tail.next_deadline_s()

    def cancel(self) -> None:
        self.ticket.is_cancelled = True         # the engine thread drops the job
        if self.tail is not None:
            self.tail.cancel()
        self.done = True
