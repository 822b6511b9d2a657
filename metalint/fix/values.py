"""A value a hook makes again: what it is (:class:`Value`), an empty tensor of its shape, the helper method that makes it, the hook's body. Shared by the codemods."""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Unfixable,
    expr,
    fill,
    path_to,
    render,
    stmt,
)
from metalint.fix.flow import (
    NESTING,
    touches,
    uses,
)
from metalint.fix.init_statements import init_only
from metalint.fix.move_init import (
    initialising,
    method_into_reset,
    move_own,
    only_own,
    overwrites,
    sets_every_element,
)
from metalint.static.draws import random_call
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.vocabulary import (
    CHAINED_INITS,
    EMPTY_FACTORIES,
    FACTORY_DRAWS,
    FACTORY_KEYWORDS_DROPPED,
    FACTORY_KEYWORDS_KEPT,
    RANDOM_DRAWS,
    RANDOM_FACTORIES,
    SHAPED_FACTORIES,
    VALUE_FACTORIES,
)

FACTORIES = VALUE_FACTORIES | RANDOM_FACTORIES | EMPTY_FACTORIES


def is_number_literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        node = node.expression
    return isinstance(node, (cst.Float, cst.Integer))


def _literal_shape(node: cst.BaseExpression) -> tuple[tuple[int, ...], bool] | None:
    """Shape of a nested list/tuple of numbers, and whether it holds a float."""
    if is_number_literal(node):
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
        and (q := ctx.qualify(data.func.value.func)) in FACTORIES
        and not random_call(q)
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
        self._shape(bool(normal))
        self.random = random_call(self.factory) or (
            self.method is not None and self.method.func.attr.value in RANDOM_DRAWS
        )
        if self.method is not None and self.call is not self.method.func.value:
            raise Unfixable("the in-place init is not called on the new tensor itself")

    def _shape(self, normal: bool) -> None:
        """:attr:`shape_args` (and :attr:`fill`, :attr:`normal`) by the factory."""
        if normal:
            self._normal()
        elif self.factory == "torch.full":
            self._full()
        elif self.factory in SHAPED_FACTORIES:
            if "size" in self.keywords:
                self.shape_args = [cst.Arg(self.keywords["size"].value)]
            else:
                self.shape_args = [
                    a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in self.positional
                ]
            if not self.shape_args:
                raise Unfixable("the factory has no size")
        elif self.factory in ("torch.tensor", "torch.as_tensor"):
            self._literal()
        else:
            raise Unfixable(f"the shape of `{self.factory}(...)` is not derived statically")

    def _full(self) -> None:
        """``torch.full(size, fill)``: its size and fill value."""
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

    def _literal(self) -> None:
        """``torch.tensor(<literal>)``: the literal's shape."""
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
            cst.Arg(expr("(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"))
        ]

    def _normal(self) -> None:
        """``torch.normal(mean=0, std=0.02, size=(...))`` (peft's multitask prompt): with two
        numbers it is ``torch.empty(size).normal_(mean, std)``, what ``nn.init.normal_`` does to
        the parameter (the same draws, bit for bit)."""
        given = dict(zip(("mean", "std", "size"), (a.value for a in self.positional)))
        given.update({k: a.value for k, a in self.keywords.items() if k in ("mean", "std", "size")})
        if set(given) != {"mean", "std", "size"} or not all(
            is_number_literal(given[k]) for k in ("mean", "std")
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


def own_helper(cls, method):
    """``method`` (the method of construction a rule matched in, :class:`MethodFacts`) when it
    is a method of ``cls`` other than ``__init__``, else None."""
    if method.name == "__init__" or cls.methods.get(method.name) is not method:
        return None
    return method


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
    if not initialising(method, ctx) or not only_own(method, ctx):
        return None
    return method
