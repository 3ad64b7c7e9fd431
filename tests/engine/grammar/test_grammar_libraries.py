"""The schemas Zod 4 and pydantic 2 write for everyday models compile quickly and every
sampled output validates (jsonschema with its format checker). Zod's schemas are committed
fixtures (tests/engine/grammar/fixtures/zod, made by make_schemas.mjs there); pydantic's are made
here with `model_json_schema()`."""
from __future__ import annotations

import datetime as dt
import enum
import gc
import json
import pathlib
import time
import uuid
from typing import Literal, Optional, Union

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, HttpUrl, IPvAnyAddress

from engine.grammar.compile import compile_spec, schema_spec
from tests.engine.grammar.grammar_sampling import sample_texts

ZOD_DIR = pathlib.Path(__file__).parent / "fixtures" / "zod"
MAX_COMPILE_S = 0.1
TIMING_TRIES = 3                 # the best of three compiles is timed


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str = Field(max_length=120)
    zip: str = Field(pattern=r"^\d{5}$")


class Person(BaseModel):
    id: uuid.UUID
    homepage: Optional[HttpUrl] = None
    born: dt.date
    seen: dt.datetime
    age: int = Field(ge=0, le=150)
    score: float = Field(ge=0, le=1)
    color: Color
    address: Address
    friends: list[Address] = []


class Reading(BaseModel):
    sensor: str
    celsius: float = Field(gt=-273.15, lt=1000)
    tags: dict[str, int] = {}
    window: tuple[int, int]
    kind: Union[Literal["a"], Literal["b"]]


class Tree(BaseModel):
    value: int
    children: list["Tree"] = []


class Order(BaseModel):
    items: list[list[int]] = Field(min_length=1, max_length=3)
    note: Optional[str] = Field(default=None, max_length=2000)
    ip: IPvAnyAddress
    step: int = Field(multiple_of=5, ge=0, le=1000)


PYDANTIC = [Person, Reading, Tree, Order]


def library_schemas():
    zod = [pytest.param(json.loads(p.read_text()), id=f"zod-{p.stem}") for p in sorted(ZOD_DIR.glob("*.json"))]
    return zod + [pytest.param(m.model_json_schema(), id=f"pydantic-{m.__name__}") for m in PYDANTIC]


def test_the_fixtures_cover_a_dozen_zod_models():
    assert len(list(ZOD_DIR.glob("*.json"))) >= 12


@pytest.mark.parametrize("schema", library_schemas())
def test_library_schemas_compile_and_every_output_validates(schema):
    grammar = compile_spec(schema_spec(schema))
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for text in sample_texts(grammar, 25, seed=3):
        errors = list(validator.iter_errors(json.loads(text)))
        assert not errors, (text, errors[0].message)


@pytest.mark.timing
@pytest.mark.parametrize("schema", library_schemas())
def test_library_schemas_compile_in_under_100_ms(schema):
    """The best of TIMING_TRIES compiles (each one does all the work: no cache here): a
    shared host or a collection of the test process's large heap can stall any one of them
    (the server pauses automatic collection while it compiles: server/offloop/pool.py)."""
    took_s = []
    for _ in range(TIMING_TRIES):
        gc.collect()
        start = time.perf_counter()
        compile_spec(schema_spec(schema))
        took_s.append(time.perf_counter() - start)
    assert min(took_s) < MAX_COMPILE_S, took_s
