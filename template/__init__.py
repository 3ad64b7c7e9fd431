"""A handwritten Jinja-subset compiler for chat templates: str in, str out.

    from template import Template, DEFAULT_TEMPLATE
    prompt = Template.parse(source).render_chat(messages, add_generation_prompt=True)

Pipeline: lexer.py (text -> tokens, whitespace control) -> parser.py / exprparser.py
(tokens -> nodes.py tree, syntax errors with line and column) -> evaluator.py /
expressions.py (tree -> Python closures, once) -> render (closures over a scope stack).
builtins.py holds the filter and test tables, runtime.py the sandboxed values.
No I/O, no numpy, no third-party template library.
"""

from .errors import (TemplateError, TemplateLimitError, TemplateRaised, TemplateRuntimeError,
                     TemplateSecurityError, TemplateSyntaxError, UndefinedValueError)
from .evaluator import Limits
from .template import DEFAULT_TEMPLATE, ChatFormat, Template, chat_template_for, prepare_message

__all__ = [
    "ChatFormat", "DEFAULT_TEMPLATE", "Limits", "Template", "TemplateError", "TemplateLimitError",
    "TemplateRaised", "TemplateRuntimeError", "TemplateSecurityError", "TemplateSyntaxError",
    "UndefinedValueError", "chat_template_for", "prepare_message",
]
