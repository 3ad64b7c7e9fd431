"""Runtime values: Undefined, namespaces, loop state, and the sandboxed attribute access.

Templates see only JSON values (dict, list, str, int, float, bool, None) and the objects
defined here. Attribute and item access go through `get_attr` / `get_item`, which allow:

- keys of dicts, indexes and slices of lists and strings;
- a fixed set of non-mutating methods of str, dict and list (`SAFE_METHODS`);
- the public attributes of `Namespace`, `LoopContext` and `Undefined`.

Anything else (a name starting with `_`, `list.append`) raises `TemplateSecurityError`.

`Undefined` follows Jinja's default semantics: it prints as "", is false, iterates as
empty, has length 0 and equals only another Undefined; any other use (arithmetic,
comparison, attribute, item, call) raises `UndefinedValueError` naming what was missing.
"""

from __future__ import annotations

import string

from .errors import TemplateSecurityError, UndefinedValueError

SAFE_METHODS = {
    str: frozenset({
        "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
        "upper", "lower", "title", "capitalize", "casefold", "swapcase", "replace", "format",
        "count", "find", "rfind", "index", "rindex", "join", "partition", "rpartition",
        "removeprefix", "removesuffix", "isdigit", "isalpha", "isalnum", "isspace",
        "islower", "isupper", "isnumeric", "isdecimal", "istitle",
    }),
    dict: frozenset({"items", "keys", "values", "get"}),
    list: frozenset({"index", "count"}),
    tuple: frozenset({"index", "count"}),
}


def type_repr(obj: object) -> str:
    """How Jinja names an object's type in messages: 'dict object', 'None'."""
    if obj is None:
        return "None"
    return f"{type(obj).__name__} object"


class Undefined:
    """A missing name, attribute or item; remembers what was missing for its message."""

    __slots__ = ("_name", "_owner", "_has_owner", "_hint")

    def __init__(self, name: object = None, owner: object = None, has_owner: bool = False,
                 hint: str | None = None) -> None:
        self._name = name
        self._owner = owner
        self._has_owner = has_owner
        self._hint = hint

    @property
    def message(self) -> str:
        if self._hint is not None:
            return self._hint
        if not self._has_owner:
            return f"{self._name!r} is undefined"
        if not isinstance(self._name, str):
            return f"{type_repr(self._owner)} has no element {self._name!r}"
        return f"{type_repr(self._owner)!r} has no attribute {self._name!r}"

    def fail(self, *args: object, **kwargs: object):
        raise UndefinedValueError(self.message)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = fail
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = fail
    __pow__ = __rpow__ = __neg__ = __pos__ = __call__ = __getitem__ = fail
    __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = fail

    def __str__(self) -> str:
        return ""

    def __repr__(self) -> str:
        return "Undefined"

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return type(other) is Undefined

    def __ne__(self, other: object) -> bool:
        return type(other) is not Undefined

    def __hash__(self) -> int:
        return id(Undefined)


class Namespace:
    """`namespace(a=1)`: the one object a template may assign attributes to."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: dict) -> None:
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"<Namespace {self.attrs!r}>"


class LoopContext:
    """The `loop` variable of a for loop over an already-materialised list."""

    __slots__ = ("items", "index0", "length", "depth0")

    def __init__(self, items: list, depth0: int) -> None:
        self.items = items
        self.index0 = 0
        self.length = len(items)
        self.depth0 = depth0

    def attribute(self, name: str) -> object:
        getter = _LOOP_ATTRIBUTES.get(name)
        return getter(self) if getter is not None else Undefined(name, self, True)

    def cycle(self, *values: object) -> object:
        if not values:
            raise UndefinedValueError("no items for cycling given")
        return values[self.index0 % len(values)]


def _previtem(loop: LoopContext) -> object:
    return loop.items[loop.index0 - 1] if loop.index0 > 0 else Undefined("previtem", hint="there is no previous item")


def _nextitem(loop: LoopContext) -> object:
    i = loop.index0 + 1
    return loop.items[i] if i < loop.length else Undefined("nextitem", hint="there is no next item")


_LOOP_ATTRIBUTES = {
    "index": lambda loop: loop.index0 + 1,
    "index0": lambda loop: loop.index0,
    "revindex": lambda loop: loop.length - loop.index0,
    "revindex0": lambda loop: loop.length - loop.index0 - 1,
    "first": lambda loop: loop.index0 == 0,
    "last": lambda loop: loop.index0 == loop.length - 1,
    "length": lambda loop: loop.length,
    "depth": lambda loop: loop.depth0 + 1,
    "depth0": lambda loop: loop.depth0,
    "previtem": _previtem,
    "nextitem": _nextitem,
    "cycle": lambda loop: loop.cycle,
}


def _safe_format(template_str: str):
    """str.format that refuses attribute and index lookups inside fields ({0.__class__})."""
    def format_(*args: object, **kwargs: object) -> str:
        for _, field, _, _ in string.Formatter().parse(template_str):
            if field and ("." in field or "[" in field):
                raise TemplateSecurityError("str.format with attribute or item lookups is not allowed")
        return template_str.format(*args, **kwargs)
    return format_


def get_attr(obj: object, name: str) -> object:
    """`obj.name`: a safe method first (as Python would), then an item (Jinja's rule)."""
    if name.startswith("_"):
        raise TemplateSecurityError(f"access to attribute {name!r} of {type_repr(obj)!r} is unsafe")
    cls = type(obj)
    if cls is dict:
        if name in SAFE_METHODS[dict]:
            return getattr(obj, name)
        value = obj.get(name, _MISSING)
        return Undefined(name, obj, True) if value is _MISSING else value
    methods = SAFE_METHODS.get(cls)
    if methods is not None:
        if name in methods:
            return _safe_format(obj) if name == "format" else getattr(obj, name)
        if cls is list and name in _LIST_MUTATORS:
            raise TemplateSecurityError(f"access to attribute {name!r} of 'list' object is unsafe.")
        return Undefined(name, obj, True)
    if cls is Undefined:
        obj.fail()
    if cls is Namespace:
        value = obj.attrs.get(name, _MISSING)
        return Undefined(name, obj, True) if value is _MISSING else value
    if cls is LoopContext:
        return obj.attribute(name)
    return Undefined(name, obj, True)


def get_item(obj: object, key: object) -> object:
    """`obj[key]`: an item first, then (for a string key) a safe attribute."""
    cls = type(obj)
    if cls is Undefined:
        obj.fail()
    try:
        if cls is dict or cls is list or cls is str or cls is tuple or cls is range:
            return obj[key]
    except (KeyError, IndexError, TypeError):
        pass
    if isinstance(key, str):
        return get_attr(obj, key)
    return Undefined(key, obj, True)


_MISSING = object()
_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"})
