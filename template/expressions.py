"""Expression compiler: an expression node -> a Python closure `fn(state) -> value`.

Compiling once at parse time means rendering never walks the tree or dispatches on node
types: each closure holds its children's closures and does only its own work. `state` is
the evaluator's `RenderState` (the scope stack and the limits).

Operators are Python's own on JSON values (so `'a' + 1` fails the way Jinja does), with
two sandbox guards: `*` may not build a string or list longer than the output limit, and
`**` may not use a huge exponent.
"""

from __future__ import annotations

import operator

from . import nodes as n
from .builtins import FILTERS, TESTS, to_str
from .errors import TemplateLimitError
from .runtime import SAFE_METHODS, Undefined, get_attr, get_item

# `2 ** 10 ** 9` would run for minutes; real templates never need large powers.
MAX_POWER_EXPONENT = 1024
# `'x' * n` and `[0] * n`: the largest string or list a repetition may build.
MAX_REPEAT_ITEMS = 10_000_000

_DICT_METHODS = SAFE_METHODS[dict]


def check_size(state, text: str) -> str:
    """Strings built by + and ~ may not outgrow the output limit (a doubling loop would)."""
    if len(text) > state.limits.max_output_chars:
        raise TemplateLimitError(f"string longer than max_output_chars ({state.limits.max_output_chars})")
    return text


def _guarded_mul(left, right):
    count, seq = (right, left) if isinstance(left, (str, list, tuple)) else (left, right)
    if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and len(seq) * count > MAX_REPEAT_ITEMS:
        raise TemplateLimitError(f"repetition longer than max_repeat_items ({MAX_REPEAT_ITEMS})")
    return left * right


def _guarded_pow(left, right):
    if isinstance(right, (int, float)) and abs(right) > MAX_POWER_EXPONENT:
        raise TemplateLimitError(f"exponent larger than max_power_exponent ({MAX_POWER_EXPONENT})")
    return left ** right


BINARY_OPS = {
    "+": operator.add, "-": operator.sub, "*": _guarded_mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": _guarded_pow,
}
COMPARE_OPS = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "notin": lambda a, b: a not in b,
}
UNARY_OPS = {"-": operator.neg, "+": operator.pos, "not": operator.not_}


def compile_expr(node: n.Node):
    """Return `fn(state) -> value` for one expression node."""
    return _COMPILERS[type(node)](node)


def _const(node: n.Const):
    value = node.value
    return lambda state: value


def _name(node: n.Name):
    name = node.name

    def load(state):
        for scope in reversed(state.scopes):
            if name in scope:
                return scope[name]
        return Undefined(name)
    return load


def _list(node: n.ListLit):
    items = tuple(compile_expr(item) for item in node.items)
    return lambda state: [item(state) for item in items]


def _tuple(node: n.TupleLit):
    items = tuple(compile_expr(item) for item in node.items)
    return lambda state: tuple(item(state) for item in items)


def _dict(node: n.DictLit):
    pairs = tuple((compile_expr(k), compile_expr(v)) for k, v in node.pairs)
    return lambda state: {k(state): v(state) for k, v in pairs}


def _getattr(node: n.GetAttr):
    obj_fn, attr = compile_expr(node.obj), node.attr
    if attr in _DICT_METHODS or attr.startswith("_"):
        return lambda state: get_attr(obj_fn(state), attr)

    def load(state):
        obj = obj_fn(state)
        if type(obj) is dict and attr in obj:  # the common case: message.role
            return obj[attr]
        return get_attr(obj, attr)
    return load


def _getitem(node: n.GetItem):
    obj_fn = compile_expr(node.obj)
    if isinstance(node.key, n.Const) and isinstance(node.key.value, (str, int)):
        key = node.key.value

        def load_const(state):
            obj = obj_fn(state)
            if type(obj) is dict and key in obj:  # the common case: message['role']
                return obj[key]
            return get_item(obj, key)
        return load_const
    key_fn = compile_expr(node.key)
    return lambda state: get_item(obj_fn(state), key_fn(state))


def _slice(node: n.Slice):
    parts = tuple(None if p is None else compile_expr(p) for p in (node.start, node.stop, node.step))
    return lambda state: slice(*(None if p is None else p(state) for p in parts))


def _compile_args(node) -> tuple[tuple, tuple]:
    """A call's, filter's or test's arguments -> (positional fns, (name, fn) pairs)."""
    return (tuple(compile_expr(a) for a in node.args),
            tuple((k, compile_expr(v)) for k, v in node.kwargs))


def _apply(func, value, args: tuple, kwargs: tuple, state):
    """func(value, *args, **kwargs) with the argument expressions evaluated now."""
    return func(value, *[a(state) for a in args], **{k: v(state) for k, v in kwargs})


def _call(node: n.Call):
    func_fn = compile_expr(node.func)
    args, kwargs = _compile_args(node)
    star_args = compile_expr(node.star_args) if node.star_args else None
    star_kwargs = compile_expr(node.star_kwargs) if node.star_kwargs else None

    def call(state):
        func = func_fn(state)
        pos = [a(state) for a in args]
        if star_args is not None:
            pos.extend(star_args(state))
        named = {k: v(state) for k, v in kwargs}
        if star_kwargs is not None:
            named.update(star_kwargs(state))
        return func(*pos, **named)
    return call


def _filter(node: n.Filter):
    func = FILTERS[node.name]
    value_fn = compile_expr(node.value)
    args, kwargs = _compile_args(node)
    if not args and not kwargs:
        return lambda state: func(value_fn(state))                 # the common case, no lists
    return lambda state: _apply(func, value_fn(state), args, kwargs, state)


def compile_filter_chain(filters: tuple):
    """`{% filter f1 | f2 %}` / `{% set x | f %}`: filters (value=None) -> fn(state, value)."""
    steps = tuple((FILTERS[node.name], *_compile_args(node)) for node in filters)

    def apply(state, value):
        for func, args, kwargs in steps:
            value = _apply(func, value, args, kwargs, state)
        return value
    return apply


def _test(node: n.Test):
    func, negated = TESTS[node.name], node.negated
    value_fn = compile_expr(node.value)
    args, kwargs = _compile_args(node)

    def test(state):
        result = bool(_apply(func, value_fn(state), args, kwargs, state))
        return not result if negated else result
    return test


def _condexpr(node: n.CondExpr):
    test, then = compile_expr(node.test), compile_expr(node.then)
    if node.otherwise is None:
        hint = "the inline if-expression evaluated to false and no else section was defined."
        return lambda state: then(state) if test(state) else Undefined(None, hint=hint)
    otherwise = compile_expr(node.otherwise)
    return lambda state: then(state) if test(state) else otherwise(state)


def _binop(node: n.BinOp):
    if node.op == "+" and isinstance(node.left, n.Const) and isinstance(node.right, n.Const) \
            and isinstance(node.left.value, str) and isinstance(node.right.value, str):
        return _const(n.Const(node.lineno, node.left.value + node.right.value))
    func = BINARY_OPS[node.op]
    left, right = compile_expr(node.left), compile_expr(node.right)
    if node.op == "+":
        def add(state):
            a, b = left(state), right(state)
            if type(a) is str and type(b) is str:
                return check_size(state, a + b)
            return func(a, b)
        return add
    return lambda state: func(left(state), right(state))


def _unary(node: n.UnaryOp):
    func, operand = UNARY_OPS[node.op], compile_expr(node.operand)
    return lambda state: func(operand(state))


def _and(node: n.And):
    left, right = compile_expr(node.left), compile_expr(node.right)
    return lambda state: left(state) and right(state)


def _or(node: n.Or):
    left, right = compile_expr(node.left), compile_expr(node.right)
    return lambda state: left(state) or right(state)


def _concat(node: n.Concat):
    items = tuple(compile_expr(item) for item in node.items)
    return lambda state: check_size(state, "".join([to_str(item(state)) for item in items]))


def _compare(node: n.Compare):
    first = compile_expr(node.first)
    ops = tuple((COMPARE_OPS[op], compile_expr(expr)) for op, expr in node.ops)
    if len(ops) == 1:
        func, right = ops[0]
        return lambda state: func(first(state), right(state))

    def compare(state):
        left = first(state)
        for func, right_fn in ops:
            right = right_fn(state)
            if not func(left, right):
                return False
            left = right
        return True
    return compare


_COMPILERS = {
    n.Const: _const, n.Name: _name, n.ListLit: _list, n.TupleLit: _tuple, n.DictLit: _dict,
    n.GetAttr: _getattr, n.GetItem: _getitem, n.Slice: _slice, n.Call: _call,
    n.Filter: _filter, n.Test: _test, n.CondExpr: _condexpr, n.BinOp: _binop,
    n.UnaryOp: _unary, n.And: _and, n.Or: _or, n.Concat: _concat, n.Compare: _compare,
}
