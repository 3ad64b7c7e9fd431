"""What the endpoint handlers share: `ApiContext` (the served models, the stream context,
the off-loop pool), `ModelContext` (a request's context once its body named the model:
that model's `EngineClient` and sampling defaults, chosen once), `with_tools` (a request's
tools in the served template's format, their grammar asked for: chat and Responses
alike), `chat_prompt` (the template rendered, the answer's thinking split decided) and
`launch_generation`, the one way a chat, completion or Responses request becomes engine
requests and a `GenerationStream`.

    priority header -> logit_bias ids -> grammar (compiled once, shared by every choice)
    -> the prediction's token ids (once) -> one GenRequest per choice (the context and KV
    rules of server/text/served.py) -> `client.generate` (admission: a slot per choice in
    the engine's queue, or 429; all or none) -> GenerationStream with the renderer the
    endpoint chose

All of it runs where the handler runs: on a pool thread for the off-loop rows (admission
and the engine's inbox are thread-safe), so the loop thread only ever sends the stream.

The endpoint chooses its renderer (server/api/chat/render.py, completions.py,
responses/render.py) and hands it in as `render(header)`: the shell never chooses.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from contextlib import contextmanager
from functools import cached_property
from typing import Callable, Iterator, Mapping

from engine.api import KIND_CHAT, KIND_EMBEDDING, CacheScope, GenRequest, Grammar, LoraAdapter
from server.api import documents as docs
from server.api.adapters import AdapterTable, RuntimeLora
from server.api.defaults import SamplingDefaults
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, GenSpec, parse_priority
from server.offloop.pool import OffLoop
from server.api.streams import GenerationStream, Renderer, StreamContext
from server.api.structured import Structured, compile_structured
from server.api.thinking import after_thinking
from server.api.batch_backend import BatchBackend
from server.api.tools import call_grammar_spec, check_tools_compile, with_format
from server.errors import ApiError, ErrorShape, bad
from server.replies import Headers
from server.http.protocol import Request
from server.text.client import CallRules, Echo, EngineClient, TextRules
from server.text.served import ServedModel
from server.worker.bridge import EngineBridge
from server.worker.encoder_thread import EncoderThread

# What each kind of model serves (`ApiContext.check_model`), and how an error names it.
TASK_GENERATE, TASK_EMBED, TASK_TOKENIZE = "generate", "embeddings", "tokenize"
TASK_RERANK, TASK_SCORE = "rerank", "score"
CHAT_TASKS = (TASK_GENERATE, TASK_EMBED, TASK_TOKENIZE)
ENCODER_TASKS = (TASK_EMBED, TASK_RERANK, TASK_SCORE, TASK_TOKENIZE)
ADAPTER_TASKS = (TASK_GENERATE, TASK_TOKENIZE)      # a LoRA adapter: its base's, less embeddings

RenderFor = Callable[[docs.Header], Renderer]   # the endpoint's renderer, given the ids


@dataclass(frozen=True)
class Endpoint:
    """How a generation endpoint names itself: its route (metrics), the id prefix of its
    answers, the request field its prompt came from (errors name it), and the API whose
    error document it answers with."""
    route: str
    id_prefix: str
    prompt_param: str
    errors: ErrorShape = ErrorShape.OPENAI


@dataclass(frozen=True)
class ChatModel:
    """One served chat model as the server assembles it: its text layer, its engine thread
    and its server-side sampling defaults; the API reaches the engine through `client`."""
    served: ServedModel
    bridge: EngineBridge
    defaults: SamplingDefaults = SamplingDefaults()

    @cached_property
    def client(self) -> EngineClient:
        return EngineClient(self.served, self.bridge)


@dataclass(frozen=True)
class ApiContext:
    """What every endpoint handler is given (no globals): the chat models by id and the
    sentence-embedding models by id (each its own encoder thread), in configuration order.
    A handler names its model once, with `serving`, and works in that `ModelContext`."""
    stream_ctx: StreamContext
    offloop: OffLoop
    count_request: Callable[..., None]          # (route, status, model=) -> the request counter
    clock: Callable[[], float] = time.monotonic
    encoders: Mapping[str, EncoderThread] = field(default_factory=dict)
    chats: Mapping[str, ChatModel] = field(default_factory=dict)
    max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS   # `stop` sequences a request may give
    task_paths: Mapping[str, str] = field(default_factory=dict)  # task -> its paths, for errors
    adapters: AdapterTable = field(default_factory=AdapterTable)   # LoRA adapters by name
    runtime_lora: RuntimeLora = RuntimeLora()  # may adapters be loaded at run time, from where
    # Every generation of this context at this priority, whatever its header says (the
    # batch worker's application: below the header's range); None: the header's.
    fixed_priority: int | None = None
    batches: BatchBackend | None = None        # the Batch API (None: off, its routes 404)

    def model_ids(self) -> list[str]:
        """Every served id in configuration order: the chat models, the embedding models
        (`[engine].model_dir`'s model is the first of its kind), then the LoRA adapters."""
        return list(self.chats) + list(self.encoders) + [a.name for a in self.adapters.all()]

    def check_model(self, model: str, task: str | None = None) -> None:
        """404 for an id this server does not serve; 400 naming the model and what it
        serves when it cannot do `task` (None: any served id passes)."""
        if model not in self.model_ids():
            served = ", ".join(f"'{m}'" for m in self.model_ids())
            raise ApiError("model_not_found", f"The model '{model}' does not exist; this "
                                              f"server serves {served}.", param="model")
        kind, tasks = ((KIND_EMBEDDING, ENCODER_TASKS) if model in self.encoders
                       else (KIND_CHAT, CHAT_TASKS))        # an adapter serves as its base
        if task is not None and task not in tasks:
            raise bad("model", f"The model '{model}' is a{'n' if kind[0] in 'aeiou' else ''} "
                               f"{kind} model: it serves {', '.join(self.task_paths[t] for t in tasks)}"
                               f", not {self.task_paths[task]}.")

    def defaults_for(self, body: bytes) -> SamplingDefaults:
        """The sampling defaults of the chat model `body` names, before it is parsed: the
        first chat model's when every chat model has the same (one parse), else the
        named one's (unknown or absent: the first's; the parse then refuses it)."""
        first = next(iter(self.chats.values()), None)
        first_defaults = first.defaults if first is not None else SamplingDefaults()
        if all(chat.defaults == first_defaults for chat in self.chats.values()):
            return first_defaults
        try:
            named = json.loads(body).get("model")
        except (ValueError, AttributeError):
            return first_defaults
        if isinstance(named, str) and (adapter := self.adapters.get(named)) is not None:
            named = adapter.base                  # an adapter samples as its base does
        chat = self.chats.get(named) if isinstance(named, str) else None
        return chat.defaults if chat is not None else first_defaults

    @contextmanager
    def serving(self, model: str, task: str = TASK_GENERATE) -> Iterator[ModelContext]:
        """The request's body parsed and named `model`: check it can do `task`, yield the
        request's context with that model chosen, and note every error raised from here on
        as about that model (the access log's `model`)."""
        try:
            served = self.adapters.get(model)     # held from here on: an unload lets it finish
            if served is not None:
                if task not in ADAPTER_TASKS:
                    raise bad("model", f"The model '{model}' is a LoRA adapter: it serves "
                                       f"{', '.join(self.task_paths[t] for t in ADAPTER_TASKS)}"
                                       f", not {self.task_paths[task]}.")
                self.check_model(served.base, task)
                yield ModelContext(self, model, served.base, served.adapter)
            else:
                self.check_model(model, task)
                yield ModelContext(self, model, model)
        except ApiError as err:
            raise err.about(model)


@dataclass(frozen=True)
class ModelContext:
    """A request's context once its body has named a served model: the server's context
    and that one model (a chat model's client, or an encoder), chosen once here. A LoRA
    adapter's request runs on its base (`engine_id`) with `adapter`; `model` is the name the
    request gave, which its answers carry."""
    api: ApiContext
    model: str
    engine_id: str                              # the chat model or encoder that runs it
    adapter: LoraAdapter | None = None          # the request's LoRA adapter (None: the base)

    @property
    def chat(self) -> ChatModel:
        return self.api.chats[self.engine_id]

    @property
    def client(self) -> EngineClient:
        return self.chat.client

    @property
    def served(self) -> ServedModel:
        return self.chat.served

    @property
    def defaults(self) -> SamplingDefaults:
        return self.chat.defaults

    @property
    def encoder(self) -> EncoderThread | None:
        """The sentence-embedding model's thread; None for a chat model."""
        return self.api.encoders.get(self.engine_id)

    @property
    def offloop(self) -> OffLoop:
        return self.api.offloop

    def count_request(self, route: str, status: int) -> None:
        self.api.count_request(route, status, model=self.model)


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


def launch_generation(ctx: ModelContext, request: Request, spec: GenSpec,
                      prompts: list[list[int]], endpoint: Endpoint, extra: Headers,
                      render: RenderFor, echoes: list[Echo] | None = None) -> GenerationStream:
    """One engine request per choice (`n` per prompt; choice index = prompt * n + j, as
    OpenAI numbers them), prepared here (the grammar, the context rule) and admitted
    together: the whole answer or none of it (the 429 is raised here)."""
    priority = priority_of(request)
    if ctx.api.fixed_priority is not None:
        priority = ctx.api.fixed_priority
    ctx.served.check_token_ids(tuple(t for t, _ in spec.params.logit_bias), "logit_bias")
    structured = after_thinking(spec.structured, spec.thinking)    # the answer's, not the thinking's
    grammar = (compile_structured(ctx.served.grammars, structured)
               if structured else None)             # compiled once, shared by every choice
    predicted = (() if spec.prediction is None        # tokenized once, shared like the grammar
                 else tuple(ctx.served.encode_plain(spec.prediction)))
    scope = CacheScope(adapter=ctx.adapter, salt=spec.cache_salt)   # what it may share
    requests = [_gen_request(ctx.served, spec, prompt, endpoint.prompt_param, priority, j,
                             grammar, predicted, scope)
                for prompt in prompts for j in range(spec.n)]
    now = ctx.api.clock()
    try:
        generation = ctx.client.generate(requests, text_rules(spec), request_id=request.request_id,
                                         echoes=echoes)
    except ApiError as err:
        raise err.about(spec.model)
    header = docs.Header.new(endpoint.id_prefix, ctx.model)     # an adapter's answers: its name
    return GenerationStream(ctx=ctx.api.stream_ctx, generation=generation, spec=spec,
                            header=header, prompt_tokens=sum(map(len, prompts)),
                            route=endpoint.route, headers=extra, arrival_s=now,
                            renderer=render(header), errors=endpoint.errors)


def text_rules(spec: GenSpec) -> TextRules:
    """The request's text-side settings for the text layer: stops, logprobs, thinking, and
    the tools' call syntax when tools are offered."""
    tools = spec.tools
    calls = (CallRules(tools.fmt, tools.parallel, tools.forced)
             if tools is not None and tools.offered else None)
    return TextRules(stop=spec.stop, logprobs=spec.logprobs, top_logprobs=spec.top_logprobs,
                     thinking=spec.thinking, calls=calls)


def _gen_request(served: ServedModel, spec: GenSpec, prompt: list[int], prompt_param: str,
                 priority: int, choice: int, grammar: Grammar | None,
                 predicted: tuple[int, ...], scope: CacheScope) -> GenRequest:
    """Choice 0 is exactly the n = 1 request; the others are forks of it: their own
    seed (`choice_seed`) and they wait to share the prompt's KV blocks. Every choice
    drafts from the same prediction (`predicted`: token ids, () for none)."""
    max_tokens = served.max_tokens_for(len(prompt), spec.max_tokens, prompt_param)
    scored = spec.top_logprobs if spec.echo and spec.logprobs else None
    return GenRequest(prompt=tuple(prompt), params=spec.params,
                      seed=choice_seed(spec.seed, choice), max_tokens=max_tokens,
                      stop_ids=spec.stop_ids, priority=priority, prompt_logprobs=scored,
                      wait_for_prefix=choice > 0, grammar=grammar, prediction=predicted,
                      scope=scope)


def chat_prompt(ctx: ModelContext, spec: GenSpec,
                offered: tuple[dict, ...]) -> tuple[GenSpec, list[int]]:
    """The conversation through the chat template (with the request's template variables)
    -> the prompt's ids, and the spec with the split its answer gets (`thinking`)."""
    variables = dict(spec.template_vars)
    text = ctx.served.render(spec.messages, tools=offered, variables=variables)
    return replace(spec, thinking=ctx.served.thinking_for(text, variables)), ctx.served.encode(text)


def with_tools(ctx: ModelContext, spec: GenSpec) -> tuple[GenSpec, tuple[dict, ...]]:
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
