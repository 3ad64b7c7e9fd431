"""safetensors files: a reader (F32, F16, BF16, memory-mapped).

The format is deliberately tiny:

    header_len u64 (little-endian) | header: JSON, header_len bytes | data

The header maps each tensor name to `{"dtype": "F32", "shape": [..], "data_offsets":
[begin, end]}` (offsets relative to the start of data, row-major, little-endian), plus an
optional `"__metadata__": {str: str}`. Hugging Face checkpoints split big models into
several `model-0000k-of-0000n.safetensors` shards; `read_safetensors_dir` merges them.

Every check that can fail -- a short file, a header that is not JSON, offsets outside the
data or not matching dtype x shape, an unsupported dtype -- raises `ModelFormatError`
naming the file. (The writer the tests use is `tests/formats_writers.py`.)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from engine.errors import ModelFormatError
from engine.formats.filemap import map_readonly
from engine.formats.quants import GGML_TYPE_BY_NAME, GGMLType

HEADER_LEN_BYTES = 8
MAX_HEADER_BYTES = 100 * 1024 * 1024     # the format's own cap on the JSON header

# dtype name -> its GGML twin: bytes per value (`type_size`, one value per block) and the
# dequantizer from stored little-endian bytes to float32 (F32: a zero-copy view).
DTYPES: dict[str, GGMLType] = {name: GGML_TYPE_BY_NAME[name] for name in ("F32", "F16", "BF16")}


class SafetensorsFile:
    """One open .safetensors file: `header` (name -> entry), `metadata`, `tensor(name)`."""

    def __init__(self, path: str | os.PathLike, skip_dtypes: frozenset[str] = frozenset()):
        """`skip_dtypes`: dtypes left out of `header` (named in `skipped`) instead of refused:
        a checkpoint's integer buffers (BERT's I64 `position_ids`) that are not weights."""
        self.path = str(path)
        self._map, size = map_readonly(self.path)
        if size < HEADER_LEN_BYTES:
            raise ModelFormatError(self.path, f"truncated file: {size} bytes, no header length")
        header_len = int.from_bytes(self._map[:HEADER_LEN_BYTES], "little")
        if header_len > MAX_HEADER_BYTES or HEADER_LEN_BYTES + header_len > size:
            raise ModelFormatError(self.path, f"header length {header_len} does not fit a "
                                              f"{size}-byte file (truncated or not safetensors)")
        try:
            header = json.loads(bytes(self._map[HEADER_LEN_BYTES:HEADER_LEN_BYTES + header_len]))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelFormatError(self.path, f"header is not valid JSON: {e}") from None
        if not isinstance(header, dict):
            raise ModelFormatError(self.path, "header is not a JSON object")
        self.metadata: dict = header.pop("__metadata__", None) or {}
        self.data_offset = HEADER_LEN_BYTES + header_len
        self.data_bytes = size - self.data_offset
        self._data = np.frombuffer(self._map, np.uint8)
        self.skipped: dict[str, str] = {n: e["dtype"] for n, e in header.items()
                                        if isinstance(e, dict) and e.get("dtype") in skip_dtypes}
        self.header: dict[str, dict] = {n: self._check(n, e) for n, e in header.items()
                                        if n not in self.skipped}

    def _check(self, name: str, entry) -> dict:
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            shape = tuple(int(s) for s in shape)
        except (TypeError, KeyError, ValueError):
            raise ModelFormatError(self.path, f"tensor {name}: malformed header entry "
                                              f"{entry!r}") from None
        if dtype not in DTYPES:
            raise ModelFormatError(self.path, f"tensor {name}: unsupported dtype {dtype} "
                                              f"(supported: {', '.join(DTYPES)})")
        expected = DTYPES[dtype].nbytes(int(np.prod(shape, dtype=np.int64)))
        if not 0 <= begin <= end or end - begin != expected or min(shape, default=0) < 0:
            raise ModelFormatError(self.path, f"tensor {name}: data_offsets [{begin}, {end}] "
                                              f"do not match {dtype} shape {list(shape)}")
        if end > self.data_bytes:
            raise ModelFormatError(self.path, f"tensor {name}: data runs past the end of the "
                                              f"file (needs {end} data bytes, has "
                                              f"{self.data_bytes}; truncated?)")
        return {"dtype": dtype, "shape": shape, "begin": begin, "end": end}

    def names(self) -> list[str]:
        return list(self.header)

    def tensor(self, name: str) -> np.ndarray:
        """float32 array of `shape` (F32: a read-only view of the mapped file)."""
        e = self.header.get(name)
        if e is None:
            raise ModelFormatError(self.path, f"missing tensor {name}")
        raw = self._data[self.data_offset + e["begin"]:self.data_offset + e["end"]]
        return DTYPES[e["dtype"]].dequantize(raw).reshape(e["shape"])


def read_safetensors_dir(directory: str | os.PathLike) -> dict[str, SafetensorsFile]:
    """Every tensor of every `*.safetensors` file in a directory: name -> the file holding it."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise ModelFormatError(directory, "no *.safetensors files")
    where: dict[str, SafetensorsFile] = {}
    for path in files:
        st = SafetensorsFile(path)
        for name in st.names():
            if name in where:
                raise ModelFormatError(path, f"tensor {name} also appears in {where[name].path}")
            where[name] = st
    return where
