"""safetensors reader and writer: dtypes, shards, and broken files."""
from __future__ import annotations

import json
import struct
from functools import partial

import numpy as np
import pytest

from engine.errors import ModelFormatError
from engine.formats.safetensors import SafetensorsFile, read_safetensors_dir
from tests.formats_writers import write_safetensors
from tests.engine.formats.format_errors import expect_format_error


def _raw_file(path, header: dict, data: bytes) -> str:
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


def test_hand_built_file_reads_each_dtype(tmp_path):
    f32 = np.array([[1.5, -2.0]], "<f4").tobytes()
    f16 = np.array([0.5, 3.0, -1.0], "<f2").tobytes()
    bf16 = np.array([0x3F80, 0xC040], "<u2").tobytes()              # 1.0, -3.0
    path = _raw_file(tmp_path / "x.safetensors", {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]},
        "b": {"dtype": "F16", "shape": [3], "data_offsets": [8, 14]},
        "c": {"dtype": "BF16", "shape": [2], "data_offsets": [14, 18]},
    }, f32 + f16 + bf16)
    st = SafetensorsFile(path)
    assert st.metadata == {"format": "pt"}
    assert st.names() == ["a", "b", "c"]
    assert st.tensor("a").tolist() == [[1.5, -2.0]]
    assert st.tensor("b").tolist() == [0.5, 3.0, -1.0]
    assert st.tensor("c").tolist() == [1.0, -3.0]
    assert all(st.tensor(n).dtype == np.float32 for n in "abc")


def test_writer_round_trips_and_rounds_bf16(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    path = write_safetensors(tmp_path / "w.safetensors", {"x": x, "h": x, "b": x},
                             dtypes={"h": "F16", "b": "BF16"}, metadata={"k": "v"})
    st = SafetensorsFile(path)
    assert np.array_equal(st.tensor("x"), x)
    assert np.array_equal(st.tensor("h"), x.astype(np.float16).astype(np.float32))
    b = st.tensor("b")
    assert np.all(np.abs(b - x) <= np.abs(x) * 2.0 ** -8)          # half a bf16 ulp
    assert np.all(b.view(np.uint32) & 0xFFFF == 0)
    assert st.metadata == {"k": "v"}
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert header_len % 8 == 0                                       # data starts aligned


def test_directory_merges_shards_and_rejects_duplicates(tmp_path):
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": np.ones(2)})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": np.zeros(3)})
    files = read_safetensors_dir(tmp_path)
    assert sorted(files) == ["a", "b"]
    assert files["b"].tensor("b").tolist() == [0.0, 0.0, 0.0]
    write_safetensors(tmp_path / "model-extra.safetensors", {"a": np.ones(2)})
    with pytest.raises(ModelFormatError, match="tensor a also appears"):
        read_safetensors_dir(tmp_path)


def test_directory_without_safetensors(tmp_path):
    with pytest.raises(ModelFormatError, match="no \\*.safetensors"):
        read_safetensors_dir(tmp_path)


_expect_error = partial(expect_format_error, SafetensorsFile)


def test_short_and_empty_files(tmp_path):
    (tmp_path / "e.safetensors").write_bytes(b"")
    _expect_error(tmp_path / "e.safetensors", "truncated")
    (tmp_path / "s.safetensors").write_bytes(b"\x10\x00")
    _expect_error(tmp_path / "s.safetensors", "truncated")


def test_header_longer_than_file(tmp_path):
    path = write_safetensors(tmp_path / "w.safetensors", {"x": np.ones(4)})
    data = path.read_bytes()
    path.write_bytes(data[:20])
    _expect_error(path, "header length")


def test_header_that_is_not_json(tmp_path):
    path = tmp_path / "j.safetensors"
    path.write_bytes(struct.pack("<Q", 5) + b"{oops")
    _expect_error(path, "not valid JSON")
    path.write_bytes(struct.pack("<Q", 2) + b"[]")
    _expect_error(path, "not a JSON object")


def test_unsupported_dtype(tmp_path):
    path = _raw_file(tmp_path / "i.safetensors",
                     {"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
    _expect_error(path, "tensor x", "unsupported dtype I64")


def test_skipped_dtypes_are_left_out_and_named(tmp_path):
    """BERT checkpoints carry an I64 `position_ids` buffer beside the float weights."""
    weights = np.arange(3, dtype=np.float32)
    path = _raw_file(tmp_path / "s.safetensors",
                     {"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
                      "w": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]}},
                     bytes(8) + weights.tobytes())
    st = SafetensorsFile(path, skip_dtypes=frozenset({"I64"}))
    assert st.skipped == {"ids": "I64"} and st.names() == ["w"]
    assert np.array_equal(st.tensor("w"), weights)


def test_offsets_that_do_not_match_the_shape(tmp_path):
    path = _raw_file(tmp_path / "o.safetensors",
                     {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(12))
    _expect_error(path, "tensor x", "do not match F32 shape [3]")


def test_malformed_entry(tmp_path):
    path = _raw_file(tmp_path / "m.safetensors", {"x": {"dtype": "F32"}}, b"")
    _expect_error(path, "tensor x", "malformed")


def test_truncated_data(tmp_path):
    path = write_safetensors(tmp_path / "t.safetensors", {"a": np.ones(4), "b": np.ones(4)})
    path.write_bytes(path.read_bytes()[:-4])
    _expect_error(path, "tensor b", "past the end")


def test_missing_tensor_names_file(tmp_path):
    path = write_safetensors(tmp_path / "w.safetensors", {"x": np.ones(4)})
    with pytest.raises(ModelFormatError, match="missing tensor y"):
        SafetensorsFile(path).tensor("y")
