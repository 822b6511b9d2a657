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

from collections.abc import Iterator

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    base_guard_comment,
    expr,
    guarded,
    names_in,
    path_to,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import binds, rng_free, touches, uses
from metalint.fix.parent_init import (
    bound_names,
    called_once,
    hook_call,
    own_hook_first,
    own_hook_last,
    through_method,
)
from metalint.fix.recompute import recompute_locals
from metalint.static.names import dotted
from metalint.static.ownership import module_children
from metalint.static.protocol import structure_test, structure_value
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import Write, assigned_writes, inplace_write
from metalint.vocabulary import (
    HOOKLESS_BASES,
    INPLACE_METHODS,
    NO_GRAD_CONTEXTS,
    PARAMETER_CLASSES,
    RESET_HOOK,
    ROOT_ENTRIES,
)

HOOK = RESET_HOOK


def _write(call: cst.Call, ctx: RuleContext) -> Write | None:
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


def _init_call(call: cst.Call, ctx: RuleContext, own=None) -> bool:
    """An in-place init of a tensor of this module (``own``), or of a child module
    (``self.head.weight``)."""
    own = own or _own
    w = _write(call, ctx)
    return w is not None and own(w.target)


def _attr_of(call: cst.Call, ctx: RuleContext) -> str | None:
    w = _write(call, ctx)
    return w.own if w is not None else None


def _own(d: str | None) -> bool:
    """``self.w`` or ``self.w.data``: a tensor of this module, not of a child (a reset hook
    must only touch its own tensors: the parent's value for a child belongs in init_weights)."""
    if not d or not d.startswith("self."):
        return False
    parts = d.split(".")
    return len(parts) == 2 or (len(parts) == 3 and parts[2] == "data")


def _child(d: str | None) -> bool:
    """``self.head.weight`` (``.data``): a tensor of a child module."""
    return bool(d) and d.startswith("self.") and not _own(d) and d.count(".") >= 2


def _any(d: str | None) -> bool:
    return _own(d) or _child(d)


def overwrites(s: cst.CSTNode, attr: str, ctx: RuleContext) -> bool:
    """Is the statement one call that sets every element of ``self.<attr>`` without reading
    it (``trunc_normal_(self.pos, std=.02)``, ``self.w.data.zero_()``)?"""
    if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1):
        return False
    call = getattr(s.body[0], "value", None)
    w = _write(call, ctx) if isinstance(call, cst.Call) else None
    return (
        w is not None
        and w.target in (f"self.{attr}", f"self.{attr}.data")
        and w.kind not in (None, "storage")
    )


def sets_every_element(body, attr: str, ctx: RuleContext) -> bool:
    """Do the statements ``body`` set every element of ``self.<attr>`` on every path before
    anything reads it (nflows ``LULinear._initialize(identity_init)``: ``init.zeros_`` in one
    branch of an ``if``, ``init.uniform_`` in the other)? Then the value it had before does
    not matter. Conservative: a statement that calls another method of ``self`` may read it."""
    for s in body:
        if isinstance(s, cst.SimpleStatementLine) and overwrites(s, attr, ctx):
            return True
        written, read, methods = uses(s)
        if isinstance(s, cst.If):
            blocks, node, tests_free = [], s, True
            while isinstance(node, cst.If):
                tests_free &= not (touches(node.test, attr, False) or uses(node.test)[2])
                blocks.append(node.body)
                node = node.orelse
            if tests_free and isinstance(node, cst.Else):
                blocks.append(node.body)
                if all(
                    isinstance(b, cst.IndentedBlock) and sets_every_element(b.body, attr, ctx)
                    for b in blocks
                ):
                    return True
        if isinstance(s, cst.With) and isinstance(s.body, cst.IndentedBlock):
            if sets_every_element(s.body.body, attr, ctx):
                return True
        if attr in written or attr in read or methods:
            return False
    return False


def init_only(s: cst.CSTNode, ctx: RuleContext, own=None, structure: bool = True) -> bool:
    """Does the statement only initialise tensors in place (``own``: which tensors count)?
    An ``if`` counts when every branch does; a branch whose tests (all of them, from the top
    ``if`` down) ask only about the structure of the module and its children
    (:func:`structure_test`) may also compute local numbers from the children's configuration
    (:func:`structure_value`) for its inits: torchvision ``VisionTransformer``'s ``if
    isinstance(self.conv_proj, nn.Conv2d): fan_in = self.conv_proj.in_channels * ...``, then
    ``trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))``. ``structure``: the
    tests above this statement are all such tests."""
    own = own or _own
    if isinstance(s, cst.SimpleStatementLine):
        return all(
            isinstance(x, cst.Expr)
            and isinstance(x.value, cst.Call)
            and _init_call(x.value, ctx, own)
            for x in s.body
        )
    if isinstance(s, (cst.If, cst.Else)) and own is _any:
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        rest = getattr(s, "orelse", None)
        here = structure and (isinstance(s, cst.Else) or structure_test(s.test, ctx))
        return (
            bool(body)
            and any(not _structure_local(b, ctx) for b in body)
            and all(
                init_only(b, ctx, own, here) or (here and _structure_local(b, ctx)) for b in body
            )
            and (rest is None or init_only(rest, ctx, own, here))
        )
    if isinstance(s, cst.For):
        # timm CrossVit: ``for i in range(self.num_branches): trunc_normal_(getattr(self,
        # f'pos_embed_{i}'), std=.02)``: a loop over what the hook can read again
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        inner = own
        if own is not _own and isinstance(s.target, cst.Name) and _container_iter(s.iter):
            # ``for lin in self.lins: nn.init.zeros_(lin.bias)``: the tensors of the modules
            # of a container child
            var = s.target.value + "."
            inner = lambda d: own(d) or bool(d and d.startswith(var))  # noqa: E731
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


def _own_writes(node: cst.CSTNode, ctx: RuleContext):
    """The in-place writes of this module's own tensors in ``node``, in order (not ``set_``)."""
    for n in walk_code(node):
        w = _write(n, ctx) if isinstance(n, cst.Call) else None
        if w is not None and _own(w.target) and w.own and w.kind != "storage":
            yield w


def _changes_values(w: Write) -> bool:
    """Does the write compute the tensor's new values from its old ones (``mul_``, ``add_``,
    ``clamp_``: a tensor method of no init kind, not ``copy_``)?"""
    return w.kind is None and w.method and w.name != "copy_"


def rescales(stmts, ctx: RuleContext, full: set[str] | None = None) -> str | None:
    """The first own tensor that a call of ``stmts`` (a node or a list, in order) changes from
    its old values (``self.gain.data.mul_(0.5)``: :func:`_changes_values`) before one of them
    sets all of it, and not in ``full`` (tensors a hook sets already); None when there is
    none. A hook running such a statement alone would change uninitialised memory."""
    full = set(full or ())
    for s in stmts if isinstance(stmts, list) else [stmts]:
        for w in _own_writes(s, ctx):
            if _changes_values(w) and w.own not in full:
                return w.own
            full.add(w.own)
    return None


def _set_by_hook(edit: ClassEdit, ctx: RuleContext) -> set[str]:
    """The own tensors the class's ``reset_parameters()`` sets from no old values (an init of
    a kind, or ``copy_``)."""
    method = edit.cls.methods.get(HOOK)
    if method is None:
        return set()
    return {
        w.own for w in _own_writes(method.node.body, ctx) if w.kind is not None or w.name == "copy_"
    }


def _refuse_rescaling(edit: ClassEdit, ctx: RuleContext, stmts) -> None:
    """Raise :class:`Unfixable` when the statements moving into the hook change a tensor's
    values that no hook sets first (:func:`rescales`)."""
    a = rescales(list(stmts), ctx, _set_by_hook(edit, ctx))
    if a is not None:
        raise Unfixable(
            f"the in-place init changes `self.{a}`'s values (it reads them), and no hook makes "
            "them first: moved alone it would change uninitialised memory"
        )


def init_in_branch(ctx: RuleContext, edit: ClassEdit, attr: str, index: int) -> int | None:
    """The first top-level statement of ``__init__`` after ``index`` that touches
    ``self.<attr>``, when it is an ``if`` that only initialises this module's own tensors in
    place, on some paths only (vit-pytorch's ``GoldenGatePoPENd``: ``self.learned_bias =
    nn.Parameter(torch.zeros(heads, dim_head))``, then ``if init_learned_bias_uniform:
    self.learned_bias.uniform_(-2. * pi, 0.)``), writes no other tensor, calls no method, and
    nothing after it (nor a method ``__init__`` calls) uses more than the tensor's shape. The
    value is then not dead (the other path keeps it): a hook re-creating it must run the ``if``
    after it, moved there. The ``if`` reads no other attribute of ``self`` (the hook would read
    it later), and its tests read none. None otherwise."""
    body = edit.init_body
    memo = edit.memo()
    j = next((k for k in range(index + 1, len(body)) if touches(body[k], attr, False, memo)), None)
    if j is None or any(uses(body[k], memo)[2] for k in range(index + 1, j)):
        return None
    s = body[j]
    if isinstance(s, cst.SimpleStatementLine) and init_only(s, ctx) and rescales(s, ctx) == attr:
        # ``self.gain.data.mul_(0.5)``: it changes the value, which a hook must make first
        return None if edit.used_after(attr, j, tensor=True) else j
    if not (isinstance(s, cst.If) and init_only(s, ctx, _any)):
        return None
    _written, read, calls = uses(s, memo)
    if calls or read - {attr}:
        return None  # a tensor it reads may change before the hook
    if any(any(uses(n.test)[:2]) for n in walk_code(s) if isinstance(n, cst.If)):
        # ``if self.pos_embed is not None:`` asks about the module (timm): ML003's own fix
        return None
    writes = [_write(n, ctx) for n in walk_code(s) if isinstance(n, cst.Call)]
    writes = [w for w in writes if w is not None]
    if not writes or not all(_own(w.target) and w.own == attr for w in writes):
        return None  # another tensor's value, created before the `if`, would be lost
    return None if edit.used_after(attr, j, tensor=True) else j


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
                and not _structure_local(n, ctx)
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


def _structure_local(s: cst.CSTNode, ctx: RuleContext) -> bool:
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


def _holding_method(cls, node: cst.CSTNode):
    """The method of ``cls`` other than ``__init__`` whose body holds ``node`` (None: none)."""
    return next(
        (
            m
            for m in cls.methods.values()
            if m.name != "__init__" and path_to(m.node.body, node) is not None
        ),
        None,
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
    edit.use_hook(HOOK, index, moved, random=not rng_free(loop, ctx), call_at=loop)
    return edit.rewrite("Move the loop that initialises every parameter into `reset_parameters()`")


def _not_in_init(cls, node: cst.CSTNode) -> str:
    """Why an init outside ``__init__`` is not moved, naming the method that holds it: in a
    public builder (fairseq's ``build_output_projection()``, which esm's inverse-folding decoder
    keeps) a subclass overriding the builder makes another child, and a hook initialising
    the child would apply this init to it."""
    method = _holding_method(cls, node)
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


def _children_out_of_builder(ctx: RuleContext, edit: ClassEdit, finding: Finding) -> Rewrite:
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
    why = _not_in_init(edit.cls, node)
    method = _holding_method(edit.cls, node)
    if method is None or not method.name.startswith("_"):
        raise Unfixable(why)
    body = list(method.node.body.body) if isinstance(method.node.body, cst.IndentedBlock) else []
    moved = [
        i
        for i, b in enumerate(body)
        if isinstance(b, cst.SimpleStatementLine) and init_only(b, ctx, _child)
    ]
    if not any(path_to(body[i], node) is not None for i in moved):
        raise Unfixable(why)
    if ROOT_HOOK in edit.cls.methods:
        raise Unfixable(f"{why}, and `{edit.cls.name}` already has `{ROOT_HOOK}()`")
    local = _locals_of(method)
    memo = edit.memo()
    kids: set[str] = set()
    for i in moved:
        if any(isinstance(n, cst.Name) and n.value in local for n in walk_code(body[i])):
            raise Unfixable(f"{why}, and an init there reads a local of `{method.name}()`")
        inits = [
            a
            for c in walk_code(body[i])
            if isinstance(c, cst.Call)
            for a in [_attr_of(c, ctx)]
            if a and _init_call(c, ctx, _any)
        ]
        for a in inits:
            if any(
                touches(body[j], a, False, memo) for j in range(i + 1, len(body)) if j not in moved
            ):
                raise Unfixable(f"{why}, and `self.{a}` is used after its init there")
        kids.update(inits)
    c = called_once(edit, method)
    # a reset_parameters() __init__ calls later (an earlier fix's): the new init_weights() ends
    # with it and takes its place, so the moved inits run there (parent_init.own_hook_last)
    opening, tail, _called = _root_hook(edit, c, c, set())
    crossed = [body[j] for j in range(moved[0] + 1, len(body)) if j not in moved]
    if tail is not None:
        init = edit.init_body
        end = next(j for j, b in enumerate(init) if b is tail)
        crossed += init[c + 1 : end]
        for a in sorted(kids):
            if any(touches(b, a, False, memo) for b in init[c + 1 : end]):
                raise Unfixable(f"{why}, and `self.{a}` is used in `__init__` after the builder")
    if any(not rng_free(body[i], ctx) for i in moved) and not all(
        rng_free(b, ctx) for b in crossed
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
            if isinstance(b, cst.SimpleStatementLine) and _creates(b, k)
        ]
        every = set(made) == kids and not edit.returns(method.node.body)
        stmts = [_guarded_run(stmts, frozenset(made[:1] if every else kids), edit)]
    stmts.extend(_place_call(edit, c, False, tail, None))
    edit.hook_append[ROOT_HOOK] = [*opening, *stmts]
    n = len(moved)
    return edit.rewrite(
        f"Move {n} in-place init statement{'s' if n != 1 else ''} of children's tensors out of "
        f"`{method.name}()` into a root `{ROOT_HOOK}()` called after it"
    )


def _own_init_out_of_builder(ctx: RuleContext, edit: ClassEdit, finding: Finding) -> Rewrite:
    """An in-place init of an own tensor in a private builder that ``__init__`` calls once
    (torch-geometric-temporal's ``A3TGCN._setup_layers()``: ``self._base_tgcn = TGCN(...)``,
    then ``self._attention = nn.Parameter(torch.empty(p))`` and ``nn.init.uniform_(self.
    _attention)``): the init statement moves into ``reset_parameters()``, which ``__init__``
    calls after the builder. Safe when nothing after it in the builder draws random numbers
    (:meth:`ClassEdit.use_hook` judges what follows the call in ``__init__``). Refused when
    code after it in the builder uses the tensor, or the statement reads the builder's
    locals."""
    node = finding.node
    why = _not_in_init(edit.cls, node)
    method = _holding_method(edit.cls, node)
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
    random = not rng_free(line, ctx)
    if random and not all(rng_free(s, ctx) for s in after):
        edit.unsafe.append(
            f"the random value is now drawn after the rest of `{method.name}()`, after other "
            "random draws, so eager values differ under the same seed"
        )
    edit.replace_in_method(method.node, line, [])
    edit.use_hook(HOOK, c, [line.with_changes(leading_lines=())], random=random)
    return edit.rewrite(
        f"Move the in-place init out of `{method.name}()` into `{HOOK}()`, called after it"
    )


def initialising_method(cls, node: cst.CSTNode, ctx: RuleContext):
    """The method holding ``node`` when all it does is initialise tensors in place (open_clip
    ``TextTransformer.init_parameters()``: ``nn.init.normal_(...)`` of its own and its
    children's tensors, in loops and ``if``s; PyTorch's ``MultiheadAttention._reset_parameters()``
    and the attention layers that copy it): it creates nothing, assigns no attribute and
    registers nothing, so a hook may call it again after ``to_empty()``. A builder that also
    makes a child (fairseq's ``build_output_projection()``) is not one. None otherwise."""
    method = _holding_method(cls, node)
    if method is None:
        return None
    for n in walk_code(method.node.body):
        if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            if any(not isinstance(t, cst.Name) for t in targets):
                return None  # self.x = ..., t[...] = ...
        if isinstance(n, cst.Call):
            name = getattr(n.func, "attr", None) or n.func
            called = getattr(name, "value", "")
            if called in ("register_buffer", "register_parameter", "add_module", "setattr"):
                return None
            q = ctx.qualify(n.func) or ""
            if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper():
                return None  # builds a module or a Parameter
    return method


def only_own(method, ctx: RuleContext, cls=None) -> bool:
    """Does every in-place write of ``method`` initialise a tensor of this module itself (none
    of a child's: the parent's law for a child belongs in the root ``init_weights()``)? In a
    ``cls`` with no child module, a loop over ``self.parameters()`` writes only its own
    (torch-geometric-temporal's attention layers: ``for p in self.parameters():
    nn.init.xavier_uniform_(p)``)."""
    own_loops: set[str] = set()
    if cls is not None and not module_children(cls, ctx.qualify):
        own_loops = {
            n.target.value
            for n in walk_code(method.node.body)
            if type(n) is cst.For
            and type(n.target) is cst.Name
            and type(n.iter) is cst.Call
            and dotted(n.iter.func) == "self.parameters"
        }
    writes = [_write(n, ctx) for n in walk_code(method.node.body) if type(n) is cst.Call]
    return all(w is None or _own(w.target) or w.target in own_loops for w in writes)


def method_into_reset(edit: ClassEdit, method) -> Rewrite:
    """A method of this module's own in-place inits (``self._reset_parameters()``), called by
    ``__init__`` once as a statement: ``reset_parameters()`` calls it and takes its call's
    place, the protocol of every module's own hook (FSDP's, and timm's before its root hook).
    ``__init__`` runs the same code in the same order: safe."""
    c = called_once(edit, method, arguments=True)
    exists = HOOK in edit.cls.methods
    _refuse_rescaling(edit, edit.ctx, [method.node.body])
    if not exists and edit.taken(HOOK):
        raise Unfixable(f"`{HOOK}` is already an attribute of `{edit.cls.name}`")
    line = edit.init_body[c]
    call = hook_call(edit, method, c)
    _empty_before(edit, method, c)
    # an existing hook (pypots' ``FeatureRegression``, whose mask buffer ML002's fix recomputes
    # there) takes the call; where the hook runs later than the call did, the draws it moves
    # past decide safety (:meth:`ClassEdit.use_hook`)
    called = exists and edit.hook_calls(HOOK)[0]
    # the hook called where the method was (``call_at``) moves no draw; one ``__init__``
    # already calls elsewhere does
    random = bool(called) and not rng_free(method.node.body, edit.ctx)
    edit.use_hook(HOOK, c, [call], random=random, call_at=line)
    if called:
        # ``__init__`` calls the hook already, so the method's own call goes (the hook runs it)
        kept = edit.replace.get(id(line), (line, [line]))[1]
        edit.replace[id(line)] = (line, [s for s in kept if s is not line])
    done = edit.rewrite(
        f"Call `{method.name}()` from `{HOOK}()`"
        + (", which `__init__` calls" if exists else ", called where it was")
    )
    if any(not b.startswith("torch.nn.") and b not in HOOKLESS_BASES for b in edit.cls.bases):
        alternative = _over_base_hook(ClassEdit(edit.ctx, edit.cls), method)
        done.over_base_hook = alternative or done.over_base_hook
    return done


def _over_base_hook(edit: ClassEdit, method) -> Rewrite | None:
    """:func:`method_into_reset` for a class whose base (of another file: the tree tells, see
    :func:`metalint.fix.apply.hook_refusal`) has its own ``reset_parameters()``, which the
    base's ``__init__`` calls (nflows ``LULinear``/``QRLinear``/``SVDLinear`` of ``Linear``,
    whose ``bias`` ML001's fix initialises there). The new hook extends the base's, as a
    maintainer writes it: ``super().reset_parameters()`` first, then the method, guarded by
    the last parameter the class makes before the call, because the base's ``__init__`` calls
    the overriding hook before this class made its tensors (calling the method there raised
    AttributeError). ``__init__`` keeps calling the method itself where it did (the arguments
    kept on ``self`` for the hook): calling the hook there would run the base's init a
    second time, a second draw where it draws. Eager construction runs the same code in the
    same order: safe. None when no parameter of the class can guard it."""
    try:
        c = called_once(edit, method, arguments=True)
        if HOOK in edit.cls.methods or edit.taken(HOOK):
            return None
        body = edit.init_body
        written = uses(method.node.body)[0]
        last = None
        for i in range(edit.super_index() or 0, c):
            s = body[i]
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1:
                small = s.body[0]
                target = dotted(small.targets[0].target) if isinstance(small, cst.Assign) else None
                if (
                    target
                    and target.startswith("self.")
                    and target[5:] in written
                    and isinstance(small.value, cst.Call)
                    and edit.ctx.qualify(small.value.func) in PARAMETER_CLASSES
                ):
                    last = target[5:]
        if last is None:
            return None
        line = body[c]
        call = hook_call(edit, method, c)
        stores = edit.replace.get(id(line), (line, []))[1]
        edit.replace[id(line)] = (line, [*stores, line])
        _empty_before(edit, method, c)
        guard = stmt(
            f'if hasattr(self, "{last}"):  {base_guard_comment(edit.cls.bases[0])}'
            f"\n    {render(call).strip()}\n"
        )
        edit.hook_append[HOOK] = [stmt(f"super().{HOOK}()"), guard]
        return edit.rewrite(
            f"Call `{method.name}()` from a `{HOOK}()` that extends the base's, guarded: the "
            "base's `__init__` calls it first"
        )
    except Unfixable:
        return None


def _empty_before(edit: ClassEdit, method, c: int) -> list[str]:
    """The parameters ``__init__`` creates from a constant (``nn.Parameter(torch.zeros(n))``,
    a top-level statement before ``c``, the call of ``method``) that nothing reads before
    ``method`` sets every element of them on every path (:func:`sets_every_element`; nflows
    ``LULinear``'s ``lower_entries``, ``upper_entries``, ``unconstrained_upper_diag``) are
    created with ``torch.empty``: the constant was never seen, so eager values stay the same
    (no factory that draws is replaced), and on meta nothing is computed. Returns their names."""
    ctx = edit.ctx
    body = edit.init_body
    memo = edit.memo()
    done = []
    for i in range(c):
        s = body[i]
        if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1):
            continue
        small = s.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        attr = dotted(small.targets[0].target) or ""
        if not attr.startswith("self.") or attr.count(".") != 1:
            continue
        attr = attr[5:]
        pcall = small.value
        if not (
            isinstance(pcall, cst.Call)
            and ctx.qualify(pcall.func) in PARAMETER_CLASSES
            and len(pcall.args) == 1
            and pcall.args[0].keyword is None
            and not pcall.args[0].star
        ):
            continue
        data = pcall.args[0].value
        # ``torch.zeros(n)``/``torch.ones(n)`` with positional sizes only: a constant, no draw
        if not (
            isinstance(data, cst.Call)
            and ctx.qualify(data.func) in ("torch.zeros", "torch.ones")
            and data.args
            and all(a.keyword is None and not a.star for a in data.args)
        ):
            continue
        if any(
            touches(body[j], attr, False, memo) or uses(body[j], memo)[2] for j in range(i + 1, c)
        ):
            continue
        if id(s) in edit.replace or not sets_every_element(method.node.body.body, attr, ctx):
            continue
        shape = ", ".join(render(a.value) for a in data.args)
        empty = expr(f"{torch_spelling(ctx)[0]}.empty({shape})")
        edit.replace[id(s)] = (s, [s.deep_replace(data, empty)])
        done.append(attr)
    return done


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    body = edit.init_body
    index = edit.top_index_of(finding.node)
    if assigned_writes(finding.node):
        # ``self.conv.weight.data[:] = t``: no codemod moves a write by assignment
        raise Unfixable("the tensor is written by an assignment (`.data`, a slice), not a call")
    if isinstance(finding.node, cst.Assign):
        return _copy_into_child(ctx, edit, finding.node)
    if isinstance(finding.node, cst.For) and (
        index >= 0 or initialising_method(cls, finding.node, ctx) is None
    ):
        return _parameter_loop(ctx, edit, finding.node, index)
    if index < 0:
        method = initialising_method(cls, finding.node, ctx)
        if method is None:
            if any("." in x for x in finding.subject):
                return _children_out_of_builder(ctx, edit, finding)
            return _own_init_out_of_builder(ctx, edit, finding)
        if only_own(method, ctx, cls):
            return method_into_reset(edit, method)
        # open_clip TextTransformer.init_parameters(): called from a root hook, as ML010 does
        # with a private method that applies the init
        return through_method(edit, finding.node)
    if not init_only(body[index], ctx):
        if init_only(body[index], ctx, _any):
            return _children_first(ctx, edit, keep=index)
        line = edit.path_of(finding.node)[1]
        own = [n for n in line if isinstance(n, cst.SimpleStatementLine)]
        if own and own[-1] is not body[index] and init_only(own[-1], ctx):
            return move_own_in_block(ctx, edit, own[-1], index, "Move")
        if own and init_only(own[-1], ctx, _child):
            if any(own[-1] in run for _i, run, _c in _block_runs(ctx, edit)):
                return _children(ctx, edit, keep=index)
            raise Unfixable(_why_not_block(body[index], ctx))
        raise Unfixable(
            "the statement does more than initialise this module's own tensors in place "
            "(a child's tensor belongs in the model's `init_weights()`)"
        )
    return move_own(ctx, edit)


def _copy_into_child(ctx: RuleContext, edit: ClassEdit, node: cst.Assign) -> Rewrite:
    """``self.emb.weight = nn.Parameter(w, requires_grad=False)`` -> ``self.emb.weight.data
    .copy_(w)`` and ``self.emb.weight.requires_grad = False``: the child keeps its parameter and
    the value is an init of it in place, which the next round moves into a hook as any other
    (the round after this one re-analyses the file). Unsafe: the child's tensor keeps its own
    shape and dtype, which the value must have (``copy_`` broadcasts and casts)."""
    _index, line, _path = edit.locate(node)
    if len(line.body) != 1 or len(node.targets) != 1 or type(node.value) is not cst.Call:
        raise Unfixable("the replacement is not a statement of its own")
    target = node.targets[0].target
    data = None
    requires_grad = None
    for arg in node.value.args:
        if arg.star:
            raise Unfixable("the parameter is made with starred arguments")
        if arg.keyword is None or arg.keyword.value == "data":
            data = data or arg.value
        elif arg.keyword.value == "requires_grad":
            requires_grad = arg.value
    if data is None or dotted(node.value.func) is None:
        raise Unfixable("the parameter is not made by a plain `nn.Parameter(value)`")
    if ctx.qualify(node.value.func) not in PARAMETER_CLASSES:
        raise Unfixable("the value is wrapped in more than `nn.Parameter(...)`")
    tensor = render(target)
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


def move_own(ctx: RuleContext, edit: ClassEdit, message: str | None = None) -> Rewrite:
    """Move every statement of ``__init__`` that only initialises the module's own tensors in
    place, in order, into ``reset_parameters()``. The hook is called last in ``__init__``; when
    that would move random draws after other draws and the hook is new, it is called where the
    last moved statement was instead (the draws keep their order)."""
    body = edit.init_body
    moved = [i for i, s in enumerate(body) if init_only(s, ctx)]
    _refuse_rescaling(edit, ctx, [body[i] for i in moved])
    first, last = moved[0], moved[-1]
    calls, nested = edit.hook_calls(ROOT_HOOK)
    if ROOT_HOOK in edit.cls.methods and HOOK not in edit.cls.methods:
        if len(calls) == 1 and not nested and calls[0] < first:
            # under timm's protocol a module with an ``init_weights()`` is initialised by it
            # alone: the own init joins it (with any children's init, in order)
            return _children_first(ctx, edit)

    # each tensor's first moved init: what runs before it (recbole's CompositePrior creates
    # `logvar_prior` after `mu_prior`'s init, then inits it) sees no init of it, moved or not
    since: dict[str, int] = {}
    for i in moved:
        for c in walk_code(body[i]):
            if isinstance(c, cst.Call) and _init_call(c, ctx):
                a = _attr_of(c, ctx)
                if a is not None:
                    since.setdefault(a, i)
    for i, s in enumerate(body):
        if i > first and i not in moved:
            for a in sorted(since):
                hit = touches(s, a, False, edit.memo()) if i > since[a] else None
                if hit:
                    raise Unfixable(
                        f"`self.{a}` is {hit} later in `__init__`, after its in-place init"
                    )
    random = not all(rng_free(body[i], ctx) for i in moved)
    call_at = None
    if random:
        rest = [s for i, s in enumerate(body) if i > first and i not in moved]
        between = [body[i] for i in range(first + 1, last) if i not in moved]
        if all(rng_free(s, ctx) for s in rest):
            pass
        elif (
            HOOK not in edit.cls.methods
            and not edit.taken(HOOK)
            and edit.hook_calls(HOOK) == ([], False)
            and all(rng_free(s, ctx) for s in between)
        ):
            call_at = body[last]  # a new hook, called where the draws were: same order
        else:
            edit.unsafe.append(
                "random draws move after other random draws of `__init__`: eager values differ"
            )
    stmts = take(edit, body, moved)
    # stores that replaced a removed statement keep its blank lines
    edit.use_hook(HOOK, last, stmts, call_at=call_at)
    n = len(moved)
    return edit.rewrite(
        message or f"Move {n} in-place init statement{'s' if n != 1 else ''} into `{HOOK}()`"
    )


def move_own_in_block(ctx: RuleContext, edit: ClassEdit, first, index: int, what: str) -> Rewrite:
    """In-place init of own tensors inside a block of top-level statement ``index``: the run of
    in-place init statements of that block holding ``first`` moves, in order, into
    ``reset_parameters()``, guarded so that it runs when the block ran:

    - by its tensor being there, when the block creates it and nothing else does (timm
      mvitv2's ``if rel_pos: self.rel_pos_h = nn.Parameter(torch.zeros(..))`` then
      ``trunc_normal_tf_(self.rel_pos_h, std=0.02)``);
    - else by the block's own condition, read again in the hook (monai ``PatchEmbeddingBlock``:
      ``position_embeddings`` is made before the ``if``, ``trunc_normal_`` runs only in the
      ``elif self.pos_embed_type == "learnable":`` branch, and the ``"sincos"`` branch
      replaces it with a fixed table that a guard on the tensor being there would overwrite).

    A value created before it stays (dead: on meta it costs nothing). When the hook is new and
    ``__init__`` draws random numbers after the block, the hook is called right after the
    block, so the draws keep their order; else it is called last (unsafe when something after
    the run draws). ``what`` starts the message."""
    found = edit.path_of(first)
    block = found[1][-2] if found and len(found[1]) > 1 else None
    if not isinstance(block, cst.IndentedBlock):
        raise Unfixable("the in-place init is not a statement of a block")
    stmts = list(block.body)
    at = next(i for i, s in enumerate(stmts) if s is first)
    while at > 0 and init_only(stmts[at - 1], ctx):
        at -= 1
    run = []
    for s in stmts[at:]:
        if not init_only(s, ctx):
            break
        run.append(s)
    memo = edit.memo()
    attrs = {a for s in run for a in uses(s, memo)[0]}
    after = [*stmts[at + len(run) :], *edit.block_tail(block)]
    for s in after:
        for a in sorted(attrs):
            hit = touches(s, a, False, memo)
            if hit:
                raise Unfixable(f"`self.{a}` is {hit} later in `__init__`, after its in-place init")
    for a in sorted(attrs):
        later = edit.used_after(a, index)
        if later:
            raise Unfixable(later)
    made_here = all(_created_on(found[1], run[0], a) and _made_once(edit, a) for a in attrs)
    condition = None if made_here else _branch_condition(edit, found[1], index)
    moved = []
    for s in run:
        edit.replace[id(s)] = (s, [])
        new = edit.store_names(s, s, index).with_changes(leading_lines=())
        written = uses(s, memo)[0]
        if len(written) != 1:
            raise Unfixable("an in-place init statement writes several tensors")
        (a,) = written
        moved.append(
            new
            if condition is not None
            else guarded(f"getattr(self, {a!r}, None) is not None", new)
        )
    if condition is not None:
        node = stmt("if True:\n    pass\n")
        moved = [node.with_changes(test=condition, body=node.body.with_changes(body=moved))]
    random = not all(rng_free(s, ctx) for s in run)
    if not all(rng_free(s, ctx) for s in after):
        edit.unsafe.append(
            "random draws move after other random draws of `__init__`: eager values differ"
        )
    if (
        random
        and not edit.rng_free_after(index)
        and HOOK not in edit.cls.methods
        and not edit.taken(HOOK)
        and edit.hook_calls(HOOK) == ([], False)
    ):
        # a new hook, called right after the block: the draws keep their order
        edit.check_bases(HOOK)
        _call_after(edit, index, False, HOOK)
        edit.hook_call_added.add(HOOK)
        random = False
    edit.use_hook(HOOK, index, moved, random=random)
    n = len(run)
    return edit.rewrite(
        f"{what} {'that init' if n == 1 else f'those {n} init statements'} into `{HOOK}()`, "
        "in order"
    )


def _created_on(path: list, line: cst.CSTNode, attr: str) -> bool:
    """Is ``self.<attr>`` assigned in a block on ``path`` (from the top-level statement down
    to ``line``) before the statement of that block that leads to ``line``?"""
    for k in range(1, len(path)):
        block, child = path[k - 1], path[k]
        if isinstance(block, cst.IndentedBlock):
            for st in block.body:
                if st is child:
                    break
                if _creates(st, attr):
                    return True
    return False


def _branch_condition(edit: ClassEdit, path: list, index: int) -> cst.BaseExpression:
    """The condition under which the block at the end of ``path`` runs, as the hook reads it:
    the tests of the ``if``/``elif`` chain on the path (``not`` the tests of the branches
    before it, left out when they compare the same expression with another literal, as
    ``elif self.pos_embed_type == "learnable":`` after ``if self.pos_embed_type == "none":``),
    with the constructor arguments they read kept on ``self``. Raises :class:`Unfixable` when
    the hook could not read it as ``__init__`` did."""
    top = edit.init_body[index]
    parts: list[tuple[cst.BaseExpression, bool]] = []
    for k, n in enumerate(path[:-1]):
        nxt = path[k + 1]
        if isinstance(n, (cst.For, cst.While, cst.Try, cst.FunctionDef, cst.ClassDef)):
            raise Unfixable("the in-place init is inside a loop, `try` or nested function")
        if not isinstance(n, cst.If):
            continue
        if nxt is n.body:
            parts = [p for p in parts if not _exclusive(p, n.test)]
            parts.append((n.test, True))
        elif nxt is n.orelse:
            parts.append((n.test, False))
    if not parts:
        raise Unfixable("the in-place init is inside a block that is not a branch of an `if`")
    memo = edit.memo()
    written_here, _r, _c = uses(top, memo)
    bound = binds(top, edit.ctx.qualify) - {"self"}
    for test, _pos in parts:
        _w, read, calls = uses(test, memo)
        if (
            calls
            or not rng_free(test, edit.ctx)
            or any(
                isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute)
                for c in walk_code(test)
            )
        ):
            # ``if self.mask.any():`` would read a tensor that ``to_empty()`` wiped
            raise Unfixable("the block's condition calls a method or draws random numbers")
        for a in sorted(read):
            if a in written_here or edit.used_after(a, index, writes_only=True):
                raise Unfixable(f"the block's condition reads `self.{a}`, which `__init__` changes")
        if {x.value for x in names_in(test)} & bound:
            raise Unfixable("the block's condition reads a local that the block changes")
    code = " and ".join(
        (f"({render(t)})" if len(parts) > 1 and isinstance(t, _LOOSE) else render(t))
        if pos
        else f"not ({render(t)})"
        for t, pos in parts
    )
    # ``self.pos_embed_type == "learnable"``: compared with a string, it is no tensor (monai
    # sets it from ``look_up_option(..)``, a function that may return anything)
    strings = {
        dotted(side)[5:]
        for test, _pos in parts
        for c in walk_code(test)
        if isinstance(c, cst.Comparison) and len(c.comparisons) == 1
        for side, other in (
            (c.left, c.comparisons[0].comparator),
            (c.comparisons[0].comparator, c.left),
        )
        if isinstance(other, cst.SimpleString)
        and (dotted(side) or "").count(".") == 1
        and (dotted(side) or "").startswith("self.")
    }
    return edit.store_names(expr(code), top, index, not_tensors=frozenset(strings))


_LOOSE = (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)


def _exclusive(earlier: tuple[cst.BaseExpression, bool], test: cst.BaseExpression) -> bool:
    """Is the negated ``earlier`` test implied by ``test`` (``x == "none"`` when the branch's
    test is ``x == "learnable"``)? Then it adds nothing to the branch's condition."""
    t, positive = earlier
    if positive:
        return False

    def eq(c):
        if (
            isinstance(c, cst.Comparison)
            and len(c.comparisons) == 1
            and isinstance(c.comparisons[0].operator, cst.Equal)
            and isinstance(c.comparisons[0].comparator, (cst.SimpleString, cst.Integer))
        ):
            return render(c.left), c.comparisons[0].comparator.evaluated_value
        return None

    a, b = eq(t), eq(test)
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]


ROOT_HOOK = ROOT_ENTRIES[0]


def _if_blocks(s: cst.If) -> Iterator[cst.IndentedBlock]:
    """The blocks of an ``if``/``elif``/``else`` chain."""
    node = s
    while node is not None:
        if isinstance(node.body, cst.IndentedBlock):
            yield node.body
        node = getattr(node, "orelse", None)


def _child_of(s: cst.CSTNode, ctx: RuleContext) -> set[str]:
    """The children whose tensors an init-only statement writes (``g_proj`` for
    ``zeros_(self.g_proj.weight)``)."""
    out = set()
    for c in walk_code(s):
        if isinstance(c, cst.Call):
            w = _write(c, ctx)
            if w is not None and _child(w.target):
                out.add(w.target.split(".")[1])
    return out


def _creates(s: cst.CSTNode, child: str) -> bool:
    return isinstance(s, cst.SimpleStatementLine) and any(
        isinstance(x, cst.Assign) and any(dotted(t.target) == f"self.{child}" for t in x.targets)
        for x in s.body
    )


def _block_runs(ctx: RuleContext, edit: ClassEdit) -> list[tuple[int, list, frozenset]]:
    """Runs of in-place inits of children's tensors inside a block of a top-level ``if`` of
    ``__init__`` that creates those children earlier in the same block (esmfold's
    ``Attention``: ``if gated: self.g_proj = nn.Linear(..)``, then
    ``zeros_(self.g_proj.weight)``, ``ones_(self.g_proj.bias)``): (index of the ``if``, the run,
    its children). The children must be created nowhere else (``None`` aside): whether they
    exist then tells whether the block ran."""
    out = []
    for i, top in enumerate(edit.init_body):
        if not isinstance(top, cst.If) or init_only(top, ctx, _any):
            continue
        for block in _if_blocks(top):
            stmts = list(block.body)
            j = 0
            while j < len(stmts):
                run = []
                while j < len(stmts) and init_only(stmts[j], ctx, _child):
                    run.append(stmts[j])
                    j += 1
                if not run:
                    j += 1
                    continue
                at = stmts.index(run[0])
                kids = frozenset(k for st in run for k in _child_of(st, ctx))
                if kids and all(
                    any(_creates(st, k) for st in stmts[:at])
                    and (_made_once(edit, k) or _placeholder(edit, k) is not None)
                    for k in kids
                ):
                    out.append((i, run, kids))
    return out


def _made_once(edit: ClassEdit, child: str) -> bool:
    """Is ``self.<child>`` given a value other than ``None`` once during construction?"""
    n = 0
    for m in edit.cls.reachable("__init__"):
        for a in m.assigns:
            if a.target == f"self.{child}" and not (
                isinstance(a.value, cst.Name) and a.value.value == "None"
            ):
                n += 1
        for c in m.calls:
            if c.receiver == "self" and c.method in ("add_module", "register_module", "setattr"):
                return False
    return n == 1


def _placeholder(edit: ClassEdit, child: str) -> str | None:
    """The ``nn.Identity`` that ``self.<child>`` is otherwise (x-transformers' and titans'
    ``self.talking_heads = nn.Identity()``, then ``if talking_heads: self.talking_heads =
    nn.Conv2d(..)`` and ``dirac_(self.talking_heads.weight)``), as spelled there, when the
    child is made once as something else: whether it is that placeholder tells whether the
    block ran. None otherwise."""
    spelled: str | None = None
    others = 0
    for m in edit.cls.reachable("__init__"):
        for a in m.assigns:
            if a.target != f"self.{child}":
                continue
            v = a.value
            if isinstance(v, cst.Call) and edit.ctx.qualify(v.func) == "torch.nn.Identity":
                spelled = render(v.func)
            elif not (isinstance(v, cst.Name) and v.value == "None"):
                others += 1
        for c in m.calls:
            if c.receiver == "self" and c.method in ("add_module", "register_module", "setattr"):
                return None
    return spelled if others == 1 else None


def _guarded_run(stmts: list, kids: frozenset, edit: ClassEdit | None = None) -> cst.BaseStatement:
    def guard_of(k: str) -> str:
        identity = _placeholder(edit, k) if edit is not None else None
        if identity is not None:
            return f"not isinstance(self.{k}, {identity})"
        return f"getattr(self, {k!r}, None) is not None"

    guard = " and ".join(guard_of(k) for k in sorted(kids))
    node = stmt(f"if {guard}:\n    pass\n")
    return node.with_changes(body=node.body.with_changes(body=stmts))


def _between(edit: ClassEdit, first: int, last: int, moved, runs, inits=None) -> list:
    """What runs after a moved init and before the new call: (statement, the children it may
    touch: those a run later in its block initialises, created before it, and those whose
    every moved init comes after it (``inits``: child -> indices of the statements that
    initialise it), as sine's ``self.concept_embedding = nn.Embedding(..)`` between the init
    of ``item_embedding`` and its own: it runs before them eagerly and before the hook)."""
    body = edit.init_body
    inits = inits or {}
    out: list[tuple[cst.CSTNode, frozenset]] = []
    for i in range(first, last + 1):
        if i in moved:
            continue
        mine = [(r, k) for j, r, k in runs if j == i]
        if not mine:
            if i > first:
                later = frozenset(a for a, at in inits.items() if min(at) > i)
                out.append((body[i], later))
            continue
        in_runs = {id(st) for r, _k in mine for st in r}
        kids = frozenset().union(*(k for _r, k in mine))
        for block in _if_blocks(body[i]):
            stmts = list(block.body)
            starts = [stmts.index(r[0]) for r, _k in mine if r[0] in stmts]
            for at, st in enumerate(stmts):
                if id(st) in in_runs:
                    continue
                if starts and at > min(starts):
                    out.append((st, frozenset()))
                elif i > first:
                    out.append((st, kids))
    return out


def _call_after(edit: ClassEdit, last: int, replaces: bool, hook: str = ROOT_HOOK) -> None:
    """Call ``hook`` in place of top-level statement ``last`` (``replaces``: it moved), else
    right after it."""
    body = edit.init_body
    call = stmt(f"self.{hook}()")
    if replaces:
        s = body[last]
        call = call.with_changes(leading_lines=s.leading_lines)
        edit.replace[id(s)] = (s, [*edit.replace[id(s)][1], call])
    elif last + 1 < len(body):
        nxt = body[last + 1]
        old = edit.replace.get(id(nxt))
        edit.replace[id(nxt)] = (nxt, [call, *(old[1] if old else [nxt])])
    else:
        edit.init_append.append(call)


def _recomputed(edit: ClassEdit, i: int, why: str) -> list:
    """Statement ``i`` of ``__init__`` for the root hook, after copies of the statements that
    compute the local tensors it reads (regunet's affine head: ``out_init = torch.tensor([1,
    0, 0, 0, 1, 0], ...)`` chosen by an ``if`` on the spatial dims, then
    ``self.fc.bias.data.copy_(out_init)``). Raises :class:`Unfixable` (``why``) when they do
    more than compute locals."""
    s = edit.init_body[i]
    out = recompute_locals(edit, s, i, ROOT_HOOK, why)
    edit.replace[id(s)] = (s, [])
    lead = [line for line in getattr(s, "leading_lines", ()) if line.comment is not None]
    out[-1] = out[-1].with_changes(leading_lines=lead)
    return out


def _children_first(ctx: RuleContext, edit: ClassEdit, keep: int | None = None) -> Rewrite:
    """:func:`_children` for a top-level statement: with the runs inside blocks when they can
    move, else without them (they stay where they are, as their own findings say). ``keep``:
    the top-level statement of the finding, which must move."""
    try:
        return _children(ctx, ClassEdit(ctx, edit.cls), keep=keep)
    except Unfixable:
        return _children(ctx, edit, with_runs=False, keep=keep)


def _root_hook(edit: ClassEdit, first: int, last: int, moved: set[int]):
    """The root ``init_weights()`` that takes the statements ``first``..``last``: (the
    statements that open it, the ``reset_parameters()`` call it replaces, to be called last
    in it, or None; the statement of ``__init__`` that calls an existing ``init_weights()``,
    or None). See :func:`own_hook_first`, :func:`own_hook_last` and
    :meth:`ClassEdit.join_called_hook`."""
    if ROOT_HOOK in edit.cls.methods:
        return [], None, edit.join_called_hook(ROOT_HOOK, first, last, moved)
    if edit.taken(ROOT_HOOK):
        raise Unfixable(f"`{ROOT_HOOK}` is already an attribute of `{edit.cls.name}`")
    opening = own_hook_first(edit, first, last, moved)
    tail = None if opening else own_hook_last(edit, last, moved)
    if not opening and tail is None and edit.hook_calls(RESET_HOOK)[0]:
        # x-transformers' ``TPREncoder``: ``binding``'s zeros moved into a
        # ``reset_parameters()`` called last, the embeddings' init before child modules that
        # draw: a new ``init_weights()`` could neither open nor end with that call, and under
        # the root protocol, where it alone initialises the module, ``binding`` would be lost
        raise Unfixable(
            f"`__init__` calls `{RESET_HOOK}()` after code that draws random numbers or calls a "
            f"method: a new `{ROOT_HOOK}()` could not call it, and the module's own tensors "
            "would be lost under the root protocol"
        )
    return opening, tail, None


def _called_at(edit: ClassEdit) -> int | None:
    """The top-level statement of ``__init__`` that calls an existing root ``init_weights()``
    (the only call), or None."""
    if ROOT_HOOK not in edit.cls.methods:
        return None
    calls, nested = edit.hook_calls(ROOT_HOOK)
    return calls[0] if len(calls) == 1 and not nested else None


def _joined(edit: ClassEdit, moved: list[int], runs: list, keep: int | None):
    """The statements that move (``moved``, ``runs``) and :func:`_root_hook`'s answer for them.
    When those after an existing call of ``init_weights()`` cannot join its end, the ones
    before it alone, provided the finding's own statement ``keep`` is among them."""
    tops = sorted({*moved, *(i for i, _r, _k in runs)})
    try:
        return moved, runs, _root_hook(edit, tops[0], tops[-1], set(moved))
    except Unfixable:
        c = _called_at(edit)
        if c is None or keep is None or keep > c or not tops[0] < c < tops[-1]:
            raise
    moved = [i for i in moved if i < c]
    runs = [r for r in runs if r[0] < c]
    tops = [i for i in tops if i < c]
    return moved, runs, _root_hook(edit, tops[0], tops[-1], set(moved))


def _place_call(edit: ClassEdit, last: int, replaces: bool, tail, called: int | None) -> list:
    """Call the root hook after the moved statement ``last``; what the hook then ends with."""
    if called is not None and last < called:
        return []  # the existing call stays where it is
    if tail is None:
        _call_after(edit, last, replaces)
        return []
    # called where reset_parameters() was, which it calls last
    call = stmt(f"self.{ROOT_HOOK}()").with_changes(leading_lines=tail.leading_lines)
    edit.replace[id(tail)] = (tail, [call])
    return [stmt(f"self.{RESET_HOOK}()")]


def _locals_stay_bound(body, moved: list[int]) -> None:
    """Raise :class:`Unfixable` when a local that a moving ``if`` block computes (``fan_in``)
    is read by a statement of ``__init__`` that stays: it would be unbound there."""
    for i in moved:
        made = bound_names(body[i]) if isinstance(body[i], cst.If) else set()
        for j in range(i + 1, len(body)):
            read = {n.value for n in names_in(body[j])} & made
            if read and j not in moved:
                raise Unfixable(
                    f"`{sorted(read)[0]}`, computed in a block that moves into the hook, is "
                    "read later in `__init__`"
                )


def _take_units(edit: ClassEdit, units, called: int | None, inits: dict[str, set[int]]):
    """The hook's statements from ``units`` (top-level index, its guarded run or None: the
    statement itself): (those that ran before an existing call of the hook, which open it;
    the rest). Statements after an early return of ``__init__`` init children made on some
    paths only (bs-roformer's ``AdaLN``: ``if not exists(time_cond_dim): return``, then
    ``to_gamma_beta_gate`` is made and initialised): the hook guards them by those children
    being there, as it does a run inside an ``if`` (:func:`_guarded_run`)."""
    body = edit.init_body
    stmts: list = []
    before: list = []  # what ran before an existing call: it opens the hook
    late: list = []  # after an early return: guarded together
    kids: set[str] = set()
    for i, guarded_run in units:
        into = before if called is not None and i < called else stmts
        if guarded_run is not None:
            into.append(guarded_run)
            continue
        try:
            taken = take(edit, body, [i], private=True)
        except Unfixable as exc:
            taken = _recomputed(edit, i, str(exc))
        if into is stmts and edit.after_return(i):
            late.extend(taken)
            kids |= {a for a, at in inits.items() if i in at}
            continue
        into.extend(taken)
    if late:
        stmts.append(_guarded_run(late, frozenset(kids), edit))
    return before, stmts


def _init_indices(ctx: RuleContext, body, moved, runs) -> dict[str, set[int]]:
    """Child -> the top-level statements of ``__init__`` that initialise its tensors in place
    (a moved statement, or the ``if`` holding a run)."""
    inits: dict[str, set[int]] = {}
    for i in moved:
        for c in walk_code(body[i]):
            if isinstance(c, cst.Call) and _init_call(c, ctx, _any) and _attr_of(c, ctx):
                inits.setdefault(_attr_of(c, ctx), set()).add(i)
    for i, _run, kids in runs:
        for a in kids:
            inits.setdefault(a, set()).add(i)
    return inits


def _children(
    ctx: RuleContext, edit: ClassEdit, with_runs: bool = True, keep: int | None = None
) -> Rewrite:
    """In-place init of children's tensors (``trunc_normal_(self.linear.weight, std=std)``):
    the parent's value for a child belongs in its root ``init_weights()``, which runs after the
    children's own hooks. Every init-only statement moves there in order, and the call takes
    the place of the last one, so eager construction draws the same numbers in the same order.
    A run of them inside an ``if`` block that creates those children (:func:`_block_runs`)
    moves too, guarded by the children being there; the call then follows that ``if``.

    A class whose ``__init__`` already calls its ``init_weights()`` (ML010's fix of timm
    HieraDet's ``named_apply``) gets the statements that ran before that call at the start of
    the hook, and those after it at its end (:meth:`ClassEdit.join_called_hook`). When those
    after it cannot join (HieraDet's head init follows ``self.fix_init_weight()``, a method
    that changes the children), the ones before it still move, provided the finding's own
    statement (``keep``) is among them; the others stay, as their own findings say."""

    body = edit.init_body
    moved = [i for i, s in enumerate(body) if init_only(s, ctx, _any)]
    runs = _block_runs(ctx, edit) if with_runs else []
    moved, runs, (opening, tail, called) = _joined(edit, moved, runs, keep)
    tops = sorted({*moved, *(i for i, _r, _k in runs)})
    first, last = tops[0], tops[-1]
    inits = _init_indices(ctx, body, moved, runs)
    attrs = set(inits)
    _locals_stay_bound(body, moved)
    between = _between(edit, first, last, moved, runs, inits)
    for s, exempt in between:
        for a in sorted(attrs - exempt):
            if touches(s, a, False, edit.memo()):
                raise Unfixable(f"`self.{a}` is used between its in-place inits in `__init__`")
    if not all(rng_free(s, ctx) for s, _e in between):
        edit.unsafe.append(
            "random draws move after other random draws of `__init__`: eager values differ"
        )
    units: list[tuple[int, cst.BaseStatement | None]] = []
    for i in tops:
        if i in moved:
            units.append((i, None))
        for j, run, kids in runs:
            if j == i:
                units.append(
                    (i, _guarded_run(take(edit, run, range(len(run)), True, i), kids, edit))
                )
    before, stmts = _take_units(edit, units, called, inits)
    stmts.extend(_place_call(edit, last, last in moved, tail, called))
    if before:
        edit.hook_prepend[ROOT_HOOK] = before
    edit.hook_append[ROOT_HOOK] = [*opening, *stmts]
    n = len(moved) + sum(len(r) for _i, r, _k in runs)
    return edit.rewrite(
        f"Move {n} in-place init statement{'s' if n != 1 else ''} of children's tensors into a "
        f"root `{ROOT_HOOK}()` called from `__init__`"
    )
