"""``metalint fix`` over many files takes time in proportion to them, and modules of the same
name in two package-less folders are each judged and fixed as their own folder defines them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from metalint.cli import main
from metalint.fix import apply as apply_module
from metalint.static import hierarchy as hierarchy_module
from metalint.static import templates

NET = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, dim: int = 8):
            super().__init__()
            self.gamma = nn.Parameter(torch.zeros(dim))

        def forward(self, x):
            return x * self.gamma
    """
)

FIXED_NET = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, dim: int = 8):
            super().__init__()
            self.gamma = nn.Parameter(torch.empty(dim))
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.zeros_(self.gamma)

        def forward(self, x):
            return x * self.gamma
    """
)


def _run(tmp_path: Path, monkeypatch, *args: str):
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(main, [*args, "--no-cache", "."])


def _two_folders(tmp_path: Path, a: str, b: str, init: bool = False) -> None:
    """``a/models/net.py`` and ``b/models/net.py``; ``a`` and ``b`` hold no ``__init__.py``
    (``models`` holds one when ``init``): both modules have the same name."""
    for folder, text in (("a", a), ("b", b)):
        models = tmp_path / folder / "models"
        models.mkdir(parents=True)
        if init:
            (models / "__init__.py").write_text("")
        (models / "net.py").write_text(text)


@pytest.mark.parametrize("init", [False, True])
def test_fix_writes_both_modules_of_the_same_name(tmp_path, monkeypatch, init):
    """Once the first folder's ``Net`` was fixed, the second's was judged by it (its reset
    hook re-creates ``gamma``): it was left unfixed and the summary said 0 remaining."""
    _two_folders(tmp_path, NET, NET, init)
    out = _run(tmp_path, monkeypatch, "fix", "--write")
    assert out.exit_code == 0, out.output
    assert "Fixed 2 errors (0 remaining; 0 unfixable)." in out.output
    assert "a/models/net.py:8: ML001 [Net] fixed" in out.output
    assert "b/models/net.py:8: ML001 [Net] fixed" in out.output
    for folder in ("a", "b"):
        assert (tmp_path / folder / "models" / "net.py").read_text() == FIXED_NET
    again = _run(tmp_path, monkeypatch, "check")
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("init", [False, True])
def test_check_reports_both_modules_of_the_same_name(tmp_path, monkeypatch, init):
    _two_folders(tmp_path, NET, NET, init)
    out = _run(tmp_path, monkeypatch, "check")
    assert out.exit_code == 1
    assert "a/models/net.py:8:9: ML001" in out.output
    assert "b/models/net.py:8:9: ML001" in out.output
    assert "Found 2 errors in" in out.output


@pytest.mark.parametrize("fixed", ["a", "b"])
def test_check_judges_each_module_by_its_own_class(tmp_path, monkeypatch, fixed):
    """One folder's ``Net`` fixed, the other's not: the other's finding stands, whichever
    folder comes first."""
    _two_folders(tmp_path, *((FIXED_NET, NET) if fixed == "a" else (NET, FIXED_NET)))
    left = "b" if fixed == "a" else "a"
    out = _run(tmp_path, monkeypatch, "check")
    assert out.exit_code == 1, out.output
    assert f"{left}/models/net.py:8:9: ML001" in out.output
    assert "Found 1 error in 2 files checked." in out.output


BIG = textwrap.dedent(
    """\
    import torch
    from torch import nn

    from net import Net


    class Big(Net):
        def __init__(self, dim: int = 8):
            super().__init__(dim)
            self.beta = nn.Parameter(torch.zeros(dim))
    """
)


def test_a_module_sees_the_module_of_its_own_folder(tmp_path, monkeypatch):
    """``b/models/big.py`` subclasses the ``Net`` of ``b/models/net.py`` (``from net import
    Net``): the base class it inherits is its own folder's, not ``a``'s, whose reset hook
    would call a ``reset_parameters()`` that ``Big`` overrides."""
    _two_folders(tmp_path, FIXED_NET, NET)
    (tmp_path / "b" / "models" / "big.py").write_text(BIG)
    out = _run(tmp_path, monkeypatch, "check")
    shown = sorted(line.split(":")[0] for line in out.output.splitlines() if ": ML0" in line)
    assert shown == ["b/models/big.py", "b/models/net.py"], out.output


# -- time in proportion to the files ----------------------------------------------------------

BLOCK = """\
import torch
from torch import nn

from .m{parent} import Block{parent}


class Block{i}(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.inner = Block{parent}(dim)
        self.scale = nn.Parameter(torch.ones(dim))
"""


def _generated(folder: Path, n: int) -> None:
    """A package of ``n`` model files, each building the class of an earlier one."""
    pkg = folder / "gen"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m0.py").write_text("from torch import nn\n\n\nclass Block0(nn.Module):\n    pass\n")
    for i in range(1, n):
        (pkg / f"m{i}.py").write_text(BLOCK.format(i=i, parent=(i - 1) // 2))


def _calls(tmp_path: Path, monkeypatch, n: int) -> dict[str, int]:
    """How many times ``fix --write`` of ``n`` generated files asks for a class's bases to
    tell whether a subclass defines the hook a fix writes (:func:`hook_refusal`), and for a
    template's generated class: the questions it once asked of every class of the tree for
    each file."""
    counts = {"bases in hook_refusal": 0, "generated_name": 0}
    inside = []
    bases = hierarchy_module.Hierarchy.bases
    refusal = apply_module.hook_refusal
    generated_name = templates.generated_name

    def counted_bases(self, fullname):
        counts["bases in hook_refusal"] += bool(inside)
        return bases(self, fullname)

    def counted_refusal(*args, **kwargs):
        inside.append(True)
        try:
            return refusal(*args, **kwargs)
        finally:
            inside.pop()

    def counted_generated_name(cls):
        counts["generated_name"] += 1
        return generated_name(cls)

    folder = tmp_path / str(n)
    _generated(folder, n)
    with monkeypatch.context() as m:
        m.setattr(hierarchy_module.Hierarchy, "bases", counted_bases)
        m.setattr(apply_module, "hook_refusal", counted_refusal)
        m.setattr(templates, "generated_name", counted_generated_name)
        m.chdir(folder)
        out = CliRunner().invoke(main, ["fix", "--write", "--no-cache", "-j", "1", "gen"])
    assert out.exit_code == 0, out.output
    assert f"Fixed {n - 1} errors (0 remaining" in out.output
    assert all(counts.values()), counts  # each question was asked
    return counts


def test_fix_asks_the_tree_in_proportion_to_the_files(tmp_path, monkeypatch):
    small = _calls(tmp_path, monkeypatch, 30)
    large = _calls(tmp_path, monkeypatch, 60)
    for name in small:
        assert large[name] <= 2.2 * small[name], (name, small, large)
