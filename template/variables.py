"""Which names and keys does a chat template read? Read once from its syntax tree.

The server adapts a request to what the model's template understands: a template that
never mentions `tools` (SmolLM2's) cannot show the model its functions, so the server adds
its own tool prompt; one that never reads a message's `tool_calls` gets the calls written
into the assistant turn's text instead.

    {% if tools %}...                 -> mentions(tree, "tools") is True
    {{ message['tool_calls'] }}       -> mentions(tree, "tool_calls") is True
    {{ message.tool_calls }}          -> True
"""
from __future__ import annotations

from . import nodes as n
from .contentparts import _walk


def _names(node) -> tuple[str, ...]:
    """The words a node reads: a variable's name, an attribute, a constant item key."""
    if isinstance(node, n.Name):
        return (node.name,)
    if isinstance(node, n.GetAttr):
        return (node.attr,)
    if isinstance(node, n.GetItem) and isinstance(node.key, n.Const) and isinstance(node.key.value, str):
        return (node.key.value,)
    return ()


def mentioned_names(body: tuple) -> frozenset[str]:
    """Every variable, attribute and constant key the template reads anywhere."""
    return frozenset(word for node in _walk(body) for word in _names(node))
