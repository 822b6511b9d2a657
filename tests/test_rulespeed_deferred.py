"""A deferred analysis names the cross-file findings it leaves unmade (ML009, ML014 as ML008),
and the memoised answers of ``RuleContext.qualify`` follow the imports a module-level
function's facts add."""

from __future__ import annotations

import textwrap

import libcst as cst

from metalint.diagnostics import HelperReads
from metalint.static.model import collect, function_facts
from metalint.static.rule import RuleContext

MODEL = """
import torch.nn as nn
from pkg.layers import WNConv1d, make_table
from pkg import utils

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv = WNConv1d(dim, dim, 3)
        self.table = utils.make_table(dim)
        self.other = make_table(dim)
"""


def _analyse(defer: bool):
    from metalint.fix.registry import fix_for
    from metalint.rules import all_rules
    from metalint.static.engine import analyze_source

    return analyze_source(
        textwrap.dedent(MODEL),
        "block.py",
        "pkg.block",
        rules=all_rules(),
        fix_for=fix_for,
        defer_helper_reads=defer,
    )


def test_deferred_reads_name_each_rule_and_function():
    full, deferred = _analyse(False), _analyse(True)
    at_calls = [d for d in full.diagnostics if d.condition and d.condition.get(HelperReads)]
    named = {(d.code, d.condition.get(HelperReads).function) for d in at_calls}
    assert {"ML009", "ML014"} <= {code for code, _ in named}
    assert ("ML014", "pkg.layers.WNConv1d") in named
    assert deferred.helper_reads == sorted(named)
    assert [d for d in full.diagnostics if d not in at_calls] == deferred.diagnostics


def test_qualify_follows_imports_added_after_the_first_answer():
    source = textwrap.dedent(
        """
        def helper():
            import torch as T

        def other():
            return T.zeros(2)
        """
    )
    module = cst.parse_module(source)
    facts = collect(module, "pkg.m")
    ctx = RuleContext(facts, module, (), "m.py", source)
    call = module.body[1].body.body[0].body[0].value
    assert ctx.qualify(call.func) is None  # ``T`` is bound nowhere the file-wide pass reads
    assert ctx.qualify(call.func) is None
    function_facts(module.body[0], facts)  # the helper's facts add its import
    assert ctx.qualify(call.func) == "torch.zeros"
