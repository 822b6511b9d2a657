"""The faster paths of check and fix give the answers of the slower ones they replace."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from metalint.check import all_codes, resolve
from metalint.config import load_settings
from metalint.fix.apply import Fixer
from metalint.fix.command import _fix_file
from metalint.jobs import analyze_one
from metalint.static.model import collect
from metalint.static.tree import Tree

LAYERS = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Scale(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(dim))
    """
)

MODEL = textwrap.dedent(
    """\
    import torch
    from torch import nn

    from .layers import Scale


    class Net(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.scale = Scale(dim)
            self.register_buffer("steps", torch.arange(dim), persistent=False)
    """
)


def _result(source: str, display: str, module: str):
    return analyze_one((source, display, module, False, ("reset_parameters",), False))


def _settings(tmp_path: Path):
    settings = load_settings(tmp_path)
    codes, defaults = all_codes()
    return settings, settings.enabled(codes, defaults)


def _shown(diagnostics) -> list[tuple]:
    return [(d.code, d.filename, d.start.row, d.message, d.root, d.protocol) for d in diagnostics]


def test_tree_replace_judges_as_a_fresh_build(tmp_path):
    settings, enabled = _settings(tmp_path)
    layers = _result(LAYERS, "pkg/layers.py", "pkg.layers")
    model = _result(MODEL, "pkg/model.py", "pkg.model")
    tree = Tree([layers, model], settings.protocol)
    # the same classes, bases and children: a hook added to Scale (what ML001's fix writes)
    fixed = LAYERS.replace(
        "torch.ones(dim))\n",
        "torch.empty(dim))\n        self.reset_parameters()\n\n"
        "    def reset_parameters(self):\n        nn.init.ones_(self.gamma)\n",
    )
    new = _result(fixed, "pkg/layers.py", "pkg.layers")
    before = resolve([model], settings, enabled, tree=tree)
    tree.replace(new)
    assert tree.rebuilds == 1  # updated in place, not built again
    fresh = resolve([new, model], settings, enabled)
    judged = resolve([new], settings, enabled, tree=tree) + resolve(
        [model], settings, enabled, tree=tree
    )
    assert _shown(sorted(judged, key=lambda d: d.sort_key)) == _shown(fresh)
    # the model's own finding stands either way; Scale's is gone once it has its hook
    assert [d.code for d in before] == [
        d.code for d in resolve([model], settings, enabled, tree=tree)
    ]
    assert not [d for d in fresh if d.filename == "pkg/layers.py"]


def test_tree_replace_rebuilds_when_the_shape_changes(tmp_path):
    settings, enabled = _settings(tmp_path)
    layers = _result(LAYERS, "pkg/layers.py", "pkg.layers")
    model = _result(MODEL, "pkg/model.py", "pkg.model")
    tree = Tree([layers, model], settings.protocol)
    # a class of the tree disappears: the model's child no longer resolves
    gone = _result("import torch\n", "pkg/layers.py", "pkg.layers")
    tree.replace(gone)
    assert tree.rebuilds == 2
    assert tree.hierarchy.resolve("pkg.layers.Scale") is None
    fresh = [d for d in resolve([gone, model], settings, enabled) if d.filename == "pkg/model.py"]
    assert _shown(resolve([model], settings, enabled, tree=tree)) == _shown(fresh)


def test_fix_of_a_file_updates_the_tree_in_place(tmp_path, monkeypatch):
    """``metalint fix`` analyses a file after each round of rewrites; the tree's cross-file
    view is updated for that file, never built again from every result (which made a fix of
    N files take time in N squared)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(LAYERS)
    (pkg / "model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    settings, enabled = _settings(tmp_path)
    results = [
        _result("", "pkg/__init__.py", "pkg"),
        _result(LAYERS, "pkg/layers.py", "pkg.layers"),
        _result(MODEL, "pkg/model.py", "pkg.model"),
    ]
    fixer = Fixer(results, settings, enabled, True, resolve)
    errors: list = []
    fixes = [_fix_file(name, fixer, errors) for name in ("pkg/layers.py", "pkg/model.py")]
    assert not errors
    assert all(ff.applied for ff in fixes)  # each file took at least one round of fixes
    assert fixer.tree.rebuilds == 1


@pytest.mark.parametrize(
    "body, read, expected",
    [
        # read before the argument is bound again: the caller's value
        ("n = int(n)\ny = n", "first", True),
        ("y = n\nn = torch.tensor(n)", "first", True),
        # read after it is bound again: what the method made
        ("n = torch.tensor(n)\ny = n", "last", False),
        # bound again inside a branch, read after it
        ("if n is None:\n    n = torch.tensor(1.0)\ny = n", "last", False),
        # never bound again
        ("y = n + 1\nz = n", "last", True),
    ],
)
def test_holds_argument(body, read, expected):
    """``MethodFacts.holds_argument``: a parameter read before any statement binds it again
    holds the caller's value (the answer is indexed once per method)."""
    source = "import torch\nfrom torch import nn\n\nclass M(nn.Module):\n"
    source += "    def __init__(self, n):\n        super().__init__()\n"
    source += textwrap.indent(body, " " * 8) + "\n"
    module = cst.parse_module(source)
    [cls] = collect(module, "m", False).classes
    init = cls.init
    names = [
        node
        for line in init.node.body.body
        for node in _names(line)
        if node.value == "n" and not _is_target(line, node)
    ]
    node = names[0] if read == "first" else names[-1]
    assert init.holds_argument(node) is expected
    assert init.holds_argument(node) is expected  # asked again: the same answer


def _names(node):
    from metalint.static.syntax import walk_code

    return [n for n in walk_code(node) if isinstance(n, cst.Name)]


def _is_target(line, name) -> bool:
    """Whether ``name`` is the target of an assignment in ``line``."""
    from metalint.static.syntax import walk_code

    for n in walk_code(line):
        if isinstance(n, cst.AssignTarget) and n.target is name:
            return True
    return False


FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "check").glob("*.py"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_positions_rendered_by_parts_are_those_of_the_whole_module(path, monkeypatch):
    """Findings are positioned by rendering the top-level classes and functions that hold
    them alone; the positions are those a render of the whole module gives (forced here by
    refusing every render alone)."""
    from metalint.static import engine

    source = path.read_text(encoding="utf-8")
    job = (source, path.name, path.stem, False, ("reset_parameters",), True)
    fast = analyze_one(job)
    whole = []
    monkeypatch.setattr(engine, "_render_alone", lambda *a, **k: whole.append(1))
    slow = analyze_one(job)
    assert [(d.code, d.start, d.end) for d in fast.diagnostics] == [
        (d.code, d.start, d.end) for d in slow.diagnostics
    ]
    assert whole or not fast.diagnostics
