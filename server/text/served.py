"""The served model: the one place that knows the model as text (template, tokenizer, limits).

`ServedModel` parses the chat template once at start-up (a broken one stops the server with
`ModelFormatError`, never a request), renders messages through it, encodes text, and owns
the length rules a request must pass before it reaches the engine:

    check_token_ids(ids, param)           client-sent ids must be in the vocabulary (400)
    max_tokens_for(prompt, max, param)    the context rule (the engine's `check_context`) and
                                          the KV pool's size, as 400 context_length_exceeded
    check_input_length(ids, param)        an embedding input: 1..max_model_len tokens

`read_chat_template(path)` reads a configured template file (server/serve.py calls it).
"""
from __future__ import annotations

import time
from pathlib import Path

from engine.api import GrammarCache, Model, ModelFormatError, PromptTooLong, Tokenizer, check_context
from server.errors import ApiError
from server.text.messages import Message, for_template
from server.text.reasoning import Thinking, request_thinking, template_thinks
from server.text.toolformats import tool_format, with_default_prompt
from template import ChatFormat, Template, TemplateError, TemplateSyntaxError


class TemplateFileError(Exception):
    """A configured chat template file that cannot be served (the message says why)."""


class ServedModel:
    """The model as the API sees it: id, chat format, tokenizer, context length.

    `chat_template` (the text of a configured file) replaces the model's own when given;
    `reasoning` False ([engine].reasoning = "off") serves a thinking template's answers as
    generated, the reasoning left in `content`."""

    def __init__(self, model: Model, model_id: str, max_model_len: int, *,
                 kv_capacity_tokens: int | None = None, chat_template: str | None = None,
                 reasoning: bool = True):
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
        self.tool_format = tool_format(self.chat.template.source, self.reads_tools)
        self.thinks = reasoning and template_thinks(self.chat.template.source)

    def thinking_for(self, prompt: str, variables: dict) -> Thinking | None:
        """How the answer to this rendered prompt is split (None: not at all)."""
        return request_thinking(self.thinks, prompt, variables)

    def render(self, messages: tuple[Message, ...], *, add_generation_prompt: bool = True,
               tools: tuple[dict, ...] = (), variables: dict | None = None) -> str:
        """`tools` reach the template's `tools` variable, or the default prompt
        (server/text/toolformats.py) when the template never reads them; `variables`
        (`chat_template_kwargs`, `enable_thinking`) are the template's other names."""
        try:
            prepared = for_template(messages, self.chat.template.iterates_content_parts)
            if not self.reads_tools:
                prepared, tools = with_default_prompt(prepared, tools), ()
            return self.chat.render(prepared, add_generation_prompt=add_generation_prompt,
                                    tools=list(tools) or None, variables=variables or {})
        except TemplateError as exc:
            raise ApiError("template_error", exc.message, param="messages") from None

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. A raw prompt is encoded as Hugging Face's `tok(text)` and vLLM
        do (`add_special_tokens`: BOS first when the model asks for it, as Gemma's does); a
        rendered chat template already holds its BOS."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of text the model is expected to write (a `prediction`): markup such as
        `<|im_end|>` in it stays plain text, never a special token; no BOS."""
        return list(self.tokenizer.encode(text, parse_special=False))

    def check_token_ids(self, ids: tuple[int, ...], param: str) -> None:
        """Refuse client-sent token ids past the vocabulary (400 naming `param`).

        Only ids the client typed need this: ids our own tokenizer produced are in range.
        Unchecked, a bad id would fail later on the engine thread as a 500."""
        check_token_ids(ids, self.tokenizer.vocab_size, param)

    def max_tokens_for(self, prompt_tokens: int, max_tokens: int | None, prompt_param: str) -> int:
        """The completion budget of a prompt: the engine's context rule (one source) and the
        KV pool's size, or 400 `context_length_exceeded` naming `prompt_param`."""
        try:
            budget_tokens = check_context(prompt_tokens, max_tokens, self.max_model_len)
        except PromptTooLong as exc:
            requested = exc.prompt_tokens + exc.completion_tokens
            raise ApiError("context_length_exceeded",
                           f"This model's maximum context length is {exc.max_model_len} tokens. "
                           f"However, you requested {requested} tokens ({exc.prompt_tokens} in "
                           f"the {prompt_param}, {exc.completion_tokens} for the completion). "
                           f"Please reduce the length of the {prompt_param} or max_tokens.",
                           param=prompt_param) from None
        self._check_kv_capacity(prompt_tokens, max_tokens, prompt_param)
        return budget_tokens

    def _check_kv_capacity(self, prompt_tokens: int, max_tokens: int | None,
                           prompt_param: str) -> None:
        """A request the KV pool could never hold (even alone) is a 400 now, not a wait."""
        pool_tokens = self.kv_capacity_tokens
        needed_tokens = prompt_tokens + (1 if max_tokens is None else max_tokens)
        if pool_tokens is not None and needed_tokens > pool_tokens:
            raise ApiError("context_length_exceeded",
                           f"This server's KV cache holds {pool_tokens} tokens; the request "
                           f"needs {needed_tokens} ({prompt_tokens} in the {prompt_param}, "
                           f"{needed_tokens - prompt_tokens} for the completion). Please "
                           f"reduce the length of the {prompt_param} or max_tokens.",
                           param=prompt_param)

    def check_input_length(self, ids: list[int], param: str) -> None:
        """An input that is embedded whole: 1..max_model_len tokens."""
        if not ids or len(ids) > self.max_model_len:
            raise ApiError("context_length_exceeded", "Each input must have 1 to "
                           f"{self.max_model_len} tokens.", param=param)


def read_chat_template(path: str) -> str:
    """The text of a `[engine].chat_template` file, parsed once to refuse a broken one now
    (`TemplateFileError`, its message naming the file)."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise TemplateFileError(f"cannot read the chat template {path} "
                                f"([engine].chat_template): {why}") from None
    if not source.strip():
        raise TemplateFileError(f"the chat template {path} ([engine].chat_template) is empty")
    try:
        Template.parse(source)
    except TemplateSyntaxError as err:
        raise TemplateFileError(f"the chat template {path} ([engine].chat_template) does not "
                                f"parse: {err}") from None
    return source


def check_token_ids(ids: tuple[int, ...], vocab_size: int, param: str) -> None:
    """Refuse token ids at or past `vocab_size` (400 naming `param`): any tokenizer's."""
    past = [t for t in ids if t >= vocab_size]
    if past:
        raise ApiError("invalid_request",
                       f"Token id {past[0]} in '{param}' is not in the vocabulary: "
                       f"token ids must be below the vocabulary size {vocab_size}.", param=param)
