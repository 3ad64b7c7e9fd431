"""`[[models]]` in runtime.toml: each table a model with its own id, folder, kind and
settings; a config without it is the single-model config of before; every refusal names
the table and the key."""
from __future__ import annotations

import pytest

from server.config import ConfigError, ServeConfig
from server.loading import model_config, model_entries
from server.model_table import ModelEntry
from server.worker.encoder_thread import ENCODER_BATCH_TOKENS

BASE = """
[engine]
model_dir = "chat"
queue_capacity = 64
max_num_seqs = 32
"""


def test_models_tables_are_read_with_paths_relative_to_the_file(tmp_path):
    cfg = ServeConfig.from_toml(BASE + """
[[models]]
model_dir = "models/all-minilm-l6-v2"
kind = "embedding"
max_batch_tokens = 1024
queue_capacity = 8
""", env={}, base_dir=tmp_path)
    [entry] = cfg.models
    assert entry == ModelEntry(id="all-minilm-l6-v2", kind="embedding", max_batch_tokens=1024,
                               model_dir=str(tmp_path / "models/all-minilm-l6-v2"),
                               settings=(("queue_capacity", 8),))
    assert [e.id for e in model_entries(cfg)] == ["chat", "all-minilm-l6-v2"]


def test_a_model_s_own_settings_override_the_engine_table_for_it_only(tmp_path):
    cfg = ServeConfig.from_toml(BASE + """
[[models]]
id = "second"
model_dir = "other"
max_num_seqs = 4
queue_deadline_ms = 500
""", env={}, base_dir=tmp_path)
    own = model_config(cfg, cfg.models[0])
    assert (own.model_id, own.engine.max_num_seqs, own.queue_deadline_ms) == ("second", 4, 500)
    assert own.queue_capacity == 64 and own.models == ()
    assert (cfg.engine.max_num_seqs, cfg.queue_deadline_ms) == (32, 120_000)
    assert cfg.models[0].max_batch_tokens == ENCODER_BATCH_TOKENS


def test_the_single_model_config_is_unchanged():
    cfg = ServeConfig.from_toml(BASE, env={})
    assert cfg.models == () and [e.id for e in model_entries(cfg)] == ["chat"]


@pytest.mark.parametrize("table, words", [
    ('model_dir = "x"\nport = 1', "[[models]] #1.port: unknown key"),
    ('id = "x"', "[[models]] #1.model_dir"),
    ('model_dir = "x"\nkind = "vision"', "[[models]] #1.kind"),
    ('model_dir = "x"\nmax_batch_tokens = 0', "[[models]] #1.max_batch_tokens"),
    ('model_dir = "x"\nmax_num_seqs = 0', "[[models]] #1.max_num_seqs: expected an integer"),
    ('model_dir = "x"\nid = "chat"', "'chat' is already served"),
])
def test_a_bad_table_is_refused_naming_the_table_and_key(table, words):
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_toml(BASE + "[[models]]\n" + table + "\n", env={})
    assert words in str(info.value)


def test_models_must_be_an_array_of_tables():
    with pytest.raises(ConfigError, match=r"\[\[models\]\] must be an array"):
        ServeConfig.from_toml("models = 3\n" + BASE, env={})


# --- TL_ENGINE__MODELS: [[models]] from the environment ---------------------------------

ENV_MODELS = ('[{"id": "minilm", "model_dir": "models/minilm", "kind": "embedding", '
              '"max_batch_tokens": 512}, {"id": "second", "model_dir": "/abs/chat-2", '
              '"queue_capacity": 4}]')


def test_env_models_replace_the_file_s_tables_paths_from_the_current_directory(tmp_path):
    text = BASE + '[[models]]\nid = "from-file"\nmodel_dir = "file-model"\n'
    cfg = ServeConfig.from_toml(text, env={"TL_ENGINE__MODELS": ENV_MODELS}, base_dir=tmp_path)
    assert cfg.models == (
        ModelEntry(id="minilm", model_dir="models/minilm", kind="embedding",
                   max_batch_tokens=512),
        ModelEntry(id="second", model_dir="/abs/chat-2", settings=(("queue_capacity", 4),)))
    assert [e.id for e in model_entries(cfg)] == ["chat", "minilm", "second"]


@pytest.mark.parametrize("value", ["", "[]"])
def test_empty_env_models_serve_the_first_model_alone(value):
    text = BASE + '[[models]]\nid = "from-file"\nmodel_dir = "file-model"\n'
    assert ServeConfig.from_toml(text, env={"TL_ENGINE__MODELS": value}).models == ()


@pytest.mark.parametrize("value, words", [
    ("[{", "TL_ENGINE__MODELS: expected a JSON array of model tables"),
    ('{"id": "x"}', "TL_ENGINE__MODELS must be an array of tables"),
    ('[{"model_dir": "x", "port": 1}]', "TL_ENGINE__MODELS #1.port: unknown key"),
    ('[{"model_dir": "x", "max_num_seqs": 0}]',
     "TL_ENGINE__MODELS #1.max_num_seqs: expected an integer"),
    ('[{"id": "a", "model_dir": "x"}, {"id": "a", "model_dir": "y"}]', "'a' is already served"),
    ('[{"model_dir": "x", "id": "chat"}]', "'chat' is already served"),
])
def test_bad_env_models_are_refused_naming_the_variable_and_key(value, words):
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_toml(BASE, env={"TL_ENGINE__MODELS": value})
    assert words in str(info.value)
