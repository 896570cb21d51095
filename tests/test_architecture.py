"""The layout's rules, read from the code's own imports (``ast``, nothing is run).

- The root holds only what every part shares, and imports nothing from a folder.
- No two modules share a name.
- ``rawdata/``, ``stats/`` and ``report/`` never reach ``measure/`` or ``gate/``, at
  import time or inside a function: the report does not import the measuring side.
- The measured side (``subjects/``, ``gate/``, ``sources/``, the timing and policy
  workers) imports only the standard library and kvqueue modules that do the same.
- No cycle between modules or between folders; no kvqueue import inside a function,
  except ``__main__``'s lazy command imports.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "kvqueue"
#: Folders whose modules must never reach the measuring side.
READ_SIDE = ("rawdata", "stats", "report")
MEASURING = ("measure", "gate")
#: Modules that run under the measured interpreter, with nothing installed.
MEASURED = ("subjects", "gate", "sources")
MEASURED_MODULES = (
    "kvqueue.measure.timing_worker",
    "kvqueue.measure.counted_worker",
    "kvqueue.measure.profiled_worker",
    "kvqueue.policy.policy_worker",
)


def _name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, every module of the package."""
    return {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def folder(module: str) -> str:
    """``bench`` for ``kvqueue.measure.runner``; ``root`` for ``kvqueue.schema``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and module in _packages()) else "root"


@cache
def _packages() -> frozenset[str]:
    return frozenset(_name(p) for p in PACKAGE.rglob("__init__.py"))


def _resolve(module: str, names: list[str]) -> set[str]:
    mods = modules()
    found = {f"{module}.{n}" for n in names if f"{module}.{n}" in mods}
    if len(found) < len(names) and module in mods:
        found.add(module)
    return found


@cache
def imports(module: str, top_level_only: bool) -> frozenset[str]:
    """kvqueue modules that ``module`` imports (at top level, or anywhere)."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvqueue"):
            found |= _resolve(node.module, [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kvqueue.")}
    return frozenset(found - {module, "kvqueue"})


def function_imports(module: str) -> list[tuple[int, str]]:
    """(line, module) of each kvqueue import inside a function or class body."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for inner in ast.walk(node):
                mod = getattr(inner, "module", None) if isinstance(inner, ast.ImportFrom) else None
                if isinstance(inner, ast.Import):
                    mod = next((a.name for a in inner.names if a.name.startswith("kvqueue")), None)
                if mod and mod.startswith("kvqueue"):
                    found.append((inner.lineno, mod))
    return sorted(set(found))


def reach(start: str, top_level_only: bool = False) -> set[str]:
    """Every kvqueue module ``start`` reaches through imports."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(imports(m, top_level_only))
    return seen - {start}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _stdlib_or_kvqueue(module: str) -> list[str]:
    """Imports of ``module`` that are neither standard library nor kvqueue."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for n in names:
            top = n.split(".")[0]
            if top != "kvqueue" and top not in sys.stdlib_module_names:
                bad.append(f"{module}:{node.lineno} imports {n}")
    return bad


# ------------------------------------------------------------------ the tests


def test_no_two_modules_share_a_name() -> None:
    """A module's name says what it holds, once: grep finds one file, no alias is needed."""
    seen: dict[str, list[str]] = {}
    for m in modules():
        if m.rsplit(".", 1)[-1] not in ("__main__", "kvqueue") and m not in _packages():
            seen.setdefault(m.rsplit(".", 1)[-1], []).append(m)
    twice = {name: mods for name, mods in seen.items() if len(mods) > 1}
    assert not twice, twice


def test_no_cycle_between_modules() -> None:
    for top in (True, False):
        graph = {m: set(imports(m, top)) for m in modules()}
        assert _cycle(graph) is None


def test_no_cycle_between_folders() -> None:
    graph: dict[str, set[str]] = {}
    for m in modules():
        if m == "kvqueue.__main__":
            continue
        for dep in imports(m, top_level_only=False):
            if folder(dep) != folder(m):
                graph.setdefault(folder(m), set()).add(folder(dep))
    assert _cycle(graph) is None, graph


def test_the_root_imports_no_folder() -> None:
    """Root modules are what every part shares: they import only each other."""
    for m in modules():
        if folder(m) == "root" and m not in ("kvqueue.__main__", "kvqueue"):
            up = sorted(d for d in imports(m, False) if folder(d) != "root")
            assert not up, f"{m} imports {up}"


@pytest.mark.parametrize("side", READ_SIDE)
def test_analysis_and_report_never_reach_the_measuring_side(side: str) -> None:
    for m in modules():
        if folder(m) == side:
            bad = sorted(d for d in reach(m) if folder(d) in MEASURING)
            assert not bad, f"{m} reaches {bad}"


def test_the_measured_side_is_standard_library_only() -> None:
    starts = [m for m in modules() if folder(m) in MEASURED] + list(MEASURED_MODULES)
    for m in starts:
        for dep in {m, *reach(m)}:
            assert not _stdlib_or_kvqueue(dep), _stdlib_or_kvqueue(dep)


def test_no_kvqueue_import_inside_a_function_but_the_cli() -> None:
    for m in modules():
        if m != "kvqueue.__main__":
            assert not function_imports(m), f"{m}: {function_imports(m)}"


def test_errors_run_ids_and_run_folders_are_defined_once() -> None:
    defined: dict[str, list[str]] = {}
    for m, path in modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                defined.setdefault(node.name, []).append(m)
    for name in ("BenchInputError", "GateRefused", "BenchError"):
        assert defined[name] == ["kvqueue.errors"]
    assert defined["new_run_id"] == ["kvqueue.schema"]
    assert defined["run_path"] == ["kvqueue.schema"]


def test_the_code_digest_follows_every_source_file_of_the_package(tmp_path: Path) -> None:
    """The build cache's keys and the manifest's code_sha256 change with any edit of the
    package, a caption as much as a formula (one rule, no list of modules to keep)."""
    package = Path(__file__).resolve().parent.parent / "kvqueue"
    copy = tmp_path / "kvqueue"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))

    def digest() -> str:
        code = "from kvqueue.report import build_cache; print(build_cache.code_digest())"
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
            check=True, env={**os.environ, "PYTHONPATH": str(tmp_path)},
        ).stdout.strip()  # fmt: skip

    before = digest()
    assert before == digest()
    caption = copy / "report" / "prose.py"
    caption.write_text(caption.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert digest() != before
