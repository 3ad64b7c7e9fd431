"""The filter and test tables (`FILTERS`, `TESTS`): the names real chat templates use.

A filter is `value | name(args)` and calls `FILTERS[name](value, *args, **kwargs)`; a test is
`value is name(args)` and calls `TESTS[name](value, *args)`. Both tables are consulted at
parse time, so an unknown name is a syntax error when the model loads.

Semantics follow Jinja's built-ins, with one deliberate exception copied from Hugging Face:
`tojson` is `json.dumps(value, ensure_ascii=False, indent=..., separators=...,
sort_keys=...)`, with no HTML escaping and no ASCII escaping.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from .errors import TemplateRuntimeError
from .runtime import Undefined, get_attr, get_item

_WORD_BEGINNING_RE = re.compile(r"([-\s({\[<]+)")
_WORD_RE = re.compile(r"\w+", re.UNICODE)


def to_str(value: object) -> str:
    return value if type(value) is str else str(value)


def _attribute_getter(attribute: object):
    """`attribute="a.b"` or an integer index, as Jinja's make_attrgetter."""
    if attribute is None:
        return lambda item: item
    parts = [int(p) if p.isdigit() else p for p in attribute.split(".")] if isinstance(attribute, str) else [attribute]

    def getter(item: object) -> object:
        for part in parts:
            item = get_item(item, part)
        return item
    return getter


def _sort_key(case_sensitive: bool, getter):
    def key(item: object) -> object:
        value = getter(item)
        return value.lower() if not case_sensitive and isinstance(value, str) else value
    return key


def f_tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False) -> str:
    if isinstance(separators, list):
        separators = tuple(separators)
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise TemplateRuntimeError(str(exc)) from None


def _json_default(value: object) -> object:
    if isinstance(value, (range, tuple)):
        return list(value)
    if isinstance(value, Undefined):
        value.fail()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def f_default(value, default_value="", boolean=False):
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


def f_title(value) -> str:
    return "".join(item[0].upper() + item[1:].lower()
                   for item in _WORD_BEGINNING_RE.split(to_str(value)) if item)


def f_join(value, d="", attribute=None) -> str:
    getter = _attribute_getter(attribute)
    return to_str(d).join(to_str(getter(item)) for item in value)


def f_first(value):
    for item in value:
        return item
    return Undefined("first", hint="No first item, sequence was empty.")


def f_last(value):
    items = list(value)
    return items[-1] if items else Undefined("last", hint="No last item, sequence was empty.")


def f_int(value, default=0, base=10):
    try:
        if isinstance(value, str):
            return int(value, base)
        return int(value)
    except (TypeError, ValueError, OverflowError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def f_float(value, default=0.0):
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def f_replace(value, old, new, count=None) -> str:
    return to_str(value).replace(to_str(old), to_str(new), -1 if count is None else count)


def f_items(value):
    if isinstance(value, Undefined):
        return iter(())
    if not isinstance(value, Mapping):
        raise TemplateRuntimeError("Can only get item pairs from a mapping.")
    return iter(list(value.items()))


def f_dictsort(value, case_sensitive=False, by="key", reverse=False):
    pos = {"key": 0, "value": 1}.get(by)
    if pos is None:
        raise TemplateRuntimeError('You can only sort by either "key" or "value"')
    return sorted(value.items(), key=_sort_key(case_sensitive, lambda item: item[pos]), reverse=reverse)


def f_unique(value, case_sensitive=False, attribute=None):
    key = _sort_key(case_sensitive, _attribute_getter(attribute))
    seen, result = [], []
    for item in value:
        k = key(item)
        if k not in seen:
            seen.append(k)
            result.append(item)
    return result


def f_reverse(value):
    if isinstance(value, str):
        return value[::-1]
    return list(reversed(list(value)))


def f_sort(value, reverse=False, case_sensitive=False, attribute=None):
    return sorted(value, key=_sort_key(case_sensitive, _attribute_getter(attribute)), reverse=reverse)


def f_round(value, precision=0, method="common"):
    if method == "common":
        return round(value, precision)
    func = {"ceil": math.ceil, "floor": math.floor}.get(method)
    if func is None:
        raise TemplateRuntimeError("method must be common, ceil or floor")
    return func(value * (10 ** precision)) / (10 ** precision)


def f_sum(value, attribute=None, start=0):
    getter = _attribute_getter(attribute)
    return sum((getter(item) for item in value), start)


def _min_max(func):
    def filter_(value, case_sensitive=False, attribute=None):
        items = list(value)
        if not items:
            return Undefined(func.__name__, hint="No aggregated item, sequence was empty.")
        return func(items, key=_sort_key(case_sensitive, _attribute_getter(attribute)))
    return filter_


def f_indent(value, width=4, first=False, blank=False) -> str:
    indention = width if isinstance(width, str) else " " * width
    text = to_str(value)
    newline = "\n"
    lines = text.split(newline)
    rest = [line if (not blank and not line.strip()) else indention + line for line in lines[1:]]
    head = indention + lines[0] if first else lines[0]
    return newline.join([head] + rest)


def f_batch(value, linecount, fill_with=None):
    result, batch = [], []
    for item in value:
        if len(batch) == linecount:
            result.append(batch)
            batch = []
        batch.append(item)
    if batch:
        if fill_with is not None and len(batch) < linecount:
            batch += [fill_with] * (linecount - len(batch))
        result.append(batch)
    return result


def _select(value, args, kwargs, *, by_attribute: bool, keep: bool):
    """select/reject/selectattr/rejectattr: filter items by a test (truthiness by default)."""
    args = list(args)
    getter = _attribute_getter(args.pop(0)) if by_attribute else (lambda item: item)
    if args:
        name = args.pop(0)
        test = TESTS.get(name)
        if test is None:
            raise TemplateRuntimeError(f"No test named {name!r}.")
        check = lambda item: test(getter(item), *args, **kwargs)
    else:
        check = lambda item: bool(getter(item))
    return [item for item in value if bool(check(item)) == keep]


def f_map(value, *args, **kwargs):
    if "attribute" in kwargs:
        getter = _attribute_getter(kwargs.pop("attribute"))
        default = kwargs.pop("default", _NO_DEFAULT)
        if default is _NO_DEFAULT:
            return [getter(item) for item in value]
        return [default if isinstance(v, Undefined) else v for v in (getter(item) for item in value)]
    if not args:
        return list(value)
    name, rest = args[0], args[1:]
    func = FILTERS.get(name)
    if func is None:
        raise TemplateRuntimeError(f"No filter named {name!r}.")
    return [func(item, *rest, **kwargs) for item in value]


_NO_DEFAULT = object()


def f_attr(value, name):
    return get_attr(value, name)


def f_center(value, width=80) -> str:
    return to_str(value).center(min(int(width), 10_000))


def f_format(value, *args, **kwargs) -> str:
    if args and kwargs:
        raise TemplateRuntimeError("can't handle positional and keyword arguments at the same time")
    return to_str(value) % (kwargs or args)


def f_wordcount(value) -> int:
    return len(_WORD_RE.findall(to_str(value)))


def f_truncate(value, length=255, killwords=False, end="...", leeway=5) -> str:
    text = to_str(value)
    if len(text) <= length + leeway:
        return text
    if killwords:
        return text[:length - len(end)] + end
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


FILTERS = {
    "trim": lambda value, chars=None: to_str(value).strip(chars),
    "length": len, "count": len,
    "tojson": f_tojson,
    "default": f_default, "d": f_default,
    "upper": lambda value: to_str(value).upper(),
    "lower": lambda value: to_str(value).lower(),
    "title": f_title,
    "capitalize": lambda value: to_str(value).capitalize(),
    "join": f_join, "first": f_first, "last": f_last,
    "list": lambda value: list(value),
    "string": to_str,
    "int": f_int, "float": f_float, "abs": abs,
    "replace": f_replace,
    "select": lambda value, *a, **k: _select(value, a, k, by_attribute=False, keep=True),
    "reject": lambda value, *a, **k: _select(value, a, k, by_attribute=False, keep=False),
    "selectattr": lambda value, *a, **k: _select(value, a, k, by_attribute=True, keep=True),
    "rejectattr": lambda value, *a, **k: _select(value, a, k, by_attribute=True, keep=False),
    "map": f_map, "items": f_items, "dictsort": f_dictsort, "unique": f_unique,
    "reverse": f_reverse, "sort": f_sort, "round": f_round, "sum": f_sum,
    "max": _min_max(max), "min": _min_max(min),
    "indent": f_indent, "safe": lambda value: value, "e": lambda value: value,
    "wordcount": f_wordcount, "batch": f_batch, "attr": f_attr, "center": f_center,
    "format": f_format, "truncate": f_truncate,
    "escape": lambda value: value,
}


def _is_sequence(value) -> bool:
    try:
        len(value)
        value.__getitem__
    except Exception:
        return False
    return True


def _is_iterable(value) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


TESTS = {
    "defined": lambda value: not isinstance(value, Undefined),
    "undefined": lambda value: isinstance(value, Undefined),
    "none": lambda value: value is None,
    "string": lambda value: isinstance(value, str),
    "number": lambda value: isinstance(value, (int, float)),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, float),
    "mapping": lambda value: isinstance(value, Mapping),
    "iterable": _is_iterable,
    "sequence": _is_sequence,
    "boolean": lambda value: value is True or value is False,
    "true": lambda value: value is True,
    "false": lambda value: value is False,
    "callable": callable,
    "equalto": lambda value, other: value == other,
    "eq": lambda value, other: value == other, "==": lambda value, other: value == other,
    "ne": lambda value, other: value != other, "!=": lambda value, other: value != other,
    "lt": lambda value, other: value < other, "<": lambda value, other: value < other,
    "le": lambda value, other: value <= other, "<=": lambda value, other: value <= other,
    "gt": lambda value, other: value > other, ">": lambda value, other: value > other,
    "ge": lambda value, other: value >= other, ">=": lambda value, other: value >= other,
    "in": lambda value, seq: value in seq,
    "lower": lambda value: to_str(value).islower(),
    "upper": lambda value: to_str(value).isupper(),
    "sameas": lambda value, other: value is other,
    "odd": lambda value: value % 2 == 1,
    "even": lambda value: value % 2 == 0,
    "divisibleby": lambda value, num: value % num == 0,
    "escaped": lambda value: False,
}
