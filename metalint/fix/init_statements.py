"""What an in-place init statement is: the tensor a call writes, a statement that only initialises (:func:`init_only`), the code taken into a hook (:func:`take`). Shared by the codemods."""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.root_hook import (
    bound_names,
)
from metalint.static.names import dotted
from metalint.static.protocol import structure_test, structure_value
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import Write, inplace_write
from metalint.vocabulary import (
    INPLACE_METHODS,
    NO_GRAD_CONTEXTS,
)


def call_writes(call: cst.Call, ctx: RuleContext) -> Write | None:
    """What a statement's call writes: ``self.w.normal_().mul_(2)`` writes what ``normal_`` does."""
    while True:
        w = inplace_write(call, ctx.qualify)
        f = call.func
        if w is not None or not (
            isinstance(f, cst.Attribute)
            and f.attr.value in INPLACE_METHODS
            and isinstance(f.value, cst.Call)
        ):
            return w
        call = f.value


def init_call(call: cst.Call, ctx: RuleContext, own=None) -> bool:
    """An in-place init of a tensor of this module (``own``), or of a child module
    (``self.head.weight``)."""
    own = own or own_tensor
    w = call_writes(call, ctx)
    return w is not None and own(w.target)


def attr_of(call: cst.Call, ctx: RuleContext) -> str | None:
    w = call_writes(call, ctx)
    return w.own if w is not None else None


def own_tensor(d: str | None) -> bool:
    """``self.w`` or ``self.w.data``: a tensor of this module, not of a child (a reset hook
    must only touch its own tensors: the parent's value for a child belongs in init_weights)."""
    if not d or not d.startswith("self."):
        return False
    parts = d.split(".")
    return len(parts) == 2 or (len(parts) == 3 and parts[2] == "data")


def child_tensor(d: str | None) -> bool:
    """``self.head.weight`` (``.data``): a tensor of a child module."""
    return bool(d) and d.startswith("self.") and not own_tensor(d) and d.count(".") >= 2


def module_tensor(d: str | None) -> bool:
    return own_tensor(d) or child_tensor(d)


def init_only(s: cst.CSTNode, ctx: RuleContext, own=None, structure: bool = True) -> bool:
    """Does the statement only initialise tensors in place (``own``: which tensors count)?
    An ``if`` counts when every branch does; a branch whose tests (all of them, from the top
    ``if`` down) ask only about the structure of the module and its children
    (:func:`structure_test`) may also compute local numbers from the children's configuration
    (:func:`structure_value`) for its inits: torchvision ``VisionTransformer``'s ``if
    isinstance(self.conv_proj, nn.Conv2d): fan_in = self.conv_proj.in_channels * ...``, then
    ``trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))``. ``structure``: the
    tests above this statement are all such tests."""
    own = own or own_tensor
    if isinstance(s, cst.SimpleStatementLine):
        return all(
            isinstance(x, cst.Expr)
            and isinstance(x.value, cst.Call)
            and init_call(x.value, ctx, own)
            for x in s.body
        )
    if isinstance(s, (cst.If, cst.Else)) and own is module_tensor:
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        rest = getattr(s, "orelse", None)
        here = structure and (isinstance(s, cst.Else) or structure_test(s.test, ctx))
        return (
            bool(body)
            and any(not structure_local(b, ctx) for b in body)
            and all(
                init_only(b, ctx, own, here) or (here and structure_local(b, ctx)) for b in body
            )
            and (rest is None or init_only(rest, ctx, own, here))
        )
    if isinstance(s, cst.For):
        # timm CrossVit: ``for i in range(self.num_branches): trunc_normal_(getattr(self,
        # f'pos_embed_{i}'), std=.02)``: a loop over what the hook can read again
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        inner = own
        if own is not own_tensor and isinstance(s.target, cst.Name) and _container_iter(s.iter):
            # ``for lin in self.lins: nn.init.zeros_(lin.bias)``: the tensors of the modules
            # of a container child
            var = s.target.value + "."

            def inner(d: str | None) -> bool:
                return own(d) or bool(d and d.startswith(var))

        return (
            s.orelse is None
            and s.asynchronous is None
            and isinstance(s.target, cst.Name)
            and (_plain_iter(s.iter) or inner is not own)
            and bool(body)
            and all(init_only(b, ctx, inner) for b in body)
        )
    if isinstance(s, cst.With):
        items_ok = all(
            ctx.qualify(i.item.func if isinstance(i.item, cst.Call) else i.item) in NO_GRAD_CONTEXTS
            for i in s.items
        )
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        inits = [b for b in body if not _assertion(b)]
        # gluonts ``WaveNet``: ``with torch.no_grad(): assert self.conv_project.bias is not
        # None`` before the init: an assertion moves with it
        return items_ok and bool(inits) and all(init_only(b, ctx, own) for b in inits)
    return False


def _assertion(s: cst.CSTNode) -> bool:
    """``assert <test>`` alone on its line."""
    return (
        isinstance(s, cst.SimpleStatementLine)
        and len(s.body) == 1
        and isinstance(s.body[0], cst.Assert)
    )


def structure_local(s: cst.CSTNode, ctx: RuleContext) -> bool:
    """``fan_in = self.conv_proj.in_channels * ...``: one local name given a number computed
    from the children's configuration (:func:`structure_value`)."""
    if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1):
        return False
    a = s.body[0]
    return (
        isinstance(a, cst.Assign)
        and len(a.targets) == 1
        and isinstance(a.targets[0].target, cst.Name)
        and structure_value(a.value, ctx)
    )


def _container_iter(e: cst.BaseExpression) -> bool:
    """``self.lins`` or ``self.lins.children()``: the modules of a child, which a hook reaches
    again."""
    if isinstance(e, cst.Call) and not e.args and isinstance(e.func, cst.Attribute):
        if e.func.attr.value != "children":
            return False
        e = e.func.value
    d = dotted(e) or ""
    return d.startswith("self.") and d.count(".") == 1


def _plain_iter(e: cst.BaseExpression) -> bool:
    """``range(self.num_branches)``, ``range(len(sizes))``: an iterable of numbers computed
    from names and attributes by ``range``/``len`` alone (the hook computes it again)."""
    for n in walk_code(e):
        if isinstance(n, cst.Call) and not (
            isinstance(n.func, cst.Name) and n.func.value in ("range", "len")
        ):
            return False
        if isinstance(n, (cst.Lambda, cst.ListComp, cst.GeneratorExp, cst.NamedExpr)):
            return False
    return isinstance(e, cst.Call)


def take(edit: ClassEdit, body, moved, private: bool = False, index: int | None = None) -> list:
    """Remove the ``moved`` statements of ``__init__``; their copies for a hook, the local names
    they read stored on ``self`` (``private``: under a private name), with only the comment
    lines above them. ``index``: the top-level statement of ``__init__`` holding them, when
    ``body`` is a block inside it."""
    stmts = []
    for i in moved:
        s = body[i]
        edit.replace[id(s)] = (s, [])
        new = edit.store_names(
            s, s, i if index is None else index, bound=bound_names(s), private=private
        )
        lead = [line for line in getattr(new, "leading_lines", ()) if line.comment is not None]
        stmts.append(new.with_changes(leading_lines=lead))
    return stmts
