"""Grammar compile times and the cached forced-drafts call on the wall clock, beside the
limits the project holds them to:

* each library schema (tests/engine/grammar/library_schemas.py: Zod's fixtures, pydantic's
  models) compiles in under 100 ms, the best of 3 compiles (each does all the work: no cache);
* no schema of the budget fuzzer (tests/engine/grammar/schemas.py: hostile and random)
  takes a second to compile or to be refused;
* integer bounds of +-2^31, 10^12, 2^53-1 (Zod's safe integers) and 10^40 compile in under
  50 ms each, the best of 3;
* a forced-drafts call from a state seen before costs under 20 us (the mean of 20 000 calls
  over 4 cached states, the tiny tokenizer of tests/engine/grammar/tiny_tokens.py).

A collection is run before each timed compile: the collector's pause over a large heap is
not the compile's (the server pauses automatic collection while it compiles:
server/offloop/pool.py). The tests check the same mechanisms by counting (work units, cache
builds); these are the seconds the counts stand for. Run by bench/timing_checks.py.
"""
from __future__ import annotations

import gc
import json
import time
from typing import Callable, Iterator

from bench.limit_check import LimitCheck
from engine.grammar.compile import compile_spec, schema_spec
from engine.grammar.errors import GrammarError
from tests.engine.grammar.library_schemas import library_schemas
from tests.engine.grammar.schemas import WEATHER_SCHEMA, fuzz_schemas
from tests.engine.grammar.tiny_tokens import TinyTokenizer, at, runtime_for

MAX_LIBRARY_COMPILE_S = 0.1
MAX_FUZZ_COMPILE_S = 1.0
MAX_INTEGER_COMPILE_S = 0.05
MAX_CACHED_CALL_US = 20.0
BEST_OF = 3                          # compiles per schema; the fastest is the compile's own time
CACHED_CALLS = 20_000
INTEGER_BOUNDS = {"2^31": 2 ** 31, "10^12": 10 ** 12, "2^53-1": 2 ** 53 - 1, "10^40": 10 ** 40}
DRAFT_STATES = ("", '{"name": "Bob",', '{"name": "Bob", "unit": "c', '{"name": "Bo')


def best_of_s(work: Callable[[], object], tries: int = BEST_OF) -> float:
    took_s = []
    for _ in range(tries):
        gc.collect()
        start_s = time.perf_counter()
        work()
        took_s.append(time.perf_counter() - start_s)
    return min(took_s)


def compile_or_refuse(schema) -> None:
    try:
        compile_spec(schema_spec(schema))
    except GrammarError:
        pass                         # a refusal is an answer too: it must come as fast


def library_checks() -> Iterator[LimitCheck]:
    for name, schema in library_schemas():
        yield LimitCheck(f"compile {name}", best_of_s(lambda: compile_spec(schema_spec(schema))),
                         MAX_LIBRARY_COMPILE_S, "s")


def fuzz_check() -> LimitCheck:
    worst_s, worst = 0.0, None
    for schema in fuzz_schemas():
        gc.collect()
        start_s = time.perf_counter()
        compile_or_refuse(schema)
        took_s = time.perf_counter() - start_s
        if took_s > worst_s:
            worst_s, worst = took_s, schema
    return LimitCheck("worst fuzzed compile or refusal", worst_s, MAX_FUZZ_COMPILE_S, "s",
                      note=json.dumps(worst)[:80])


def integer_checks() -> Iterator[LimitCheck]:
    for name, bound in INTEGER_BOUNDS.items():
        schema = {"type": "integer", "minimum": -bound, "maximum": bound}
        yield LimitCheck(f"compile integer +-{name}", best_of_s(lambda: compile_spec(schema_spec(schema))),
                         MAX_INTEGER_COMPILE_S, "s")


def cached_drafts_check() -> LimitCheck:
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), TinyTokenizer())
    rows = [at(runtime, text) for text in DRAFT_STATES]
    for row in rows:
        row.forced_drafts(8)                                  # built once
    start_s = time.perf_counter()
    for i in range(CACHED_CALLS):
        rows[i % len(rows)].forced_drafts(8)
    per_call_us = (time.perf_counter() - start_s) / CACHED_CALLS * 1e6
    return LimitCheck("forced drafts from a cached state", per_call_us, MAX_CACHED_CALL_US, "us")


def checks() -> Iterator[LimitCheck]:
    """Every grammar check, each yielded as soon as it is measured."""
    yield from library_checks()
    yield fuzz_check()
    yield from integer_checks()
    yield cached_drafts_check()
