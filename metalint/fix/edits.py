"""Stateless edit primitives of the codemods: parsing and rendering code, substituting
names, statement helpers and the transformers that splice new statements in place.

A codemod either returns a :class:`Rewrite` (the new ``ClassDef``, its applicability, a
message) or raises :class:`Unfixable` with the reason. Everything is computed from the
syntax tree; nothing is imported or executed.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import (
    code_children,
    is_code,
    node_text,
    path_to,
    walk_code,
)
from metalint.vocabulary import (
    DEVICE_FACTORIES,
    EXTERNAL_RESET_BASES,
    SAMPLERS,
)

BUILTIN_NAMES = frozenset(dir(builtins))


class Unfixable(Exception):
    """The codemod cannot rewrite this finding without guessing; ``str()`` says why."""


@dataclass
class Rewrite:
    new_class: cst.ClassDef
    applicability: Applicability
    message: str
    hook: str | None = None  # the init hook the rewrite puts code in
    #: the hook the fix that must follow it puts code in (ML007's: ML002's, the next round)
    then_hook: str | None = None
    #: the rewrite to apply instead when a base class (of another file: only the whole tree
    #: tells) has its own ``reset_parameters()``: a new hook that extends the base's
    over_base_hook: Rewrite | None = None
    #: the value stays in ``__init__``, re-created by a hook it does not call
    #: (:attr:`ClassEdit.keep_value`)
    kept: bool = False


def render(node: cst.CSTNode, module: cst.Module | None = None) -> str:
    if module is None:
        return node_text(node)
    return node_text(node, module.default_indent, module.default_newline)


def expr(code: str) -> cst.BaseExpression:
    return _parsed(cst.parse_expression, code)


def stmt(code: str) -> cst.BaseStatement:
    return _parsed(cst.parse_statement, code if code.endswith("\n") else code + "\n")


#: (parser, code) -> its tree, parsed once per process (codemods parse the same few lines,
#: ``self.reset_parameters()``, for finding after finding)
_PARSED: dict[tuple[Callable, str], cst.CSTNode] = {}


def _parsed(parse: Callable, code: str) -> cst.CSTNode:
    """A new tree of ``code``: a copy of the one parsed the first time (a copy of its code
    nodes: codemods find nodes by identity), which costs a third of a parse."""
    tree = _PARSED.get((parse, code))
    if tree is None:
        if len(_PARSED) > 4096:
            _PARSED.clear()
        tree = _PARSED[parse, code] = parse(code)
    return _copy(tree)


#: node type -> its fields (its ``__slots__``)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _copy(node: cst.CSTNode) -> cst.CSTNode:
    """``node`` with a new object for each code node in it; its trivia (whitespace, commas,
    operators: no codemod looks for one) shared."""
    t = type(node)
    names = _FIELDS.get(t)
    if names is None:
        names = _FIELDS[t] = tuple(f.name for f in fields(t))
    new = object.__new__(t)
    for name in names:
        value = getattr(node, name)
        if is_code(value):
            value = _copy(value)
        elif type(value) is tuple or type(value) is list:
            value = type(value)([_copy(v) if is_code(v) else v for v in value])
        object.__setattr__(new, name, value)
    return new


def replaced(root: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """``root.deep_replace(old, new)`` that rebuilds only the nodes from ``root`` down to
    ``old``: every other node stays the same object (``deep_replace`` copies the whole tree),
    so a class's text is rendered from the pieces it keeps (``registry.ClassText``)."""
    path = path_to(root, old)
    if path is None:
        return root
    node = new
    for parent, child in zip(reversed(path[:-1]), reversed(path[1:])):
        node = _with_child(parent, child, node)
    return node


def _with_child(parent: cst.CSTNode, child: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """``parent`` with ``new`` in place of its direct child ``child``."""
    for field in fields(parent):
        value = getattr(parent, field.name)
        if value is child:
            return parent.with_changes(**{field.name: new})
        if isinstance(value, (tuple, list)) and any(c is child for c in value):
            items = [new if c is child else c for c in value]
            return parent.with_changes(**{field.name: type(value)(items)})
    raise ValueError(f"{type(child).__name__} is no child of {type(parent).__name__}")


def transformed(root: cst.CSTNode, transformer):
    """``root.visit(transformer)`` for a transformer with no visit hook whose leave hooks
    return the updated node for every node its ``hits(node)`` does not select: only the nodes from
    ``root`` down to those are rebuilt (bottom up, as libcst does, their sequences made
    tuples); every other node stays the same object, so a class's text is rendered from the
    pieces it keeps (``registry.ClassText``). A node removed where its parent has no
    sequence is left to libcst."""
    hits = transformer.hits
    on_path: set[int] = set()
    targets: set[int] = set()
    stack: list[tuple[cst.CSTNode, int]] = [(root, 0)]
    path: list[cst.CSTNode] = []
    while stack:
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        if hits(node):
            targets.add(id(node))
            on_path.update(map(id, path))
        stack.extend((child, depth + 1) for child in reversed(code_children(node)))
    if not targets:
        return root
    try:
        return _Rebuild(on_path, targets, transformer.on_leave).node(root)
    except _Unplaced:
        return root.visit(transformer)


class _Unplaced(Exception):
    """A node removed (or flattened) where its parent holds one node, not a sequence."""


class _Rebuild:
    """:func:`transformed`'s rebuild of the nodes ``on_path``."""

    def __init__(self, on_path: set[int], targets: set[int], leave: Callable) -> None:
        self.on_path, self.targets, self.leave = on_path, targets, leave

    def node(self, node: cst.CSTNode):
        changes = {}
        for field in fields(node):
            value = getattr(node, field.name)
            if isinstance(value, cst.CSTNode):
                if id(value) in self.on_path:
                    new = self.node(value)
                    if not isinstance(new, cst.CSTNode):
                        raise _Unplaced
                    changes[field.name] = new
            elif type(value) in (list, tuple) and any(id(v) in self.on_path for v in value):
                changes[field.name] = self.sequence(value)
        updated = node.with_changes(**changes) if changes else node
        if id(node) in self.targets:
            return self.leave(node, updated)
        return updated

    def sequence(self, values) -> tuple:
        out: list = []
        for v in values:
            new = self.node(v) if id(v) in self.on_path else v
            if isinstance(new, cst.FlattenSentinel):
                out.extend(new.nodes)
            elif not isinstance(new, cst.RemovalSentinel):
                out.append(new)
        return tuple(out)


def names_in(node: cst.CSTNode) -> Iterator[cst.Name]:
    """Name nodes that read a variable (not attribute names, not keyword names)."""
    if type(node) is cst.Name:
        yield node
        return
    if type(node) is cst.Attribute:
        yield from names_in(node.value)
        return
    if type(node) is cst.Arg:
        yield from names_in(node.value)
        return
    if type(node) in _COMPREHENSIONS:
        yield from _free_names(node)
        return
    if type(node) in (cst.Lambda, cst.NamedExpr):
        raise Unfixable("the value uses a lambda or `:=`")
    for child in code_children(node):
        yield from names_in(child)


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _free_names(comp: cst.CSTNode) -> Iterator[cst.Name]:
    """The names a comprehension reads from the code around it (e3nn's ``torch.cat([
    torch.ones(mul * (2 * l + 1)) for mul, (l, p) in irreps])``: ``irreps``), not those its own
    ``for`` clauses bind (``mul``, ``l``, ``p``), which a hook's copy binds again. A bound name
    also read from outside (``[x for x in x]``) is refused: one name, two meanings."""
    bound: set[str] = set()
    clause = comp.for_in
    while clause is not None:
        bound |= {n.value for n in walk_code(clause.target) if type(n) is cst.Name}
        clause = clause.inner_for_in
    outer = list(names_in(comp.for_in.iter))  # the first iterable runs outside its scope
    if any(n.value in bound for n in outer):
        raise Unfixable("a comprehension's variable is also read from outside it")
    yield from outer
    inner = [child for child in code_children(comp) if child is not comp.for_in]
    clause = comp.for_in
    while clause is not None:
        inner.append(clause.target)
        inner.extend(i.test for i in clause.ifs)
        if clause.inner_for_in is not None:
            inner.append(clause.inner_for_in.iter)
        clause = clause.inner_for_in
    for part in inner:
        for n in names_in(part):
            if n.value not in bound:
                yield n


class _Substitute(cst.CSTTransformer):
    def __init__(self, replace: dict[int, cst.BaseExpression]):
        self.replace = replace

    def hits(self, node: cst.CSTNode) -> bool:
        return type(node) is cst.Name and id(node) in self.replace

    def leave_Name(self, original_node, updated_node):
        return self.replace.get(id(original_node), updated_node)


def substitute(node: cst.CSTNode, replace: dict[int, cst.BaseExpression]) -> cst.CSTNode:
    return transformed(node, _Substitute(replace)) if replace else node


def self_attr_expr(name: str) -> cst.Attribute:
    return cst.Attribute(cst.Name("self"), cst.Name(name))


def fill(template: str, **values: cst.BaseExpression) -> cst.BaseStatement:
    """Parse ``template`` and put each expression node in place of the name ``__<key>__``:
    expressions keep their own text (comments, strings spanning lines) untouched."""
    node = stmt(template)
    for key, value in values.items():
        target = next(
            n for n in walk_code(node) if isinstance(n, cst.Name) and n.value == f"__{key}__"
        )
        node = replaced(node, target, value)
    return node


def guarded(guard: str, inner: cst.BaseStatement) -> cst.BaseStatement:
    node = stmt(f"if {guard}:\n    pass\n")
    return node.with_changes(body=node.body.with_changes(body=[inner]))


# -- torch spelling ------------------------------------------------------------------------------
def torch_spelling(ctx: RuleContext) -> tuple[str, str]:
    """How this file spells ``torch`` and ``torch.nn`` (e.g. ``("torch", "nn")``)."""
    torch_name = nn_name = None
    for local, full in ctx.facts.aliases.names.items():
        if full == "torch" and torch_name is None:
            torch_name = local
        if full == "torch.nn" and nn_name is None:
            nn_name = local
    if torch_name is None:
        raise Unfixable("`torch` is not imported as a module in this file")
    return torch_name, nn_name or f"{torch_name}.nn"


OWN_RESET = "__reset_own_tensors"


def calls_self(node: cst.CSTNode, name: str) -> bool:
    """Is ``node`` the call ``self.<name>()`` (no arguments)?"""
    return isinstance(node, cst.Call) and not node.args and dotted(node.func) == f"self.{name}"


class SwapCall(cst.CSTTransformer):
    """``self.<old>()`` -> ``self.<new>()``, counting them."""

    def __init__(self, old: str, new: str):
        self.old, self.new, self.swapped = old, new, 0

    def hits(self, node: cst.CSTNode) -> bool:
        return calls_self(node, self.old)

    def leave_Call(self, original_node, updated_node):
        if calls_self(original_node, self.old):
            self.swapped += 1
            return updated_node.with_changes(func=expr(f"self.{self.new}"))
        return updated_node


def does_nothing(body: cst.BaseSuite) -> bool:
    """A method body of only ``pass``, ``...`` or a docstring (peft's ``GloraEmptyPath.
    reset_parameters``): calling it changes nothing."""
    if not isinstance(body, cst.IndentedBlock):
        return False
    return all(
        isinstance(s, cst.SimpleStatementLine)
        and all(
            isinstance(x, cst.Pass)
            or (isinstance(x, cst.Expr) and isinstance(x.value, (cst.Ellipsis, cst.SimpleString)))
            for x in s.body
        )
        for s in body.body
    )


def is_docstring(s: cst.BaseStatement) -> bool:
    return (
        isinstance(s, cst.SimpleStatementLine)
        and len(s.body) == 1
        and isinstance(s.body[0], cst.Expr)
        and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def is_pass(s: cst.BaseStatement) -> bool:
    return isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body)


def expand(original_node, updated_node, replacement) -> list:
    """The statements that replace ``original_node``: blank lines above it go above the
    group, its comments stay with it."""
    new = [updated_node if n is original_node else n for n in replacement]
    if len(new) <= 1:
        return new
    at = next((i for i, n in enumerate(new) if n is updated_node), len(new) - 1)
    if at == 0:
        return new
    main = new[at]
    lead = list(getattr(main, "leading_lines", ()))
    k = 0
    while k < len(lead) and lead[k].comment is None:
        k += 1
    new[0] = new[0].with_changes(leading_lines=lead[:k])
    new[at] = main.with_changes(leading_lines=lead[k:])
    return new


class ReplaceStatements(cst.CSTTransformer):
    def __init__(self, replace):
        self.replace = replace

    def hits(self, node: cst.CSTNode) -> bool:
        hit = self.replace.get(id(node))
        return hit is not None and hit[0] is node

    def on_leave(self, original_node, updated_node):
        hit = self.replace.get(id(original_node))
        if hit is None or hit[0] is not original_node:
            return updated_node
        new = expand(original_node, updated_node, hit[1])
        if not new:
            return cst.RemoveFromParent()
        if len(new) == 1:
            return new[0]
        return cst.FlattenSentinel(new)


def with_device(call: cst.Call, device: cst.BaseExpression) -> cst.Call:
    """``call`` with ``device=<device>`` added as its last argument (after a trailing comma
    when there is one): ML008's ``device="cpu"``, ML009's ``device=self.device``, a hook's
    ``device=self.mask.device``."""
    arg = cst.Arg(
        value=device,
        keyword=cst.Name("device"),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    args = list(call.args)
    if args and isinstance(args[-1].comma, cst.Comma):
        args.append(arg.with_changes(comma=args[-1].comma))
    elif args:
        args[-1] = args[-1].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        args.append(arg)
    else:
        args = [arg]
    return call.with_changes(args=args)


class OnDevice(cst.CSTTransformer):
    """Torch factories without ``device=`` given ``device=<device>`` (a class of the module, not
    of a method: a class made per call would hold the syntax tree in a reference cycle)."""

    def __init__(self, device: cst.BaseExpression, qualify) -> None:
        super().__init__()
        self.device = device
        self.qualify = qualify

    def hits(self, node: cst.CSTNode) -> bool:
        return type(node) is cst.Call and not (
            (self.qualify(node.func) or "") not in DEVICE_FACTORIES - SAMPLERS
            or any(
                a.star or (a.keyword is not None and a.keyword.value == "device") for a in node.args
            )
        )

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not self.hits(original):
            return updated
        return with_device(updated, self.device)


def on_self(stmts: list[cst.BaseStatement]) -> Iterator[cst.Attribute]:
    """Every ``self.<name>`` of the statements, in order."""
    for s in stmts:
        for n in walk_code(s):
            if type(n) is cst.Attribute and type(n.value) is cst.Name and n.value.value == "self":
                yield n


class OffKeptDevice(cst.CSTTransformer):
    """``device=self._device`` of a torch factory, and ``x.to(self._device)``, where ``kept``
    holds the ids of those attributes, become ``device``."""

    def __init__(self, kept: set[int], device: cst.BaseExpression, qualify) -> None:
        super().__init__()
        self.kept = kept
        self.device = device
        self.qualify = qualify

    def hits(self, node: cst.CSTNode) -> bool:
        """A factory or a ``.to()`` copy with an argument ``kept`` holds (the others it
        leaves as they are)."""
        return (
            type(node) is cst.Call
            and any(id(a.value) in self.kept for a in node.args)
            and self._factory_or_copy(node)
        )

    def _factory_or_copy(self, node: cst.Call) -> bool:
        factory = (self.qualify(node.func) or "") in DEVICE_FACTORIES
        return factory or (type(node.func) is cst.Attribute and node.func.attr.value == "to")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        factory = (self.qualify(original.func) or "") in DEVICE_FACTORIES
        copy = type(original.func) is cst.Attribute and original.func.attr.value == "to"
        if not (factory or copy):
            return updated
        args = list(updated.args)
        for i, (a, o) in enumerate(zip(args, original.args)):
            if id(o.value) not in self.kept:
                continue
            if (a.keyword is not None and a.keyword.value == "device") or (
                copy and a.keyword is None and i == 0
            ):
                args[i] = a.with_changes(value=self.device)
        return updated.with_changes(args=args)


def new_method(
    hook: str, stmts: list[cst.BaseStatement], init_node: cst.FunctionDef
) -> cst.FunctionDef:
    returns = " -> None" if init_node.returns is not None else ""
    fn = stmt(f"def {hook}(self){returns}:\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    return fn.with_changes(
        body=fn.body.with_changes(body=join_with_blocks(stmts)),
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def join_with_blocks(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Adjacent ``with torch.no_grad():`` blocks (one per moved value) become one block."""
    out: list[cst.BaseStatement] = []
    for s in stmts:
        prev = out[-1] if out else None
        if (
            isinstance(s, cst.With)
            and isinstance(prev, cst.With)
            and not any(line.comment for line in s.leading_lines)
            and _items(prev) == _items(s)
            and isinstance(prev.body, cst.IndentedBlock)
            and isinstance(s.body, cst.IndentedBlock)
        ):
            body = prev.body.with_changes(body=[*prev.body.body, *s.body.body])
            out[-1] = prev.with_changes(body=body)
            continue
        out.append(s)
    return out


def _items(w: cst.With) -> str:
    return ", ".join(render(i) for i in w.items)


# -- assignment helpers --------------------------------------------------------------------------
def assigned_attr(node: cst.CSTNode) -> str | None:
    """``gamma`` for ``self.gamma = ...`` (Assign/AnnAssign with one target)."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        t = dotted(node.targets[0].target)
    elif isinstance(node, cst.AnnAssign):
        t = dotted(node.target)
    else:
        return None
    if t and t.startswith("self.") and t.count(".") == 1:
        return t[5:]
    return None


def small_statement(node: cst.CSTNode, path: list[cst.CSTNode]) -> cst.BaseSmallStatement | None:
    for n in reversed(path):
        if isinstance(n, cst.BaseSmallStatement):
            return n
    return node if isinstance(node, cst.BaseSmallStatement) else None


# -- legacy constructors ------------------------------------------------------------------------


def init_param(init, name: str) -> cst.Param | None:
    """The parameter ``name`` of ``__init__`` (positional or keyword-only), or None."""
    params = (*init.node.params.params, *init.node.params.kwonly_params)
    return next((p for p in params if p.name.value == name), None)


def base_guard_comment(base: str) -> str:
    """The comment on the guard of an own init called from a hook that extends ``base``'s: a
    base of the tree calls it from its ``__init__`` (why the guard is there); of one of
    :data:`EXTERNAL_RESET_BASES` that is not known."""
    name = base.rsplit(".", 1)[-1]
    verb = "if" if base in EXTERNAL_RESET_BASES else "when"
    return f"# not yet {verb} {name}.__init__() calls it"


COMPOUND = (
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.IfExp,
)


def paren(e: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(e, COMPOUND) and not e.lpar:
        return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return e
