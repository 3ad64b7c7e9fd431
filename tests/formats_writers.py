"""Writers for the model formats the engine reads: GGUF and safetensors (tests only).

The engine only reads model files (`engine/formats/`); the tests write small ones -- tiny
Llamas, files with every metadata type, files to break on purpose -- with these writers.
They share the readers' constants (magic, alignment, value types) so a writer and its
reader cannot drift apart; quantizing is `tests/quantize.py`'s.

    write_gguf(path, metadata, {name: (float array, "Q8_0")})    -> Path
    write_safetensors(path, {name: float array}, dtypes={...})     -> Path
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.formats.gguf import DEFAULT_ALIGNMENT, GGUF_MAGIC, SCALAR_DTYPES, ValueType
from engine.formats.quants import GGML_TYPE_BY_NAME
from engine.formats.safetensors import HEADER_LEN_BYTES
from tests.quantize import QUANTIZERS

WRITE_VERSION = 3                     # the GGUF version written
SAFETENSORS_HEADER_ALIGN = 8          # the header is padded so tensor data starts aligned


# --- GGUF ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Typed:
    """A metadata value with an explicit GGUF type (`item_type` for arrays)."""
    value_type: ValueType
    value: Any
    item_type: ValueType | None = None


def _infer_type(value: Any) -> ValueType:
    if isinstance(value, Typed):
        return value.value_type
    if isinstance(value, bool):
        return ValueType.BOOL
    if isinstance(value, int):
        if 0 <= value < 1 << 32:
            return ValueType.UINT32
        return ValueType.INT32 if -(1 << 31) <= value < 0 else ValueType.INT64
    if isinstance(value, float):
        return ValueType.FLOAT32
    if isinstance(value, str):
        return ValueType.STRING
    if isinstance(value, (list, tuple)):
        return ValueType.ARRAY
    raise TypeError(f"cannot store {type(value).__name__} in GGUF metadata")


def _encode_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _encode_value(value: Any, vtype: ValueType) -> bytes:
    item_type = value.item_type if isinstance(value, Typed) else None
    value = value.value if isinstance(value, Typed) else value
    if vtype == ValueType.STRING:
        return _encode_string(value)
    if vtype == ValueType.ARRAY:
        if item_type is None:
            item_type = _infer_type(value[0]) if len(value) else ValueType.UINT32
        head = struct.pack("<IQ", item_type, len(value))
        if item_type in SCALAR_DTYPES:
            return head + np.asarray(value, SCALAR_DTYPES[item_type]).tobytes()
        return head + b"".join(_encode_value(v, item_type) for v in value)
    return np.asarray(value, SCALAR_DTYPES[vtype]).tobytes()


def write_gguf(path: str | os.PathLike, metadata: dict[str, Any],
               tensors: dict[str, tuple[np.ndarray, str]], *,
               version: int = WRITE_VERSION, alignment: int = DEFAULT_ALIGNMENT) -> Path:
    """Write a GGUF file. `tensors`: name -> (float array in numpy order, type name).

    Tensors are quantized with tests/quantize.py (F32, F16, Q8_0, Q4_1). Metadata types are
    inferred (int -> UINT32/INT32/INT64, float -> FLOAT32, list -> ARRAY) unless given as
    `Typed`. `general.alignment` is written when `alignment` is not the default.
    """
    meta = dict(metadata)
    if alignment != DEFAULT_ALIGNMENT:
        meta["general.alignment"] = Typed(ValueType.UINT32, alignment)
    out = [GGUF_MAGIC, struct.pack("<IQQ", version, len(tensors), len(meta))]
    for key, value in meta.items():
        vtype = _infer_type(value)
        out += [_encode_string(key), struct.pack("<I", vtype), _encode_value(value, vtype)]
    blobs, offset = [], 0
    for name, (array, type_name) in tensors.items():
        array = np.asarray(array, np.float32)
        blob = QUANTIZERS[type_name](array).tobytes()
        ne = tuple(reversed(array.shape))
        out += [_encode_string(name), struct.pack(f"<I{len(ne)}Q", len(ne), *ne),
                struct.pack("<IQ", GGML_TYPE_BY_NAME[type_name].type_id, offset)]
        pad = -len(blob) % alignment
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad
    header = b"".join(out)
    header += b"\0" * (-len(header) % alignment)
    path = Path(path)
    path.write_bytes(header + b"".join(blobs))
    return path


# --- safetensors -----------------------------------------------------------------------

def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), uint16."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


_SAFETENSORS_ENCODERS = {"F32": QUANTIZERS["F32"], "F16": QUANTIZERS["F16"], "BF16": _bf16_bits}


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray], *,
                      dtypes: dict[str, str] | None = None,
                      metadata: dict[str, str] | None = None) -> Path:
    """Write float arrays as a .safetensors file (dtype per tensor: F32 unless `dtypes` says)."""
    dtypes = dtypes or {}
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name, array in tensors.items():
        dtype = dtypes.get(name, "F32")
        blob = _SAFETENSORS_ENCODERS[dtype](np.asarray(array)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % SAFETENSORS_HEADER_ALIGN)
    path = Path(path)
    path.write_bytes(len(head).to_bytes(HEADER_LEN_BYTES, "little") + head + b"".join(blobs))
    return path
