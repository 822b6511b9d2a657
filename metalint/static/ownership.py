"""Who owns what, and which expressions hold a tensor that lives on ``meta``.

Shared by the hook/children/data-dependent/apply/tie/skip-init rules (ML004, ML006, ML008,
ML010, ML011, ML012). Works on the facts of :mod:`metalint.static.model`; never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from metalint.static.construction import Registration, _is_none, keyword, tensor_registrations
from metalint.static.model import ClassFacts, MethodFacts
from metalint.static.names import dotted
from metalint.static.syntax import children
from metalint.static.tensors import (
    BUFFER_CLASSES,
    EMPTY_FACTORIES,
    INPLACE_METHODS,
    LEGACY_CONSTRUCTORS,
    PARAMETER_CLASSES,
    RANDOM_FACTORIES,
    VALUE_FACTORIES,
    string_value,
)

#: legacy typed constructors allocate CPU memory even under ``with torch.device("meta")``
CPU_CONSTRUCTORS = (LEGACY_CONSTRUCTORS - {n for n in LEGACY_CONSTRUCTORS if ".cuda." in n}) | {
    "torch.from_numpy"
}
#: torch functions that never return a tensor (or return a tuple of them)
NOT_TENSOR_FUNCTIONS = frozenset(
    {
        "torch.is_tensor",
        "torch.numel",
        "torch.is_floating_point",
        "torch.is_complex",
        "torch.device",
        "torch.Size",
        "torch.finfo",
        "torch.iinfo",
        "torch.get_default_dtype",
        "torch.get_default_device",
        "torch.meshgrid",
        "torch.split",
        "torch.chunk",
        "torch.unbind",
        "torch.tensor_split",
        "torch.broadcast_shapes",
        "torch.broadcast_tensors",
        "torch.no_grad",
        "torch.manual_seed",
        "torch.initial_seed",
        "torch.set_grad_enabled",
        "torch.is_grad_enabled",
        "torch.promote_types",
        "torch.result_type",
        "torch.can_cast",
    }
)
#: tensor methods whose result is not a tensor (or is a tuple): shape queries work on meta
NOT_TENSOR_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "nelement",
        "ndimension",
        "element_size",
        "stride",
        "storage_offset",
        "data_ptr",
        "get_device",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "item",
        "tolist",
        "numpy",
        "split",
        "chunk",
        "unbind",
        "__len__",
        "register_hook",
        "untyped_storage",
        "storage",
    }
)
#: tensor attributes that are tensors too (``x.data``, ``x.T``)
TENSOR_ATTRIBUTES = frozenset({"data", "T", "mT", "H", "mH", "real", "imag", "grad"})
#: containers of parameters: a parent that initialises their tensors is their only hook
PARAMETER_CONTAINERS = frozenset({"torch.nn.ParameterList", "torch.nn.ParameterDict"})
REAL_DEVICES = ("cpu", "cuda", "mps", "xpu", "npu", "hpu")
#: method names that re-initialise a module (a child's reset called from a parent's)
RESET_METHODS = frozenset(
    {"reset_parameters", "_reset_parameters", "init_weights", "_init_weights"}
)
MODULE_ITERATORS = frozenset({"modules", "named_modules", "children", "named_children"})


def construction(cls: ClassFacts) -> list[MethodFacts]:
    """``__init__`` and every method of the class it calls (``self.m()``), transitively.

    Hooks called from ``__init__`` are included: they run under the meta context too.
    """
    return cls.reachable("__init__")


def hook_methods(cls: ClassFacts, hook: str) -> list[MethodFacts]:
    return cls.reachable(hook) if hook in cls.methods else []


def chain(node: cst.BaseExpression | None) -> list[str] | None:
    """``self.layers[0].weight`` -> ``["self", "layers", "[]", "weight"]``; None if not a chain."""
    parts: list[str] = []
    while node is not None:
        if isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
        elif isinstance(node, cst.Subscript):
            parts.append("[]")
            node = node.value
        elif isinstance(node, cst.Name):
            parts.append(node.value)
            return list(reversed(parts))
        else:
            return None
    return None


#: an own tensor created during construction
Owned = Registration


def owned_tensors(methods: list[MethodFacts], qualify) -> Iterator[Owned]:
    """Parameters and buffers a class creates itself, less registrations of ``None`` and
    ``register_parameter`` calls whose value is neither a Parameter nor a name."""
    for r in tensor_registrations(methods, qualify):
        if isinstance(r.node, cst.Call):
            if r.passed is None or _is_none(r.passed):
                continue
            if r.kind == "parameter" and r.value is None and not isinstance(r.passed, cst.Name):
                continue
        yield r


def own_tensor_names(cls: ClassFacts, qualify) -> set[str]:
    names = {o.attr for o in owned_tensors(list(cls.methods.values()), qualify)}
    for m in cls.methods.values():
        for a in m.assigns:
            if (
                a.target.count(".") == 1
                and a.value is not None
                and meta_tensor(a.value, qualify, m)
            ):
                names.add(a.target.split(".")[1])
    return names


def factory_calls(expr: cst.BaseExpression | None, qualify) -> list[cst.Call]:
    """torch factory calls (``torch.empty/zeros/randn/...``) inside ``expr``."""
    out: list[cst.Call] = []
    if expr is None:
        return out
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            q = qualify(node.func)
            if q in EMPTY_FACTORIES or q in VALUE_FACTORIES or q in RANDOM_FACTORIES:
                out.append(node)
        stack.extend(children(node))
    return out


# -- "does this expression hold a tensor on meta?" -----------------------------------------
def real_device(expr: cst.BaseExpression | None, qualify) -> bool:
    """``"cpu"``, ``torch.device("cuda")``: an explicit real device, written as a literal."""
    if expr is None:
        return False
    if isinstance(expr, cst.SimpleString):
        s = string_value(expr)
        return bool(s) and s.split(":")[0] in REAL_DEVICES
    if isinstance(expr, cst.Call) and qualify(expr.func) == "torch.device" and expr.args:
        return real_device(expr.args[0].value, qualify)
    return False


def meta_tensor(  # noqa: C901 (issue 20: split it)
    expr: cst.BaseExpression | None,
    qualify,
    method: MethodFacts | None,
    own: set[str] | None = None,
    depth: int = 0,
) -> bool:
    """True only for expressions that certainly make a tensor that, under
    ``with torch.device("meta"):``, lives on meta (no data): torch factories without an explicit
    real device, arithmetic and methods on such tensors, locals and loop variables holding them,
    own tensors in ``own``."""
    if expr is None or depth > 6:
        return False
    rec = lambda e: meta_tensor(e, qualify, method, own, depth + 1)  # noqa: E731
    if isinstance(expr, cst.Call):
        q = qualify(expr.func)
        if q is not None and q.startswith("torch."):
            if q in CPU_CONSTRUCTORS or q in NOT_TENSOR_FUNCTIONS:
                return False
            if real_device(keyword(expr, "device"), qualify):
                return False
            if q in EMPTY_FACTORIES or q in VALUE_FACTORIES or q in RANDOM_FACTORIES:
                return True
            if q.startswith(
                ("torch.nn.", "torch.cuda.", "torch.distributed.", "torch.jit.", "torch.utils.")
            ) and not q.startswith("torch.nn.functional."):
                return False
            # any other torch function of a meta tensor: torch.exp(t), torch.cumsum(t, 0)
            return any(rec(a.value) for a in expr.args)
        if isinstance(expr.func, cst.Attribute):
            name = expr.func.attr.value
            if name in NOT_TENSOR_METHODS:
                return False
            if name == "to" and (
                real_device(keyword(expr, "device"), qualify)
                or any(a.keyword is None and real_device(a.value, qualify) for a in expr.args)
            ):
                return False  # t.to("cpu") of a meta tensor also fails, but elsewhere
            if name == "type" and not expr.args:
                return False
            return rec(expr.func.value)
        return False
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in TENSOR_ATTRIBUTES:
            return rec(expr.value)
        if own and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return expr.attr.value in own
        return False
    if isinstance(expr, cst.BinaryOperation):
        return rec(expr.left) or rec(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        if isinstance(expr.operator, cst.Not):
            return False
        return rec(expr.expression)
    if isinstance(expr, cst.Comparison):
        if all(isinstance(t.operator, (cst.Is, cst.IsNot)) for t in expr.comparisons):
            return False
        return rec(expr.left) or any(rec(t.comparator) for t in expr.comparisons)
    if isinstance(expr, cst.Subscript):
        return rec(expr.value) or meta_tensor_sequence(expr.value, qualify, method, own, depth + 1)
    if isinstance(expr, cst.Name) and method is not None:
        if expr.value in method.params:
            return False
        values = method.local_values.get(expr.value)
        if values:
            return all(v is not expr and rec(v) for _, v in values)
        # a loop variable over a tensor: ``for r in torch.linspace(0, 1, n)``
        for _node, targets, it in method.loops:
            if (
                targets == (expr.value,)
                and it is not expr
                and (rec(it) or meta_tensor_sequence(it, qualify, method, own, depth + 1))
            ):
                return True
        return False
    return False


#: calls that return a tuple of tensors: iterating or indexing it gives tensors
SEQUENCE_METHODS = frozenset({"split", "chunk", "unbind", "tensor_split"})
SEQUENCE_FUNCTIONS = frozenset(
    {"torch.split", "torch.chunk", "torch.unbind", "torch.tensor_split", "torch.meshgrid"}
)


def meta_tensor_sequence(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, own=None, depth: int = 0
) -> bool:
    """``t.split(sizes)``, ``torch.meshgrid(a, b)``: a tuple of meta tensors."""
    if not isinstance(expr, cst.Call) or depth > 6:
        return False
    q = qualify(expr.func)
    if q in SEQUENCE_FUNCTIONS:
        return any(meta_tensor(a.value, qualify, method, own, depth + 1) for a in expr.args)
    if (
        q is None
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in SEQUENCE_METHODS
    ):
        return meta_tensor(expr.func.value, qualify, method, own, depth + 1)
    return False


def truthiness_tensors(
    expr: cst.BaseExpression, qualify, method: MethodFacts, own: set[str] | None = None
) -> Iterator[cst.BaseExpression]:
    """Parts of a condition whose truth value Python asks a tensor for (``bool(t)``)."""
    if isinstance(expr, cst.BooleanOperation):
        yield from truthiness_tensors(expr.left, qualify, method, own)
        yield from truthiness_tensors(expr.right, qualify, method, own)
    elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        yield from truthiness_tensors(expr.expression, qualify, method, own)
    elif meta_tensor(expr, qualify, method, own):
        yield expr


# -- in-place writes and children ---------------------------------------------------------
def written_chain(call, qualify) -> list[str] | None:
    """The tensor an in-place call writes, as a chain: ``self.fc.weight.data.normal_()`` ->
    ``["self", "fc", "weight", "data"]``; ``nn.init.zeros_(self.fc.bias)`` -> ``[..., "bias"]``."""
    node = call.node
    # ``torch.nn.init.normal_(t)`` qualifies through the imports: a function, not a method
    if (
        call.method in INPLACE_METHODS
        and isinstance(node.func, cst.Attribute)
        and call.qualname is None
    ):
        return chain(node.func.value)
    func = call.qualname or dotted(node.func) or ""
    last = func.rsplit(".", 1)[-1]
    if (
        last.endswith("_")
        and not last.startswith("_")
        and node.args
        and call.method not in RESET_METHODS
    ):
        if call.receiver and call.receiver.startswith("self") and call.qualname is None:
            # self.something_(x): a method of our own, not an init function
            return None
        return chain(node.args[0].value)
    return None


def child_chain(parts: list[str] | None, own: set[str]) -> bool:
    """``self.fc.weight`` / ``self.layers[0].bias``: a tensor of a child module, not our own."""
    if not parts or parts[0] != "self" or len(parts) < 3:
        return False
    if parts[1] in own and parts[2] in ("data", "[]", "T"):
        return False
    if parts[2] == "data":
        return False
    return True


def module_children(cls: ClassFacts, qualify) -> set[str]:
    """Attributes assigned something that builds a module: ``self.fc = nn.Linear(...)``,
    ``self.blocks = nn.ModuleList(...)``, ``self.norm = norm_layer(dim)``."""
    out: set[str] = set()
    init = construction(cls)
    for m in init:
        for a in m.assigns:
            if a.target.count(".") != 1 or not isinstance(a.value, cst.Call):
                continue
            q = qualify(a.value.func)
            if q in PARAMETER_CLASSES or q in BUFFER_CLASSES or q in PARAMETER_CONTAINERS:
                continue
            if meta_tensor(a.value, qualify, m):
                continue
            name = (q or dotted(a.value.func) or "").rsplit(".", 1)[-1]
            if name[:1].isupper() or name.endswith(("_layer", "_cls", "_module", "layer")):
                out.add(a.target.split(".")[1])
    return out
