"""ServeConfig: `runtime.toml`'s `[engine]` table plus `TL_ENGINE__<KEY>` overrides.

The configuration is read and validated ONCE, at start-up, into a frozen dataclass; a bad
file never half-starts a server. Every refusal is a `ConfigError` whose message names the
key (`[engine].block_size: expected an integer >= 1, got 0`), because the person reading it
is fixing a ConfigMap at 3 a.m.

Precedence (lowest to highest): the defaults in `KEYS`, the `[engine]` table, environment
variables `TL_ENGINE__<KEY>` (upper-case key; nested speculative keys as
`TL_ENGINE__SPECULATIVE__<KEY>`). Environment values are strings and are converted with the
key's type; `TL_ENGINE__` variables naming no key are refused like unknown TOML keys.
`TL_ENGINE__MODELS` is the one structured variable: a JSON array of `[[models]]` tables
(`[{"id": "minilm", "model_dir": "/models/minilm", "kind": "embedding"}]`) that replaces
the file's `[[models]]` whole ("" or "[]": none), checked by the same rules.

Listen addresses are `"host:port"`; both default to loopback (`127.0.0.1`); `":8000"` or
`"0.0.0.0:8000"` opens a listener on all interfaces; port 0 picks a free port (the tests).

Paths in a config file (`model_dir`, `api_key_file`, an `access_log` file, `chat_template`,
`trace_file`) are relative to
the file's own directory, not to the current one; paths from the environment or the command
line are relative to the current directory. A `[defaults]` table (and `TL_DEFAULTS__<KEY>`)
sets server-side sampling defaults (server/api/defaults.py); `[[models]]` tables name more
models to serve beside `[engine].model_dir`'s (server/model_table.py). `settings_changed` lists every key
that differs from its default, the API key redacted, for the start-up log.
"""
from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

from engine.api import (DEFAULT_MODEL_DIR, PREFIX_CACHE_MODES, PREFIX_CACHE_RULE,
                        SPECULATIVE_METHODS, SPECULATIVE_RULES, EngineConfig, InvalidConfig,
                        SpeculativeConfig, check_speculative_config, model_name, user_model_dir)

from server.api import defaults as sampling
from server.api.generation import DEFAULT_MAX_STOP_STRINGS
from server.worker.arrivals import DEFAULT_ARRIVAL_WINDOW_MS
from server.http.connstate import parse_address
from server.batch.settings import BatchConfig, BatchConfigError, batch_config
from server.model_table import ModelEntry, ModelTableError, check_unique_ids, parse_models

ENV_PREFIX = "TL_ENGINE__"
ENV_MODELS = ENV_PREFIX + "MODELS"       # [[models]] from the environment: a JSON array
ACCESS_LOG_STREAMS = ("stdout", "stderr", "off")   # else: a file path
REDACTED = "<redacted>"
MAX_ARRIVAL_WINDOW_MS = 1000                       # a longer wait would be a delay, not a window
# Speculation is on unless a config says "none": its outputs are identical by construction
# and its draft-length rule (engine/core/drafts/policy.py) keeps it to where it pays. "auto"
# is every draft source (grammar, prediction, suffix, prompt lookup); a source's name, it alone.
DEFAULT_SPECULATIVE = "auto"
# A chat template that thinks (<think>, enable_thinking) gets its answers' reasoning kept
# apart ("auto"), or served as generated, reasoning in `content` ("off").
REASONING_AUTO, REASONING_OFF = "auto", "off"
REASONING_MODES = (REASONING_AUTO, REASONING_OFF)


class ConfigError(ValueError):
    """A configuration value or key was refused; the message names the key."""


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    model_dir: str = DEFAULT_MODEL_DIR
    model_id: str = ""                         # "" in the table: engine.model.loader.model_name
    http_listen: str = "127.0.0.1:8000"
    health_listen: str = "127.0.0.1:9464"
    api_key: str = field(default="", repr=False)   # "": no auth; never printed
    cors_allow_origins: str = ""               # "": CORS off; "*" or "https://a, https://b"
    access_log: str = "stdout"                 # JSON lines: "stdout" | "stderr" | "off" | a path
    default_overrides: tuple[tuple[str, Any], ...] = ()   # [defaults] + TL_DEFAULTS__ values
    config_path: str = ""                      # the file this came from ("" = none)
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(
        speculative=SpeculativeConfig(method=DEFAULT_SPECULATIVE)))
    queue_capacity: int = 1024                 # admitted but not yet scheduled requests
    queue_deadline_ms: int = 120_000           # unscheduled past this -> 503 no_capacity (before the head)
    handle_signals: bool = False               # run() sets True: SIGTERM drains
    arrival_window_ms: int = DEFAULT_ARRIVAL_WINDOW_MS   # an idle engine gathers a burst (0: off)
    drain_timeout_s: float = 60.0              # in-flight streams get this long on SIGTERM
    ping_interval_s: float = 15.0              # SSE ": ping" after this long without a token
    engine_view: bool = True                   # /engine and /engine/snapshot on the health port
    trace_file: str = ""                       # Chrome trace-event JSON of the steps; "" = off
    trace_max_mib: int = 64                    # the trace file stops (and says so) at this size
    chat_template: str = ""                    # a Jinja file replacing the model's own; "" = the model's
    reasoning: str = REASONING_AUTO            # "auto": a thinking template's reasoning kept apart; "off"
    models: tuple[ModelEntry, ...] = ()        # [[models]]: more models beside model_dir's
    max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS   # `stop` sequences a request may give
    allow_runtime_lora: bool = False           # POST /v1/load_lora_adapter and unload (needs api_key)
    lora_root: str = ""                        # runtime adapters must resolve inside this folder
    batch: BatchConfig = field(default_factory=BatchConfig)   # [batch]: the Batch API

    def __post_init__(self):
        if not self.model_id:
            object.__setattr__(self, "model_id", model_name(self.model_dir))

    @staticmethod
    def for_model(model_dir: str | os.PathLike, **overrides: Any) -> "ServeConfig":
        """Defaults for serving one model on loopback, ports picked by the OS (tests)."""
        base = ServeConfig(model_dir=str(model_dir), http_listen="127.0.0.1:0",
                           health_listen="127.0.0.1:0", access_log="off")
        return replace(base, **overrides) if overrides else base

    @staticmethod
    def from_toml(text: str, env: Mapping[str, str] | None = None,
                  base_dir: str | os.PathLike | None = None) -> "ServeConfig":
        """`base_dir`: the config file's directory, for its relative paths (None: as given)."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"runtime.toml: {exc}") from None
        unknown = sorted(set(document) - {"engine", "defaults", "models", "batch"})
        if unknown:
            raise ConfigError(f"unknown table or key {unknown[0]!r} "
                              "(only [engine], [defaults], [[models]] and [batch] are read)")
        table, table_defaults = document.get("engine", {}), document.get("defaults", {})
        if not isinstance(table, dict) or not isinstance(table_defaults, dict):
            raise ConfigError("[engine] and [defaults] must be tables")
        values = _relative_to(_from_table(table), base_dir)
        values.update(_from_env(env or {}))
        try:
            overrides = {**sampling.from_table(table_defaults), **sampling.from_env(env or {})}
        except sampling.DefaultsError as exc:
            raise ConfigError(str(exc)) from None
        values["default_overrides"] = tuple(sorted(overrides.items()))
        values["models"] = _models(document.get("models", []), env or {}, base_dir)
        try:
            values["batch"] = batch_config(document.get("batch", {}), env or {}, base_dir)
        except BatchConfigError as exc:
            raise ConfigError(str(exc)) from None
        return _build(values)

    @staticmethod
    def load(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> "ServeConfig":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
        cfg = ServeConfig.from_toml(text, os.environ if env is None else env,
                                    base_dir=Path(path).resolve().parent)
        return replace(cfg, config_path=str(Path(path).resolve()))

# --- the key table -----------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    kind: type                                 # str | int | float | bool
    check: Callable[[Any], bool]               # a valid value?
    rule: str                                  # what the check means, for the message


def _positive(v) -> bool:
    return v >= 1


def _non_negative(v) -> bool:
    return v >= 0


def _listen_ok(v: str) -> bool:
    try:
        parse_address(v)
        return True
    except ValueError:
        return False


_ANY = Key(str, lambda v: True, "a string")
KEYS: dict[str, Key] = {
    "model_dir": Key(str, bool, "a non-empty path"),
    "model_id": _ANY,
    "api_key": _ANY,
    "api_key_file": _ANY,
    "cors_allow_origins": _ANY,
    "access_log": Key(str, bool, 'a file path, "stdout", "stderr" or "off"'),
    "http_listen": Key(str, _listen_ok, "host:port or :port"),
    "health_listen": Key(str, _listen_ok, "host:port or :port"),
    "prefix_cache": Key(str, lambda v: v in PREFIX_CACHE_MODES, PREFIX_CACHE_RULE),
    "prefill_chunk": Key(int, _positive, "an integer >= 1"),
    "block_size": Key(int, _positive, "an integer >= 1"),
    "kv_cache_mib": Key(int, _positive, "an integer >= 1"),
    "num_kv_blocks": Key(int, _positive, "an integer >= 1"),
    "max_num_seqs": Key(int, _positive, "an integer >= 1"),
    "max_loras": Key(int, _positive, "an integer >= 1"),
    "lora_merge": Key(bool, lambda v: True, "true or false"),
    "allow_runtime_lora": Key(bool, lambda v: True, "true or false"),
    "lora_root": _ANY,
    "max_batched_tokens": Key(int, _positive, "an integer >= 1"),
    "tokens_beside_decode": Key(int, _positive, "an integer >= 1"),
    "itl_target_ms": Key(int, lambda v: v >= 0, "an integer >= 0 (0: off)"),
    "max_model_len": Key(int, _positive, "an integer >= 1"),
    "queue_capacity": Key(int, _positive, "an integer >= 1"),
    "queue_deadline_ms": Key(int, _positive, "an integer >= 1"),
    "arrival_window_ms": Key(int, lambda v: 0 <= v <= MAX_ARRIVAL_WINDOW_MS,
                             f"an integer from 0 (off) to {MAX_ARRIVAL_WINDOW_MS}"),
    "drain_timeout_s": Key(float, _non_negative, "a number >= 0"),
    "ping_interval_s": Key(float, lambda v: v > 0, "a number > 0"),
    "engine_view": Key(bool, lambda v: True, "true or false"),
    "trace_file": _ANY,
    "trace_max_mib": Key(int, _positive, "an integer >= 1"),
    "chat_template": _ANY,
    "max_stop_strings": Key(int, _positive, "an integer >= 1"),
    "reasoning": Key(str, lambda v: v in REASONING_MODES, '"auto" or "off"'),
    "speculative": Key(str, lambda v: v in ("", "none") + SPECULATIVE_METHODS,
                       f'{SPECULATIVE_RULES["method"]} or "none" (or a [engine.speculative] table)'),
}
# [engine.speculative]: the kinds are read here, the values checked by the engine's own
# rule (check_speculative_config) once the table is whole; the words are the engine's too.
SPECULATIVE_KINDS: dict[str, type] = {"method": str, "num_speculative_tokens": int,
                                      "prompt_lookup_min": int, "prompt_lookup_max": int}
SPECULATIVE_KEYS: dict[str, Key] = {name: Key(kind, lambda v: True, SPECULATIVE_RULES[name])
                                    for name, kind in SPECULATIVE_KINDS.items()}
ENGINE_FIELDS = ("prefill_chunk", "block_size", "kv_cache_mib", "num_kv_blocks",
                 "max_num_seqs", "max_batched_tokens", "tokens_beside_decode", "itl_target_ms",
                 "max_model_len", "prefix_cache", "max_loras", "lora_merge")
SERVE_FIELDS = ("model_dir", "model_id", "http_listen", "health_listen", "queue_capacity",
                "queue_deadline_ms", "arrival_window_ms", "drain_timeout_s",
                "ping_interval_s", "engine_view", "trace_file", "trace_max_mib", "chat_template",
                "reasoning", "max_stop_strings", "allow_runtime_lora", "lora_root",
                "api_key", "cors_allow_origins", "access_log", "default_overrides", "models")
# Relative to the config file's own folder when they come from a file.
PATH_KEYS = ("model_dir", "api_key_file", "access_log", "trace_file", "chat_template",
             "lora_root")


def _checked(name: str, key: Key, value: Any) -> Any:
    kind_ok = (isinstance(value, key.kind) and not (key.kind is int and isinstance(value, bool))
               or key.kind is float and isinstance(value, int) and not isinstance(value, bool))
    if not kind_ok or not key.check(value):
        raise ConfigError(f"[engine].{name}: expected {key.rule}, got {value!r}")
    return float(value) if key.kind is float else value

def _from_table(table: dict) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, value in table.items():
        if name == "speculative" and isinstance(value, dict):
            values["speculative"] = {k: _checked(f"speculative.{k}", _spec_key(k), v)
                                     for k, v in value.items()}
            continue
        if name not in KEYS:
            raise ConfigError(f"[engine].{name}: unknown key")
        values[name] = _checked(name, KEYS[name], value)
    return values

def _model_value(base_dir, where: str, name: str, value: Any) -> Any:
    """A `[[models]]` table's own setting, checked by the key table (paths made relative)."""
    try:
        value = _checked(name, KEYS[name], value)
    except ConfigError as exc:
        raise ModelTableError(str(exc).replace("[engine]", where, 1)) from None
    if name in PATH_KEYS and value and base_dir is not None and not Path(value).is_absolute():
        value = str(Path(base_dir) / value)
    return value

def _spec_key(name: str) -> Key:
    if name not in SPECULATIVE_KEYS:
        raise ConfigError(f"[engine].speculative.{name}: unknown key")
    return SPECULATIVE_KEYS[name]

def _convert(name: str, key: Key, text: str) -> Any:
    """An environment string -> the key's type (then checked like a TOML value)."""
    try:
        if key.kind is int:
            return int(text.strip())
        if key.kind is float:
            return float(text.strip())
        if key.kind is bool:
            return {"true": True, "1": True, "false": False, "0": False}[text.strip().lower()]
        return text
    except (ValueError, KeyError):
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} ([engine].{name}): "
                          f"expected {key.rule}, got {text!r}") from None

def _models(tables: Any, env: Mapping[str, str],
            base_dir: str | os.PathLike | None) -> tuple[ModelEntry, ...]:
    """`[[models]]`, or `TL_ENGINE__MODELS` (a JSON array of the same tables; its paths
    relative to the current directory) in its place when set."""
    text, source = env.get(ENV_MODELS), "[[models]]"
    if text is not None:
        try:
            tables = json.loads(text) if text.strip() else []
        except ValueError as exc:
            raise ConfigError(f"{ENV_MODELS}: expected a JSON array of model tables "
                              f"([{{\"id\": ..., \"model_dir\": ...}}]): {exc}") from None
        source, base_dir = ENV_MODELS, None
    try:
        return parse_models(tables, partial(_model_value, base_dir), base_dir, source=source)
    except ModelTableError as exc:
        raise ConfigError(str(exc)) from None


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    for var, text in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_MODELS:
            continue
        path = var[len(ENV_PREFIX):].lower().split("__")
        if len(path) == 2 and path[0] == "speculative":
            key = _spec_key(path[1])
            spec[path[1]] = _checked(f"speculative.{path[1]}", key, _convert(path[1], key, text))
        elif len(path) == 1 and path[0] in KEYS:
            key = KEYS[path[0]]
            values[path[0]] = _checked(path[0], key, _convert(path[0], key, text))
        else:
            raise ConfigError(f"{var}: unknown key [engine].{'.'.join(path)}")
    if spec:
        base = values.get("speculative")
        values["speculative"] = {**(base if isinstance(base, dict) else {}), **spec}
    return values

def _speculative(value: Any) -> SpeculativeConfig | None:
    if value in (None, "", "none"):
        return None
    spec = SpeculativeConfig(method=value) if value in SPECULATIVE_METHODS else SpeculativeConfig(**value)
    try:
        check_speculative_config(spec)
    except InvalidConfig as exc:
        raise ConfigError(f"[engine].{exc.field}: {exc.problem}") from None
    return spec

def _relative_to(values: dict[str, Any], base_dir: str | os.PathLike | None) -> dict[str, Any]:
    """A config file's relative paths, resolved against the file's directory."""
    if base_dir is None:
        return values
    for name in PATH_KEYS:
        value = values.get(name)
        if value and value not in ACCESS_LOG_STREAMS and not Path(value).is_absolute():
            values[name] = str(Path(base_dir) / value)
    return values


def _default_model_dir() -> str:
    """`artifacts/models/smol-135m` when the current directory has it, else the per-user
    folder when that exists, else the former (its error names the fetch command)."""
    if Path(DEFAULT_MODEL_DIR).exists() or not user_model_dir().exists():
        return DEFAULT_MODEL_DIR
    return str(user_model_dir())


def _api_key(values: dict[str, Any]) -> None:
    path = values.pop("api_key_file", "")
    if not path:
        return
    if values.get("api_key"):
        raise ConfigError("[engine].api_key_file: set api_key or api_key_file, not both")
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"[engine].api_key_file: cannot read {path}: {exc.strerror}") from None
    if not key:
        raise ConfigError(f"[engine].api_key_file: {path} is empty")
    values["api_key"] = key


def _build(values: dict[str, Any]) -> ServeConfig:
    _api_key(values)
    if "model_dir" not in values:
        values["model_dir"] = _default_model_dir()
    engine = {k: values[k] for k in ENGINE_FIELDS if k in values}
    serve = {k: values[k] for k in SERVE_FIELDS if k in values}
    engine_cfg = EngineConfig(**engine, speculative=_speculative(values.get("speculative",
                                                                           DEFAULT_SPECULATIVE)))
    cfg = ServeConfig(**serve, engine=engine_cfg, batch=values.get("batch", BatchConfig()))
    try:
        check_unique_ids(cfg.model_id, cfg.models)
    except ModelTableError as exc:
        raise ConfigError(str(exc)) from None
    return cfg


def settings(cfg: ServeConfig) -> dict[str, Any]:
    """Every setting as a flat `[table].key -> value` map (the API key redacted)."""
    out: dict[str, Any] = {f"[engine].{k}": getattr(cfg, k) for k in SERVE_FIELDS
                           if k not in ("default_overrides", "models")}
    out.update({f"[engine].{k}": getattr(cfg.engine, k) for k in ENGINE_FIELDS})
    out["[engine].speculative"] = cfg.engine.speculative
    out.update({f"[defaults].{k}": v for k, v in cfg.default_overrides})
    out.update({f"[[models]].{m.id}": m for m in cfg.models})
    out.update({f"[batch].{f.name}": getattr(cfg.batch, f.name) for f in fields(cfg.batch)})
    if cfg.api_key:
        out["[engine].api_key"] = REDACTED
    return out


def settings_changed(cfg: ServeConfig) -> list[str]:
    """`key = value` for every setting that differs from its default, in a stable order."""
    base = settings(ServeConfig(model_dir=DEFAULT_MODEL_DIR))
    mine = settings(cfg)
    return [f"{k} = {v if v == REDACTED else repr(v)}"
            for k, v in mine.items() if base.get(k, object()) != v]
