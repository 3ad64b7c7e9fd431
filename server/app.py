"""The two applications the loop serves: the OpenAI API and the health/metrics listener.

`ApiApp.handle(request)` is the whole life of an API request on the loop thread:

    route table -> validate body (server/openai.py) -> served model? -> headers
    (X-TL-KV-Handle, X-TL-Priority) -> chat template -> tokenizer -> context check
    -> bridge.submit (admission: 429 now if the queue is full) -> GenerationStream

It never blocks: anything that needs the engine becomes a `Stream`. Every response,
errors and 404s included, carries `X-Request-Id` (echoed when the client sent a sane one).
Drain (chapter 2.6) flips `ServerState.is_draining`: new API requests get 503, `/readyz`
503, `/healthz` stays 200.
"""
from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from engine.api import (GenRequest, Model, ModelFormatError, PromptTooLong, Tokenizer,
                        check_context)
from server import documents as docs
from server import openai as api
from server.bridge import EngineBridge
from server.defaults import SamplingDefaults
from server.errors import ApiError, error_response, kind_response
from server.metrics import CONTENT_TYPE as METRICS_TYPE
from server.metrics import ServerMetrics, metrics_text
from server.documents import JSON_CONTENT_TYPE, json_bytes
from server.http.protocol import Request, Response, Stream
from server.routes import API_ROUTES, HEALTH_ROUTES, resolve
from server.streams import EmbedStream, GenerationStream, StreamContext
from template import ChatFormat, TemplateError, TemplateSyntaxError

log = logging.getLogger("tlserve.app")

Headers = tuple[tuple[str, str], ...]           # extra response headers (X-Request-Id)
Params = dict[str, str]                         # path parameters from the route table

MAX_REQUEST_ID_CHARS = 128                      # longer client ids are replaced, not echoed
REQUEST_ID_OK = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_REQUEST_ID_CHARS)


@dataclass
class ServerState:
    """Shared, loop-thread-owned flags and counters."""
    is_draining: bool = False
    metrics: ServerMetrics = field(default_factory=ServerMetrics)


class ServedModel:
    """The model as the API sees it: id, chat format, tokenizer, context length.

    The chat template is parsed here, once, at start-up: a broken one stops the server with
    `ModelFormatError` naming the model file and the template's line, never a request."""

    def __init__(self, model: Model, model_id: str, max_model_len: int):
        self.id = model_id
        self.model = model
        self.tokenizer: Tokenizer = model.tokenizer
        self.max_model_len = max_model_len
        self.created = int(time.time())
        try:
            self.chat = ChatFormat.from_source(model.chat_template,
                                               bos_token=self.tokenizer.bos_token,
                                               eos_token=self.tokenizer.eos_token)
        except TemplateSyntaxError as err:
            raise ModelFormatError(model.source_path,
                                   f"chat template does not parse: {err}") from None

    def render(self, messages: tuple[dict, ...], *, add_generation_prompt: bool = True) -> str:
        try:
            return self.chat.render(messages, add_generation_prompt=add_generation_prompt)
        except TemplateError as exc:
            raise ApiError("template_error", exc.message, param="messages") from None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def check_token_ids(self, ids: tuple[int, ...], param: str) -> None:
        """Refuse client-sent token ids past the vocabulary (400 naming `param`).

        Only ids the client typed need this: ids our own tokenizer produced are in range.
        Unchecked, a bad id would fail later on the engine thread as a 500."""
        vocab = self.tokenizer.vocab_size
        if any(t >= vocab for t in ids):
            raise api.bad(param, f"Token ids must be below the vocabulary size {vocab}.")


def request_id(request: Request) -> str:
    given = request.header("x-request-id")
    if given and REQUEST_ID_OK.fullmatch(given):
        return given
    return f"req-{os.urandom(12).hex()}"


def _request_id_of(extra: Headers) -> str:
    return dict(extra)["X-Request-Id"]


def json_response(status: int, document: dict, headers: Headers = ()) -> Response:
    return Response(status=status, headers=(JSON_CONTENT_TYPE,) + tuple(headers),
                    body=json_bytes(document))


class ApiApp:
    """The OpenAI v1 API listener."""

    def __init__(self, *, served: ServedModel, bridge: EngineBridge, state: ServerState,
                 ping_interval_s: float, clock: Callable[[], float] = time.monotonic,
                 defaults: SamplingDefaults = SamplingDefaults()):
        self.served, self.bridge, self.state = served, bridge, state
        self.defaults = defaults                 # server-side sampling defaults
        self.clock = clock
        metrics = state.metrics
        self.stream_ctx = StreamContext(
            bridge=bridge, tokenizer=served.tokenizer, ping_interval_s=ping_interval_s,
            on_status=metrics.count_request,
            on_finish=metrics.observe_generation)
        self.handlers = {"chat": self.chat, "completions": self.completions,
                         "embeddings": self.embeddings, "tokenize": self.tokenize,
                         "detokenize": self.detokenize, "models": self.models,
                         "model": self.model, "healthz": health_ok}

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response | Stream:
        rid = request_id(request)
        extra = (("X-Request-Id", rid),)
        label = "unmatched"
        try:
            route, params = resolve(API_ROUTES, request.method, request.path)
            label = route.handler
            if self.state.is_draining and route.handler != "healthz":
                raise ApiError("shutting_down", "The server is shutting down; retry elsewhere.")
            result = self.handlers[route.handler](request, params, extra)
        except ApiError as err:
            self.state.metrics.count_request(label, err.status)
            return error_response(err, extra)
        except Exception:                                      # noqa: BLE001
            log.exception("request %s: handler %s failed", rid, label)
            self.state.metrics.count_request(label, 500)
            return error_response(ApiError("internal_error", "Internal server error."), extra)
        if isinstance(result, Response):
            self.state.metrics.count_request(label, result.status)
            return Response(status=result.status, headers=result.headers + extra,
                            body=result.body)
        return result

    # -- generation ----------------------------------------------------------------------

    def chat(self, request: Request, params: Params, extra: Headers) -> GenerationStream:
        spec = api.parse_chat(request.body, self.defaults)
        self._check_model(spec.model)
        prompt = self.served.encode(self.served.render(spec.messages))
        return self._generate(request, spec, prompt, "chat", "chatcmpl", "messages", extra)

    def completions(self, request: Request, params: Params, extra: Headers) -> GenerationStream:
        spec = api.parse_completion(request.body, self.defaults)
        self._check_model(spec.model)
        if isinstance(spec.prompt, tuple):
            self.served.check_token_ids(spec.prompt, "prompt")
            prompt = list(spec.prompt)
        else:
            prompt = self.served.encode(spec.prompt)
        if not prompt:
            raise api.bad("prompt", "The prompt must contain at least one token.")
        return self._generate(request, spec, prompt, "completions", "cmpl", "prompt", extra)

    def _generate(self, request: Request, spec: api.GenSpec, prompt: list[int], route: str,
                  id_prefix: str, prompt_param: str, extra: Headers) -> GenerationStream:
        priority = self._headers(request)
        try:                                    # the engine's context rule, one source
            max_tokens = check_context(len(prompt), spec.max_tokens, self.served.max_model_len)
        except PromptTooLong as exc:
            requested = exc.prompt_tokens + exc.completion_tokens
            raise ApiError("context_length_exceeded",
                           f"This model's maximum context length is {exc.max_model_len} tokens. "
                           f"However, you requested {requested} tokens ({exc.prompt_tokens} in "
                           f"the {prompt_param}, {exc.completion_tokens} for the completion). "
                           f"Please reduce the length of the {prompt_param} or max_tokens.",
                           param=prompt_param) from None
        now = self.clock()
        gen = GenRequest(prompt=tuple(prompt), params=spec.params, seed=spec.seed,
                         max_tokens=max_tokens, stop_ids=spec.stop_ids, priority=priority)
        # Admission: a slot in the bridge's queue, or the 429 ApiError raised right here.
        ticket = self.bridge.submit(gen, request_id=_request_id_of(extra))
        return GenerationStream(ctx=self.stream_ctx, ticket=ticket, spec=spec,
                                header=docs.Header.new(id_prefix, self.served.id),
                                prompt_tokens=len(prompt), route=route, headers=extra,
                                arrival_s=now)

    def _check_model(self, model: str) -> None:
        if model != self.served.id:
            raise ApiError("model_not_found", f"The model '{model}' does not exist; this "
                                              f"server serves '{self.served.id}'.", param="model")

    def _headers(self, request: Request) -> int:
        if request.header("x-tl-kv-handle") is not None:
            raise ApiError("kv_handle_not_found", "Unknown KV handle (KV handles are not "
                                                  "served by this engine).", param="X-TL-KV-Handle")
        return api.parse_priority(request.header("x-tl-priority"))

    # -- embeddings, tokenize, models ----------------------------------------------------

    def embeddings(self, request: Request, params: Params, extra: Headers) -> EmbedStream:
        spec = api.parse_embeddings(request.body)
        self._check_model(spec.model)
        for x in spec.inputs:
            if isinstance(x, tuple):
                self.served.check_token_ids(x, "input")
        inputs = [list(x) if isinstance(x, tuple) else self.served.encode(x)
                  for x in spec.inputs]
        for ids in inputs:
            if not ids or len(ids) > self.served.max_model_len:
                raise ApiError("context_length_exceeded", "Each input must have 1 to "
                               f"{self.served.max_model_len} tokens.", param="input")
        ticket = self.bridge.embed(inputs, spec.encoding_format,    # 429 when the queue is full
                                   request_id=_request_id_of(extra))
        return EmbedStream(ticket=ticket, model_id=self.served.id,
                           prompt_tokens=sum(map(len, inputs)), headers=extra,
                           on_status=self.state.metrics.count_request)

    def tokenize(self, request: Request, params: Params, extra: Headers) -> Response:
        spec = api.parse_tokenize(request.body)
        self._check_model(spec.model)
        text = (self.served.render(spec.messages,
                                   add_generation_prompt=spec.add_generation_prompt)
                if spec.messages else spec.prompt)
        tokens = self.served.encode(text)
        return json_response(200, docs.tokenized(tokens, self.served.max_model_len))

    def detokenize(self, request: Request, params: Params, extra: Headers) -> Response:
        spec = api.parse_detokenize(request.body)
        self._check_model(spec.model)
        self.served.check_token_ids(spec.tokens, "tokens")
        return json_response(200, docs.detokenized(self.served.tokenizer.decode(
            list(spec.tokens))))

    def _card(self) -> dict:
        return docs.model_card(self.served.id, self.served.created, self.served.max_model_len)

    def models(self, request: Request, params: Params, extra: Headers) -> Response:
        return json_response(200, docs.model_list([self._card()]))

    def model(self, request: Request, params: Params, extra: Headers) -> Response:
        self._check_model(params["model"])
        return json_response(200, self._card())


def health_ok(request: Request, params: Params, extra: Headers) -> Response:
    return json_response(200, {"status": "ok"})


class HealthApp:
    """The health listener: liveness, readiness, metrics. Stays up during a drain."""

    def __init__(self, *, bridge: EngineBridge, state: ServerState):
        self.bridge, self.state = bridge, state
        self.handlers = {"healthz": health_ok, "readyz": self.readyz, "metrics": self.metrics}

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response:
        rid = request_id(request)
        extra = (("X-Request-Id", rid),)
        try:
            route, params = resolve(HEALTH_ROUTES, request.method, request.path)
            result = self.handlers[route.handler](request, params, extra)
        except ApiError as err:
            return error_response(err, extra)
        return Response(status=result.status, headers=result.headers + extra, body=result.body)

    def readyz(self, request: Request, params: Params, extra: Headers) -> Response:
        if self.state.is_draining:
            raise ApiError("not_ready", "The server is draining.")
        return json_response(200, {"status": "ready"})

    def metrics(self, request: Request, params: Params, extra: Headers) -> Response:
        text = metrics_text(self.bridge.stats, self.state.metrics)
        return Response(status=200, headers=(("Content-Type", METRICS_TYPE),),
                        body=text.encode("utf-8"))


