"""What the endpoint handlers share: `ApiContext` (the served model, the sampling defaults,
the engine bridge, the stream context), `with_tools` (a request's tools in the served
template's format, their grammar asked for: chat and Responses alike), `chat_prompt` (the
template rendered, the answer's thinking split decided) and
`launch_generation`, the one way a chat, completion or Responses request becomes engine
requests and a `GenerationStream`.

    worker thread:  priority header -> logit_bias ids -> grammar (compiled once, shared by
                    every choice) -> the prediction's token ids (once) -> one GenRequest per
                    choice (the context and KV rules of server/text/served.py) => a `Launch`
    loop thread:    the Launch: admission (a slot per choice in the bridge's queue, or 429;
                    all or none) -> GenerationStream with the renderer the endpoint chose

The endpoint chooses its renderer (server/api/chat/render.py, completions.py,
responses/render.py) and hands it in as `render(header)`: the shell never chooses.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator, Mapping

from engine.api import KIND_CHAT, KIND_EMBEDDING, GenRequest, Grammar
from server.api import documents as docs
from server.door.routes import Params
from server.api.defaults import SamplingDefaults
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, GenSpec, parse_priority
from server.offloop.pool import OffLoop
from server.api.streams import Echo, GenerationStream, Renderer, StreamContext
from server.api.structured import Structured, compile_structured
from server.api.thinking import after_thinking
from server.api.tools import call_grammar_spec, check_tools_compile, with_format
from server.errors import ApiError, bad
from server.replies import Headers
from server.http.protocol import Request, Stream
from server.text.served import ServedModel
from server.worker.bridge import EngineBridge
from server.worker.encoder_thread import EncoderThread

# What each kind of model serves (`ApiContext.check_model`), and how an error names it.
TASK_GENERATE, TASK_EMBED, TASK_TOKENIZE = "generate", "embeddings", "tokenize"
TASK_RERANK, TASK_SCORE = "rerank", "score"
CHAT_TASKS = (TASK_GENERATE, TASK_EMBED, TASK_TOKENIZE)
ENCODER_TASKS = (TASK_EMBED, TASK_RERANK, TASK_SCORE, TASK_TOKENIZE)
TASK_ROUTES = {TASK_GENERATE: "/v1/chat/completions, /v1/completions and /v1/responses",
               TASK_EMBED: "/v1/embeddings", TASK_TOKENIZE: "/v1/tokenize and /v1/detokenize",
               TASK_RERANK: "/v1/rerank", TASK_SCORE: "/v1/score"}

Launch = Callable[[], Stream]                   # admission -> the stream; loop thread only
RenderFor = Callable[[docs.Header], Renderer]   # the endpoint's renderer, given the ids


@dataclass(frozen=True)
class Endpoint:
    """How a generation endpoint names itself: its route (metrics), the id prefix of its
    answers, and the request field its prompt came from (errors name it)."""
    route: str
    id_prefix: str
    prompt_param: str


@dataclass(frozen=True)
class ChatModel:
    """One served chat model as the API sees it: its text layer, its engine thread and its
    server-side sampling defaults."""
    served: ServedModel
    bridge: EngineBridge
    defaults: SamplingDefaults = SamplingDefaults()


@dataclass(frozen=True)
class ApiContext:
    """What every endpoint handler is given (no globals): the chat models by id (each its
    text layer, engine bridge and defaults) and the sentence-embedding models by id (each
    its own encoder worker). `served`, `bridge`, `defaults` and `stream_ctx` are one chat
    model's: the first's in the server's context, the request's own in the context
    `serving` yields (`for_model`); None in a server of embedding models only."""
    served: ServedModel | None
    defaults: SamplingDefaults                  # server-side sampling defaults
    bridge: EngineBridge | None
    stream_ctx: StreamContext
    offloop: OffLoop
    count_request: Callable[..., None]          # (route, status, model=) -> the request counter
    clock: Callable[[], float] = time.monotonic
    encoders: Mapping[str, EncoderThread] = field(default_factory=dict)
    chats: Mapping[str, ChatModel] = field(default_factory=dict)
    max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS   # `stop` sequences a request may give

    def model_ids(self) -> list[str]:
        """Every served id in configuration order: the chat models, then the embedding
        models (`[engine].model_dir`'s model is the first of its kind)."""
        return list(self.chats) + list(self.encoders)

    def check_model(self, model: str, task: str | None = None) -> None:
        """404 for an id this server does not serve; 400 naming the model and what it
        serves when it cannot do `task` (None: any served id passes)."""
        if model not in self.model_ids():
            served = ", ".join(f"'{m}'" for m in self.model_ids())
            raise ApiError("model_not_found", f"The model '{model}' does not exist; this "
                                              f"server serves {served}.", param="model")
        kind, tasks = ((KIND_EMBEDDING, ENCODER_TASKS) if model in self.encoders
                       else (KIND_CHAT, CHAT_TASKS))
        if task is not None and task not in tasks:
            raise bad("model", f"The model '{model}' is a{'n' if kind[0] in 'aeiou' else ''} "
                               f"{kind} model: it serves {', '.join(TASK_ROUTES[t] for t in tasks)}"
                               f", not {TASK_ROUTES[task]}.")

    def for_model(self, model: str) -> ApiContext:
        """This context as served model `model` sees it: a chat model's text layer, engine
        and defaults; its requests counted under its id (an embedding model keeps the
        rest)."""
        chat = self.chats.get(model)
        own = {} if chat is None else {
            "served": chat.served, "bridge": chat.bridge, "defaults": chat.defaults,
            "stream_ctx": replace(self.stream_ctx, bridge=chat.bridge,
                                  tokenizer=chat.served.tokenizer,
                                  on_status=partial(self.stream_ctx.on_status, model=model))}
        return replace(self, count_request=partial(self.count_request, model=model), **own)

    def defaults_for(self, body: bytes) -> SamplingDefaults:
        """The sampling defaults of the chat model `body` names, before it is parsed: the
        first chat model's when every chat model has the same (one parse), else the
        named one's (unknown or absent: the first's; the parse then refuses it)."""
        if all(chat.defaults == self.defaults for chat in self.chats.values()):
            return self.defaults
        try:
            named = json.loads(body).get("model")
        except (ValueError, AttributeError):
            return self.defaults
        chat = self.chats.get(named) if isinstance(named, str) else None
        return chat.defaults if chat is not None else self.defaults

    @contextmanager
    def serving(self, model: str, task: str = TASK_GENERATE) -> Iterator[ApiContext]:
        """The request's body parsed and named `model`: check it can do `task`, yield the
        context of that model (`for_model`), and note every error raised from here on as
        about that model (the access log's `model`)."""
        try:
            self.check_model(model, task)
            yield self.for_model(model)
        except ApiError as err:
            raise err.about(model)


def choice_seed(seed: int | None, choice: int) -> int | None:
    """The sample stream of choice `choice` of a request seeded `seed`: choice 0 keeps the
    seed (so it is the n = 1 answer), choice j > 0 takes the first 63 bits of
    sha256(f"{seed}/{j}"), reproducible and unrelated to the neighbouring seeds. Unseeded
    requests stay unseeded (the engine draws one seed per choice)."""
    if seed is None or choice == 0:
        return seed
    digest = hashlib.sha256(f"{seed}/{choice}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def priority_of(request: Request) -> int:
    """The request's scheduling priority (`X-TL-Priority`); a KV handle is refused (404)."""
    if request.header("x-tl-kv-handle") is not None:
        raise ApiError("kv_handle_not_found", "Unknown KV handle (KV handles are not "
                                              "served by this engine).", param="X-TL-KV-Handle")
    return parse_priority(request.header("x-tl-priority"))


def launch_generation(ctx: ApiContext, request: Request, spec: GenSpec,
                      prompts: list[list[int]], endpoint: Endpoint, extra: Headers,
                      render: RenderFor, echoes: list[Echo] | None = None) -> Launch:
    """One engine request per choice (`n` per prompt; choice index = prompt * n + j, as
    OpenAI numbers them), prepared here (worker thread: the grammar, the context rule);
    the launch admits them on the loop thread."""
    priority = priority_of(request)
    ctx.served.check_token_ids(tuple(t for t, _ in spec.params.logit_bias), "logit_bias")
    structured = after_thinking(spec.structured, spec.thinking)    # the answer's, not the thinking's
    grammar = (compile_structured(ctx.served.grammars, structured)
               if structured else None)             # compiled once, shared by every choice
    predicted = (() if spec.prediction is None        # tokenized once, shared like the grammar
                 else tuple(ctx.served.encode_plain(spec.prediction)))
    requests = [_gen_request(ctx.served, spec, prompt, endpoint.prompt_param, priority, j,
                             grammar, predicted)
                for prompt in prompts for j in range(spec.n)]
    return partial(_launch, ctx, requests, spec, sum(map(len, prompts)), endpoint, extra,
                   echoes, render, request.request_id)


def _launch(ctx: ApiContext, requests: list[GenRequest], spec: GenSpec, prompt_tokens: int,
            endpoint: Endpoint, extra: Headers, echoes: list[Echo] | None,
            render: RenderFor, request_id: str) -> GenerationStream:
    """Admission, on the loop thread: the whole answer or none of it: a refusal or a 429
    on a later choice aborts the earlier ones."""
    now = ctx.clock()
    tickets = []
    try:
        for gen in requests:        # admission: a slot each in the bridge's queue, or 429
            tickets.append(ctx.bridge.submit(gen, request_id=request_id))
    except ApiError as err:
        for ticket in tickets:
            ctx.bridge.abort(ticket)
        raise err.about(spec.model)
    header = docs.Header.new(endpoint.id_prefix, ctx.served.id)
    return GenerationStream(ctx=ctx.stream_ctx, tickets=tickets, spec=spec, header=header,
                            prompt_tokens=prompt_tokens, route=endpoint.route,
                            headers=extra, arrival_s=now, echoes=echoes,
                            renderer=render(header))


def _gen_request(served: ServedModel, spec: GenSpec, prompt: list[int], prompt_param: str,
                 priority: int, choice: int, grammar: Grammar | None,
                 predicted: tuple[int, ...]) -> GenRequest:
    """Choice 0 is exactly the n = 1 request; the others are forks of it: their own
    seed (`choice_seed`) and they wait to share the prompt's KV blocks. Every choice
    drafts from the same prediction (`predicted`: token ids, () for none)."""
    max_tokens = served.max_tokens_for(len(prompt), spec.max_tokens, prompt_param)
    scored = spec.top_logprobs if spec.echo and spec.logprobs else None
    return GenRequest(prompt=tuple(prompt), params=spec.params,
                      seed=choice_seed(spec.seed, choice), max_tokens=max_tokens,
                      stop_ids=spec.stop_ids, priority=priority, prompt_logprobs=scored,
                      wait_for_prefix=choice > 0, grammar=grammar, prediction=predicted)


def chat_prompt(ctx: ApiContext, spec: GenSpec,
                offered: tuple[dict, ...]) -> tuple[GenSpec, list[int]]:
    """The conversation through the chat template (with the request's template variables)
    -> the prompt's ids, and the spec with the split its answer gets (`thinking`)."""
    variables = dict(spec.template_vars)
    text = ctx.served.render(spec.messages, tools=offered, variables=variables)
    return replace(spec, thinking=ctx.served.thinking_for(text, variables)), ctx.served.encode(text)


def with_tools(ctx: ApiContext, spec: GenSpec) -> tuple[GenSpec, tuple[dict, ...]]:
    """Tools validated, compiled, in the template's format, their grammar asked for; and
    the tools the template is offered (chat and Responses alike)."""
    if spec.tools is None:
        return spec, ()
    check_tools_compile(ctx.served.grammars, spec.tools)
    spec = replace(spec, tools=with_format(spec.tools, ctx.served.tool_format))
    grammar = call_grammar_spec(spec.tools)
    if grammar is not None and spec.structured is None:   # auto + response_format: that one
        spec = replace(spec, structured=Structured("tool_choice", grammar))
    return spec, (spec.tools.tools if spec.tools.offered else ())
