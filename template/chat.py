"""`ChatFormat`: a model's chat template with its BOS/EOS strings, messages -> prompt text.

The engine hands over the template as source text (`Model.chat_template`, None when the
model ships none); whoever serves the model parses it once at start-up:

    chat = ChatFormat.from_source(model.chat_template, bos_token="<s>", eos_token="</s>")
    prompt = chat.render([{"role": "user", "content": "Hi"}])   # add_generation_prompt=True

A broken template raises `TemplateSyntaxError` (with its line and column) from
`from_source`, so it stops start-up instead of failing every request. A missing BOS or
EOS string renders as "".
"""
from __future__ import annotations

from dataclasses import dataclass

from .template import Template, chat_template_for


@dataclass(frozen=True)
class ChatFormat:
    template: Template
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_source(cls, source: str | None, *, bos_token: str | None = None,
                    eos_token: str | None = None) -> "ChatFormat":
        """Parse `source` now; None or blank means the plain `DEFAULT_TEMPLATE`."""
        return cls(chat_template_for(source), bos_token or "", eos_token or "")

    def render(self, messages, *, add_generation_prompt: bool = True) -> str:
        """Render a list of message mappings (TemplateError propagates to the caller)."""
        return self.template.render_chat(
            [dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token)
