"""The OpenAI API application (the health/metrics listener is server/observe/health.py).

`ApiApp.handle(request)` answers an API request in two halves:

    loop thread:   route table -> draining? -> hand the handler to the off-loop pool
    worker thread: validate body (server/api/parse.py) -> served model? -> headers
                   (X-TL-KV-Handle, X-TL-Priority) -> chat template -> tokenizer -> grammar
                   -> context check: a `Launch` (or a whole Response, e.g. /tokenize)
    loop thread:   launch: bridge.submit (admission: 429 now if the queue is full)
                   -> GenerationStream; count the status, add X-Request-Id

The heavy, pure half of chat, completions, responses, embeddings and tokenize
(`OFFLOOP_ROUTES`) runs on a worker of `server/api/offloop.py` (the one seam), so the loop
never blocks on a grammar compile or a long history; admission, metrics and tickets stay
on the loop thread. Small routes (models, detokenize, healthz) answer at once. Every
response, errors and 404s included, carries `X-Request-Id` (echoed when the client sent a
sane one). Drain (chapter 2.6) flips `ServerState.is_draining`: new API requests get 503,
`/readyz` 503, `/healthz` stays 200; a request already being prepared is still answered.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from engine.api import GenRequest, Grammar
from server.api import documents as docs
from server.api import parse as api
from server.worker.bridge import EngineBridge
from server.api.defaults import SamplingDefaults
from server.errors import ApiError, bad, error_response, kind_response
from server.observe.metrics import ServerMetrics
from server.api.documents import JSON_CONTENT_TYPE, json_bytes, json_bytes_piecewise
from server.http.protocol import Request, Response, Stream
from server.api.offloop import Inline, OffLoop, Outcome, outcome_of
from server.api.responses import parse_responses
from server.api.responses import renderer as responses_renderer
from server.text.served import ServedModel
from server.door.routes import API_ROUTES, resolve
from server.observe.static import CHAT_PAGE, FAVICON, StaticFiles
from server.api.embeddings import EmbedStream
from server.api.streams import Echo, GenerationStream, StreamContext
from server.api.structured import Structured, compile_structured
from server.api.toolcalls import tool_renderer
from server.api import tools as tl

log = logging.getLogger("tlserve.app")

Headers = tuple[tuple[str, str], ...]           # extra response headers (X-Request-Id)
Params = dict[str, str]                         # path parameters from the route table

MAX_REQUEST_ID_CHARS = 128                      # longer client ids are replaced, not echoed
REQUEST_ID_OK = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_REQUEST_ID_CHARS)
# The routes whose handler is the heavy, pure half, run off the loop (server/api/offloop.py):
# it returns a `Launch` for the loop thread, or a whole Response.
OFFLOOP_ROUTES = frozenset({"chat", "completions", "responses", "embeddings", "tokenize"})
Launch = Callable[[], Stream]                   # admission -> the stream; loop thread only


@dataclass
class ServerState:
    """Shared, loop-thread-owned flags and counters."""
    is_draining: bool = False
    metrics: ServerMetrics = field(default_factory=ServerMetrics)


def choice_seed(seed: int | None, choice: int) -> int | None:
    """The sample stream of choice `choice` of a request seeded `seed`: choice 0 keeps the
    seed (so it is the n = 1 answer), choice j > 0 takes the first 63 bits of
    sha256(f"{seed}/{j}"), reproducible and unrelated to the neighbouring seeds. Unseeded
    requests stay unseeded (the engine draws one seed per choice)."""
    if seed is None or choice == 0:
        return seed
    digest = hashlib.sha256(f"{seed}/{choice}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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
                 web: StaticFiles | None = None, defaults: SamplingDefaults = SamplingDefaults(),
                 offloop: OffLoop = Inline()):
        self.served, self.bridge, self.state = served, bridge, state
        self.offloop = offloop                   # where OFFLOOP_ROUTES are prepared
        self.web = web or StaticFiles.load()
        self.defaults = defaults                 # server-side sampling defaults
        self.clock = clock
        metrics = state.metrics
        self.stream_ctx = StreamContext(
            bridge=bridge, tokenizer=served.tokenizer, ping_interval_s=ping_interval_s,
            on_status=metrics.count_request,
            on_finish=metrics.observe_generation, offloop=offloop)
        self.handlers = {"chat": self.chat, "completions": self.completions,
                         "responses": self.responses,
                         "embeddings": self.embeddings, "tokenize": self.tokenize,
                         "detokenize": self.detokenize, "models": self.models,
                         "model": self.model, "healthz": health_ok,
                         "page": lambda *_: self.web.response(CHAT_PAGE),
                         "favicon": lambda *_: self.web.response(FAVICON),
                         "static": lambda _, params, __: self.web.response(params["name"])}

    error = staticmethod(kind_response)  # App.error: the document of an error the transport found

    def handle(self, request: Request) -> Response | Stream:
        extra = (("X-Request-Id", request_id(request)),)
        try:
            route, params = resolve(API_ROUTES, request.method, request.path)
        except ApiError as err:
            return self._answer("unmatched", extra, Outcome(error=err))
        label = route.handler
        if self.state.is_draining and label != "healthz":
            refusal = ApiError("shutting_down", "The server is shutting down; retry elsewhere.")
            return self._answer(label, extra, Outcome(error=refusal))
        handler = partial(self.handlers[label], request, params, extra)
        if label in OFFLOOP_ROUTES:     # prepared on a worker; launched back on the loop thread
            return self.offloop.run(handler, partial(self._answer, label, extra))
        return self._answer(label, extra, outcome_of(handler))

    def _answer(self, label: str, extra: Headers, outcome: Outcome) -> Response | Stream:
        """A handler's outcome as the answer, on the loop thread: a `Launch` is launched
        (admission), an ApiError becomes its OpenAI error, anything else a logged 500; the
        status of a whole Response is counted here (a stream counts its own)."""
        try:
            result = outcome.get()
            if not isinstance(result, Response) and callable(result):
                result = result()                   # a Launch: tickets, on this thread
        except ApiError as err:
            self.state.metrics.count_request(label, err.status)
            return error_response(err, extra)
        except Exception:                                      # noqa: BLE001
            log.exception("request %s: handler %s failed", _request_id_of(extra), label)
            self.state.metrics.count_request(label, 500)
            return error_response(ApiError("internal_error", "Internal server error."), extra)
        if isinstance(result, Response):
            self.state.metrics.count_request(label, result.status)
            return Response(status=result.status, headers=result.headers + extra,
                            body=result.body)
        return result

    # -- generation ----------------------------------------------------------------------

    def chat(self, request: Request, params: Params, extra: Headers) -> Launch:
        spec = api.parse_chat(request.body, self.defaults)
        self._check_model(spec.model)
        spec, offered = self._with_tools(spec)
        prompt = self.served.encode(self.served.render(spec.messages, tools=offered))
        return self._generate(request, spec, [prompt], "chat", "chatcmpl", "messages", extra)

    def _with_tools(self, spec: api.GenSpec) -> tuple[api.GenSpec, tuple[dict, ...]]:
        """Tools validated, compiled, in the template's format, their grammar asked for; and
        the tools the template is offered (chat and Responses alike)."""
        if spec.tools is None:
            return spec, ()
        tl.check_tools_compile(self.served.grammars, spec.tools)
        spec = replace(spec, tools=tl.with_format(spec.tools, self.served.tool_format))
        grammar = tl.call_grammar_spec(spec.tools)
        if grammar is not None and spec.structured is None:   # auto + response_format: that one
            spec = replace(spec, structured=Structured("tool_choice", grammar))
        return spec, (spec.tools.tools if spec.tools.offered else ())

    def completions(self, request: Request, params: Params, extra: Headers) -> Launch:
        spec = api.parse_completion(request.body, self.defaults)
        self._check_model(spec.model)
        prompts = []
        for prompt in spec.prompts:
            if isinstance(prompt, tuple):
                self.served.check_token_ids(prompt, "prompt")
            ids = (list(prompt) if isinstance(prompt, tuple)
                   else self.served.encode(prompt, add_special_tokens=True))
            if not ids:
                raise bad("prompt", "The prompt must contain at least one token.")
            prompts.append(ids)
        echoes = None
        if spec.echo:                           # one per choice: prompt i's n choices
            echoes = [Echo(p if isinstance(p, str) else self.served.tokenizer.decode(list(p)),
                           ids[0], spec.logprobs) for p, ids in zip(spec.prompts, prompts)
                      for _ in range(spec.n)]
        return self._generate(request, spec, prompts, "completions", "cmpl", "prompt", extra,
                              echoes)

    def responses(self, request: Request, params: Params, extra: Headers) -> Launch:
        spec = parse_responses(request.body, self.defaults)
        self._check_model(spec.gen.model)
        gen, offered = self._with_tools(spec.gen)
        spec = replace(spec, gen=gen)
        prompt = self.served.encode(self.served.render(gen.messages, tools=offered))
        return self._generate(request, spec.gen, [prompt], "responses", "resp", "input", extra,
                              render=lambda header: responses_renderer(spec, header))

    def _generate(self, request: Request, spec: api.GenSpec, prompts: list[list[int]],
                  route: str, id_prefix: str, prompt_param: str, extra: Headers,
                  echoes: list[Echo] | None = None, render=None) -> Launch:
        """One engine request per choice (`n` per prompt; choice index = prompt * n + j, as
        OpenAI numbers them), prepared here (worker thread: the grammar, the context rule);
        the launch admits them on the loop thread."""
        priority = self._headers(request)
        self.served.check_token_ids(tuple(t for t, _ in spec.params.logit_bias), "logit_bias")
        grammar = (compile_structured(self.served.grammars, spec.structured)
                   if spec.structured else None)        # compiled once, shared by every choice
        requests = [self._gen_request(spec, prompt, prompt_param, priority, j, grammar)
                    for prompt in prompts for j in range(spec.n)]
        return partial(self._launch, requests, spec, sum(map(len, prompts)), route, id_prefix,
                       extra, echoes, render)

    def _launch(self, requests: list[GenRequest], spec: api.GenSpec, prompt_tokens: int,
                route: str, id_prefix: str, extra: Headers, echoes: list[Echo] | None,
                render) -> GenerationStream:
        """Admission, on the loop thread: the whole answer or none of it: a refusal or a 429
        on a later choice aborts the earlier ones."""
        now = self.clock()
        tickets = []
        try:
            for gen in requests:        # admission: a slot each in the bridge's queue, or 429
                tickets.append(self.bridge.submit(gen, request_id=_request_id_of(extra)))
        except ApiError:
            for ticket in tickets:
                self.bridge.abort(ticket)
            raise
        header = docs.Header.new(id_prefix, self.served.id)
        return GenerationStream(ctx=self.stream_ctx, tickets=tickets, spec=spec, header=header,
                                prompt_tokens=prompt_tokens, route=route,
                                headers=extra, arrival_s=now, echoes=echoes,
                                renderer=render(header) if render else tool_renderer(spec, header))

    def _gen_request(self, spec: api.GenSpec, prompt: list[int], prompt_param: str,
                     priority: int, choice: int, grammar: Grammar | None) -> GenRequest:
        """Choice 0 is exactly the n = 1 request; the others are forks of it: their own
        seed (`choice_seed`) and they wait to share the prompt's KV blocks."""
        max_tokens = self.served.max_tokens_for(len(prompt), spec.max_tokens, prompt_param)
        scored = spec.top_logprobs if spec.echo and spec.logprobs else None
        return GenRequest(prompt=tuple(prompt), params=spec.params,
                          seed=choice_seed(spec.seed, choice), max_tokens=max_tokens,
                          stop_ids=spec.stop_ids, priority=priority, prompt_logprobs=scored,
                          wait_for_prefix=choice > 0, grammar=grammar)

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

    def embeddings(self, request: Request, params: Params, extra: Headers) -> Launch:
        spec = api.parse_embeddings(request.body)
        self._check_model(spec.model)
        for x in spec.inputs:
            if isinstance(x, tuple):
                self.served.check_token_ids(x, "input")
        inputs = [list(x) if isinstance(x, tuple) else self.served.encode(x)
                  for x in spec.inputs]
        for ids in inputs:
            self.served.check_input_length(ids, "input")
        return partial(self._launch_embed, inputs, spec.encoding_format, extra)

    def _launch_embed(self, inputs: list[list[int]], encoding_format: str,
                      extra: Headers) -> EmbedStream:
        ticket = self.bridge.embed(inputs, encoding_format,    # 429 when the queue is full
                                   request_id=_request_id_of(extra))
        return EmbedStream(ticket=ticket, model_id=self.served.id,
                           prompt_tokens=sum(map(len, inputs)), headers=extra,
                           on_status=self.state.metrics.count_request, offloop=self.offloop)

    def tokenize(self, request: Request, params: Params, extra: Headers) -> Response:
        spec = api.parse_tokenize(request.body)
        self._check_model(spec.model)
        text = (self.served.render(spec.messages,
                                   add_generation_prompt=spec.add_generation_prompt)
                if spec.messages else spec.prompt)
        tokens = self.served.encode(text, add_special_tokens=spec.add_special_tokens)
        return Response(status=200, headers=(JSON_CONTENT_TYPE,), body=json_bytes_piecewise(
            docs.tokenized(tokens, self.served.max_model_len)))

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
