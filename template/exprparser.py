"""Recursive-descent parser for template expressions (the inside of {{ }} and {% %}).

Precedence, loosest first (Jinja's grammar):

    a if b else c
    or
    and
    not
    == != < <= > >= in / not in        (chains like Python)
    + -
    ~                                   (string concatenation)
    * / // %
    **
    unary - +
    primary, then postfix .name [key] [a:b:c] (call), then | filter and `is` test

Filters and tests bind tighter than any binary operator: `a + b | trim` is `a + trim(b)`.
Unknown filter and test names are refused here, at parse time.
"""

from __future__ import annotations

from . import nodes as n
from .builtins import FILTERS, TESTS
from .lexer import BLOCK_END, EOF, FLOAT, INT, NAME, OP, STRING, VAR_END, Token
from .tokencursor import TokenCursor, describe

_CONSTANT_NAMES = {"true": True, "True": True, "false": False, "False": False, "none": None, "None": None}
_COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
_MUL_OPS = ("*", "/", "//", "%")
_TEST_ARG_START = (NAME, STRING, INT, FLOAT)
# Python's recursion limit is ~1000 frames; one nesting level costs ~15 parser frames.
MAX_EXPRESSION_DEPTH = 40


class ExpressionParser(TokenCursor):
    """The expression grammar over a token cursor; the statement parser extends it."""

    # ---- grammar ----
    def parse_expression(self, with_condexpr: bool = True) -> n.Node:
        self.depth += 1
        if self.depth > MAX_EXPRESSION_DEPTH:
            raise self.fail(f"expression nested deeper than {MAX_EXPRESSION_DEPTH} levels")
        try:
            return self.parse_condexpr() if with_condexpr else self.parse_or()
        finally:
            self.depth -= 1

    def parse_condexpr(self) -> n.Node:
        lineno = self.current.lineno
        expr = self.parse_or()
        while self.skip_name("if"):
            test = self.parse_or()
            otherwise = self.parse_condexpr() if self.skip_name("else") else None
            expr = n.CondExpr(lineno, test, expr, otherwise)
        return expr

    def parse_or(self) -> n.Node:
        left = self.parse_and()
        while self.is_name("or"):
            lineno = self.next().lineno
            left = n.Or(lineno, left, self.parse_and())
        return left

    def parse_and(self) -> n.Node:
        left = self.parse_not()
        while self.is_name("and"):
            lineno = self.next().lineno
            left = n.And(lineno, left, self.parse_not())
        return left

    def parse_not(self) -> n.Node:
        if self.is_name("not"):
            lineno = self.next().lineno
            return n.UnaryOp(lineno, "not", self.parse_not())
        return self.parse_compare()

    def parse_compare(self) -> n.Node:
        lineno = self.current.lineno
        first = self.parse_math1()
        ops = []
        while True:
            token = self.current
            if token.kind == OP and token.value in _COMPARE_OPS:
                self.next()
                ops.append((token.value, self.parse_math1()))
            elif self.skip_name("in"):
                ops.append(("in", self.parse_math1()))
            elif self.is_name("not") and self.look().kind == NAME and self.look().value == "in":
                self.pos += 2
                ops.append(("notin", self.parse_math1()))
            else:
                break
        return n.Compare(lineno, first, tuple(ops)) if ops else first

    def parse_math1(self) -> n.Node:
        left = self.parse_concat()
        while self.current.kind == OP and self.current.value in ("+", "-"):
            token = self.next()
            left = n.BinOp(token.lineno, str(token.value), left, self.parse_concat())
        return left

    def parse_concat(self) -> n.Node:
        lineno = self.current.lineno
        items = [self.parse_math2()]
        while self.skip_op("~"):
            items.append(self.parse_math2())
        return items[0] if len(items) == 1 else n.Concat(lineno, tuple(items))

    def parse_math2(self) -> n.Node:
        left = self.parse_pow()
        while self.current.kind == OP and self.current.value in _MUL_OPS:
            token = self.next()
            left = n.BinOp(token.lineno, str(token.value), left, self.parse_pow())
        return left

    def parse_pow(self) -> n.Node:
        left = self.parse_unary()
        while self.is_op("**"):
            lineno = self.next().lineno
            left = n.BinOp(lineno, "**", left, self.parse_unary())
        return left

    def parse_unary(self, with_filter: bool = True) -> n.Node:
        token = self.current
        if token.kind == OP and token.value in ("-", "+"):
            self.next()
            node: n.Node = n.UnaryOp(token.lineno, str(token.value), self.parse_unary(False))
        else:
            node = self.parse_postfix(self.parse_primary())
        return self.parse_filter_expr(node) if with_filter else node

    def parse_primary(self) -> n.Node:
        token = self.current
        if token.kind == NAME:
            self.next()
            if token.value in _CONSTANT_NAMES:
                return n.Const(token.lineno, _CONSTANT_NAMES[token.value])
            return n.Name(token.lineno, str(token.value))
        if token.kind == STRING:
            self.next()
            parts = [str(token.value)]
            while self.current.kind == STRING:  # adjacent literals concatenate
                parts.append(str(self.next().value))
            return n.Const(token.lineno, "".join(parts))
        if token.kind in (INT, FLOAT):
            self.next()
            return n.Const(token.lineno, token.value)
        if token.kind == OP and token.value == "(":
            self.next()
            self.depth += 1
            try:
                node = self.parse_tuple(explicit_parentheses=True)
            finally:
                self.depth -= 1
            self.expect(OP, ")")
            return node
        if token.kind == OP and token.value == "[":
            return self.parse_list()
        if token.kind == OP and token.value == "{":
            return self.parse_dict()
        if token.kind == EOF:
            raise self.fail("unexpected end of template")
        raise self.fail(f"unexpected '{describe(token)}'")

    def parse_tuple(self, *, with_condexpr: bool = True, explicit_parentheses: bool = False,
                    extra_end_names: tuple = ()) -> n.Node:
        """A comma list; one item without a comma is just that item."""
        lineno = self.current.lineno
        items: list[n.Node] = []
        is_tuple = False
        while True:
            if items:
                self.expect(OP, ",")
            if self._is_tuple_end(extra_end_names):
                break
            items.append(self.parse_expression(with_condexpr))
            if self.is_op(","):
                is_tuple = True
            else:
                break
        if not is_tuple:
            if items:
                return items[0]
            if not explicit_parentheses:
                raise self.fail(f"Expected an expression, got '{describe(self.current)}'")
        return n.TupleLit(lineno, tuple(items))

    def _is_tuple_end(self, extra_end_names: tuple) -> bool:
        token = self.current
        if token.kind in (VAR_END, BLOCK_END, EOF):
            return True
        if token.kind == OP and token.value == ")":
            return True
        return token.kind == NAME and token.value in extra_end_names

    def parse_list(self) -> n.Node:
        lineno = self.expect(OP, "[").lineno
        items = []
        while not self.is_op("]"):
            if items:
                self.expect(OP, ",")
            if self.is_op("]"):
                break
            items.append(self.parse_expression())
        self.expect(OP, "]")
        return n.ListLit(lineno, tuple(items))

    def parse_dict(self) -> n.Node:
        lineno = self.expect(OP, "{").lineno
        pairs = []
        while not self.is_op("}"):
            if pairs:
                self.expect(OP, ",")
            if self.is_op("}"):
                break
            key = self.parse_expression()
            self.expect(OP, ":")
            pairs.append((key, self.parse_expression()))
        self.expect(OP, "}")
        return n.DictLit(lineno, tuple(pairs))

    def parse_postfix(self, node: n.Node) -> n.Node:
        while True:
            if self.is_op(".") or self.is_op("["):
                node = self.parse_subscript(node)
            elif self.is_op("("):
                node = self.parse_call(node)
            else:
                return node

    def parse_filter_expr(self, node: n.Node) -> n.Node:
        while True:
            if self.is_op("|"):
                node = self.parse_filter(node)
            elif self.is_name("is"):
                node = self.parse_test(node)
            elif self.is_op("("):
                node = self.parse_call(node)
            else:
                return node

    def parse_subscript(self, node: n.Node) -> n.Node:
        token = self.next()
        if token.value == ".":
            attr = self.next()
            if attr.kind == NAME:
                return n.GetAttr(token.lineno, node, str(attr.value))
            if attr.kind == INT:
                return n.GetItem(token.lineno, node, n.Const(attr.lineno, attr.value))
            raise self.fail("expected name or number", attr)
        args = []
        while not self.is_op("]"):
            if args:
                self.expect(OP, ",")
            args.append(self.parse_subscribed())
        self.expect(OP, "]")
        key = args[0] if len(args) == 1 else n.TupleLit(token.lineno, tuple(args))
        return n.GetItem(token.lineno, node, key)

    def parse_subscribed(self) -> n.Node:
        lineno = self.current.lineno
        if self.is_op(":"):
            self.next()
            parts: list = [None]
        else:
            expr = self.parse_expression()
            if not self.skip_op(":"):
                return expr
            parts = [expr]
        parts.append(None if self.is_op(":") or self.is_op("]") or self.is_op(",") else self.parse_expression())
        if self.skip_op(":"):
            parts.append(None if self.is_op("]") or self.is_op(",") else self.parse_expression())
        else:
            parts.append(None)
        return n.Slice(lineno, parts[0], parts[1], parts[2])

    def parse_call_args(self) -> tuple:
        self.expect(OP, "(")
        args, kwargs, star_args, star_kwargs = [], [], None, None
        while not self.is_op(")"):
            if args or kwargs or star_args or star_kwargs:
                self.expect(OP, ",")
                if self.is_op(")"):
                    break
            if self.skip_op("*"):
                star_args = self.parse_expression()
            elif self.skip_op("**"):
                star_kwargs = self.parse_expression()
            elif self.current.kind == NAME and self.look().kind == OP and self.look().value == "=":
                key = self.expect_name()
                self.next()
                kwargs.append((key, self.parse_expression()))
            else:
                if kwargs:
                    raise self.fail("positional argument after keyword argument")
                args.append(self.parse_expression())
        self.expect(OP, ")")
        return tuple(args), tuple(kwargs), star_args, star_kwargs

    def parse_call(self, node: n.Node) -> n.Node:
        lineno = self.current.lineno
        args, kwargs, star_args, star_kwargs = self.parse_call_args()
        return n.Call(lineno, node, args, kwargs, star_args, star_kwargs)

    def parse_filter(self, node: n.Node | None, start_inline: bool = False) -> n.Node:
        while self.is_op("|") or start_inline:
            if not start_inline:
                self.next()
            start_inline = False
            token = self.current
            name = self.expect_name()
            while self.skip_op("."):
                name += "." + self.expect_name()
            if name not in FILTERS:
                raise self.fail(f"No filter named '{name}'.", token)
            args, kwargs = (), ()
            if self.is_op("("):
                args, kwargs, _, _ = self.parse_call_args()
            node = n.Filter(token.lineno, node, name, args, kwargs)
        return node

    def parse_test(self, node: n.Node) -> n.Node:
        lineno = self.expect(NAME, "is").lineno
        negated = self.skip_name("not")
        token = self.current
        name = self.expect_name()
        while self.skip_op("."):
            name += "." + self.expect_name()
        if name not in TESTS:
            raise self.fail(f"No test named '{name}'.", token)
        args, kwargs = (), ()
        current = self.current
        if self.is_op("("):
            args, kwargs, _, _ = self.parse_call_args()
        elif (current.kind in _TEST_ARG_START or (current.kind == OP and current.value in "([{")) and not (
                current.kind == NAME and current.value in ("else", "or", "and")):
            if current.kind == NAME and current.value == "is":
                raise self.fail("You cannot chain multiple tests with is")
            args = (self.parse_postfix(self.parse_primary()),)
        return n.Test(lineno, node, name, args, kwargs, negated)
