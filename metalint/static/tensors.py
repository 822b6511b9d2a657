"""What a PyTorch expression does to tensors: shared vocabulary of the rules.

``value_kind(expr)`` tells whether an expression makes a tensor whose *value* matters
(``torch.ones``, ``v * torch.ones(d)``, ``torch.randn``, ``torch.tensor([...])``), an
uninitialised one (``torch.empty``), or nothing we know of. ``writes(call)`` tells which own
tensor an in-place call initialises (``nn.init.zeros_(self.w)``, ``self.w.data.fill_(1)``).
"""

from __future__ import annotations

import libcst as cst

from metalint.static.model import CallSite, MethodFacts
from metalint.static.names import dotted
from metalint.static.syntax import walk

EMPTY_FACTORIES = frozenset({"torch.empty", "torch.empty_like", "torch.empty_strided"})
RANDOM_FACTORIES = frozenset(
    {
        "torch.rand",
        "torch.randn",
        "torch.randint",
        "torch.randperm",
        "torch.normal",
        "torch.rand_like",
        "torch.randn_like",
        "torch.randint_like",
        "torch.bernoulli",
        "torch.multinomial",
    }
)
VALUE_FACTORIES = frozenset(
    {
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.full_like",
        "torch.tensor",
        "torch.as_tensor",
        "torch.from_numpy",
        "torch.arange",
        "torch.range",
        "torch.linspace",
        "torch.logspace",
        "torch.eye",
        "torch.tril",
        "torch.triu",
        "torch.Tensor",
        "torch.FloatTensor",
        "torch.LongTensor",
        "torch.IntTensor",
        "torch.BoolTensor",
        "torch.HalfTensor",
        "torch.DoubleTensor",
        "torch.ByteTensor",
        "torch.polar",
        "torch.complex",
        "torch.meshgrid",
        "torch.outer",
        "torch.stack",
        "torch.cat",
    }
)
#: in-place tensor methods that set values
INPLACE_METHODS = frozenset(
    {
        "normal_",
        "uniform_",
        "fill_",
        "zero_",
        "copy_",
        "constant_",
        "trunc_normal_",
        "bernoulli_",
        "exponential_",
        "random_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "fill_diagonal_",
        "clamp_",
        "mul_",
        "add_",
        "div_",
        "sub_",
        "masked_fill_",
        "index_fill_",
        "scatter_",
        "set_",
    }
)
#: legacy constructors: ``torch.Tensor(3, 4)`` allocates CPU memory even under ``meta``
LEGACY_CONSTRUCTORS = frozenset(
    {
        "torch.Tensor",
        "torch.FloatTensor",
        "torch.DoubleTensor",
        "torch.HalfTensor",
        "torch.BFloat16Tensor",
        "torch.LongTensor",
        "torch.IntTensor",
        "torch.ShortTensor",
        "torch.CharTensor",
        "torch.ByteTensor",
        "torch.BoolTensor",
        "torch.cuda.FloatTensor",
        "torch.cuda.LongTensor",
        "torch.cuda.HalfTensor",
    }
)
#: ``nn.Buffer(t)`` (torch >= 2.5) registers a buffer when assigned to a module attribute
BUFFER_CLASSES = frozenset({"torch.nn.Buffer"})
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.UninitializedParameter"})


def local_value(method: MethodFacts, name: str, before: cst.CSTNode | None = None):
    """The last value assigned to local ``name`` in ``method`` (before ``before`` if given)."""
    values = method.local_values.get(name)
    if not values:
        return None
    if before is not None:
        for stmt, value in reversed(values):
            if stmt is not before:
                return value
    return values[-1][1]


def value_kind(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None = None, depth: int = 0
) -> str | None:
    """ "random", "value", "empty" or None (nothing known is created)."""
    if expr is None or depth > 3:
        return None
    found: set[str] = set()
    for node in walk(expr):
        if isinstance(node, cst.Call):
            q = qualify(node.func)
            if q in EMPTY_FACTORIES:
                found.add("empty")
            elif q in RANDOM_FACTORIES:
                found.add("random")
            elif q in VALUE_FACTORIES:
                found.add("value")
            elif isinstance(node.func, cst.Attribute) and node.func.attr.value in INPLACE_METHODS:
                found.add(
                    "random" if node.func.attr.value.endswith(("normal_", "uniform_")) else "value"
                )
        elif isinstance(node, cst.Name) and method is not None and depth < 3:
            # every value the local is given: ``rel_pos = (pos[0] - pos[1]).abs()`` then
            # ``rel_pos = rel_pos[0] * w + rel_pos[1]`` is still made from ``pos``
            for _stmt, inner in method.local_values.get(node.value, ()):
                if inner is not expr:
                    kind = value_kind(inner, qualify, method, depth + 1)
                    if kind:
                        found.add(kind)
    if "random" in found:
        return "random"
    if "value" in found:
        return "value"
    if "empty" in found:
        return "empty"
    return None


def parameter_value(expr: cst.BaseExpression | None, qualify) -> cst.BaseExpression | None:
    """The data argument of ``nn.Parameter(data, ...)``, or None if ``expr`` is not one."""
    if isinstance(expr, cst.Call) and qualify(expr.func) in PARAMETER_CLASSES:
        for arg in expr.args:
            if arg.keyword is None or arg.keyword.value == "data":
                return arg.value
    return None


def self_attr(name: str | None) -> str | None:
    """``gamma`` for ``self.gamma``, ``self.gamma.data``; None for anything not on self."""
    if name is None or not name.startswith("self."):
        return None
    return name.split(".")[1]


def string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def writes(call: CallSite, qualify) -> str | None:
    """Name of the own tensor (``self.<name>``) that this call writes in place, if any."""
    node = call.node
    # self.w.normal_(...), self.w.data.fill_(...)
    if call.method in INPLACE_METHODS and call.receiver:
        attr = self_attr(call.receiver)
        if attr:
            return attr
    # self.register_buffer("name", ...), self.register_parameter("name", ...)
    if call.receiver == "self" and call.method in ("register_buffer", "register_parameter"):
        if node.args:
            return string_value(node.args[0].value)
    # nn.init.constant_(self.w, ...), trunc_normal_(self.pos_embed, std=.02)
    func = call.qualname or dotted(node.func) or ""
    if func.rsplit(".", 1)[-1].endswith("_") and node.args:
        return self_attr(dotted(node.args[0].value))
    return None


def recreated(method: MethodFacts, qualify) -> set[str]:
    """Own tensors a hook method (re-)creates: assigned, registered or initialised in place.

    ``"*"`` stands for all of them (a loop over ``self.parameters()``).
    """
    names: set[str] = set()
    for a in method.assigns:
        attr = self_attr(a.target)
        if attr and a.target.count(".") <= 2:  # self.w = ..., self.w.data = ...
            names.add(attr)
    for call in method.calls:
        attr = writes(call, qualify)
        if attr:
            names.add(attr)
        elif (
            isinstance(call.node.func, cst.Name)
            and (
                call.node.func.value in method.local_values or call.node.func.value in method.params
            )
            and call.node.args
        ):
            # init_weight = get_condconv_initializer(...); init_weight(self.weight): a hook
            # handing an own tensor to a local initialiser re-creates it
            attr = self_attr(dotted(call.node.args[0].value))
            if attr:
                names.add(attr)
    if method.loops_over_own_tensors:
        names.add("*")
    return names
