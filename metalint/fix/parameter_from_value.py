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

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    assigned_attr,
    expr,
    fill,
    guarded,
    names_in,
    path_to,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import (
    NESTING,
    mentions_none,
    reads_metadata_only,
    rng_free,
    sets_metadata,
    statements_after,
    touches,
    uses,
)
from metalint.fix.inplace_init import (
    init_in_branch,
    init_only,
    initialising_method,
    method_into_reset,
    move_own,
    move_own_in_block,
    only_own,
    overwrites,
    sets_every_element,
    take,
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
from metalint.static.names import dotted
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import string_value, walk_code
from metalint.static.tensors import same_tensor, value_kind
from metalint.vocabulary import (
    CHAINED_INITS,
    EMPTY_FACTORIES,
    FACTORY_DRAWS,
    FACTORY_KEYWORDS_DROPPED,
    FACTORY_KEYWORDS_KEPT,
    FILL_FACTORIES,
    PARAMETER_CLASSES,
    RANDOM_DRAWS,
    RANDOM_FACTORIES,
    RESET_HOOK,
    SHAPED_FACTORIES,
    VALUE_FACTORIES,
)

HOOK = RESET_HOOK
FACTORIES = VALUE_FACTORIES | RANDOM_FACTORIES | EMPTY_FACTORIES


def _number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        node = node.expression
    return isinstance(node, (cst.Float, cst.Integer))


def _literal_shape(node: cst.BaseExpression) -> tuple[tuple[int, ...], bool] | None:
    """Shape of a nested list/tuple of numbers, and whether it holds a float."""
    if _number(node):
        inner = node.expression if isinstance(node, cst.UnaryOperation) else node
        return (), isinstance(inner, cst.Float)
    if isinstance(node, (cst.List, cst.Tuple)):
        subs = [
            _literal_shape(e.value) for e in node.elements if not isinstance(e, cst.StarredElement)
        ]
        if len(subs) != len(node.elements) or any(s is None for s in subs):
            return None
        if not subs:
            return (0,), False
        shapes = {s[0] for s in subs}
        if len(shapes) != 1:
            return None
        return (len(subs), *shapes.pop()), any(s[1] for s in subs)
    return None


def _chained_init(data: cst.BaseExpression, ctx: RuleContext) -> cst.Call | None:
    """``torch.empty(1, n, d, device=device).normal_()`` (peft's adaption prompt): the in-place
    init (``normal_``, ``uniform_``, ``zero_``, ``fill_``) called on a new tensor of a
    deterministic factory. The hook calls the same method on the parameter: the same draws
    on a tensor of the same shape, dtype and device, so the same values."""
    if (
        isinstance(data, cst.Call)
        and isinstance(data.func, cst.Attribute)
        and data.func.attr.value in CHAINED_INITS
        and isinstance(data.func.value, cst.Call)
        and ctx.qualify(data.func.value.func) in FACTORIES - RANDOM_FACTORIES
        and not data.lpar
    ):
        return data
    return None


class Value:
    """What the value expression is made of: one factory call and how it is combined."""

    def __init__(self, data: cst.BaseExpression, ctx: RuleContext):
        self.data = data
        #: ``factory(...).normal_(...)``: the in-place init chained on the new tensor
        self.method = _chained_init(data, ctx)
        calls = [n for n in walk_code(data) if isinstance(n, cst.Call) and n is not self.method]
        factories = [c for c in calls if ctx.qualify(c.func) in FACTORIES]
        if isinstance(data, cst.Name):
            raise Unfixable(
                f"the value comes from the local variable `{data.value}`: its shape is not known statically"
            )
        if len(factories) != 1:
            raise Unfixable(
                "the shape of the value cannot be derived statically (not exactly one tensor factory)"
            )
        self.call = factories[0]
        self.factory = ctx.qualify(self.call.func)
        others = [
            c for c in calls if c is not self.call and not any(c is n for n in walk_code(self.call))
        ]
        if others:
            raise Unfixable(
                f"the value calls `{render(others[0].func)}`: its shape is not known statically"
            )
        self.positional = [a for a in self.call.args if a.keyword is None and a.star != "**"]
        self.keywords = {a.keyword.value: a for a in self.call.args if a.keyword is not None}
        #: what ``torch.empty`` is given besides the shape: the factory's dtype/device/``**kw``
        self.passed = [
            a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
            for a in self.call.args
            if a.star == "**"
            or (a.keyword is not None and a.keyword.value in FACTORY_KEYWORDS_KEPT)
        ]
        #: ``torch.normal(mean, std, size)`` of two numbers: its mean and std
        self.normal: tuple[cst.BaseExpression, cst.BaseExpression] | None = None
        normal = ("mean", "std") if self.factory == "torch.normal" else ()
        unknown = (
            set(self.keywords)
            - FACTORY_KEYWORDS_KEPT
            - FACTORY_KEYWORDS_DROPPED
            - {"size", "fill_value", "data", *normal}
        )
        if unknown:
            raise Unfixable(f"the factory takes `{sorted(unknown)[0]}=`: not rewritten")
        self.fill: cst.BaseExpression | None = None
        self.shape_args: list[cst.Arg]
        if normal:
            self._normal()
        elif self.factory in SHAPED_FACTORIES:
            if self.factory == "torch.full":
                size = (
                    self.positional[0].value
                    if self.positional
                    else getattr(self.keywords.get("size"), "value", None)
                )
                fill = (
                    self.positional[1].value
                    if len(self.positional) > 1
                    else getattr(self.keywords.get("fill_value"), "value", None)
                )
                if size is None or fill is None:
                    raise Unfixable("`torch.full` without a size and a fill value")
                self.fill = fill
                self.shape_args = [cst.Arg(size)]
            else:
                if "size" in self.keywords:
                    self.shape_args = [cst.Arg(self.keywords["size"].value)]
                else:
                    self.shape_args = [
                        a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in self.positional
                    ]
                if not self.shape_args:
                    raise Unfixable("the factory has no size")
        elif self.factory in ("torch.tensor", "torch.as_tensor"):
            src = (
                self.positional[0].value
                if self.positional
                else getattr(self.keywords.get("data"), "value", None)
            )
            shape = _literal_shape(src) if src is not None else None
            if shape is None:
                raise Unfixable(
                    "`torch.tensor(...)` of something other than a literal: its shape is not known statically"
                )
            if not shape[1] and "dtype" not in self.keywords:
                raise Unfixable(
                    "`torch.tensor(...)` of integers makes an integer tensor: not rewritten"
                )
            dims = shape[0]
            self.shape_args = [
                cst.Arg(
                    expr("(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")")
                )
            ]
        else:
            raise Unfixable(f"the shape of `{self.factory}(...)` is not derived statically")
        self.random = self.factory in RANDOM_FACTORIES or (
            self.method is not None and self.method.func.attr.value in RANDOM_DRAWS
        )
        if self.method is not None and self.call is not self.method.func.value:
            raise Unfixable("the in-place init is not called on the new tensor itself")

    def _normal(self) -> None:
        """``torch.normal(mean=0, std=0.02, size=(...))`` (peft's multitask prompt): with two
        numbers it is ``torch.empty(size).normal_(mean, std)``, what ``nn.init.normal_`` does to
        the parameter (the same draws, bit for bit)."""
        given = dict(zip(("mean", "std", "size"), (a.value for a in self.positional)))
        given.update({k: a.value for k, a in self.keywords.items() if k in ("mean", "std", "size")})
        if set(given) != {"mean", "std", "size"} or not all(
            _number(given[k]) for k in ("mean", "std")
        ):
            raise Unfixable(
                "`torch.normal` of tensors or without a size: its shape is not known statically"
            )
        self.normal = (given["mean"], given["std"])
        self.shape_args = [cst.Arg(given["size"])]

    def scale(self) -> cst.BaseExpression | None:
        """``k`` when the value is ``factory * k`` or ``k * factory``."""
        d = self.data
        if (
            isinstance(d, cst.BinaryOperation)
            and isinstance(d.operator, cst.Multiply)
            and not d.lpar
        ):
            if d.left is self.call and not any(n is self.call for n in walk_code(d.right)):
                return d.right
            if d.right is self.call and not any(n is self.call for n in walk_code(d.left)):
                return d.left
        return None


def _parameter(
    ctx: RuleContext, node: cst.CSTNode, path, cls=None, after_return: bool = False
) -> tuple[str, cst.Arg, str | None]:
    """(attribute, the ``data`` argument of its ``nn.Parameter(...)``, the guard the hook
    needs when the parameter may be ``None`` or is made in an ``if``)."""
    pcall = next(
        (
            n
            for n in walk_code(node)
            if isinstance(n, cst.Call) and ctx.qualify(n.func) in PARAMETER_CLASSES
        ),
        None,
    )
    if pcall is None:
        raise Unfixable("no `nn.Parameter(...)` call found")
    data_arg = next((a for a in pcall.args if a.keyword is None or a.keyword.value == "data"), None)
    if data_arg is None:
        raise Unfixable("`nn.Parameter` without data")
    attr = assigned_attr(node)
    holder = node
    if attr is None and isinstance(node, cst.Call) and node.args:
        attr = string_value(node.args[0].value)
        holder = node.args[1] if len(node.args) > 1 else None
    if attr is None or holder is None:
        raise Unfixable("the parameter's attribute name is not known")
    guard = None
    if getattr(holder, "value", None) is not pcall:
        inner = path_between(holder, pcall)
        # ``nn.Parameter(grid).requires_grad_(False)``: the same parameter (:func:`same_tensor`)
        wrappers: set[int] = set()
        for n in inner or ():
            if isinstance(n, cst.Call) and n is not pcall and same_tensor(n) is pcall:
                wrappers |= {id(n), id(n.func)}
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
    if any(isinstance(n, cst.If) for n in path) or after_return:
        guard = f"getattr(self, {attr!r}, None) is not None"
        if cls is not None and _assigned_otherwise(cls, attr, node):
            # ``self.q_scale = self.k_scale = 1`` before ``if qk_norm: self.q_scale =
            # nn.Parameter(...)`` (x-transformers' Attention): there whatever the branch
            guard = registered(cls, ctx.qualify, attr, "parameter")
    return attr, data_arg, guard


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


def empty_of(value: Value, torch_name: str) -> tuple[cst.BaseExpression, str]:
    """``torch.empty(shape)`` for the value, passing on the factory's own
    dtype/device/``**kwargs`` (no device is added: under ``with torch.device("meta")`` a factory
    without one lands on meta; adding ``device``/``dtype`` arguments is ML012's fix); and the
    shape's text."""
    shape = ", ".join(
        render(a.value) if not a.star else a.star + render(a.value) for a in value.shape_args
    )
    passed = [
        f"{a.keyword.value}={render(a.value)}" if a.keyword else "**" + render(a.value)
        for a in value.passed
    ]
    return expr(f"{torch_name}.empty({', '.join([shape, *passed])})"), shape


def hook_body(value: Value, x: str, names: tuple[str, str], kept) -> cst.BaseStatement:
    """The statement that gives ``x`` (``self.<attr>``) its value again, in the hook."""
    torch_name, nn_name = names
    k = value.scale()
    f = value.factory
    whole = value.data is value.call
    drawn = "generator" not in value.keywords
    if value.method is not None:
        m = value.method
        call = kept(m.with_changes(func=m.func.with_changes(value=expr(x))))
        return fill(f"with {torch_name}.no_grad():\n    __v__", v=call)
    if whole and value.normal is not None:
        mean, std = value.normal
        return stmt(f"{nn_name}.init.normal_({x}, mean={render(mean)}, std={render(std)})")
    if whole and f == "torch.ones":
        return stmt(f"{nn_name}.init.ones_({x})")
    if whole and f == "torch.zeros":
        return stmt(f"{nn_name}.init.zeros_({x})")
    if whole and f == "torch.full":
        return fill(f"{nn_name}.init.constant_({x}, __v__)", v=kept(value.fill))
    if whole and f in FACTORY_DRAWS and drawn:
        return stmt(f"{nn_name}.init.{FACTORY_DRAWS[f]}({x})")
    if k is not None and f == "torch.ones":
        return fill(f"{nn_name}.init.constant_({x}, __v__)", v=kept(k))
    if k is not None and f in FACTORY_DRAWS and drawn:
        draw = FACTORY_DRAWS[f]
        return fill(f"with {torch_name}.no_grad():\n    {x}.{draw}().mul_(__v__)", v=kept(k))
    return fill(f"with {torch_name}.no_grad():\n    {x}.copy_(__v__)", v=kept(value.data))


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    """The dinov2 rewrite (``torch.empty`` + the hook called at the end of ``__init__``); when
    that is unsafe or refused because of what ``__init__`` does after the value (draws of
    later children, an existing ``reset_parameters()`` it does not call), the value kept where
    it is and re-created by a ``reset_parameters()`` that ``__init__`` does not call
    (:func:`_kept`), when that is possible. (No exception is kept in a local: with its
    traceback it would hold the syntax tree in a reference cycle.)"""
    if _parameter_list_value(ctx, finding.node) is not None:
        return _parameter_list(ctx, cls, finding)
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


#: factories of a parameter in a list, and the in-place init that draws or sets the same values
LIST_INITS = {
    **FACTORY_DRAWS,
    **{f: f"{k}_" for f, k in FILL_FACTORIES.items() if f in ("torch.zeros", "torch.ones")},
}


def _parameter_list_value(ctx: RuleContext, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The list of ``self.ws = nn.ParameterList(<list>)`` (a list or a comprehension)."""
    if not (isinstance(node, cst.SimpleStatementLine) or isinstance(node, cst.Assign)):
        return None
    a = node.body[0] if isinstance(node, cst.SimpleStatementLine) else node
    if not isinstance(a, cst.Assign) or assigned_attr(a) is None:
        return None
    v = a.value
    if not (
        isinstance(v, cst.Call)
        and ctx.qualify(v.func) == "torch.nn.ParameterList"
        and v.args
        and v.args[0].keyword is None
        and isinstance(v.args[0].value, (cst.List, cst.ListComp))
    ):
        return None
    return v.args[0].value


def _parameter_list(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    """``self.ws = nn.ParameterList([nn.Parameter(torch.randn(d, d)) for _ in range(n)])``:
    each element made with ``torch.empty`` of the same arguments and set in
    ``reset_parameters()`` by the init that draws the same numbers (``normal_`` for
    ``randn``: bit-identical, as for a single parameter), in order: a loop over the list for a
    comprehension, one call per element for a list. Only plain factories (their size and
    ``dtype=``/``device=``), every element one of them."""
    edit = ClassEdit(ctx, cls)
    node = finding.node
    items = _parameter_list_value(ctx, node)
    attr = assigned_attr(node.body[0] if isinstance(node, cst.SimpleStatementLine) else node)
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


def _one_law(ctx: RuleContext, edit: ClassEdit, attr: str, node, data) -> None:
    """:func:`one_value`; unsafe where another path draws the parameter too (in another
    shape): the hook, which runs on that path as well, draws it a second time there."""
    shared = one_value(edit.cls, ctx.qualify, attr, node)
    if shared and value_kind(data, ctx.qualify, edit.init) == "random":
        edit.unsafe.append(
            "another path of `__init__` draws it too, in another shape: the hook draws it a "
            "second time there"
        )


def _plan(ctx: RuleContext, cls, finding: Finding, edit: ClassEdit) -> Rewrite:
    """One rewrite; with ``edit.keep_value``, the value stays in ``__init__`` (eager
    construction runs exactly as before: LinearAttention's ``self.mem_kv = nn.Parameter(
    torch.randn(...))`` of denoising-diffusion-pytorch, drawn before the convolutions made
    after it) and a ``reset_parameters()`` that ``__init__`` does not call re-creates it for
    the protocol. Code after it may only read its shape or dtype, as for the plain rewrite."""
    keep = edit.keep_value
    try:
        index, line, path = edit.locate(finding.node)
    except Unfixable as exc:
        helper = helper_of(cls, finding.node)
        if helper is None or keep:
            raise
        return _plan_in_helper(ctx, edit, finding.node, helper, str(exc))
    attr, data_arg, guard = _parameter(ctx, finding.node, path, cls, edit.after_return(index))
    _one_law(ctx, edit, attr, finding.node, data_arg.value)
    later = edit.used_after(attr, index, tensor=True)
    tail = edit.block_tail(line)
    # first set on some paths only, by an `if`: the hook re-creates the value, then runs it
    branch = init_in_branch(ctx, edit, attr, index) if later and not keep else None
    later = later if branch is None else None
    if keep:
        _kept_unused_later(ctx, edit, attr, index, later, tail)
        tail = []
    if later and not edit.used_after(attr, index, writes_only=True, tensor=True):
        # only read later: the read sees the value `__init__` makes, which a hook would not
        raise Unfixable(_read_later(ctx, edit, attr, index, later))
    if later:
        return overwritten_later(ctx, edit, attr, index, later)
    moved = _used_in_block(ctx, edit, attr, index, tail)
    if moved is not None:
        return moved
    names = torch_spelling(ctx)
    try:
        value = Value(data_arg.value, ctx)
    except Unfixable as exc:
        if branch is not None:
            raise Unfixable(f"`self.{attr}` is initialised in place later in an `if`: {exc}")
        return _recompute(
            ctx, edit, attr, (index, line, path), data_arg.value, guard, names, str(exc)
        )

    empty, shape = empty_of(value, names[0])
    if not keep:
        edit.replace[id(line)] = (line, [line.deep_replace(data_arg.value, empty)])

    # the hook: re-create the value
    body = hook_body(value, f"self.{attr}", names, lambda e: edit.store_names(e, line, index))
    if guard:
        body = guarded(guard, body)
    hook = HOOK if keep else edit.choose_hook(index)
    if keep:
        edit.use_hook(hook, index, [body])
        return edit.rewrite(_kept_message(attr, hook))
    if value.random and not all(rng_free(s, ctx) for s in tail):
        edit.unsafe.append(
            "the random value is now drawn at the end of `__init__`, after other random draws, "
            "so eager values differ under the same seed (same distribution)"
        )
    if branch is not None:
        return _with_branch(ctx, edit, attr, index, branch, hook, body, value.random, shape)
    edit.use_hook(hook, index, [body], random=value.random)
    return edit.rewrite(
        f"Create `{attr}` with `torch.empty({shape})` and set its value in `{hook}()`"
    )


def _with_branch(ctx, edit: ClassEdit, attr, index: int, j: int, hook, body, random, shape):
    """The hook sets the value (``body``), then runs the ``if`` at top-level statement ``j``
    of ``__init__`` (:func:`init_in_branch`), moved there: the same inits in the same order.
    The hook is called after ``j``; a random value drawn there, after draws between its
    statement and ``j``, is an unsafe fix."""
    between = edit.init_body[index + 1 : j]
    if random and not all(rng_free(s, ctx) for s in between):
        edit.unsafe.append(
            "the random value is now drawn after the statements that follow it in `__init__`, "
            "after other random draws, so eager values differ under the same seed"
        )
    moved = take(edit, edit.init_body, [j])
    draws = random or not rng_free(edit.init_body[j], ctx)
    edit.use_hook(hook, j, [body, *moved], random=draws)
    return edit.rewrite(
        f"Create `{attr}` with `torch.empty({shape})`, set its value in `{hook}()` and move "
        "the in-place init that follows it (on some paths, or changing its values) after it"
    )


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


def _kept_unused_later(ctx, edit: ClassEdit, attr: str, index: int, later, tail) -> None:
    """Raise :class:`Unfixable` when code after a kept value uses more than its shape: what it
    computes from the value (later_init's ``self.twice = nn.Parameter(self.gamma.detach() *
    2)``) would still be lost (the class would fail the probe), and what it writes the hook
    would not replay."""
    if later:
        raise Unfixable(_read_later(ctx, edit, attr, index, later))
    for s in tail:
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


def _helper_call(edit: ClassEdit, name: str, why: str):
    """The one statement ``self.<name>()`` of ``__init__`` (the only caller of ``name``): (its
    line, the index of its top-level statement, the path down to it)."""
    callers = sorted(m.name for m in edit.cls.methods.values() if name in m.self_calls)
    if not callers:
        raise Unfixable(f"{why}: `{name}()` is called by a base class's `__init__`")
    if callers != ["__init__"]:
        raise Unfixable(f"{why}: `{name}()` is called by `{callers[-1]}()`, not only `__init__`")
    call_lines = [
        n
        for n in walk_code(edit.init.node.body)
        if isinstance(n, cst.SimpleStatementLine)
        and len(n.body) == 1
        and isinstance(n.body[0], cst.Expr)
        and isinstance(n.body[0].value, cst.Call)
        and render(n.body[0].value.func).strip() == f"self.{name}"
    ]
    sites = [n for n in walk_code(edit.init.node.body) if isinstance(n, cst.Call)]
    if len(call_lines) != 1 or sum(render(c.func).strip() == f"self.{name}" for c in sites) != 1:
        raise Unfixable(f"{why}: `__init__` does not call `{name}()` once, as a statement")
    found = edit.path_of(call_lines[0])
    if found is None or any(isinstance(n, NESTING) for n in found[1]):
        raise Unfixable(f"{why}: `__init__` calls `{name}()` inside a loop, `with` or `try`")
    return call_lines[0], found[0], found[1]


def helper_of(cls, node: cst.CSTNode):
    """The method other than ``__init__`` whose body holds ``node``, or None."""
    return next(
        (
            m
            for m in cls.methods.values()
            if m.name != "__init__" and path_to(m.node.body, node) is not None
        ),
        None,
    )


def helper_statement(edit: ClassEdit, node: cst.CSTNode, helper, why: str):
    """``node`` is in ``helper``, a private method that only ``__init__`` calls, once, as a
    statement, and in a simple statement outside any loop, ``with`` or ``try`` of it: (the
    call's line, the index of its top-level statement of ``__init__``, the path down to the
    call, the statement line holding ``node``, the path from the helper's body down to
    ``node``). Raises :class:`Unfixable` (``why``: the reason of the plain fix) otherwise."""
    name = helper.name
    if not name.startswith("_"):
        raise Unfixable(
            f"{why}: it is set in `{name}()`, a public method (a subclass may override it, a "
            "caller may call it again)"
        )
    call_line, call_index, call_path = _helper_call(edit, name, why)
    path = path_to(helper.node.body, node)
    if path is None or any(isinstance(n, NESTING) for n in path):
        raise Unfixable(f"{why}: the statement is inside a loop, `with`, `try` or nested function")
    lines = [n for n in path if isinstance(n, cst.SimpleStatementLine)]
    if not lines:
        raise Unfixable(f"{why}: the value is not set by a simple statement")
    return call_line, call_index, call_path, lines[-1], path


def helper_conditional(edit: ClassEdit, helper, path, call_path, call_index: int) -> bool:
    """Is the statement at the end of ``path`` (from the body of ``helper``, which ``__init__``
    calls at top-level statement ``call_index`` by ``call_path``) run on some paths only:
    inside an ``if`` of the method, after a ``return`` of it (julius's ``ResampleFrac.
    _init_kernels()``: ``if self.old_sr == self.new_sr: return`` registers no ``kernel``), or
    called so? A hook then sets what it makes only where it is there."""
    return (
        any(isinstance(n, cst.If) for n in path)
        or edit.returns(helper.node.body)
        or edit.conditional(call_path, call_index)
    )


def _plan_in_helper(ctx: RuleContext, edit: ClassEdit, node, helper, why: str) -> Rewrite:
    """The parameter is created in a private method that only ``__init__`` calls, once, as a
    statement (esm1's ``_init_submodules_esm1()``, called in an ``else``:
    ``self.embed_out = nn.Parameter(torch.zeros((self.alphabet_size, self.args.embed_dim)))``).
    The method creates it with ``torch.empty`` and the class's ``reset_parameters()``, called at
    the end of ``__init__``, sets the constant, where the parameter exists. Only deterministic
    values whose hook reads no name (``zeros``, ``ones``, a literal fill): nothing then draws
    at another point of construction, so eager values stay identical (safe)."""
    name = helper.name
    call_line, call_index, call_path, line, path = helper_statement(edit, node, helper, why)
    memo = edit.memo()
    attr, data_arg, guard = _parameter(ctx, node, path)
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


def overwritten_later(ctx: RuleContext, edit: ClassEdit, attr: str, index: int, why: str):
    """The value is dead: the next statement of ``__init__`` that uses ``self.<attr>``
    re-initialises all of it in place (timm's ``self.pos_embed = nn.Parameter(torch.zeros(..))``
    then ``trunc_normal_(self.pos_embed, std=.02)``). The fix is ML003's: the in-place inits
    move, in order, into ``reset_parameters()``; the value stays (on meta it costs nothing)."""

    body = edit.init_body
    memo = edit.memo()
    methods: set[str] = set()
    for j in range(index + 1, len(body)):
        s = body[j]
        if touches(s, attr, False, memo) is None:
            helper = _initialised_by(ctx, edit, j, attr)
            if helper is not None and not methods:
                return method_into_reset(edit, helper)
            # the class's own methods (``self.register_buffer("shift", ...)`` is not one)
            methods |= uses(s, memo)[2] & edit.cls.methods.keys()
            continue
        if not (init_only(s, ctx) and overwrites(s, attr, ctx)):
            raise Unfixable(why)
        break
    else:
        raise Unfixable(why)  # only a method that __init__ calls uses it
    for name in sorted(methods):
        for m in edit.cls.reachable(name):
            if m.name != "__init__" and touches(m.node.body, attr, False, memo):
                raise Unfixable(why)
    return move_own(
        ctx,
        edit,
        f"`{attr}` is re-initialised in place later in `__init__`: move its in-place init "
        "(with the class's others, in order) into `reset_parameters()`",
    )


def _initialised_by(ctx: RuleContext, edit: ClassEdit, j: int, attr: str):
    """The method that statement ``j`` of ``__init__`` calls (``self._initialize(
    identity_init)``, nflows ``LULinear``; kornia's ``Homography.reset_model()``:
    ``torch.nn.init.eye_(self.model)``) when it only initialises this module's own tensors in
    place and sets every element of ``self.<attr>`` on every path: ML003's fix (a
    ``reset_parameters()`` calling it, the parameter created with ``torch.empty``) is this
    one's too, for a public method as for a private one (ML003's fix calls either). None
    otherwise."""
    s = edit.init_body[j]
    called = uses(s, edit.memo())[2]
    if len(called) != 1 or edit.hook_calls(next(iter(called))) != ([j], False):
        return None
    method = edit.cls.methods.get(next(iter(called)))
    if method is None or method.name == "__init__":
        return None
    body = method.node.body
    if not isinstance(body, cst.IndentedBlock) or not sets_every_element(body.body, attr, ctx):
        return None
    if initialising_method(edit.cls, body.body[0], ctx) is not method or not only_own(method, ctx):
        return None
    return method


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


def _recompute(ctx, edit: ClassEdit, attr, where, data, guard, names, why: str):
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
    index, line, path = where
    keep = edit.keep_value
    hook = HOOK if keep else edit.choose_hook(index)
    prelude: list[cst.BaseStatement] = []
    try:
        full = inline_locals(edit, data)
    except Unfixable as exc:
        before = preceding(edit, path, index)
        try:
            prelude = recompute_locals(edit, data, index, hook, str(exc), before)
        except Drawn as drawn:
            if keep:
                raise
            return edit.rewrite(drawn_tail(edit, drawn.index, hook, str(exc)))
        if any(isinstance(n, cst.If) for n in path) and not guard:
            raise
        full = data
    else:
        if _sprawls(full, data) and not any(isinstance(n, cst.If) for n in path):
            # the locals written out in one expression, some twice (N-BEATS' ``grid`` in
            # both its cosine and its sine): the statements computing them are copied, as a
            # maintainer would write the hook
            try:
                prelude = recompute_locals(
                    edit, data, index, hook, why, preceding(edit, path, index)
                )
            except Unfixable:
                prelude = []
            else:
                full = data
    code = [full, *prelude]
    if any(mentions_none(c) for c in code):
        raise Unfixable(why)
    _reads_kept(edit, attr, index, code, why)
    value = prelude.pop() if prelude else edit.store_names(full, line, index)
    body = fill(f"with {names[0]}.no_grad():\n    self.{attr}.copy_(__v__)", v=value)
    if guard:
        inner = [*prelude, body] if any(isinstance(n, cst.If) for n in path) else [body]
        body = guarded(guard, body)
        body = body.with_changes(body=body.body.with_changes(body=inner))
        prelude = [] if len(inner) > 1 else prelude
    if keep:
        edit.use_hook(hook, index, [*prelude, body])
        return edit.rewrite(_kept_message(attr, hook))
    if not all(rng_free(c, ctx) for c in code):
        edit.unsafe.append(
            "the value may draw random numbers: it is drawn a second time in the hook, so "
            "eager values differ"
        )
    edit.use_hook(hook, index, [*prelude, body])
    return edit.rewrite(f"Compute `{attr}` again in `{hook}()` and copy it in")
