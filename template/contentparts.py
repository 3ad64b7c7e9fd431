"""Does a chat template iterate a message's content parts itself? Read from its syntax tree.

OpenAI clients may send `content` as a list of parts (`[{"type": "text", "text": "hi"}]`).
Hugging Face's `apply_chat_template` hands messages to the template as they are, so a
template written for parts (multimodal families: `{% for part in message['content'] %}`)
sees the list, while a plain one would print the list's repr. The server therefore joins
the text parts into one string for plain templates and passes the parts as given to
templates that loop over them; this module makes that decision once, at parse time:

    {% for part in message['content'] %}          -> True
    {% set c = message.content %}{% for p in c %} -> True
    {{ message['content'] }}                      -> False
"""
from __future__ import annotations

from dataclasses import fields

from . import nodes as n

CONTENT_KEY = "content"


def _is_content_access(expr) -> bool:
    """`x['content']` or `x.content` (any x: a loop variable, messages[0], ...)."""
    if isinstance(expr, n.GetItem):
        return isinstance(expr.key, n.Const) and expr.key.value == CONTENT_KEY
    return isinstance(expr, n.GetAttr) and expr.attr == CONTENT_KEY


def _walk(body):
    """Every node of a tree (statements and expressions), depth first."""
    stack = list(body) if isinstance(body, tuple) else [body]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            stack.extend(node)
            continue
        if not isinstance(node, n.Node):
            continue
        yield node
        stack.extend(getattr(node, f.name) for f in fields(node) if f.name != "lineno")


def iterates_content_parts(body: tuple) -> bool:
    """True when some `for` loop runs over a message's content (directly or via a `set`)."""
    content_names = {node.target.name for node in _walk(body)
                     if isinstance(node, n.Assign) and isinstance(node.target, n.Name)
                     and _is_content_access(node.value)}
    for node in _walk(body):
        if not isinstance(node, n.For):
            continue
        if _is_content_access(node.iter):
            return True
        if isinstance(node.iter, n.Name) and node.iter.name in content_names:
            return True
    return False
