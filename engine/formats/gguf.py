"""GGUF files: a reader (header, metadata, tensor infos, memory-mapped data).

GGUF is llama.cpp's single-file model format. Its layout (all little-endian):

    magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv x  (key: string, value_type u32, value)
    n_tensors x (name: string, n_dims u32, ne[n_dims] u64, ggml_type u32, offset u64)
    padding to `general.alignment` (default 32)
    tensor data: each tensor at data_start + offset (offsets are aligned too)

A string is `len u64 | utf-8 bytes`; an array is `item_type u32 | count u64 | items`, and
items may themselves be arrays (nested). Versions 2 and 3 share this layout (version 1
used 32-bit counts and is not supported).

Dimensions are stored ggml-style, fastest-varying first (`ne0` = row length), so a weight
with `ne = [in, out]` is the numpy array `[out, in]`: `TensorInfo.shape` is already reversed
into numpy order.

The reader never loads tensor data eagerly: the file is memory-mapped and `raw(name)` is a
zero-copy uint8 view; `tensor(name)` dequantizes (engine/formats/quants.py) into float32. Any
inconsistency -- bad magic, truncation, an unknown type, data past the end of the file --
raises `ModelFormatError` naming the file. (The writer the tests use to make GGUF test
models is `tests/formats_writers.py`; the runtime never writes a model.)
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from engine.errors import ModelFormatError
from engine.formats.filemap import map_readonly
from engine.formats.quants import GGML_TYPES, GGMLType, dequantize, dequantize_input_major

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4                    # ggml tensors have at most 4 dimensions
MAX_NESTING = 8                 # arrays of arrays deeper than this are surely corrupt
MAX_COUNT = 1 << 40             # any count beyond this cannot fit a real file


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# Fixed-size value types -> numpy little-endian dtype.
SCALAR_DTYPES: dict[ValueType, str] = {
    ValueType.UINT8: "<u1", ValueType.INT8: "<i1", ValueType.UINT16: "<u2",
    ValueType.INT16: "<i2", ValueType.UINT32: "<u4", ValueType.INT32: "<i4",
    ValueType.FLOAT32: "<f4", ValueType.BOOL: "<u1", ValueType.UINT64: "<u8",
    ValueType.INT64: "<i8", ValueType.FLOAT64: "<f8",
}

# The same, as struct formats (numpy's dtype.char for int64 is "l": 4 bytes to struct).
STRUCT_FORMATS: dict[ValueType, str] = {
    ValueType.UINT8: "<B", ValueType.INT8: "<b", ValueType.UINT16: "<H", ValueType.INT16: "<h",
    ValueType.UINT32: "<I", ValueType.INT32: "<i", ValueType.FLOAT32: "<f",
    ValueType.BOOL: "<B", ValueType.UINT64: "<Q", ValueType.INT64: "<q", ValueType.FLOAT64: "<d",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]      # numpy order (ggml ne reversed)
    ggml_type: GGMLType
    offset: int                 # absolute byte offset in the file
    nbytes: int

    @property
    def num_values(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class _Cursor:
    """Reads little-endian values from a buffer; running out means a truncated file."""

    def __init__(self, buf, path: str):
        self.buf, self.pos, self.path = buf, 0, path
        self.size = len(buf)

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.size:
            raise ModelFormatError(self.path, f"truncated file: {what} at byte {start} "
                                              f"needs {n} bytes, file has {self.size}")
        self.pos = start + n
        return start

    def scalar(self, fmt: str, what: str):
        start = self.take(struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.buf, start)[0]

    def count(self, what: str) -> int:
        n = self.scalar("<Q", what)
        if n > MAX_COUNT:
            raise ModelFormatError(self.path, f"implausible {what} {n}")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"length of {what}")
        start = self.take(n, what)
        return bytes(self.buf[start:start + n]).decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == ValueType.STRING:
            return self.string(what)
        if vtype == ValueType.ARRAY:
            return self.array(what, depth)
        if vtype not in SCALAR_DTYPES:
            raise ModelFormatError(self.path, f"{what}: unknown metadata value type {vtype}")
        raw = self.scalar(STRUCT_FORMATS[vtype], what)
        return bool(raw) if vtype == ValueType.BOOL else raw

    def array(self, what: str, depth: int) -> list:
        if depth >= MAX_NESTING:
            raise ModelFormatError(self.path, f"{what}: arrays nested deeper than {MAX_NESTING}")
        item_type = self.scalar("<I", f"item type of {what}")
        n = self.count(f"length of {what}")
        if item_type in (ValueType.STRING, ValueType.ARRAY):
            return [self.value(item_type, what, depth + 1) for _ in range(n)]
        if item_type not in SCALAR_DTYPES:
            raise ModelFormatError(self.path, f"{what}: unknown array item type {item_type}")
        dtype = np.dtype(SCALAR_DTYPES[ValueType(item_type)])
        start = self.take(n * dtype.itemsize, what)
        items = np.frombuffer(self.buf, dtype, count=n, offset=start)
        return [bool(v) for v in items] if item_type == ValueType.BOOL else items.tolist()


class GGUFFile:
    """An open GGUF file: `version`, `metadata`, `tensors` (name -> TensorInfo), data access."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._map, size = map_readonly(self.path)
        self.file_bytes = size
        self._data = np.frombuffer(self._map, np.uint8) if size else np.zeros(0, np.uint8)
        cur = _Cursor(self._map, self.path)
        self.version = self._read_header(cur)
        n_tensors, n_kv = cur.count("tensor count"), cur.count("metadata count")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string("metadata key")
            self.metadata[key] = cur.value(cur.scalar("<I", f"type of {key}"), key)
        self.alignment = self._alignment()
        infos = [self._read_tensor_info(cur) for _ in range(n_tensors)]
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, gtype, rel in infos:
            self.tensors[name] = self._place(name, shape, gtype, rel)

    # --- header pieces ---------------------------------------------------------------

    def _read_header(self, cur: _Cursor) -> int:
        start = cur.take(4, "magic")
        magic = bytes(self._map[start:start + 4])
        if magic != GGUF_MAGIC:
            raise ModelFormatError(self.path, f"not a GGUF file (magic {magic!r}, "
                                              f"expected {GGUF_MAGIC!r})")
        version = cur.scalar("<I", "version")
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version >= 1 << 16 else ""
            raise ModelFormatError(self.path, f"unsupported GGUF version {version}{hint}; "
                                              f"supported: {SUPPORTED_VERSIONS}")
        return version

    def _alignment(self) -> int:
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise ModelFormatError(self.path, f"general.alignment {align!r} is not a power of 2")
        return align

    def _read_tensor_info(self, cur: _Cursor):
        name = cur.string("tensor name")
        n_dims = cur.scalar("<I", f"dimension count of {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ModelFormatError(self.path, f"tensor {name}: {n_dims} dimensions "
                                              f"(1..{MAX_DIMS} allowed)")
        ne = [cur.count(f"dimension of {name}") for _ in range(n_dims)]
        type_id = cur.scalar("<I", f"type of {name}")
        gtype = GGML_TYPES.get(type_id)
        if gtype is None:
            raise ModelFormatError(self.path, f"tensor {name}: unknown ggml type {type_id}")
        rel = cur.scalar("<Q", f"offset of {name}")
        return name, tuple(reversed(ne)), gtype, rel

    def _place(self, name: str, shape: tuple[int, ...], gtype: GGMLType, rel: int) -> TensorInfo:
        if rel % self.alignment:
            raise ModelFormatError(self.path, f"tensor {name}: offset {rel} is not aligned "
                                              f"to {self.alignment}")
        if shape[-1] % gtype.block_size:
            raise ModelFormatError(self.path, f"tensor {name}: row length {shape[-1]} is not "
                                              f"a multiple of the {gtype.name} block "
                                              f"({gtype.block_size})")
        num_values = int(np.prod(shape, dtype=np.int64))
        info = TensorInfo(name, shape, gtype, self.data_offset + rel, gtype.nbytes(num_values))
        if info.offset + info.nbytes > self.file_bytes:
            raise ModelFormatError(self.path, f"tensor {name}: data runs past the end of the "
                                              f"file (bytes {info.offset}..{info.offset + info.nbytes}"
                                              f", file has {self.file_bytes})")
        return info

    # --- data --------------------------------------------------------------------------

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFormatError(self.path, f"missing tensor {name}") from None

    def raw(self, name: str) -> np.ndarray:
        """Zero-copy uint8 view of one tensor's bytes (read-only, backed by the mmap)."""
        info = self.info(name)
        return self._data[info.offset:info.offset + info.nbytes]

    def tensor(self, name: str) -> np.ndarray:
        """Dequantized float32 array in numpy order (F32 tensors: a read-only mmap view)."""
        info = self.info(name)
        try:
            values = dequantize(self.raw(name), info.ggml_type, info.num_values)
        except ValueError as e:
            raise ModelFormatError(self.path, f"tensor {name}: {e}") from None
        return values.reshape(info.shape)

    def matrix_input_major(self, parts: list[tuple[str, np.ndarray | None]]) -> np.ndarray:
        """Stored [out_i, in] matrices, fused side by side, as float32 [in, sum(out_i)].

        Each part is (name, output-row order or None). When all parts share one type the
        packed rows are stacked and dequantized once, straight into the fused input-major
        layout (engine/formats/quants.py transposes the packed bytes, not the floats).
        """
        infos = [self.info(name) for name, _ in parts]
        for info in infos:
            if len(info.shape) != 2 or info.shape[1] != infos[0].shape[1]:
                raise ModelFormatError(self.path, f"tensor {info.name}: shape "
                                                  f"{list(info.shape)} cannot be fused")
        if len({info.ggml_type.type_id for info in infos}) > 1:
            return np.concatenate([self.matrix_input_major([p]) for p in parts], axis=1)
        rows = []
        for (name, order), info in zip(parts, infos):
            raw = self.raw(name).reshape(info.shape[0], -1)     # [out_i, row_bytes]
            rows.append(raw if order is None else raw[order])
        stacked = rows[0] if len(rows) == 1 else np.concatenate(rows)   # [sum(out_i), row_bytes]
        out_dim = stacked.shape[0]
        try:
            return dequantize_input_major(stacked.reshape(-1), infos[0].ggml_type, out_dim,
                                          infos[0].shape[1])
        except ValueError as e:
            raise ModelFormatError(self.path, f"tensor {infos[0].name}: {e}") from None
