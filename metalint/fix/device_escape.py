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

A copy of a new tensor to the constructor's device, ``torch.ones(shape).to(self.device)`` with
``device: str = "cpu"`` (monai DiNTS), raises under meta with that default: the tensor is
created on that device instead, ``torch.ones(shape, device=self.device)``, which is what
``__init__`` then holds in either version. Safe when nothing between the factory and the copy
draws random numbers (the same values on any device); unsafe otherwise (``torch.zeros(n)
.normal_(1, 0.01).to(self.device)``: a CUDA device draws other numbers than the CPU).
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import Rewrite, Unfixable, path_to, render, with_device
from metalint.fix.store import legacy_empty
from metalint.static.draws import Draws, draws
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import keyword


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    site = finding.site
    node, copy = site.call, site.copy == "to"
    method = None
    if any(s is site.method.node for s in ctx.module.body):
        raise Unfixable(
            f"the copy is in `{site.method.name}()`, a function of the module that construction "
            "calls: the fix rewrites the class, not that function"
        )
    try:
        _index, line, _path = edit.locate(node)
    except Unfixable:
        # a legacy constructor in a method ``__init__`` calls (torch-geometric-temporal's
        # ``_create_input_gate_parameters_and_layers()``): the same allocation wherever it runs
        line = None if copy else _statement_in_method(edit, site)
        if line is None:
            raise
        method = site.method.node
    if copy:
        return _onto_factory(ctx, edit, node, line, site.factory)
    if not site.sizes:
        raise Unfixable(
            "not a legacy constructor of sizes known statically (`torch.Tensor(sizes)`): "
            "a constructor of data needs its value set in a hook"
        )
    empty = legacy_empty(ctx, node, site.dtype)
    if method is None:
        edit.replace[id(line)] = (line, [line.deep_replace(node, empty)])
    else:
        edit.replace_in_method(method, line, [line.deep_replace(node, empty)])
    return edit.rewrite(
        f"Allocate with `{render(empty)}`: the legacy constructor allocates on the CPU even "
        'under `with torch.device("meta")`'
    )


def _statement_in_method(edit: ClassEdit, site) -> cst.SimpleStatementLine | None:
    """The statement line holding the site's call in its method, a method of the class; or
    None."""
    if edit.cls.methods.get(site.method.name) is not site.method:
        return None
    path = path_to(site.method.node, site.call) or []
    lines = [n for n in path if isinstance(n, cst.SimpleStatementLine)]
    return lines[-1] if lines else None


def _onto_factory(ctx: RuleContext, edit: ClassEdit, node: cst.Call, line, root) -> Rewrite:
    """``torch.ones(shape).to(self.device)`` -> ``torch.ones(shape, device=self.device)``:
    ``root`` is the factory the rule found the copied tensor made by (``EscapeSite.factory``)."""
    if (
        len(node.args) != 1
        or node.args[0].star
        or (node.args[0].keyword is not None and node.args[0].keyword.value != "device")
    ):
        raise Unfixable("the copy takes other arguments than the device")
    target = node.args[0].value
    if root is None:
        raise Unfixable("the copied tensor is not made by a torch factory that takes `device=`")
    if keyword(root, "device") is not None or keyword(root, "out") is not None:
        raise Unfixable(f"`{render(root.func)}` already names a device or an output")
    if any(a.star for a in root.args):
        raise Unfixable(f"`{render(root.func)}` takes `*args`/`**kwargs`: they may name a device")
    new_root = with_device(root, target)
    receiver = node.func.value
    made = new_root if receiver is root else receiver.deep_replace(root, new_root)
    edit.replace[id(line)] = (line, [line.deep_replace(node, made)])
    if draws(receiver, ctx) is not Draws.NEVER:
        edit.unsafe.append(
            "random numbers are now drawn on that device: on a GPU they differ from the CPU's"
        )
    return edit.rewrite(
        f"Create it with `{render(root.func)}(..., device={render(target)})` instead of copying "
        "it there: a copy of a meta tensor raises"
    )
