"""Docs that cannot drift: every name the docs give must exist, and they cite nothing outside.

The documents read here are README.md, every docs/*.md (ARCHITECTURE.md among them) and the
docstring of every module: the packages' (`engine/__init__.py`, `server/http/__init__.py`,
...), the modules', bench/'s and the tests'. Three kinds of reference are checked in them:

* a repository path -- `server/api/streams.py`, `docs/`, `deploy/haproxy/haproxy.cfg` -- is
  a file or folder of the checkout (tracked, or new and not ignored). A path with a folder
  in it may leave out the folders above it (`api/streams.py`, `http/loop.py`), as the map
  does inside a room; a bare file name (`gguf.py`) must be some file's name. A package
  docstring's names are looked up beneath its own package first.
* a dotted module name -- `engine.api`, `server.replies.json_bytes`, `sse.TextStream` --
  is a module of the checkout and, past the module, a name its source defines or imports
  at the top (then, for a class, a name its body defines). A dotted name followed by `(`
  is a call in an example, on a variable that may share a package's name: not checked.
* "`<file>.py`'s `Name`" and "`<file>.py:name`" -- the file defines `Name` at its top level
  (an import does not count: that names the wrong home).
* `make <target>` in code (a backtick span or a fenced block) -- the Makefile has the target.

runtime.toml, the Makefile, .ci/run and deploy/'s files are read whole, for their comments.
Every link of README.md and docs/*.md must reach a file, and a heading where it names one.

Paths that are not part of the checkout are skipped because they are named here, each with
why (`OUTSIDE_PREFIXES`, `OUTSIDE_NAMES`). The second half checks that README, docs/ and
bench/, and the comments and docstrings of all the code, cite no tracker issue number and
no outside document ("chapter", "style guide"): they say what the code does instead.
"""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "server", "sse", "template", "cli")
TOP_MODULES = PACKAGES + ("tests", "bench")

# Generated or outside paths, named so the check skips them (prefix of the path as written).
OUTSIDE_PREFIXES = (
    "artifacts/",          # fetched models (gitignored; a symlink in worktrees)
    ".venv/", ".venv-checkov/", ".venv-instructor/",   # made by `make install` / `make checkov` / `make instructor`
    "wheelhouse/",         # made by `make wheelhouse`
    "../shared/", "../before", "../",   # the spec and oracle beside the checkout; other checkouts
    ".bench/",             # llama.cpp built by `make bench-deps`
    "bench/out/",          # benchmark logs written by `make bench`
    "tests/browser/shots/",   # screenshots the browser tests leave
    "secrets/",            # runtime.toml's example of an api_key_file location
    "models/",             # the container's model mount (`/models/...` written relative)
    "1_Pooling/", "data/",  # folders inside a sentence-transformers model and a model wheel
    "node_modules/",       # npm's install folder
)
# File names that belong to a model folder, a user or another project, never to the checkout.
OUTSIDE_NAMES = frozenset({
    "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
    "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
    "config_sentence_transformers.json", "model.safetensors",     # a Hugging Face folder
    "adapter_config.json", "adapter_model.safetensors",           # a PEFT adapter folder
    "chat_template.jinja", "vocab.txt",        # ... and more of a model folder
    "trace.json", "my.jinja", "out.json",      # a user's files in the examples
    "package.json", "package-lock.json",       # npm's, in tests/e2e/node (made by make)
    "haproxy.cfg.example",
    "epp-config.yaml",                         # a ConfigMap's key, mounted in the picker's pod
})
EXTENSIONS = ("py", "md", "toml", "yaml", "yml", "cfg", "json", "jinja", "html", "css", "js",
              "sh", "txt", "png", "ini")
PATH = re.compile(r"(?<![\w./~$-])((?:\.\./)?(?:[\w.-]+/)*[\w.-]+\.(?:%s))(?![\w/-])"
                  % "|".join(EXTENSIONS))
FOLDER = re.compile(r"(?<![\w./~$-])((?:\.\./)?(?:[\w-][\w.-]*/)+)(?![\w.-])")
MODULE = re.compile(r"(?<![\w./\[-])((?:%s)(?:\.[A-Za-z_]\w*)+)(?![\w(])" % "|".join(TOP_MODULES))
OWNED = re.compile(r"`([\w./-]+\.py)`'s\s+`([A-Za-z_][\w.]*)|\b([\w./-]+\.py):([A-Za-z_]\w*)")
URL = re.compile(r"\w+://\S+")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
MAKE = re.compile(r"\bmake ([a-z][\w-]*)")
TARGET = re.compile(r"^([\w.-]+(?: [\w.-]+)*):(?!=)", re.MULTILINE)
BRACES = re.compile(r"([\w./-]*)\{([\w.-]+(?:,[\w.-]+)+)\}([\w./-]*)")   # a/{b,c}.py


@lru_cache(maxsize=1)
def checkout_files() -> frozenset[str]:
    """Tracked files plus new ones git does not ignore (a doc may name a file of its commit)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return frozenset(p for p in out.split("\0") if p and (ROOT / p).exists())


@lru_cache(maxsize=1)
def checkout_folders() -> frozenset[str]:
    return frozenset(str(parent) + "/" for f in checkout_files()
                     for parent in Path(f).parents if str(parent) != ".")


def path_exists(name: str, base: str = "") -> bool:
    """`name` as a doc writes it: from `base` (a package folder), the root, or a suffix."""
    name = name.removeprefix("./")
    if name.startswith(OUTSIDE_PREFIXES) or Path(name).name in OUTSIDE_NAMES:
        return True
    known = checkout_folders() if name.endswith("/") else checkout_files()
    scope = [p for p in known if p.startswith(base)] if base else []
    for pool in (scope, known):
        if name in pool or f"{base}{name}" in pool:
            return True
        if any(p.endswith("/" + name) for p in pool):
            return True
    return False


def module_file(parts: list[str]) -> Path | None:
    stem = ROOT.joinpath(*parts)
    for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
        if candidate.as_posix().removeprefix(ROOT.as_posix() + "/") in checkout_files():
            return candidate
    return None


def top_names(tree: ast.AST, with_imports: bool = True) -> dict[str, ast.AST]:
    """Names a module (or class) body binds: defs, classes, assignments (and imports)."""
    names: dict[str, ast.AST] = {}
    body = list(getattr(tree, "body", []))
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.If, ast.Try)):        # `if TYPE_CHECKING:`, `try: import`
            body += node.body + getattr(node, "orelse", []) + [
                n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
        elif with_imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_ref_exists(dotted: str) -> bool:
    """`engine.api.load_encoder`: the longest module prefix, then names defined inside it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        found = module_file(parts[:cut])
        if found is None:
            continue
        scope: ast.AST = parsed(found)
        for name in parts[cut:]:
            names = top_names(scope)
            if name not in names:
                return module_file(parts[:cut] + [name]) is not None
            scope = names[name]
            if not isinstance(scope, ast.ClassDef):
                return True                      # a function, value or import: stop there
        return True
    return False


def defines(file_name: str, name: str, base: str = "") -> bool:
    """Some checkout file written as `file_name` defines `name` itself (not by import)."""
    head = name.split(".")[0]
    files = [p for p in checkout_files() if p == file_name or p.endswith("/" + file_name)
             or (base and p == base + file_name)]
    return any(head in top_names(parsed(ROOT / p), with_imports=False) for p in files)


@lru_cache(maxsize=1)
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(name for line in TARGET.findall(text) for name in line.split())


def broken_references(text: str, base: str = "") -> list[str]:
    """Every path, module name and owned name in `text` that does not exist."""
    text = URL.sub(" ", text)
    text = BRACES.sub(lambda m: " ".join(m[1] + part + m[3] for part in m[2].split(",")), text)
    broken = [m for m in PATH.findall(text) + FOLDER.findall(text) if not path_exists(m, base)]
    broken += [m for m in MODULE.findall(text)
               if not m.endswith(tuple("." + e for e in EXTENSIONS)) and not module_ref_exists(m)]
    for m in OWNED.finditer(text):
        file_name, name = (m[1], m[2]) if m[1] else (m[3], m[4])
        if path_exists(file_name, base) and not defines(file_name, name, base):
            broken.append(f"{file_name}'s {name}")
    broken += [f"make {target}" for span in CODE.findall(text) for target in MAKE.findall(span)
               if target not in make_targets()]
    return sorted(set(broken))


def folder_of(name: str) -> str:
    return name.rpartition("/")[0] + "/" if "/" in name else ""


def documents() -> dict[str, tuple[str, str]]:
    """name -> (text, the folder its bare names are looked up in first)."""
    docs = {"README.md": ((ROOT / "README.md").read_text(encoding="utf-8"), "")}
    for md in sorted((ROOT / "docs").glob("*.md")):
        docs[f"docs/{md.name}"] = (md.read_text(encoding="utf-8"), "")
    for name in sorted(p for p in checkout_files()
                       if p in ("runtime.toml", "Makefile", ".ci/run") or p.startswith("deploy/")):
        docs[name] = ((ROOT / name).read_text(encoding="utf-8"), folder_of(name))
    for module in sorted(p for p in checkout_files() if p.endswith(".py") and (
            p.split("/")[0] in TOP_MODULES + ("docs",) or p == "tlserve.py")):
        docstring = ast.get_docstring(parsed(ROOT / module)) or ""
        docs[module] = (docstring, folder_of(module))
    return docs


def test_every_name_the_docs_give_exists():
    broken = {name: found for name, (text, base) in documents().items()
              if (found := broken_references(text, base))}
    assert not broken, broken


def test_the_documents_read_include_the_map_and_the_package_docstrings():
    names = set(documents())
    assert {"README.md", "docs/ARCHITECTURE.md", "server/__init__.py",
            "server/http/__init__.py", "engine/__init__.py", "sse/framing.py",
            "bench/load_sweep.py", "tlserve.py", "runtime.toml",
            "deploy/kubernetes/deployment.yaml"} <= names


def test_the_reference_check_can_fail():
    text = ("`server/openai.py` `server/nowhere/` `http/loop.py` `gguf.py` `nosuch.py` "
            "`engine.api.load_encoder` `engine.api.no_such_name` `engine.nosuch` "
            "`server/loading.py`'s `EngineWrapper` `server/serve.py`'s `EngineWrapper` "
            "`sse/framing.py:event` `sse/framing.py:json_bytes` artifacts/models/x.py "
            "sse/{framing,nosuch}.py `engine.step()` `make soak` `make nosuch` make nothing "
            "https://example.org/not/here.py")
    assert broken_references(text) == [
        "engine.api.no_such_name", "engine.nosuch", "make nosuch", "nosuch.py", "server/nowhere/",
        "server/openai.py", "server/serve.py's EngineWrapper", "sse/framing.py's json_bytes",
        "sse/nosuch.py"]
    # A package docstring's bare names are found beneath the package, then anywhere.
    assert broken_references("`loop.py` `bridge.py` `nosuch.py`", base="server/http/") == [
        "nosuch.py"]


LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")     # [text](path#anchor)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)      # no headings in code
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def broken_links(name: str, text: str) -> list[str]:
    """Links to a checkout file that is missing, or to a heading the file does not have."""
    broken = []
    for target, anchor in LINK.findall(text):
        if "://" in target:
            continue
        path = (ROOT / name).parent / target if target else ROOT / name
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text("utf-8")):
            broken.append(f"{target}#{anchor}")
    return broken


def test_every_link_of_the_docs_reaches_a_file_and_a_heading():
    pages = ["README.md"] + [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))]
    broken = {name: found for name in pages
              if (found := broken_links(name, (ROOT / name).read_text(encoding="utf-8")))}
    assert not broken, broken


def test_the_link_check_can_fail():
    assert broken_links("README.md", "[a](docs/api.md#the-responses-api) [b](#features) "
                        "[c](docs/nowhere.md) [d](docs/api.md#no-such-part) [e](#nor-here)") == [
        "docs/nowhere.md", "docs/api.md#no-such-part", "#nor-here"]


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, len(lines)
    opening = "\n".join(lines[:30])
    assert "make serve" in opening and "make test" in opening


# --- no tracker issue numbers, no outside documents ---------------------------------------

CITATION = re.compile(r"\bchapter\b|\bstyle guide\b", re.IGNORECASE)
ISSUE = re.compile(r"\bissues?\s*#?\d+|\bthe issue(?:'s|s')?(?!\w)|(?:^|(?<!\]\])[\s(])#\d+\b",
                   re.IGNORECASE)


def comments_and_docstrings(source: str) -> str:
    """The prose of a Python module: its comments and every docstring, nothing else."""
    pieces = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
              if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            pieces.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(pieces)


def citations(text: str) -> list[str]:
    return [m.group(0).strip() for m in (*CITATION.finditer(text), *ISSUE.finditer(text))]


def prose_to_check() -> dict[str, str]:
    """README, docs/ and bench/ whole; everywhere else the comments and docstrings (but not
    this file's own: it names the words it looks for)."""
    out: dict[str, str] = {}
    for name in sorted(checkout_files() - {"tests/test_docs.py"}):
        path = ROOT / name
        if name == "README.md" or name.startswith(("docs/", "bench/")) and name.endswith(
                (".md", ".py")):
            out[name] = path.read_text(encoding="utf-8")
        elif name.endswith(".py"):
            out[name] = comments_and_docstrings(path.read_text(encoding="utf-8"))
    return out


def test_no_issue_numbers_and_no_outside_documents_are_cited():
    found = {name: hits for name, text in prose_to_check().items() if (hits := citations(text))}
    assert not found, found


def test_the_citation_check_can_fail():
    assert citations("as issue 24 measured; see #12 (chapter 2.6, style guide 3.6); the "
                     "issue's targets; [[models]] #1.port is an error message") == [
        "chapter", "style guide", "issue 24", "#12", "the issue's"]
    source = 'X = "chapter"  # the engine steps\n"""A module."""\ndef f():\n    """issue 9."""\n'
    assert citations(comments_and_docstrings(source)) == ["issue 9"]
