"""Where the value of a tensor read during construction comes from (ML008).

The read's tensor is followed back to the factories that create it, through arithmetic,
tensor methods, torch functions, indexing, locals and loop variables of ``__init__``: only
the parts that are meta tensors (:func:`meta_tensor`) are followed. The walk stops at the
first thing it cannot follow (a factory that draws random numbers, a tensor of the module, a
value of no local...), which :class:`Origin` names; ML008's fix makes the factories it found
on the CPU, or says why not from that stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from metalint.static.draws import random_call
from metalint.static.model import MethodFacts
from metalint.static.ownership import meta_tensor, meta_tensor_sequence
from metalint.static.syntax import keyword, node_text, path_to
from metalint.static.tensor_kind import TensorKind, argument_kind
from metalint.vocabulary import (
    CONSTANT_FACTORIES,
    DEVICE_COPY_METHODS,
    EMPTY_FACTORIES,
    TENSOR_ATTRIBUTES,
)

#: how deep the walk goes
MAX_DEPTH = 8


@dataclass(frozen=True)
class Stop:
    """Where the walk stopped, and why (``kind``): ``"deep"`` (too many steps), ``"own"`` (a
    tensor of the module, ``node``), ``"argument"`` (a tensor argument, ``name``), ``"self"``
    (an attribute of ``self`` in arithmetic), ``"expression"`` (an expression it does not
    follow), ``"device"`` / ``"starred"`` (a constant factory that names a device, or may),
    ``"random"`` / ``"empty"`` (a factory ``name`` that draws, or allocates uninitialised
    memory), ``"function"`` (a call of no torch function or method), ``"copy"`` (a copy to a
    device, method ``name``), ``"unbound"`` (a name, ``name``, neither local nor loop
    variable)."""

    kind: str
    node: cst.CSTNode | None = None
    name: str | None = None


@dataclass(frozen=True)
class Origin:
    """Where the value a read needs comes from: the constant factories (``roots``), the locals
    of ``__init__`` on the way with their assignments (``locals``: name -> [(statement,
    value)]), the loop variables with their loops (``loops``), and where the walk stopped
    (``stop``; None when it followed everything)."""

    roots: list[cst.Call] = field(default_factory=list)
    locals: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]] = field(default_factory=dict)
    loops: dict[str, cst.CSTNode] = field(default_factory=dict)
    stop: Stop | None = None


class _Stopped(Exception):
    pass


def value_origin(
    exprs: list[cst.BaseExpression], at: cst.CSTNode, init: MethodFacts, qualify, own
) -> Origin:
    """The origin of the values of ``exprs`` (read at ``at``, in ``__init__``): ``own`` are the
    module's own tensors."""
    walk = _Walk(qualify, init, set(own), at)
    try:
        for e in exprs:
            walk(e)
    except _Stopped as stopped:
        return Origin(walk.roots, walk.locals, walk.loops, stopped.args[0])
    return Origin(walk.roots, walk.locals, walk.loops)


@dataclass
class _Walk:
    qualify: object
    init: MethodFacts
    own: set[str]
    at: cst.CSTNode
    roots: list[cst.Call] = field(default_factory=list)
    locals: dict = field(default_factory=dict)
    loops: dict = field(default_factory=dict)

    def __call__(self, expr: cst.BaseExpression, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise _Stopped(Stop("deep"))
        if isinstance(expr, cst.Call):
            self.call(expr, depth)
        elif isinstance(expr, cst.Name):
            self.name(expr, depth)
        else:
            for e in self._operands(expr):
                self.rec(e, depth)

    def _operands(self, expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """What the value of ``expr`` is computed from (one at a time: each is followed
        before the next is checked)."""
        if isinstance(expr, cst.Attribute):
            if expr.attr.value not in TENSOR_ATTRIBUTES:
                raise _Stopped(Stop("own", expr))
            yield expr.value
        elif isinstance(expr, cst.BinaryOperation):
            for side in (expr.left, expr.right):
                _not_a_tensor_operand(side, self.init)
                yield side
        elif isinstance(expr, cst.UnaryOperation):
            yield expr.expression
        elif isinstance(expr, cst.Comparison):
            yield expr.left
            yield from (t.comparator for t in expr.comparisons)
        elif isinstance(expr, cst.Subscript):
            yield expr.value
        elif isinstance(expr, cst.IfExp):  # either branch may be taken: both are followed
            yield expr.body
            yield expr.orelse
        else:
            raise _Stopped(Stop("expression", expr))

    def rec(self, e: cst.BaseExpression | None, depth: int) -> None:
        q, m, own = self.qualify, self.init, self.own
        if e is not None and (meta_tensor(e, q, m, own) or meta_tensor_sequence(e, q, m, own)):
            self(e, depth + 1)

    def call(self, expr: cst.Call, depth: int) -> None:
        q = self.qualify(expr.func)
        if q is not None and q.startswith("torch."):
            if q in CONSTANT_FACTORIES:
                self.roots.append(_constant(expr))
                return
            if random_call(q):
                raise _Stopped(Stop("random", expr, q))
            if q in EMPTY_FACTORIES:
                raise _Stopped(Stop("empty", expr, q))
            for a in expr.args:  # torch.log(t), torch.stack([a, b])
                for e in _elements(a.value):
                    self.rec(e, depth)
            return
        f = expr.func
        if not isinstance(f, cst.Attribute):
            raise _Stopped(Stop("function", expr.func))
        if f.attr.value in DEVICE_COPY_METHODS and not _dtype_only(expr, self.qualify):
            raise _Stopped(Stop("copy", expr, f.attr.value))
        self.rec(f.value, depth)
        for a in expr.args:
            self.rec(a.value, depth)

    def name(self, expr: cst.Name, depth: int) -> None:
        values = self.init.local_values.get(expr.value)
        if values:
            if expr.value not in self.locals:
                self.locals[expr.value] = values
                for _stmt, v in values:
                    self.rec(v, depth)
            return
        loop = _enclosing_loop(self.init.node, self.at, expr.value)
        if loop is None:
            raise _Stopped(Stop("unbound", expr, expr.value))
        if expr.value not in self.loops:
            self.loops[expr.value] = loop
            self.rec(loop.iter, depth)


def _constant(call: cst.Call) -> cst.Call:
    """A constant factory that can take ``device="cpu"``."""
    if keyword(call, "device") is not None:
        raise _Stopped(Stop("device", call.func))
    if any(a.star for a in call.args):
        raise _Stopped(Stop("starred", call.func))
    return call


def _dtype_only(call: cst.Call, qualify) -> bool:
    """``t.to(torch.float32)`` / ``t.to(dtype=...)``: a conversion, no copy to a device."""
    if call.func.attr.value != "to" or not call.args:
        return False
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value != "dtype":
                return False
            continue
        q = qualify(a.value) or ""
        if not q.startswith("torch.") or q == "torch.device":
            return False
    return True


def _elements(e: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    if isinstance(e, (cst.List, cst.Tuple)):
        for el in e.elements:
            yield el.value
    else:
        yield e


def _not_a_tensor_operand(e: cst.BaseExpression, method: MethodFacts) -> None:
    """An operand that may be a tensor of another device (an argument annotated ``Tensor``,
    an attribute of ``self``): computing the other side on the CPU could mix devices."""
    if isinstance(e, cst.Name) and argument_kind(method, e.value) is not TensorKind.NOT:
        raise _Stopped(Stop("argument", e, e.value))
    if isinstance(e, cst.Attribute) and node_text(e).startswith("self."):
        raise _Stopped(Stop("self", e))


def _enclosing_loop(scope: cst.CSTNode, node: cst.CSTNode, name: str):
    """The innermost ``for`` statement or comprehension ``for`` of ``scope`` around ``node``
    binding ``name``."""
    path = path_to(scope, node)
    if path is None:
        return None
    for n in reversed(path):
        fors = []
        if isinstance(n, cst.For):
            fors = [n]
        elif isinstance(n, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            f = n.for_in
            while f is not None:
                fors.append(f)
                f = f.inner_for_in
        for f in reversed(fors):
            if isinstance(f.target, cst.Name) and f.target.value == name:
                return f
    return None
