"""The codemods ask one analysis, in three values, whether code draws random numbers
(:func:`metalint.static.draws.draws`); the fixer keeps no allow-list or deny-list of its own."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from metalint.static.draws import Draws, draws
from metalint.static.model import collect
from metalint.static.rule import RuleContext

SOURCE = """\
import random

import numpy as np
import torch
from torch import nn


def exists(v):
    return v is not None


def noise(n):
    return torch.randn(n)


def elided(n):
    "..."
"""


def _ctx() -> RuleContext:
    module = cst.parse_module(SOURCE)
    return RuleContext(collect(module, "m"), module, (), "m.py")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x = torch.zeros(3)", Draws.NEVER),
        ("n = len(xs) + int(d)", Draws.NEVER),
        ("y = w.view(-1)", Draws.NEVER),
        ("ok = exists(v)", Draws.NEVER),  # a function of the file, read
        ("x = torch.randn(3)", Draws.ALWAYS),
        ("nn.init.trunc_normal_(self.w, std=0.02)", Draws.ALWAYS),
        ("self.w.normal_()", Draws.ALWAYS),
        ("x = np.random.randn(3)", Draws.ALWAYS),
        ("x = random.random()", Draws.ALWAYS),
        ("x = noise(3)", Draws.MAYBE),  # draws, through a function of the file
        ("x = elided(3)", Draws.MAYBE),  # its body left out of the parse: not known
        ("x = schedule(3)", Draws.MAYBE),  # not known
        ("x = torch.zeros(3) if exists(v) else torch.rand(3)", Draws.ALWAYS),
    ],
)
def test_draws_answers_in_three_values(code, expected):
    assert draws(cst.parse_statement(code + "\n"), _ctx()) is expected


def test_host_only_counts_numpy_and_python_draws_only():
    ctx = _ctx()
    assert (
        draws(cst.parse_statement("x = np.random.rand(3)\n"), ctx, host_only=True) is Draws.ALWAYS
    )
    assert draws(cst.parse_statement("x = torch.rand(3)\n"), ctx, host_only=True) is Draws.MAYBE
    assert draws(cst.parse_statement("x = torch.zeros(3)\n"), ctx, host_only=True) is Draws.NEVER


def test_the_fixer_keeps_no_list_of_its_own():
    """``rng_free`` (a deny-list of the fixer) and the allow-list of ``recompute.draws`` were
    two answers to one question; the fixer now asks :func:`draws`."""
    fix = Path(__file__).resolve().parent.parent / "metalint" / "fix"
    text = {p.name: p.read_text(encoding="utf-8") for p in fix.glob("*.py")}
    for name in ("rng_free", "RNG_FREE_TORCH", "RNG_FREE_BUILTINS", "DETERMINISTIC_METHODS"):
        assert [f for f, t in text.items() if name in t] == [], name
    assert "def draws(" not in "".join(text.values())


CLASS = """\
import torch
from torch import nn


def schedule(n):
    return torch.linspace(0, 1, n)


class M(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.alphas = schedule(n)
        self.sizes = [1 + 2 * r for r in range(n)]
        self.proj = nn.Linear(d, d)
        self.scale = d**-0.5
        self.mask = torch.ones(n)
        filters = []
        for i in range(n):
            filters.append(torch.zeros(i))
        self.filters = filters
"""


def _class_tensors():
    from metalint.static.tensor_kind import class_tensors

    module = cst.parse_module(CLASS)
    facts = collect(module, "m")
    ctx = RuleContext(facts, module, (), "m.py")
    cls = facts.classes[0]
    return class_tensors(ctx, cls), cls


@pytest.mark.parametrize(
    ("attr", "expected"),
    [
        ("mask", "CERTAINLY"),
        ("alphas", "MAYBE"),  # what an unknown function returns
        ("filters", "MAYBE"),  # a list filled with tensors
        ("sizes", "NOT"),
        ("proj", "NOT"),
        ("scale", "NOT"),
    ],
)
def test_tensor_kind_answers_in_three_values(attr, expected):
    from metalint.static.tensor_kind import TensorKind

    tensors, cls = _class_tensors()
    [assign] = [a for a in cls.init.assigns if a.target == f"self.{attr}"]
    assert tensors.kind(assign.value, cls.init) is TensorKind[expected]
    # a plain attribute that may be a tensor: not the registered ones, not modules or numbers
    assert tensors.plain_tensor(attr) is (expected != "NOT")


def test_one_answer_per_class_and_file():
    from metalint.static.tensor_kind import class_tensors

    tensors, cls = _class_tensors()
    assert class_tensors(tensors.ctx, cls) is tensors


def test_the_fixer_has_no_tensor_analysis_of_its_own():
    fix = Path(__file__).resolve().parent.parent / "metalint" / "fix"
    text = "".join(p.read_text(encoding="utf-8") for p in fix.glob("*.py"))
    for name in ("def _may_be_tensor", "def _filled_with_tensors", "def _local_may_be_tensor"):
        assert name not in text
