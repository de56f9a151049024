"""Arrows point down only: no module of engine/ imports Qt, pyqtgraph or gui (not lazily, not by a string
given to importlib), importing the engine's entry points leaves PySide6 unloaded, and the engine's own
import graph (lazy imports inside functions included) has no cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
FORBIDDEN = ("PySide6", "PySide2", "PyQt5", "PyQt6", "shiboken6", "pyqtgraph", "gui")


def engine_files() -> list[Path]:
    return sorted(ENGINE.rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `module`)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth, plus every string given to
    importlib.import_module / __import__; `from x import y` yields both x and x.y."""
    module, is_package = module_name(path), path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            called = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if called in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def forbidden(name: str) -> bool:
    return name.split(".")[0] in FORBIDDEN


def test_the_walk_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The checks below are only as good as this walk: it must see top-level, lazy, relative and string
    imports."""
    package = tmp_path / "engine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    probe = package / "probe.py"
    probe.write_text("import os\n"
                     "def f():\n    from PySide6.QtCore import QObject\n"
                     "def g():\n    import importlib\n    return importlib.import_module('gui.app')\n"
                     "from . import sibling\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    names = {name for _, name in imported_names(probe)}
    assert {"os", "PySide6.QtCore", "gui.app", "engine.sibling"} <= names
    assert {n for n in names if forbidden(n)} == {"PySide6.QtCore", "PySide6.QtCore.QObject", "gui.app"}


@pytest.mark.parametrize("path", engine_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_engine_module_imports_no_qt_and_no_gui(path):
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in imported_names(path) if forbidden(name)]
    assert bad == []


def test_no_string_naming_gui_goes_to_importlib():
    """Any string constant starting with "gui." given to a call of importlib (import_module, find_spec, …)."""
    bad = []
    for path in engine_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            owner = getattr(func.value, "id", getattr(func.value, "attr", "")) if isinstance(func, ast.Attribute) else ""
            called = getattr(func, "attr", getattr(func, "id", ""))
            if owner in ("importlib", "util") or called in ("import_module", "__import__", "find_spec"):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}" for arg in node.args
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                        and (arg.value == "gui" or arg.value.startswith("gui."))]
    assert bad == []


def test_importing_the_engine_leaves_qt_unloaded():
    code = "import engine.cli.main, engine.core.engine, sys; assert 'PySide6' not in sys.modules, 'PySide6 was imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def engine_graph() -> dict[str, set[str]]:
    """module → the engine modules it imports (at any depth in the file). `from engine import x` counts as
    engine.x when x is a module, else as engine itself."""
    modules = {module_name(path): path for path in engine_files()}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        targets = {resolve(name) for _, name in imported_names(path) if name.split(".")[0] == "engine"}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that starts and ends at the same module, or None (depth-first
    search, colouring modules in progress)."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        trail.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return trail[trail.index(successor):] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        state[node] = "done"
        trail.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_engine_import_graph_has_no_cycle():
    graph = engine_graph()
    assert "engine.cli.main" in graph and "engine.runtime" in graph["engine.cli.main"]  # the walk sees lazy imports
    assert find_cycle(graph) is None


# The package arrows of ../shared/DESIGN.md: a package may import itself, the packages listed for it and
# `engine.host` (a leaf); nothing else of the engine. Two arrows differ from DESIGN's list: the runtime builds
# a RemoteEngine for a server's address (so remote sits below it), and training reads measure's prompt sets.
ALLOWED = {
    "core": set(),
    "backends": {"core"},
    "drafters": {"core", "backends"},
    "models": {"core", "backends"},
    "runtime": {"core", "backends", "drafters", "models", "remote"},
    "measure": {"core", "backends", "drafters", "models", "runtime", "remote"},
    "remote": {"core", "backends", "models"},
    "training": {"core", "backends", "drafters", "models", "runtime", "measure"},
    "cli": {"core", "backends", "drafters", "models", "runtime", "measure", "remote", "training"},
    "host": set(),
    "engine": set(),
}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "engine"


def arrow_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        own = package_of(module)
        for target in sorted(targets):
            other = package_of(target)
            if other not in (own, "host", "engine") and other not in ALLOWED[own]:
                bad.append(f"{module} → {target}")
    return bad


def test_arrow_checker_finds_a_planted_upward_arrow():
    assert arrow_violations({"engine.core.engine": {"engine.models.load"}}) == ["engine.core.engine → engine.models.load"]
    assert arrow_violations({"engine.cli.main": {"engine.core.config", "engine.measure.bench"}}) == []


def test_engine_packages_follow_the_design_arrows():
    graph = engine_graph()
    assert set(package_of(m) for m in graph) <= set(ALLOWED)  # a new package gets a line in ALLOWED first
    assert arrow_violations(graph) == []


def test_only_runtime_and_host_sit_at_the_top_of_engine():
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert top == ["__init__.py", "host.py", "runtime.py"]
