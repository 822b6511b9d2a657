"""A rule hands its fix what it matched (a typed site on the finding); the fix reads it and
never detects the pattern again."""

from __future__ import annotations

import dataclasses

import libcst as cst
import pytest

from metalint.fix.edits import Unfixable
from metalint.rules.parameter_from_value import ParameterFromValue, ParameterSite
from metalint.static.model import collect
from metalint.static.rule import RuleContext

SOURCE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d)).requires_grad_(False)
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(d, d)) for _ in range(3)])
        conv = nn.Conv1d(d, d, 3)
        self.weight = conv.weight
"""


def _findings():
    module = cst.parse_module(SOURCE)
    facts = collect(module, "m")
    ctx = RuleContext(facts, module, ("reset_parameters", "init_weights"), "m.py")
    cls = facts.classes[0]
    return ctx, cls, {f.site.attr: f for f in ParameterFromValue(ctx).check_class(cls)}


def test_the_rule_hands_its_fix_a_typed_site():
    _, _, found = _findings()
    assert set(found) == {"scale", "ws", "weight"}
    assert all(isinstance(f.site, ParameterSite) for f in found.values())
    scale = found["scale"].site
    # the `nn.Parameter(...)` call itself, under `.requires_grad_(False)`
    assert cst.Module([]).code_for_node(scale.call) == "nn.Parameter(torch.ones(d))"
    assert scale.items is None
    assert type(found["ws"].site.items) is cst.ListComp and found["ws"].site.call is None
    # a tensor borrowed from a module built and thrown away: nothing to rewrite
    assert found["weight"].site.call is found["weight"].site.items is None


def test_the_fix_reads_the_site_and_does_not_detect_again():
    from metalint.fix import parameter_from_value

    ctx, cls, found = _findings()
    rewrite = parameter_from_value.plan(ctx, cls, found["scale"])
    assert "torch.empty(d)" in cst.Module([]).code_for_node(rewrite.new_class)
    # the same statement, handed without its call: the fix does not look for one itself
    bare = dataclasses.replace(
        found["scale"], site=dataclasses.replace(found["scale"].site, call=None)
    )
    with pytest.raises(Unfixable, match="no `nn.Parameter"):
        parameter_from_value.plan(ctx, cls, bare)
    # the list, handed as a single parameter: not rewritten as a list
    as_one = dataclasses.replace(
        found["ws"], site=dataclasses.replace(found["ws"].site, items=None)
    )
    with pytest.raises(Unfixable):
        parameter_from_value.plan(ctx, cls, as_one)
    assert parameter_from_value.plan(ctx, cls, found["ws"]).message.startswith(
        "Create the parameters of `ws`"
    )
