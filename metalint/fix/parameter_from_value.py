"""ML001 parameter-from-value: the LayerScale fix (dinov2 PR #476), done by a tool.

``self.gamma = nn.Parameter(init_values * torch.ones(dim))`` becomes::

    self.init_values = init_values
    self.gamma = nn.Parameter(torch.empty(dim))
    ...
    self.reset_parameters()          # last statement of __init__

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init_values)

The shape comes from the one tensor factory in the value (``torch.ones(dim)``,
``torch.full((a, b), v)``, ``torch.tensor([1.0, 2.0])`` -> ``(2,)``); without one, nothing is
guessed: the finding is not fixable. Values the hook needs are stored on ``self``.

Safety (eager construction under the same seed gives the same tensors):
- constants (``v * torch.ones``, ``torch.full``, ``torch.zeros``, literals) are exact;
- ``torch.randn(s) * k`` becomes ``X.normal_().mul_(k)``: the same draws and the same rounding
  (``nn.init.normal_(X, std=k)`` computes ``0 + k * z`` and differs in the last bit for small
  tensors, measured); it is exact only when nothing after the statement in ``__init__`` draws
  random numbers, otherwise the fix is unsafe;
- ``torch.empty`` gets the factory's own ``dtype=``/``device=``/``**kwargs`` and nothing else:
  no signature changes (under ``with torch.device("meta")`` a factory without a device lands on
  meta; adding ``device``/``dtype`` arguments is ML012's fix);
- calling an existing ``reset_parameters()`` that ``__init__`` did not call is unsafe;
- when the rewrite is unsafe or refused for what follows the value in ``__init__``, the value
  stays where it is and a ``reset_parameters()`` that ``__init__`` does not call re-creates it
  for the protocol (:func:`plan`): eager construction is unchanged, so that is safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    expr,
    fill,
    guarded,
    names_in,
    path_to,
    render,
    replaced,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import (
    mentions_none,
    reads_metadata_only,
    sets_metadata,
    statements_after,
    touches,
    uses,
)
from metalint.fix.init_statements import init_only, take
from metalint.fix.move_init import (
    init_in_branch,
    move_own_in_block,
    overwrites,
)
from metalint.fix.recompute import (
    Drawn,
    drawn_tail,
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
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import local_writes
from metalint.vocabulary import (
    FACTORY_DRAWS,
    FILL_FACTORIES,
    PARAMETER_CLASSES,
    RESET_HOOK,
)

HOOK = RESET_HOOK


def _parameter(
    ctx: RuleContext, finding: Finding, path, cls=None, after_return: bool = False
) -> tuple[str, cst.Arg, str | None]:
    """(attribute, the ``data`` argument of its ``nn.Parameter(...)``, the guard the hook
    needs when the parameter may be ``None`` or is made in an ``if``), for the parameter the
    rule matched (``finding.site``)."""
    node, pcall = finding.node, finding.site.call
    if pcall is None:
        raise Unfixable("no `nn.Parameter(...)` call found")
    data_arg = next((a for a in pcall.args if a.keyword is None or a.keyword.value == "data"), None)
    if data_arg is None:
        raise Unfixable("`nn.Parameter` without data")
    attr, holder = finding.site.attr, finding.site.holder
    if holder is None:
        raise Unfixable("the parameter's attribute name is not known")
    guard = None
    if getattr(holder, "value", None) is not pcall:
        guard = _wrapped_guard(ctx, cls, attr, holder, finding.site)
    if any(isinstance(n, cst.If) for n in path) or after_return:
        guard = f"getattr(self, {attr!r}, None) is not None"
        if cls is not None and _assigned_otherwise(cls, attr, node):
            # ``self.q_scale = self.k_scale = 1`` before ``if qk_norm: self.q_scale =
            # nn.Parameter(...)`` (x-transformers' Attention): there whatever the branch
            guard = registered(cls, ctx.qualify, attr, "parameter")
    return attr, data_arg, guard


def _wrapped_guard(ctx: RuleContext, cls, attr: str, holder, site) -> str | None:
    """The guard of a parameter whose call (``site.call``) ``holder`` holds inside a
    conditional expression (``nn.Parameter(..) if cond else None``) or behind
    ``.requires_grad_(..)`` (``site.wrappers``); raises :class:`Unfixable` when it is built
    inside a larger expression."""
    guard = None
    pcall = site.call
    inner = path_between(holder, pcall)
    # ``nn.Parameter(grid).requires_grad_(False)``: the same parameter
    wrappers = {id(n) for w in site.wrappers for n in (w, w.func)}
    if inner is None or not all(
        isinstance(n, (cst.IfExp, cst.Arg, cst.Assign, cst.AnnAssign))
        or n is pcall
        or id(n) in wrappers
        for n in inner
    ):
        raise Unfixable("the parameter is built inside a larger expression")
    if any(isinstance(n, cst.IfExp) for n in inner):
        guard = f"self.{attr} is not None"
    if not all(_none_otherwise(n, pcall) for n in inner if isinstance(n, cst.IfExp)):
        # ``nn.Parameter(torch.ones(d)) if mult_bias else 1.`` (x-transformers' GLU): the
        # attribute is a number when it is no parameter
        guard = registered(cls, ctx.qualify, attr, "parameter")
    return guard


def _none_otherwise(e: cst.IfExp, pcall: cst.Call) -> bool:
    """Is the branch of ``e`` that does not build the parameter ``None``?"""
    other = e.orelse if any(n is pcall for n in walk_code(e.body)) else e.body
    return isinstance(other, cst.Name) and other.value == "None"


def _assigned_otherwise(cls, attr: str, node: cst.CSTNode) -> bool:
    """Does construction give ``self.<attr>`` a value other than ``None`` elsewhere than in
    ``node``?"""
    for m in cls.reachable("__init__") if cls.init is not None else []:
        for a in m.assigns:
            if a.target != f"self.{attr}" or a.node is node or path_to(a.node, node):
                continue
            if not (isinstance(a.value, cst.Name) and a.value.value == "None"):
                return True
    return False


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    """The dinov2 rewrite (``torch.empty`` + the hook called at the end of ``__init__``); when
    that is unsafe or refused because of what ``__init__`` does after the value (draws of
    later children, an existing ``reset_parameters()`` it does not call), the value kept where
    it is and re-created by a ``reset_parameters()`` that ``__init__`` does not call
    (:func:`_kept`), when that is possible. (No exception is kept in a local: with its
    traceback it would hold the syntax tree in a reference cycle.)"""
    if _list_of_parameters(finding):
        return _parameter_list(ctx, cls, finding)
    _refuse_written_local(ctx, finding)
    try:
        rewrite = _plan(ctx, cls, finding, ClassEdit(ctx, cls))
    except Unfixable:
        kept = _kept(ctx, cls, finding)
        if kept is None:
            raise
        return kept
    if rewrite.applicability is Applicability.SAFE:
        return rewrite
    kept = _kept(ctx, cls, finding)
    return rewrite if kept is None else kept


def _refuse_written_local(ctx: RuleContext, finding: Finding) -> None:
    """``w = torch.empty(n, d)``, ``nn.init.kaiming_uniform_(w)``, ``self.w = nn.Parameter(w)``:
    the value is made by the in-place init of the local, which the hook would have to replay
    on the parameter; not rewritten."""
    site = finding.site
    call = site.call
    data = call.args[0].value if call is not None and call.args else None
    if type(data) is cst.Name and local_writes(data.value, ctx.qualify, site.method):
        raise Unfixable(
            f"its value is the local `{data.value}`, written in place before it is wrapped: "
            f"move that init onto `self.{site.attr}` in `reset_parameters()`"
        )


#: factories of a parameter in a list, and the in-place init that draws or sets the same values
LIST_INITS = {
    **FACTORY_DRAWS,
    **{f: f"{k}_" for f, k in FILL_FACTORIES.items() if f in ("torch.zeros", "torch.ones")},
}


def _list_of_parameters(finding: Finding) -> bool:
    """Did the rule match a ``ParameterList`` of a list or a comprehension, set by a plain
    ``self.ws = nn.ParameterList(...)`` (:func:`_parameter_list` rewrites those)?"""
    site = finding.site
    return type(site.items) in (cst.List, cst.ListComp) and site.form == "assign"


def _parameter_list(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    """``self.ws = nn.ParameterList([nn.Parameter(torch.randn(d, d)) for _ in range(n)])``:
    each element made with ``torch.empty`` of the same arguments and set in
    ``reset_parameters()`` by the init that draws the same numbers (``normal_`` for
    ``randn``: bit-identical, as for a single parameter), in order: a loop over the list for a
    comprehension, one call per element for a list. Only plain factories (their size and
    ``dtype=``/``device=``), every element one of them."""
    edit = ClassEdit(ctx, cls)
    node = finding.node
    items = finding.site.items
    attr = finding.site.attr
    index, line, _path = edit.locate(node)
    torch_name, nn_name = torch_spelling(ctx)
    elements = [items.elt] if isinstance(items, cst.ListComp) else [e.value for e in items.elements]
    inits: list[str] = []
    new_line = line
    for e in elements:
        if not (isinstance(e, cst.Call) and ctx.qualify(e.func) in PARAMETER_CLASSES):
            raise Unfixable("an element of the list is not an `nn.Parameter(...)`")
        data = e.args[0].value if e.args and e.args[0].keyword is None else None
        f = ctx.qualify(data.func) if isinstance(data, cst.Call) else None
        if f not in LIST_INITS or any(
            a.keyword is not None and a.keyword.value not in ("dtype", "device") for a in data.args
        ):
            raise Unfixable("an element's value is not a plain factory of its size")
        if any(a.star for a in data.args):
            raise Unfixable("an element's size is unpacked (`*shape`)")
        inits.append(LIST_INITS[f])
        new_line = new_line.deep_replace(
            _find_same(new_line, data), data.with_changes(func=expr(f"{torch_name}.empty"))
        )
    if isinstance(items, cst.ListComp):
        body = [stmt(f"for p in self.{attr}:\n    {nn_name}.init.{inits[0]}(p)\n")]
    else:
        body = [stmt(f"{nn_name}.init.{k}(self.{attr}[{i}])") for i, k in enumerate(inits)]
    if edit.used_after(attr, index, writes_only=True, tensor=True):
        raise Unfixable(f"`self.{attr}` is written later in `__init__` (line order matters)")
    edit.replace[id(line)] = (line, [new_line])
    random = any(k in ("normal_", "uniform_") for k in inits)
    edit.use_hook(HOOK, index, body, random=random)
    return edit.rewrite(
        f"Create the parameters of `{attr}` with `torch.empty` and set their values in "
        "`reset_parameters()`"
    )


def _find_same(root: cst.CSTNode, target: cst.CSTNode) -> cst.CSTNode:
    """The node of ``root`` that is ``target`` or, after an earlier replacement, equal to it."""
    for n in walk_code(root):
        if n is target:
            return n
    for n in walk_code(root):
        if type(n) is type(target) and n.deep_equals(target):
            return n
    raise Unfixable("the element was not found again")


def _kept(ctx: RuleContext, cls, finding: Finding) -> Rewrite | None:
    """The safe rewrite that keeps the value in ``__init__``, or None."""
    try:
        kept = _plan(ctx, cls, finding, ClassEdit(ctx, cls, keep_value=True))
    except Unfixable:
        return None
    return kept if kept.applicability is Applicability.SAFE else None


def _one_law(ctx: RuleContext, edit: ClassEdit, attr: str, node, random: bool) -> None:
    """:func:`one_value`; unsafe where another path draws the parameter too (in another
    shape; ``random``: the value draws): the hook, which runs on that path as well, draws it
    a second time there."""
    shared = one_value(edit.cls, ctx.qualify, attr, node)
    if shared and random:
        edit.unsafe.append(
            "another path of `__init__` draws it too, in another shape: the hook draws it a "
            "second time there"
        )


@dataclass(frozen=True)
class _At:
    """The parameter's statement in ``__init__`` (top-level ``index``, ``line``, the ``path``
    to it), its attribute, its value (``data``) and the guard its hook needs (:func:`_parameter`)."""

    index: int
    line: cst.CSTNode
    path: list
    attr: str
    data: cst.BaseExpression
    guard: str | None


def _plan(ctx: RuleContext, cls, finding: Finding, edit: ClassEdit) -> Rewrite:
    """One rewrite; with ``edit.keep_value``, the value stays in ``__init__`` (eager
    construction runs exactly as before: LinearAttention's ``self.mem_kv = nn.Parameter(
    torch.randn(...))`` of denoising-diffusion-pytorch, drawn before the convolutions made
    after it) and a ``reset_parameters()`` that ``__init__`` does not call re-creates it for
    the protocol. Code after it may only read its shape or dtype, as for the plain rewrite."""
    try:
        index, line, path = edit.locate(finding.node)
    except Unfixable as exc:
        helper = own_helper(cls, finding.site.method)
        if helper is None or edit.keep_value:
            raise
        return _plan_in_helper(ctx, edit, finding, helper, str(exc))
    attr, data_arg, guard = _parameter(ctx, finding, path, cls, edit.after_return(index))
    at = _At(index, line, path, attr, data_arg.value, guard)
    _one_law(ctx, edit, attr, finding.node, finding.site.random)
    done, branch = _later_use(ctx, edit, at)
    if done is not None:
        return done
    try:
        value = Value(at.data, ctx)
    except Unfixable as exc:
        if branch is not None:
            raise Unfixable(f"`self.{attr}` is initialised in place later in an `if`: {exc}")
        return _recompute(ctx, edit, at, torch_spelling(ctx), str(exc))
    return _created_empty(ctx, edit, at, value, branch)


def _later_use(ctx: RuleContext, edit: ClassEdit, at: _At) -> tuple[Rewrite | None, int | None]:
    """What code after the value in ``__init__`` does with it: (the rewrite for a value
    re-initialised in place later, or None; the top-level statement of an ``if`` that first
    sets it on some paths only, which the hook runs after re-creating the value, or None).
    Raises :class:`Unfixable` when later code reads it."""
    attr, index = at.attr, at.index
    keep = edit.keep_value
    later = edit.used_after(attr, index, tensor=True)
    tail = edit.block_tail(at.line)
    # first set on some paths only, by an `if`: the hook re-creates the value, then runs it
    branch = init_in_branch(ctx, edit, attr, index) if later and not keep else None
    later = later if branch is None else None
    if keep:
        _kept_unused_later(ctx, edit, at, later)
        tail = []
    if later and not edit.used_after(attr, index, writes_only=True, tensor=True):
        # only read later: the read sees the value `__init__` makes, which a hook would not
        raise Unfixable(_read_later(ctx, edit, attr, index, later))
    if later:
        return overwritten_later(ctx, edit, attr, index, later), branch
    return _used_in_block(ctx, edit, attr, index, tail), branch


def _created_empty(
    ctx: RuleContext, edit: ClassEdit, at: _At, value: Value, branch: int | None
) -> Rewrite:
    """The value created with ``torch.empty`` of its shape and set by the hook (or, with
    ``edit.keep_value``, kept and re-created by a hook ``__init__`` does not call)."""
    keep = edit.keep_value
    names = torch_spelling(ctx)
    empty, shape = empty_of(value, names[0])
    if not keep:
        edit.replace[id(at.line)] = (at.line, [replaced(at.line, at.data, empty)])

    # the hook: re-create the value
    body = hook_body(
        value, f"self.{at.attr}", names, lambda e: edit.store_names(e, at.line, at.index)
    )
    if at.guard:
        body = guarded(at.guard, body)
    if keep:
        edit.use_hook(HOOK, at.index, [body])
        return edit.rewrite(_kept_message(at.attr, HOOK))
    hook = edit.choose_hook(at.index)
    if value.random and not all(draws(s, ctx) is Draws.NEVER for s in edit.block_tail(at.line)):
        edit.unsafe.append(
            "the random value is now drawn at the end of `__init__`, after other random draws, "
            "so eager values differ under the same seed (same distribution)"
        )
    if branch is None:
        edit.use_hook(hook, at.index, [body], random=value.random)
        return edit.rewrite(
            f"Create `{at.attr}` with `torch.empty({shape})` and set its value in `{hook}()`"
        )
    moved, random = _branch_moved(ctx, edit, at.index, branch, value.random)
    edit.use_hook(hook, branch, [body, *moved], random=random)
    return edit.rewrite(
        f"Create `{at.attr}` with `torch.empty({shape})`, set its value in `{hook}()` and move "
        "the in-place init that follows it (on some paths, or changing its values) after it"
    )


def _branch_moved(ctx: RuleContext, edit: ClassEdit, index: int, j: int, random: bool):
    """The ``if`` at top-level statement ``j`` of ``__init__`` (:func:`init_in_branch`), moved
    into the hook after the value: the same inits in the same order; with whether the hook
    then draws. The hook is called after ``j``; a random value drawn there, after draws
    between its statement and ``j``, is an unsafe fix."""
    between = edit.init_body[index + 1 : j]
    if random and not all(draws(s, ctx) is Draws.NEVER for s in between):
        edit.unsafe.append(
            "the random value is now drawn after the statements that follow it in `__init__`, "
            "after other random draws, so eager values differ under the same seed"
        )
    moved = take(edit, edit.init_body, [j])
    return moved, random or draws(edit.init_body[j], ctx) is not Draws.NEVER


def _used_in_block(ctx: RuleContext, edit: ClassEdit, attr: str, index: int, tail):
    """ML003's rewrite when a statement later in the value's block (``tail``) re-initialises
    all of it in place (the value is dead); None when none uses more than its metadata.
    Raises :class:`Unfixable` when one uses it otherwise."""
    for s in tail:
        if touches(s, attr, False, edit.memo()) and not (
            sets_metadata(s, attr) or reads_metadata_only(s, attr)
        ):
            if init_only(s, ctx) and overwrites(s, attr, ctx):
                return move_own_in_block(
                    ctx,
                    edit,
                    s,
                    index,
                    f"`{attr}` is re-initialised in place later in its block: move",
                )
            raise Unfixable(f"`self.{attr}` is used later in its block (line order matters)")
    return None


def _kept_unused_later(ctx: RuleContext, edit: ClassEdit, at: _At, later) -> None:
    """Raise :class:`Unfixable` when code after a kept value uses more than its shape: what it
    computes from the value (later_init's ``self.twice = nn.Parameter(self.gamma.detach() *
    2)``) would still be lost (the class would fail the probe), and what it writes the hook
    would not replay."""
    attr, index = at.attr, at.index
    if later:
        raise Unfixable(_read_later(ctx, edit, attr, index, later))
    for s in edit.block_tail(at.line):
        if touches(s, attr, False, edit.memo()) and not (
            sets_metadata(s, attr) or reads_metadata_only(s, attr)
        ):
            raise Unfixable(f"`self.{attr}` is used later in its block (line order matters)")


def _kept_message(attr: str, hook: str) -> str:
    return (
        f"Keep `{attr}`'s value in `__init__` (eager construction unchanged) and re-create it in "
        f"a `{hook}()` for the protocol (not called by `__init__`)"
    )


def _read_later(ctx: RuleContext, edit: ClassEdit, attr: str, index: int, why: str) -> str:
    """Why a value that code after it in ``__init__`` reads stays unfixed: ``why``, naming
    the call it is handed to when that call may also write it (speechbrain's complex and
    quaternion convolutions: ``affect_conv_init(self.real_weight, ...)``, a function of
    another file that sets ``.data``)."""
    for s in edit.init_body[index + 1 :]:
        for n in walk_code(s):
            if not isinstance(n, cst.Call):
                continue
            q = ctx.qualify(n.func) or ""
            if q.startswith("torch.") and not q.endswith("_"):
                continue
            for a in n.args:
                if dotted(a.value) in (f"self.{attr}", f"self.{attr}.data"):
                    return (
                        f"`self.{attr}` is handed to `{render(n.func).strip()}()` later in "
                        "`__init__`, which may set its value (line order matters)"
                    )
    return why


def _plan_in_helper(
    ctx: RuleContext, edit: ClassEdit, finding: Finding, helper, why: str
) -> Rewrite:
    """The parameter is created in a private method that only ``__init__`` calls, once, as a
    statement (esm1's ``_init_submodules_esm1()``, called in an ``else``:
    ``self.embed_out = nn.Parameter(torch.zeros((self.alphabet_size, self.args.embed_dim)))``).
    The method creates it with ``torch.empty`` and the class's ``reset_parameters()``, called at
    the end of ``__init__``, sets the constant, where the parameter exists. Only deterministic
    values whose hook reads no name (``zeros``, ``ones``, a literal fill): nothing then draws
    at another point of construction, so eager values stay identical (safe)."""
    name = helper.name
    node = finding.node
    call_line, call_index, call_path, line, path = helper_statement(edit, node, helper, why)
    memo = edit.memo()
    attr, data_arg, guard = _parameter(ctx, finding, path)
    one_value(edit.cls, ctx.qualify, attr, node)
    value = Value(data_arg.value, ctx)
    if value.random:
        raise Unfixable(f"{why}: a random value would be drawn at another point of construction")
    # nothing after the creation (the rest of the helper, then of __init__) touches it
    tail = statements_after(path) + edit.block_tail(call_line)
    for x in tail:
        called = uses(x, memo)[2]
        if touches(x, attr, False, memo) or any(
            touches(m.node.body, attr, False, memo)
            for c in called
            for m in edit.cls.reachable(c)
            if m.name != "__init__"
        ):
            raise Unfixable(
                f"{why}: `self.{attr}` is used after it is created (line order matters)"
            )
    later = edit.used_after(attr, call_index)
    if later:
        raise Unfixable(f"{why}: {later}")

    def kept(e: cst.BaseExpression) -> cst.BaseExpression:
        if any(True for _ in names_in(e)):
            raise Unfixable(f"{why}: the value reads names of `{name}()`")
        return e

    names = torch_spelling(ctx)
    empty, shape = empty_of(value, names[0])
    body = hook_body(value, f"self.{attr}", names, kept)
    if guard or helper_conditional(edit, helper, path, call_path, call_index):
        # made only on some paths (esm1b makes no `embed_out`; `embed_out_bias` may be None)
        body = guarded(f"self._parameters.get({attr!r}) is not None", body)
    edit.replace_in_method(helper.node, line, [line.deep_replace(data_arg.value, empty)])
    hook = edit.choose_hook(call_index)
    edit.use_hook(hook, call_index, [body])
    return edit.rewrite(
        f"Create `{attr}` with `torch.empty({shape})` in `{name}()` and set its value in `{hook}()`"
    )


def path_between(root: cst.CSTNode, target: cst.CSTNode):

    return path_to(root, target)


def _sprawls(full: cst.BaseExpression, data: cst.BaseExpression) -> bool:
    """Is ``full`` (``data`` with its locals inlined) too long to read as one expression?"""
    n = len(render(full))
    return n > 160 and n > 4 * len(render(data))


def _reads_kept(edit: ClassEdit, attr: str, index: int, code, why: str) -> None:
    """Raise :class:`Unfixable` when the recomputed value reads an attribute the hook would
    find changed: written later in ``__init__``, or the attribute this statement replaces
    (torchlibrosa's ``self.melW = nn.Parameter(torch.Tensor(self.melW))``: the hook would read
    the parameter itself, not the array ``__init__`` held there)."""
    for a in sorted(set().union(*(uses(c)[1] for c in code))):
        if a == attr:
            raise Unfixable(f"{why}; the value reads `self.{a}`, which this statement replaces")
        if edit.used_after(a, index, writes_only=True):
            raise Unfixable(f"{why}; the value reads `self.{a}`, which changes later")


def _recompute(ctx: RuleContext, edit: ClassEdit, at: _At, names, why: str) -> Rewrite:
    """No shape can be derived (``torch.tensor(spatial_sigma[0])``, a local computed from
    factories, ``torch.arange(n).float()``): the creation stays as it is (on meta it costs
    nothing and has the right shape and dtype) and the hook computes the same value again and
    copies it in, as ML002's fix does for buffers. Exact for a value that draws no random
    numbers; a random one would be drawn a second time (unsafe). A value computed through a
    local assigned more than once (gpytorch's variational distributions: ``mean_init =
    torch.zeros(n)``, then ``mean_init = mean_init.repeat(*batch_shape, 1)``) is computed by
    copies of the statements that compute its locals, in order, as ML002's fix does
    (:func:`recompute_locals`); inside an ``if`` (pypots' ``TKANCell``: ``bias =
    torch.zeros(3 * h)``, ``bias[h : 2 * h] = 1.0`` under ``if use_bias:``), under the guard
    of the parameter being there, which holds exactly where that block ran."""
    keep = edit.keep_value
    hook = HOOK if keep else edit.choose_hook(at.index)
    done = _recomputed(edit, at, hook, why)
    if isinstance(done, Rewrite):
        return done
    full, prelude = done
    code = [full, *prelude]
    if any(mentions_none(c) for c in code):
        raise Unfixable(why)
    _reads_kept(edit, at.attr, at.index, code, why)
    value = prelude.pop() if prelude else edit.store_names(full, at.line, at.index)
    body = fill(f"with {names[0]}.no_grad():\n    self.{at.attr}.copy_(__v__)", v=value)
    if at.guard:
        inner = [*prelude, body] if _in_if(at) else [body]
        body = guarded(at.guard, body)
        body = body.with_changes(body=body.body.with_changes(body=inner))
        prelude = [] if len(inner) > 1 else prelude
    if keep:
        edit.use_hook(hook, at.index, [*prelude, body])
        return edit.rewrite(_kept_message(at.attr, hook))
    if not all(draws(c, ctx) is Draws.NEVER for c in code):
        edit.unsafe.append(
            "the value may draw random numbers: it is drawn a second time in the hook, so "
            "eager values differ"
        )
    edit.use_hook(hook, at.index, [*prelude, body])
    return edit.rewrite(f"Compute `{at.attr}` again in `{hook}()` and copy it in")


def _in_if(at: _At) -> bool:
    return any(isinstance(n, cst.If) for n in at.path)


def _recomputed(edit: ClassEdit, at: _At, hook: str, why: str):
    """(the value for the hook, the statements computing its locals before it) for
    :func:`_recompute`: the value with its locals inlined, else (when they cannot be, or it
    sprawls, :func:`_sprawls`) the value after copies of those statements; or the rewrite
    drawing a drawn tail once (:func:`drawn_tail`)."""
    data, index = at.data, at.index
    try:
        full = inline_locals(edit, data)
    except Unfixable as exc:
        before = preceding(edit, at.path, index)
        try:
            prelude = recompute_locals(edit, data, index, hook, str(exc), before)
        except Drawn as drawn:
            if edit.keep_value:
                raise
            return edit.rewrite(drawn_tail(edit, drawn.index, hook, str(exc)))
        if _in_if(at) and not at.guard:
            raise
        return data, prelude
    if _sprawls(full, data) and not _in_if(at):
        # the locals written out in one expression, some twice (N-BEATS' ``grid`` in
        # both its cosine and its sine): the statements computing them are copied, as a
        # maintainer would write the hook
        try:
            prelude = recompute_locals(
                edit, data, index, hook, why, preceding(edit, at.path, index)
            )
        except Unfixable:
            return full, []
        return data, prelude
    return full, []
