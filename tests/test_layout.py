"""The house's size rules, checked over the source tree: no module over 500 lines anywhere
(split by concept well before that), and a small public surface directly in engine/ (the
rest lives in rooms a newcomer finds by name: formats/, model/, tokenizer/, kv/, core/).
The import rules live in tests/test_imports.py."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("engine", "server", "template", "sse", "cli", "bench", "tests")
MAX_MODULE_LINES = 500
MAX_ENGINE_TOP_MODULES = 8


def long_modules(limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    files = [ROOT / "tlserve.py"] + [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")]
    return {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit}


def test_no_module_is_over_the_line_limit():
    assert not long_modules(), long_modules()


def test_engine_keeps_a_small_top_level():
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert len(top) <= MAX_ENGINE_TOP_MODULES, top


def test_the_size_rule_can_fail():
    assert long_modules(limit=10), "a 10-line limit must flag some module"
