"""What ``__init__`` builds: own tensors, where their values come from, where values flow.

Shared by the buffer/in-place/reset/plain-attribute/device rules (ML002, ML003, ML005, ML007,
ML009). Everything works on the facts of :mod:`metalint.static.model`; nothing imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from metalint.static.model import FileFacts, MethodFacts, builds_module, function_facts
from metalint.static.syntax import (
    attribute_name,
    code_children,
    is_false,
    is_none,
    keyword,
    number,
    string_value,
    walk_code,
)
from metalint.static.tensors import (
    const_kind,
    is_legacy_sizes,
    local_value,
    local_writes,
    parameter_value,
    same_tensor,
)
from metalint.vocabulary import (
    BASE_RESET_BUFFERS,
    BUFFER_CLASSES,
    CONVERSION_METHODS,
    CPU_CONSTRUCTORS,
    EMPTY_FACTORIES,
    FILL_FACTORIES,
    LEGACY_CONSTRUCTORS,
    NOT_VALUE_BUILTINS,
    NOT_VALUE_FUNCTIONS,
    PARAMETER_CLASSES,
    RANDOM_DRAWS,
    RANDOM_FACTORIES,
    REAL_DEVICES,
    SCALAR_CASTS,
    SEQUENCE_FUNCTIONS,
    TENSOR_FUNCTIONS,
    TENSOR_LEAVES,
    TENSOR_METHODS,
    VALUE_FACTORIES,
)


@dataclass
class Registration:
    """An own tensor created in construction: ``self.x = nn.Parameter(...)``, a buffer..."""

    attr: str
    kind: str  # "parameter" or "buffer"
    node: cst.CSTNode  # the statement or the register_* call
    value: cst.BaseExpression | None  # the data expression
    method: MethodFacts
    persistent: bool = True
    #: the tensor argument of a ``register_*`` call as written (None for assignments)
    passed: cst.BaseExpression | None = None


def tensor_registrations(methods: list[MethodFacts], qualify) -> Iterator[Registration]:
    """Every own parameter and buffer the methods create, unfiltered: ``self.w =
    nn.Parameter(...)``, ``self.b = nn.Buffer(...)``, ``self.register_buffer("b", t)``,
    ``self.register_parameter("w", p)``, and a registered buffer assigned again (MoCo's
    ``self.queue = normalize(torch.randn(d, k))`` in a ``_setup_queue()``: ``nn.Module``
    stores the new tensor as the buffer). ``value`` is None where the data is unknown."""
    found = list(_tensor_registrations(methods, qualify))
    yield from found
    buffers = {
        r.attr: (r.persistent, r.method)
        for r in found
        if r.kind == "buffer" and type(r.node) is cst.Call
    }
    for method in methods:
        for a in method.assigns:
            if a.target.count(".") != 1 or a.augmented or a.value is None:
                continue
            attr = a.target.split(".")[1]
            # only another method's assignment is surely later (one of the registering
            # method's may be on another branch: monai's ``else: self.causal_mask = ...``)
            if attr not in buffers or buffers[attr][1] is method:
                continue
            if is_none(a.value) or _literal(a.value):
                continue
            if type(a.value) is cst.Call and qualify(same_tensor(a.value).func) in (
                PARAMETER_CLASSES | BUFFER_CLASSES
            ):
                continue
            yield Registration(attr, "buffer", a.node, a.value, method, buffers[attr][0])


def _literal(node: cst.BaseExpression) -> bool:
    """A constant (``0.0``, ``-1``, ``"x"``, ``True``): no tensor, so not the buffer's new value
    (peft's ``self.zeros = 0.0`` on the path that registers no buffer)."""
    if type(node) is cst.UnaryOperation:
        node = node.expression
    if type(node) is cst.Name:
        return node.value in ("True", "False")
    return isinstance(
        node,
        (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString),
    )


def _tensor_registrations(methods: list[MethodFacts], qualify) -> Iterator[Registration]:
    for method in methods:
        for a in method.assigns:
            reg = _assigned_registration(a, method, qualify)
            if reg is not None:
                yield reg
        for call in method.calls:
            reg = _registered(call, method, qualify)
            if reg is not None:
                yield reg


def _assigned_registration(a, method: MethodFacts, qualify) -> Registration | None:
    """``self.w = nn.Parameter(...)`` or ``self.b = nn.Buffer(...)``."""
    if a.target.count(".") != 1 or a.augmented or not type(a.value) is cst.Call:
        return None
    attr = a.target.split(".")[1]
    q = qualify(same_tensor(a.value).func)
    if q in PARAMETER_CLASSES:
        return Registration(attr, "parameter", a.node, parameter_value(a.value, qualify), method)
    if q in BUFFER_CLASSES:
        args = a.value.args
        data = args[0].value if args and args[0].keyword is None else keyword(a.value, "data")
        persistent = not is_false(keyword(a.value, "persistent"))
        return Registration(attr, "buffer", a.node, data, method, persistent)
    return None


def _registered(call, method: MethodFacts, qualify) -> Registration | None:
    """``self.register_buffer("name", value, persistent)`` or ``self.register_parameter``. A
    name made in a loop (e3nn's ``self.register_buffer(f"cg_{ir_1.l}_{ir_2.l}", cg)``) is its
    f-string's text (:func:`attribute_name`): one tensor per value."""
    if call.receiver != "self" or call.method not in ("register_buffer", "register_parameter"):
        return None
    args = call.node.args
    attr = (string_value(args[0].value) or attribute_name(args[0].value)) if args else None
    if not attr:
        return None
    value = (
        args[1].value
        if len(args) >= 2 and args[1].keyword is None
        else keyword(call.node, "tensor" if call.method == "register_buffer" else "param")
    )
    if call.method == "register_parameter":
        data = parameter_value(value, qualify)
        return Registration(attr, "parameter", call.node, data, method, passed=value)
    p = keyword(call.node, "persistent")
    if p is None and len(args) >= 3 and args[2].keyword is None:
        p = args[2].value
    return Registration(attr, "buffer", call.node, value, method, not is_false(p), value)


def _module_local(name: str, method: MethodFacts, qualify, facts: FileFacts) -> cst.Call | None:
    """The constructor call when the local ``name`` of ``method`` (not an argument) is assigned
    once, a module the file builds (``conv = nn.Conv1d(...)``); None otherwise."""
    values = method.local_values.get(name, ())
    if len(values) != 1 or name in method.arguments:
        return None
    made = values[0][1]
    if type(made) is not cst.Call or not builds_module(qualify(made.func), facts):
        return None
    return made


def borrowed_tensor(
    expr: cst.BaseExpression | None, method: MethodFacts, qualify, facts: FileFacts
) -> cst.Call | None:
    """The constructor call of a module that ``method`` builds in a local only to take a tensor
    of it, which ``expr`` is: ``conv.weight`` after ``conv = nn.Conv1d(...)``, the local read
    nowhere else than as ``conv.weight`` / ``conv.bias`` (so the module is thrown away). The
    tensor's value is that module's init, run while it was built; no hook of the class that
    keeps the tensor re-creates it. None for anything else (a module also kept as a child
    restores its own tensors)."""
    if not (
        type(expr) is cst.Attribute
        and type(expr.value) is cst.Name
        and expr.attr.value in TENSOR_LEAVES
        and expr.value.value != "self"
    ):
        return None
    name = expr.value.value
    made = _module_local(name, method, qualify, facts)
    if made is None:
        return None
    leaves = {
        id(n.value)
        for n in walk_code(method.node.body)
        if type(n) is cst.Attribute and n.attr.value in TENSOR_LEAVES
    }
    targets = {
        id(t.target)
        for n in walk_code(method.node.body)
        if type(n) is cst.Assign
        for t in n.targets
    }
    for n in walk_code(method.node.body):
        if type(n) is cst.Name and n.value == name and id(n) not in leaves | targets:
            return None
    return made


def attached_child(
    name: str, method: MethodFacts, qualify, facts: FileFacts
) -> tuple[str, cst.Call] | None:
    """``(attribute, constructor call)`` when the local ``name`` of ``method`` holds a module it
    builds (``fc1 = nn.Linear(...)``) and then makes a child of the class: ``self.mlp =
    nn.Sequential(fc1, act)``, ``self.fc = fc1``, ``self.layers.append(fc1)``,
    ``self.add_module("fc", fc1)``. What ``method`` writes into its tensors before (or after)
    is the child's: its own hook restores them. None for anything else."""
    made = _module_local(name, method, qualify, facts)
    if made is None:
        return None

    def holds(expr) -> bool:
        return any(type(n) is cst.Name and n.value == name for n in walk_code(expr))

    for a in method.assigns:
        if a.target.count(".") == 1 and a.value is not None and not a.augmented:
            v = a.value
            if (type(v) is cst.Name and v.value == name) or (
                type(v) is cst.Call and builds_module(qualify(v.func), facts) and holds(v)
            ):
                return a.target.split(".")[1], made
    attr = next(filter(None, (_child_by_call(call, holds) for call in method.calls)), None)
    return (attr, made) if attr else None


def _child_by_call(call, holds) -> str | None:
    """The attribute a call makes a child of what ``holds`` tells: ``self.add_module("fc",
    fc1)``, ``self.layers.append(fc1)``."""
    receiver = call.receiver or ""
    args = call.node.args
    if receiver == "self" and call.method == "add_module" and len(args) >= 2:
        attr = string_value(args[0].value)
        return attr if attr and holds(args[1].value) else None
    if (
        receiver.startswith("self.")
        and receiver.count(".") == 1
        and call.method in ("append", "extend", "insert")
        and any(holds(a.value) for a in args)
    ):
        return receiver[5:]
    return None


def restored_by_torch_base(bases: list[str], attr: str, value, qualify) -> bool:
    """Does the torch base's own hook give buffer ``attr`` the value ``value`` gives it: a
    ``BatchNorm2d`` subclass registering ``running_var`` again as ``torch.ones(c)``
    (``reset_running_stats()`` fills it with ones)? (:data:`BASE_RESET_BUFFERS`)"""
    want = next((BASE_RESET_BUFFERS[b].get(attr) for b in bases if b in BASE_RESET_BUFFERS), None)
    if want is None or type(value) is not cst.Call:
        return False
    q = qualify(value.func)
    if q in FILL_FACTORIES and q not in ("torch.full", "torch.full_like"):
        return FILL_FACTORIES[q] == want
    if q == "torch.tensor" and value.args:
        n = number(value.args[0].value)
        return n is not None and {0.0: "zeros", 1.0: "ones"}.get(n) == want
    return False


def argument_of(expr: cst.BaseExpression | None, method: MethodFacts) -> str | None:
    """The parameter of ``method`` whose tensor ``expr`` hands on as the caller passed it:
    ``category`` (never re-assigned in the method), or a conversion of it
    (``category.long()``, ``popularity.to(dtype)``); None for anything computed.
    torch-geometric's ``self.register_buffer('category', category, persistent=False)``."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in CONVERSION_METHODS
    ):
        expr = expr.func.value
    if (
        isinstance(expr, cst.Name)
        and expr.value != "self"
        and expr.value in method.params
        and not method.local_values.get(expr.value)
    ):
        return expr.value
    return None


def registrations(methods: list[MethodFacts], qualify) -> Iterator[Registration]:
    """:func:`tensor_registrations` less ``nn.Parameter()`` assignments with no data and
    ``self.register_parameter("res", None)`` (PyG's "no such parameter" in a branch)."""
    for r in tensor_registrations(methods, qualify):
        if r.kind == "parameter" and not isinstance(r.node, cst.Call) and r.value is None:
            continue
        if r.kind == "parameter" and r.passed is not None and is_none(r.passed):
            continue
        yield r


def computed(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts, depth: int = 0
) -> str | None:
    """What a buffer's value is: "random", "value" (computed), "empty" or None (unknown).

    Broader than :func:`value_kind`: a call to any function that is not an uninitialised
    factory (``gen_relative_position_index(...)``, ``self._compute_inv_freq()``,
    ``rope_init_fn(config, device)``) computes a value.
    """
    if expr is None or depth > 3 or is_none(expr):
        return None
    found: set[str] = set()
    for node in walk_code(expr):
        if type(node) is cst.Call:
            found.add(_call_kind(node, qualify, method))
        elif type(node) is cst.Name and depth < 3:
            # every value the local is given (``rel_pos = rel_pos[0] * w + rel_pos[1]`` is
            # still made from the first ``rel_pos``)
            found.update(
                computed(inner, qualify, method, depth + 1)
                for _stmt, inner in method.local_values.get(node.value, ())
                if inner is not expr
            )
            found.update(local_writes(node.value, qualify, method))
    for kind in ("random", "value", "empty"):
        if kind in found:
            return kind
    return None


def _call_kind(node: cst.Call, qualify, facts: MethodFacts | None = None) -> str | None:
    """What one call inside a buffer's value contributes: "empty", "random", "value" or None
    (it moves or describes a tensor: ``.float()``, ``torch.finfo``, ``len``)."""
    q = qualify(node.func)
    if q in EMPTY_FACTORIES:
        return "empty"
    if q in LEGACY_CONSTRUCTORS:
        return "empty" if is_legacy_sizes(node, facts) else "value"
    method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
    if q in RANDOM_FACTORIES:
        return "random"
    if q in VALUE_FACTORIES or q in TENSOR_FUNCTIONS:
        return "value"
    if method in CONVERSION_METHODS:
        return None
    if method in RANDOM_DRAWS:
        return "random"
    if q in NOT_VALUE_FUNCTIONS:
        return None
    if isinstance(node.func, cst.Name) and node.func.value in NOT_VALUE_BUILTINS:
        return None
    return "value"


# -- "is this clearly a tensor?" ------------------------------------------------------------
def is_tensor(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, depth: int = 0, extra=None
) -> bool:
    """True only for expressions that certainly evaluate to a ``torch.Tensor``.

    ``extra(node)`` may vouch for leaves this module cannot know (a registered buffer, a
    function of the same file annotated ``-> torch.Tensor``).
    """
    if expr is None or depth > 4:
        return False
    if extra is not None and extra(expr):
        return True
    if type(expr) is cst.Call:
        return _tensor_call(expr, qualify, method, depth, extra)
    if type(expr) is cst.BinaryOperation:
        return is_tensor(expr.left, qualify, method, depth + 1, extra) or is_tensor(
            expr.right, qualify, method, depth + 1, extra
        )
    if type(expr) is cst.UnaryOperation:
        return is_tensor(expr.expression, qualify, method, depth + 1, extra)
    if type(expr) is cst.Subscript:
        return is_tensor(expr.value, qualify, method, depth + 1, extra)
    if type(expr) is cst.Name and method is not None:
        if method.holds_argument(expr):
            return False  # what the caller passed
        values = method.local_values.get(expr.value)
        # every assignment of the local must be a tensor (``x = None`` on a branch: unsure)
        return bool(values) and all(
            v is not expr and is_tensor(v, qualify, method, depth + 1, extra) for _, v in values
        )
    return False


#: torch calls that certainly make a tensor
_TENSOR_MAKERS = (
    VALUE_FACTORIES | RANDOM_FACTORIES | EMPTY_FACTORIES | TENSOR_FUNCTIONS | LEGACY_CONSTRUCTORS
)


def _tensor_call(expr: cst.Call, qualify, method, depth: int, extra) -> bool:
    """Does the call certainly make a tensor: a torch factory or function, or a tensor
    method of a tensor?"""
    q = qualify(expr.func)
    if q is not None and q.startswith("torch."):
        # not the tuples of tensors of ``torch.split``
        return q not in SEQUENCE_FUNCTIONS and q in _TENSOR_MAKERS
    if type(expr.func) is cst.Attribute and expr.func.attr.value in TENSOR_METHODS:
        return is_tensor(expr.func.value, qualify, method, depth + 1, extra)
    return False


#: methods of a tensor that give a Python number (``x.item()``, ``x.numel()``; ``x.size(0)``
#: with an argument)
NUMBER_METHODS = frozenset({"item", "numel", "nelement", "dim", "ndimension", "element_size"})


def is_number(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, depth: int = 0
) -> bool:
    """True only for expressions that certainly evaluate to a Python number, never a tensor: a
    literal, ``x.item()`` (vector-quantize-pytorch's ``self._levels.prod().item()``),
    ``x.shape[-1]`` / ``x.size(0)`` / ``x.numel()`` / ``x.ndim`` (neuralop's
    ``self.n_out = grid_out.shape[-1]``), ``int(...)`` / ``float(...)`` / ``len(...)``, a
    ``math`` function, arithmetic of those, an argument annotated ``int``/``float`` and read as
    the caller passed it, a local every value of which is one."""
    if expr is None or depth > 4:
        return False
    t = type(expr)
    if t in (cst.Integer, cst.Float, cst.Imaginary):
        return True
    if t is cst.Call:
        return _number_call(expr, qualify)
    if t is cst.Subscript:
        return _shape_item(expr)
    if t is cst.Attribute:
        return expr.attr.value == "ndim"
    if t is cst.BinaryOperation:
        return is_number(expr.left, qualify, method, depth + 1) and is_number(
            expr.right, qualify, method, depth + 1
        )
    if t is cst.UnaryOperation:
        return is_number(expr.expression, qualify, method, depth + 1)
    if t is cst.Name and method is not None:
        if method.holds_argument(expr):
            return _annotated_number(expr.value, method)
        values = method.local_values.get(expr.value)
        return bool(values) and all(
            v is not expr and is_number(v, qualify, method, depth + 1) for _, v in values
        )
    return False


def _number_call(expr: cst.Call, qualify) -> bool:
    """``x.item()``, ``x.size(0)``, ``int(...)``, ``len(...)``, a ``math`` function."""
    f = expr.func
    if type(f) is cst.Attribute and not any(a.star for a in expr.args):
        if f.attr.value in NUMBER_METHODS:
            return True
        if f.attr.value == "size" and len(expr.args) == 1 and expr.args[0].keyword is None:
            return True
    if type(f) is cst.Name and f.value in (*SCALAR_CASTS, "len") and qualify(f) is None:
        return True
    q = qualify(f) or ""
    return q.startswith("math.") and q != "math.nan"


def _shape_item(expr: cst.Subscript) -> bool:
    """``x.shape[-1]``, ``x.size()[0]``: an item of a tensor's shape."""
    v = expr.value
    shape = (type(v) is cst.Attribute and v.attr.value == "shape") or (
        type(v) is cst.Call
        and type(v.func) is cst.Attribute
        and v.func.attr.value == "size"
        and not v.args
    )
    return shape and all(type(e.slice) is cst.Index for e in expr.slice)


def _annotated_number(name: str, method: MethodFacts) -> bool:
    params = method.node.params
    for p in (*params.params, *params.kwonly_params, *params.posonly_params):
        if p.name.value == name and p.annotation is not None:
            a = p.annotation.annotation
            return type(a) is cst.Name and a.value in ("int", "float")
    return False


def off_meta(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, fns=None, depth: int = 0
) -> bool:
    """True only for tensors that certainly are not on meta under ``with torch.device("meta"):``:
    a legacy constructor or ``torch.from_numpy`` (``torch.FloatTensor(table)`` builds on the
    CPU), methods and indexing of one that keep its device, locals every value of which is one,
    and calls of a function of the same file that returns one (``fns``, a
    :class:`TensorFunctions`)."""
    if expr is None or depth > 4:
        return False
    if isinstance(expr, cst.Call):
        q = qualify(expr.func)
        if q in LEGACY_CONSTRUCTORS or q in CPU_CONSTRUCTORS:
            return True
        if fns is not None and isinstance(expr.func, cst.Name):
            return fns.off_meta(expr.func.value)
        # t.to(x) / t.type_as(m) may move it (onto meta)
        return (
            isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in TENSOR_METHODS
            and expr.func.attr.value not in ("to", "type_as")
            and off_meta(expr.func.value, qualify, method, fns, depth + 1)
        )
    if isinstance(expr, cst.Subscript):
        return off_meta(expr.value, qualify, method, fns, depth + 1)
    if isinstance(expr, cst.Name) and method is not None:
        values = method.local_values.get(expr.value)
        return bool(values) and all(
            v is not expr and off_meta(v, qualify, method, fns, depth + 1) for _, v in values
        )
    return False


# -- devices --------------------------------------------------------------------------------
def real_device(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, depth: int = 0
) -> str | None:
    """``"cpu"`` for ``"cpu"``, ``torch.device("cuda:0")``, a local holding one; else None."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, cst.SimpleString):
        s = string_value(expr)
        if s and s.split(":")[0] in REAL_DEVICES:
            return s
        return None
    if isinstance(expr, cst.Call) and qualify(expr.func) == "torch.device" and expr.args:
        return real_device(expr.args[0].value, qualify, method, depth + 1)
    if isinstance(expr, cst.Name) and method is not None and expr.value not in method.params:
        values = method.local_values.get(expr.value)
        if values and all(real_device(v, qualify, method, depth + 1) for _, v in values):
            return real_device(values[-1][1], qualify, method, depth + 1)
    return None


# -- in-place initialisation ----------------------------------------------------------------


def creation_kind(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None = None
) -> str | None:
    """How a creation value sets a tensor: "ones" (``torch.ones``), "zeros", "const"
    (``v * torch.ones``, ``torch.full``), "random", or None (unknown, computed, empty)."""
    if expr is None:
        return None
    if isinstance(expr, cst.Name) and method is not None:
        inner = local_value(method, expr.value)
        return creation_kind(inner, qualify, None) if inner is not None else None
    if isinstance(expr, cst.Call):
        return _created_by_call(expr, qualify, method)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _created_by_product(expr, qualify, method)
    return None


def _created_by_call(expr: cst.Call, qualify, method: MethodFacts | None) -> str | None:
    """:func:`creation_kind` of ``torch.ones(...)``, ``torch.full(...)``, ``torch.randn(...)``,
    ``torch.ones(...).float()``."""
    q = qualify(expr.func)
    fill = FILL_FACTORIES.get(q)
    if fill == "const":
        v = expr.args[1].value if len(expr.args) > 1 else keyword(expr, "fill_value")
        return const_kind(v)
    if fill is not None:
        return fill
    if q in RANDOM_FACTORIES:
        return "random"
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in CONVERSION_METHODS:
        return creation_kind(expr.func.value, qualify, method)
    return None


def _created_by_product(
    expr: cst.BinaryOperation, qualify, method: MethodFacts | None
) -> str | None:
    """:func:`creation_kind` of ``v * torch.ones(...)``, ``torch.zeros(...) * x``."""
    left = creation_kind(expr.left, qualify, method)
    right = creation_kind(expr.right, qualify, method)
    for side, other in ((left, expr.right), (right, expr.left)):
        if side == "ones" and not isinstance(other, cst.Call):
            return "const"
        if side == "zeros":
            return "zeros"
        if side == "random" and not isinstance(other, cst.Call):
            return "random"
    return None


class TensorFunctions:
    """Top-level functions of a file that certainly make a tensor: annotated
    ``-> torch.Tensor``, or unannotated with every ``return`` a tensor (``is_tensor``, with the
    function's own locals), e.g. ``def build_mask(n): return torch.ones(n, n).tril()``.
    ``name in fns`` judges a function the first time it is asked about;
    ``fns.off_meta(name)`` whether every ``return`` is a tensor :func:`off_meta`."""

    def __init__(self, module: cst.Module, qualify, facts) -> None:
        self._defs = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        self._qualify = qualify
        self._facts = facts
        self._known: dict[str, bool] = {}
        self._off_meta: dict[str, bool] = {}

    def off_meta(self, name: str) -> bool:
        known = self._off_meta.get(name)
        if known is None:
            self._off_meta[name] = False  # a recursive helper does not vouch for itself
            fn = self._defs.get(name)
            values = _returned_values(fn) if fn is not None else None
            local = function_facts(fn, self._facts) if values else None
            known = self._off_meta[name] = bool(values) and all(
                off_meta(v, self._qualify, local, self) for v in values
            )
        return known

    def __contains__(self, name: str) -> bool:
        known = self._known.get(name)
        if known is None:
            fn = self._defs.get(name)
            known = self._known[name] = fn is not None and self._makes_tensor(fn)
        return known

    def _makes_tensor(self, fn: cst.FunctionDef) -> bool:
        if fn.returns is not None:
            ann = fn.returns.annotation
            if isinstance(ann, cst.SimpleString):
                return (string_value(ann) or "") in ("torch.Tensor", "Tensor")
            return self._qualify(ann) == "torch.Tensor"
        values = _returned_values(fn)
        if not values:
            return False
        local = function_facts(fn, self._facts)
        return all(is_tensor(v, self._qualify, local) for v in values)


def top_function(module: cst.Module | None, name: str) -> cst.FunctionDef | None:
    """The undecorated top-level function ``name`` of ``module``, or None."""
    for s in module.body if module is not None else ():
        if isinstance(s, cst.FunctionDef) and s.name.value == name and not s.decorators:
            return s
    return None


def repackages_arguments(module: cst.Module, name: str) -> bool:
    """Is ``name`` a top-level function of ``module`` that only hands back its arguments, as
    they are or in a tuple or list, whatever its tests (vit-pytorch's ``def pair(t): return t
    if isinstance(t, tuple) else (t, t)``)? Its result is a tensor only where an argument is
    one. It must not assign to any name."""
    fn = top_function(module, name)
    values = _returned_values(fn) if fn is not None else None
    if not values:
        return False
    params = {p.name.value for p in walk_code(fn.params) if isinstance(p, cst.Param)}
    if any(isinstance(n, _BINDING) for n in walk_code(fn.body)):
        return False

    def handed(v) -> bool:
        if isinstance(v, cst.Name):
            return v.value in params
        if isinstance(v, (cst.Tuple, cst.List)):
            return all(
                not isinstance(e, cst.StarredElement) and handed(e.value) for e in v.elements
            )
        if isinstance(v, cst.IfExp):
            return handed(v.body) and handed(v.orelse)
        return False

    return all(v is not None and handed(v) for v in values)


_BINDING = (
    cst.Assign,
    cst.AugAssign,
    cst.AnnAssign,
    cst.NamedExpr,
    cst.For,
    cst.With,
    cst.Global,
    cst.Nonlocal,
    cst.Import,
    cst.ImportFrom,
    cst.FunctionDef,
    cst.ClassDef,
)


def _returned_values(fn: cst.FunctionDef) -> list[cst.BaseExpression | None] | None:
    """What each ``return`` of ``fn`` returns (None for a bare return); None for a generator."""
    values: list[cst.BaseExpression | None] = []
    stack: list[cst.CSTNode] = [fn.body]
    while stack:
        node = stack.pop()
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        if type(node) is cst.Yield:
            return None
        if type(node) is cst.Return:
            values.append(node.value)
        stack.extend(code_children(node))
    return values
