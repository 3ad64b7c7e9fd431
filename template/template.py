"""`Template`: parse once (lex -> parse -> compile to closures), render many times.

    template = Template.parse(source)          # TemplateSyntaxError here, at start-up
    prompt = template.render_chat(messages, add_generation_prompt=True,
                                  bos_token="<s>", eos_token="</s>")

`ChatFormat` is a model's chat template together with its BOS/EOS strings. The engine hands
the template over as text (`Model.chat_template`, None when the model ships none); whoever
serves the model builds one at start-up, so a broken template stops the start-up with its
line and column instead of failing every request:

    chat = ChatFormat.from_source(model.chat_template, bos_token="<s>", eos_token=None)
    prompt = chat.render([{"role": "user", "content": "Hi"}])   # a missing string renders ""

`render_chat` prepares the messages as Hugging Face's `apply_chat_template` does before
rendering: keys whose value is None are dropped, and `reasoning_content`, `thinking` and
`reasoning` mirror each other (a template reading any one of them sees the value). The
context then holds `messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
`tools`, `documents` (None unless given) and every extra keyword.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .errors import TemplateSyntaxError
from .evaluator import Limits, compile_body, render_body
from .contentparts import iterates_content_parts
from .variables import mentioned_names
from .lexer import tokenize
from .parser import parse

# The plain default for models that ship no template: `<|role|>` then the content, per message.
DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


def prepare_message(message: dict) -> dict:
    """Drop None-valued keys and mirror the reasoning keys, as Hugging Face does."""
    prepared = {key: value for key, value in message.items() if value is not None}
    reasoning = next((prepared[key] for key in REASONING_KEYS if key in prepared), None)
    if reasoning is not None:
        for key in REASONING_KEYS:
            prepared.setdefault(key, reasoning)
    return prepared


class Template:
    """A compiled template. Build with `Template.parse(source)`; immutable afterwards."""

    __slots__ = ("source", "_body", "limits", "iterates_content_parts", "names")

    def __init__(self, source: str, body, limits: Limits, *,
                 iterates_content_parts: bool = False, names: frozenset[str] = frozenset()) -> None:
        self.source = source
        self._body = body
        self.limits = limits
        self.iterates_content_parts = iterates_content_parts   # see template/contentparts.py
        self.names = names                      # what it reads (template/variables.py)

    @classmethod
    def parse(cls, source: str, *, limits: Limits | None = None) -> "Template":
        try:
            tree = parse(tokenize(source))
            body = compile_body(tree)
            parts = iterates_content_parts(tree)
            names = mentioned_names(tree)
        except RecursionError:
            raise TemplateSyntaxError("template nested too deeply", 1, 1) from None
        return cls(source, body, limits or Limits(), iterates_content_parts=parts, names=names)

    def render(self, context: dict, *, now: datetime | None = None) -> str:
        return render_body(self._body, context, self.limits, now or datetime.now())

    def render_chat(self, messages: list, *, add_generation_prompt: bool = True, bos_token: str | None = "",
                    eos_token: str | None = "", tools: list | None = None, now: datetime | None = None,
                    variables: dict | None = None, **extra: object) -> str:
        """`variables` (a request's `chat_template_kwargs`) and `extra` are further names;
        the ones set here win over them."""
        context = {"documents": None}
        context.update(variables or {})
        context.update(extra)
        context.update(
            messages=[prepare_message(m) if isinstance(m, dict) else m for m in messages],
            add_generation_prompt=add_generation_prompt, bos_token=bos_token,
            eos_token=eos_token, tools=tools,
        )
        return self.render(context, now=now)

    def render_messages(self, messages: list, add_generation_prompt: bool = True,
                        bos_token: str = "", eos_token: str = "") -> str:
        """Render `[(role, content), ...]` pairs."""
        return self.render_chat([{"role": role, "content": content} for role, content in messages],
                                add_generation_prompt=add_generation_prompt,
                                bos_token=bos_token, eos_token=eos_token)


def chat_template_for(source: str | None, *, limits: Limits | None = None) -> Template:
    """The model's own chat template, or `DEFAULT_TEMPLATE` when it ships none (or an empty one).

    Call this when a model loads: a broken template raises TemplateSyntaxError there.
    """
    return Template.parse(source if source and source.strip() else DEFAULT_TEMPLATE, limits=limits)


@dataclass(frozen=True)
class ChatFormat:
    """A model's chat template with its BOS/EOS strings: messages -> prompt text."""
    template: Template
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_source(cls, source: str | None, *, bos_token: str | None = None,
                    eos_token: str | None = None) -> "ChatFormat":
        """Parse `source` now; None or blank means the plain `DEFAULT_TEMPLATE`."""
        return cls(chat_template_for(source), bos_token or "", eos_token or "")

    def render(self, messages, *, add_generation_prompt: bool = True,
               tools: list | None = None, variables: dict | None = None) -> str:
        """Render a list of message mappings (TemplateError propagates to the caller).
        `variables` are further names the template may read (`enable_thinking`); they never
        replace the ones set here."""
        return self.template.render_chat(
            [dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token, tools=tools,
            variables=variables)
