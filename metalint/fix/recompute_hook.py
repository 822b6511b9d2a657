"""Recomputing a registered value in a hook (:func:`recompute_hook`) and why it cannot be (:func:`refusal`). Shared by the codemods."""

from __future__ import annotations

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
    helper_of,
    helper_statement,
    hook_body,
    overwritten_later,
)
from metalint.fix.values import is_number_literal as number
from metalint.static.construction import argument_of
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import keyword, string_value, walk_code
from metalint.static.tensors import inplace_write, value_kind
from metalint.vocabulary import BUFFER_HOOK, FILL_FACTORIES, HOST_READS, RESET_HOOK


def located(ctx, edit: ClassEdit, node, attr: str, value, dry=False) -> Rewrite | None:
    """:func:`_compute` for a registration in ``__init__``, :func:`_in_helper` for one in a
    private method that ``__init__`` calls."""
    try:
        index, line, path = edit.locate(node)
    except Unfixable as exc:
        helper = helper_of(edit.cls, node)
        if helper is None:
            raise
        return _in_helper(ctx, edit, node, attr, value, helper, str(exc))
    return _compute(ctx, edit, node, attr, value, index, line, path, dry=dry)


def refusal(ctx: RuleContext, cls, node: cst.CSTNode, attr: str, value) -> str | None:
    """Why this fix could not compute buffer ``attr`` from ``value`` in a hook (None: it
    could). ML007's fix asks it first: registering a plain attribute as a buffer whose value
    no hook re-creates leaves it uninitialised after ``to_empty()`` (DiNTS's ``arch_code_a``
    chosen by an ``if``, monai ``Scheduler.alphas_cumprod`` read from a plain tensor)."""
    try:
        located(ctx, ClassEdit(ctx, cls), node, attr, value, dry=True)
    except Unfixable as exc:
        return str(exc)
    return None


def _in_helper(ctx, edit: ClassEdit, node, attr: str, value, helper, why: str) -> Rewrite:
    """The buffer is registered in a private method that only ``__init__`` calls, once, as a
    statement (speechbrain ``LiGRU_Layer._init_drop()``: ``self.register_buffer(
    "drop_mask_te", torch.tensor([1.0]).float())``). The method stays as it is; the hook
    computes the same value again, from the method's locals inlined, and copies it into the
    buffer, as :func:`_compute` does for a registration in ``__init__``. Safe when the value
    draws nothing (the same value, copied at the end of ``__init__``); a value that draws or
    calls a child module (its dropout: ``self.drop(torch.ones(n, h))``) is drawn a second time
    (unsafe). Refused when the value reads an argument of the method, or an attribute that
    is written after the registration (the hook would read another value)."""
    call_line, call_index, call_path, line, path = helper_statement(edit, node, helper, why)
    one_value(edit.cls, ctx.qualify, attr, node)
    memo = edit.memo()
    tail = statements_after(path) + edit.block_tail(call_line)
    if any(touches(x, attr, True, memo) for x in tail):
        raise Unfixable(f"{why}: `self.{attr}` is written later (line order matters)")
    later = edit.used_after(attr, call_index, writes_only=True)
    if later:
        raise Unfixable(f"{why}: {later}")
    hook = _buffer_hook(edit, call_index, node)
    prelude: list[cst.BaseStatement] = []
    try:
        full = inline_locals(edit, value, method=helper)
    except Unfixable as exc:
        # ``kernels = []`` filled in a loop (julius's ``ResampleFrac._init_kernels()``): the
        # hook computes it again, as the method does
        before = preceding(edit, path, call_index, helper=True)
        prelude = recompute_locals(
            edit, value, call_index, hook, f"{why}: {exc}", before, method=helper
        )
        full = prelude.pop()
    else:
        for name in names_in(full):
            if name.value != "self" and (
                name.value in helper.arguments or name.value in helper.local_values
            ):
                raise Unfixable(
                    f"{why}: the value reads `{name.value}`, a name of `{helper.name}()`"
                )
    code = [*prelude, full]
    for a in sorted(set().union(*(uses(c)[1] for c in code))):
        if any(touches(x, a, True, memo) for x in tail) or edit.used_after(
            a, call_index, writes_only=True
        ):
            raise Unfixable(f"{why}: the value reads `self.{a}`, which is set again later")
    edit.refuse_plain_reads(full)
    if any(_may_be_none(c) for c in code):
        raise Unfixable(f"{why}: the buffer may be registered as `None`")
    effects = helper_effects(edit, code)
    if "host" in effects:
        raise Unfixable(
            f"the value calls `{effects['host']}()`, which copies a tensor to the host "
            "(`.cpu()`, `.item()`, ...): under meta the hook would raise"
        )
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
        any(value_kind(c, ctx.qualify) == "random" for c in code)
        or "random" in effects
        or any(draws_or_builds(c, edit) for c in code)
        or bool(children)
    )
    torch_name, _ = torch_spelling(ctx)
    body = fill(f"with {torch_name}.no_grad():\n    self.{attr}.copy_(__v__)", v=full)
    if helper_conditional(edit, helper, path, call_path, call_index):
        body = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
        body = body.with_changes(body=body.body.with_changes(body=[*prelude, *body.body.body]))
    else:
        body = [*prelude, body]
    if random:
        drawn = f" (`{children[0]}(...)` may draw: a dropout)" if children else ""
        edit.unsafe.append(
            f"the random value is drawn a second time in the hook{drawn}: eager values differ"
        )
    edit.use_hook(hook, call_index, body if isinstance(body, list) else [body], random=random)
    return edit.rewrite(
        f"Compute buffer `{attr}` (registered in `{helper.name}()`) in `{hook}()` and call it "
        "from `__init__`"
    )


def _stored(ctx, edit: ClassEdit, full, value, attr: str, line, path, index: int, hook, prelude):
    """The value for the hook and the statements before it: the last of ``prelude`` (the
    statements computing the value's locals, when there are some); else ``(value with its
    locals kept on self, [])``; when a local cannot be kept (changed in
    place: pypots' MWT_CZ1d, ``H0r = H0 @ PHI0`` then ``H0r[np.abs(H0r) < 1e-8] = 0``),
    ``(value, the statements that compute its locals again)`` for the hook (or a rewrite)."""
    if prelude:
        return prelude.pop(), prelude
    try:
        return edit.store_names(full, line, index), []
    except Unfixable as exc:
        done = _not_inlined(ctx, edit, value, attr, line, path, index, hook, str(exc))
        if isinstance(done, Rewrite):
            return done
        effects = helper_effects(edit, done)
        if "host" in effects:
            raise Unfixable(
                f"the value calls `{effects['host']}()`, which copies a tensor to the host "
                "(`.cpu()`, `.item()`, ...): under meta the hook would raise"
            ) from exc
        if "random" in effects or not all(draws(c, ctx) is Draws.NEVER for c in done):
            edit.unsafe.append(
                "the hook computes the value again with calls that may draw random numbers: "
                "eager values may differ"
            )
        return done.pop(), done


def _compute(ctx, edit: ClassEdit, node, attr: str, value, index, line, path, dry=False):
    """The rewrite computing buffer ``attr`` (registered by ``node`` from ``value``) in a hook;
    ``dry``: only whether it can be made (no random value's single draw is planned)."""
    later = edit.used_after(attr, index, writes_only=True)
    if later:
        # re-initialised in place later (kornia's ``Similarity``: ``register_buffer("rot",
        # torch.zeros(1))``, then ``self.reset_model()`` does ``zeros_(self.rot)``): ML003's fix
        return overwritten_later(ctx, edit, attr, index, later)
    _settled(ctx, edit, node, attr, line)
    torch_name, nn_name = torch_spelling(ctx)
    kind = value_kind(value, ctx.qualify, edit.init)
    hook = _buffer_hook(edit, index, node)
    constant = _constant_fill(ctx, value, f"self.{attr}", nn_name)
    if constant is not None:
        return _fill(edit, constant, attr, path, index, hook)
    prelude: list[cst.BaseStatement] = []
    covered: set[str] = set()
    try:
        full = inline_locals(edit, value, index=index)
    except Unfixable as exc:
        done, covered = _with_siblings(ctx, edit, value, attr, line, path, index, hook, str(exc))
        if isinstance(done, Rewrite):
            return done
        full, prelude = value, done
    effects = helper_effects(edit, [full, *prelude])
    if "host" in effects:
        raise Unfixable(
            f"the value calls `{effects['host']}()`, which copies a tensor to the host "
            "(`.cpu()`, `.item()`, ...): under meta the hook would raise"
        )
    if "random" in effects:
        kind = "random"  # drawn by a helper of the file: drawn a second time in the hook
    arg = argument_of(value, edit.init)
    optional = _optional(edit, value, full, prelude, arg)
    if optional:
        full = _tensor_branch(full)
    if kind == "random" and full is value and not optional and not dry:
        drawn = _drawn_once(ctx, edit, line, index, path, node, attr, hook)
        if drawn is not None:
            return drawn
    done = _stored(ctx, edit, full, value, attr, line, path, index, hook, prelude)
    if isinstance(done, Rewrite):
        return done
    value_node, prelude = done
    body = fill(f"with {torch_name}.no_grad():\n    self.{attr}.copy_(__v__)", v=value_node)
    if edit.conditional(path, index):
        body = _in_block(edit, body, line, path, attr, prelude, index, covered)
        prelude = []
    elif optional:
        # a buffer that may be registered as ``None`` (monai's ``FocalLoss.class_weight``
        # without class weights) is copied into only where it is a tensor; the same code
        # decided it in ``__init__``
        body = guarded(f"self.{attr} is not None", body)
    body = [*prelude, body]
    if kind == "random":
        edit.unsafe.append(
            "the random value is drawn a second time in the hook: eager values differ"
        )
    edit.use_hook(hook, index, body)
    if arg is not None and kind is None:
        what = f"Keep the caller's `{arg}` and copy it into buffer `{attr}` in `{hook}()`, called"
    else:
        what = f"Compute buffer `{attr}` in `{hook}()` and call it"
    return edit.rewrite(f"{what} from `__init__`")


def _settled(ctx, edit: ClassEdit, node, attr: str, line) -> None:
    """Raise :class:`Unfixable` unless the registration of ``node`` gives buffer ``attr`` the
    value it keeps: nothing later in its block writes it, and no other path of construction
    makes it from another value (:func:`one_value`)."""
    tail = edit.block_tail(line)
    if any(touches(s, attr, True, edit.memo()) for s in tail):
        raise Unfixable(f"`self.{attr}` is written later in its block (line order matters)")
    one_value(edit.cls, ctx.qualify, attr, node)


def _fill(edit: ClassEdit, constant, attr: str, path, index: int, hook: str) -> Rewrite:
    """Fill buffer ``attr`` with ``constant`` (:func:`_constant_fill`) in ``hook``, where the
    buffer is there when ``__init__`` registers it in a block."""
    if edit.conditional(path, index):
        constant = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), constant)
    edit.use_hook(hook, index, [constant])
    return edit.rewrite(f"Fill buffer `{attr}` in `{hook}()` and call it from `__init__`")


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


def _with_siblings(ctx, edit: ClassEdit, value, attr: str, line, path, index: int, hook, why):
    """:func:`_not_inlined`, computing in a block (``if``) the locals the later buffers of that
    block are registered from too (:func:`_sibling_locals`), when it can; with those locals."""
    covered = _sibling_locals(edit, line, path, attr) if edit.conditional(path, index) else set()
    if covered:
        try:
            done = _not_inlined(ctx, edit, value, attr, line, path, index, hook, why, covered)
            return done, covered
        except Unfixable:
            pass
    return _not_inlined(ctx, edit, value, attr, line, path, index, hook, why), set()


def _not_inlined(
    ctx, edit: ClassEdit, value, attr: str, line, path, index: int, hook, why, also=frozenset()
):
    """The statements computing the value's locals, copied for the hook (or a rewrite), when
    they cannot be inlined: an in-place init moved (:func:`_init_moved`), else
    :func:`recompute_locals` (computing the locals ``also`` too), else one draw for the drawn
    tail (:func:`drawn_tail`)."""
    moved = _init_moved(ctx, edit, value, attr, line, path, index, hook, why)
    if moved is not None:
        return moved
    before = preceding(edit, path, index)
    if also:
        # no drawn tail: a draw refuses, and the caller asks again without ``also``
        return recompute_locals(edit, value, index, hook, why, before, also)
    try:
        return recompute_locals(edit, value, index, hook, why, before)
    except Drawn as drawn:
        return edit.rewrite(drawn_tail(edit, drawn.index, hook, why))


def _init_moved(ctx, edit: ClassEdit, value, attr: str, line, path, index: int, hook, why):
    """A local made by ``torch.empty(shape)``, initialised in place by one call and then
    registered (vector-quantize-pytorch's ``LFQ``: ``orthogonal_rot = torch.empty(d, d)``,
    ``nn.init.orthogonal_(orthogonal_rot)``, ``register_buffer('orthogonal_rot',
    orthogonal_rot)``, all under ``if orthogonal_rotation:``): the init call moves into the
    hook, on the buffer (``nn.init.orthogonal_(self.orthogonal_rot)``), guarded where the
    buffer is made on some paths only. The registration keeps the same empty tensor, and the
    hook draws the same numbers from the same generator state when nothing draws in between
    (the hook is then called right after the statement, :meth:`ClassEdit.use_hook`); else
    unsafe. None when the value is not made that way."""
    if not isinstance(value, cst.Name):
        return None
    name = value.value
    at = next((k for k, n in enumerate(path) if n is line), 0)
    block = path[at - 1].body if at > 0 and isinstance(path[at - 1], cst.IndentedBlock) else None
    if block is None:
        block = edit.init_body
    stmts = list(block)
    if line not in stmts:
        return None
    before = stmts[: stmts.index(line)]
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
    if not (isinstance(made_value, cst.Call) and ctx.qualify(made_value.func) == "torch.empty"):
        return None
    rest = before[made[0] + 1 :]
    mentions = [s for s in rest if name in {n.value for n in names_in(s)}]
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
    w = inplace_write(call, ctx.qualify)
    if w is None or w.chain != (name,):
        return None
    if sum(1 for n in names_in(call) if n.value == name) != 1:
        return None
    target = next(n for n in names_in(call) if n.value == name)
    if any(
        name in {n.value for n in names_in(s)}
        for s in [*edit.block_tail(line), *edit.init_body[index + 1 :]]
    ):
        return None  # the local is read again after its registration
    moved = call.deep_replace(target, expr(f"self.{attr}"))
    moved = edit.store_names(moved, init, index)
    body = stmt(render(cst.SimpleStatementLine([cst.Expr(moved)])))
    if edit.conditional(path, index):
        body = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
    edit.replace[id(init)] = (init, [])
    between = [*before[before.index(init) + 1 :], *edit.block_tail(line)]
    random = draws_or_builds(call, edit) or draws(call, ctx) is not Draws.NEVER
    if random and not all(draws(s, ctx) is Draws.NEVER for s in between):
        edit.unsafe.append(
            "the in-place init now runs in the hook, after other random draws of its block: "
            "eager values differ under the same seed (same distribution)"
        )
    edit.use_hook(hook, index, [body], random=random)
    return edit.rewrite(
        f"Register buffer `{attr}` from its `torch.empty(...)` and initialise it in place in "
        f"`{hook}()`, called from `__init__`"
    )


def _buffer_hook(edit: ClassEdit, index: int, node) -> str:
    persistent = keyword(node, "persistent") if isinstance(node, cst.Call) else None
    return _hook_for(edit, index, persistent is not None and render(persistent).strip() == "False")


def recompute_hook(ctx: RuleContext, cls, node: cst.CSTNode) -> str:
    """The hook this fix would compute the value of ``node`` (a plain attribute's assignment
    in ``__init__``) in once ML007's fix registered it as a non-persistent buffer: the hook
    whose refusal by the tree (:func:`metalint.fix.apply.hook_refusal`) refuses ML007's fix."""
    edit = ClassEdit(ctx, cls)
    try:
        index = edit.locate(node)[0]
    except Unfixable as exc:
        helper = helper_of(edit.cls, node)
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


def _in_block(edit: ClassEdit, body, line, path, attr: str, prelude, index: int, covered=()):
    """The hook's code for a buffer registered inside an ``if``: guarded by the buffer being
    there (exactly when the block ran), with the locals it was computed from (``prelude``)
    computed again under the guard, and the other buffers the block registers from the locals
    ``covered`` (``rows, cols = torch.triu_indices(n, n, 1)``, both registered) copied in the
    same ``with``."""
    if not prelude:
        return guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
    siblings = _siblings(edit, line, path, attr, covered, index)
    if siblings:
        body = body.with_changes(body=body.body.with_changes(body=[*body.body.body, *siblings]))
    node = guarded(registered(edit.cls, edit.ctx.qualify, attr, "buffer"), body)
    return node.with_changes(body=node.body.with_changes(body=[*prelude, body]))


def _later_registrations(edit: ClassEdit, line, path, attr: str):
    """``(other, local)`` for each other buffer registered later in the block of ``line``
    straight from a local that no statement in between mentions (nothing changes it there)."""
    at = next((k for k, n in enumerate(path) if n is line), 0)
    if at > 0 and isinstance(path[at - 1], cst.IndentedBlock):
        block = path[at - 1].body
    else:
        block = edit.init_body
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


def _siblings(edit: ClassEdit, line, path, attr: str, covered, index: int) -> list:
    """``self.<b>.copy_(<local>)`` for each other buffer registered later in the block of
    ``line`` straight from a local the hook's copied statements compute as ``__init__`` has it
    there (``covered``: :func:`recompute_locals` was asked for them; a local merely bound by
    those statements may be converted later by one not copied: nnAudio's ``iSTFT`` unpacks
    ``kernel_sin, kernel_cos`` and converts each with its own ``torch.tensor(..)`` line), with
    nothing after its registration writing it: it is re-created by the same copy."""
    out = []
    for s, other, local in _later_registrations(edit, line, path, attr):
        if local not in covered:
            continue
        if edit.used_after(other, index, writes_only=True) or any(
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


def _drawn_once(ctx, edit: ClassEdit, line, index, path, node, attr, hook) -> Rewrite | None:
    """A random buffer made by one factory (``scale * torch.randn((2, n))``, vista3d's and
    SAM's positional Gaussian matrix) is registered from ``torch.empty(shape)`` and drawn once,
    in the hook (``self.x.normal_().mul_(scale)``: the same draws and rounding, as ML001's fix
    does for parameters): eager values stay identical when nothing after it in ``__init__``
    draws. None when its shape is not derived statically (the value is then drawn twice)."""
    try:
        value = Value(node.args[1].value, ctx)
    except Unfixable:
        return None
    if not value.random:
        return None
    names = torch_spelling(ctx)
    empty, shape = empty_of(value, names[0])
    arg = node.args[1]
    new_line = line.deep_replace(arg, arg.with_changes(value=empty))
    body = hook_body(value, f"self.{attr}", names, lambda e: edit.store_names(e, line, index))
    if edit.conditional(path, index):
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
