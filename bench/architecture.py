"""Architecture figures for one exported tree (``git archive REV metalint | tar -x
-C DIR``), side by side for several trees:

    python bench/architecture.py DIR [DIR...]

Per tree: functions over complexity 15 with ``# noqa`` ignored (ruff), import cycles among the
metalint modules (strongly connected groups of the graph "module -> metalint module it imports",
function-local imports included), upward imports against tests/test_layers.py's layers, and
function-local imports (of metalint modules; of anything).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layers_test():
    """tests/test_layers.py: its layer of a module and its cycle finder."""
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests" / "test_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def modules(tree: Path) -> dict[str, Path]:
    out = {}
    for p in (tree / "metalint").rglob("*.py"):
        parts = list(p.relative_to(tree).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _targets(name: str, path: Path, node, mods: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            pkg = pkg[: len(pkg) - node.level + 1]
            base = ".".join(pkg + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" for a in node.names]
    else:
        names = [a.name for a in node.names]
    found = set()
    for t in names:
        while t and t not in mods:
            t = t.rpartition(".")[0]
        if t and t != name:
            found.add(t)
    return found


def graph(mods: dict[str, Path]) -> tuple[dict[str, set[str]], int, int]:
    """Imports of each module (anywhere in it), and the function-local import statements: of
    metalint modules, of anything."""
    edges: dict[str, set[str]] = {}
    local_ours = local_all = 0
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges[name] = set()
        stack = [(tree, False)]
        while stack:
            node, in_def = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    found = _targets(name, path, child, mods)
                    edges[name] |= found
                    if in_def:
                        local_all += 1
                        local_ours += bool(found) or getattr(child, "level", 0) > 0
                defines = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                stack.append((child, in_def or defines))
    return edges, local_ours, local_all


def complex_functions(tree: Path) -> int:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901"),
            *("--config", "lint.mccabe.max-complexity=15", "--ignore-noqa"),
            *("--output-format", "concise", "metalint"),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return sum(" C901 " in line for line in r.stdout.splitlines())


def measure(tree: Path) -> dict:
    layers_test = _layers_test()
    layer = layers_test.layer
    mods = modules(tree)
    edges, local_ours, local_all = graph(mods)
    up = []
    for a, targets in edges.items():
        for b in targets:
            try:
                if layer(b) > layer(a):
                    up.append(f"{a} -> {b}")
            except AssertionError:  # a module the layers do not know (an older tree)
                pass
    return {
        "complexity > 15": complex_functions(tree),
        "import cycles": layers_test.cycles(edges),
        "upward imports": sorted(up),
        "function-local imports of metalint": local_ours,
        "function-local imports (all)": local_all,
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for d in argv:
        m = measure(Path(d))
        print(f"== {d}")
        for key, value in m.items():
            if isinstance(value, list):
                print(f"  {key}: {len(value)}")
                for v in value:
                    print(f"    {' <-> '.join(v) if isinstance(v, list) else v}")
            else:
                print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
