"""The house's size rules, checked over the source tree: no module over 400 lines anywhere
(split by concept well before that) unless its docstring has a "Size:" paragraph saying
why it is one concept, and none over 600; and a small public surface directly in engine/ (the
rest lives in rooms a newcomer finds by name: formats/, model/, tokenizer/, kv/, core/).
The import rules live in tests/test_imports.py; one rule of the tests' own is here: a test
module never imports another test module (shared fakes live in tests/fakes.py or a helper
module beside the tests that use them)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("engine", "server", "template", "sse", "cli", "bench", "tests")
MAX_MODULE_LINES = 400
MAX_SIZED_MODULE_LINES = 600       # the most a module with a "Size:" paragraph may have
MAX_ENGINE_TOP_MODULES = 8


def says_why_it_is_long(source: str) -> bool:
    """The module's docstring has a paragraph that starts with "Size:"."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return False
    return any(paragraph.lstrip().startswith("Size:") for paragraph in doc.split("\n\n"))


def long_modules(limit: int = MAX_MODULE_LINES,
                 sized_limit: int = MAX_SIZED_MODULE_LINES) -> dict[str, int]:
    files = [ROOT / "tlserve.py"] + [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")]
    found = {}
    for path in files:
        source = path.read_text(encoding="utf-8")
        num_lines = len(source.splitlines())
        allowed = sized_limit if says_why_it_is_long(source) else limit
        if num_lines > allowed:
            found[str(path.relative_to(ROOT))] = num_lines
    return found


def test_no_module_is_over_the_line_limit():
    assert not long_modules(), long_modules()


def test_the_size_paragraph_is_read_from_the_docstring_only():
    assert says_why_it_is_long('"""A module.\n\nSize: one concept, because ..."""\n')
    assert not says_why_it_is_long('"""A module."""\n# Size: a comment is no docstring\n')
    assert not says_why_it_is_long('"""A module whose Size: is mid-sentence."""\n')


def test_engine_keeps_a_small_top_level():
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert len(top) <= MAX_ENGINE_TOP_MODULES, top


def test_the_size_rule_can_fail():
    assert long_modules(limit=10), "a 10-line limit must flag some module"
    assert set(long_modules(limit=10)) < set(long_modules(limit=10, sized_limit=10)), \
        "a module with a Size: paragraph has a cap too"


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`tests....test_*`) a module's source imports, at any depth."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return sorted({n for n in names
                   if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")})


def test_no_test_module_imports_another_test_module():
    offenders = {str(p.relative_to(ROOT)): found for p in (ROOT / "tests").rglob("*.py")
                 if (found := imported_test_modules(p.read_text(encoding="utf-8")))}
    assert not offenders, offenders


def test_the_test_import_rule_can_fail():
    assert imported_test_modules("def f():\n    from tests.server.worker.test_bridge import X\n"
                                 ) == ["tests.server.worker.test_bridge"]
    assert imported_test_modules("import tests.e2e.test_tools_api as t\n") == [
        "tests.e2e.test_tools_api"]
    assert imported_test_modules("from tests.fakes import FakeEngine\n") == []
