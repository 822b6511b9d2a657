"""Recomputing a registered value in a hook (:func:`recompute_hook`) and why it cannot be (:func:`refusal`). Shared by the codemods."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    expr,
    fill,
    guarded,
    names_in,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import mentions_none, statements_after, touches, uses
from metalint.fix.recompute import (
    Drawn,
    drawn_tail,
    draws_or_builds,
    may_change,
    one_value,
    preceding,
    recompute_locals,
    registered,
)
from metalint.fix.store import inline_locals
from metalint.fix.values import (
    Value,
    empty_of,
    helper_conditional,
    helper_statement,
    hook_body,
    overwritten_later,
    own_helper,
)
from metalint.fix.values import is_number_literal as number
from metalint.static.construction import argument_of
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import keyword, string_value, walk_code
from metalint.static.tensors import inplace_write, value_kind
from metalint.vocabulary import BUFFER_HOOK, FILL_FACTORIES, HOST_READS, RESET_HOOK


@dataclass(frozen=True)
class _Registration:
    """``node`` registers buffer ``attr`` from ``value``."""

    node: cst.CSTNode
    attr: str
    value: cst.BaseExpression


@dataclass(frozen=True)
class _Buffer(_Registration):
    """A registration in ``__init__``: its top-level statement (``index``, ``line``, the
    ``path`` down to the registration) and the hook that computes the value."""

    index: int
    line: cst.CSTNode
    path: list
    hook: str


@dataclass(frozen=True)
class _HelperCall:
    """A registration in ``helper``, a private method that ``__init__`` calls once as a
    statement (:func:`helper_statement`): the call's line, top-level index and path, the
    registration's line and path in the method, and why it is not in ``__init__``."""

    helper: object
    call_line: cst.CSTNode
    call_index: int
    call_path: list
    line: cst.CSTNode
    path: list
    why: str


def located(edit: ClassEdit, node, attr: str, value, method, dry=False) -> Rewrite | None:
    """:func:`_compute` for a registration in ``__init__``, :func:`_in_helper` for one in a
    private method that ``__init__`` calls (``method``: the method holding ``node``)."""
    if not attr.isidentifier():
        raise Unfixable(f"the buffer's name is made in a loop (`{attr}`)")
    try:
        index, line, path = edit.locate(node)
    except Unfixable as exc:
        helper = own_helper(edit.cls, method)
        if helper is None:
            raise
        why = str(exc)
        at = _HelperCall(helper, *helper_statement(edit, node, helper, why), why)
        return _in_helper(edit, _Registration(node, attr, value), at)
    later = edit.used_after(attr, index, writes_only=True)
    if later:
        # re-initialised in place later (kornia's ``Similarity``: ``register_buffer("rot",
        # torch.zeros(1))``, then ``self.reset_model()`` does ``zeros_(self.rot)``): ML003's fix
        return overwritten_later(edit.ctx, edit, attr, index, later)
    _settled(edit, node, attr, line)
    hook = _buffer_hook(edit, index, node)
    return _compute(edit, _Buffer(node, attr, value, index, line, path, hook), dry=dry)


def refusal(ctx: RuleContext, cls, node: cst.CSTNode, attr: str, value, method) -> str | None:
    """Why this fix could not compute buffer ``attr`` from ``value`` (set by ``node``, in
    ``method``) in a hook (None: it could). ML007's fix asks it first: registering a plain attribute as a buffer whose value
    no hook re-creates leaves it uninitialised after ``to_empty()`` (DiNTS's ``arch_code_a``
    chosen by an ``if``, monai ``Scheduler.alphas_cumprod`` read from a plain tensor)."""
    try:
        located(ClassEdit(ctx, cls), node, attr, value, method, dry=True)
    except Unfixable as exc:
        return str(exc)
    return None


def _in_helper(edit: ClassEdit, reg: _Registration, at: _HelperCall) -> Rewrite:
    """The buffer is registered in a private method that only ``__init__`` calls, once, as a
    statement (speechbrain ``LiGRU_Layer._init_drop()``: ``self.register_buffer(
    "drop_mask_te", torch.tensor([1.0]).float())``). The method stays as it is; the hook
    computes the same value again, from the method's locals inlined, and copies it into the
    buffer, as :func:`_compute` does for a registration in ``__init__``. Safe when the value
    draws nothing (the same value, copied at the end of ``__init__``); a value that draws or
    calls a child module (its dropout: ``self.drop(torch.ones(n, h))``) is drawn a second time
    (unsafe). Refused when the value reads an argument of the method, or an attribute that
    is written after the registration (the hook would read another value)."""
    attr, why = reg.attr, at.why
    one_value(edit.cls, edit.ctx.qualify, attr, reg.node)
    memo = edit.memo()
    tail = statements_after(at.path) + edit.block_tail(at.call_line)
    if any(touches(x, attr, True, memo) for x in tail):
        raise Unfixable(f"{why}: `self.{attr}` is written later (line order matters)")
    later = edit.used_after(attr, at.call_index, writes_only=True)
    if later:
        raise Unfixable(f"{why}: {later}")
    hook = _buffer_hook(edit, at.call_index, reg.node)
    full, prelude = _helper_code(edit, reg, at, hook)
    code = [*prelude, full]
    _settled_reads(edit, at, code, tail)
    edit.refuse_plain_reads(full)
    if any(_may_be_none(c) for c in code):
        raise Unfixable(f"{why}: the buffer may be registered as `None`")
    random, children = _drawn_again(edit, code)
    torch_name, _ = torch_spelling(edit.ctx)
    body = fill(f"with {torch_name}.no_grad():\n    self.{attr}.copy_(__v__)", v=full)
    if helper_conditional(edit, at.helper, at.path, at.call_path, at.call_index):
        body = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
        body = body.with_changes(body=body.body.with_changes(body=[*prelude, *body.body.body]))
    else:
        body = [*prelude, body]
    if random:
        drawn = f" (`{children[0]}(...)` may draw: a dropout)" if children else ""
        edit.unsafe.append(
            f"the random value is drawn a second time in the hook{drawn}: eager values differ"
        )
    edit.use_hook(hook, at.call_index, body if isinstance(body, list) else [body], random=random)
    return edit.rewrite(
        f"Compute buffer `{attr}` (registered in `{at.helper.name}()`) in `{hook}()` and call it "
        "from `__init__`"
    )


def _helper_code(edit: ClassEdit, reg: _Registration, at: _HelperCall, hook: str):
    """(the value with the method's locals inlined, []) for :func:`_in_helper`; when they
    cannot be, (the value, the statements that compute its locals again before it)."""
    helper = at.helper
    try:
        full = inline_locals(edit, reg.value, method=helper)
    except Unfixable as exc:
        # ``kernels = []`` filled in a loop (julius's ``ResampleFrac._init_kernels()``): the
        # hook computes it again, as the method does
        before = preceding(edit, at.path, at.call_index, helper=True)
        prelude = recompute_locals(
            edit, reg.value, at.call_index, hook, f"{at.why}: {exc}", before, method=helper
        )
        return prelude.pop(), prelude
    for name in names_in(full):
        if name.value != "self" and (
            name.value in helper.arguments or name.value in helper.local_values
        ):
            raise Unfixable(
                f"{at.why}: the value reads `{name.value}`, a name of `{helper.name}()`"
            )
    return full, []


def _settled_reads(edit: ClassEdit, at: _HelperCall, code, tail) -> None:
    """Raise :class:`Unfixable` when the value reads an attribute set again after the
    registration (``tail``, then the rest of ``__init__``): the hook would read another value."""
    memo = edit.memo()
    for a in sorted(set().union(*(uses(c)[1] for c in code))):
        if any(touches(x, a, True, memo) for x in tail) or edit.used_after(
            a, at.call_index, writes_only=True
        ):
            raise Unfixable(f"{at.why}: the value reads `self.{a}`, which is set again later")


def _drawn_again(edit: ClassEdit, code) -> tuple[bool, list[str]]:
    """(does computing ``code`` again draw random numbers, the child modules it calls: a
    dropout may draw); raises :class:`Unfixable` when it copies a tensor to the host."""
    effects = helper_effects(edit, code)
    _no_host(effects)
    children = [
        a
        for c in code
        for n in walk_code(c)
        if type(n) is cst.Call
        and (a := dotted(n.func) or "").startswith("self.")
        and a.count(".") == 1
        and a[5:] not in edit.cls.methods
    ]
    random = (
        any(value_kind(c, edit.ctx.qualify) == "random" for c in code)
        or "random" in effects
        or any(draws_or_builds(c, edit) for c in code)
        or bool(children)
    )
    return random, children


def _no_host(effects: dict[str, str]) -> None:
    """Raise :class:`Unfixable` when a helper of the file the value calls copies a tensor to
    the host (:func:`helper_effects`)."""
    if "host" in effects:
        raise Unfixable(
            f"the value calls `{effects['host']}()`, which copies a tensor to the host "
            "(`.cpu()`, `.item()`, ...): under meta the hook would raise"
        )


def _stored(edit: ClassEdit, b: _Buffer, full, prelude):
    """The value for the hook and the statements before it: the last of ``prelude`` (the
    statements computing the value's locals, when there are some); else ``(value with its
    locals kept on self, [])``; when a local cannot be kept (changed in
    place: pypots' MWT_CZ1d, ``H0r = H0 @ PHI0`` then ``H0r[np.abs(H0r) < 1e-8] = 0``),
    ``(value, the statements that compute its locals again)`` for the hook (or a rewrite)."""
    if prelude:
        return prelude.pop(), prelude
    try:
        return edit.store_names(full, b.line, b.index), []
    except Unfixable as exc:
        done = _not_inlined(edit, b, str(exc))
        if isinstance(done, Rewrite):
            return done
        effects = helper_effects(edit, done)
        _no_host(effects)
        if "random" in effects or not all(draws(c, edit.ctx) is Draws.NEVER for c in done):
            edit.unsafe.append(
                "the hook computes the value again with calls that may draw random numbers: "
                "eager values may differ"
            )
        return done.pop(), done


def _compute(edit: ClassEdit, b: _Buffer, dry=False):
    """The rewrite computing buffer ``b`` in its hook; ``dry``: only whether it can be made
    (no random value's single draw is planned)."""
    kind = value_kind(b.value, edit.ctx.qualify, edit.init)
    done = _value_code(edit, b)
    if isinstance(done, Rewrite):
        return done
    full, prelude, covered = done
    effects = helper_effects(edit, [full, *prelude])
    _no_host(effects)
    if "random" in effects:
        kind = "random"  # drawn by a helper of the file: drawn a second time in the hook
    arg = argument_of(b.value, edit.init)
    optional = _optional(edit, b.value, full, prelude, arg)
    if optional:
        full = _tensor_branch(full)
    if kind == "random" and full is b.value and not optional and not dry:
        drawn = _drawn_once(edit, b)
        if drawn is not None:
            return drawn
    done = _stored(edit, b, full, prelude)
    if isinstance(done, Rewrite):
        return done
    torch_name, _ = torch_spelling(edit.ctx)
    value_node, prelude = done
    body = fill(f"with {torch_name}.no_grad():\n    self.{b.attr}.copy_(__v__)", v=value_node)
    if edit.conditional(b.path, b.index):
        body = _in_block(edit, b, body, prelude, covered)
        prelude = []
    elif optional:
        # a buffer that may be registered as ``None`` (monai's ``FocalLoss.class_weight``
        # without class weights) is copied into only where it is a tensor; the same code
        # decided it in ``__init__``
        body = guarded(f"self.{b.attr} is not None", body)
    if kind == "random":
        edit.unsafe.append(
            "the random value is drawn a second time in the hook: eager values differ"
        )
    edit.use_hook(b.hook, b.index, [*prelude, body])
    return edit.rewrite(_copied(b, arg, kind))


def _copied(b: _Buffer, arg: str | None, kind: str | None) -> str:
    """The message of :func:`_compute`: the caller's tensor kept (``arg``, a value of no known
    kind), or the value computed."""
    if arg is not None and kind is None:
        what = (
            f"Keep the caller's `{arg}` and copy it into buffer `{b.attr}` in `{b.hook}()`, called"
        )
    else:
        what = f"Compute buffer `{b.attr}` in `{b.hook}()` and call it"
    return f"{what} from `__init__`"


def _value_code(edit: ClassEdit, b: _Buffer):
    """(the value with its locals inlined, [], set()); when they cannot be, (the value, the
    statements computing its locals, the locals of later buffers of its block those compute
    too: :func:`_with_siblings`); or the rewrite that fills a constant (:func:`_constant_fill`)
    or otherwise needs no copy."""
    nn_name = torch_spelling(edit.ctx)[1]
    constant = _constant_fill(edit.ctx, b.value, f"self.{b.attr}", nn_name)
    if constant is not None:
        return _fill(edit, b, constant)
    try:
        full = inline_locals(edit, b.value, index=b.index)
    except Unfixable as exc:
        done, covered = _with_siblings(edit, b, str(exc))
        if isinstance(done, Rewrite):
            return done
        return b.value, done, covered
    return full, [], set()


def _settled(edit: ClassEdit, node, attr: str, line) -> None:
    """Raise :class:`Unfixable` unless the registration of ``node`` gives buffer ``attr`` the
    value it keeps: nothing later in its block writes it, and no other path of construction
    makes it from another value (:func:`one_value`)."""
    tail = edit.block_tail(line)
    if any(touches(s, attr, True, edit.memo()) for s in tail):
        raise Unfixable(f"`self.{attr}` is written later in its block (line order matters)")
    one_value(edit.cls, edit.ctx.qualify, attr, node)


def _fill(edit: ClassEdit, b: _Buffer, constant) -> Rewrite:
    """Fill buffer ``b`` with ``constant`` (:func:`_constant_fill`) in its hook, where the
    buffer is there when ``__init__`` registers it in a block."""
    if edit.conditional(b.path, b.index):
        constant = guarded(registered(edit.cls, edit.ctx.qualify, b.attr, "buffer"), constant)
    edit.use_hook(b.hook, b.index, [constant])
    return edit.rewrite(f"Fill buffer `{b.attr}` in `{b.hook}()` and call it from `__init__`")


def _constant_fill(ctx, value, x: str, nn_name: str) -> cst.BaseStatement | None:
    """``nn.init.zeros_(x)`` for a buffer registered from ``torch.zeros(...)`` (e2cnn's
    ``R2Conv.filter``, a cache of the expanded filter): one value set in every element,
    which a maintainer writes without the shape, its dtype and device kept by the buffer
    through ``to_empty()``; ``ones_`` and ``constant_`` (a literal fill value) alike. Nothing
    the factory read is kept on ``self``, so a shape computed from a local assigned twice, or
    from an argument reassigned, is no obstacle. None for any other value."""
    if not isinstance(value, cst.Call):
        return None
    kind = FILL_FACTORIES.get(ctx.qualify(value.func) or "")
    if kind is None:
        return None
    if kind != "const":
        return stmt(f"{nn_name}.init.{kind}_({x})")
    positional = [a.value for a in value.args if a.keyword is None and not a.star]
    fill_value = next(
        (a.value for a in value.args if a.keyword and a.keyword.value == "fill_value"),
        positional[1] if len(positional) > 1 else None,
    )
    if fill_value is None or not number(fill_value):
        return None
    return stmt(f"{nn_name}.init.constant_({x}, {render(fill_value).strip()})")


def _with_siblings(edit: ClassEdit, b: _Buffer, why: str):
    """:func:`_not_inlined`, computing in a block (``if``) the locals the later buffers of that
    block are registered from too (:func:`_sibling_locals`), when it can; with those locals."""
    covered = (
        _sibling_locals(edit, b.line, b.path, b.attr)
        if edit.conditional(b.path, b.index)
        else set()
    )
    if covered:
        try:
            done = _not_inlined(edit, b, why, covered)
            return done, covered
        except Unfixable:
            pass
    return _not_inlined(edit, b, why), set()


def _not_inlined(edit: ClassEdit, b: _Buffer, why: str, also=frozenset()):
    """The statements computing the value's locals, copied for the hook (or a rewrite), when
    they cannot be inlined: an in-place init moved (:func:`_init_moved`), else
    :func:`recompute_locals` (computing the locals ``also`` too), else one draw for the drawn
    tail (:func:`drawn_tail`)."""
    moved = _init_moved(edit, b)
    if moved is not None:
        return moved
    before = preceding(edit, b.path, b.index)
    if also:
        # no drawn tail: a draw refuses, and the caller asks again without ``also``
        return recompute_locals(edit, b.value, b.index, b.hook, why, before, also)
    try:
        return recompute_locals(edit, b.value, b.index, b.hook, why, before)
    except Drawn as drawn:
        return edit.rewrite(drawn_tail(edit, drawn.index, b.hook, why))


def _init_moved(edit: ClassEdit, b: _Buffer) -> Rewrite | None:
    """A local made by ``torch.empty(shape)``, initialised in place by one call and then
    registered (vector-quantize-pytorch's ``LFQ``: ``orthogonal_rot = torch.empty(d, d)``,
    ``nn.init.orthogonal_(orthogonal_rot)``, ``register_buffer('orthogonal_rot',
    orthogonal_rot)``, all under ``if orthogonal_rotation:``): the init call moves into the
    hook, on the buffer (``nn.init.orthogonal_(self.orthogonal_rot)``), guarded where the
    buffer is made on some paths only. The registration keeps the same empty tensor, and the
    hook draws the same numbers from the same generator state when nothing draws in between
    (the hook is then called right after the statement, :meth:`ClassEdit.use_hook`); else
    unsafe. None when the value is not made that way."""
    found = _empty_local(edit, b)
    found = found and _init_call(edit, b, *found)
    if not found:
        return None
    before, init, call, target = found
    ctx = edit.ctx
    moved = call.deep_replace(target, expr(f"self.{b.attr}"))
    moved = edit.store_names(moved, init, b.index)
    body = stmt(render(cst.SimpleStatementLine([cst.Expr(moved)])))
    if edit.conditional(b.path, b.index):
        body = guarded(registered(edit.cls, edit.ctx.qualify, b.attr, "buffer"), body)
    edit.replace[id(init)] = (init, [])
    between = [*before[before.index(init) + 1 :], *edit.block_tail(b.line)]
    random = draws_or_builds(call, edit) or draws(call, ctx) is not Draws.NEVER
    if random and not all(draws(s, ctx) is Draws.NEVER for s in between):
        edit.unsafe.append(
            "the in-place init now runs in the hook, after other random draws of its block: "
            "eager values differ under the same seed (same distribution)"
        )
    edit.use_hook(b.hook, b.index, [body], random=random)
    return edit.rewrite(
        f"Register buffer `{b.attr}` from its `torch.empty(...)` and initialise it in place in "
        f"`{b.hook}()`, called from `__init__`"
    )


def _block_of(edit: ClassEdit, line, path) -> list:
    """The statements of the block holding ``line`` (``__init__``'s body at top level)."""
    at = next((k for k, n in enumerate(path) if n is line), 0)
    if at > 0 and isinstance(path[at - 1], cst.IndentedBlock):
        return path[at - 1].body
    return edit.init_body


def _empty_local(edit: ClassEdit, b: _Buffer):
    """(the statements of its block before the registration, the index among them of the one
    assignment of the local ``b`` is registered from, made by ``torch.empty(...)``), or None."""
    if not isinstance(b.value, cst.Name):
        return None
    name = b.value.value
    stmts = list(_block_of(edit, b.line, b.path))
    if b.line not in stmts:
        return None
    before = stmts[: stmts.index(b.line)]
    made = [
        k
        for k, s in enumerate(before)
        if isinstance(s, cst.SimpleStatementLine)
        and len(s.body) == 1
        and isinstance(s.body[0], cst.Assign)
        and len(s.body[0].targets) == 1
        and isinstance(s.body[0].targets[0].target, cst.Name)
        and s.body[0].targets[0].target.value == name
    ]
    values = edit.init.local_values.get(name, ())
    if len(made) != 1 or len(values) != 1:
        return None
    made_value = before[made[0]].body[0].value
    if not (
        isinstance(made_value, cst.Call) and edit.ctx.qualify(made_value.func) == "torch.empty"
    ):
        return None
    return before, made[0]


def _init_call(edit: ClassEdit, b: _Buffer, before: list, made: int):
    """``(before, the statement, the in-place init call on the local, the local's name in it)``
    for the one statement after its ``torch.empty`` (``before[made]``) that mentions the local:
    a call initialising it in place, the local read nowhere after the registration; or None."""
    name = b.value.value
    mentions = [s for s in before[made + 1 :] if name in {n.value for n in names_in(s)}]
    if len(mentions) != 1:
        return None
    init = mentions[0]
    if not (
        isinstance(init, cst.SimpleStatementLine)
        and len(init.body) == 1
        and isinstance(init.body[0], cst.Expr)
        and isinstance(init.body[0].value, cst.Call)
    ):
        return None
    call = init.body[0].value
    w = inplace_write(call, edit.ctx.qualify)
    if w is None or w.chain != (name,) or sum(1 for n in names_in(call) if n.value == name) != 1:
        return None
    target = next(n for n in names_in(call) if n.value == name)
    if any(
        name in {n.value for n in names_in(s)}
        for s in [*edit.block_tail(b.line), *edit.init_body[b.index + 1 :]]
    ):
        return None  # the local is read again after its registration
    return before, init, call, target


def _buffer_hook(edit: ClassEdit, index: int, node) -> str:
    persistent = keyword(node, "persistent") if isinstance(node, cst.Call) else None
    return _hook_for(edit, index, persistent is not None and render(persistent).strip() == "False")


def recompute_hook(ctx: RuleContext, cls, node: cst.CSTNode, method) -> str:
    """The hook this fix would compute the value of ``node`` (a plain attribute's assignment
    in ``__init__``, or in ``method`` that it calls) in once ML007's fix registered it as a non-persistent buffer: the hook
    whose refusal by the tree (:func:`metalint.fix.apply.hook_refusal`) refuses ML007's fix."""
    edit = ClassEdit(ctx, cls)
    try:
        index = edit.locate(node)[0]
    except Unfixable as exc:
        helper = own_helper(edit.cls, method)
        if helper is None:
            raise
        # set in a private method ``__init__`` calls (speechbrain ``SincConv._init_sinc_conv``):
        # the hook is chosen at the call, as :func:`_in_helper` does
        index = helper_statement(edit, node, helper, str(exc))[1]
    return _hook_for(edit, index, non_persistent=True)


def _hook_for(edit: ClassEdit, index: int, non_persistent: bool) -> str:
    hook = edit.choose_hook(index, prefer=(BUFFER_HOOK,))
    if hook == RESET_HOOK and non_persistent and _own_buffer_hook(edit):
        return BUFFER_HOOK
    return hook


def _own_buffer_hook(edit: ClassEdit) -> bool:
    """Should a non-persistent buffer get a new ``init_non_persistent_buffers()`` rather than
    the class's ``reset_parameters()``? When that hook returns early (peft's ``OrthLayer``:
    ``if any(p.is_meta for p in params): return``), takes required arguments, or is not called
    by ``__init__`` (calling it would re-initialise the parameters a caller sets up with its
    own arguments: ``update_layer`` calls ``reset_parameters(init_weights=...)``)."""
    if RESET_HOOK not in edit.cls.methods or edit.taken(BUFFER_HOOK):
        return False
    m = edit.cls.methods[RESET_HOOK].node
    calls, nested = edit.hook_calls(RESET_HOOK)
    return (
        edit.returns(m.body)
        or any(p.default is None for p in m.params.params[1:])
        or (not calls and not nested)
    )


def _in_block(edit: ClassEdit, b: _Buffer, body, prelude, covered=()):
    """The hook's code for a buffer registered inside an ``if``: guarded by the buffer being
    there (exactly when the block ran), with the locals it was computed from (``prelude``)
    computed again under the guard, and the other buffers the block registers from the locals
    ``covered`` (``rows, cols = torch.triu_indices(n, n, 1)``, both registered) copied in the
    same ``with``."""
    if not prelude:
        return guarded(registered(edit.cls, edit.ctx.qualify, b.attr, "buffer"), body)
    siblings = _siblings(edit, b, covered)
    if siblings:
        body = body.with_changes(body=body.body.with_changes(body=[*body.body.body, *siblings]))
    node = guarded(registered(edit.cls, edit.ctx.qualify, b.attr, "buffer"), body)
    return node.with_changes(body=node.body.with_changes(body=[*prelude, body]))


def _later_registrations(edit: ClassEdit, line, path, attr: str):
    """``(other, local)`` for each other buffer registered later in the block of ``line``
    straight from a local that no statement in between mentions (nothing changes it there)."""
    block = _block_of(edit, line, path)
    after = False
    between: list[cst.CSTNode] = []
    for s in block:
        if s is line:
            after = True
            continue
        if not after:
            continue
        call = None
        if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1:
            call = s.body[0].value if isinstance(s.body[0], cst.Expr) else None
        if (
            isinstance(call, cst.Call)
            and dotted(call.func) == "self.register_buffer"
            and len(call.args) >= 2
            and isinstance(call.args[1].value, cst.Name)
            and (other := string_value(call.args[0].value)) not in (None, attr)
            and not any(may_change(t, {call.args[1].value.value}, edit) for t in between)
        ):
            yield s, other, call.args[1].value.value
        between.append(s)


def _sibling_locals(edit: ClassEdit, line, path, attr: str) -> set[str]:
    """The locals later buffers of the block of ``line`` are registered from
    (:func:`_later_registrations`): the hook computes them with the buffer's own."""
    return {local for _s, _other, local in _later_registrations(edit, line, path, attr)}


def _siblings(edit: ClassEdit, b: _Buffer, covered) -> list:
    """``self.<b>.copy_(<local>)`` for each other buffer registered later in the block of
    ``line`` straight from a local the hook's copied statements compute as ``__init__`` has it
    there (``covered``: :func:`recompute_locals` was asked for them; a local merely bound by
    those statements may be converted later by one not copied: nnAudio's ``iSTFT`` unpacks
    ``kernel_sin, kernel_cos`` and converts each with its own ``torch.tensor(..)`` line), with
    nothing after its registration writing it: it is re-created by the same copy."""
    out = []
    for s, other, local in _later_registrations(edit, b.line, b.path, b.attr):
        if local not in covered:
            continue
        if edit.used_after(other, b.index, writes_only=True) or any(
            touches(t, other, True, edit.memo()) for t in edit.block_tail(s)
        ):
            continue
        out.append(stmt(f"self.{other}.copy_({local})"))
    return out


def _optional(edit: ClassEdit, value, full, prelude, arg: str | None) -> bool:
    """May the buffer be registered as None? Its value (or a statement computing it) chooses
    None, or it is a parameter that may be None (``mask: Optional[Tensor] = None``): the
    caller's tensor itself, or the parameter's name reassigned only under an ``if`` (timm
    ``BinaryCrossEntropy``: ``if pos_weight is not None: pos_weight = torch.tensor(...)``,
    then ``register_buffer('pos_weight', pos_weight)``; the unguarded copy raised on the
    default ``pos_weight=None``)."""
    if _may_be_none(full) or any(_may_be_none(s) for s in prelude):
        return True
    if arg is not None and _param_may_be_none(edit.init.node, arg):
        return True
    return isinstance(value, cst.Name) and _param_may_be_none(edit.init.node, value.value)


def helper_effects(edit: ClassEdit, nodes, seen: set[str] | None = None) -> dict[str, str]:
    """What the module-level functions of the file that ``nodes`` call (and the ones they call)
    do that a hook cannot repeat as ``__init__`` did: ``"random"`` (a draw: PyG's
    ``orthogonal_matrix`` -> ``torch.randn``), ``"host"`` (a copy to the host: its
    ``q, _ = torch.linalg.qr(mat.cpu())``); effect -> the function called."""
    defs = {s.name.value: s for s in edit.ctx.module.body if isinstance(s, cst.FunctionDef)}
    seen = set() if seen is None else seen
    out: dict[str, str] = {}
    for node in nodes:
        for c in walk_code(node):
            if not (isinstance(c, cst.Call) and isinstance(c.func, cst.Name)):
                continue
            name = c.func.value
            if name not in defs or name in seen:
                continue
            seen.add(name)
            body = defs[name].body
            if draws_or_builds(body, edit):
                out.setdefault("random", name)
            for n in walk_code(body):
                if (
                    isinstance(n, cst.Call)
                    and isinstance(n.func, cst.Attribute)
                    and (n.func.attr.value == "cpu" or n.func.attr.value in HOST_READS)
                ):
                    out.setdefault("host", name)
            for effect in helper_effects(edit, [body], seen):
                out.setdefault(effect, name)
    return out


def _drawn_once(edit: ClassEdit, b: _Buffer) -> Rewrite | None:
    """A random buffer made by one factory (``scale * torch.randn((2, n))``, vista3d's and
    SAM's positional Gaussian matrix) is registered from ``torch.empty(shape)`` and drawn once,
    in the hook (``self.x.normal_().mul_(scale)``: the same draws and rounding, as ML001's fix
    does for parameters): eager values stay identical when nothing after it in ``__init__``
    draws. None when its shape is not derived statically (the value is then drawn twice)."""
    ctx, line, index, attr, hook = edit.ctx, b.line, b.index, b.attr, b.hook
    try:
        value = Value(b.node.args[1].value, ctx)
    except Unfixable:
        return None
    if not value.random:
        return None
    names = torch_spelling(ctx)
    empty, shape = empty_of(value, names[0])
    arg = b.node.args[1]
    new_line = line.deep_replace(arg, arg.with_changes(value=empty))
    body = hook_body(value, f"self.{attr}", names, lambda e: edit.store_names(e, line, index))
    if edit.conditional(b.path, index):
        body = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
    old = edit.replace.get(id(line))
    current = old[1] if old else [line]
    edit.replace[id(line)] = (line, [new_line if s is line else s for s in current])
    if not all(draws(s, ctx) is Draws.NEVER for s in edit.block_tail(line)):
        edit.unsafe.append(
            "the random value is now drawn at the end of `__init__`, after other random draws, "
            "so eager values differ under the same seed (same distribution)"
        )
    edit.use_hook(hook, index, [body], random=True)
    return edit.rewrite(
        f"Register buffer `{attr}` from `torch.empty({shape})` and draw it in `{hook}()`, "
        "called from `__init__`"
    )


def _param_may_be_none(fn: cst.FunctionDef, name: str) -> bool:
    """Parameter ``name`` of ``fn`` defaults to ``None`` or is annotated as optional
    (``Optional[Tensor]``, ``Tensor | None``): the buffer registered from it may be None."""
    p = fn.params
    for param in (*p.posonly_params, *p.params, *p.kwonly_params):
        if param.name.value != name:
            continue
        if param.default is not None and _is_none(param.default):
            return True
        ann = param.annotation.annotation if param.annotation else None
        return ann is not None and any(
            _is_none(n)
            or (isinstance(n, cst.Name) and n.value == "Optional")
            or (isinstance(n, cst.Attribute) and n.attr.value == "Optional")
            for n in walk_code(ann)
        )
    return False


def _is_none(e: cst.CSTNode) -> bool:
    return isinstance(e, cst.Name) and e.value == "None"


def _tensor_branch(e: cst.BaseExpression) -> cst.BaseExpression:
    """``torch.as_tensor(w)`` for ``torch.as_tensor(w) if w is not None else None``: where the
    buffer is a tensor, that branch made it."""
    if isinstance(e, cst.IfExp):
        if _is_none(e.orelse):
            return e.body
        if _is_none(e.body):
            return e.orelse
    return e


def _may_be_none(node: cst.CSTNode) -> bool:
    """Does the value (or a statement computing it) mention ``None`` (:func:`mentions_none`)
    or choose with ``x if c else y``? The buffer may then be registered as ``None``."""
    return mentions_none(node) or any(isinstance(n, cst.IfExp) for n in walk_code(node))
