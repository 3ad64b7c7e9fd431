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
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from engine.api import (GenRequest, Grammar, GrammarCache, Model, ModelFormatError, PromptTooLong,
                        Tokenizer, check_context)
from server.api import documents as docs
from server.api import parse as api
from server.worker.bridge import EngineBridge
from server.api.defaults import SamplingDefaults
from server.errors import ApiError, error_response, kind_response
from server.observe.metrics import ServerMetrics
from server.api.documents import JSON_CONTENT_TYPE, json_bytes, json_bytes_piecewise
from server.text.messages import for_template
from server.http.protocol import Request, Response, Stream
from server.api.offloop import Inline, OffLoop, Outcome, outcome_of
from server.api.responses import parse_responses
from server.api.responses import renderer as responses_renderer
from server.door.request_id import id_header
from server.door.routes import API_ROUTES, health_ok, resolve
from server.observe.static import CHAT_PAGE, FAVICON, StaticFiles
from server.api.embeddings import EmbedStream
from server.api.streams import Echo, GenerationStream, StreamContext
from server.api.structured import Structured, compile_structured
from server.api.toolcalls import tool_renderer
from server.api import tools as tl
from template import ChatFormat, TemplateError, TemplateSyntaxError

log = logging.getLogger("tlserve.app")

Headers = tuple[tuple[str, str], ...]           # extra response headers (X-Request-Id)
Params = dict[str, str]                         # path parameters from the route table

# The routes whose handler is the heavy, pure half, run off the loop (server/api/offloop.py):
# it returns a `Launch` for the loop thread, or a whole Response.
OFFLOOP_ROUTES = frozenset({"chat", "completions", "responses", "embeddings", "tokenize"})
Launch = Callable[[], Stream]                   # admission -> the stream; loop thread only


@dataclass
class ServerState:
    """Shared, loop-thread-owned flags and counters."""
    is_draining: bool = False
    metrics: ServerMetrics = field(default_factory=ServerMetrics)


class ServedModel:
    """The model as the API sees it: id, chat format, tokenizer, context length.

    The chat template is parsed here, once, at start-up: a broken one stops the server with
    `ModelFormatError` naming the model file and the template's line, never a request.
    `chat_template` (the text of a configured file) replaces the model's own when given."""

    def __init__(self, model: Model, model_id: str, max_model_len: int, *,
                 kv_capacity_tokens: int | None = None, chat_template: str | None = None):
        self.id = model_id
        self.model = model
        self.tokenizer: Tokenizer = model.tokenizer
        self.max_model_len = max_model_len
        self.kv_capacity_tokens = kv_capacity_tokens    # the whole KV pool (None: unchecked)
        self.created = int(time.time())
        self.grammars = GrammarCache()          # structured outputs, compiled once per schema
        try:
            source = model.chat_template if chat_template is None else chat_template
            self.chat = ChatFormat.from_source(source,
                                               bos_token=self.tokenizer.bos_token,
                                               eos_token=self.tokenizer.eos_token)
        except TemplateSyntaxError as err:
            raise ModelFormatError(model.source_path,
                                   f"chat template does not parse: {err}") from None
        self.reads_tools = "tools" in self.chat.template.names   # else: the default tool prompt
        self.tool_format = tl.tool_format(self.chat.template.source, self.reads_tools)

    def render(self, messages: tuple[dict, ...], *, add_generation_prompt: bool = True,
               tools: tuple[dict, ...] = ()) -> str:
        """`tools` reach the template's `tools` variable, or the default prompt (server/api/tools.py)."""
        try:
            prepared = for_template(messages, self.chat.template.iterates_content_parts)
            if not self.reads_tools:
                prepared, tools = tl.with_default_prompt(prepared, tools), ()
            return self.chat.render(prepared, add_generation_prompt=add_generation_prompt,
                                    tools=list(tools) or None)
        except TemplateError as exc:
            raise ApiError("template_error", exc.message, param="messages") from None

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. A raw prompt is encoded as Hugging Face's `tok(text)` and vLLM
        do (`add_special_tokens`: BOS first when the model asks for it, as Gemma's does); a
        rendered chat template already holds its BOS."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def check_token_ids(self, ids: tuple[int, ...], param: str) -> None:
        """Refuse client-sent token ids past the vocabulary (400 naming `param`).

        Only ids the client typed need this: ids our own tokenizer produced are in range.
        Unchecked, a bad id would fail later on the engine thread as a 500."""
        vocab = self.tokenizer.vocab_size
        past = [t for t in ids if t >= vocab]
        if past:
            raise api.bad(param, f"Token id {past[0]} in '{param}' is not in the vocabulary: "
                                 f"token ids must be below the vocabulary size {vocab}.")


def choice_seed(seed: int | None, choice: int) -> int | None:
    """The sample stream of choice `choice` of a request seeded `seed`: choice 0 keeps the
    seed (so it is the n = 1 answer), choice j > 0 takes the first 63 bits of
    sha256(f"{seed}/{j}"), reproducible and unrelated to the neighbouring seeds. Unseeded
    requests stay unseeded (the engine draws one seed per choice)."""
    if seed is None or choice == 0:
        return seed
    digest = hashlib.sha256(f"{seed}/{choice}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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
        extra = id_header(request)            # the id the front door stamped
        try:
            route, params = resolve(API_ROUTES, request.method, request.path)
        except ApiError as err:
            return self._answer("unmatched", request, extra, Outcome(error=err))
        label = route.handler
        if self.state.is_draining and label != "healthz":
            refusal = ApiError("shutting_down", "The server is shutting down; retry elsewhere.")
            return self._answer(label, request, extra, Outcome(error=refusal))
        handler = partial(self.handlers[label], request, params, extra)
        if label in OFFLOOP_ROUTES:     # prepared on a worker; launched back on the loop thread
            return self.offloop.run(handler, partial(self._answer, label, request, extra))
        return self._answer(label, request, extra, outcome_of(handler))

    def _answer(self, label: str, request: Request, extra: Headers, outcome: Outcome) -> Response | Stream:
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
            log.exception("request %s: handler %s failed", request.request_id, label)
            self.state.metrics.count_request(label, 500)
            return error_response(ApiError("internal_error", "Internal server error."), extra)
        if isinstance(result, Response):
            self.state.metrics.count_request(label, result.status)
            return replace(result, headers=result.headers + extra)
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
                raise api.bad("prompt", "The prompt must contain at least one token.")
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
                       extra, echoes, render, request.request_id)

    def _launch(self, requests: list[GenRequest], spec: api.GenSpec, prompt_tokens: int,
                route: str, id_prefix: str, extra: Headers, echoes: list[Echo] | None,
                render, request_id: str) -> GenerationStream:
        """Admission, on the loop thread: the whole answer or none of it: a refusal or a 429
        on a later choice aborts the earlier ones."""
        now = self.clock()
        tickets = []
        try:
            for gen in requests:        # admission: a slot each in the bridge's queue, or 429
                tickets.append(self.bridge.submit(gen, request_id=request_id))
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
        self._check_kv_capacity(len(prompt), spec.max_tokens, prompt_param)
        scored = spec.top_logprobs if spec.echo and spec.logprobs else None
        return GenRequest(prompt=tuple(prompt), params=spec.params,
                          seed=choice_seed(spec.seed, choice), max_tokens=max_tokens,
                          stop_ids=spec.stop_ids, priority=priority, prompt_logprobs=scored,
                          wait_for_prefix=choice > 0, grammar=grammar)

    def _check_kv_capacity(self, prompt_tokens: int, max_tokens: int | None,
                           prompt_param: str) -> None:
        """A request the KV pool could never hold (even alone) is a 400 now, not a wait."""
        pool_tokens = self.served.kv_capacity_tokens
        needed_tokens = prompt_tokens + (1 if max_tokens is None else max_tokens)
        if pool_tokens is not None and needed_tokens > pool_tokens:
            raise ApiError("context_length_exceeded",
                           f"This server's KV cache holds {pool_tokens} tokens; the request "
                           f"needs {needed_tokens} ({prompt_tokens} in the {prompt_param}, "
                           f"{needed_tokens - prompt_tokens} for the completion). Please "
                           f"reduce the length of the {prompt_param} or max_tokens.",
                           param=prompt_param)

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
            if not ids or len(ids) > self.served.max_model_len:
                raise ApiError("context_length_exceeded", "Each input must have 1 to "
                               f"{self.served.max_model_len} tokens.", param="input")
        return partial(self._launch_embed, inputs, spec.encoding_format, extra,
                       request.request_id)

    def _launch_embed(self, inputs: list[list[int]], encoding_format: str,
                      extra: Headers, request_id: str) -> EmbedStream:
        ticket = self.bridge.embed(inputs, encoding_format,    # 429 when the queue is full
                                   request_id=request_id)
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


