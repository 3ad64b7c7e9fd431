"""The configuration reference, rendered from the code so it cannot drift.

Every `[engine]` key comes from `server/config.py`'s `KEYS` (its name, and the words its
check refuses with), its default from the dataclasses that hold it (`ServeConfig`, the
engine's `EngineConfig`), its environment variable from the one naming rule
(`TL_ENGINE__<KEY>`), and its one-line meaning from the comment beside it in runtime.toml,
the annotated file that lists every key (a key missing there stops the rendering). The
`[engine.speculative]` and `[defaults]` tables come from `SpeculativeConfig` and
`server/api/defaults.py` the same way.

    python docs/config_reference.py           # rewrite the tables in README.md and docs/configuration.md
    python docs/config_reference.py --check   # exit 1, naming the file, if one is out of date

Each table sits between a `<!-- config-reference:NAME -->` line and `<!-- /config-reference -->`;
everything else in those files is written by hand. tests/test_config_reference.py runs
the check.
"""
from __future__ import annotations

import re
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import EngineConfig, SpeculativeConfig  # noqa: E402
from server import config  # noqa: E402
from server.api import defaults as sampling  # noqa: E402

RUNTIME_TOML = ROOT / "runtime.toml"
TARGETS = {"README.md": ("engine-short",),
           "docs/configuration.md": ("engine", "speculative", "defaults")}
BLOCK = re.compile(r"(<!-- config-reference:([\w-]+) -->\n)(.*?)(<!-- /config-reference -->)",
                   re.DOTALL)
# Keys whose default no dataclass field holds as written, with that default (`speculative`:
# the engine's field holds the parsed table, ServeConfig's factory the method's name).
NOT_FIELDS = {"api_key_file": "", "speculative": config.DEFAULT_SPECULATIVE}
# `key = value  # meaning`, the key commented out or not, in runtime.toml's [engine] table.
HEADER = re.compile(r"^\[\[?[\w.]+\]\]?$")      # a line that is only a table header
TOML_LINE = re.compile(r"^#?\s*([a-z_]+)\s*=\s*(?:\"[^\"]*\"|\S+)\s+#\s*(.+)$")


def meanings(toml_text: str = "") -> dict[str, str]:
    """key -> the comment beside it in runtime.toml's [engine] table (its first mention)."""
    out: dict[str, str] = {}
    inside = False
    for line in (toml_text or RUNTIME_TOML.read_text(encoding="utf-8")).splitlines():
        header = line.lstrip("# ").strip()
        if HEADER.match(header):
            inside = header == "[engine]"       # a commented `# [[models]]` ends it too
            continue
        if inside and (m := TOML_LINE.match(line.strip())) and m[1] in config.KEYS:
            out.setdefault(m[1], m[2].strip())
    return out


def default(name: str) -> Any:
    """The value a key has when no file and no variable set it."""
    if name in NOT_FIELDS:
        return NOT_FIELDS[name]
    for holder in (config.ServeConfig, EngineConfig):
        for f in fields(holder):
            if f.name == name and f.default is not MISSING:
                return f.default
    raise KeyError(f"{name}: no default found in ServeConfig or EngineConfig (a field "
                   f"there, or an entry of NOT_FIELDS in docs/config_reference.py)")


def toml_value(value: Any) -> str:
    """A default as it would be written in runtime.toml, in backticks; unset ones are words."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`" + str(value).lower() + "`"
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    return "`" + text.replace("|", "\\|") + "`"          # in a code span only `|` is special


def cell(text: str) -> str:
    """Text safe in a Markdown table cell: `|` ends a cell, `<think>` would be read as HTML."""
    return (text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("*", "\\*"))


def engine_rows(short: bool) -> list[str]:
    help_ = meanings()
    missing = sorted(set(config.KEYS) - set(help_))
    if missing:
        raise KeyError(f"runtime.toml has no commented line for {missing}: add "
                       "`key = default  # meaning` (commented out if unset) to [engine]")
    if short:
        rows = ["| key | default | what it sets |", "|---|---|---|"]
        return rows + [f"| `{k}` | {toml_value(default(k))} | {cell(help_[k])} |"
                       for k in config.KEYS]
    rows = ["| key | environment | accepts | default | what it sets |", "|---|---|---|---|---|"]
    return rows + [f"| `{k}` | `{config.ENV_PREFIX}{k.upper()}` | {cell(key.rule)} | "
                   f"{toml_value(default(k))} | {cell(help_[k])} |"
                   for k, key in config.KEYS.items()]


def speculative_rows() -> list[str]:
    rows = ["| key | environment | accepts | default |", "|---|---|---|---|"]
    spec = {f.name: f.default for f in fields(SpeculativeConfig)}
    return rows + [f"| `speculative.{k}` | `{config.ENV_PREFIX}SPECULATIVE__{k.upper()}` | "
                   f"{cell(key.rule)} | {toml_value(spec[k])} |"
                   for k, key in config.SPECULATIVE_KEYS.items()]


def defaults_rows() -> list[str]:
    rows = ["| key | environment | accepts | built-in |", "|---|---|---|---|"]
    for f in fields(sampling.SamplingDefaults):
        kind, low, high, open_low = sampling.RANGES[f.name]
        bounds = f"{'>' if open_low else '>='} {low}" + ("" if high == float("inf")
                                                         else f", <= {high}")
        rows.append(f"| `{f.name}` | `{sampling.DEFAULTS_ENV_PREFIX}{f.name.upper()}` | "
                    f"{kind.__name__} {bounds} | {toml_value(f.default)} |")
    return rows


def render(block: str) -> str:
    rows = {"engine-short": lambda: engine_rows(short=True),
            "engine": lambda: engine_rows(short=False),
            "speculative": speculative_rows, "defaults": defaults_rows}[block]()
    return "\n".join(rows) + "\n"


def updated(text: str) -> str:
    """`text` with every config-reference block rendered afresh."""
    return BLOCK.sub(lambda m: m[1] + render(m[2]) + m[4], text)


def stale(root: Path = ROOT) -> list[str]:
    """The target files whose tables differ from a fresh rendering (or lack one)."""
    out = []
    for name, blocks in TARGETS.items():
        text = (root / name).read_text(encoding="utf-8")
        found = [m[2] for m in BLOCK.finditer(text)]
        if sorted(found) != sorted(blocks) or updated(text) != text:
            out.append(name)
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        out_of_date = stale()
        for name in out_of_date:
            print(f"{name}: the configuration tables are out of date; "
                  "run python docs/config_reference.py", file=sys.stderr)
        return 1 if out_of_date else 0
    for name in TARGETS:
        path = ROOT / name
        path.write_text(updated(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
