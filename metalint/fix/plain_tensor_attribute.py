"""ML007 plain-tensor-attribute: register the tensor as a non-persistent buffer.

``self.mask = torch.ones(n)`` becomes ``self.register_buffer("mask", torch.ones(n),
persistent=False)``: the same value eagerly, no new checkpoint key (``persistent=False``), and
``to_empty()``/``.to()`` now move it. The value it computes is then a buffer computed in
``__init__``, which ML002 reports and its fix moves into a hook (the fixes compose over rounds).

Safe when nothing else in the class assigns the attribute (assigning a non-tensor to a buffer
raises); unsafe otherwise. Not fixable before ``super().__init__()`` (no buffers yet).
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit, Rewrite, Unfixable, render, stmt
from metalint.static.names import dotted
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    node = finding.node
    index, line, path = edit.locate(node)
    if isinstance(node, cst.Assign):
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Attribute):
            raise Unfixable("the tensor is assigned with several targets")
        target = dotted(node.targets[0].target)
    elif isinstance(node, cst.AnnAssign) and node.value is not None:
        target = dotted(node.target)
    else:
        raise Unfixable("not a plain assignment")
    if not target or not target.startswith("self.") or target.count(".") != 1:
        raise Unfixable("not an attribute of `self`")
    attr = target[5:]
    if len(line.body) != 1:
        raise Unfixable("the assignment shares its line with other statements")
    # register_buffer needs Module.__init__ to have run
    supers = [
        i
        for i, s in enumerate(edit.init_body)
        if any(
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "__init__"
            for n in walk(s)
        )
    ]
    if not supers or supers[0] > index:
        raise Unfixable("the tensor is assigned before `super().__init__()`")
    value = render(node.value, ctx.module)
    new_line = line.with_changes(
        body=[stmt(f'self.register_buffer("{attr}", {value}, persistent=False)').body[0]]
    )
    edit.replace[id(line)] = (line, [new_line])
    others = [
        a
        for m in cls.methods.values()
        for a in m.assigns
        if (a.target == target or a.target.startswith(target + ".")) and a.node is not node
    ]
    if others:
        edit.unsafe.append(
            f"`self.{attr}` is assigned elsewhere in the class; a buffer only takes tensors"
        )
    return edit.rewrite(
        f'Register `{attr}` with `self.register_buffer("{attr}", ..., persistent=False)`'
    )
