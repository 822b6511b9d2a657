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

import bisect
import collections.abc
import dataclasses
import itertools
import operator
import re
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

from metalint.static.names import dotted


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


#: node type -> (the names of the fields in visiting order, of the others that may hold nodes)
_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


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
    _FIELDS[type(node)] = (visited, others)
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


#: tokens and whitespace: no rule reads them (the fact collector has no hook for them, no
#: finding is one), and nothing below them is code
TRIVIA = frozenset(
    t
    for t in vars(cst).values()
    if isinstance(t, type)
    and issubclass(t, cst.CSTNode)
    and issubclass(
        t,
        (
            cst.BaseParenthesizableWhitespace,
            cst.Newline,
            cst.EmptyLine,
            cst.TrailingWhitespace,
            cst.Comment,
            cst.Comma,
            cst.Dot,
            cst.Colon,
            cst.Semicolon,
            cst.AssignEqual,
            cst.LeftParen,
            cst.RightParen,
            cst.LeftSquareBracket,
            cst.RightSquareBracket,
            cst.LeftCurlyBrace,
            cst.RightCurlyBrace,
            cst.BaseBinaryOp,
            cst.BaseBooleanOp,
            cst.BaseCompOp,
            cst.BaseUnaryOp,
            cst.BaseAugOp,
        ),
    )
)


#: type -> whether its instances are code nodes (a libcst node not in :data:`TRIVIA`)
_IS_CODE: dict[type, bool] = {}


def is_code(value) -> bool:
    """Whether ``value`` is a code node (a libcst node not in :data:`TRIVIA`)."""
    t = type(value)
    known = _IS_CODE.get(t)
    if known is None:
        known = _IS_CODE[t] = issubclass(t, cst.CSTNode) and t not in TRIVIA
    return known


def _only_trivia(annotation) -> bool:
    """Whether a field so annotated holds no code node whatever its value: its node types
    (``lpar: Sequence[LeftParen]``, ``comma: Comma | MaybeSentinel``, ``whitespace_after:
    BaseParenthesizableWhitespace``), and every subclass of them, are :data:`TRIVIA`; the
    rest of what it admits is no node (a string, a sentinel, None). An annotation not made
    of classes (a forward reference, text) may hold anything."""
    if annotation is None or annotation is type(None):
        return True
    if isinstance(annotation, type):
        if not issubclass(annotation, cst.CSTNode):
            return annotation in (str, bool, cst.MaybeSentinel)
        todo, seen = [annotation], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            if t not in TRIVIA:
                return False
            todo.extend(t.__subclasses__())
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return all(type(a) is str for a in args)
    if origin in (typing.Union, collections.abc.Sequence, list, tuple) and args:
        return all(a is Ellipsis or _only_trivia(a) for a in args)
    return False


#: node type -> ``node -> its code children`` (see :func:`code_children`)
_CODE_CHILDREN: dict[type, Callable] = {}


def _learn_code(node: cst.CSTNode) -> Callable:
    """The code-children getter of ``node``'s type: the fields of :func:`children`, in the
    same order, less those that can only hold trivia (never read), as straight-line code.
    When a field libcst's visit skipped the first time holds a node, libcst is asked (as
    :func:`children` does)."""
    t = type(node)
    if t not in _FIELDS:
        _learn(node)
    visited, others = _FIELDS[t]
    types = {f.name: f.type for f in dataclasses.fields(node)}
    lines = ["def code_children(node):"]
    for name in others:
        lines += [
            f"    v = node.{name}",
            "    if v is not None and type(v) is not str and _holds_node(v):",
            "        return [c for c in node.children if _is_code(c)]",
        ]
    lines.append("    out = []")
    for name in visited:
        if _only_trivia(types.get(name, object)):
            continue
        lines += [
            f"    v = node.{name}",
            "    k = _IS_CODE.get(type(v))",
            "    if k is None:",
            "        k = _is_code(v)",
            "    if k:",
            "        out.append(v)",
            "    elif type(v) is tuple or type(v) is list:",
            "        out.extend([c for c in v if _is_code(c)])",
        ]
    lines.append("    return out")
    scope = {"_IS_CODE": _IS_CODE, "_is_code": is_code, "_holds_node": _holds_node}
    exec("\n".join(lines), scope)  # noqa: S102 (text built above from field names)
    getter = _CODE_CHILDREN[t] = scope["code_children"]
    return getter


def code_children_getter(node: cst.CSTNode) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """:func:`code_children` of the nodes of ``node``'s type, for a walk that keeps one per
    type (a new list each call)."""
    return _CODE_CHILDREN.get(type(node)) or _learn_code(node)


def code_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``[c for c in children(node) if type(c) not in TRIVIA]``, without reading the fields
    that can only hold trivia (two in three nodes of a typical statement)."""
    getter = _CODE_CHILDREN.get(type(node))
    if getter is None:
        getter = _learn_code(node)
    return getter(node)


def path_to(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode] | None:
    """Nodes from ``root`` down to ``target`` (both included), by identity."""
    stack: list[tuple[cst.CSTNode, int]] = [(root, 0)]
    path: list[cst.CSTNode] = []
    while stack:
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        if node is target:
            return path
        for child in reversed(code_children(node)):
            stack.append((child, depth + 1))
    return None


def walk_code(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """:func:`walk` without :data:`TRIVIA` (two in three nodes of a typical statement), for
    finding code nodes."""
    stack = [node]
    pop, extend, getters = stack.pop, stack.extend, _CODE_CHILDREN
    while stack:
        cur = pop()
        yield cur
        getter = getters.get(type(cur))
        if getter is None:
            getter = _learn_code(cur)
        below = getter(cur)  # a new list each time: reversed in place
        if below:
            below.reverse()
            extend(below)


class _Nothing:
    """A context manager that does nothing, made once."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, traceback) -> None:
        return None


_NOTHING = _Nothing()


class TextState(CodegenState):
    """libcst's code generation for text alone: ``CodegenState`` records no positions, but
    each node's ``record_syntactic_position`` is still a generator-based context manager
    made and run for nothing (a third of a render's time); here it is one shared object."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> _Nothing:
        return _NOTHING


def node_text(
    node: cst.CSTNode, indent: str = "    ", newline: str = "\n", at: Sequence[str] = ()
) -> str:
    """``node``'s code, as ``cst.Module([], default_indent=indent,
    default_newline=newline).code_for_node(node)`` renders it; ``at``: the indentation it
    is rendered at (the indent of each block around it)."""
    state = TextState(indent, newline)
    if at:
        state.indent_tokens = list(at)
    node._codegen(state)
    return "".join(state.tokens)


def code_ranges(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """What ``MetadataWrapper(module).resolve(PositionProvider)`` returns (each node's
    syntactic code range), without the full visit of the tree the resolver also makes for
    batchable providers even when there are none (half its time), and with each node's range
    kept as token offsets, made a :class:`CodeRange` only for the nodes asked for (libcst
    splits every token at newlines and builds two positions for every node)."""
    return code_ranges_of([(module, ())], module.default_indent, module.default_newline)


def code_ranges_of(
    parts: Sequence[tuple[cst.CSTNode, Sequence[str]]], indent: str, newline: str
) -> Mapping[cst.CSTNode, CodeRange]:
    """:func:`code_ranges` of the nodes of ``parts`` rendered one after the other, each at
    its indentation (the indent of each block around it): a statement's columns are those it
    has in its module, with no need to render what holds it (``indent``, ``newline``: the
    module's defaults)."""
    state = _OffsetState(indent, newline)
    for node, at in parts:
        state.indent_tokens = list(at)
        node._codegen(state)
    return _Ranges(state.tokens, state.spans)


class _Syntactic:
    """``record_syntactic_position`` of libcst's ``PositionProvidingCodegenState``, in token
    offsets: the node's range is what it generates inside (or its ``start_node``'s start,
    its ``end_node``'s end)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state, node, start_node, end_node) -> None:
        self.state, self.node = state, node
        self.start_node, self.end_node = start_node, end_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, *exc) -> None:
        spans = self.state.spans
        end = len(self.state.tokens)
        start = spans[self.start_node][0] if self.start_node is not None else self.start
        end = spans[self.end_node][1] if self.end_node is not None else end
        spans[self.node] = (start, end)


class _OffsetState(CodegenState):
    """Code generation that records each node's range in token offsets, as libcst's
    position provider does in (line, column): a node that records no syntactic position
    gets what it generates, whitespace included."""

    def __init__(self, default_indent: str, default_newline: str) -> None:
        super().__init__(default_indent, default_newline)
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self.starts: list[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.spans:
            self.spans[node] = (start, len(self.tokens))

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> _Syntactic:
        return _Syntactic(self, node, start_node, end_node)

    def pop_trailing_newline(self) -> None:
        """Kept: the offsets recorded count it (libcst's positions do not move back either)."""


class _Ranges(Mapping):
    """Node -> :class:`CodeRange` (1-based lines, 0-based columns, as libcst's), computed
    from token offsets on access."""

    def __init__(self, tokens: list[str], spans: dict) -> None:
        self.spans = spans
        self.offsets = list(itertools.accumulate(map(len, tokens), initial=0))
        text = "".join(tokens)
        self.line_starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]

    def _position(self, token: int) -> CodePosition:
        offset = self.offsets[token]
        line = bisect.bisect_right(self.line_starts, offset)
        return CodePosition(line, offset - self.line_starts[line - 1])

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        start, end = self.spans[node]
        return CodeRange(self._position(start), self._position(end))

    def __contains__(self, node: object) -> bool:
        return node in self.spans

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)


#: the line breaks libcst's positions count (``\r\n``, ``\r``, ``\n``)
_NEWLINE = re.compile(r"\r\n?|\n")


#: the globals of the ``__init__`` methods :func:`_quick_inits` gives libcst's node classes;
#: ``TRUSTED`` is True while :func:`parse_valid_module` parses
_INIT_SCOPE: dict = {"TRUSTED": False}


def _quick_inits() -> None:
    """Give each libcst node class an ``__init__`` that does what its dataclass ``__init__``
    does (the same parameters, defaults and default factories, each field stored, then
    ``__post_init__()``, which runs ``_validate()``) in less time: each field is stored by
    its slot's own setter (the dataclass one calls ``object.__setattr__``, which looks the
    name up again), and ``__post_init__()`` is left out while ``TRUSTED`` is set. A class
    whose ``__init__`` is not that of a frozen, slotted dataclass of plain positional fields
    keeps its own. Once per process."""
    if "done" in _INIT_SCOPE:
        return
    _INIT_SCOPE["done"] = True
    lines, classes = [], []
    for cls in _node_classes():
        if not _plain_dataclass_init(cls):
            continue
        init = cls.__dict__["__init__"]
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        slots = [cls.__dict__.get(n) for n in names]
        defaults = init.__defaults__ or ()
        k = len(classes)
        classes.append((cls, defaults))
        lines.append(f"def init{k}({', '.join(['self', *names])}):")
        for i, (f, slot) in enumerate(zip(fields, slots)):
            if f.default_factory is not dataclasses.MISSING:
                # the dataclass's default of this parameter is its "no value" marker
                _INIT_SCOPE[f"marker{k}_{i}"] = defaults[i - len(names)]
                _INIT_SCOPE[f"factory{k}_{i}"] = f.default_factory
                lines.append(f"    if {f.name} is marker{k}_{i}: {f.name} = factory{k}_{i}()")
            _INIT_SCOPE[f"set{k}_{i}"] = slot.__set__
            lines.append(f"    set{k}_{i}(self, {f.name})")
        if hasattr(cls, "__post_init__"):  # as the dataclass decides
            lines += ["    if not TRUSTED:", "        self.__post_init__()"]
        else:
            lines.append("    pass")
    exec("\n".join(lines), _INIT_SCOPE)  # noqa: S102 (text built above from field names)
    for k, (cls, defaults) in enumerate(classes):
        quick = _INIT_SCOPE[f"init{k}"]
        quick.__defaults__ = defaults or None
        quick.__qualname__ = f"{cls.__qualname__}.__init__"
        quick.__annotations__ = cls.__init__.__annotations__
        quick.__wrapped__ = cls.__init__  # the dataclass's (tests compare the two)
        cls.__init__ = quick


_SLOT = type(cst.Name.__dict__["value"])


def _node_classes() -> list[type]:
    """Every subclass of ``cst.CSTNode`` (depth first, as found)."""
    todo, seen, out = [cst.CSTNode], set(), []
    while todo:
        cls = todo.pop()
        out.append(cls)
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return out


def _plain_dataclass_init(cls: type) -> bool:
    """Is ``cls.__init__`` that of a frozen, slotted dataclass of plain positional fields?"""
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if code is None or "__slots__" not in cls.__dict__ or not dataclasses.is_dataclass(cls):
        return False
    names = tuple(f.name for f in dataclasses.fields(cls))
    return not (
        code.co_varnames[1 : code.co_argcount] != names
        or code.co_kwonlyargcount
        or init.__kwdefaults__
        or not all(type(cls.__dict__.get(n)) is _SLOT for n in names)
    )


def parse_valid_module(source: str) -> cst.Module:
    """``cst.parse_module(source)`` for ``source`` CPython's own parser has accepted.

    Every node the parser builds runs ``_validate()`` from ``CSTNode.__post_init__``: a
    third of the parse, checking what the grammar already guarantees (libcst's own comment
    there says it would rather not validate parsed trees). For code known to be valid the
    check is left out while the parser runs (see :func:`_quick_inits`); nodes built at any
    other time are validated as always."""
    _quick_inits()
    _INIT_SCOPE["TRUSTED"] = True
    try:
        return cst.parse_module(source)
    finally:
        _INIT_SCOPE["TRUSTED"] = False


# -- small questions about expressions, shared by the rules and the codemods ----------------
def expression_line(scope: cst.CSTNode, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
    """The line of ``scope`` whose one statement is the expression ``node``
    (``self.apply(self._init_weights)``, ``self.to(device)``); None when ``node`` is part of a
    larger statement."""
    return next(
        (
            n
            for n in walk_code(scope)
            if type(n) is cst.SimpleStatementLine
            and len(n.body) == 1
            and type(n.body[0]) is cst.Expr
            and n.body[0].value is node
        ),
        None,
    )


def shares_line(scope: cst.CSTNode, statement: cst.BaseSmallStatement) -> bool:
    """Does the line of ``scope`` holding ``statement`` hold other statements too (``n = 4;
    self.x = t``)?"""
    return any(
        type(n) is cst.SimpleStatementLine
        and len(n.body) > 1
        and any(s is statement for s in n.body)
        for n in walk_code(scope)
    )


def short(node: cst.CSTNode, limit: int = 60) -> str:
    """The source of ``node`` on one line, cut to ``limit`` characters (for messages)."""
    text = " ".join(node_text(node).split())
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


def attribute_name(node: cst.BaseExpression) -> str | None:
    """The attribute a ``getattr``/``setattr`` name argument names: a string literal that is
    an identifier, or an f-string of identifier text and plain or dotted names
    (``f'pos_embed_{i}'``, ``f'cg_{ir.l}'``, given as its text ``pos_embed_{i}``: one name per
    value of ``i``). None otherwise."""
    value = string_value(node)
    if value is not None:
        return value if value.isidentifier() else None
    if not isinstance(node, cst.FormattedString) or node.start not in ("f'", 'f"'):
        return None
    out = []
    for part in node.parts:
        if isinstance(part, cst.FormattedStringText) and re.fullmatch(r"\w*", part.value):
            out.append(part.value)
        elif (
            isinstance(part, cst.FormattedStringExpression)
            and dotted(part.expression) is not None
            and part.conversion is None
            and part.format_spec is None
        ):
            out.append("{" + dotted(part.expression) + "}")
        else:
            return None
    text = "".join(out)
    return text if text and not text[0].isdigit() else None


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
        if type(node) is cst.Attribute:
            parts.append(node.attr.value)
            node = node.value
        elif type(node) is cst.Subscript:
            parts.append("[]")
            node = node.value
        elif type(node) is cst.Name:
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
