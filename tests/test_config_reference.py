"""The configuration tables of README.md and docs/configuration.md are server/config.py's.

docs/config_reference.py renders them from the key table, the dataclass defaults and
runtime.toml's comments; these tests check that the committed tables are that rendering,
that the defaults it prints are what an empty configuration really gives (read through
`ServeConfig.from_toml`, not through the renderer's own lookup), and that runtime.toml,
the annotated file, sets no key to anything but its default.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from server.config import KEYS, Key, ServeConfig, settings, settings_changed

ROOT = Path(__file__).resolve().parents[1]


def load_reference():
    spec = importlib.util.spec_from_file_location("config_reference",
                                                  ROOT / "docs" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = load_reference()


def test_the_committed_tables_are_the_rendering():
    assert reference.stale() == [], "run: python docs/config_reference.py"


def test_every_key_has_one_row_in_each_engine_table():
    for block in ("engine", "engine-short"):
        rows = reference.render(block).splitlines()[2:]
        assert [row.split("`")[1] for row in rows] == list(KEYS)


def test_the_printed_defaults_are_what_an_empty_config_gives():
    given = settings(ServeConfig.from_toml("", {}))
    given["[engine].api_key_file"] = ""             # read into api_key, never kept
    given["[engine].speculative"] = given["[engine].speculative"].method
    for name in KEYS:
        if name in ("model_dir", "model_id"):       # the folder the current directory has, its name
            continue
        assert reference.default(name) == given[f"[engine].{name}"], name


def test_runtime_toml_sets_every_key_it_sets_to_its_default():
    cfg = ServeConfig.load(ROOT / "runtime.toml", env={})
    assert cfg.model_dir == str(ROOT / "artifacts" / "models" / "smol-135m")
    changed = [line for line in settings_changed(cfg)
               if not line.startswith(("[engine].model_dir", "[engine].model_id"))]
    assert changed == []


def test_the_check_can_fail(tmp_path):
    for name in reference.TARGETS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert reference.stale(tmp_path) == []
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace("| `128` |", "| `64` |", 1),
                      encoding="utf-8")
    doc = tmp_path / "docs" / "configuration.md"
    doc.write_text(doc.read_text(encoding="utf-8").replace("<!-- config-reference:defaults -->",
                                                           "", 1), encoding="utf-8")
    assert reference.stale(tmp_path) == ["README.md", "docs/configuration.md"]


def test_a_new_key_without_a_line_in_runtime_toml_stops_the_rendering(monkeypatch):
    monkeypatch.setitem(reference.config.KEYS, "max_new_thing", Key(int, bool, "an integer"))
    with pytest.raises(KeyError, match=r"runtime.toml has no commented line for \['max_new_thing'\]"):
        reference.render("engine")


def test_only_the_engine_table_gives_meanings_and_a_missing_default_is_named():
    assert reference.meanings('[engine]\nblock_size = 16   # tokens per KV block\n'
                              '# [[models]]\n# model_dir = "x"   # not [engine]\n') == {
        "block_size": "tokens per KV block"}
    with pytest.raises(KeyError, match="no default found"):
        reference.default("no_such_key")
