"""Statement compiler and the render loop: statement nodes -> closures `fn(state, out)`.

A statement closure appends strings to `out` (a list joined once at the end). Scopes follow
Jinja: `state.scopes` is a stack of dicts searched from the top; the bottom one holds the
globals and the render context, and top-level `set` writes there. A `for` loop gives every
iteration a fresh scope (a `set` inside the loop never leaks out, nor into the next
iteration); `if` has no scope of its own; a macro call runs in the scopes it was defined in
plus one for its arguments. `namespace()` objects are how a loop carries state outward.

Everything is bounded by `Limits`: loop iterations, macro call depth, output characters,
`range()` size. Python errors raised by operators and methods (TypeError, ...) become
`TemplateRuntimeError` carrying Python's message and the statement's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from . import nodes as n
from .builtins import to_str
from .errors import TemplateError, TemplateLimitError, TemplateRaised, TemplateRuntimeError
from .expressions import compile_expr, compile_filter_chain
from .runtime import LoopContext, Namespace, Undefined


@dataclass(frozen=True)
class Limits:
    """Per-render resource bounds; each one raises TemplateLimitError naming itself."""
    max_loop_iterations: int = 100_000   # all loops of one render together
    max_call_depth: int = 40             # nested macro calls (Python's stack is ~1000 frames)
    max_output_chars: int = 8_000_000    # the rendered prompt, far beyond any context window
    max_range_items: int = 100_000       # range() size, as Jinja's sandbox MAX_RANGE


_PYTHON_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError,
                  ZeroDivisionError, OverflowError, RecursionError)


# `{% break %}` and `{% continue %}` unwind to their loop as exceptions. Each raise makes a
# fresh instance: a shared one would collect every raise's traceback on its __traceback__ and
# keep those frames (and each render's state and output) alive for the life of the process.
class _BreakLoop(Exception):
    pass


class _ContinueLoop(Exception):
    pass


class RenderState:
    """The mutable state of one render: scopes, counters, limits, the frozen clock."""

    __slots__ = ("scopes", "num_iterations", "num_output_chars", "call_depth", "limits", "now")

    def __init__(self, base_scope: dict, limits: Limits, now: datetime) -> None:
        self.scopes = [base_scope]
        self.num_iterations = 0
        self.num_output_chars = 0
        self.call_depth = 0
        self.limits = limits
        self.now = now

    def count_output(self, num_chars: int) -> None:
        self.num_output_chars += num_chars
        if self.num_output_chars > self.limits.max_output_chars:
            raise TemplateLimitError(f"output exceeds max_output_chars ({self.limits.max_output_chars})")


class MacroFunction:
    """A `{% macro %}`: callable from expressions, returns the rendered body."""

    def __init__(self, node: n.Macro, body, defaults: tuple, state: RenderState) -> None:
        self.name = node.name
        self.params = node.params
        self.num_required = len(node.params) - len(defaults)
        self.defaults = defaults
        self.body = body
        self.state = state
        self.scopes = list(state.scopes)

    def __call__(self, *args, **kwargs) -> str:
        state = self.state
        if state.call_depth >= state.limits.max_call_depth:
            raise TemplateLimitError(f"macro calls nested deeper than max_call_depth ({state.limits.max_call_depth})")
        saved = state.scopes
        scope = self._bind(args, kwargs)
        state.scopes = self.scopes + [scope]
        state.call_depth += 1
        out: list[str] = []
        try:
            self.body(state, out)
        finally:
            state.scopes = saved
            state.call_depth -= 1
        return "".join(out)

    def _bind(self, args: tuple, kwargs: dict) -> dict:
        scope: dict = {"varargs": tuple(args[len(self.params):])}
        state = self.state
        for i, param in enumerate(self.params):
            if i < len(args):
                scope[param] = args[i]
            elif param in kwargs:
                scope[param] = kwargs.pop(param)
            elif i >= self.num_required:
                state.scopes, saved = self.scopes + [scope], state.scopes
                try:
                    scope[param] = self.defaults[i - self.num_required](state)
                finally:
                    state.scopes = saved
            else:
                scope[param] = Undefined(param, hint=f"parameter {param!r} was not provided")
        scope["kwargs"] = kwargs
        return scope


def compile_body(statements: tuple):
    fns = tuple(compile_stmt(s) for s in statements)
    if len(fns) == 1:
        return fns[0]

    def run(state, out):
        for fn in fns:
            fn(state, out)
    return run


def compile_stmt(node: n.Node):
    """Return `fn(state, out)` for one statement, converting Python errors on the way."""
    fn = _COMPILERS[type(node)](node)
    lineno = node.lineno

    def run(state, out):
        try:
            fn(state, out)
        except _PYTHON_ERRORS + (TemplateRuntimeError,) as exc:
            raise _at_line(exc, lineno) from None
    return run


def _at_line(exc: Exception, lineno: int) -> TemplateRuntimeError:
    """A render failure as a TemplateRuntimeError that names the line it happened on
    (the innermost line wins: an error that already has one keeps it)."""
    if isinstance(exc, TemplateRuntimeError):
        if exc.lineno is None:
            exc.lineno = lineno
        return exc
    return TemplateRuntimeError(str(exc), lineno)


def _output(node: n.Output):
    parts = tuple(item.value if isinstance(item, n.Const) and isinstance(item.value, str)
                  else compile_expr(item) for item in node.items)
    linenos = tuple(item.lineno for item in node.items)

    def run(state, out):
        num_chars, index = 0, 0
        try:
            for index, part in enumerate(parts):
                text = part if type(part) is str else to_str(part(state))
                out.append(text)
                num_chars += len(text)
        except _PYTHON_ERRORS + (TemplateRuntimeError,) as exc:
            raise _at_line(exc, linenos[index]) from None
        state.count_output(num_chars)
    return run


def _assigner(target: n.Node):
    """`fn(state, value)` binding a Name, a tuple of Names or `ns.attr`."""
    if isinstance(target, n.Name):
        name = target.name

        def assign_name(state, value):
            state.scopes[-1][name] = value
        return assign_name
    if isinstance(target, n.NamespaceRef):
        load_ns, attr = compile_expr(n.Name(target.lineno, target.name)), target.attr

        def assign_attr(state, value):
            ns = load_ns(state)
            if type(ns) is not Namespace:
                raise TemplateRuntimeError("cannot assign attribute on non-namespace object", target.lineno)
            ns.attrs[attr] = value
        return assign_attr
    names = tuple(item.name for item in target.items)

    def assign_tuple(state, value):
        values = list(value)
        if len(values) != len(names):
            raise TemplateRuntimeError(f"cannot unpack {len(values)} values into {len(names)} names", target.lineno)
        scope = state.scopes[-1]
        for name, item in zip(names, values):
            scope[name] = item
    return assign_tuple


def _for(node: n.For):
    iter_fn, body = compile_expr(node.iter), compile_body(node.body)
    else_body = compile_body(node.else_body) if node.else_body else None
    condition = compile_expr(node.condition) if node.condition else None
    assign = _assigner(node.target)

    def run(state, out):
        items = list(iter_fn(state))
        scopes = state.scopes
        scopes.append({})
        try:
            if condition is not None:
                items = _filter_items(state, items, assign, condition, node.lineno)
            loop = LoopContext(items, 0)
            for index0, item in enumerate(items):
                _count_iteration(state, node.lineno)
                loop.index0 = index0
                scopes[-1] = {"loop": loop}
                assign(state, item)
                try:
                    body(state, out)
                except _ContinueLoop:
                    continue
                except _BreakLoop:
                    break
        finally:
            scopes.pop()
        if not items and else_body is not None:
            else_body(state, out)
    return run


def _count_iteration(state, lineno: int) -> None:
    """Every loop step of one render counts, filtered-out ones too (`for x in xs if c`)."""
    state.num_iterations += 1
    limit = state.limits.max_loop_iterations
    if state.num_iterations > limit:
        raise TemplateLimitError(f"loop iterations exceed max_loop_iterations ({limit})", lineno)


def _filter_items(state, items: list, assign, condition, lineno: int) -> list:
    kept = []
    for item in items:
        _count_iteration(state, lineno)
        state.scopes[-1] = {}
        assign(state, item)
        if condition(state):
            kept.append(item)
    return kept


def _if(node: n.If):
    test, body = compile_expr(node.test), compile_body(node.body)
    else_body = compile_body(node.else_body) if node.else_body else None

    def run(state, out):
        if test(state):
            body(state, out)
        elif else_body is not None:
            else_body(state, out)
    return run


def _assign(node: n.Assign):
    value_fn, assign = compile_expr(node.value), _assigner(node.target)
    return lambda state, out: assign(state, value_fn(state))


def _capture(body, filters: tuple):
    """Render `body` into a string and pass it through `filters`."""
    apply = compile_filter_chain(filters) if filters else None

    def capture(state):
        out: list[str] = []
        body(state, out)
        text = "".join(out)
        return apply(state, text) if apply is not None else text
    return capture


def _assign_block(node: n.AssignBlock):
    capture, assign = _capture(compile_body(node.body), node.filters), _assigner(node.target)
    return lambda state, out: assign(state, capture(state))


def _filter_block(node: n.FilterBlock):
    capture = _capture(compile_body(node.body), node.filters)

    def run(state, out):
        text = to_str(capture(state))
        state.count_output(len(text))
        out.append(text)
    return run


def _macro(node: n.Macro):
    body = compile_body(node.body)
    defaults = tuple(compile_expr(d) for d in node.defaults)

    def define(state, out):
        state.scopes[-1][node.name] = MacroFunction(node, body, defaults, state)
    return define


def _scope(node: n.Scope):
    assigns = tuple(_assign(a) for a in node.assigns)
    body = compile_body(node.body)

    def run(state, out):
        state.scopes.append({})
        try:
            for assign in assigns:
                assign(state, out)
            body(state, out)
        finally:
            state.scopes.pop()
    return run


def _break(node: n.Break):
    def run(state, out):
        raise _BreakLoop()
    return run


def _continue(node: n.Continue):
    def run(state, out):
        raise _ContinueLoop()
    return run


_COMPILERS = {
    n.Output: _output, n.For: _for, n.If: _if, n.Assign: _assign, n.AssignBlock: _assign_block,
    n.FilterBlock: _filter_block, n.Macro: _macro, n.Scope: _scope, n.Break: _break,
    n.Continue: _continue,
}


def make_globals(state: RenderState) -> dict:
    """The functions every template can call (Hugging Face's set plus Jinja's range/dict)."""
    def range_(*args):
        result = range(*args)
        if len(result) > state.limits.max_range_items:
            raise TemplateLimitError(f"range larger than max_range_items ({state.limits.max_range_items})")
        return result

    def raise_exception(message):
        raise TemplateRaised(to_str(message))

    def namespace(*args, **kwargs):
        attrs = dict(*args)
        attrs.update(kwargs)
        return Namespace(attrs)

    return {
        "range": range_, "dict": lambda *args, **kwargs: dict(*args, **kwargs),
        "namespace": namespace, "raise_exception": raise_exception,
        "strftime_now": lambda fmt: state.now.strftime(fmt),
    }


def render_body(body, context: dict, limits: Limits, now: datetime) -> str:
    state = RenderState({}, limits, now)
    base = state.scopes[0]
    base.update(make_globals(state))
    base.update(context)
    out: list[str] = []
    try:
        body(state, out)
    except (_BreakLoop, _ContinueLoop):
        pass
    except TemplateError:
        raise
    except _PYTHON_ERRORS as exc:
        raise TemplateRuntimeError(str(exc)) from None
    return "".join(out)
