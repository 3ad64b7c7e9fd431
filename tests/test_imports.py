"""The one-way import rule, checked over the source tree's syntax (no module is imported).

    entry (tlserve.py, cli/)  ->  server/  ->  engine/, template/, sse/

- engine/ imports none of server, template, sse, cli: token ids in, token ids out;
- template/ and sse/ import neither engine nor server nor cli (nor each other);
- server/ and cli/ reach the engine only through its facade, `engine.api`;
- server/ never imports cli/, and nothing imports the entry script;
- the transport (server/http/) imports nothing of the application (the rest of server/),
  nor the engine, template or sse: the App renders the errors the transport finds;
- the front door (server/door/) imports nothing of the app it wraps (server/api/app.py);
- server/http/loop.py is the one module that imports socket, select or selectors (the
  rest of the transport is sans-IO);
- the engine worker and the text layer (server/worker/, server/text/) import nothing of
  server/observe/: the trace and the engine view are passed in as observers;
- the rooms of server/ import one way (`ROOMS_MAY_IMPORT`): the API may use every room; the
  text layer the engine worker; the worker none; the off-loop pool none (it is thread
  infrastructure: it runs any pure function and hands back a `Stream`, so it needs no
  OpenAI meaning and no engine); the front door and observation no room that holds OpenAI
  meaning (api/, text/); batch work the API's field parser and the door's request id
  (it drives any `App` it is handed, so it needs no other room); the shared top modules
  (errors, replies, state) are open to all;
- no import cycle between modules anywhere, imports under `if TYPE_CHECKING:` and inside
  functions included (a cycle only type checkers see is still two modules that cannot be
  read apart); the layer rules above count run-time imports only.

A failure names the module and the import that breaks the rule.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "template", "sse", "server", "cli")
ENTRY = "tlserve"

# Which top-level packages each package may import (itself always).
ALLOWED = {
    "engine": set(),
    "template": set(),
    "sse": set(),
    "server": {"engine", "template", "sse"},
    "cli": {"engine", "template", "sse", "server"},
    ENTRY: {"engine", "template", "sse", "server", "cli"},
}
FACADE = "engine.api"          # the one engine module server/ and cli/ may import
# ... besides the start-up hook that must run before numpy loads (engine.api loads it)
BEFORE_NUMPY = "engine.blas_env"
TRANSPORT = "server.http"      # sockets and HTTP bytes: knows no OpenAI meaning
FRONT_DOOR = "server.door"      # request ids, CORS, the key, the access log, loading ...
WRAPPED_APP = "server.api.app"  # ... in front of this app, which serve.py hands them
SOCKET_MODULES = frozenset({"socket", "select", "selectors"})
THE_LOOP = "server.http.loop"   # the one module that does socket I/O
OBSERVATION = "server.observe"  # metrics, trace, engine view: passed in, never imported by ...
OBSERVED = ("server.worker", "server.text")     # ... the engine worker and the text layer
# The rooms of server/ and the rooms each may import (besides itself, the transport and the
# shared top modules server.errors / server.replies / server.state). serve.py and config.py
# assemble everything and are no room.
ROOMS_MAY_IMPORT = {
    "server.http": set(),
    "server.worker": set(),
    "server.text": {"server.worker"},
    "server.door": set(),
    "server.observe": {"server.door", "server.worker"},
    "server.offloop": set(),
    "server.api": {"server.door", "server.text", "server.worker", "server.observe",
                   "server.offloop"},
    "server.batch": {"server.api", "server.door"},
}
SHARED = {"server.http", "server.errors", "server.replies", "server.state"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    found = {ENTRY: ROOT / f"{ENTRY}.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST, typing_too: bool = False):
    """Import nodes, skipping the bodies of `if TYPE_CHECKING:` blocks unless `typing_too`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_too:
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(name: str, path: Path, known: dict[str, Path],
                     typing_too: bool = False) -> set[str]:
    """The project modules `name` imports at run time, or also for type checkers with
    `typing_too` (`from p import m` names p.m if a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")), typing_too):
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
            targets.update(b for b in bases if b.split(".")[0] in known or b in known)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        if base.split(".")[0] not in {m.split(".")[0] for m in known}:
            continue
        for alias in node.names:        # `from p import m`: the module p.m if it is one, else p
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in known else base)
    return {t for t in targets if t in known or t.split(".")[0] in known}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = source_modules()
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def test_every_package_imports_only_the_layers_below_it(graph):
    broken = []
    for name, targets in graph.items():
        layer = name.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != layer and other not in ALLOWED[layer]:
                broken.append(f"{name} imports {target}")
    assert not broken, "imports against the one-way rule:\n" + "\n".join(sorted(broken))


def test_server_and_cli_reach_the_engine_only_through_its_facade(graph):
    broken = [f"{name} imports {target}" for name, targets in graph.items()
              if name.split(".")[0] in ("server", "cli", ENTRY)
              for target in targets
              if target.split(".")[0] == "engine" and target not in (FACADE, BEFORE_NUMPY, "engine")]
    assert not broken, "engine internals used outside the engine:\n" + "\n".join(sorted(broken))


def test_the_transport_imports_nothing_of_the_application(graph):
    broken = [f"{name} imports {target}" for name, targets in graph.items()
              if name.startswith(TRANSPORT) for target in targets
              if not target.startswith(TRANSPORT)]
    assert not broken, "server/http/ reaching into the application:\n" + "\n".join(sorted(broken))


def stdlib_imports(path: Path) -> set[str]:
    """The top-level names of the modules `path` imports at run time (an annotation's
    `if TYPE_CHECKING: import socket` makes no socket call)."""
    names: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_front_door_imports_nothing_of_the_app_it_wraps(graph):
    broken = [f"{name} imports {target}" for name, targets in graph.items()
              if name.startswith(FRONT_DOOR) for target in targets if target == WRAPPED_APP]
    assert not broken, "the front door reaching into the app:\n" + "\n".join(sorted(broken))


def test_fetching_a_model_needs_nothing_of_the_server(graph):
    """`tlserve fetch-model` runs before any server exists (cli/fetch.py)."""
    reached, todo = set(), ["cli.fetch"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph.get(name, ()))
    assert not sorted(m for m in reached if m.split(".")[0] == "server")


def test_only_the_loop_does_socket_io():
    broken = [f"{name} imports {sorted(stdlib_imports(path) & SOCKET_MODULES)}"
              for name, path in source_modules().items()
              if name != THE_LOOP and stdlib_imports(path) & SOCKET_MODULES]
    assert not broken, "socket I/O outside server/http/loop.py:\n" + "\n".join(sorted(broken))
    assert stdlib_imports(source_modules()[THE_LOOP]) >= {"socket", "selectors"}


def test_the_worker_and_the_text_layer_take_observers_and_import_none(graph):
    broken = [f"{name} imports {target}" for name, targets in graph.items()
              if name.startswith(OBSERVED) for target in targets
              if target.startswith(OBSERVATION)]
    assert not broken, "observation imported where it is passed in:\n" + "\n".join(sorted(broken))


def _room(module: str) -> str | None:
    parts = module.split(".")
    room = ".".join(parts[:2])
    return room if parts[0] == "server" and room in ROOMS_MAY_IMPORT else None


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    broken = []
    for name, targets in graph.items():
        room = _room(name)
        if room is None or room == "server.http":
            continue
        for target in targets:
            other = _room(target) or ".".join(target.split(".")[:2])
            if other.split(".")[0] != "server" or other in SHARED or other == room:
                continue
            if other not in ROOMS_MAY_IMPORT[room]:
                broken.append(f"{name} imports {target}")
    return sorted(broken)


def test_the_rooms_of_server_import_one_way(graph):
    broken = room_violations(graph)
    assert not broken, "a room importing against ROOMS_MAY_IMPORT:\n" + "\n".join(broken)


def test_the_room_check_sees_a_wrong_way_import():
    wrong = {"server.observe.health": {"server.api.app"}, "server.worker.bridge": {"server.text.client"},
             "server.api.chat": {"server.observe.metrics", "server.errors", "server.offloop.pool"},
             "server.offloop.pool": {"server.api.streams", "server.http.protocol"}}
    assert room_violations(wrong) == ["server.observe.health imports server.api.app",
                                      "server.offloop.pool imports server.api.streams",
                                      "server.worker.bridge imports server.text.client"]


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle between modules (depth-first search, iterative), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {name: WHITE for name in graph}
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path, iters = [start], [iter(sorted(graph[start]))]
        colour[start] = GREY
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                iters.pop()
            elif colour.get(nxt) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                iters.append(iter(sorted(graph[nxt])))
    return None


@pytest.fixture(scope="module")
def typed_graph() -> dict[str, set[str]]:
    """The import graph with the imports under `if TYPE_CHECKING:` counted too."""
    known = source_modules()
    return {name: imported_modules(name, path, known, typing_too=True)
            for name, path in known.items()}


def test_no_import_cycles(typed_graph):
    cycle = _find_cycle(typed_graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_a_cycle_and_a_wrong_way_import():
    """The checks above can fail: a made-up graph with both faults is caught."""
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
    sample = ROOT / "engine" / "api.py"
    known = source_modules()
    assert FACADE in known and "engine.core.engine" in imported_modules(FACADE, sample, known)


def test_type_checking_imports_count_for_cycles_only(tmp_path):
    module = tmp_path / "a.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from engine.core.chunk import Chunk\n", encoding="utf-8")
    known = {**source_modules(), "a": module}
    assert imported_modules("a", module, known) == set()
    assert imported_modules("a", module, known, typing_too=True) == {"engine.core.chunk"}
