"""Parsing and walking libcst trees at the speed a cold check needs.

``CSTNode.children`` runs the node's whole ``_visit_and_replace_children`` with a collecting
visitor, which builds a throw-away copy of the node: rules that walk expressions and bodies
spent a fifth of a cold check there. :func:`children` returns the same nodes in the same
(lexical) order by reading the fields directly, in the order libcst visits them. That order is
learned once per node type from libcst itself (the field names its visit reports to
``on_visit_attribute``), so it follows the installed libcst rather than a table kept here.
:func:`code_ranges` and :func:`parse_valid_module` leave out work libcst does that a checker
does not need (a second visit of the tree; validating nodes of code CPython has accepted).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider


class _FieldOrder(cst.CSTVisitor):
    """Records the field names a node's visit goes through, without descending."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        return None

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if attribute not in self.names:
            self.names.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


#: node type -> (getter of the fields in visiting order, getter of the other fields that may
#: hold nodes, or None)
_ORDER: dict[type, tuple[Callable, Callable | None]] = {}


#: type -> whether it is a libcst node (``isinstance`` on libcst's abstract base is slow)
_IS_NODE: dict[type, bool] = {}


def _is_node(value) -> bool:
    t = type(value)
    known = _IS_NODE.get(t)
    if known is None:
        known = _IS_NODE[t] = issubclass(t, cst.CSTNode)
    return known


def _holds_node(value) -> bool:
    if _is_node(value):
        return True
    return type(value) in (list, tuple) and any(_is_node(v) for v in value)


def _may_hold_node(field: dataclasses.Field) -> bool:
    """Can this field hold a node? ``Name.value: str``, ``Arg.star: Literal[...]`` cannot."""
    t = field.type
    if isinstance(t, str):  # an annotation left as text: assume it can
        return t not in ("str", "bool", "Optional[str]")
    return t not in (str, bool) and "libcst._nodes" in str(t)


def _getter(names: tuple[str, ...]) -> Callable:
    """``node -> tuple of the named fields``, in C (``attrgetter``) for two or more."""
    if not names:
        return lambda node: ()
    if len(names) == 1:
        name = names[0]
        return lambda node: (getattr(node, name),)
    return operator.attrgetter(*names)


def _learn(node: cst.CSTNode) -> tuple[Callable, Callable | None]:
    recorder = _FieldOrder()
    node._visit_and_replace_children(recorder)
    visited = tuple(recorder.names)
    others = tuple(
        f.name for f in dataclasses.fields(node) if f.name not in visited and _may_hold_node(f)
    )
    order = _ORDER[type(node)] = (_getter(visited), _getter(others) if others else None)
    return order


def children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """``node.children``: its immediate child nodes in lexical order, sequences flattened."""
    order = _ORDER.get(type(node))
    if order is None:
        order = _learn(node)
    visited, others = order
    if others is not None:
        for value in others(node):
            # a field this type's visit skipped the first time (a branch in libcst): ask libcst
            if value is not None and type(value) is not str and _holds_node(value):
                return node.children
    out: list[cst.CSTNode] = []
    is_node = _IS_NODE
    for value in visited(node):
        t = type(value)
        known = is_node.get(t)
        if known is None:
            known = _is_node(value)
        if known:
            out.append(value)
        elif t is list or t is tuple:
            out.extend(v for v in value if _is_node(v))
    return out


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk of a tree: ``node`` first, then each child's subtree in lexical order."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(reversed(children(cur)))


def code_ranges(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """What ``MetadataWrapper(module).resolve(PositionProvider)`` returns (each node's
    syntactic code range), without the full visit of the tree the resolver also makes for
    batchable providers even when there are none: half its time."""
    provider = PositionProvider()
    try:
        provider._computed = {}
        provider._gen_impl(module)
    except AttributeError:  # a libcst whose provider is built differently
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return provider._computed


def _trusted(self) -> None:
    """``CSTNode.__post_init__`` for a tree of code CPython has already parsed."""


def parse_valid_module(source: str) -> cst.Module:
    """``cst.parse_module(source)`` for ``source`` CPython's own parser has accepted.

    Every node the parser builds runs ``_validate()`` from ``CSTNode.__post_init__``: a
    third of the parse, checking what the grammar already guarantees (libcst's own comment
    there says it would rather not validate parsed trees). For code known to be valid the
    check is left out while the parser runs; nodes built at any other time are validated as
    always."""
    base = cst.CSTNode
    saved = base.__dict__.get("__post_init__")
    if saved is None:  # a libcst that validates elsewhere
        return cst.parse_module(source)
    base.__post_init__ = _trusted
    try:
        return cst.parse_module(source)
    finally:
        base.__post_init__ = saved


# -- small questions about expressions, shared by the rules and the codemods ----------------
def short(node: cst.CSTNode, limit: int = 60) -> str:
    """The source of ``node`` on one line, cut to ``limit`` characters (for messages)."""
    text = " ".join(cst.Module([]).code_for_node(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The value of keyword argument ``name`` of ``call``, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def is_false(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def is_none(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def string_value(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def number(node: cst.BaseExpression | None) -> float | None:
    """The value of a numeric literal (``2``, ``1e-6``, ``-0.5``), else None."""
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return float(node.value)
        except ValueError:
            return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = number(node.expression)
        return -v if v is not None else None
    return None


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


def self_attr(name: str | None) -> str | None:
    """``gamma`` for ``self.gamma``, ``self.gamma.data``; None for anything not on self."""
    if name is None or not name.startswith("self."):
        return None
    return name.split(".")[1]
