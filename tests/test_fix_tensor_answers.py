"""The fixer asks whether a value is a tensor, and whether a call draws, of ``metalint/static``
(:mod:`metalint.static.tensor_kind`, :mod:`metalint.static.draws`): no answer of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from metalint.static.model import collect
from metalint.static.rule import RuleContext

FIX = Path(__file__).resolve().parent.parent / "metalint" / "fix"

CLASS = """\
from typing import Optional

import torch
from torch import Tensor, nn


class M(nn.Module):
    def __init__(self, a: torch.Tensor, b: Optional[Tensor], c: int, d, *, e: Tensor = None):
        super().__init__()
        self.t = a
"""


def _setup():
    from metalint.static.tensor_kind import class_tensors

    module = cst.parse_module(CLASS)
    facts = collect(module, "m")
    cls = facts.classes[0]
    return class_tensors(RuleContext(facts, module, (), "m.py"), cls), cls


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a", "CERTAINLY"), ("e", "CERTAINLY"), ("b", "MAYBE"), ("c", "NOT"), ("d", "NOT")],
)
def test_argument_kind_by_annotation(name, expected):
    from metalint.static.tensor_kind import TensorKind, argument_kind

    _, cls = _setup()
    assert argument_kind(cls.init, name) is TensorKind[expected]
    assert argument_kind(cls.init, "not_an_argument") is TensorKind.NOT


def test_certainly_vouches_for_annotated_arguments_and_the_tensor_itself():
    tensors, cls = _setup()
    m = cls.init
    assert tensors.certainly(cst.parse_expression("a * 2"), m)
    assert tensors.certainly(cst.parse_expression("torch.zeros(3)"), m)
    assert not tensors.certainly(cst.parse_expression("b"), m)  # Optional[Tensor]: maybe
    assert not tensors.certainly(cst.parse_expression("self.t.to('cpu')"), m)
    assert tensors.certainly(cst.parse_expression("self.t.to('cpu')"), m, itself="self.t")


def test_random_call_is_the_answer_of_draws():
    from metalint.static.draws import random_call

    assert random_call("torch.randn") and random_call("numpy.random.rand")
    assert not random_call("torch.zeros") and not random_call(None)


def test_the_fixer_reads_no_random_factory_list_and_no_annotation():
    """Membership in ``RANDOM_FACTORIES`` and reading an argument's annotation for ``Tensor``
    are questions of ``metalint/static``, asked through ``random_call`` and ``argument_kind``."""
    found = []
    for p in sorted(FIX.glob("*.py")):
        text = p.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Name) and c.id == "RANDOM_FACTORIES" for c in node.comparators
            ):
                found.append(f"{p.name}:{node.lineno}")
            if isinstance(node, ast.Constant) and node.value == "Tensor":
                found.append(f"{p.name}:{node.lineno}")
    assert found == []
