"""A distribution that construction builds (a flow's base, a VAE's prior:
``self.base = Normal(torch.zeros(dim), torch.ones(dim))``). Its constructor checks its
arguments (``validate_args`` is on by default) and raises on meta, so the module cannot be
built there: ML008. Fixture: ``fixtures/check/distribution_attribute.py``."""

from __future__ import annotations

import importlib.util
import shutil
import textwrap
from pathlib import Path

import pytest
from fixture_runs import check_all, load_module

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "check" / "distribution_attribute.py"
REPORTED = ["FlowBase", "StandardPrior", "LocalBounds"]
NOT_REPORTED = ["Unvalidated", "OnTheCpu"]


def _check(tmp_path: Path, source: str | None = None):
    path = tmp_path / "flows.py"
    if source is None:
        shutil.copy(FIXTURE, path)
    else:
        path.write_text(textwrap.dedent(source))
    return [d for d in check_all([path], tmp_path) if d.code != "ML012"]


def test_built_distributions_are_reported_where_they_are_built(tmp_path):
    # before: "All checks passed!" on the whole fixture, while the first three classes
    # raise when built on meta
    found = _check(tmp_path)
    assert [(d.code, d.symbol, d.start.row) for d in found] == [
        ("ML008", "FlowBase", 17),
        ("ML008", "StandardPrior", 24),
        ("ML008", "LocalBounds", 31),
    ]
    assert "`Normal(torch.zeros(dim), torch.ones(dim))`" in found[0].message
    assert "build the distribution where it is used" in found[0].help
    assert "validate_args=False" not in found[0].help  # its tensors would still stay on meta


@pytest.mark.parametrize(
    "line",
    [
        # torch.distributions spelled out, and a module alias
        "self.d = torch.distributions.Normal(torch.zeros(3), 1.0)",
        "self.d = D.Categorical(logits=torch.zeros(3))",
        # a local, then wrapped
        "d = Normal(torch.zeros(3), torch.ones(3))\n        self.d = D.Independent(d, 1)",
    ],
)
def test_each_spelling_is_reported(tmp_path, line):
    found = _check(tmp_path, _module(line))
    assert [(d.code, d.symbol) for d in found] == [("ML008", "M")]


@pytest.mark.parametrize(
    "line",
    [
        "self.d = Normal(torch.zeros(3), torch.ones(3), validate_args=False)",
        # numbers follow the CPU tensor beside them
        'self.d = Normal(torch.zeros(3, device="cpu"), 1.0)',
        # checks nothing of its own (the inner distribution is built elsewhere)
        "self.d = D.Independent(base, 1)",
        # built where it is used: not construction
        None,
    ],
)
def test_what_builds_on_meta_is_not_reported(tmp_path, line):
    if line is None:
        source = _module("pass") + (
            "\n    def prior(self):\n        return Normal(torch.zeros(3), torch.ones(3))\n"
        )
    else:
        source = _module(line)
    assert _check(tmp_path, source) == []


def _module(line: str) -> str:
    return (
        "import torch\nimport torch.distributions as D\nfrom torch import nn\n"
        "from torch.distributions import Normal\n\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self, base=None):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(3, 3)\n"
        f"        {line}\n"
    )


def test_the_module_own_constructor_keeps_its_advice(tmp_path):
    found = _check(
        tmp_path,
        """
        import torch
        from torch import nn
        from torch.distributions import Normal


        class Prior(nn.Module, Normal):
            def __init__(self, loc, scale):
                nn.Module.__init__(self)
                Normal.__init__(self, torch.as_tensor(loc), torch.as_tensor(scale))
        """,
    )
    assert [(d.code, d.symbol) for d in found] == [("ML008", "Prior")]
    assert "validate_args=False" in found[0].help


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
@pytest.mark.parametrize("name", REPORTED + NOT_REPORTED)
def test_what_check_says_is_what_a_meta_build_does(name):
    import torch

    cls = getattr(load_module(FIXTURE), name)
    cls(4)  # builds eagerly
    with torch.device("meta"):
        if name in REPORTED:
            with pytest.raises(RuntimeError, match="meta"):
                cls(4)
        else:
            cls(4)
