"""The schemas Zod 4 and pydantic 2 write for everyday models, by name: Zod's are committed
fixtures (fixtures/zod, made by make_schemas.mjs there); pydantic's are made here with
`model_json_schema()`. The library tests validate sampled outputs against them, and
bench/grammar_times.py times their compiles."""
from __future__ import annotations

import datetime as dt
import enum
import json
import pathlib
import uuid
from typing import Literal, Optional, Union

from pydantic import BaseModel, Field, HttpUrl, IPvAnyAddress

ZOD_DIR = pathlib.Path(__file__).parent / "fixtures" / "zod"


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


def library_schemas() -> list[tuple[str, dict]]:
    """(name, schema) of every Zod fixture ("zod-<file>"), then every pydantic model
    ("pydantic-<class>")."""
    zod = [(f"zod-{p.stem}", json.loads(p.read_text())) for p in sorted(ZOD_DIR.glob("*.json"))]
    return zod + [(f"pydantic-{m.__name__}", m.model_json_schema()) for m in PYDANTIC]
