"""Memory-map a model file read-only, with the one error message every format uses.

Weights are read through the map, so a 100 MB GGUF costs no copy until a tensor is
dequantized, and the OS pages in only what is touched.
"""
from __future__ import annotations

import mmap
import os

from engine.errors import ModelFormatError


def map_readonly(path: str) -> tuple[mmap.mmap | bytes, int]:
    """-> (the file's bytes as a read-only map, its size). An empty file maps to b""."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as e:
        raise ModelFormatError(path, f"cannot open: {e.strerror or e}") from None
    return mapped, size
