"""Statement parser: tokens -> a tuple of statement nodes (the template's body).

Statements are `{% tag ... %}` blocks; each block tag knows its closing tags. The parser
keeps a stack of open blocks so an error can say, as Jinja does, which tag it met, which
tags it was looking for and which block is still open:

    Encountered unknown tag 'endif'. Jinja was looking for the following tags:
    'endfor' or 'else'. The innermost block that needs to be closed is 'for'.

Supported tags: for/else/endfor (with `if` filter), if/elif/else/endif, set (plain,
tuple, `ns.attr`, block set with filters), macro/endmacro, filter/endfilter,
with/endwith, break, continue, generation/endgeneration (rendered transparently),
raw (handled by the lexer). Anything else is a syntax error at parse time.
"""

from __future__ import annotations

from . import nodes as n
from .exprparser import ExpressionParser
from .lexer import BLOCK_BEGIN, BLOCK_END, DATA, EOF, NAME, OP, VAR_BEGIN, VAR_END, Token

_LOOP_TAGS = ("break", "continue")


class Parser(ExpressionParser):
    def __init__(self, tokens: list[Token]) -> None:
        super().__init__(tokens)
        self.end_tag_stack: list[tuple[str, ...]] = []
        self.tag_stack: list[str] = []
        self.loop_depth = 0
        self.statements = {
            "for": self.parse_for, "if": self.parse_if, "set": self.parse_set,
            "macro": self.parse_macro, "filter": self.parse_filter_block, "with": self.parse_with,
            "break": self.parse_loop_control, "continue": self.parse_loop_control,
            "generation": self.parse_generation,
        }

    def parse(self) -> tuple:
        body = self.subparse(())
        return body

    def subparse(self, end_tags: tuple[str, ...]) -> tuple:
        """Parse until one of `end_tags` opens a block; the cursor is left on that name."""
        body: list[n.Node] = []
        output: list[n.Node] = []
        if end_tags:
            self.end_tag_stack.append(end_tags)
        try:
            while True:
                token = self.current
                if token.kind == DATA:
                    output.append(n.Const(token.lineno, self.next().value))
                elif token.kind == VAR_BEGIN:
                    self.next()
                    output.append(self.parse_tuple())
                    self.expect(VAR_END)
                elif token.kind == BLOCK_BEGIN:
                    self.next()
                    if end_tags and self.current.kind == NAME and self.current.value in end_tags:
                        break
                    self._flush(output, body)
                    body.append(self.parse_statement())
                elif token.kind == EOF:
                    if end_tags:
                        self.fail_unknown_tag(None, token)
                    break
                else:
                    raise self.fail(f"unexpected '{token.kind}'")
        finally:
            if end_tags:
                self.end_tag_stack.pop()
        self._flush(output, body)
        return tuple(body)

    @staticmethod
    def _flush(output: list, body: list) -> None:
        if output:
            body.append(n.Output(output[0].lineno, tuple(output)))
            output.clear()

    def parse_statement(self) -> n.Node:
        token = self.current
        if token.kind != NAME:
            raise self.fail("tag name expected")
        handler = self.statements.get(str(token.value))
        if handler is None:
            self.fail_unknown_tag(str(token.value), token)
        self.tag_stack.append(str(token.value))
        try:
            return handler()
        finally:
            self.tag_stack.pop()

    def fail_unknown_tag(self, name: str | None, token: Token) -> None:
        expected = {tag for tags in self.end_tag_stack for tag in tags}
        looking = " or ".join(repr(tag) for tag in self.end_tag_stack[-1]) if self.end_tag_stack else None
        parts = ["Unexpected end of template." if name is None else f"Encountered unknown tag {name!r}."]
        if looking:
            if name is not None and name in expected:
                parts.append("You probably made a nesting mistake. Jinja is expecting this tag,"
                             f" but currently looking for {looking}.")
            else:
                parts.append(f"Jinja was looking for the following tags: {looking}.")
        if self.tag_stack:
            parts.append(f"The innermost block that needs to be closed is {self.tag_stack[-1]!r}.")
        raise self.fail(" ".join(parts), token)

    def end_block(self) -> None:
        self.expect(BLOCK_END)

    def body_until(self, end_tag: str) -> tuple:
        """The statements of a block up to `{% end_tag %}`, which is consumed."""
        body = self.subparse((end_tag,))
        self.next()
        self.end_block()
        return body

    # ---- tags ----
    def parse_for(self) -> n.Node:
        lineno = self.expect(NAME, "for").lineno
        target = self.parse_assign_target(extra_end_names=("in",))
        self.expect(NAME, "in")
        iterable = self.parse_tuple(with_condexpr=False, extra_end_names=("recursive",))
        condition = self.parse_expression() if self.skip_name("if") else None
        if self.is_name("recursive"):
            raise self.fail("recursive loops are not supported")
        self.end_block()
        self.loop_depth += 1
        try:
            body = self.subparse(("endfor", "else"))
        finally:
            self.loop_depth -= 1
        else_body: tuple = ()
        if self.next().value == "else":
            self.end_block()
            else_body = self.subparse(("endfor",))
            self.next()
        self.end_block()
        return n.For(lineno, target, iterable, body, else_body, condition)

    def parse_if(self) -> n.Node:
        lineno = self.expect(NAME, "if").lineno
        test = self.parse_tuple(with_condexpr=False)
        self.end_block()
        body = self.subparse(("elif", "else", "endif"))
        tag = self.next()
        if tag.value == "elif":  # parse the rest of the chain as a nested `if`
            self.pos -= 1
            self.tokens[self.pos] = Token(NAME, "if", tag.lineno, tag.col)
            return n.If(lineno, test, body, (self.parse_if(),))
        else_body: tuple = ()
        if tag.value == "else":
            self.end_block()
            else_body = self.subparse(("endif",))
            self.next()
        self.end_block()
        return n.If(lineno, test, body, else_body)

    def parse_assign_target(self, *, extra_end_names: tuple = (), with_namespace: bool = False) -> n.Node:
        token = self.current
        if with_namespace and token.kind == NAME and self.look().kind == OP and self.look().value == ".":
            self.next()
            self.next()
            return n.NamespaceRef(token.lineno, str(token.value), self.expect_name())
        names = []
        while True:
            if names:
                self.expect(OP, ",")
            if names and self.current.kind == NAME and self.current.value in extra_end_names:
                break
            if self.is_op("(") or self.is_op(")"):
                raise self.fail("can't assign to parenthesized targets")
            name_token = self.current
            name = self.expect_name()
            if name in ("true", "false", "none", "True", "False", "None"):
                raise self.fail(f"can't assign to {name!r}", name_token)
            names.append(n.Name(name_token.lineno, name))
            if not self.is_op(","):
                break
        if len(names) == 1 and not self.is_op(","):
            return names[0]
        return n.TupleLit(token.lineno, tuple(names))

    def parse_set(self) -> n.Node:
        lineno = self.expect(NAME, "set").lineno
        target = self.parse_assign_target(with_namespace=True)
        if self.skip_op("="):
            value = self.parse_tuple()
            self.end_block()
            return n.Assign(lineno, target, value)
        filters = self._block_filters()
        self.end_block()
        body = self.body_until("endset")
        return n.AssignBlock(lineno, target, body, filters)

    def _block_filters(self, start_inline: bool = False) -> tuple:
        """`| f1 | f2(args)` after a block tag, as Filter nodes with value=None, in order."""
        chain = []
        node = self.parse_filter(None, start_inline) if self.is_op("|") or start_inline else None
        while node is not None:
            chain.append(n.Filter(node.lineno, None, node.name, node.args, node.kwargs))
            node = node.value
        return tuple(reversed(chain))

    def parse_macro(self) -> n.Node:
        lineno = self.expect(NAME, "macro").lineno
        name = self.expect_name()
        self.expect(OP, "(")
        params, defaults = [], []
        while not self.is_op(")"):
            if params:
                self.expect(OP, ",")
            params.append(self.expect_name())
            if self.skip_op("="):
                defaults.append(self.parse_expression())
            elif defaults:
                raise self.fail("non-default argument follows default argument")
        self.expect(OP, ")")
        self.end_block()
        body = self.body_until("endmacro")
        return n.Macro(lineno, name, tuple(params), tuple(defaults), body)

    def parse_filter_block(self) -> n.Node:
        lineno = self.expect(NAME, "filter").lineno
        filters = self._block_filters(start_inline=True)
        self.end_block()
        body = self.body_until("endfilter")
        return n.FilterBlock(lineno, body, filters)

    def parse_with(self) -> n.Node:
        lineno = self.expect(NAME, "with").lineno
        assigns = []
        while not self.current.kind == BLOCK_END:
            if assigns:
                self.expect(OP, ",")
            target = self.parse_assign_target()
            self.expect(OP, "=")
            assigns.append(n.Assign(target.lineno, target, self.parse_expression()))
        self.end_block()
        body = self.body_until("endwith")
        return n.Scope(lineno, tuple(assigns), body)

    def parse_loop_control(self) -> n.Node:
        token = self.next()
        if self.loop_depth == 0:
            raise self.fail(f"'{token.value}' outside of a loop", token)
        self.end_block()
        return n.Break(token.lineno) if token.value == "break" else n.Continue(token.lineno)

    def parse_generation(self) -> n.Node:
        lineno = self.expect(NAME, "generation").lineno
        self.end_block()
        body = self.body_until("endgeneration")
        return n.Scope(lineno, (), body)


def parse(tokens: list[Token]) -> tuple:
    """Parse a token list into the template body (a tuple of statement nodes)."""
    return Parser(tokens).parse()
