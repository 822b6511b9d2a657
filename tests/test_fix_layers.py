"""The fixer's own layers: each rule's codemod (``metalint/fix/<rule>.py``, named by the rule's
``codemod``) is built on the shared modules of ``metalint/fix`` and on ``static/``, never on
another rule's codemod; the shared modules import no codemod; no private name crosses a
module; nothing caches an analysis by setting attributes on the static facts; no module of
``metalint/fix`` passes 1,000 lines, no class 400."""

from __future__ import annotations

import ast
from pathlib import Path

from test_layers import imports

from metalint.rules import all_rules

FIX = Path(__file__).resolve().parent.parent / "metalint" / "fix"

#: the modules that drive the codemods, above them: the registry, the fixer, the command
DRIVERS = {
    "metalint.fix",
    "metalint.fix.apply",
    "metalint.fix.registry",
    "metalint.fix.command",
    "metalint.fix.verify",
    "metalint.fix.write",
}


def codemods() -> set[str]:
    return {r.codemod for r in all_rules() if r.codemod}


def shared() -> set[str]:
    graph = imports()
    return {m for m in graph if m.startswith("metalint.fix.")} - codemods() - DRIVERS


def test_there_are_codemods_and_shared_modules():
    assert len(codemods()) >= 9
    assert {"metalint.fix.edits", "metalint.fix.hooks", "metalint.fix.recompute"} <= shared()


def test_a_codemod_imports_only_shared_modules():
    graph = imports()
    allowed = shared()
    wrong = sorted(
        (mod, dep)
        for mod in codemods()
        for dep in graph[mod]
        if dep.startswith("metalint.fix") and dep not in allowed
    )
    assert wrong == [], "a codemod imports another codemod or a driver: " + ", ".join(
        f"{a} -> {b}" for a, b in wrong
    )


def test_shared_modules_import_no_codemod_and_no_driver():
    graph = imports()
    wrong = sorted(
        (mod, dep) for mod in shared() for dep in graph[mod] if dep in codemods() | DRIVERS
    )
    assert wrong == [], ", ".join(f"{a} -> {b}" for a, b in wrong)


def _trees(drivers: bool = True):
    for path in sorted(FIX.glob("*.py")):
        if drivers or f"metalint.fix.{path.stem}" not in DRIVERS:
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_private_name_crosses_a_module():
    crossing = sorted(
        f"{path.name}: {node.module}.{alias.name}"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("metalint.")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    private_members = sorted(
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for path, tree in _trees(drivers=False)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "cst"))
    )
    assert crossing == [] and private_members == [], crossing + private_members


def test_no_analysis_is_cached_on_another_object():
    """An analysis is cached where it is declared (a cached property, a memo owned by one
    object), never by setting a private attribute on the facts from outside (``init.
    _body_index = ...``) and reading it back with ``getattr(init, "_body_index", None)``."""
    found = sorted(
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and node.attr.startswith("_")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        )
        or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        )
    )
    assert found == [], found


def test_sizes():
    lines = {p.name: p.read_text(encoding="utf-8").count("\n") for p in FIX.glob("*.py")}
    assert {n: c for n, c in lines.items() if c > 1000} == {}
    classes = {
        f"{path.name}:{node.name}": node.end_lineno - node.lineno + 1
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    assert {n: c for n, c in classes.items() if c > 400} == {}


def test_the_fix_command_runs_the_check_pipeline_not_the_check_command():
    """``metalint fix`` gets its settings, its analysis and the resolution across files from
    the layer below (:mod:`metalint.checking`), not from the module of ``metalint check``."""
    graph = imports()
    assert "metalint.check" not in graph["metalint.fix.command"]
    assert "metalint.checking" in graph["metalint.fix.command"]


def test_no_noqa_in_the_fixer():
    """A finding of the linters is fixed in the fixer's code, not silenced."""
    found = [
        f"{p.name}:{i}"
        for p in sorted(FIX.glob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "# noqa" in line
    ]
    assert found == []
