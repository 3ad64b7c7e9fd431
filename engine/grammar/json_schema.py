"""JSON Schema -> grammar expressions: what the output may be, written as JSON text.

Served keywords (anything else is `GrammarUnsupported`, naming the keyword and its path):
`type` (a name or a list), `properties`, `required`, `additionalProperties` (false, true or
a schema), `propertyNames` (enum/const; a pattern, format or lengths when no property is
declared), `enum`, `const`, `anyOf`, `oneOf` (as anyOf: the branches should not overlap),
`allOf` with one member, `items`, `prefixItems`, `minItems`, `maxItems`, `uniqueItems:
false`, `minLength`, `maxLength`, `pattern` (regex_subset.py; a search, as JSON Schema
says, unless anchored), `format` (strings.py: date, time, date-time, uuid, email, uri/url,
hostname, ipv4, ipv6; beside a pattern, both hold), `minimum`, `maximum`,
`exclusiveMinimum`, `exclusiveMaximum` (numbers.py: integers exactly, numbers with
fractions inside the bounds), `multipleOf` (integer steps), `$ref` to `#`,
`#/$defs/...`, `#/definitions/...` (recursion included), `nullable: true`, and the
annotations (title, description, default, ...).

The grammar writes a subset of what the schema allows, never more: properties in the
schema's order, no property that is not declared unless `additionalProperties` allows it
explicitly, bounded whitespace. Every sentence of the grammar validates.

Size: a sub-schema whose expression is used in more than one place (an array's item, an
object member's value, an extra property's value) is named once as a rule and called, never
copied, so the compiled size grows linearly with nesting (copies doubled it per level). A
schema nested deeper than MAX_SCHEMA_DEPTH is refused (`GrammarInvalid`, naming the path),
and the walk pays from the compile's `WorkBudget` (budget.py) per sub-schema, member, enum
value and digit, so its cost is bounded with the automaton's.
"""
from __future__ import annotations

import math

from engine.grammar import charset, expr as ex, jsontext as jt, regex_subset
from engine.grammar.budget import WorkBudget
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported
from engine.grammar.schema_dialect import (ANNOTATIONS, KEYWORDS, NUMBER_BOUNDS, PROPERTY_NAME_KEYWORDS, SERVED,
                                          TYPES, is_int, json_type)
from engine.grammar.numbers import Bound, NumberBuilder, bound_of, integer_bounds
from engine.grammar.strings import StringCompiler

MAX_SCHEMA_DEPTH = 32           # nested sub-schemas (a $ref, anyOf, items, a property: one each)
SHARED_NODES_ABOVE = 24         # a reused value expression larger than this becomes a called rule
SCHEMA_NODE_WORK = 50           # budget units per sub-schema compiled (its checks and expression)
MAX_BOUND_DIGITS = 30           # a lower bound above 10^30 (upper below -10^30) is refused: no JSON client needs it
MEMBER_WORK = 20                # budget units per object member, enum value, array position, name branch
_SEP = ex.seq(jt.WS, ex.lit(","), jt.WS)


class SchemaCompiler:
    """One schema document -> named rules; `value(schema, path)` is the expression of a value."""

    def __init__(self, root, budget: WorkBudget | None = None):
        self.root = root
        self.rules: dict[str, tuple] = {}
        self.budget = budget if budget is not None else WorkBudget()
        self.numbers = NumberBuilder(self.rules, self.budget)
        self.strings = StringCompiler(self.rules, self.budget)
        self._count = 0
        self._depth = 0                     # sub-schemas open on the current path

    def fresh(self, stem: str, e: tuple) -> tuple:
        self._count += 1
        name = f"{stem}#{self._count}"
        self.rules[name] = e
        return ex.ref(name)

    def shared(self, stem: str, e: tuple) -> tuple:
        """`e` for a place that uses it more than once: a call of one rule when it is large."""
        return e if e[0] == "n" or _size_at_most(e, SHARED_NODES_ABOVE) else self.fresh(stem, e)

    # -- dispatch
    def value(self, s, path: str) -> tuple:
        """The expression of one sub-schema, one level deeper than its parent."""
        if self._depth >= MAX_SCHEMA_DEPTH:
            raise GrammarInvalid(f"the schema at {path} is nested deeper than the limit of "
                                 f"{MAX_SCHEMA_DEPTH} levels (MAX_SCHEMA_DEPTH)", path=path)
        self._depth += 1
        self.budget.spend(SCHEMA_NODE_WORK)
        try:
            return self._value(s, path)
        finally:
            self._depth -= 1

    def _value(self, s, path: str) -> tuple:
        if s is True or s == {}:
            return self.any_value()
        if s is False:
            raise GrammarInvalid(f"the schema at {path} is false: no value can satisfy it", path=path)
        if not isinstance(s, dict):
            raise GrammarInvalid(f"the schema at {path} must be an object or a boolean", path=path)
        for key in s:
            if key not in SERVED and not (key == "uniqueItems" and s[key] is False):
                raise GrammarUnsupported(f"the JSON Schema keyword '{key}' at {path} is not supported",
                                         path=f"{path}.{key}", keyword=key)
        if s.get("nullable") is True:
            rest = {k: v for k, v in s.items() if k != "nullable"}
            return ex.alt(self._value(rest, path), ex.lit("null"))     # the same level
        if "$ref" in s:
            return self.reference(s["$ref"], f"{path}.$ref")
        if "allOf" in s:
            members = s["allOf"]
            if not isinstance(members, list) or len(members) != 1:
                raise GrammarUnsupported(f"'allOf' at {path} is supported with one member only",
                                         path=f"{path}.allOf", keyword="allOf")
            return self.value(members[0], f"{path}.allOf[0]")
        if "const" in s:
            return jt.literal(s["const"])
        if "enum" in s:
            return self.enum(s, path)
        for key in ("anyOf", "oneOf"):
            if key in s:
                subs = s[key]
                if not isinstance(subs, list) or not subs:
                    raise GrammarInvalid(f"'{key}' at {path} must be a non-empty list", path=path, keyword=key)
                return ex.alt(*(self.value(sub, f"{path}.{key}[{i}]") for i, sub in enumerate(subs)))
        return ex.alt(*(self.typed(t, s, path) for t in self.types(s, path)))

    def types(self, s: dict, path: str) -> list[str]:
        t = s.get("type")
        if t is None:
            implied = [name for name in ("object", "array", "string", "number")
                       if KEYWORDS[name] & s.keys()]
            return implied or list(TYPES)
        names = t if isinstance(t, list) else [t]
        if not names or any(n not in TYPES for n in names):
            raise GrammarInvalid(f"'type' at {path} must be one of {', '.join(TYPES)} or a list of them",
                                 path=f"{path}.type", keyword="type")
        return names

    def typed(self, t: str, s: dict, path: str) -> tuple:
        if t == "object":
            return self.object(s, path)
        if t == "array":
            return self.array(s, path)
        if t == "string":
            return self.string(s, path)
        if t in ("integer", "number"):
            return self.number(s, path, integer=t == "integer")
        return ex.lit("null") if t == "null" else ex.alt(ex.lit("true"), ex.lit("false"))

    def enum(self, s: dict, path: str) -> tuple:
        values = s["enum"]
        if not isinstance(values, list) or not values:
            raise GrammarInvalid(f"'enum' at {path} must be a non-empty list", path=f"{path}.enum", keyword="enum")
        if "type" in s:
            allowed = set(self.types(s, path))
            values = [v for v in values if json_type(v) in allowed
                      or (json_type(v) == "integer" and "number" in allowed)]
            if not values:
                raise GrammarInvalid(f"no 'enum' value at {path} has the schema's type", path=path, keyword="enum")
        self.budget.spend(MEMBER_WORK * len(values))
        return ex.alt(*(jt.literal(v) for v in values))

    def reference(self, target, path: str) -> tuple:
        if not isinstance(target, str) or not target.startswith("#"):
            raise GrammarUnsupported(f"only local references ('#...') are supported at {path}",
                                     path=path, keyword="$ref")
        if target not in self.rules:
            node = self.root
            for part in [p for p in target[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise GrammarInvalid(f"'$ref' {target!r} at {path} does not resolve", path=path, keyword="$ref")
                node = node[part]
            self.rules[target] = ex.EMPTY                      # placeholder: recursion finds the name
            self.rules[target] = self.value(node, target)
        return ex.ref(target)

    def any_value(self) -> tuple:
        if "any" not in self.rules:
            self.rules["any"] = ex.EMPTY
            member = ex.seq(jt.string(), jt.WS, ex.lit(":"), jt.WS, ex.ref("any"))
            obj = ex.seq(ex.lit("{"), jt.WS, ex.opt(ex.seq(member, ex.star(ex.seq(_SEP, member)))), jt.WS, ex.lit("}"))
            arr = ex.seq(ex.lit("["), jt.WS, ex.opt(ex.seq(ex.ref("any"), ex.star(ex.seq(_SEP, ex.ref("any"))))),
                         jt.WS, ex.lit("]"))
            self.rules["any"] = ex.alt(obj, arr, jt.string(), jt.NUMBER, ex.lit("true"), ex.lit("false"),
                                       ex.lit("null"))
        return ex.ref("any")

    # -- objects
    def object(self, s: dict, path: str) -> tuple:
        props = s.get("properties", {})
        required = s.get("required", [])
        if not isinstance(props, dict):
            raise GrammarInvalid(f"'properties' at {path} must be an object", path=f"{path}.properties")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarInvalid(f"'required' at {path} must be a list of strings", path=f"{path}.required")
        extra = s.get("additionalProperties", False if props or required else True)
        if not isinstance(extra, (bool, dict)):
            raise GrammarInvalid(f"'additionalProperties' at {path} must be a boolean or a schema",
                                 path=f"{path}.additionalProperties")
        names = list(props) + [r for r in required if r not in props]
        for r in required:
            if r not in props and extra is False:
                raise GrammarInvalid(f"required property {r!r} at {path} is not allowed by the schema",
                                     path=f"{path}.required")
        members = []
        self.budget.spend(MEMBER_WORK * len(names))
        for name in names:
            sub = props[name] if name in props else extra
            sub_value = self.shared("obj.value", self.value(sub, f"{path}.properties.{name}"))
            members.append((name in required, ex.seq(jt.literal(name), jt.WS, ex.lit(":"), jt.WS, sub_value)))
        tail = None
        key = self.extra_key(s.get("propertyNames", True), names, path) if extra is not False else None
        if key is not None:
            tail = ex.seq(key, jt.WS, ex.lit(":"), jt.WS,
                          self.shared("obj.extra", self.value(extra, f"{path}.additionalProperties")))
        body = self._ordered_members(members, tail)
        return ex.seq(ex.lit("{"), jt.WS, body, jt.WS, ex.lit("}"))

    def _ordered_members(self, members: list[tuple[bool, tuple]], tail) -> tuple:
        """Members in order, optional ones may be skipped, commas only between written ones."""
        after = ex.star(ex.seq(_SEP, tail)) if tail is not None else ex.EMPTY   # something written
        first = ex.opt(ex.seq(tail, after)) if tail is not None else ex.EMPTY    # nothing yet
        for is_required, member in reversed(members):
            after_ref = self.fresh("obj.after", after)
            first_ref = self.fresh("obj.first", first)
            with_sep = ex.seq(_SEP, member, after_ref)
            after = with_sep if is_required else ex.alt(with_sep, after_ref)
            took = ex.seq(member, after_ref)
            first = took if is_required else ex.alt(took, first_ref)
        return first

    def key_not_in(self, names: list[str], path: str) -> tuple:
        """A JSON string key that is none of `names` (so an extra member cannot shadow one)."""
        plain = charset.minus(charset.ANY, charset.union(charset.chars('"\\/'), ((0, 0x1F),)))
        for n in names:
            if any(not charset.contains(plain, ord(c)) for c in n):
                raise GrammarUnsupported(f"property name {n!r} at {path} cannot be combined with "
                                         "additionalProperties", path=path, keyword="additionalProperties")
        rest = ex.star(jt.json_chars(charset.minus(charset.ANY, charset.chars("/"))))
        return ex.seq(ex.lit('"'), self._not_in(names, "", rest), ex.lit('"'))

    def extra_key(self, names_schema, declared: list[str], path: str) -> tuple | None:
        """The key of an extra member: a name `propertyNames` allows that is none of `declared`
        (None: no extra member can be written)."""
        where = f"{path}.propertyNames"
        if names_schema is False:
            return None
        if names_schema is True or not (set(names_schema) - {"type"} - ANNOTATIONS):
            if names_schema is not True and names_schema.get("type", "string") != "string":
                raise GrammarInvalid(f"'propertyNames' at {path} must describe strings", path=where)
            return self.key_not_in(declared, path)
        if not isinstance(names_schema, dict):
            raise GrammarInvalid(f"'propertyNames' at {path} must be a schema", path=where)
        for key in set(names_schema) - PROPERTY_NAME_KEYWORDS - ANNOTATIONS:
            raise GrammarUnsupported(f"the keyword '{key}' in 'propertyNames' at {path} is not supported",
                                     path=f"{where}.{key}", keyword=key)
        if "enum" in names_schema or "const" in names_schema:
            allowed = names_schema["enum"] if "enum" in names_schema else [names_schema["const"]]
            if not isinstance(allowed, list) or any(not isinstance(n, str) for n in allowed):
                raise GrammarInvalid(f"'propertyNames' at {path} must list strings", path=where)
            if any(n not in allowed for n in declared):
                raise GrammarUnsupported(f"a declared property at {path} is not among its 'propertyNames'",
                                         path=where, keyword="propertyNames")
            self.budget.spend(MEMBER_WORK * len(allowed))
            extra = [n for n in allowed if n not in declared]
            return ex.alt(*(jt.literal(n) for n in extra)) if extra else None
        if declared:
            raise GrammarUnsupported(f"'propertyNames' with a pattern or format at {path} is served for objects "
                                     "without declared properties", path=where, keyword="propertyNames")
        return self.strings.string(names_schema, where, self._count_bounds(names_schema, "minLength", "maxLength",
                                                                          where))

    def _not_in(self, names: list[str], prefix: str, rest: tuple) -> tuple:
        self.budget.spend(MEMBER_WORK)
        live = [n for n in names if n.startswith(prefix)]
        if not live:
            return rest
        nexts = sorted({n[len(prefix)] for n in live if len(n) > len(prefix)})
        parts = [] if prefix in names else [ex.EMPTY]
        other = charset.minus(charset.ANY, charset.chars("".join(nexts) + "/"))
        parts.append(ex.seq(jt.json_chars(other), rest))
        parts.extend(ex.seq(ex.lit(c), self._not_in(names, prefix + c, rest)) for c in nexts)
        return ex.alt(*parts)

    # -- arrays
    def array(self, s: dict, path: str) -> tuple:
        prefix = s.get("prefixItems", [])
        items = s.get("items", True)
        if not isinstance(prefix, list):
            raise GrammarInvalid(f"'prefixItems' at {path} must be a list", path=f"{path}.prefixItems")
        lo, hi = self._count_bounds(s, "minItems", "maxItems", path)
        hi = None if hi is None else min(hi, regex_subset.MAX_REPEAT)     # more is allowed, fewer written
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and lo > hi:
            raise GrammarInvalid(f"no array at {path} can satisfy its item bounds", path=path)
        elems = [self.value(p, f"{path}.prefixItems[{i}]") for i, p in enumerate(prefix)]
        item = None if items is False else self.shared("array.item", self.value(items, f"{path}.items"))
        lead = elems or ([item] if item is not None else [])     # the elements written one by one
        written = len(lead) if hi is None else min(len(lead), hi)
        self.budget.spend(MEMBER_WORK * (written + 1))
        body = ex.EMPTY                                             # what follows the last lead element
        if item is not None and (hi is None or hi > len(lead)):    # the rest: a repeat, not a nesting
            body = ex.rep(ex.seq(_SEP, item), max(lo - len(lead), 0), None if hi is None else hi - len(lead))
        for i in reversed(range(1, written)):
            step = ex.seq(_SEP, lead[i], body)
            body = step if i < lo else ex.alt(step, ex.EMPTY)
        content = ex.EMPTY if written == 0 else ex.seq(lead[0], body)
        if lo == 0 and written > 0:
            content = ex.alt(content, ex.EMPTY)
        return ex.seq(ex.lit("["), jt.WS, content, jt.WS, ex.lit("]"))

    @staticmethod
    def _count_bounds(s: dict, lo_key: str, hi_key: str, path: str) -> tuple[int, int | None]:
        lo, hi = s.get(lo_key, 0), s.get(hi_key)
        for key, v in ((lo_key, lo), (hi_key, hi)):
            if v is not None and (not is_int(v) or v < 0):
                raise GrammarInvalid(f"'{key}' at {path} must be a non-negative integer",
                                     path=f"{path}.{key}", keyword=key)
        if lo > regex_subset.MAX_REPEAT:
            raise GrammarUnsupported(f"'{lo_key}' at {path} above {regex_subset.MAX_REPEAT}",
                                     path=f"{path}.{lo_key}", keyword=lo_key)
        return lo, hi

    # -- scalars
    def string(self, s: dict, path: str) -> tuple:
        lengths = self._count_bounds(s, "minLength", "maxLength", path)
        if lengths[1] is not None and lengths[0] > lengths[1]:
            raise GrammarInvalid(f"minLength > maxLength at {path}", path=path, keyword="minLength")
        return self.strings.string(s, path, lengths)

    def number(self, s: dict, path: str, *, integer: bool) -> tuple:
        for k in NUMBER_BOUNDS + ("multipleOf",):
            v = s.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise GrammarInvalid(f"'{k}' at {path} must be a number", path=f"{path}.{k}", keyword=k)
        step = s.get("multipleOf")
        if not any(k in s for k in NUMBER_BOUNDS) and step is None:
            return jt.INTEGER if integer else jt.NUMBER
        lo = _tighter([bound_of(s[k], k.startswith("exclusive")) for k in ("minimum", "exclusiveMinimum") if k in s],
                      lower=True)
        hi = _tighter([bound_of(s[k], k.startswith("exclusive")) for k in ("maximum", "exclusiveMaximum") if k in s],
                      lower=False)
        lo_i, hi_i = integer_bounds(lo, hi)
        if (lo_i is not None and lo_i >= 10 ** MAX_BOUND_DIGITS) or (hi_i is not None and hi_i <= -10 ** MAX_BOUND_DIGITS):
            raise GrammarUnsupported(f"bounds at {path} that exclude every number of up to {MAX_BOUND_DIGITS} digits "
                                     "are not supported", path=path, keyword="minimum" if lo_i else "maximum")
        if step is not None:
            if step <= 0:
                raise GrammarInvalid(f"'multipleOf' at {path} must be above 0", path=f"{path}.multipleOf",
                                     keyword="multipleOf")
            if step != int(step):
                raise GrammarUnsupported(f"a fractional 'multipleOf' at {path} is not supported (integer steps are)",
                                         path=f"{path}.multipleOf", keyword="multipleOf")
            e = self.numbers.multiples(int(step), lo_i, hi_i)
        elif integer:
            e = self.numbers.int_range(lo_i, hi_i)
        else:
            e = self.numbers.decimal_range(lo, hi)
        if e is None:
            raise GrammarInvalid(f"no {'integer' if integer or step else 'number'} lies within the bounds at {path}",
                                 path=path, keyword="minimum" if "minimum" in s else "exclusiveMinimum")
        return e


def _tighter(bounds: list[Bound], *, lower: bool) -> Bound | None:
    """The tighter of a schema's inclusive and exclusive bound on one side (exclusive on a tie)."""
    if not bounds:
        return None
    return max(bounds, key=lambda b: (b.value if lower else -b.value, b.strict))


def _size_at_most(e: tuple, limit: int) -> bool:
    """The expression has at most `limit` nodes (counting stops there: O(limit))."""
    todo, count = [e], 0
    while todo:
        node = todo.pop()
        count += 1
        if count > limit:
            return False
        if node[0] == "s" or node[0] == "a":
            todo.extend(node[1])
        elif node[0] == "r":
            todo.append(node[1])
    return True
