"""What a PyTorch expression does to tensors: shared vocabulary of the rules.

``value_kind(expr)`` tells whether an expression makes a tensor whose *value* matters
(``torch.ones``, ``v * torch.ones(d)``, ``torch.randn``, ``torch.tensor([...])``), an
uninitialised one (``torch.empty``), or nothing we know of. ``writes(call)`` tells which own
tensor an in-place call initialises (``nn.init.zeros_(self.w)``, ``self.w.data.fill_(1)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from metalint.static.model import CallSite, MethodFacts
from metalint.static.names import dotted
from metalint.static.results import HELPER_MARK
from metalint.static.syntax import (
    attribute_name,
    chain,
    keyword,
    number,
    self_attr,
    string_value,
    walk_code,
)
from metalint.vocabulary import (
    CONCATENATIONS,
    EMPTY_FACTORIES,
    FILL_FACTORIES,
    HOST_RANDOM_MODULES,
    INIT_KIND,
    INIT_METHOD_ALIASES,
    INIT_SIGNATURES,
    INIT_WRAPPERS,
    INPLACE_METHODS,
    LEGACY_CONSTRUCTORS,
    LIBRARY_INITS,
    PARAMETER_CLASSES,
    RANDOM_DRAWS,
    RANDOM_FACTORIES,
    REGISTER_METHODS,
    RESET_METHODS,
    VALUE_FACTORIES,
    VIEW_METHODS,
)


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


def random_draw(qualname: str | None) -> bool:
    """Does a call of ``qualname`` draw random numbers: a torch random factory, or a function
    of numpy's or Python's random module (normflows ``GaussianMixture``:
    ``loc = np.random.randn(n_modes, dim)``; a hook drawing it again gives other values)?"""
    return qualname is not None and (
        qualname in RANDOM_FACTORIES or qualname.startswith(HOST_RANDOM_MODULES)
    )


_SEQUENCES = (cst.List, cst.Tuple, cst.ListComp, cst.SimpleString, cst.FormattedString)


def int_param(method: MethodFacts | None, name: str) -> bool:
    """Is ``name`` a parameter of ``method`` annotated ``int``?"""
    if method is None:
        return False
    ps = method.node.params
    p = next((p for p in (*ps.params, *ps.kwonly_params) if p.name.value == name), None)
    return p is not None and p.annotation is not None and dotted(p.annotation.annotation) == "int"


def certain_size(e: cst.BaseExpression, method: MethodFacts | None) -> bool:
    """Is ``e`` certainly an integer (a size, not data): a literal, an arithmetic of one
    (``self.heads * out``), a parameter annotated ``int``?"""
    if isinstance(e, cst.Integer):
        return True
    if isinstance(e, cst.BinaryOperation) and isinstance(
        e.operator, (cst.Multiply, cst.Add, cst.FloorDivide, cst.Subtract)
    ):
        if any(isinstance(x, _SEQUENCES) for x in walk_code(e)):
            return False
        return certain_size(e.left, method) or certain_size(e.right, method)
    return isinstance(e, cst.Name) and int_param(method, e.value)


def legacy_sizes(call: cst.Call, method: MethodFacts | None = None) -> bool | None:
    """What the arguments of a legacy constructor (``torch.Tensor(...)``) are: True, sizes
    for certain (none; several; a literal integer or arithmetic of one; a parameter annotated
    ``int``): ``torch.empty`` of them is the same tensor; False, data (a sequence literal or a
    string); None, cannot tell (one name, call or attribute; a starred or keyword argument)."""
    args = call.args
    if not args:
        return True
    if any(isinstance(a.value, _SEQUENCES) for a in args):
        return False
    if any(a.keyword is not None or a.star for a in args):
        return None
    if len(args) > 1 or certain_size(args[0].value, method):
        return True
    return None


def is_legacy_sizes(call: cst.Call, method: MethodFacts | None = None) -> bool:
    """Does ``torch.Tensor(...)`` allocate uninitialised memory, as ``torch.empty`` does
    (``torch.Tensor(3, 4)``, ``torch.Tensor(self.dim)``, ``torch.Tensor(*shape)``), rather
    than copy data (``torch.Tensor([1., 2.])``, ``torch.Tensor(values)``)? Where
    :func:`legacy_sizes` cannot tell, an attribute or a starred argument counts as sizes and a
    name or a call as data. The fix rewrites only sizes for certain."""
    sure = legacy_sizes(call, method)
    if sure is not None:
        return sure
    first = call.args[0]
    return first.star == "*" or not isinstance(first.value, (cst.Call, cst.Name))


#: what a value is made of, strongest first: a draw, a value, uninitialised memory
_KIND_ORDER = ("random", "value", "empty")


def _call_kind(node: cst.Call, qualify, method: MethodFacts | None) -> str | None:
    """What the call ``node`` creates: "empty", "random", "value" or None."""
    q = qualify(node.func)
    # ``torch.Tensor(in, out)``: uninitialised, eagerly too; one argument that may be
    # data (``torch.Tensor(self.melW)``, ``torch.Tensor(scalar["mean"])``) is a value
    sizes = q in LEGACY_CONSTRUCTORS and legacy_sizes(node, method) is True
    if q in EMPTY_FACTORIES or sizes:
        return "empty"
    if random_draw(q):
        return "random"
    if q in VALUE_FACTORIES:
        return "value"
    if type(node.func) is cst.Attribute and node.func.attr.value in INPLACE_METHODS:
        return "random" if node.func.attr.value.endswith(RANDOM_DRAWS) else "value"
    return None


def _local_kinds(name: str, expr, qualify, method: MethodFacts, depth: int) -> set[str]:
    """Every value the local ``name`` is given: ``rel_pos = (pos[0] - pos[1]).abs()`` then
    ``rel_pos = rel_pos[0] * w + rel_pos[1]`` is still made from ``pos``."""
    kinds = (
        value_kind(inner, qualify, method, depth + 1)
        for _stmt, inner in method.local_values.get(name, ())
        if inner is not expr
    )
    return {k for k in kinds if k} | local_writes(name, qualify, method)


def local_writes(name: str, qualify, method: MethodFacts) -> frozenset[str]:
    """What the in-place writes of the local ``name`` (one the method assigns, not an
    argument) give it: "random" for a draw, "value" for any other write. vector-quantize's
    ``rand_projs = torch.empty(h, d, e)``, then ``nn.init.xavier_normal_(rand_projs)``, then
    ``register_buffer("rand_projs", rand_projs)``: a drawn value, not uninitialised memory."""
    if not method.local_values.get(name):
        return frozenset()
    writes = method.__dict__.get("_local_writes")
    if writes is None:
        writes = method.__dict__["_local_writes"] = {}
        for call in method.calls:
            w = inplace_write(call.node, qualify)
            if w is not None and len(w.chain) == 1:
                kind = "random" if w.kind == "random" else "value"
                writes[w.chain[0]] = writes.get(w.chain[0], frozenset()) | {kind}
    return writes.get(name, frozenset())


def value_kind(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None = None, depth: int = 0
) -> str | None:
    """ "random", "value", "empty" or None (nothing known is created)."""
    if expr is None or depth > 3:
        return None
    found: set[str] = set()
    for node in walk_code(expr):
        if type(node) is cst.Call:
            kind = _call_kind(node, qualify, method)
            if kind:
                found.add(kind)
        elif type(node) is cst.Name and method is not None and depth < 3:
            found |= _local_kinds(node.value, expr, qualify, method, depth)
    return next((k for k in _KIND_ORDER if k in found), None)


def all_zeros(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, depth=0
) -> bool:
    """Is every element of the tensor ``expr`` makes zero? ``torch.zeros(n)``,
    ``t.new_zeros(n)``, ``nn.Parameter`` of one, a concatenation of such (Blip-2's
    ``torch.cat((q_bias, torch.zeros_like(v_bias), v_bias))`` with ``q_bias =
    nn.Parameter(torch.zeros(d))``), or a local every value of which is one (a ``None`` it is
    given on another branch makes nothing)."""
    if expr is None or depth > 4:
        return False
    if type(expr) is cst.Name and method is not None:
        values = [v for _stmt, v in method.local_values.get(expr.value, ()) if v is not expr]
        made = [v for v in values if not (type(v) is cst.Name and v.value == "None")]
        return bool(made) and all(all_zeros(v, qualify, method, depth + 1) for v in made)
    if type(expr) is not cst.Call:
        return False
    q = qualify(expr.func)
    if FILL_FACTORIES.get(q) == "zeros":
        return True
    if type(expr.func) is cst.Attribute and expr.func.attr.value == "new_zeros":
        return True
    if q in PARAMETER_CLASSES:
        return all_zeros(parameter_value(expr, qualify), qualify, method, depth + 1)
    if q in CONCATENATIONS and expr.args and type(expr.args[0].value) in (cst.Tuple, cst.List):
        parts = [e.value for e in expr.args[0].value.elements if type(e) is cst.Element]
        return bool(parts) and all(all_zeros(p, qualify, method, depth + 1) for p in parts)
    return False


def same_tensor(call: cst.Call) -> cst.Call:
    """The call that made the tensor ``call`` returns: ``nn.Parameter(grid)`` for
    ``nn.Parameter(grid).requires_grad_(False)`` (pytorch-forecasting's KAN layer), which
    changes a flag in place and returns the same tensor."""
    while (
        type(call.func) is cst.Attribute
        and call.func.attr.value == "requires_grad_"
        and type(call.func.value) is cst.Call
    ):
        call = call.func.value
    return call


def parameter_value(expr: cst.BaseExpression | None, qualify) -> cst.BaseExpression | None:
    """The data argument of ``nn.Parameter(data, ...)`` (also with ``.requires_grad_(..)``
    after it: :func:`same_tensor`), or None if ``expr`` is not one."""
    if type(expr) is cst.Call:
        expr = same_tensor(expr)
    if type(expr) is cst.Call and qualify(expr.func) in PARAMETER_CLASSES:
        for arg in expr.args:
            if arg.keyword is None or arg.keyword.value == "data":
                return arg.value
    return None


@dataclass(frozen=True)
class Write:
    """An in-place write of a tensor: ``nn.init.zeros_(self.fc.bias)``, ``self.w.data.fill_(v)``.

    ``chain`` is the written expression (``("self", "fc", "bias")``; ``"[]"`` for a subscript),
    ``kind`` how its values are set (``"ones"``, ``"zeros"``, ``"const"``, ``"random"``,
    ``"eye"``, ``"dirac"``; ``"storage"`` for ``t.set_(...)``, which swaps the storage; None
    when the new values come from the old ones or another tensor, as ``mul_``/``copy_`` do),
    ``value`` the value argument (``v`` of ``t.fill_(v)`` / ``constant_(t, v)``), ``name`` the
    in-place function or method.
    """

    chain: tuple[str, ...]
    kind: str | None
    value: cst.BaseExpression | None
    name: str
    method: bool  # ``t.fill_(v)`` rather than ``constant_(t, v)``

    @property
    def target(self) -> str | None:
        """``self.fc.bias``; None when the chain indexes (``self.w[0]``)."""
        return None if "[]" in self.chain else ".".join(self.chain)

    @property
    def own(self) -> str | None:
        """The attribute of ``self`` the write lands in (``fc`` for ``self.fc.bias``)."""
        if len(self.chain) > 1 and self.chain[0] == "self" and self.chain[1] != "[]":
            return self.chain[1]
        return None


def _init_kind(name: str, value: cst.BaseExpression | None) -> str | None:
    if name == "set_":
        return "storage"
    kind = INIT_KIND.get(name)
    return const_kind(value) if kind == "const" else kind


def const_kind(value: cst.BaseExpression | None) -> str:
    """ "ones", "zeros" or "const": what setting every element to ``value`` gives."""
    n = number(value)
    return "ones" if n == 1.0 else "zeros" if n == 0.0 else "const"


def inplace_write(call: cst.Call, qualify) -> Write | None:
    """Which tensor ``call`` writes in place, if it is an in-place write; the one answer every
    rule and codemod uses.

    - a tensor method of :data:`INPLACE_METHODS` on an expression: ``self.w.data.normal_()``,
      ``self.w.set_(t)`` (kind ``"storage"``); a chained ``t.normal_().mul_(2)`` answers for
      ``normal_`` only (``mul_`` writes the result of a call, which the inner call reports);
    - a function whose name ends in one underscore, PyTorch's mark of "mutates its first
      argument": ``nn.init.zeros_(self.w)``, timm's ``trunc_normal_(self.pos)``, a
      ``my_helper_(self.w)`` of the project;
    - not a method of the module itself, ``self.scale_(self.w)``: what it writes is in its
      body, which the caller follows as its own method; nor a reset hook or a dunder;
    - a write of a view writes its base (``xavier_normal_(self.att.view(2, h, d))``), and a
      call's ``out=`` tensor is written (``torch.arange(1, n + 1, out=self.freq)``, kind None).

    A tensor handed to a helper function (PyG's ``glorot(self.att_src)``) is answered across
    files: :func:`helper_writes` and :func:`argument_writes`.
    """
    func = call.func
    qualname = qualify(func)
    receiver = _written_chain(func.value) if type(func) is cst.Attribute else None
    if (
        receiver is not None
        and qualname is None
        and func.attr.value in INPLACE_METHODS
        and receiver[-1] != "init"  # ``init.constant_(t, v)`` of an unresolved ``nn.init``
    ):
        parts = receiver
        name = func.attr.value
        value = call.args[0].value if call.args else None
        return Write(tuple(parts), _init_kind(name, value), value, name, True)
    if qualname in LIBRARY_INITS:
        return _library_write(call, qualname)
    name = (qualname or dotted(func) or "").rsplit(".", 1)[-1]
    if not name.endswith("_") and keyword(call, "out") is not None:
        return _out_write(call)
    if (
        not name.endswith("_")
        or name.endswith("__")
        or name in RESET_METHODS
        or not call.args
        or (qualname is None and receiver is not None and receiver[0] == "self")
    ):
        return None
    parts = _written_chain(call.args[0].value)
    if parts is None:
        return None
    value = call.args[1].value if len(call.args) > 1 else keyword(call, "val")
    return Write(tuple(parts), _init_kind(name, value), value, name, False)


def _library_write(call: cst.Call, qualname: str) -> Write | None:
    """The write of an init function of :data:`LIBRARY_INITS` (PyG's ``glorot(self.weight)``)."""
    at, fill, kind = LIBRARY_INITS[qualname]
    args = [a for a in call.args if a.keyword is None and not a.star]
    if len(args) <= at or len(args) != len(call.args) and len(args) <= max(at, fill or 0):
        return None
    parts = _written_chain(args[at].value)
    if parts is None:
        return None
    value = args[fill].value if fill is not None and len(args) > fill else None
    if kind == "const":
        kind = const_kind(value)
    return Write(tuple(parts), kind, value, qualname.rsplit(".", 1)[-1], False)


def _written_chain(expr: cst.BaseExpression) -> list[str] | None:
    """The chain a write of ``expr`` lands in: ``self.att`` for ``self.att.view(2, h, d)`` (a
    view shares the storage) and for ``self.att[dim * 2 :]`` (basic slicing is a view too;
    an index that may be a tensor copies, and its write would land nowhere); None when
    ``expr`` is not a chain or a view of one."""
    while (
        type(expr) is cst.Call
        and type(expr.func) is cst.Attribute
        and expr.func.attr.value in VIEW_METHODS
    ) or (type(expr) is cst.Subscript and all(map(_basic_index, expr.slice))):
        expr = expr.func.value if type(expr) is cst.Call else expr.value
    named = _getattr_chain(expr)
    return named if named is not None else chain(expr)


def _basic_index(e: cst.SubscriptElement) -> bool:
    """A slice (``a:b``), an integer literal, ``...`` or ``None``: indexing that gives a view."""
    s = e.slice
    if type(s) is cst.Slice:
        return True
    v = s.value
    return type(v) in (cst.Integer, cst.Ellipsis) or (type(v) is cst.Name and v.value == "None")


def _getattr_chain(expr: cst.BaseExpression) -> list[str] | None:
    """``getattr(self, "cls_token")`` -> ``["self", "cls_token"]``; a name made in a loop
    (timm CrossVit's ``getattr(self, f'pos_embed_{i}')``, set by ``setattr(self,
    f'pos_embed_{i}', nn.Parameter(...))``) is its f-string's text, ``pos_embed_{i}``: the
    same text in a hook names the same tensors. None for anything else."""
    if not (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value == "getattr"
        and len(expr.args) == 2
        and not any(a.star or a.keyword for a in expr.args)
    ):
        return None
    parts = chain(expr.args[0].value)
    name = attribute_name(expr.args[1].value)
    return None if parts is None or name is None else [*parts, name]


def _out_write(call: cst.Call) -> Write | None:
    """``torch.arange(1, n + 1, out=self.freq)``: the ``out=`` tensor is written."""
    out = keyword(call, "out")
    parts = _written_chain(out) if out is not None else None
    if not parts:
        return None
    return Write(tuple(parts), None, None, "out", False)


def init_law(call: cst.Call, qualify, value) -> str | None:
    """The law an in-place init call draws its values from, as one text: the function
    (``torch.nn.init.normal_`` for the tensor method ``t.normal_()`` and for transformers'
    ``init.normal_``, else its qualified name) and every argument of
    :data:`~metalint.vocabulary.INIT_SIGNATURES` by name, defaults filled in, each as
    ``value(expression)`` gives it (a canonical text, None when unknown). Two spellings of one
    init have the same law: ``self.w.data.normal_(mean=0.0, std=c)``, ``init.normal_(m.w,
    0.0, c)``. None when the call is no such init or an argument is unknown."""
    w = inplace_write(call, qualify)
    if w is None:
        return None
    fn, name, args = _init_function(call, w, qualify)
    signature = INIT_SIGNATURES.get(name)
    if signature is None or not fn:
        return None
    given = _given_arguments(args, [p for p, _ in signature])
    if given is None:
        return None
    out = []
    for p, default in signature:
        if p in given:
            text = value(given[p])
        else:
            text = None if default is None else repr(default)
        if text is None:
            return None
        out.append(f"{p}={text}")
    return f"{fn}({', '.join(out)})"


def _init_function(call: cst.Call, w: Write, qualify) -> tuple[str, str, list[cst.Arg]]:
    """The init function an in-place init call runs, its short name and its arguments past
    the tensor: ``torch.nn.init.normal_`` for ``t.normal_()`` and ``init.normal_(t)``."""
    if w.method:
        name = INIT_METHOD_ALIASES.get(w.name, "")
        return f"torch.nn.init.{name}", name, list(call.args)
    fn = qualify(call.func) or ""
    module, _, name = fn.rpartition(".")
    if module in INIT_WRAPPERS:
        fn = f"torch.nn.init.{name}"
    return fn, name, list(call.args[1:])


def _given_arguments(args: list[cst.Arg], names: list[str]) -> dict | None:
    """Parameter name -> expression of each argument, or None for a starred, unknown or
    repeated one."""
    given: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(args):
        if arg.star:
            return None
        key = arg.keyword.value if arg.keyword is not None else (names + [""] * len(args))[i]
        if key not in names or key in given:
            return None
        given[key] = arg.value
    return given


def law_text(expr: cst.BaseExpression, names: dict[str, str]) -> str | None:
    """A canonical text of an init argument: a number (``0.02``, ``.02`` and ``2e-2`` alike),
    or a chain of attributes, its first name as ``names`` maps it (``self.config`` counting as
    one name: ``{"self.config": "config", "config": "config"}`` makes the model's config and a
    ``config`` argument alike; a parameter's default; a local's value); ``x or default`` as ``x`` (transformers'
    ``std = self.config.initializer_range or 0.02``: the same unless the config says 0).
    None when unknown."""
    n = number(expr)
    if n is not None:
        return repr(n)
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
        return law_text(expr.left, names)
    parts = chain(expr)
    if not parts or "[]" in parts:
        return None
    if parts[:2] == ["self", "config"]:
        parts = ["self.config", *parts[2:]]
    head = names.get(parts[0])
    if head is None:
        return None
    return head if len(parts) == 1 else ".".join([head, *parts[1:]])


def initialised_own(methods: list[MethodFacts], qualify) -> set[str]:
    """The own tensors (``Write.own``) the calls of ``methods`` write in place."""
    return {
        w.own for m in methods for c in m.calls if (w := inplace_write(c.node, qualify)) and w.own
    }


def initialised_target(call: cst.Call, qualify) -> str | None:
    """``self.w`` / ``self.head.weight``: the tensor reached from ``self`` whose values an
    in-place init call sets (``t.set_(...)`` swaps the storage: not an init of values)."""
    return write_target(inplace_write(call, qualify))


def write_target(w: Write | None) -> str | None:
    """:func:`initialised_target` of the call whose :func:`inplace_write` is ``w``."""
    if w is None or w.kind == "storage" or w.target is None or w.own is None:
        return None
    return w.target


def inplace_kind(call, qualify) -> str | None:
    """How an in-place init call sets a tensor: "ones", "zeros", "const", "random"..."""
    w = inplace_write(call.node, qualify)
    return w.kind if w is not None and w.kind != "storage" else None


def writes(call: CallSite, qualify) -> str | None:
    """The own tensor (``self.<name>``) that this call writes in place or registers, if any."""
    node = call.node
    # self.register_buffer("name", ...), self.register_parameter("name", ...)
    if call.receiver == "self" and call.method in REGISTER_METHODS:
        return string_value(node.args[0].value) if node.args else None
    w = inplace_write(node, qualify)
    return w.own if w else None


def assigned_writes(stmt: cst.CSTNode) -> list[tuple[str, ...]]:
    """The chains of the tensors an assignment statement writes the values of, without a
    call: through ``.data`` (``self.conv.weight.data = t``, ``child.weight.data[:] = t``,
    ``w.data *= 0.1``) or into a slice (``self.conv.weight[0] = 1.0``, which autograd refuses
    on a leaf parameter unless under ``torch.no_grad()``); ``.data`` is dropped
    (``("self", "conv", "weight")``). Not a plain assignment of an attribute (``self.w = t``
    replaces the tensor, it writes none)."""
    if type(stmt) is cst.Assign:
        targets = [t.target for t in stmt.targets]
    elif type(stmt) is cst.AugAssign:
        targets = [stmt.target]
    else:
        return []
    out = []
    for target in targets:
        sliced = type(target) is cst.Subscript and all(map(_basic_index, target.slice))
        base = target.value if sliced else target
        parts = chain(base)
        if not parts or "[]" in parts:
            continue
        if parts[-1] == "data":
            parts = parts[:-1]
        elif not (sliced or type(stmt) is cst.AugAssign):
            continue
        if len(parts) >= 2:
            out.append(tuple(parts))
    return out


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
        attr = writes(call, qualify) or _handed_to_local(call, method)
        if attr:
            names.add(attr)
        names.update(helper_writes(call, qualify))
    if method.loops_over_own_tensors:
        names.add("*")
    for node, _targets, it in method.loops:
        # ``for param in [self.w_q, self.w_o]: nn.init.uniform_(param, -b, b)``
        if type(it) in (cst.List, cst.Tuple) and (own := own_attributes(it)):
            if every_parameter_written(node, qualify):
                names.update(own)
    return names


def _handed_to_local(call: CallSite, method: MethodFacts) -> str | None:
    """``init_weight = get_condconv_initializer(...); init_weight(self.weight)``: a hook
    handing an own tensor to a local initialiser (or a parameter) re-creates it."""
    func = call.node.func
    if not (
        isinstance(func, cst.Name)
        and (func.value in method.local_values or func.value in method.params)
        and call.node.args
    ):
        return None
    return self_attr(dotted(call.node.args[0].value))


def helper_writes(call: CallSite, qualify) -> set[str]:
    """``@helper#arg=attr`` for each own tensor ``self.attr`` (or ``self.attr.data``) handed to
    a function that is neither torch's, a method of the module nor an in-place call (which
    :func:`inplace_write` answers): PyG's ``glorot(self.att_src)``, ``zeros(self.bias)``,
    ``uniform(size, self.root)``, ``inits.normal(self.w, 0, 1)``. ``arg`` is the position or
    the keyword."""
    func = call.node.func
    name = qualify(func) or dotted(func)
    if (
        name is None
        or name.startswith("torch.")
        or name.split(".", 1)[0] in ("self", "super")
        or inplace_write(call.node, qualify) is not None
    ):
        return set()
    out: set[str] = set()
    for i, arg in enumerate(call.node.args):
        if arg.star:
            break
        parts = chain(arg.value)
        if not parts or parts[0] != "self" or len(parts) < 2 or parts[1] == "[]":
            continue
        if len(parts) > 3 or (len(parts) == 3 and parts[2] != "data"):
            continue
        key = arg.keyword.value if arg.keyword is not None else str(i)
        out.add(f"{HELPER_MARK}{name}#{key}={parts[1]}")
    return out


def argument_writes(fn: MethodFacts, qualify, local: dict[str, str]) -> dict | None:
    """Which arguments a module-level function writes in place, the summary
    :meth:`metalint.static.hierarchy.Hierarchy.hook_tensors` resolves ``@helper#arg=attr``
    with: ``{"params": positional names, "writes": parameter names, "forwards": [[callee,
    arg, parameter], ...]}`` (a parameter handed on to another function, resolved across
    files), or None when it writes none and hands none on.

    A parameter is written by an in-place call on it (:func:`inplace_write`:
    ``value.data.uniform_(-b, b)``, ``nn.init.orthogonal_(tensor.data)``, ``t.fill_(v)``),
    on a loop variable over it (``for v in value.parameters(): ...``: the ``isinstance``
    dispatch of PyG's ``inits``), or by a function it is handed to that writes it.
    ``local``: the module-level functions of the file (name -> qualified name)."""
    params = fn.params
    if not params:
        return None
    alias = _parameter_aliases(fn)
    writes: set[str] = set()
    forwards: list[list[str]] = []
    for call in fn.calls:
        w = inplace_write(call.node, qualify)
        if w is not None:
            if w.chain and w.chain[0] in alias and w.kind != "storage":
                writes.add(alias[w.chain[0]])
            continue
        func = call.node.func
        callee = qualify(func) or (local.get(func.value) if isinstance(func, cst.Name) else None)
        if callee is not None and not callee.startswith("torch."):
            forwards.extend(_forwarded(call, callee, alias))
    forwards = sorted({tuple(f) for f in forwards if f[2] not in writes})
    if not writes and not forwards:
        return None
    return {"params": params, "writes": sorted(writes), "forwards": [list(f) for f in forwards]}


def argument_registrations(fn: MethodFacts) -> dict | None:
    """Which parameters of a module-level function name the buffers it registers on another
    parameter: ``{"params": positional names, "registers": [[module, names], ...]}``, one pair for each ``module.register_buffer(attr, value)``
    whose ``attr`` is a loop variable over ``names`` (``for attr in names``, or over a local
    built from it: ``{a: getattr(module, a).clone() for a in names}.items()``), registered
    persistent; None when there is none. The caller's class is then taken to register a
    buffer under each name it hands as ``names`` (see ``HelperRegisters``)."""
    params = set(fn.params)
    found: set[tuple[str, str]] = set()
    for call in fn.calls:
        node = call.node
        func = node.func
        if (
            type(func) is not cst.Attribute
            or func.attr.value != "register_buffer"
            or type(func.value) is not cst.Name
            or func.value.value not in params
            or not node.args
            or type(node.args[0].value) is not cst.Name
            or keyword(node, "persistent") is not None
        ):
            continue
        module = func.value.value
        for names in _looped_parameters(fn, node.args[0].value.value) & params - {module}:
            found.add((module, names))
    if not found:
        return None
    return {"params": fn.params, "registers": [list(f) for f in sorted(found)]}


def handed_names(call: cst.Call) -> tuple[str, str, tuple[str, ...]] | None:
    """``(module, names, strings)`` when ``call`` hands ``self`` and a literal tuple or list
    of strings to a function (``bufferize(self, ("loc", "scale"))``): the keys (a position
    or a keyword) of both arguments and the strings, which a function summarised by
    :func:`argument_registrations` registers as buffers on the module."""
    module = names = None
    strings: tuple[str, ...] = ()
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        key = arg.keyword.value if arg.keyword is not None else str(i)
        value = arg.value
        if type(value) is cst.Name and value.value == "self":
            module = key
        elif type(value) in (cst.Tuple, cst.List) and value.elements:
            found = tuple(string_value(e.value) for e in value.elements)
            if all(found) and names is None:
                names, strings = key, found
    if module is None or names is None:
        return None
    return module, names, strings


def _looped_parameters(fn: MethodFacts, name: str) -> set[str]:
    """The names a loop whose first target is ``name`` runs over: those of its iterable and
    of the values of the locals it names."""
    out: set[str] = set()
    for _node, targets, it in fn.loops:
        if not targets or targets[0] != name:
            continue
        for n in walk_code(it):
            if type(n) is cst.Name:
                out.add(n.value)
                for _, v in fn.local_values.get(n.value, ()):
                    out |= {m.value for m in walk_code(v) if type(m) is cst.Name}
    return out


def _parameter_aliases(fn: MethodFacts) -> dict[str, str]:
    """Each parameter of ``fn`` as itself, and each loop variable over one of them (``for v
    in value.parameters()``) as that parameter."""
    alias = {p: p for p in fn.params}
    for _node, targets, it in fn.loops:
        roots = {n.value for n in walk_code(it) if isinstance(n, cst.Name) and n.value in alias}
        if roots:
            for t in targets:
                alias.setdefault(t, alias[next(iter(sorted(roots)))])
    return alias


def _forwarded(call: CallSite, callee: str, alias: dict[str, str]) -> list[list[str]]:
    """``[callee, argument, parameter]`` for each parameter handed on to ``callee``."""
    out = []
    for i, arg in enumerate(call.node.args):
        if arg.star:
            break
        if isinstance(arg.value, cst.Name) and arg.value.value in alias:
            key = arg.keyword.value if arg.keyword is not None else str(i)
            out.append([callee, key, alias[arg.value.value]])
    return out


#: the test a fix of ML008 puts around a move of the module in ``__init__`` (``self.to(d)``):
#: the move runs unless a tensor of the module is on meta
META_GUARD = "not any(t.is_meta for t in (*self.parameters(), *self.buffers()))"


def meta_test(test: cst.BaseExpression, method: MethodFacts) -> bool:
    """Does a condition ask whether something is on the meta device? ``t.is_meta``,
    ``p.device.type != "meta"``, ``p.device == torch.device("meta")``, or a name bound to
    ``torch.device("meta")`` (peft: ``meta = torch.device("meta")``, then ``if not any(p.device
    == meta for p in module.parameters()): module.to(weight.device)``)."""
    for n in walk_code(test):
        if isinstance(n, cst.Attribute) and n.attr.value == "is_meta":
            return True
        if isinstance(n, cst.SimpleString) and n.evaluated_value == "meta":
            return True
        if isinstance(n, cst.Name):
            for _, v in method.local_values.get(n.value, ()):
                if any(
                    isinstance(x, cst.SimpleString) and x.evaluated_value == "meta"
                    for x in walk_code(v)
                ):
                    return True
    return False


def meta_guarded(method: MethodFacts) -> set[int]:
    """Ids of the calls of ``method`` inside an ``if`` whose test asks for the meta device
    (:func:`meta_test`): the code decides by it, as peft's own moves of adapters do."""
    out: set[int] = set()
    for n in walk_code(method.node.body):
        if isinstance(n, cst.If) and meta_test(n.test, method):
            out.update(id(c) for c in walk_code(n) if isinstance(c, cst.Call))
    return out


def own_attributes(seq: cst.List | cst.Tuple) -> list[str]:
    """``["a", "b"]`` for ``[self.a, self.b]``; [] when an element is anything else."""
    out = []
    for e in seq.elements:
        d = dotted(e.value) if type(e) is cst.Element else None
        if not d or not d.startswith("self.") or d.count(".") != 1:
            return []
        out.append(d[5:])
    return out


def every_parameter_written(
    node: cst.CSTNode, qualify, lists: frozenset[str] = frozenset()
) -> str | None:
    """``for param in self.parameters(): nn.init.xavier_uniform_(param)`` (titans-pytorch's
    memory MLPs) in ``node``: a loop over the module's parameters that writes each in place,
    so every parameter made before it gets its value there; with ``lists`` (own
    ``ParameterList`` attributes) also ``for weight in self.weights:`` over one of them, and
    ``enumerate(self.weights)``. The loop's head, or None."""
    for n in walk_code(node):
        if type(n) is not cst.For:
            continue
        head, it, t = _parameter_loop_head(n, lists)
        if head is None or type(t) is not cst.Name:
            continue
        listed = type(it) in (cst.List, cst.Tuple)
        for c in walk_code(n.body):
            w = inplace_write(c, qualify) if type(c) is cst.Call else None
            if w is not None and w.chain[:1] == (t.value,):
                if not listed or w.chain[1:] in ((), ("data",)):
                    return head
    return None


def _parameter_loop_head(loop: cst.For, lists: frozenset[str]) -> tuple[str | None, object, object]:
    """The head of a loop over the module's parameters (as :func:`every_parameter_written`
    shows it, None for another loop), its iterable and its loop variable (``enumerate``'s
    and ``named_parameters()``'s second element)."""
    it, t = loop.iter, loop.target
    if (
        type(it) is cst.Call
        and dotted(it.func) == "enumerate"
        and it.args
        and type(t) is cst.Tuple
        and len(t.elements) == 2
    ):
        it, t = it.args[0].value, t.elements[1].value
    if type(it) is cst.Call and dotted(it.func) in ("self.parameters", "self.named_parameters"):
        if type(t) is cst.Tuple and len(t.elements) == 2:
            t = t.elements[1].value
        return f"for ... in {dotted(it.func)}()", it, t
    if (d := dotted(it) or "").startswith("self.") and d[5:] in lists:
        return f"for ... in {d}", it, t
    if type(it) in (cst.List, cst.Tuple) and (own := own_attributes(it)):
        # ``for param in [self.w_qkv_c, self.w_o_c]: nn.init.uniform_(param, -b, b)``
        # (stanza's PartitionedMultiHeadAttention); not ``for layer in (self.hidden,
        # self.output): layer.weight.normal_()``, children's tensors (spikingjelly)
        return f"for ... in [{', '.join(f'self.{a}' for a in own)}]", it, t
    return None, it, t


#: calls a function may make and still leave every tensor's values as they are
_VALUE_FREE_BUILTINS = frozenset({"len", "range", "isinstance", "hasattr", "getattr", "print"})


def leaves_values(fn: ast.FunctionDef) -> bool:
    """Does the module-level function ``fn`` (CPython's tree) certainly write no tensor's
    values, although its name ends in ``_`` (:func:`inplace_write` takes it for a write of
    its first argument)? True when each call in it is a builtin of
    :data:`_VALUE_FREE_BUILTINS` or a method not ending in ``_`` (``module.parameters()``)
    and not of ``nn.init``, no call passes ``out=``, and no assignment targets a subscript or ``.data``:
    x-transformers' ``freeze_all_layers_``, which sets ``param.requires_grad = False``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id not in _VALUE_FREE_BUILTINS:
                    return False
            elif not isinstance(func, ast.Attribute) or _init_call(func):
                return False
            if any(k.arg == "out" for k in node.keywords):
                return False
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_writes_values(t) for t in targets):
                return False
    return True


def _init_call(func: ast.Attribute) -> bool:
    """``t.zero_()``, ``nn.init.constant(t, 0)``: a method that may write values."""
    return func.attr.endswith("_") or "init" in ast.unparse(func.value).split(".")


def _writes_values(target: ast.expr) -> bool:
    """An assignment target that writes a tensor's values: ``t[0] = v``, ``t.data = v``."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_writes_values(t) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _writes_values(target.value)
    return isinstance(target, ast.Subscript) or (
        isinstance(target, ast.Attribute) and target.attr == "data"
    )
