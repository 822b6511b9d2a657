"""Modules that are also ``torch.distributions`` distributions.

A class may subclass both ``nn.Module`` and a distribution (``class Prior(Module, Gamma)``)
and run the distribution's constructor on itself in ``__init__`` (``Gamma.__init__(self, a,
b)``, or ``super().__init__(...)`` when the distribution is its first base). That constructor
turns numbers into tensors on the default device and, with argument validation on, checks
their values (``Distribution.__init__``: ``constraint.check(value)``, then
``torch._is_all_true``), which raises on meta. Validation is on unless ``validate_args=False``
is passed: ``Distribution._validate_args`` is ``__debug__``.

The same holds for a distribution that construction merely builds (a flow's base
``self.base = Normal(torch.zeros(dim), torch.ones(dim))``, a VAE's prior): its constructor
runs in ``__init__`` and checks values made on meta.
"""

from __future__ import annotations

import libcst as cst

from metalint.static.construction import off_meta, real_device
from metalint.static.model import ClassFacts, MethodFacts
from metalint.static.syntax import keyword
from metalint.vocabulary import DISTRIBUTIONS_ALWAYS_VALIDATED, DISTRIBUTIONS_UNCHECKED

PACKAGE = "torch.distributions."


def distribution_class(qualname: str | None) -> str | None:
    """The class name of a ``torch.distributions`` class (``torch.distributions.Gamma``,
    ``torch.distributions.gamma.Gamma``), else None."""
    if not qualname or not qualname.startswith(PACKAGE):
        return None
    name = qualname.rsplit(".", 1)[-1]
    return name if name[:1].isupper() else None


def validating_inits(cls: ClassFacts, method: MethodFacts, qualify) -> list[tuple[cst.Call, str]]:
    """``(call, class name)`` for each call in ``method`` of a distribution's constructor
    that validates values which may be on meta: run on the module itself
    (``Normal.__init__(self, loc, scale)``, ``super().__init__(...)``) or building a
    distribution (``Normal(torch.zeros(d), torch.ones(d))``)."""
    first = distribution_class(cls.bases[0]) if cls.bases else None
    out = []
    for call in method.calls:
        found = _constructor(call.node, first, qualify)
        if found is None:
            continue
        name, args = found
        if name in DISTRIBUTIONS_UNCHECKED:
            continue
        if name not in DISTRIBUTIONS_ALWAYS_VALIDATED and not _validates(call.node, method):
            continue
        values = [a.value for a in args if a.keyword is None or a.keyword.value != "validate_args"]
        if not _off_meta(values, qualify, method):
            out.append((call.node, name))
    return out


def _constructor(node: cst.Call, first: str | None, qualify) -> tuple[str, list] | None:
    """``(class name, the arguments its constructor gets)`` when ``node`` runs the
    constructor of a ``torch.distributions`` class, else None. ``first``: the distribution
    that is the module's first base (what ``super().__init__`` runs)."""
    func = node.func
    if type(func) is not cst.Attribute or func.attr.value != "__init__":
        name = distribution_class(qualify(func))
        return (name, list(node.args)) if name is not None else None
    if _is_super(func.value):
        return (first, list(node.args)) if first is not None else None
    name = distribution_class(qualify(func.value))
    if name is None or not node.args or not _is_self(node.args[0].value):
        return None
    return name, list(node.args[1:])


def _off_meta(values: list[cst.BaseExpression], qualify, method: MethodFacts) -> bool:
    """Are the values a constructor gets certainly off meta? Numbers follow the tensors
    beside them (``broadcast_all`` makes them on the first tensor's device), so they count
    only when no tensor is given."""
    tensors = [v for v in values if not _number(v)]
    return bool(tensors) and all(_on_cpu(v, qualify, method) for v in tensors)


def _number(expr: cst.BaseExpression) -> bool:
    if type(expr) is cst.UnaryOperation:
        expr = expr.expression
    return type(expr) in (cst.Integer, cst.Float)


def _is_self(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value == "self"


def _is_super(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "super"


def _validates(call: cst.Call, method: MethodFacts) -> bool:
    """Is validation left on: no literal ``validate_args=False``, nor a parameter of
    ``method`` whose default is literal ``False`` handed unchanged?"""
    value = keyword(call, "validate_args")
    if value is None:
        return True
    if type(value) is cst.Name and value.value in method.params:
        if not method.holds_argument(value):
            return True
        value = _default(method, value.value)
    return not (type(value) is cst.Name and value.value == "False")


def _default(method: MethodFacts, name: str) -> cst.BaseExpression | None:
    params = method.node.params
    for p in (*params.params, *params.kwonly_params):
        if p.name.value == name:
            return p.default
    return None


def _on_cpu(expr: cst.BaseExpression, qualify, method: MethodFacts) -> bool:
    """Is ``expr`` certainly a tensor off meta: :func:`off_meta`, a call given a real
    ``device=``, or a local every value of which is one?"""
    if off_meta(expr, qualify, method):
        return True
    if type(expr) is cst.Call:
        return real_device(keyword(expr, "device"), qualify, method) is not None
    if type(expr) is cst.Name:
        values = method.local_values.get(expr.value)
        return bool(values) and all(
            v is not expr and type(v) is cst.Call and _on_cpu(v, qualify, method) for _, v in values
        )
    return False
