"""ML009 device-escape: a legacy ``torch.Tensor(sizes)`` becomes ``torch.empty(sizes)``.

PyG's ``self.weight = Parameter(Tensor(in_channels, out_channels))`` allocates the whole
weight on the CPU even under ``with torch.device("meta")``; ``torch.empty(in_channels,
out_channels)`` is the same uninitialised tensor (same shape, same dtype: the typed
constructors keep theirs as ``dtype=``) allocated where the default device says, so it lands
on meta. Only sizes are rewritten: one argument counts as a size when it is an integer, an
arithmetic of one, or an ``__init__`` parameter annotated ``int`` (``torch.Tensor(values)``
copies data and is left alone).

Safe: the same allocation (shape, dtype, uninitialised contents), so whatever ``__init__`` or
a hook then writes gives the same values; a tensor nothing writes holds whatever memory held in
either version.
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit, Rewrite, Unfixable, legacy_empty, render
from metalint.static.rule import Finding, RuleContext


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    node = finding.node
    if not isinstance(node, cst.Call):
        raise Unfixable("not a call to a legacy constructor")
    _index, line, _path = edit.locate(node)
    empty = legacy_empty(ctx, edit, node)
    if empty is None:
        raise Unfixable(
            "not a legacy constructor of sizes known statically (`torch.Tensor(sizes)`): "
            "a constructor of data needs its value set in a hook"
        )
    edit.replace[id(line)] = (line, [line.deep_replace(node, empty)])
    return edit.rewrite(
        f"Allocate with `{render(empty)}`: the legacy constructor allocates on the CPU even "
        'under `with torch.device("meta")`'
    )
