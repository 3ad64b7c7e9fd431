"""Request validation for the OpenAI v1 API (chapter 2.5): JSON body -> frozen value or ApiError.

Every body is checked before it reaches the template, the tokenizer or the engine:

* a value out of range or of the wrong type      -> 400 `invalid_request_error`, `param` = field
* a real OpenAI field this engine does not serve -> 422 `unsupported_parameter`
  (`best_of` > 1, `suffix`, image/audio/file content parts, the legacy `functions`)
* `response_format`, `guided_*`, `structured_outputs`: server/api/structured.py
* `tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls`: server/api/tools.py
* unknown fields                                 -> ignored (clients send many)

The served-model check (404 `model_not_found`) and the context check (400
`context_length_exceeded`) need the model and the tokenizer, so `server/api/app.py` does them
after parsing. The response documents live in `server/api/documents.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.api import MAX_TOP_LOGPROBS, SamplingParams
from server.api.defaults import SamplingDefaults
from server.api.fields import (bad, boolean, integer, is_int, is_number, load_json_object,
                               model_name, number, token_ids, unsupported)
from server.text.messages import Message, check_content
from server.api.structured import Structured, parse_structured
from server.api.tools import ToolsSpec, check_tool_calls, check_tool_message, parse_tools

MAX_MESSAGES = 4096             # a conversation longer than this is abuse, not chat
MAX_EMBEDDING_INPUTS = 2048     # inputs in one /v1/embeddings call (OpenAI's limit)
MAX_STOP_STRINGS = 16           # `stop` sequences: OpenAI allows 4, eval harnesses send more
MAX_STOP_TOKEN_IDS = 64
MAX_LOGIT_BIAS_ENTRIES = 300    # OpenAI's own bound
MAX_COMPLETION_LOGPROBS = MAX_TOP_LOGPROBS   # /v1/completions `logprobs`: 0..20 (vLLM's bound)
MAX_COMPLETION_PROMPTS = 64     # prompts in one /v1/completions call (one choice each)
MAX_CHOICES = 8                 # `n`: choices per prompt (each one engine sequence)
DEFAULT_COMPLETION_MAX_TOKENS = 16   # /v1/completions default (OpenAI's)
ROLES = frozenset({"system", "user", "assistant", "developer", "tool"})
UNSUPPORTED_IF_PRESENT = ("functions", "function_call", "suffix")
CHAT_ONLY = ("tools", "tool_choice")             # /v1/completions has no tools: 422
_MISSING = object()


@dataclass(frozen=True, kw_only=True)
class GenSpec:
    """A validated generation request (chat or completion), before templating."""
    kind: str                                   # "chat" | "completion"
    model: str
    messages: tuple[Message, ...] = ()          # chat: the conversation, typed once
    prompts: tuple[str | tuple[int, ...], ...] = ()   # completion: texts or token ids
    echo: bool = False                          # completion: the prompt text (and scores) first
    n: int = 1                                  # choices per prompt
    max_tokens: int | None = None               # None: up to the context limit
    params: SamplingParams = SamplingParams()
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_ids: tuple[int, ...] = ()
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    structured: Structured | None = None        # a grammar the output must follow
    tools: ToolsSpec | None = None              # chat: functions the model may call


@dataclass(frozen=True, kw_only=True)
class EmbedSpec:
    model: str
    inputs: tuple[str | tuple[int, ...], ...]   # texts or token-id lists, in input order
    encoding_format: str = "float"              # "float" | "base64"


@dataclass(frozen=True, kw_only=True)
class TokenizeSpec:
    model: str
    prompt: str = ""
    messages: tuple[Message, ...] = ()          # when given, the chat template renders them
    # Accepted (validated as a boolean) and ignored: the prompt is always tokenized without
    # added special tokens (no BOS/EOS), which is what generation sees too.
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


@dataclass(frozen=True, kw_only=True)
class DetokenizeSpec:
    model: str
    tokens: tuple[int, ...]


# --- shared sampling fields ------------------------------------------------------------------

def _stop(doc: dict) -> tuple[str, ...]:
    v = doc.get("stop")
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "'stop' must be a string or a list of strings.")
    if len(stops) > MAX_STOP_STRINGS:
        raise bad("stop", f"'stop' allows at most {MAX_STOP_STRINGS} sequences, got {len(stops)}.")
    return tuple(stops)


def _logit_bias(doc: dict) -> tuple[tuple[int, float], ...]:
    v = doc.get("logit_bias")
    if v is None:
        return ()
    if not isinstance(v, dict) or len(v) > MAX_LOGIT_BIAS_ENTRIES:
        raise bad("logit_bias", "'logit_bias' must map token ids to numbers in [-100, 100].")
    out = []
    for key, bias in v.items():
        if not (isinstance(key, str) and key.isdigit()) or not is_number(bias) or abs(bias) > 100:
            raise bad("logit_bias", f"Invalid logit_bias entry {key!r}: {bias!r}; "
                                    "expected a token id and a number in [-100, 100].")
        out.append((int(key), float(bias)))
    return tuple(sorted(out))


def _refuse_unsupported(doc: dict) -> None:
    for name in UNSUPPORTED_IF_PRESENT:
        if doc.get(name) is not None:
            raise unsupported(name, f"'{name}' is not supported by this server.")


def _stream_flags(doc: dict) -> tuple[bool, bool]:
    stream = boolean(doc, "stream")
    options = doc.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise bad("stream_options", "'stream_options' must be an object.")
    if not stream:
        raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    return stream, boolean(options, "include_usage")


def _sampling(doc: dict, *, logprobs: bool, top_logprobs: int,
              defaults: SamplingDefaults) -> SamplingParams:
    top_k = integer(doc, "top_k", defaults.top_k, -1)
    return SamplingParams(
        temperature=number(doc, "temperature", defaults.temperature, 0.0, 2.0),
        top_p=number(doc, "top_p", defaults.top_p, 0.0, 1.0, lo_open=True),
        top_k=max(top_k, 0),                                  # vLLM's -1 means off too
        min_p=number(doc, "min_p", defaults.min_p, 0.0, 1.0),
        presence_penalty=number(doc, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=number(doc, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=number(doc, "repetition_penalty", defaults.repetition_penalty,
                                  0.0, 10.0, lo_open=True),
        logit_bias=_logit_bias(doc),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=boolean(doc, "ignore_eos"),
        min_tokens=integer(doc, "min_tokens", 0, 0),
    )


def _max_tokens(doc: dict, default: int | None, least: int = 1) -> int | None:
    value = integer(doc, "max_completion_tokens", None, 1)
    return integer(doc, "max_tokens", default, least) if value is None else value


def _common(doc: dict, kind: str, *, default_max: int | None, logprobs: bool,
            top_logprobs: int, defaults: SamplingDefaults, least_max: int = 1) -> dict:
    _refuse_unsupported(doc)
    stream, include_usage = _stream_flags(doc)
    seed = doc.get("seed")
    if seed is not None and not is_int(seed):
        raise bad("seed", f"{seed!r} is not valid for 'seed': expected an integer.")
    stop_ids = doc.get("stop_token_ids")
    return dict(kind=kind, model=model_name(doc), n=integer(doc, "n", 1, 1, MAX_CHOICES),
                max_tokens=_max_tokens(doc, default_max, least_max),
                params=_sampling(doc, logprobs=logprobs, top_logprobs=top_logprobs,
                                 defaults=defaults),
                seed=seed, stop=_stop(doc), stream=stream, include_usage=include_usage,
                stop_ids=() if stop_ids is None else token_ids(stop_ids, "stop_token_ids",
                                                               limit=MAX_STOP_TOKEN_IDS),
                logprobs=logprobs, top_logprobs=top_logprobs, structured=parse_structured(doc))


# --- chat ------------------------------------------------------------------------------------

MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def _message(i: int, m: Any) -> Message:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad(where, f"'{where}' must be an object with 'role' and 'content'.")
    role = m.get("role")
    if role not in ROLES:
        raise bad(f"{where}.role", f"{role!r} is not a valid role; expected one of "
                                   f"{', '.join(sorted(ROLES))}.")
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    content = check_content(f"{where}.content", content)     # a string or text parts
    calls = m.get("tool_calls")
    if calls is not None:
        calls = check_tool_calls(f"{where}.tool_calls", calls)
    if role == "tool":
        check_tool_message(where, m)
    return Message(role, content, name=m.get("name"), tool_calls=calls,
                   tool_call_id=m.get("tool_call_id"),
                   extra=tuple((k, v) for k, v in m.items()
                               if k not in MESSAGE_FIELDS and v is not None))


def _messages(doc: dict) -> tuple[Message, ...]:
    """`messages` for the chat template: 1..MAX_MESSAGES checked messages (chat, tokenize)."""
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list of messages.")
    if len(messages) > MAX_MESSAGES:
        raise bad("messages", f"'messages' allows at most {MAX_MESSAGES} entries.")
    return tuple(_message(i, m) for i, m in enumerate(messages))


def parse_chat(body: bytes, defaults: SamplingDefaults = SamplingDefaults()) -> GenSpec:
    doc = load_json_object(body)
    checked = _messages(doc)
    logprobs = boolean(doc, "logprobs")
    top = integer(doc, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    common = _common(doc, "chat", default_max=defaults.max_tokens, logprobs=logprobs,
                     top_logprobs=top, defaults=defaults)
    tools = parse_tools(doc)
    if tools is not None and tools.choice in ("required", "named") and common["structured"]:
        raise unsupported("tool_choice", f"A forced 'tool_choice' cannot be combined with "
                                         f"'{common['structured'].param}'.")
    return GenSpec(messages=checked, tools=tools, **common)


# --- completions -----------------------------------------------------------------------------

def _one_prompt(v: Any) -> str | tuple[int, ...] | None:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(is_int(t) for t in v):
        return token_ids(v, "prompt")
    return None


def _prompts(doc: dict) -> tuple[str | tuple[int, ...], ...]:
    """A string, token ids, or a list of either: one choice per prompt, in order."""
    v = doc.get("prompt", _MISSING)
    one = _one_prompt(v)
    if one is not None:
        return (one,)
    many = tuple(_one_prompt(x) for x in v) if isinstance(v, list) and v else (None,)
    if any(x is None for x in many):
        raise bad("prompt", "'prompt' must be a string, a list of token ids, or a non-empty "
                            "list of strings or of token-id lists.")
    if len(many) > MAX_COMPLETION_PROMPTS:
        raise bad("prompt", f"'prompt' allows at most {MAX_COMPLETION_PROMPTS} prompts.")
    return many


def parse_completion(body: bytes, defaults: SamplingDefaults = SamplingDefaults()) -> GenSpec:
    doc = load_json_object(body)
    if integer(doc, "best_of", 1, 1) > 1:
        raise unsupported("best_of", "Only best_of = 1 is supported.")
    for name in CHAT_ONLY:
        if doc.get(name) is not None:
            raise unsupported(name, f"'{name}' is served on /v1/chat/completions only.")
    prompts = _prompts(doc)
    echo = boolean(doc, "echo")
    n_logprobs = integer(doc, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS)
    common = _common(doc, "completion",
                     default_max=defaults.max_tokens or DEFAULT_COMPLETION_MAX_TOKENS,
                     logprobs=n_logprobs is not None, top_logprobs=n_logprobs or 0,
                     defaults=defaults, least_max=0)
    if common["max_tokens"] == 0 and not echo:
        raise bad("max_tokens", "'max_tokens' 0 is only allowed with 'echo': true (score the "
                                "prompt without sampling).")
    return GenSpec(prompts=prompts, echo=echo, **common)


# --- embeddings, tokenize --------------------------------------------------------------------

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
    if any(len(x) == 0 for x in inputs):
        raise bad("input", "'input' cannot contain an empty string or an empty token list.")
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
    return EmbedSpec(model=model, inputs=inputs, encoding_format=fmt)


def parse_tokenize(body: bytes) -> TokenizeSpec:
    doc = load_json_object(body)
    model = model_name(doc)
    # vLLM's defaults: a raw prompt gets the model's special tokens (BOS), a rendered chat
    # does not (its template wrote them).
    add_special = boolean(doc, "add_special_tokens", doc.get("messages") is None)
    if doc.get("messages") is not None:
        return TokenizeSpec(model=model, messages=_messages(doc),
                            add_special_tokens=add_special,
                            add_generation_prompt=boolean(doc, "add_generation_prompt", True))
    prompt = doc.get("prompt")
    if not isinstance(prompt, str):
        raise bad("prompt", "'prompt' must be a string (or send 'messages').")
    return TokenizeSpec(model=model, prompt=prompt, add_special_tokens=add_special)


def parse_detokenize(body: bytes) -> DetokenizeSpec:
    doc = load_json_object(body)
    return DetokenizeSpec(model=model_name(doc), tokens=token_ids(doc.get("tokens"), "tokens"))


def parse_priority(value: str | None) -> int:
    """`X-TL-Priority`: an integer in -100..100 (higher runs first); absent = 0."""
    if value is None:
        return 0
    try:
        priority = int(value.strip())
    except ValueError:
        priority = None
    if priority is None or not -100 <= priority <= 100:
        raise bad("X-TL-Priority", f"X-TL-Priority must be an integer in -100..100, got {value!r}.")
    return priority
