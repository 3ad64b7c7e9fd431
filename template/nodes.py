"""The syntax tree: what the parser builds and the evaluator compiles.

Every node is a frozen dataclass carrying the 1-based `lineno` of its first token, so a
runtime error can say where it happened. Expressions and statements are separate families;
the evaluator turns each into a Python closure once, at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Node:
    lineno: int


# ---- expressions -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const(Node):
    value: object


@dataclass(frozen=True, slots=True)
class Name(Node):
    name: str


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    items: tuple


@dataclass(frozen=True, slots=True)
class TupleLit(Node):
    items: tuple


@dataclass(frozen=True, slots=True)
class DictLit(Node):
    pairs: tuple  # ((key_expr, value_expr), ...)


@dataclass(frozen=True, slots=True)
class GetAttr(Node):
    obj: Node
    attr: str


@dataclass(frozen=True, slots=True)
class GetItem(Node):
    obj: Node
    key: Node


@dataclass(frozen=True, slots=True)
class Slice(Node):
    start: Node | None
    stop: Node | None
    step: Node | None


@dataclass(frozen=True, slots=True)
class Call(Node):
    func: Node
    args: tuple
    kwargs: tuple  # ((name, expr), ...)
    star_args: Node | None = None
    star_kwargs: Node | None = None


@dataclass(frozen=True, slots=True)
class Filter(Node):
    value: Node | None  # None inside a {% filter %} block: the block's text is the value
    name: str
    args: tuple
    kwargs: tuple


@dataclass(frozen=True, slots=True)
class Test(Node):
    value: Node
    name: str
    args: tuple
    kwargs: tuple
    negated: bool


@dataclass(frozen=True, slots=True)
class CondExpr(Node):
    test: Node
    then: Node
    otherwise: Node | None  # None: `a if b` without else gives undefined


@dataclass(frozen=True, slots=True)
class BinOp(Node):
    op: str  # + - * / // % **
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class UnaryOp(Node):
    op: str  # - + not
    operand: Node


@dataclass(frozen=True, slots=True)
class And(Node):
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or(Node):
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Concat(Node):
    items: tuple  # the ~ operator: everything converted to str and joined


@dataclass(frozen=True, slots=True)
class Compare(Node):
    first: Node
    ops: tuple  # ((op, expr), ...) with op in == != < <= > >= in notin


# ---- statements --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Output(Node):
    """Literal text (Const) and {{ expressions }} in source order."""
    items: tuple


@dataclass(frozen=True, slots=True)
class For(Node):
    target: Node  # Name or TupleLit of Names
    iter: Node
    body: tuple
    else_body: tuple
    condition: Node | None


@dataclass(frozen=True, slots=True)
class If(Node):
    test: Node
    body: tuple
    else_body: tuple  # an elif chain nests another If here


@dataclass(frozen=True, slots=True)
class Assign(Node):
    target: Node  # Name, TupleLit of Names, or NamespaceRef
    value: Node


@dataclass(frozen=True, slots=True)
class NamespaceRef(Node):
    """`ns.attr` as an assignment target."""
    name: str
    attr: str


@dataclass(frozen=True, slots=True)
class AssignBlock(Node):
    target: Node
    body: tuple
    filters: tuple  # Filter nodes with value=None, applied in order


@dataclass(frozen=True, slots=True)
class Macro(Node):
    name: str
    params: tuple  # names
    defaults: tuple  # expressions for the last len(defaults) params
    body: tuple


@dataclass(frozen=True, slots=True)
class FilterBlock(Node):
    body: tuple
    filters: tuple


@dataclass(frozen=True, slots=True)
class Scope(Node):
    """`{% with %}`: assignments visible only inside the body."""
    assigns: tuple
    body: tuple


@dataclass(frozen=True, slots=True)
class Break(Node):
    pass


@dataclass(frozen=True, slots=True)
class Continue(Node):
    pass
