"""engine/'s house rules, checked: small modules, no runtime import cycles, nothing from the
server side (server, template, sse, cli). Imports under `if TYPE_CHECKING:` are not run and
do not count."""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"
MAX_MODULE_LINES = 500
SERVER_SIDE = ("server", "template", "sse", "cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """Modules a file imports when run (absolute imports; TYPE_CHECKING blocks skipped)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _engine_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ENGINE.rglob("*.py")}
    return {name: {m for m in _runtime_imports(path) if m in files and m != name}
            for name, path in files.items()}


def test_no_engine_module_is_over_the_line_limit():
    long = {str(p.relative_to(ENGINE.parent)): n for p in ENGINE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_engine_imports_nothing_from_the_server_side():
    for path in ENGINE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert name.split(".")[0] not in SERVER_SIDE, (path, name)


def test_engine_has_no_runtime_import_cycle():
    graph = _engine_graph()
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(name):] + [name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, trail + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
