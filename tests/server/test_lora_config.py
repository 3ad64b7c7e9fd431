"""LoRA adapters in the configuration: `[[models]]` tables of kind "lora" (base, adapter_dir,
scale; nothing of an engine's own), `--lora NAME=DIR`, `TL_ENGINE__MODELS`, and the
`[engine]` keys max_loras, lora_merge, allow_runtime_lora, lora_root; every refusal names
the table and the key."""
from __future__ import annotations

import json

import pytest

from server.config import ConfigError, ServeConfig
from server.model_table import ModelEntry
from server.loading import model_config
from server.serve import config_from_args, parse_args

BASE = """
[engine]
model_dir = "chat"
max_loras = 2
allow_runtime_lora = true
lora_root = "adapters"
"""


def test_a_lora_table_is_read_with_its_folder_relative_to_the_file(tmp_path):
    cfg = ServeConfig.from_toml(BASE + """
[[models]]
id = "sql"
kind = "lora"
base = "chat"
adapter_dir = "adapters/sql"
scale = 0.5
""", env={}, base_dir=tmp_path)
    assert cfg.models == (ModelEntry(id="sql", kind="lora", base="chat",
                                     adapter_dir=str(tmp_path / "adapters/sql"), scale=0.5),)
    assert cfg.engine.max_loras == 2 and cfg.allow_runtime_lora
    assert cfg.lora_root == str(tmp_path / "adapters")


@pytest.mark.parametrize("table, named", [
    ('kind = "lora"\nbase = "chat"\n', "#1.adapter_dir"),
    ('kind = "lora"\nadapter_dir = "a"\n', "#1.base"),
    ('kind = "lora"\nbase = "chat"\nadapter_dir = "a"\nscale = 0\n', "#1.scale"),
    ('kind = "lora"\nbase = "chat"\nadapter_dir = "a"\nmodel_dir = "m"\n', "#1.model_dir: unknown key"),
    ('kind = "lora"\nbase = "chat"\nadapter_dir = "a"\nmax_num_seqs = 4\n', "#1.max_num_seqs"),
    ('kind = "lora"\nid = "chat"\nbase = "chat"\nadapter_dir = "a"\n', "already served"),
    ('kind = "adapter"\nmodel_dir = "m"\n', '#1.kind'),
])
def test_a_bad_lora_table_is_refused_naming_the_key(table, named):
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_toml(BASE + "[[models]]\n" + table, env={})
    assert named in str(info.value)


def test_max_loras_must_be_positive_and_comes_from_the_environment_too():
    with pytest.raises(ConfigError, match=r"\[engine\].max_loras"):
        ServeConfig.from_toml("[engine]\nmax_loras = 0\n", env={})
    cfg = ServeConfig.from_toml("", env={"TL_ENGINE__MAX_LORAS": "3"})
    assert cfg.engine.max_loras == 3 and ServeConfig().engine.max_loras == 4


def test_lora_merge_is_on_by_default_and_set_by_the_file_the_environment_or_a_model(tmp_path):
    assert ServeConfig().engine.lora_merge is True
    assert ServeConfig.from_toml("[engine]\nlora_merge = false\n", env={}).engine.lora_merge is False
    assert ServeConfig.from_toml("", env={"TL_ENGINE__LORA_MERGE": "false"}).engine.lora_merge is False
    with pytest.raises(ConfigError, match=r"\[engine\].lora_merge"):
        ServeConfig.from_toml("[engine]\nlora_merge = 1\n", env={})
    cfg = ServeConfig.from_toml(BASE + '[[models]]\nid = "other"\nmodel_dir = "other"\n'
                                'lora_merge = false\n', env={}, base_dir=tmp_path)
    assert model_config(cfg, cfg.models[0]).engine.lora_merge is False
    assert cfg.engine.lora_merge is True                            # that model's own only


def test_lora_tables_from_the_environment():
    tables = [{"id": "sql", "kind": "lora", "base": "chat", "adapter_dir": "/a/sql"}]
    cfg = ServeConfig.from_toml(BASE, env={"TL_ENGINE__MODELS": json.dumps(tables)})
    assert cfg.models == (ModelEntry(id="sql", kind="lora", base="chat", adapter_dir="/a/sql"),)


def test_the_lora_option_serves_each_adapter_on_the_first_chat_model():
    args = parse_args(["--model-dir", "/m/smol", "--lora", "sql=/a/sql", "--lora", "poet=/a/p"])
    cfg = config_from_args(args, env={})
    assert [(e.id, e.kind, e.base, e.adapter_dir) for e in cfg.models] == [
        ("sql", "lora", "smol", "/a/sql"), ("poet", "lora", "smol", "/a/p")]
    for bad, named in (("sql", "NAME=DIR"), ("=/a", "NAME=DIR"), ("smol=/a", "already served")):
        with pytest.raises(ConfigError, match=named):
            config_from_args(parse_args(["--model-dir", "/m/smol", "--lora", bad]), env={})
