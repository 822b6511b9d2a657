"""Dependencies point one way: codes and diagnostics at the bottom, then ``static``, the rules,
then ``fix``/``probe``/``loader`` (and the check pipeline's workers), then the commands.

Every import of a metalint module counts, at module level and inside functions (a lazy import
that keeps torch off ``check``'s start path is still a dependency). A lower layer that needs
something of a higher one receives it (``analyze_source(rules=..., fix_for=...)``,
``Fixer(..., resolve)``, ``render(describe=...)``) instead of importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "metalint"

#: layer of a module: the first prefix that matches, most specific first
LAYERS = [
    # the commands and the modules that hold a click command
    ("metalint.__main__", 4),
    ("metalint.cli", 4),
    ("metalint.check", 4),
    ("metalint.docs", 4),
    ("metalint.testing", 4),
    ("metalint.fix.command", 4),
    ("metalint.probe.command", 4),
    ("metalint.loader.command", 4),
    ("metalint.loader.rank", 4),  # the process entry of one `metalint load --nproc` rank
    # what the commands drive
    ("metalint.fix", 3),
    ("metalint.probe", 3),
    ("metalint.loader", 3),
    ("metalint.jobs", 3),
    ("metalint.checking", 3),  # the check pipeline that check and fix run
    ("metalint.stdin", 3),  # check's source from stdin
    ("metalint.noqa_add", 3),  # check --add-noqa (writes through metalint.fix.write)
    ("metalint.rules", 2),
    ("metalint.static", 1),
    # plain data and text: codes, diagnostics, vocabulary, lines, configuration, reporters
    ("metalint", 0),
]

#: reverse arrows still there, each with its reason; nothing else may be added
KNOWN = {
    # run_probe, the probe pipeline, lives in probe/command.py beside the click command
    ("metalint.fix.verify", "metalint.probe.command"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return level
    raise AssertionError(f"{module} has no layer")


def imports() -> dict[str, set[str]]:
    """module -> the metalint modules it imports, anywhere in its body."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{name}: relative import")
            target = _imported(_targets(node), modules, name)
            if target:
                found.add(target)
        out[name] = found
    return out


def _targets(node: ast.AST) -> list[str]:
    """The names an import statement may import a module by (``a.b.c`` of ``from a.b import
    c``, then ``a.b``)."""
    if isinstance(node, ast.ImportFrom) and node.module:
        return [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def _imported(targets: list[str], modules, name: str) -> str | None:
    """The metalint module an import of ``targets`` in module ``name`` imports: the first
    target that is a module, else the nearest module that holds one."""
    for target in targets:
        if target in modules and target != name:
            return target
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            return target
    return None


def test_dependencies_point_down():
    reverse = sorted(
        (a, b)
        for a, targets in imports().items()
        for b in targets
        if layer(b) > layer(a) and (a, b) not in KNOWN
    )
    assert reverse == [], "imports against the layers: " + ", ".join(
        f"{a} -> {b}" for a, b in reverse
    )


def test_known_exceptions_still_exist():
    graph = imports()
    assert all(b in graph[a] for a, b in KNOWN), "a KNOWN arrow is gone: remove it from KNOWN"


def _pop_to(stack: list[str], v: str) -> list[str]:
    """Pop ``stack`` down to ``v``, inclusive: one strongly connected group."""
    group = []
    while True:
        w = stack.pop()
        group.append(w)
        if w == v:
            return group


def cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan); bench/architecture.py uses
    it too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = _pop_to(stack, v)
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(imports()) == []


def test_cycles_finds_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_walk_sees_function_level_imports():
    """The static layer's engine once imported the fix registry inside a function."""
    graph = imports()
    assert "metalint.static.model" in graph["metalint.static.engine"]
    assert "metalint.rules" in graph["metalint.jobs"]  # imported inside analyze_one
