"""ServeConfig: runtime.toml [engine] keys, defaults, TL_ENGINE__ overrides, refusals."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.api import SpeculativeConfig
from engine.model.loader import model_name
from server.config import KEYS, ConfigError, ServeConfig
from server.http.connstate import parse_address

REPO = Path(__file__).resolve().parents[2]

CHAPTER_TOML = """
[engine]
model_dir = "artifacts/models/smol-135m/v3"
http_listen = ":8000"
health_listen = ":9464"
prefix_cache = "radix"
prefill_chunk = 512
"""


def test_runtime_toml_and_env_overrides():
    cfg = ServeConfig.from_toml(CHAPTER_TOML, {})
    assert cfg.model_dir == "artifacts/models/smol-135m/v3"
    assert cfg.model_id == "smol-135m"                    # trailing version folder skipped
    assert cfg.http_listen == ":8000" and cfg.health_listen == ":9464"
    assert cfg.engine.prefix_cache == "radix" and cfg.engine.prefill_chunk == 512
    # defaults
    assert cfg.engine.block_size == 16 and cfg.queue_capacity == 1024
    assert cfg.engine.speculative == SpeculativeConfig()      # on by default ...
    assert SpeculativeConfig().method == "auto"               # ... with every draft source
    assert ServeConfig.from_toml('[engine]\nspeculative = "none"\n', {}).engine.speculative is None
    # environment overrides win over the file, converted with the key's type
    env = {"TL_ENGINE__PREFILL_CHUNK": "64", "TL_ENGINE__PREFIX_CACHE": "none",
           "TL_ENGINE__QUEUE_CAPACITY": "3", "TL_ENGINE__MODEL_ID": "mine",
           "TL_ENGINE__DRAIN_TIMEOUT_S": "0.5", "PATH": "/bin", "TL_OTHER__X": "1"}
    cfg = ServeConfig.from_toml(CHAPTER_TOML, env)
    assert cfg.engine.prefill_chunk == 64
    assert cfg.engine.prefix_cache == "none"
    assert cfg.queue_capacity == 3    # the one queue bound: server/worker/bridge.py
    assert cfg.model_id == "mine" and cfg.drain_timeout_s == 0.5
    # refused keys and values name the key
    refusals = [
        ("[engine]\nbogus = 1\n", {}, "bogus"),
        ("[engine]\nblock_size = 0\n", {}, "block_size"),
        ("[engine]\nblock_size = \"16\"\n", {}, "block_size"),
        ("[engine]\nprefix_cache = \"lru\"\n", {}, "prefix_cache"),
        ("[engine]\nhttp_listen = \"8000\"\n", {}, "http_listen"),
        ("[engine]\nqueue_capacity = true\n", {}, "queue_capacity"),
        ("[server]\nport = 1\n", {}, "server"),
        (CHAPTER_TOML, {"TL_ENGINE__BLOCK_SIZE": "big"}, "BLOCK_SIZE"),
        (CHAPTER_TOML, {"TL_ENGINE__MAX_NUM_SEQS": "0"}, "max_num_seqs"),
        (CHAPTER_TOML, {"TL_ENGINE__NOPE": "1"}, "nope"),
        # the tests' old step delay is no key: slow steps are a test seam (tests/fakes.py)
        ("[engine]\nstep_delay_s = 0.0\n", {}, "step_delay_s: unknown key"),
        (CHAPTER_TOML, {"TL_ENGINE__STEP_DELAY_S": "0.02"}, "unknown key [engine].step_delay_s"),
        ("[engine\n", {}, "runtime.toml"),
    ]
    for text, env, named in refusals:
        with pytest.raises(ConfigError) as info:
            ServeConfig.from_toml(text, env)
        assert named in str(info.value), (text, env, str(info.value))


def test_max_stop_strings_is_four_unless_set_in_the_file_or_the_environment():
    assert ServeConfig().max_stop_strings == 4
    assert ServeConfig.from_toml("[engine]\nmax_stop_strings = 16\n", {}).max_stop_strings == 16
    env = {"TL_ENGINE__MAX_STOP_STRINGS": "32"}
    assert ServeConfig.from_toml("[engine]\nmax_stop_strings = 16\n", env).max_stop_strings == 32
    for text, env in (("[engine]\nmax_stop_strings = 0\n", {}),
                      ("[engine]\n", {"TL_ENGINE__MAX_STOP_STRINGS": "many"})):
        with pytest.raises(ConfigError, match="max_stop_strings"):
            ServeConfig.from_toml(text, env)


def test_speculative_forms():
    cfg = ServeConfig.from_toml('[engine]\nspeculative = "prompt_lookup"\n', {})
    assert cfg.engine.speculative == SpeculativeConfig(method="prompt_lookup")
    cfg = ServeConfig.from_toml('[engine]\nspeculative = "suffix"\n', {})
    assert cfg.engine.speculative == SpeculativeConfig(method="suffix")
    cfg = ServeConfig.from_toml(
        '[engine.speculative]\nmethod = "prompt_lookup"\nnum_speculative_tokens = 6\n', {})
    assert cfg.engine.speculative.num_speculative_tokens == 6
    cfg = ServeConfig.from_toml('[engine]\n', {"TL_ENGINE__SPECULATIVE": "prompt_lookup",
                                               "TL_ENGINE__SPECULATIVE__PROMPT_LOOKUP_MAX": "3"})
    assert cfg.engine.speculative.prompt_lookup_max == 3
    with pytest.raises(ConfigError, match="speculative.depth"):
        ServeConfig.from_toml('[engine.speculative]\ndepth = 2\n', {})
    with pytest.raises(ConfigError, match="speculative"):
        ServeConfig.from_toml('[engine]\nspeculative = "medusa"\n', {})


def test_speculative_values_are_refused_by_the_engine_rule_naming_the_key():
    refusals = [
        ('[engine.speculative]\nmethod = "medusa"\n', {}, "[engine].speculative.method"),
        ('[engine.speculative]\nnum_speculative_tokens = 0\n', {},
         "[engine].speculative.num_speculative_tokens: expected an integer >= 1, got 0"),
        ('[engine.speculative]\nprompt_lookup_min = "2"\n', {}, "[engine].speculative.prompt_lookup_min"),
        ('[engine]\n', {"TL_ENGINE__SPECULATIVE__PROMPT_LOOKUP_MAX": "0"},
         "[engine].speculative.prompt_lookup_max"),
        ('[engine.speculative]\nprompt_lookup_min = 3\nprompt_lookup_max = 2\n', {},
         "[engine].speculative.prompt_lookup_min: must be <= prompt_lookup_max"),
    ]
    for text, env, named in refusals:
        with pytest.raises(ConfigError) as info:
            ServeConfig.from_toml(text, env)
        assert named in str(info.value), (text, env, str(info.value))


def test_repo_runtime_toml_loads_with_defaults():
    cfg = ServeConfig.load(REPO / "runtime.toml", env={})
    assert cfg.model_id == "smol-135m"
    # safe defaults: both listeners on loopback, in the file and in the code
    assert cfg.http_listen == "127.0.0.1:8000" and cfg.health_listen == "127.0.0.1:9464"
    assert (ServeConfig().http_listen, ServeConfig().health_listen) == (cfg.http_listen,
                                                                        cfg.health_listen)
    defaults = ServeConfig()
    assert cfg.engine == defaults.engine and cfg.queue_capacity == defaults.queue_capacity
    with pytest.raises(ConfigError, match="cannot read"):
        ServeConfig.load(REPO / "no-such.toml", env={})
    # it documents every key with its default (commented out where the default is derived)
    text = (REPO / "runtime.toml").read_text(encoding="utf-8")
    for key in KEYS:
        assert re.search(rf"^#? ?{key} = ", text, re.MULTILINE), key
    assert cfg.ping_interval_s == defaults.ping_interval_s


def test_for_model_and_names():
    cfg = ServeConfig.for_model("/x/models/succ")
    assert cfg.model_id == "succ" and cfg.http_listen.endswith(":0")
    # the served id is the loader's model name (one "version folder" rule)
    assert model_name("a/smol-135m/v3") == "smol-135m"
    assert model_name("a/smol-135m/v3/") == "smol-135m"
    assert ServeConfig.for_model("a/smol-135m/v1.2").model_id == "smol-135m"
    # listen addresses: the loop's parser checks them (one parser for config and bind)
    assert parse_address(":8000") == ("", 8000)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(ValueError):
        parse_address("host:99999")
    for address in ("host:99999", "a b:80", "::1:80"):
        with pytest.raises(ConfigError, match="http_listen"):
            ServeConfig.from_toml(f'[engine]\nhttp_listen = "{address}"\n', {})
    assert ServeConfig.from_toml('[engine]\nhttp_listen = "[::1]:80"\n', {}).http_listen


def test_engine_view_and_trace_keys_from_the_table_the_env_and_the_command_line():
    from server.serve import config_from_args, parse_args
    cfg = ServeConfig.from_toml('[engine]\nengine_view = false\ntrace_file = "t.json"\n'
                                "trace_max_mib = 8\n", env={})
    assert (cfg.engine_view, cfg.trace_file, cfg.trace_max_mib) == (False, "t.json", 8)
    cfg = ServeConfig.from_toml("", env={"TL_ENGINE__ENGINE_VIEW": "false",
                                         "TL_ENGINE__TRACE_FILE": "x.json"})
    assert cfg.engine_view is False and cfg.trace_file == "x.json"
    assert ServeConfig.from_toml("", env={}).engine_view is True
    for text, named in (("[engine]\nengine_view = 1\n", "engine_view"),
                        ("[engine]\ntrace_max_mib = 0\n", "trace_max_mib")):
        with pytest.raises(ConfigError, match=named):
            ServeConfig.from_toml(text, env={})
    args = parse_args(["--trace-file", "run.json"])
    assert config_from_args(args, env={}).trace_file == "run.json"


def test_chat_template_key_from_the_file_the_env_and_the_command_line(tmp_path):
    from server.serve import config_from_args, parse_args
    assert ServeConfig.from_toml("", env={}).chat_template == ""          # the model's own
    toml = tmp_path / "conf" / "runtime.toml"
    toml.parent.mkdir()
    toml.write_text('[engine]\nchat_template = "templates/chat.jinja"\n', encoding="utf-8")
    # relative to the config file's folder, like the other paths
    assert ServeConfig.load(toml, env={}).chat_template == str(tmp_path / "conf" / "templates" / "chat.jinja")
    env = {"TL_ENGINE__CHAT_TEMPLATE": "other.jinja"}
    assert ServeConfig.load(toml, env=env).chat_template == "other.jinja"   # env: as given
    args = parse_args(["--config", str(toml), "--chat-template", "cli.jinja"])
    assert config_from_args(args, env=env).chat_template == "cli.jinja"     # the flag wins
    with pytest.raises(ConfigError, match=r"\[engine\].chat_template"):
        ServeConfig.from_toml("[engine]\nchat_template = 3\n", env={})


def test_reasoning_key_from_the_file_the_env_and_the_command_line():
    from server.serve import config_from_args, parse_args
    assert ServeConfig.from_toml("", env={}).reasoning == "auto"
    assert ServeConfig.from_toml('[engine]\nreasoning = "off"\n', env={}).reasoning == "off"
    env = {"TL_ENGINE__REASONING": "off"}
    assert ServeConfig.from_toml('[engine]\nreasoning = "auto"\n', env=env).reasoning == "off"
    args = parse_args(["--reasoning", "auto"])
    assert config_from_args(args, env=env).reasoning == "auto"          # the flag wins
    for text in ('[engine]\nreasoning = "on"\n', "[engine]\nreasoning = false\n"):
        with pytest.raises(ConfigError, match=r"\[engine\].reasoning: expected \"auto\" or \"off\""):
            ServeConfig.from_toml(text, env={})
    with pytest.raises(SystemExit):
        parse_args(["--reasoning", "maybe"])


def test_the_batch_table_with_its_environment_overrides(tmp_path):
    from server.batch.settings import BatchConfig
    assert ServeConfig.from_toml("", env={}).batch == BatchConfig()
    assert not BatchConfig().is_on
    cfg = ServeConfig.from_toml('[batch]\ndir = "data"\nmax_running = 3\n',
                                env={"TL_BATCH__MAX_FILE_MIB": "20"}, base_dir=tmp_path)
    assert cfg.batch == BatchConfig(dir=str(tmp_path / "data"), max_file_mib=20,
                                    max_dir_mib=1024, max_running=3)
    assert ServeConfig.from_toml("", env={"TL_BATCH__DIR": "/srv/b"}).batch.dir == "/srv/b"
    for text, env, named in [('[batch]\nfolder = "x"', {}, "[batch].folder: unknown key"),
                             ("", {"TL_BATCH__RUNNING": "2"}, "TL_BATCH__RUNNING"),
                             ("[batch]\nmax_running = 0", {}, "[batch].max_running"),
                             ("", {"TL_BATCH__MAX_DIR_MIB": "lots"}, "TL_BATCH__MAX_DIR_MIB"),
                             ("batch = 3", {}, "[batch] must be a table")]:
        with pytest.raises(ConfigError, match=re.escape(named)):
            ServeConfig.from_toml(text, env=env)
