"""Who owns what, and which expressions hold a tensor that lives on ``meta``.

Shared by the hook/children/data-dependent/apply/tie/skip-init rules (ML004, ML006, ML008,
ML010, ML011, ML012). Works on the facts of :mod:`metalint.static.model`; never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from metalint.static.construction import Registration, real_device, tensor_registrations
from metalint.static.model import (
    CallSite,
    ClassFacts,
    MethodFacts,
    builds_module,
    construction,
    function_facts,
)
from metalint.static.names import dotted
from metalint.static.syntax import code_children, is_none, keyword, self_attr, walk_code
from metalint.vocabulary import (
    BOOLEAN_FUNCTIONS,
    BOOLEAN_METHODS,
    BUFFER_CLASSES,
    CPU_CONSTRUCTORS,
    HOST_READS,
    NOT_TENSOR_FUNCTIONS,
    NOT_TENSOR_METHODS,
    PARAMETER_CLASSES,
    PARAMETER_CONTAINERS,
    SCALAR_CASTS,
    SEQUENCE_FUNCTIONS,
    SEQUENCE_METHODS,
    SIZE_FACTORIES,
    SIZE_METHODS,
    TENSOR_ATTRIBUTES,
    TENSOR_FACTORIES,
    TENSOR_METHODS,
    VALUE_SHAPED_FUNCTIONS,
    VALUE_SHAPED_METHODS,
)


def hook_methods(cls: ClassFacts, hook: str) -> list[MethodFacts]:
    return cls.reachable(hook) if hook in cls.methods else []


#: an own tensor created during construction
Owned = Registration


def owned_tensors(methods: list[MethodFacts], qualify) -> Iterator[Owned]:
    """Parameters and buffers a class creates itself, less registrations of ``None`` and
    ``register_parameter`` calls whose value is neither a Parameter nor a name."""
    for r in tensor_registrations(methods, qualify):
        if isinstance(r.node, cst.Call):
            if r.passed is None or is_none(r.passed):
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
            if q in TENSOR_FACTORIES:
                out.append(node)
        stack.extend(code_children(node))
    return out


#: how deep :func:`meta_tensor` follows an expression through its parts and locals (each
#: local is answered once per method: :attr:`MethodFacts.meta_locals`)
MAX_DEPTH = 40


def meta_tensor(
    expr: cst.BaseExpression | None,
    qualify,
    method: MethodFacts | None,
    own: set[str] | None = None,
    depth: int = 0,
    assumed: frozenset[str] = frozenset(),
) -> bool:
    """True only for expressions that certainly make a tensor that, under
    ``with torch.device("meta"):``, lives on meta (no data): torch factories without an explicit
    real device, arithmetic and methods on such tensors, locals and loop variables holding them,
    own tensors in ``own``. ``assumed``: locals whose other assignments are being asked about
    (see :func:`_meta_local`), and ``name()`` for each module-level function of the file that
    returns a meta tensor (:func:`meta_returning_functions`)."""
    if expr is None or depth > MAX_DEPTH:
        return False
    rec = lambda e: meta_tensor(e, qualify, method, own, depth + 1, assumed)  # noqa: E731
    if type(expr) is cst.Call:
        # ``steps(n)``: a function of the file that returns a meta tensor
        own_fn = type(expr.func) is cst.Name and f"{expr.func.value}()" in assumed
        return own_fn or _meta_call(expr, qualify, rec) or _passed_function_of(expr, method, rec)
    if type(expr) is cst.Attribute:
        return _meta_attribute(expr, own, rec)
    if type(expr) is cst.BinaryOperation:
        return rec(expr.left) or rec(expr.right)
    if type(expr) is cst.UnaryOperation:
        return type(expr.operator) is not cst.Not and rec(expr.expression)
    if type(expr) is cst.Comparison:
        return _meta_comparison(expr, rec)
    if type(expr) is cst.Subscript:
        return rec(expr.value) or meta_tensor_sequence(expr.value, qualify, method, own, depth + 1)
    if type(expr) is cst.IfExp:  # ``a if flag else b``: meta whichever branch is taken
        return rec(expr.body) and rec(expr.orelse)
    if type(expr) is cst.Name and method is not None:
        return expr.value in assumed or _meta_local(expr, qualify, method, own, depth, assumed)
    return False


def _meta_attribute(expr: cst.Attribute, own, rec) -> bool:
    """``t.data``, ``t.T`` of a meta tensor, or an own tensor ``self.w`` in ``own``."""
    if expr.attr.value in TENSOR_ATTRIBUTES:
        return rec(expr.value)
    if own and type(expr.value) is cst.Name and expr.value.value == "self":
        return expr.attr.value in own
    return False


def _meta_comparison(expr: cst.Comparison, rec) -> bool:
    """``t > 0`` of a meta tensor (not ``t is None``)."""
    if all(type(t.operator) in (cst.Is, cst.IsNot) for t in expr.comparisons):
        return False
    return rec(expr.left) or any(rec(t.comparator) for t in expr.comparisons)


#: torch namespaces whose functions make no tensor of their arguments (``torch.nn.functional``
#: aside)
_NOT_TENSOR_NAMESPACES = (
    "torch.nn.",
    "torch.cuda.",
    "torch.distributed.",
    "torch.jit.",
    "torch.utils.",
)


def _meta_torch_call(expr: cst.Call, q: str, qualify, rec) -> bool:
    """A torch function's call that makes a meta tensor: a factory without a real device, or
    a function of a meta tensor (``torch.exp(t)``, ``torch.cumsum(t, 0)``)."""
    if q in CPU_CONSTRUCTORS or q in NOT_TENSOR_FUNCTIONS:
        return False
    if real_device(keyword(expr, "device"), qualify, None):
        return False
    if q in TENSOR_FACTORIES:
        return True
    if q.startswith(_NOT_TENSOR_NAMESPACES) and not q.startswith("torch.nn.functional."):
        return False
    return any(rec(a.value) for a in expr.args)


def _meta_call(expr: cst.Call, qualify, rec) -> bool:
    """A call that makes a meta tensor: a torch factory without a real device, a torch function
    or a tensor method of a meta tensor."""
    q = qualify(expr.func)
    if q is None and len(expr.args) >= 2 and _factory_call(expr, qualify):
        # ``shift, scale = map(torch.as_tensor, (shift, scale))``: each item a factory's
        return True
    if q is not None and q.startswith("torch."):
        return _meta_torch_call(expr, q, qualify, rec)
    if not type(expr.func) is cst.Attribute:
        return False
    name = expr.func.attr.value
    if name in NOT_TENSOR_METHODS:
        return False
    if name == "to" and (
        real_device(keyword(expr, "device"), qualify, None)
        or any(a.keyword is None and real_device(a.value, qualify, None) for a in expr.args)
    ):
        return False  # t.to("cpu") of a meta tensor also fails, but elsewhere
    if name == "type" and not expr.args:
        return False
    return rec(expr.func.value)


def _passed_function_of(expr: cst.Call, method: MethodFacts | None, rec) -> bool:
    """``f(z).pow(n)``: a tensor method called on what a function the caller passed (``f``,
    an argument of ``method``: an activation) makes of a meta tensor. The code takes the
    result for a tensor, and a function of a meta tensor's values can only give one on meta
    (e3nn ``moment(f, n)``: ``f(z).pow(n).mean()``, then ``.item()`` in ``__init__``)."""
    func = expr.func
    if method is None or type(func) is not cst.Attribute or func.attr.value not in TENSOR_METHODS:
        return False
    inner = func.value
    return (
        type(inner) is cst.Call
        and type(inner.func) is cst.Name
        and method.holds_argument(inner.func)
        and any(a.keyword is None and not a.star and rec(a.value) for a in inner.args)
    )


def _meta_local(
    expr: cst.Name, qualify, method: MethodFacts, own, depth: int, assumed: frozenset[str]
) -> bool:
    """A local every assignment of which is a meta tensor, or a loop variable over one. An
    assignment that reads the local itself (timm DistributionBalancedLoss: ``counts =
    torch.as_tensor(...)``, then ``counts = counts.clamp(1., n - 1.)``) is meta when it keeps a
    meta tensor meta: the local is assumed meta while it is asked (the other assignments decide;
    the recursion used to run out of depth and call the local not meta)."""
    key = (expr.value, assumed, frozenset(own or ()))
    known = method.meta_locals.get(key)
    if known is None:
        known = method.meta_locals[key] = _meta_local_of(expr, qualify, method, own, depth, assumed)
    return known


def _meta_local_of(
    expr: cst.Name, qualify, method: MethodFacts, own, depth: int, assumed: frozenset[str]
) -> bool:
    rec = lambda e: meta_tensor(e, qualify, method, own, depth + 1, assumed)  # noqa: E731
    values = method.local_values.get(expr.value)
    if method.holds_argument(expr):
        return False  # the caller's value: a tensor it passes lives where the caller made it
    if values:
        inner = assumed | {expr.value}
        # and one assignment is meta with nothing assumed: locals that only feed each other
        # (peft ``prefix, _, suffix = name.rpartition(s)``, ``name = prefix + suffix``, where
        # ``name`` is a parameter of a nested function) are no tensors; a factory is meta
        # whatever it reads (nflows ``scale = torch.as_tensor(scale)``)
        return all(
            v is not expr and meta_tensor(v, qualify, method, own, depth + 1, inner)
            for _, v in values
        ) and any(
            (expr.value not in _names(v) or _factory_call(_chain_root(v), qualify))
            and meta_tensor(v, qualify, method, own, depth + 1, _functions(assumed))
            for _, v in values
        )
    # a loop variable over a tensor: ``for r in torch.linspace(0, 1, n)``
    for _node, targets, it in method.loops:
        if (
            targets == (expr.value,)
            and it is not expr
            and (rec(it) or meta_tensor_sequence(it, qualify, method, own, depth + 1))
        ):
            return True
    return False


def _functions(assumed: frozenset[str]) -> frozenset[str]:
    """The functions known to return a meta tensor among ``assumed`` (no local)."""
    return frozenset(a for a in assumed if a.endswith("()"))


def meta_returning_functions(module: cst.Module, facts, qualify) -> frozenset[str]:
    """``name()`` for each module-level function of the file every ``return`` of which gives a
    meta tensor (a schedule helper ``def steps(n): return torch.linspace(0, 1, n)``), also
    through another such function (``return steps(n) * 2``); :func:`meta_tensor` takes them in
    ``assumed``, so ``steps(n).tolist()`` in ``__init__`` is a read of a meta tensor. Only a
    function that calls a torch factory or another function of the file is read."""
    functions = {s.name.value for s in module.body if type(s) is cst.FunctionDef}
    candidates = {}
    for stmt in module.body:
        if type(stmt) is not cst.FunctionDef:
            continue
        nodes = list(walk_code(stmt.body))
        returns = [n.value for n in nodes if type(n) is cst.Return and n.value is not None]
        if (
            returns
            and not any(type(n) in (cst.FunctionDef, cst.Lambda, cst.Yield) for n in nodes)
            and any(
                type(n) is cst.Call
                and (
                    qualify(n.func) in TENSOR_FACTORIES
                    or (type(n.func) is cst.Name and n.func.value in functions)
                )
                for n in nodes
            )
        ):
            candidates[stmt.name.value] = (stmt, returns)
    found: set[str] = set()
    facts_of: dict[str, MethodFacts] = {}
    changed = True
    while changed:  # a function returning another's meta tensor is found on a later pass
        changed = False
        known = frozenset(found)
        for name, (stmt, returns) in candidates.items():
            if f"{name}()" in found:
                continue
            if name not in facts_of:
                facts_of[name] = function_facts(stmt, facts)
            fn = facts_of[name]
            if all(meta_tensor(r, qualify, fn, None, assumed=known) for r in returns):
                found.add(f"{name}()")
                changed = True
    return frozenset(found)


def _factory_call(expr: cst.BaseExpression, qualify) -> bool:
    """``torch.as_tensor(x)``, ``map(torch.as_tensor, xs)``: makes a new tensor whatever it
    reads."""
    if type(expr) is not cst.Call:
        return False
    q = qualify(expr.func)
    if q is None and type(expr.func) is cst.Name and expr.func.value == "map" and expr.args:
        q = qualify(expr.args[0].value)
    return q in TENSOR_FACTORIES


def _chain_root(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The call a chain of methods starts from: ``torch.as_tensor(x)`` for gpytorch's
    ``Interval`` bound ``torch.as_tensor(lower_bound).to(dtype)``."""
    while (
        type(expr) is cst.Call
        and type(expr.func) is cst.Attribute
        and type(expr.func.value) is cst.Call
    ):
        expr = expr.func.value
    return expr


def _names(node: cst.CSTNode) -> set[str]:
    """The names ``node`` reads (not attribute names: ``self.counts`` reads ``self``)."""
    attrs = {id(n.attr) for n in walk_code(node) if isinstance(n, cst.Attribute)}
    return {n.value for n in walk_code(node) if isinstance(n, cst.Name) and id(n) not in attrs}


def meta_tensor_sequence(
    expr: cst.BaseExpression | None, qualify, method: MethodFacts | None, own=None, depth: int = 0
) -> bool:
    """``t.split(sizes)``, ``torch.meshgrid(a, b)``: a tuple of meta tensors."""
    if not isinstance(expr, cst.Call) or depth > MAX_DEPTH:
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
    expr: cst.BaseExpression,
    qualify,
    method: MethodFacts,
    own: set[str] | None = None,
    assumed: frozenset[str] = frozenset(),
) -> Iterator[cst.BaseExpression]:
    """Parts of a condition whose truth value Python asks a tensor for (``bool(t)``)."""
    if type(expr) is cst.BooleanOperation:
        yield from truthiness_tensors(expr.left, qualify, method, own, assumed=assumed)
        yield from truthiness_tensors(expr.right, qualify, method, own, assumed=assumed)
    elif type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Not:
        yield from truthiness_tensors(expr.expression, qualify, method, own, assumed=assumed)
    elif meta_tensor(expr, qualify, method, own, assumed=assumed):
        yield expr


def size_tensors(
    call: cst.Call,
    qualify,
    method: MethodFacts,
    own: set[str] | None = None,
    assumed: frozenset[str] = frozenset(),
) -> Iterator[cst.BaseExpression]:
    """Meta tensors a call takes as sizes (``torch.ones(n)``, ``torch.zeros([n, 1])``,
    ``t.view(n, *shape)``, ``torch.arange(n)``): torch turns each into a Python int, which
    reads its value (``Tensor.item() cannot be called on meta tensors``). monai
    ``get_binary_kernel``: ``prod = torch.prod(win_size)``, ``torch.ones(prod)``."""
    func = call.func
    q = qualify(func)
    if q in SIZE_FACTORIES:
        pass
    elif not (q is None and type(func) is cst.Attribute and func.attr.value in SIZE_METHODS):
        return
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value != "size":
            continue
        value = arg.value
        parts = (
            [el.value for el in value.elements] if type(value) in (cst.List, cst.Tuple) else [value]
        )
        for part in parts:
            if meta_tensor(part, qualify, method, own, assumed=assumed):
                yield part


@dataclass(frozen=True)
class ValueRead:
    """Construction reading a meta tensor's value (ML008's finding, and what its fix follows
    back to the factories): ``node`` is where it is read, ``tensor`` the tensor read, ``kind``
    how: ``host`` (``t.item()``, ``t.tolist()``, ``t.numpy()``), ``cast`` (``float(t)``),
    ``size`` (``torch.ones(n)``), ``condition`` (``if t.any():``), ``shape`` (an op whose
    output's shape depends on the values: ``t.nonzero()``), ``mask`` (``x[x > 0]``)."""

    node: cst.CSTNode
    tensor: cst.BaseExpression
    kind: str
    #: the call or subscript the read is part of (``torch.ones(n)`` for ``n``)
    site: cst.CSTNode


def call_arguments(target: MethodFacts, call: CallSite) -> list[tuple[str, cst.Arg]]:
    """``(parameter of method target, argument)`` of a call ``self.<target>(...)`` (a
    ``@staticmethod`` has no ``self`` to skip); empty when the call unpacks ``*``/``**``."""
    fn = target.node
    if any(a.star for a in call.node.args):
        return []
    static = any(
        isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
        for d in fn.decorators
    )
    names = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    names = names if static else names[1:]
    keywords = set(names) | {p.name.value for p in fn.params.kwonly_params}
    pairs = list(zip(names, [a for a in call.node.args if a.keyword is None]))
    pairs += [(a.keyword.value, a) for a in call.node.args if a.keyword is not None]
    return [(n, a) for n, a in pairs if n in keywords]


def meta_arguments(
    target: MethodFacts, methods: list[MethodFacts], qualify, own: set[str] | None = None
) -> frozenset[str]:
    """The parameters of method ``target`` that a call of it in ``methods`` (construction)
    passes a meta tensor (spikingjelly's ``self._check_threshold(threshold)``, a staticmethod
    testing ``torch.isfinite(v_threshold).all()``: the test reads the value of ``__init__``'s
    ``threshold = torch.as_tensor(v_threshold)``). ML008 reads ``target`` with them assumed
    meta; its fix hands such a call a CPU copy."""
    out: set[str] = set()
    for m in methods:
        for call in m.calls:
            if call.receiver == "self" and call.method == target.name:
                for name, a in call_arguments(target, call):
                    if meta_tensor(a.value, qualify, m, own):
                        out.add(name)
    return frozenset(out)


def value_reads(
    method: MethodFacts, qualify, own: set[str] | None = None, assumed: frozenset[str] = frozenset()
) -> Iterator[ValueRead]:
    """Every read of a meta tensor's value in ``method``, in the order ML008 reports them."""
    for call in method.calls:
        node = call.node
        read = _scalar_read(call, qualify, method, own, assumed)
        if read is not None:
            yield read
        for part in size_tensors(node, qualify, method, own, assumed=assumed):
            yield ValueRead(part, part, "size", node)
        for part in value_shaped_tensors(node, qualify, method, own, assumed=assumed):
            yield ValueRead(part, part, "shape", node)
    for sub in method.masked:
        for part in mask_tensors(sub, qualify, method, own, assumed=assumed):
            yield ValueRead(part, part, "mask", sub)
    for cond in method.conditions:
        for part in truthiness_tensors(cond, qualify, method, own, assumed=assumed):
            yield ValueRead(part, part, "condition", cond)


def _scalar_read(call, qualify, method: MethodFacts, own, assumed) -> ValueRead | None:
    """``t.item()`` / ``t.tolist()`` (a host read) or ``float(t)`` (a cast) of a meta
    tensor."""
    node = call.node
    func = node.func
    if call.method in HOST_READS and type(func) is cst.Attribute:
        if meta_tensor(func.value, qualify, method, own, assumed=assumed):
            return ValueRead(node, func.value, "host", node)
        return None
    if (
        type(func) is cst.Name
        and func.value in SCALAR_CASTS
        and call.qualname is None
        and len(node.args) == 1
        and meta_tensor(node.args[0].value, qualify, method, own, assumed=assumed)
    ):
        return ValueRead(node, node.args[0].value, "cast", node)
    return None


def value_shaped_tensors(
    call: cst.Call,
    qualify,
    method: MethodFacts,
    own: set[str] | None = None,
    assumed: frozenset[str] = frozenset(),
) -> Iterator[cst.BaseExpression]:
    """Meta tensors a call runs an op on whose output's shape depends on their values
    (``t.nonzero()``, ``torch.unique(t)``, ``torch.where(mask)``, ``torch.masked_select(t, m)``,
    ``t.repeat_interleave(counts)``): no such op has a meta kernel, so the meta build raises
    (``NotImplementedError: ... aten::nonzero``). Each part is yielded once."""
    func = call.func
    q = qualify(func)
    args = [a for a in call.args if a.keyword is None]
    if q in VALUE_SHAPED_FUNCTIONS or (q == "torch.where" and len(call.args) == 1):
        parts = [a.value for a in args[:2]]
    elif q is None and type(func) is cst.Attribute and func.attr.value in VALUE_SHAPED_METHODS:
        parts = [func.value, *(a.value for a in args[:1])]
    elif q == "torch.repeat_interleave" or (
        q is None and type(func) is cst.Attribute and func.attr.value == "repeat_interleave"
    ):
        if keyword(call, "output_size") is not None:
            return
        repeats = keyword(call, "repeats")
        if repeats is None:
            rest = args[1:] if q == "torch.repeat_interleave" else args
            repeats = rest[0].value if rest else None
        parts = [repeats] if repeats is not None else []
    else:
        return
    for part in parts:
        if meta_tensor(part, qualify, method, own, assumed=assumed):
            yield part
            return


def mask_tensors(
    subscript: cst.Subscript,
    qualify,
    method: MethodFacts,
    own: set[str] | None = None,
    assumed: frozenset[str] = frozenset(),
) -> Iterator[cst.BaseExpression]:
    """Boolean meta tensors a subscript indexes with (e3nn ``LowPassFilter``:
    ``x = x[x.abs() <= 1]``): indexing by a mask is ``nonzero``, which has no meta kernel."""
    for el in subscript.slice:
        if type(el.slice) is not cst.Index:
            continue
        index = el.slice.value
        if _boolean(index, qualify, method) and meta_tensor(
            index, qualify, method, own, assumed=assumed
        ):
            yield index


def _boolean(expr: cst.BaseExpression, qualify, method: MethodFacts, depth: int = 0) -> bool:
    """``expr`` certainly makes a boolean tensor when it makes a tensor: a comparison (not
    ``is``), ``&``/``|``/``^``/``~`` of such, a boolean torch function or method, a local every
    assignment of which is one."""
    if depth > 4:
        return False
    rec = lambda e: _boolean(e, qualify, method, depth + 1)  # noqa: E731
    t = type(expr)
    if t is cst.Comparison:
        return not any(
            type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons
        )
    if t is cst.BinaryOperation:
        return type(expr.operator) in (cst.BitAnd, cst.BitOr, cst.BitXor) and (
            rec(expr.left) and rec(expr.right)
        )
    if t is cst.UnaryOperation:
        return type(expr.operator) is cst.BitInvert and rec(expr.expression)
    if t is cst.Call:
        q = qualify(expr.func)
        if q in BOOLEAN_FUNCTIONS:
            return True
        return (
            q is None
            and type(expr.func) is cst.Attribute
            and expr.func.attr.value in BOOLEAN_METHODS
        )
    if t is cst.Name:
        values = method.local_values.get(expr.value)
        return bool(values) and all(v is not expr and rec(v) for _, v in values)
    return False


def proxies(cls: ClassFacts, qualify, facts) -> dict[str, dict[str, str]]:
    """Attributes holding an object of a plain class of the file (no module) that the class
    builds in construction, each with what the object keeps of the class's own attributes:
    ``self.state = State(self.weight)``, ``State.__init__(self, t)`` setting ``self.t = t``,
    gives ``{"state": {"t": "weight"}}``. A write through it (``self.state.t.data.normal_()``)
    lands in the class's own tensor, not in a child module's."""
    plain = {c.fullname: c for c in facts.classes}
    out: dict[str, dict[str, str]] = {}
    for m in construction(cls):
        for a in m.assigns:
            if a.target.count(".") != 1 or type(a.value) is not cst.Call:
                continue
            q = qualify(a.value.func)
            target = plain.get(q) if q else None
            if target is None or builds_module(q, facts) or target.init is None:
                continue
            init = target.init
            kept: dict[str, str] = {}
            passed = dict(call_arguments(init, CallSite(a.value, q, None, None, False, False)))
            for inner in init.assigns:
                if inner.target.count(".") != 1 or type(inner.value) is not cst.Name:
                    continue
                arg = passed.get(inner.value.value)
                attr = self_attr(dotted(arg.value)) if arg is not None else None
                if attr and dotted(arg.value) == f"self.{attr}":
                    kept[inner.target.split(".")[1]] = attr
            out[a.target.split(".")[1]] = kept
    return out


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
