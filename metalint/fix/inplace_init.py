"""ML003 inplace-init-outside-hook: move in-place init from ``__init__`` into ``reset_parameters``.

Every top-level statement of ``__init__`` that only initialises tensors in place
(``nn.init.trunc_normal_(self.pos, std=.02)``, ``self.w.data.fill_(1.0)``, a
``with torch.no_grad():`` block of them) moves, in order, to the end of ``reset_parameters()``
(created or extended), which ``__init__`` calls last; the constructor arguments they read are
kept on ``self``. Moving them all at once keeps their order.

Safe when the moved statements draw no random numbers, or nothing left between them and the end
of ``__init__`` does (the draws then happen in the same order); unsafe otherwise (same
distribution, other values under the same seed).
"""

from __future__ import annotations

import copy

import libcst as cst

from metalint.fix.children_first import (
    ROOT_HOOK,
    block_runs,
    children_first,
    children_guarded,
    creates_child,
    move_children_first,
    place_call,
    root_hook,
)
from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    path_to,
    render,
    stmt,
)
from metalint.fix.flow import touches, uses
from metalint.fix.init_statements import (
    attr_of,
    child_tensor,
    init_call,
    init_only,
    module_tensor,
    structure_local,
    take,
)
from metalint.fix.move_init import (
    initialising,
    method_into_reset,
    move_own,
    move_own_in_block,
    only_own,
)
from metalint.fix.root_hook import (
    called_once,
    through_method,
)
from metalint.fix.values import own_helper
from metalint.static.draws import Draws, draws
from metalint.static.protocol import structure_test
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.vocabulary import RESET_HOOK

HOOK = RESET_HOOK


def _why_not_block(top: cst.CSTNode, ctx: RuleContext) -> str:
    """Why a block holding a child's init does not move whole into the root hook."""
    if isinstance(top, cst.If):
        for n in walk_code(top):
            if isinstance(n, cst.If) and not structure_test(n.test, ctx):
                return (
                    f"the child's init is inside `if {render(n.test)}:`, a test of more than the "
                    "structure of the module and its children, and the block does not make "
                    "that child once: whether the child exists does not tell whether it ran"
                )
        for n in walk_code(top):
            if (
                isinstance(n, cst.SimpleStatementLine)
                and len(n.body) == 1
                and isinstance(n.body[0], cst.Assign)
                and not structure_local(n, ctx)
            ):
                return (
                    f"the block computes `{render(n.body[0].targets[0].target)}` from more than "
                    "the configuration of the children (a tensor's values, maybe): a hook "
                    "would not compute it again to the same value"
                )
    return (
        "the child's init is inside a block that does not make that child once: "
        "whether the child exists does not tell whether the block ran"
    )


def _parameter_loop(ctx: RuleContext, edit: ClassEdit, loop: cst.For, index: int) -> Rewrite:
    """``for param in self.parameters(): nn.init.xavier_uniform_(param)`` in a class with no
    child modules (the rule reports it only there): the loop moves into `reset_parameters()`,
    called where it stood, so eager construction runs the same code at the same point (safe);
    the protocol then replays it. Not fixed inside a block, or when the loop reads a local."""
    body = edit.init_body
    if index < 0 or body[index] is not loop:
        raise Unfixable("the loop is not a top-level statement of `__init__`")
    moved = take(edit, body, [index])
    edit.use_hook(HOOK, index, moved, random=draws(loop, ctx) is not Draws.NEVER, call_at=loop)
    return edit.rewrite("Move the loop that initialises every parameter into `reset_parameters()`")


def _not_in_init(method) -> str:
    """Why an init outside ``__init__`` is not moved, naming ``method``, the method of the class
    that holds it (None: none): in a
    public builder (fairseq's ``build_output_projection()``, which esm's inverse-folding decoder
    keeps) a subclass overriding the builder makes another child, and a hook initialising
    the child would apply this init to it."""
    where = method.name if method is not None else None
    if where is None:
        return "the init is not in `__init__` itself"
    if not where.startswith("_"):
        return (
            f"the init is in `{where}()`, a public method that `__init__` calls: a subclass "
            "overriding it builds another child, which a hook's init would then change"
        )
    return f"the init is in `{where}()`, not in `__init__` itself"


def _locals_of(method) -> set[str]:
    """The names ``method`` assigns (its locals)."""
    return {
        t.value
        for n in walk_code(method.node.body)
        if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For))
        for tt in ([x.target for x in n.targets] if isinstance(n, cst.Assign) else [n.target])
        for t in ([e.value for e in tt.elements] if isinstance(tt, (cst.Tuple, cst.List)) else [tt])
        if isinstance(t, cst.Name)
    }


def _children_out_of_builder(
    ctx: RuleContext, edit: ClassEdit, finding: Finding, method
) -> Rewrite:
    """In-place inits of children in a private builder that ``__init__`` calls once
    (torch-geometric-temporal's ``UnitGCN._init_attention_layers()``, called under ``if
    self.attention:``: ``self.conv_ta = nn.Conv1d(...)``, then ``nn.init.constant_(self.conv_ta
    .weight, 0)``, and so on for ``conv_sa``, ``fc1c``, ``fc2c``): every top-level init-only
    statement of children's tensors in the builder moves, in order, into a root
    ``init_weights()``, called right after the statement of ``__init__`` that calls the builder,
    and guarded by the children being there when that call is in an ``if``. The parent's law
    then runs after the children's own hooks, as eagerly. Safe when nothing the builder runs
    after the first moved random draw draws random numbers; unsafe otherwise (the children made
    after it draw their default init first). Refused when a moved statement reads the builder's
    locals, when the builder uses a child after its init, or when the class has a
    ``reset_parameters()`` or ``init_weights()`` of its own (merged by hand)."""
    node = finding.node
    why = _not_in_init(method)
    if method is None or not method.name.startswith("_"):
        raise Unfixable(why)
    body = list(method.node.body.body) if isinstance(method.node.body, cst.IndentedBlock) else []
    moved = [
        i
        for i, b in enumerate(body)
        if isinstance(b, cst.SimpleStatementLine) and init_only(b, ctx, child_tensor)
    ]
    if not any(path_to(body[i], node) is not None for i in moved):
        raise Unfixable(why)
    if ROOT_HOOK in edit.cls.methods:
        raise Unfixable(f"{why}, and `{edit.cls.name}` already has `{ROOT_HOOK}()`")
    memo = edit.memo()
    kids = _builder_kids(edit, method, body, moved, why)
    c = called_once(edit, method)
    # a reset_parameters() __init__ calls later (an earlier fix's): the new init_weights() ends
    # with it and takes its place, so the moved inits run there (parent_init.own_hook_last)
    opening, tail, _called = root_hook(edit, c, c, set())
    crossed = [body[j] for j in range(moved[0] + 1, len(body)) if j not in moved]
    if tail is not None:
        init = edit.init_body
        end = next(j for j, b in enumerate(init) if b is tail)
        crossed += init[c + 1 : end]
        for a in sorted(kids):
            if any(touches(b, a, False, memo) for b in init[c + 1 : end]):
                raise Unfixable(f"{why}, and `self.{a}` is used in `__init__` after the builder")
    if any(draws(body[i], ctx) is not Draws.NEVER for i in moved) and not all(
        draws(b, ctx) is Draws.NEVER for b in crossed
    ):
        edit.unsafe.append(
            "the random draws now run after other random draws of construction, so eager "
            "values differ under the same seed"
        )
    stmts = [body[i].with_changes(leading_lines=()) for i in moved]
    for i in moved:
        edit.replace_in_method(method.node, body[i], [])
    if isinstance(edit.init_body[c], cst.If):
        # the builder makes them all or none: the first one made guards them
        made = [
            k
            for b in body
            for k in sorted(kids)
            if isinstance(b, cst.SimpleStatementLine) and creates_child(b, k)
        ]
        every = set(made) == kids and not edit.returns(method.node.body)
        stmts = [children_guarded(stmts, frozenset(made[:1] if every else kids), edit)]
    stmts.extend(place_call(edit, c, False, tail, None))
    edit.hook_append[ROOT_HOOK] = [*opening, *stmts]
    n = len(moved)
    return edit.rewrite(
        f"Move {n} in-place init statement{'s' if n != 1 else ''} of children's tensors out of "
        f"`{method.name}()` into a root `{ROOT_HOOK}()` called after it"
    )


def _builder_kids(edit: ClassEdit, method, body: list, moved: list[int], why: str) -> set[str]:
    """The children's tensors the ``moved`` statements of builder ``method`` (its ``body``)
    initialise; raises :class:`Unfixable` when one reads a local of the builder or the
    builder uses a tensor after its init."""
    ctx, memo = edit.ctx, edit.memo()
    local = _locals_of(method)
    kids: set[str] = set()
    for i in moved:
        if any(isinstance(n, cst.Name) and n.value in local for n in walk_code(body[i])):
            raise Unfixable(f"{why}, and an init there reads a local of `{method.name}()`")
        inits = [
            a
            for c in walk_code(body[i])
            if isinstance(c, cst.Call)
            for a in [attr_of(c, ctx)]
            if a and init_call(c, ctx, module_tensor)
        ]
        for a in inits:
            if any(
                touches(body[j], a, False, memo) for j in range(i + 1, len(body)) if j not in moved
            ):
                raise Unfixable(f"{why}, and `self.{a}` is used after its init there")
        kids.update(inits)
    return kids


def _own_init_out_of_builder(
    ctx: RuleContext, edit: ClassEdit, finding: Finding, method
) -> Rewrite:
    """An in-place init of an own tensor in a private builder that ``__init__`` calls once
    (torch-geometric-temporal's ``A3TGCN._setup_layers()``: ``self._base_tgcn = TGCN(...)``,
    then ``self._attention = nn.Parameter(torch.empty(p))`` and ``nn.init.uniform_(self.
    _attention)``): the init statement moves into ``reset_parameters()``, which ``__init__``
    calls after the builder. Safe when nothing after it in the builder draws random numbers
    (:meth:`ClassEdit.use_hook` judges what follows the call in ``__init__``). Refused when
    code after it in the builder uses the tensor, or the statement reads the builder's
    locals."""
    node = finding.node
    why = _not_in_init(method)
    if method is None or not method.name.startswith("_") or any("." in x for x in finding.subject):
        raise Unfixable(why)
    body = method.node.body.body if isinstance(method.node.body, cst.IndentedBlock) else ()
    at = next((i for i, b in enumerate(body) if path_to(b, node) is not None), None)
    if (
        at is None
        or not isinstance(body[at], cst.SimpleStatementLine)
        or not init_only(body[at], ctx)
    ):
        raise Unfixable(why)
    line = body[at]
    local = _locals_of(method)
    if any(isinstance(n, cst.Name) and n.value in local for n in walk_code(line)):
        raise Unfixable(f"{why}, and it reads a local of `{method.name}()`")
    written, _read, _ = uses(line, edit.memo())
    after = body[at + 1 :]
    for attr in sorted(written):
        if any(touches(s, attr, False, edit.memo()) for s in after):
            raise Unfixable(f"{why}, and `self.{attr}` is used after it there")
    c = called_once(edit, method)
    random = draws(line, ctx) is not Draws.NEVER
    if random and not all(draws(s, ctx) is Draws.NEVER for s in after):
        edit.unsafe.append(
            f"the random value is now drawn after the rest of `{method.name}()`, after other "
            "random draws, so eager values differ under the same seed"
        )
    edit.replace_in_method(method.node, line, [])
    edit.use_hook(HOOK, c, [line.with_changes(leading_lines=())], random=random)
    return edit.rewrite(
        f"Move the in-place init out of `{method.name}()` into `{HOOK}()`, called after it"
    )


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    body = edit.init_body
    site = finding.site
    index = edit.top_index_of(finding.node)
    if site.form == "assign":
        # ``self.conv.weight.data[:] = t``: no codemod moves a write by assignment
        raise Unfixable("the tensor is written by an assignment (`.data`, a slice), not a call")
    if site.form == "replace":
        return _copy_into_child(ctx, edit, finding.node, site)
    helper = own_helper(cls, site.method)
    method = helper if helper is not None and initialising(helper, ctx) else None
    if site.form == "loop" and (index >= 0 or method is None):
        return _parameter_loop(ctx, edit, finding.node, index)
    if index < 0:
        return _outside_init(ctx, edit, finding, helper, method)
    if not init_only(body[index], ctx):
        return _not_only_own(ctx, edit, finding, index)
    return _shared(edit, (move_own,), lambda: move_own(ctx, edit))


def _shared(edit: ClassEdit, key: tuple, make) -> Rewrite:
    """``make()``, the rewrite of ``edit`` (new: nothing scheduled yet) that depends on its
    class and ``key`` alone, worked out once for all the findings of the class that share it
    (the in-place inits of one method: timm's ``_init_weights()``); what it raises, raised
    again."""
    memo = edit.ctx.memo.setdefault(_shared, {})
    ident = (id(edit.cls.node), *(k if type(k) is int else id(k) for k in key))
    hit = memo.get(ident)
    if hit is None or hit[0] is not edit.cls or hit[1] != key:
        try:
            hit = (edit.cls, key, make(), None)
        except Exception as exc:
            # kept bare (no traceback, no context): a traceback's frames hold this memo, a
            # cycle that outlives the file's analysis while the collector is paused
            memo[ident] = (edit.cls, key, None, copy.copy(exc))
            raise
        memo[ident] = hit
    if hit[3] is not None:
        raise copy.copy(hit[3])  # raised again for each finding, as the first time
    return hit[2]


def _outside_init(ctx: RuleContext, edit: ClassEdit, finding: Finding, helper, method) -> Rewrite:
    """:func:`plan` for an in-place init outside ``__init__``'s body: in ``helper``, a method
    of the class that ``__init__`` calls (``method`` when it only initialises tensors), or in
    a builder."""
    if method is None:
        if any("." in x for x in finding.subject):
            return _children_out_of_builder(ctx, edit, finding, helper)
        return _own_init_out_of_builder(ctx, edit, finding, helper)
    if only_own(method, ctx, finding.site.children):
        return _shared(edit, (method_into_reset, method), lambda: method_into_reset(edit, method))
    # open_clip TextTransformer.init_parameters(): called from a root hook, as ML010 does
    # with a private method that applies the init
    return _shared(edit, (through_method, method), lambda: through_method(edit, method))


def _not_only_own(ctx: RuleContext, edit: ClassEdit, finding: Finding, index: int) -> Rewrite:
    """:func:`plan` for an in-place init in top-level statement ``index`` of ``__init__``,
    which does more than initialise the module's own tensors in place."""
    body = edit.init_body
    if init_only(body[index], ctx, module_tensor):
        return _shared(edit, (children_first, index), lambda: children_first(ctx, edit, keep=index))
    line = edit.path_of(finding.node)[1]
    own = [n for n in line if isinstance(n, cst.SimpleStatementLine)]
    if own and own[-1] is not body[index] and init_only(own[-1], ctx):
        return move_own_in_block(ctx, edit, own[-1], index, "Move")
    if own and init_only(own[-1], ctx, child_tensor):
        if any(own[-1] in run for _i, run, _c in block_runs(ctx, edit)):
            return move_children_first(ctx, edit, keep=index)
        raise Unfixable(_why_not_block(body[index], ctx))
    raise Unfixable(
        "the statement does more than initialise this module's own tensors in place "
        "(a child's tensor belongs in the model's `init_weights()`)"
    )


def _copy_into_child(ctx: RuleContext, edit: ClassEdit, node: cst.Assign, site) -> Rewrite:
    """``self.emb.weight = nn.Parameter(w, requires_grad=False)`` -> ``self.emb.weight.data
    .copy_(w)`` and ``self.emb.weight.requires_grad = False``: the child keeps its parameter and
    the value is an init of it in place, which the next round moves into a hook as any other
    (the round after this one re-analyses the file). Unsafe: the child's tensor keeps its own
    shape and dtype, which the value must have (``copy_`` broadcasts and casts). The
    ``nn.Parameter``'s arguments come in the rule's ``site``."""
    _index, line, _path = edit.locate(node)
    if not site.alone:
        raise Unfixable("the replacement is not a statement of its own")
    tensor, data, requires_grad = site.tensor, site.data, site.requires_grad
    if site.starred:
        raise Unfixable("the parameter is made with starred arguments")
    if data is None:
        raise Unfixable("the parameter is not made by a plain `nn.Parameter(value)`")
    new = [stmt(f"{tensor}.data.copy_({render(data)})")]
    if requires_grad is not None and not (
        isinstance(requires_grad, cst.Name) and requires_grad.value == "True"
    ):
        new.append(stmt(f"{tensor}.requires_grad = {render(requires_grad)}"))
    new = [
        s.with_changes(leading_lines=line.leading_lines) if i == 0 else s for i, s in enumerate(new)
    ]
    edit.replace[id(line)] = (line, new)
    edit.unsafe.append(
        f"`{tensor}` keeps the child's shape and dtype: `{render(data)}` must have them"
    )
    return edit.rewrite(
        f"Copy the value into the child's `{tensor}` in place instead of replacing it; the "
        f"next round moves that init into a hook"
    )
