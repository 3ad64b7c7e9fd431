"""GGUF reader and writer: metadata of every type, tensor layout, and broken files."""
from __future__ import annotations

import struct
from functools import partial

import numpy as np
import pytest

from engine.errors import ModelFormatError
from engine.formats.gguf import GGUFFile, ValueType
from engine.formats.quants import GGML_TYPE_BY_NAME, dequantize
from tests.formats_writers import Typed, write_gguf
from tests.quantize import quantize_q4_1, quantize_q8_0
from tests.engine.formats.format_errors import expect_format_error

EVERY_TYPE = {
    "u8": Typed(ValueType.UINT8, 200), "i8": Typed(ValueType.INT8, -100),
    "u16": Typed(ValueType.UINT16, 60000), "i16": Typed(ValueType.INT16, -30000),
    "u32": 4_000_000_000, "i32": -5, "i64": -(1 << 40), "u64": Typed(ValueType.UINT64, 1 << 63),
    "f32": 0.5, "f64": Typed(ValueType.FLOAT64, 0.1), "yes": True, "no": False,
    "text": "héllo ✓ 😀", "empty": "",
    "floats": [0.25, -1.5], "ints": Typed(ValueType.ARRAY, [1, -2, 3], ValueType.INT16),
    "bools": [True, False, True], "words": ["a", "", "ß"],
    "nested": [[1, 2], [3], []], "deep": [[["x"], ["y", "z"]]],
    "no_items": Typed(ValueType.ARRAY, [], ValueType.STRING),
}
EXPECTED = {**{k: (v.value if isinstance(v, Typed) else v) for k, v in EVERY_TYPE.items()},
            "f64": 0.1, "nested": [[1, 2], [3], []]}


def _small_file(path, version=3, alignment=32):
    w = np.arange(2 * 64, dtype=np.float32).reshape(2, 64) / 7
    tensors = {"a.weight": (w, "F32"), "b.weight": (w[::-1].copy(), "Q8_0"),
               "c.bias": (np.arange(3, dtype=np.float32), "F16")}
    return write_gguf(path, {"general.architecture": "llama", **EVERY_TYPE}, tensors,
                      version=version, alignment=alignment), w


@pytest.mark.parametrize("version", [2, 3])
def test_every_metadata_value_type_round_trips(tmp_path, version):
    path, _ = _small_file(tmp_path / "m.gguf", version=version)
    g = GGUFFile(path)
    assert g.version == version
    for key, value in EXPECTED.items():
        got = g.metadata[key]
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-7), key
        else:
            assert got == value and type(got) is type(value), key
    assert g.metadata["f64"] == 0.1            # float64 keeps every bit


def test_tensor_infos_are_numpy_order_and_data_round_trips(tmp_path):
    path, w = _small_file(tmp_path / "m.gguf")
    g = GGUFFile(path)
    assert list(g.tensors) == ["a.weight", "b.weight", "c.bias"]
    assert g.tensors["a.weight"].shape == (2, 64)
    assert g.tensors["b.weight"].ggml_type.name == "Q8_0"
    assert np.array_equal(g.tensor("a.weight"), w)
    expected_q8 = dequantize(quantize_q8_0(w[::-1]), GGML_TYPE_BY_NAME["Q8_0"], w.size)
    assert np.array_equal(g.tensor("b.weight"), expected_q8.reshape(2, 64))
    assert g.tensor("c.bias").tolist() == [0.0, 1.0, 2.0]
    assert g.raw("b.weight").size == 4 * 34


def test_ggml_dimensions_are_stored_fastest_first(tmp_path):
    path = write_gguf(tmp_path / "d.gguf", {}, {"t": (np.zeros((3, 32), np.float32), "F32")})
    data = path.read_bytes()
    at = data.index(b"t", 24) + 1                         # just after the tensor's name
    n_dims, ne0, ne1 = struct.unpack_from("<IQQ", data, at)
    assert (n_dims, ne0, ne1) == (2, 32, 3)


def test_custom_alignment_places_every_tensor_on_a_boundary(tmp_path):
    path, _ = _small_file(tmp_path / "m.gguf", alignment=64)
    g = GGUFFile(path)
    assert g.alignment == 64 and g.metadata["general.alignment"] == 64
    assert all(info.offset % 64 == 0 for info in g.tensors.values())
    assert g.data_offset % 64 == 0
    assert np.array_equal(g.tensor("c.bias"), np.arange(3, dtype=np.float32))


def test_q4_1_tensor_reads_back_as_its_dequantized_values(tmp_path):
    w = np.random.default_rng(3).standard_normal((4, 96)).astype(np.float32)
    path = write_gguf(tmp_path / "q.gguf", {}, {"w": (w, "Q4_1")})
    expected = dequantize(quantize_q4_1(w), GGML_TYPE_BY_NAME["Q4_1"], w.size).reshape(4, 96)
    assert np.array_equal(GGUFFile(path).tensor("w"), expected)


@pytest.mark.real_model
def test_real_model_header(real_model_dir):
    g = GGUFFile(next(real_model_dir.glob("*.gguf")))
    assert g.version == 3
    assert g.metadata["general.architecture"] == "llama"
    assert g.metadata["llama.block_count"] == 30
    assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152
    assert g.metadata["tokenizer.ggml.merges"][0] == "Ġ t"
    assert g.tensors["token_embd.weight"].shape == (49152, 576)
    assert {t.ggml_type.name for t in g.tensors.values()} == {"F32", "Q8_0", "Q4_1"}


# --- broken files ----------------------------------------------------------------------

def _corrupt(tmp_path, data: bytes):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data)
    return bad


_expect_error = partial(expect_format_error, GGUFFile)


def test_bad_magic(tmp_path):
    path, _ = _small_file(tmp_path / "m.gguf")
    _expect_error(_corrupt(tmp_path, b"GGML" + path.read_bytes()[4:]), "not a GGUF file")


@pytest.mark.parametrize("version", [1, 4, 0x03000000])
def test_unsupported_version(tmp_path, version):
    data = _small_file(tmp_path / "m.gguf")[0].read_bytes()
    _expect_error(_corrupt(tmp_path, data[:4] + struct.pack("<I", version) + data[8:]),
                  f"unsupported GGUF version {version}")


def test_every_truncation_of_the_header_is_reported(tmp_path):
    g_path, _ = _small_file(tmp_path / "m.gguf")
    data = g_path.read_bytes()
    header_end = GGUFFile(g_path).data_offset
    for cut in list(range(0, header_end, 7)) + [header_end - 1]:
        _expect_error(_corrupt(tmp_path, data[:cut]))


def test_truncated_tensor_data_is_reported(tmp_path):
    data = _small_file(tmp_path / "m.gguf")[0].read_bytes()
    _expect_error(_corrupt(tmp_path, data[:-40]), "c.bias", "past the end of the file")


def _type_field_at(data: bytes, name: bytes) -> int:
    at = data.index(name) + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    return at + 4 + 8 * n_dims


def test_unknown_ggml_type_is_reported(tmp_path):
    data = bytearray(_small_file(tmp_path / "m.gguf")[0].read_bytes())
    struct.pack_into("<I", data, _type_field_at(data, b"b.weight"), 99)
    _expect_error(_corrupt(tmp_path, bytes(data)), "b.weight", "unknown ggml type 99")


def test_unsupported_known_type_is_reported_when_read(tmp_path):
    data = bytearray(_small_file(tmp_path / "m.gguf")[0].read_bytes())
    struct.pack_into("<I", data, _type_field_at(data, b"c.bias"), 24)    # I8: 1 byte/value
    g = GGUFFile(_corrupt(tmp_path, bytes(data)))
    with pytest.raises(ModelFormatError, match="c.bias.*I8.*not supported"):
        g.tensor("c.bias")


def test_misaligned_tensor_offset_is_reported(tmp_path):
    data = bytearray(_small_file(tmp_path / "m.gguf")[0].read_bytes())
    at = _type_field_at(data, b"c.bias") + 4
    offset = struct.unpack_from("<Q", data, at)[0]
    struct.pack_into("<Q", data, at, offset + 4)
    _expect_error(_corrupt(tmp_path, bytes(data)), "c.bias", "not aligned")


def test_unknown_metadata_value_type_is_reported(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"key": 7}, {})
    data = bytearray(path.read_bytes())
    at = data.index(b"key") + 3
    struct.pack_into("<I", data, at, 77)
    _expect_error(_corrupt(tmp_path, bytes(data)), "unknown metadata value type 77")


def test_absurd_string_length_is_reported_not_allocated(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"key": "value"}, {})
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, data.index(b"value") - 8, (1 << 62))
    _expect_error(_corrupt(tmp_path, bytes(data)), "key")


def test_missing_file_and_missing_tensor(tmp_path):
    _expect_error(tmp_path / "nope.gguf", "cannot open")
    path, _ = _small_file(tmp_path / "m.gguf")
    with pytest.raises(ModelFormatError, match="missing tensor zzz"):
        GGUFFile(path).tensor("zzz")
