"""ML007 plain-tensor-attribute: register the tensor as a non-persistent buffer.

``self.mask = torch.ones(n)`` becomes ``self.register_buffer("mask", torch.ones(n),
persistent=False)``: the same value eagerly, no new checkpoint key (``persistent=False``), and
``to_empty()``/``.to()`` now move it. The value it computes is then a buffer computed in
``__init__``, which ML002 reports and its fix moves into a hook (the fixes compose over rounds).

Safe when every other assignment of the attribute in the class gives it a tensor or ``None``
(``set_timesteps()`` assigning a new schedule, ``self.t = self.t.to(device)``), or runs in
another branch of the same ``if`` in ``__init__`` (``if alpha is None: self.alpha = None``
``else: self.alpha = torch.as_tensor(alpha)``): a buffer takes those. Unsafe when another
assignment may give it something else (assigning a non-tensor to a buffer raises), or runs in a
method that construction calls. Not fixable when ``__init__`` assigns the attribute before the
tensor (``register_buffer`` raises on an existing attribute), nor before ``super().__init__()``
(no buffers yet) or before a second base ``__init__`` (``Module.__init__`` run again empties
the buffers), nor when ML002's fix could not then compute the value in a hook
(:func:`metalint.fix.buffer_from_value.refusal`: a buffer no hook re-creates is uninitialised
after ``to_empty()``, and the class would not pass the probe), nor when the checked tree would
refuse that fix's hook (a subclass defining its own ``reset_parameters()``, a base class outside
the checked files: :func:`metalint.fix.apply.hook_refusal`, the answer the fixes putting code in
a hook get). The fix names that hook (``then_hook``) and yields to a fix of a base or subclass
that puts code in one in the same round, so the answer sees it (monai DiNTS: ``TopologySearch``
gets its own ``reset_parameters()`` in the run that would register its base's ``arch_code_a``).

When the attribute alone is refused and it is one of the tensors an ``if`` of ``__init__``
computes together (monai ``Scheduler``: ``self.betas, self.alphas, self.alphas_cumprod =
noise_sched``, else ``self.alphas = 1.0 - self.betas``, ``self.alphas_cumprod =
torch.cumprod(self.alphas, dim=0)``: ``alphas_cumprod`` alone reads ``self.alphas``, which
``to_empty()`` leaves on meta), all of them become buffers (:func:`_block`): registered as
``None`` before the ``if``, which is kept, and re-computed by a copy of the ``if`` on locals in
the hook. Unsafe: a buffer takes only tensors, and their type is not known here.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    init_param,
    names_in,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import uses
from metalint.fix.recompute import draws_or_builds, recompute_locals
from metalint.fix.recompute_hook import helper_effects, recompute_hook, refusal
from metalint.fix.values import helper_statement, own_helper
from metalint.static.model import construction
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import is_none, walk_code
from metalint.static.tensor_kind import binds, class_tensors
from metalint.vocabulary import BUFFER_HOOK


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    # the attribute is one of the tensors an ``if`` of ``__init__`` computes together (monai
    # ``Scheduler``: ``self.betas, self.alphas, self.alphas_cumprod = noise_sched``, else
    # ``self.betas = noise_sched``, ``self.alphas = 1.0 - self.betas``, ...): all of them
    # become buffers at once. First when the ``if`` sets it in several branches with others
    # (one registered alone would stay a plain attribute in the other branch); else when the
    # attribute alone is refused
    edit = ClassEdit(ctx, cls)
    found = edit.path_of(finding.node)
    index = found[0] if found is not None else -1
    block = index >= 0 and type(edit.init_body[index]) is cst.If
    if block and _set_with_others(edit, index, finding.site.attr):
        try:
            return _block(ctx, edit, cls, index, "")
        except Unfixable:
            edit = ClassEdit(ctx, cls)
    try:
        return _one(ctx, cls, finding)
    except Unfixable as exc:
        if not block:
            raise
        return _block(ctx, ClassEdit(ctx, cls), cls, index, str(exc))


def _set_with_others(edit: ClassEdit, index: int, attr: str) -> bool:
    """Does the ``if`` at ``index`` set ``attr`` (the attribute the rule matched) more than
    once (in several branches), and other attributes too?"""
    sets = [
        a.target
        for a in edit.init.assigns
        if a.target.count(".") == 1 and edit.top_index_of(a.node) == index
    ]
    return len(set(sets)) > 1 and sets.count(f"self.{attr}") > 1


_NUMBER_TYPES = frozenset({"int", "float", "bool", "Optional[int]", "Optional[float]"})


def _number_argument(edit: ClassEdit, value: cst.BaseExpression) -> None:
    """Raise :class:`Unfixable` when ``value`` is an argument of ``__init__`` that its signature
    declares a number (compressai's ``GaussianConditional(scale_bound: float = 0.11)``, which
    ``__init__`` replaces by a tensor element on one path, kept on ``self`` by an earlier fix):
    ``register_buffer`` raises for a number, so eager construction would break."""
    p = init_param(edit.init, value.value) if type(value) is cst.Name else None
    if p is None:
        return
    declared = p.annotation is not None and render(p.annotation.annotation).strip() in _NUMBER_TYPES
    default = p.default.expression if type(p.default) is cst.UnaryOperation else p.default
    if declared or type(default) in (cst.Integer, cst.Float):
        raise Unfixable(
            f"`{value.value}` is declared a number in the signature: a buffer would refuse it"
        )


def _one(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    node, site = finding.node, finding.site
    helper = None
    try:
        index, line, path = edit.locate(node)
    except Unfixable as exc:
        # set in a private method that ``__init__`` calls once (speechbrain ``SincConv.
        # _init_sinc_conv()``'s Hamming window ``self.window_``): registered there, and ML002's
        # fix then computes it in a hook (``refusal`` asks it first)
        helper = own_helper(cls, site.method)
        if helper is None:
            raise
        index, line = helper_statement(edit, node, helper, str(exc))[1:4:2]
    if not site.alone:
        raise Unfixable("the tensor is assigned with several targets")
    attr = site.attr
    target = f"self.{attr}"
    if not site.own_line:
        raise Unfixable("the assignment shares its line with other statements")
    _before_super(edit, index)
    _number_argument(edit, site.value)
    why = refusal(ctx, cls, node, attr, site.value, site.method)
    if why:
        # a buffer no hook re-creates is uninitialised after ``to_empty()``: no better than a
        # plain attribute left on meta, and the class would not pass the probe
        raise Unfixable(f"no hook could re-create the buffer's value: {why}")
    value = render(site.value, ctx.module)
    new_line = line.with_changes(
        body=[stmt(f'self.register_buffer("{attr}", {value}, persistent=False)').body[0]]
    )
    if helper is None:
        edit.replace[id(line)] = (line, [new_line])
    else:
        edit.replace_in_method(helper.node, line, [new_line])
    for why in _other_assignments(edit, node, target, index, helper):
        edit.unsafe.append(why)
    rewrite = edit.rewrite(
        f'Register `{attr}` with `self.register_buffer("{attr}", ..., persistent=False)`'
    )
    # ML002's fix computes the value in this hook next round: the tree refuses this fix when
    # it would refuse that one (a subclass defining its own hook: monai ``TopologySearch``)
    rewrite.then_hook = recompute_hook(ctx, cls, node, site.method)
    return rewrite


def _other_assignments(
    edit: ClassEdit, node, target: str, index: int, helper=None
) -> Iterator[str]:
    """Why another assignment of ``target`` makes the rewrite unsafe (one reason each);
    raises :class:`Unfixable` when ``__init__`` assigns it before ``node`` (before the call of
    ``helper``, the method holding ``node``, at top-level statement ``index``, or earlier in
    that method)."""
    ctx, cls = edit.ctx, edit.cls
    attr = target[5:]
    order = {id(n): i for i, n in enumerate(walk_code(edit.init.node))}
    at = node if helper is None else edit.init_body[index]
    inside = {id(n): i for i, n in enumerate(walk_code(helper.node))} if helper else {}
    built = {m.name for m in construction(cls)} - {"__init__"}
    for m in cls.methods.values():
        for a in m.assigns:
            if a.node is node or not (a.target == target or a.target.startswith(target + ".")):
                continue
            if helper is not None and m is helper and inside[id(a.node)] < inside[id(node)]:
                raise Unfixable(
                    f"`{m.name}()` sets `self.{attr}` earlier: `register_buffer` refuses an "
                    "existing attribute"
                )
            if m.name == "__init__":
                if helper is None and _exclusive(edit, a.node, node):
                    continue
                if order.get(id(a.node), -1) < order[id(at)]:
                    raise Unfixable(
                        f"`__init__` sets `self.{attr}` earlier: `register_buffer` refuses an "
                        "existing attribute"
                    )
            elif m.name in built and not _called_later(edit, m, attr, index, helper):
                yield f"`{m.name}()`, which construction calls, also assigns `self.{attr}`"
                continue
            if a.target == target and (
                a.augmented or _tensor_or_none(ctx, cls, m, a.value, target)
            ):
                continue
            yield f"`self.{attr}` is assigned elsewhere in the class; a buffer only takes tensors"


def _called_later(edit: ClassEdit, m, attr: str, index: int, helper) -> bool:
    """Does ``__init__`` call method ``m`` (which sets ``self.<attr>``) as a statement? Raises
    :class:`Unfixable` when it does before top-level statement ``index`` (and ``m`` is not
    the ``helper`` holding the assignment rewritten)."""
    calls, _nested = edit.hook_calls(m.name)
    if not calls:
        return False
    if m is not helper and min(calls) < index:
        raise Unfixable(
            f"`__init__` calls `{m.name}()`, which sets `self.{attr}`, earlier: "
            "`register_buffer` refuses an existing attribute"
        )
    return True


def _tensor_or_none(ctx, cls, m, value, target: str) -> bool:
    """``None``, or certainly a tensor (:meth:`ClassTensors.certainly`: an argument annotated
    ``Tensor``, the buffer itself: ``self.t.to(device)``, and what :func:`is_tensor` knows)."""
    return is_none(value) or class_tensors(ctx, cls).certainly(value, m, itself=target)


def _exclusive(edit: ClassEdit, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Do ``a`` and ``b`` sit in different branches of one ``if``/``elif``/``else``?"""
    pa, pb = edit.path_of(a), edit.path_of(b)
    if pa is None or pb is None or pa[0] != pb[0]:
        return False
    path_a, path_b = pa[1], pb[1]
    for i, (x, y) in enumerate(zip(path_a, path_b)):
        if x is not y:
            return False
        if isinstance(x, cst.If) and i + 1 < len(path_a) and i + 1 < len(path_b):
            na, nb = path_a[i + 1], path_b[i + 1]
            if na is not nb and {id(na), id(nb)} <= {id(x.body), id(x.orelse)}:
                return True
    return False


def _block(ctx: RuleContext, edit: ClassEdit, cls, index: int, why: str) -> Rewrite:
    """The ``if`` at ``index`` of ``__init__``, whose branches compute the same plain tensor
    attributes (from each other and from locals), keeps its code: each attribute is first
    registered as a ``None`` non-persistent buffer (assigning to a buffer's name sets the
    buffer), and the hook runs a copy of the ``if`` on locals in place of the attributes, then
    copies each into its buffer. Raises :class:`Unfixable` (``why``, the reason the one
    attribute alone was refused) when the ``if`` does anything else."""
    top = edit.init_body[index]
    group = _group(edit, cls, index, why)
    # the hook's copy of the ``if``: locals in place of the attributes
    attrs = {id(n.attr) for n in walk_code(edit.init.node) if isinstance(n, cst.Attribute)}
    taken = {
        n.value for n in walk_code(edit.init.node) if isinstance(n, cst.Name) and id(n) not in attrs
    }
    local: dict[str, str] = {}
    for attr in group:
        name = attr
        while name in taken or name in local.values():
            name += "_"
        local[attr] = name
    copy = top.visit(_AttrsToLocals(local)).with_changes(leading_lines=())
    hook = edit.choose_hook(index, prefer=(BUFFER_HOOK,))
    bound = binds(copy, ctx.qualify)
    needed = [
        n
        for n in dict.fromkeys(x.value for x in names_in(copy))
        if n not in bound and n in edit.init.local_values
    ]
    prelude: list[cst.BaseStatement] = []
    if needed:
        value = cst.Tuple([cst.Element(cst.Name(n)) for n in needed])
        prelude = recompute_locals(edit, value, index, hook, why)[:-1]
        for s in prelude:
            bound |= binds(s, ctx.qualify)
    copy = edit.store_names(copy, top, index, bound=bound | set(local.values()))
    effects = helper_effects(edit, [*prelude, copy])
    if "host" in effects:
        raise Unfixable(f"{why}; the `if` calls `{effects['host']}()`, which copies to the host")
    if "random" in effects:
        edit.unsafe.append(f"`{effects['random']}()` draws random numbers again in the hook")
    torch_name, _ = torch_spelling(ctx)
    copies = "\n".join(f"    self.{a}.copy_({local[a]})" for a in group)
    body = stmt(f"with {torch_name}.no_grad():\n{copies}\n")
    regs = [stmt(f'self.register_buffer("{a}", None, persistent=False)') for a in group]
    old = edit.replace.get(id(top))
    current = old[1] if old else [top]
    edit.replace[id(top)] = (top, [*current[:-1], *regs, current[-1]])
    edit.use_hook(hook, index, [*prelude, copy, body])
    edit.unsafe.append(
        "the `if` assigns its tensors values of a type not known here; a buffer only takes "
        "tensors (or `None`)"
    )
    names = ", ".join(f"`{a}`" for a in group)
    return edit.rewrite(
        f"Register {names} as non-persistent buffers and re-compute them in `{hook}()`"
    )


def _group(edit: ClassEdit, cls, index: int, why: str) -> list[str]:
    """The attributes the ``if`` at ``index`` sets, in order, when it does nothing else and
    they may all become buffers re-created by a copy of it."""
    top = edit.init_body[index]
    written, _read, calls = uses(top, edit.memo())
    group = [
        a.target[5:]
        for a in edit.init.assigns
        if a.target.count(".") == 1 and edit.top_index_of(a.node) == index
    ]
    group = list(dict.fromkeys(group))
    if calls or draws_or_builds(top, edit) or not group or set(written) != set(group):
        raise Unfixable(why)
    if any(is_none(a.value) for a in edit.init.assigns if edit.top_index_of(a.node) == index):
        raise Unfixable(why)  # ``self.x = None`` in a branch: nothing to copy there
    for attr in group:
        if not edit.plain_tensor(attr):
            raise Unfixable(f"{why}; the `if` also sets `self.{attr}`, which is not a tensor")
        if edit.used_after(attr, index, writes_only=True):
            raise Unfixable(why)
    _before_super(edit, index)
    # set elsewhere in construction: the hook would not re-create what that code leaves
    built = {m.name for m in construction(cls)}
    for m in cls.methods.values():
        for a in m.assigns:
            if a.target.split(".")[1] not in group or m.name not in built:
                continue
            if m.name != "__init__" or edit.top_index_of(a.node) != index:
                raise Unfixable(why)
    return group


def _before_super(edit: ClassEdit, index: int) -> None:
    """``register_buffer`` needs ``Module.__init__`` to have run before statement ``index``."""
    calls = edit.init_call_indices()
    if not calls or calls[0] > index:
        raise Unfixable("the tensor is assigned before `super().__init__()`")
    if calls[-1] > index:
        # ``Module.__init__`` run again empties ``_buffers``: the buffer would be dropped
        raise Unfixable("an `__init__` of a base runs again after the tensor is assigned")


class _AttrsToLocals(cst.CSTTransformer):
    """``self.<attr>`` -> the local chosen for it."""

    def __init__(self, local: dict[str, str]):
        self.local = local

    def leave_Attribute(self, original_node, updated_node):
        if (
            isinstance(original_node.value, cst.Name)
            and original_node.value.value == "self"
            and original_node.attr.value in self.local
        ):
            return cst.Name(self.local[original_node.attr.value])
        return updated_node
