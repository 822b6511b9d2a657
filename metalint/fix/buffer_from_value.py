"""ML002 buffer-from-value: compute the buffer in a hook that ``__init__`` calls.

``self.register_buffer("inv_freq", inv_freq, persistent=False)`` after
``inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`` gets::

    self.base = base                      # what the computation reads, kept on self
    self.dim = dim
    self.register_buffer("inv_freq", inv_freq, persistent=False)   # unchanged
    ...
    self.reset_parameters()               # last statement of __init__

    def reset_parameters(self):
        with torch.no_grad():
            self.inv_freq.copy_(1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim)))

The registration keeps its computation (on meta it costs nothing), so no shape has to be
derived; the hook re-computes the same value on the default device and copies it into the
buffer, wherever ``to_empty()`` put it. The hook is the class's ``init_non_persistent_buffers``
when it has one, else ``reset_parameters``. Deterministic values are recomputed exactly (safe);
a random value would be drawn twice (unsafe).
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import (
    ClassEdit,
    Rewrite,
    Unfixable,
    fill,
    guarded,
    names_in,
    substitute,
    torch_spelling,
)
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import string_value, walk
from metalint.static.tensors import value_kind

COMPOUND = (
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.IfExp,
)


def _paren(e: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(e, COMPOUND) and not e.lpar:
        return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return e


def inline_locals(edit: ClassEdit, e: cst.BaseExpression, depth: int = 0) -> cst.BaseExpression:
    """``e`` with the local tensors it reads replaced by the expressions that computed them."""
    if depth > 4:
        raise Unfixable("the value is computed through too many local variables")
    init = edit.init
    replace = {}
    for name in list(names_in(e)):
        n = name.value
        values = init.local_values.get(n)
        if not values or n == "self":
            continue
        node, v = values[-1]
        tensor = value_kind(v, edit.ctx.qualify, init) is not None or any(
            isinstance(x, cst.Call) for x in walk(v)
        )
        if not tensor:
            continue  # a number: stored on self by store_names
        if len(values) != 1:
            raise Unfixable(f"the local `{n}` is assigned more than once")
        if isinstance(node, cst.Assign) and any(
            isinstance(t.target, (cst.Tuple, cst.List)) for t in node.targets
        ):
            raise Unfixable(f"the local `{n}` is unpacked from a call")
        edit.locate(node)  # a local computed inside a loop or `with` cannot be inlined
        inlined = inline_locals(edit, v, depth + 1)
        replace[id(name)] = inlined if name is e else _paren(inlined)
    return substitute(e, replace)


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    node = finding.node
    index, line, path = edit.locate(node)
    if not (isinstance(node, cst.Call) and node.args and len(node.args) >= 2):
        raise Unfixable("not a `register_buffer(name, value)` call")
    attr = string_value(node.args[0].value)
    if attr is None:
        raise Unfixable("the buffer's name is not a string literal")
    value = node.args[1].value
    later = edit.used_after(attr, index, writes_only=True)
    if later:
        raise Unfixable(later)
    torch_name, _ = torch_spelling(ctx)
    kind = value_kind(value, ctx.qualify, edit.init)
    full = inline_locals(edit, value)
    for n in walk(full):
        if isinstance(n, cst.IfExp) or (isinstance(n, cst.Name) and n.value == "None"):
            raise Unfixable("the buffer may be `None`: it is not re-computed by a hook")
    value_node = edit.store_names(full, line, index)
    body = fill(f"with {torch_name}.no_grad():\n    self.{attr}.copy_(__v__)", v=value_node)
    if any(isinstance(n, cst.If) for n in path):
        body = guarded(f"getattr(self, {attr!r}, None) is not None", body)
    hook = edit.choose_hook(index, prefer=("init_non_persistent_buffers",))
    if kind == "random":
        edit.unsafe.append(
            "the random value is drawn a second time in the hook: eager values differ"
        )
    edit.use_hook(hook, index, [body])
    return edit.rewrite(f"Compute buffer `{attr}` in `{hook}()` and call it from `__init__`")
