"""Modules that are also ``torch.distributions`` distributions and run the distribution's
constructor on themselves (gpytorch's priors: ``class Prior(Module, Normal)``, then
``Normal.__init__(self, loc, scale, validate_args=validate_args)``). With validation on, the
constructor checks its arguments' values and raises on meta (ML008). Fixture:
``fixtures/check/distribution_module_validates.py``."""

from __future__ import annotations

import importlib.util
import shutil
import textwrap
from pathlib import Path

import pytest
from fixture_runs import check_all, fix_all, load_module

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "check" / "distribution_module_validates.py"


def _check(tmp_path: Path, source: str | None = None):
    path = tmp_path / "priors.py"
    if source is None:
        shutil.copy(FIXTURE, path)
    else:
        path.write_text(textwrap.dedent(source))
    return [(d.code, d.symbol) for d in check_all([path], tmp_path) if d.code != "ML012"]


def test_validating_constructors_are_reported(tmp_path):
    # before: "All checks passed!", while each of these four raises when built on meta
    assert _check(tmp_path) == [
        ("ML008", "LogScalePrior"),
        ("ML008", "BoxPrior"),
        ("ML008", "ScalePrior"),
        ("ML008", "CorrelationPrior"),
    ]


HEAD = """
    import torch
    import torch.nn as nn
    from torch.distributions import Normal
"""


@pytest.mark.parametrize(
    "body",
    [
        # validation off by a literal
        "Normal.__init__(self, loc, scale, validate_args=False)",
        # off by the default of the parameter handed on
        "Normal.__init__(self, loc, scale, validate_args=off)",
        # arguments made on the CPU: the check reads CPU tensors
        'Normal.__init__(self, torch.zeros(3, device="cpu"), torch.ones(3, device="cpu"))',
    ],
)
def test_validation_off_or_cpu_arguments_are_quiet(tmp_path, body):
    source = (
        HEAD
        + f"""
    class P(nn.Module, Normal):
        def __init__(self, loc=0.0, scale=1.0, off=False):
            nn.Module.__init__(self)
            {body}
    """
    )
    assert _check(tmp_path, source) == []


def test_parameter_reassigned_before_it_is_handed_on_is_not_its_default(tmp_path):
    source = (
        HEAD
        + """
    class P(nn.Module, Normal):
        def __init__(self, loc=0.0, scale=1.0, validate_args=False):
            nn.Module.__init__(self)
            validate_args = None
            Normal.__init__(self, loc, scale, validate_args=validate_args)
    """
    )
    assert _check(tmp_path, source) == [("ML008", "P")]


def test_a_base_that_checks_nothing_is_quiet(tmp_path):
    # ``TransformedDistribution`` has no ``arg_constraints`` of its own; nor does
    # ``super().__init__`` reach a distribution first when ``nn.Module`` is the first base
    source = """
    import torch.nn as nn
    from torch.distributions import Normal, TransformedDistribution

    class T(nn.Module, TransformedDistribution):
        def __init__(self, base, transforms):
            nn.Module.__init__(self)
            TransformedDistribution.__init__(self, base, transforms)

    class M(nn.Module, Normal):
        def __init__(self):
            super().__init__()
    """
    assert _check(tmp_path, source) == []


def test_fix_refuses_with_its_reason(tmp_path):
    path = tmp_path / "priors.py"
    shutil.copy(FIXTURE, path)
    lines = fix_all([path], tmp_path).splitlines()
    assert path.read_text() == FIXTURE.read_text()
    refused = [line for line in lines if "constructor checks the values it is given" in line]
    assert len(refused) == 4, lines


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_fixture_classes_raise_on_meta_as_reported():
    import torch

    mod = load_module(FIXTURE)
    args = {
        "LogScalePrior": (0.0, 1.0),
        "BoxPrior": (0.0, 1.0),
        "ScalePrior": (1.0,),
        "CorrelationPrior": (3, 1.0),
        "RatePrior": (2.0, 1.0),
        "QuietPrior": (0.0, 1.0),
        "HostPrior": (3,),
    }
    raised = set()
    for name, a in args.items():
        with torch.device("meta"):
            try:
                getattr(mod, name)(*a)
            except RuntimeError:
                raised.add(name)
    assert raised == {"LogScalePrior", "BoxPrior", "ScalePrior", "CorrelationPrior"}


# -- buffers registered by a function under the names it is handed ------------------------

NAMED = ROOT / "fixtures" / "check" / "buffers_registered_by_name.py"
HELPER = """
def bufferize(module, attributes):
    clones = {attr: getattr(module, attr).clone() for attr in attributes}
    for attr, value in clones.items():
        delattr(module, attr)
        module.register_buffer(attr, value)


def describe(module, attributes):
    return {attr: getattr(module, attr) for attr in attributes}
"""
USER = """
import torch.nn as nn
from torch.distributions import Normal

from .utils import {name}


class NormalPrior(nn.Module, Normal):
    def __init__(self, loc, scale):
        nn.Module.__init__(self)
        Normal.__init__(self, loc, scale, validate_args=False)
        {name}(self, ("loc", "scale"))
"""


def _package(tmp_path: Path, name: str):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(HELPER)
    (pkg / "priors.py").write_text(USER.format(name=name))
    return [(d.code, d.symbol, d.subject) for d in check_all([pkg], tmp_path) if d.code != "ML012"]


def test_buffers_named_by_a_helper_of_the_same_file(tmp_path):
    # before: "All checks passed!", while the probe loses both buffers (MP001)
    shutil.copy(NAMED, tmp_path / NAMED.name)
    found = check_all([tmp_path / NAMED.name], tmp_path)
    got = [(d.code, d.symbol, d.subject) for d in found if d.code != "ML012"]
    assert got == [("ML002", "NormalPrior", ("loc",)), ("ML002", "NormalPrior", ("scale",))]


def test_buffers_named_by_a_helper_of_another_file(tmp_path):
    assert _package(tmp_path, "bufferize") == [
        ("ML002", "NormalPrior", ("loc",)),
        ("ML002", "NormalPrior", ("scale",)),
    ]


def test_a_helper_of_another_file_that_registers_nothing_is_quiet(tmp_path):
    assert _package(tmp_path, "describe") == []


def test_the_fix_refuses_a_buffer_a_helper_registers(tmp_path):
    path = tmp_path / NAMED.name
    shutil.copy(NAMED, path)
    lines = fix_all([path], tmp_path).splitlines()
    assert path.read_text() == NAMED.read_text()
    assert sum("not a `register_buffer(name, value)` call" in line for line in lines) == 2, lines


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_helper_registered_buffers_are_lost_after_to_empty():
    import torch

    mod = load_module(NAMED)
    with torch.device("meta"):
        prior = mod.NormalPrior(0.5, 2.0)
    assert sorted(name for name, _ in prior.named_buffers()) == ["loc", "scale"]
    assert all(b.is_meta for b in prior.buffers())  # nothing to restore them from
