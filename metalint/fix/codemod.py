"""Shared machinery of the codemods: editing one class with libcst, keeping formatting.

A codemod reads the facts of one class and the node a rule reported, and either returns a
:class:`Rewrite` (the new ``ClassDef``, its applicability, a message) or raises
:class:`Unfixable` with the reason. Everything is computed from the syntax tree; nothing is
imported or executed.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.static.construction import (
    is_number,
    is_tensor,
    registrations,
    repackages_arguments,
    top_function,
)
from metalint.static.model import ClassFacts, MethodFacts, builds_module, construction
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import code_children, node_text, walk_code
from metalint.static.tensors import (
    every_parameter_written,
    inplace_write,
    legacy_sizes,
    value_kind,
)
from metalint.vocabulary import (
    BUFFER_CLASSES,
    BUFFER_HOOK,
    CONTAINER_MUTATORS,
    DETERMINISTIC_METHODS,
    DEVICE_FACTORIES,
    EXTERNAL_RESET_BASES,
    HOOKLESS_BASES,
    INPLACE_METHODS,
    LEGACY_CONSTRUCTOR_DTYPES,
    METADATA_ATTRIBUTES,
    METADATA_METHODS,
    MODULE_MEMBERS,
    PARAMETER_CLASSES,
    PARAMETER_CONTAINERS,
    REGISTER_METHODS,
    RESET_HOOK,
    RNG_FREE_BUILTINS,
    RNG_FREE_TORCH,
    ROOT_ENTRIES,
    SAMPLERS,
    TENSOR_ATTRIBUTES,
    TENSOR_METHODS,
    TORCH_WITHOUT_RESET,
    WHOLE_MODULE_METHODS,
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
    return cst.parse_expression(code)


def stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code if code.endswith("\n") else code + "\n")


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

    def leave_Name(self, original_node, updated_node):
        return self.replace.get(id(original_node), updated_node)


def substitute(node: cst.CSTNode, replace: dict[int, cst.BaseExpression]) -> cst.CSTNode:
    return node.visit(_Substitute(replace)) if replace else node


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
        node = node.deep_replace(target, value)
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


# -- RNG ---------------------------------------------------------------------------------------


def _touches(
    node: cst.CSTNode, attr: str, writes_only: bool, memo: dict | None = None
) -> str | None:
    """ "written" / "read" when ``node`` uses ``self.<attr>``."""
    written, read, _ = _uses(node, memo)
    if attr in written:
        return "written"
    return None if writes_only or attr not in read else "read"


def mentions_none(node: cst.CSTNode) -> bool:
    """Does ``node`` mention ``None`` as a value? ``centers[None, None, ...]``, ``x[:, None]``
    (an index: a new axis) and ``x is not None`` (a test) are no values."""
    indices = {
        id(x)
        for s in walk_code(node)
        if isinstance(s, (cst.SubscriptElement, cst.Comparison))
        for x in walk_code(s)
    }
    return any(
        id(n) not in indices and isinstance(n, cst.Name) and n.value == "None"
        for n in walk_code(node)
    )


def sets_metadata(node: cst.CSTNode, attr: str) -> bool:
    """Is ``node`` a statement that only sets Python attributes of the tensor ``self.<attr>``,
    none of its values (speechbrain's ``self.slope.requiresGrad = True`` after
    ``self.slope = nn.Parameter(torch.ones(n))``)? A hook that sets the values in place keeps
    the object, so such a statement sees and leaves the same tensor either way."""
    if type(node) is not cst.SimpleStatementLine:
        return False
    for small in node.body:
        if type(small) is not cst.Assign or _touches(small.value, attr, False):
            return False
        for t in small.targets:
            target = t.target
            if (
                type(target) is not cst.Attribute
                or dotted(target.value) != f"self.{attr}"
                or target.attr.value in TENSOR_ATTRIBUTES
            ):
                return False
    return True


def reads_metadata_only(node: cst.CSTNode, attr: str) -> bool:
    """Does ``node`` read only what the tensor ``self.<attr>`` tells without its values
    (``torch.zeros(self.r_weight.shape)``, speechbrain's quaternion convolutions;
    ``self.w.size(0)``), and write nothing of it? Such code sees the same either way when the
    values are set later, by a hook."""
    uses = [n for n in walk_code(node) if type(n) is cst.Attribute]
    whole = {id(n) for n in uses if dotted(n) == f"self.{attr}"}
    if not whole or attr in _uses(node)[0]:
        return False
    meta = {id(n.value) for n in uses if n.attr.value in METADATA_ATTRIBUTES}
    meta |= {
        id(n.func.value)
        for n in walk_code(node)
        if type(n) is cst.Call
        and type(n.func) is cst.Attribute
        and n.func.attr.value in METADATA_METHODS
    }
    return whole <= meta


def _self_attr(d: str | None) -> str | None:
    """``x`` for ``self.x`` or ``self.x.data`` (the tensor itself), else None."""
    if d is None or not d.startswith("self."):
        return None
    rest = d[5:]
    if "." not in rest:
        return rest
    head, tail = rest.split(".", 1)
    return head if tail == "data" else None


def _call_uses(n: cst.Call, written: set[str], calls: set[str]) -> None:
    """What one call writes in place (``self.x.fill_()``, ``init.zeros_(self.x)``) and which
    methods of ``self`` it calls (``self.apply(self._init)`` counts ``_init``)."""

    f = n.func
    if isinstance(f, cst.Attribute):
        if f.attr.value in INPLACE_METHODS and (a := _self_attr(dotted(f.value))):
            written.add(a)
        if dotted(f.value) == "self":
            calls.add(f.attr.value)
            if f.attr.value == "apply" and n.args:
                m = dotted(n.args[0].value)
                if m and m.startswith("self."):
                    calls.add(m[5:])
    name = dotted(f) or ""
    if name.rsplit(".", 1)[-1].endswith("_") and n.args:
        if a := _self_attr(dotted(n.args[0].value)):
            written.add(a)


def _assign_uses(n: cst.Assign | cst.AugAssign | cst.AnnAssign, written: set[str]) -> None:
    if isinstance(n, cst.AnnAssign) and n.value is None:
        return  # ``self.ema_w: torch.Tensor``: a declaration for type checkers, no write
    targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
    for t in targets:
        for x in walk_code(t):
            d = dotted(x) if isinstance(x, cst.Attribute) else None
            if d and d.startswith("self."):
                written.add(d[5:].split(".", 1)[0])


def _uses(
    node: cst.CSTNode, memo: dict | None = None
) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The ``self`` attributes ``node`` writes (assigns, or changes in place) and reads, and the
    methods it calls on ``self`` (``self.apply(self._init)`` counts ``_init``). Codemods ask
    this of the same statements once per finding: ``memo`` (id -> answer and node, kept with
    the class) works it out once per statement."""
    hit = memo.get(id(node)) if memo is not None else None
    if hit is not None and hit[3] is node:
        return hit[:3]
    written: set[str] = set()
    read: set[str] = set()
    calls: set[str] = set()
    for n in walk_code(node):
        if type(n) is cst.Call:
            _call_uses(n, written, calls)
        elif type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
            _assign_uses(n, written)
        elif type(n) is cst.Attribute:
            d = dotted(n)
            if d and d.startswith("self.") and "." not in d[5:]:
                read.add(d[5:])
    out = (frozenset(written), frozenset(read), frozenset(calls))
    if memo is not None:
        memo[id(node)] = (*out, node)  # the node is held, so its id is not reused while cached
    return out


def returns(node: cst.CSTNode) -> bool:
    """Is there a ``return`` in this body (not counting nested functions and classes)?"""
    stack = list(code_children(node))
    while stack:
        n = stack.pop()
        if type(n) is cst.Return:
            return True
        if type(n) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        stack.extend(code_children(n))
    return False


def _return_count(node: cst.CSTNode) -> int:
    """How many ``return`` statements this body holds (not counting nested functions and
    classes)."""
    count = 0
    stack = list(code_children(node))
    while stack:
        n = stack.pop()
        if type(n) is cst.Return:
            count += 1
        elif type(n) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            stack.extend(code_children(n))
    return count


def _early_return(s: cst.CSTNode) -> cst.SimpleStatementLine | None:
    """The bare ``return`` line ending ``if cond: ... return`` (no ``else``; the ``return``
    its last statement, returning nothing), a top-level statement of ``__init__``; None when
    ``s`` is not such an ``if``."""
    if type(s) is not cst.If or s.orelse is not None or type(s.body) is not cst.IndentedBlock:
        return None
    last = s.body.body[-1] if s.body.body else None
    if type(last) is not cst.SimpleStatementLine or len(last.body) != 1:
        return None
    ret = last.body[0]
    if type(ret) is not cst.Return:
        return None
    if ret.value is not None and not (type(ret.value) is cst.Name and ret.value.value == "None"):
        return None
    return last


def _bare_self_call(s: cst.CSTNode) -> str | None:
    """``name`` for the statement ``self.<name>()`` (no arguments)."""
    if (
        type(s) is cst.SimpleStatementLine
        and len(s.body) == 1
        and type(s.body[0]) is cst.Expr
        and type(s.body[0].value) is cst.Call
        and not s.body[0].value.args
        and (d := dotted(s.body[0].value.func) or "").startswith("self.")
        and d.count(".") == 1
    ):
        return d[5:]
    return None


def rng_free(node: cst.CSTNode, ctx: RuleContext, _seen: frozenset = frozenset()) -> bool:
    """Does this statement certainly draw no random numbers? (conservative) A function of the
    file counts by its body (lucidrains' ``exists(v)``: ``return v is not None``)."""
    for n in walk_code(node):
        if not isinstance(n, cst.Call):
            continue
        q = ctx.qualify(n.func)
        name = dotted(n.func)
        if q in RNG_FREE_TORCH or name in RNG_FREE_BUILTINS:
            continue
        f = n.func
        if q is None and isinstance(f, cst.Attribute) and f.attr.value in DETERMINISTIC_METHODS:
            continue
        if q is None and isinstance(f, cst.Name) and f.value not in _seen and len(_seen) < 4:
            fn = top_function(ctx.module, f.value)
            if fn is not None and _read(fn) and rng_free(fn.body, ctx, _seen | {f.value}):
                continue
        return False
    return True


def _read(fn: cst.FunctionDef) -> bool:
    """Is the function's body there to read? One left out of the parse
    (:mod:`metalint.static.elide`) is a single string literal."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    return not (
        len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and len(body[0].body) == 1
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    ) and bool(body)


# -- the class being edited ----------------------------------------------------------------------
def statements_after(path: list[cst.CSTNode]) -> list[cst.BaseStatement]:
    """The statements that follow the end of ``path`` (a path from a statement down to a node)
    in each indented block it passes through, innermost first."""
    out: list[cst.BaseStatement] = []
    for k in range(len(path) - 1, 0, -1):
        block, child = path[k - 1], path[k]
        if isinstance(block, cst.IndentedBlock):
            body = list(block.body)
            at = next((j for j, s in enumerate(body) if s is child), None)
            if at is not None:
                out.extend(body[at + 1 :])
    return out


#: statements whose body may run several times, or not where they stand
NESTING = (cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef, cst.Lambda)


@dataclass
class ClassEdit:
    """Edits of one class, expressed on the original nodes and applied at once by :meth:`build`."""

    ctx: RuleContext
    cls: ClassFacts
    #: original statement -> statements that replace it (in its block)
    replace: dict[int, tuple[cst.BaseStatement, list[cst.BaseStatement]]] = field(
        default_factory=dict
    )
    init_append: list[cst.BaseStatement] = field(default_factory=list)
    hook_append: dict[str, list[cst.BaseStatement]] = field(default_factory=dict)
    #: statements that open an existing hook (code that ran before ``__init__`` called it)
    hook_prepend: dict[str, list[cst.BaseStatement]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    #: the value stays where ``__init__`` makes it and ``use_hook`` adds no call of the hook:
    #: the hook re-creates it for the protocol only (:meth:`keeps_value`)
    keep_value: bool = False
    #: a torch base class whose ``reset_parameters()`` a new hook must extend
    torch_base: str | None = None

    @property
    def init(self) -> MethodFacts:
        init = self.cls.init
        if init is None:
            raise Unfixable(f"`{self.cls.name}` has no `__init__`")
        return init

    @property
    def init_body(self) -> Sequence[cst.BaseStatement]:
        body = self.init.node.body
        if not isinstance(body, cst.IndentedBlock):
            raise Unfixable("`__init__` is written on one line")
        return body.body

    # -- locating statements -----------------------------------------------------------------
    def _index(self) -> tuple[dict[int, cst.CSTNode], dict[int, int]]:
        """Parents of the nodes of ``__init__``'s body (by id), and the index of each top-level
        statement: built once per class, asked once per finding."""
        init = self.init
        index = getattr(init, "_body_index", None)
        if index is None or index[2] is not init.node:
            parents: dict[int, cst.CSTNode] = {}
            tops: dict[int, int] = {}
            for i, top in enumerate(self.init_body):
                tops[id(top)] = i
                stack = [top]
                while stack:
                    n = stack.pop()
                    for c in code_children(n):
                        parents[id(c)] = n
                        stack.append(c)
            index = (parents, tops, init.node)
            init._body_index = index
        return index[0], index[1]

    def returns(self, body: cst.CSTNode) -> bool:
        """:func:`returns` of a method body of this class, worked out once per body."""
        memo = getattr(self.cls, "_returns_memo", None)
        if memo is None:
            memo = self.cls._returns_memo = {}
        hit = memo.get(id(body))
        if hit is None or hit[1] is not body:
            hit = memo[id(body)] = (returns(body), body)
        return hit[0]

    def early_returns(self) -> list[tuple[int, cst.SimpleStatementLine]] | None:
        """The early returns of ``__init__``: (index of the top-level ``if cond: ...
        return``, its ``return`` line), in order; None when ``__init__`` returns otherwise
        (from a nested block, with a value, in an ``else``). vector-quantize-pytorch's
        ``Codebook``: ``if not affine_param: return`` before the affine buffers."""
        init = self.init
        found = getattr(init, "_early_returns", None)
        if found is None or found[1] is not init.node:
            out = [(i, r) for i, s in enumerate(self.init_body) if (r := _early_return(s))]
            if _return_count(init.node.body) != len(out) or any(
                _return_count(self.init_body[i]) != 1 for i, _ in out
            ):
                out = None
            found = init._early_returns = (out, init.node)
        return found[0]

    def after_return(self, index: int) -> bool:
        """Does top-level statement ``index`` of ``__init__`` run only when an early return
        before it did not (its tensors are then made on some paths only)?"""
        rets = self.early_returns()
        return bool(rets) and index > rets[0][0]

    def conditional(self, path, index: int) -> bool:
        """Is the statement at the end of ``path`` (in top-level statement ``index``) run on
        some paths only: inside an ``if``, or after an early return? The hook then guards
        what it sets by the tensor being there."""
        return any(type(n) is cst.If for n in path) or self.after_return(index)

    def memo(self) -> dict:
        """What :func:`_uses` worked out for this class's statements (kept with its facts)."""
        memo = getattr(self.cls, "_uses_memo", None)
        if memo is None:
            memo = self.cls._uses_memo = {}
        return memo

    def _path(self, node: cst.CSTNode) -> tuple[int, list[cst.CSTNode]] | None:
        """(index of the top-level statement of ``__init__`` holding ``node``, the path from it
        down to ``node``), or None when ``node`` is not in ``__init__``'s body."""
        parents, tops = self._index()
        path = [node]
        while id(path[-1]) not in tops:
            parent = parents.get(id(path[-1]))
            if parent is None:
                return None
            path.append(parent)
        path.reverse()
        return tops[id(path[0])], path

    def locate(self, node: cst.CSTNode) -> tuple[int, cst.SimpleStatementLine, list[cst.CSTNode]]:
        """(index of the top-level statement of ``__init__`` holding ``node``, the statement line
        holding it, the path from that top-level statement down to ``node``)."""
        found = self._path(node)
        if found is None:
            raise Unfixable("the value is not set directly in `__init__`")
        i, path = found
        if any(type(n) in NESTING for n in path):
            raise Unfixable("the statement is inside a loop, `with`, `try` or nested function")
        lines = [n for n in path if type(n) is cst.SimpleStatementLine]
        if not lines:
            raise Unfixable("the value is not set by a simple statement")
        return i, lines[-1], path

    def top_index_of(self, stmt_node: cst.CSTNode) -> int:
        found = self._path(stmt_node)
        return -1 if found is None else found[0]

    def used_after(
        self, attr: str, index: int, *, writes_only: bool = False, tensor: bool = False
    ) -> str | None:
        """Does ``__init__`` (or a method it calls) touch ``self.<attr>`` after top-level
        statement ``index``? Then moving its value to the end of ``__init__`` would change what
        that code sees (or be overwritten by it). Returns a description, or None. ``tensor``:
        ``self.<attr>`` is a tensor whose values the hook sets in place, so a statement that
        only sets its Python attributes (:func:`sets_metadata`) does not count."""
        memo = self.memo()
        methods: set[str] = set()
        for s in self.init_body[index + 1 :]:
            if tensor and (sets_metadata(s, attr) or reads_metadata_only(s, attr)):
                continue
            hit = _touches(s, attr, writes_only, memo)
            if hit:
                return f"`self.{attr}` is {hit} later in `__init__` (line order matters)"
            loop = every_parameter_written(s, self.ctx.qualify)
            if loop:
                return f"every parameter is written later in `__init__`, by `{loop}` (line order matters)"
            methods |= _uses(s, memo)[2]
        for name in sorted(methods):
            for m in self.cls.reachable(name):
                if m.name == "__init__":
                    continue
                hit = _touches(m.node.body, attr, writes_only, memo)
                if hit:
                    return f"`self.{attr}` is {hit} by `{m.name}()`, which `__init__` calls later"
        return None

    def rng_free_after(self, index: int) -> bool:
        return all(rng_free(s, self.ctx) for s in self.init_body[index + 1 :])

    def block_tail(self, line: cst.CSTNode) -> list[cst.BaseStatement]:
        """The statements that run after ``line`` inside the compound statements holding it
        (the rest of its block, then the rest of each enclosing block), up to its top-level
        statement of ``__init__``: what ``used_after``/``rng_free_after`` (which start at the
        next top-level statement) do not see. An ``else`` of an ``if`` holding ``line`` does
        not run after it."""
        found = self._path(line)
        return [] if found is None else statements_after(found[1])

    # -- hooks ---------------------------------------------------------------------------------
    def hook_calls(self, hook: str) -> tuple[list[int], bool]:
        """Top-level statements of ``__init__`` that are ``self.<hook>()``; any nested call?"""
        tops, nested = self._self_calls()
        return list(tops.get(hook, ())), hook in nested

    def _self_calls(self) -> tuple[dict[str, list[int]], frozenset[str]]:
        """Of ``__init__``'s body: the top-level statements that are ``self.<name>()``, by
        name, and the names of the ``self.<name>(...)`` called anywhere else in it. Worked out
        once per class (kept with ``__init__``'s facts, like :meth:`_index`), asked per hook
        and per finding."""
        init = self.init
        found = getattr(init, "_self_calls", None)
        if found is None or found[2] is not init.node:
            tops: dict[str, list[int]] = {}
            nested: set[str] = set()
            for i, s in enumerate(self.init_body):
                scan = [s]
                if _early_return(s) is not None:
                    # ``self.<hook>()`` right before an early return (see :meth:`use_hook`)
                    # is that hook's call on that path, not a call inside a block
                    stmts = list(s.body.body[:-1])
                    while stmts and _bare_self_call(stmts[-1]):
                        stmts.pop()
                    scan = [s.test, *stmts]
                names = {
                    d[5:]
                    for x in scan
                    for n in walk_code(x)
                    if type(n) is cst.Call and (d := dotted(n.func) or "").startswith("self.")
                }
                if (
                    type(s) is cst.SimpleStatementLine
                    and len(s.body) == 1
                    and type(s.body[0]) is cst.Expr
                    and type(s.body[0].value) is cst.Call
                    and (d := dotted(s.body[0].value.func) or "").startswith("self.")
                ):
                    # the call of that hook is this statement; of any other, inside it
                    tops.setdefault(d[5:], []).append(i)
                    names.discard(d[5:])
                nested |= names
            found = init._self_calls = (tops, frozenset(nested), init.node)
        return found[0], found[1]

    def use_hook(
        self,
        hook: str,
        after_index: int,
        stmts: list[cst.BaseStatement],
        *,
        random: bool = False,
        call_at: cst.BaseStatement | None = None,
    ) -> None:
        """Put ``stmts`` at the end of ``hook`` (created when missing) and make sure ``__init__``
        calls the hook after statement ``after_index``: at the end of ``__init__``, or where the
        top-level statement ``call_at`` (which this edit replaces) was, when the call is new.
        A class whose ``reset_parameters()`` extends its base's (:meth:`_extending_base`) gets
        its new code in the private method that hook calls, guarded, and ``__init__`` calls."""
        hook = self._own_reset(hook)
        self.check_bases(hook)
        exists = hook in self.cls.methods
        if exists:
            self._check_existing_hook(hook)
        calls, nested = self.hook_calls(hook)
        if nested:
            raise Unfixable(f"`__init__` calls `{hook}()` inside a block")
        through = None if self.keep_value or not exists else self.calls_through(hook)
        if through is not None:
            # ``self.init_weights()`` running ``self.reset_parameters()``: that statement is
            # the hook's call, which must come after the value (or a second call would run
            # the hook before the value is there, and twice)
            name, at = through
            if at is None or at < after_index or calls:
                raise Unfixable(
                    f"`__init__` calls `{hook}()` through `{name}()`, before this value is made"
                    if at is not None and at < after_index
                    else f"`__init__` calls `{hook}()` through `{name}()`: merge this by hand"
                )
            calls = [at]
        via = through is not None
        if self.keep_value:
            self._keep_in_hook(hook, exists, stmts)
            return
        rets = self._early_hook_calls(hook, after_index, stmts, calls, call_at)
        right_after = False
        if any(c < after_index for c in calls):
            self._call_later(hook, calls, after_index, stmts)
            right_after = True
        elif not calls and hook not in self._hook_call_added:
            if exists and not _does_nothing(self.cls.methods[hook].node.body):
                self.unsafe.append(
                    f"`__init__` now calls the existing `{hook}()`, which re-initialises its other tensors"
                )
            if rets is None and self.returns(self.init.node.body):
                raise Unfixable("`__init__` returns early")
            if rets:
                self._call_on_every_path(hook, rets, exists, after_index, random)
            elif call_at is not None:
                call = stmt(f"self.{hook}()").with_changes(leading_lines=call_at.leading_lines)
                done = self.replace.get(id(call_at), (call_at, []))[1]
                self.replace[id(call_at)] = (call_at, [*done, call])
            elif not exists and self._unsettled_after(after_index, random):
                self._call_after(hook, after_index)
                right_after = True
            else:
                self.init_append.append(stmt(f"self.{hook}()"))
            self._hook_call_added.add(hook)
        if not exists and hook == RESET_HOOK:
            self._root_calls_reset()
        # the hook's own draws ran after this value eagerly (enformer's ``Attention``:
        # ``rel_pos_bias`` fixed on one pass, ``rel_content_bias`` made before it on the next):
        # the new draw opens the hook, so the draws keep their order
        drawing = not exists or not rng_free(self.cls.methods[hook].node.body, self.ctx)
        opens = random and exists and drawing and all(c > after_index for c in calls)
        # a call of the hook that draws nothing before the new code (it opens the hook, or the
        # hook draws nothing) moves no draw past another
        later = [
            s
            for j, s in enumerate(self.init_body[after_index + 1 :], after_index + 1)
            # a call through another method runs that method's other code first
            if not ((opens or not drawing) and j in calls and not via)
        ]
        if random and not right_after and not all(rng_free(s, self.ctx) for s in later):
            self.unsafe.append(_drawn_later(hook, bool(calls)))
        into = self.hook_prepend if opens else self.hook_append
        into.setdefault(hook, []).extend(stmts)

    def _early_hook_calls(self, hook: str, after_index: int, stmts, calls, call_at):
        """:meth:`early_returns` when ``hook`` can run on every path of an ``__init__`` that
        returns early (vector-quantize-pytorch's ``Codebook``: ``if not affine_param:
        return`` before its affine buffers): ``__init__`` calls it before each early return
        and at its end, so what ``stmts`` set after an early return must be guarded by the
        tensor being there (:meth:`conditional`). None (no simple early returns) or []
        (none). Raises :class:`Unfixable` when the hook would miss a path or set a tensor
        that path never made."""
        rets = self.early_returns()
        if not rets:
            return rets
        why = "`__init__` returns early"
        if call_at is not None:
            raise Unfixable(why)
        if self.after_return(after_index) and not all(
            type(x) is cst.If and x.orelse is None for x in stmts
        ):
            raise Unfixable(f"{why} before the value is made, and the hook would not check it")
        if calls and hook not in self._hook_call_added:
            # an earlier fix called it: at the end, and before each early return
            for i, _ in rets:
                before = self.init_body[i].body.body[:-1]
                if not any(_bare_self_call(b) == hook for b in before):
                    raise Unfixable(why)
            if any(c != len(self.init_body) - 1 for c in calls):
                raise Unfixable(why)
        return rets

    def _call_on_every_path(self, hook: str, rets, exists: bool, index: int, random: bool):
        """Call ``hook`` before each early return of ``__init__`` and at its end."""
        if not exists and self._unsettled_after(index, random):
            raise Unfixable("`__init__` returns early")
        for _, line in rets:
            done = self.replace.get(id(line), (line, [line]))[1]
            self.replace[id(line)] = (line, [stmt(f"self.{hook}()"), *done])
        self.init_append.append(stmt(f"self.{hook}()"))

    def _check_existing_hook(self, hook: str) -> None:
        """Raise :class:`Unfixable` when the class's own ``hook`` cannot take more code."""
        body = self.cls.methods[hook].node.body
        if not isinstance(body, cst.IndentedBlock):
            raise Unfixable(f"`{hook}` is written on one line")
        if self.returns(body):
            raise Unfixable(f"`{hook}` returns early")
        if any(
            len(p.name.value) and p.default is None
            for p in self.cls.methods[hook].node.params.params[1:]
        ):
            raise Unfixable(f"`{hook}` takes required arguments")

    def _keep_in_hook(self, hook: str, exists: bool, stmts: list[cst.BaseStatement]) -> None:
        """:meth:`use_hook` for a value kept in ``__init__``: no call is added."""
        self.keeps_value(hook)
        if not exists:
            self._root_calls_reset()
        self.hook_append.setdefault(hook, []).extend(stmts)

    def keeps_value(self, hook: str) -> None:
        """Can a value stay where ``__init__`` makes it, with ``hook`` re-creating it for the
        protocol only? The draw (or constant) stays in ``__init__`` (under ``with
        torch.device("meta")`` it allocates nothing), so eager construction runs exactly as
        before; ``hook`` must then be ``reset_parameters()``, which every protocol runs after
        ``to_empty()``, and ``__init__`` must not call it (it would make the value a second
        time). Raises :class:`Unfixable` otherwise."""
        if hook != RESET_HOOK:
            raise Unfixable(f"the value would be re-created in `{hook}()`, not `{RESET_HOOK}()`")
        calls, nested = self.hook_calls(hook)
        if calls or nested or hook in self._hook_call_added:
            raise Unfixable(
                f"`__init__` calls `{hook}()`: a value kept in `__init__` would be made twice"
            )
        through = self.calls_through(hook)
        if through:
            raise Unfixable(
                f"`__init__` calls `{hook}()` through `{through[0]}()`: a value kept in "
                "`__init__` would be made twice"
            )

    def calls_through(self, hook: str) -> tuple[str, int | None] | None:
        """The method of the class that ``__init__`` calls and that calls ``self.<hook>()``,
        itself or through others of the class (an ``init_weights()`` that starts with
        ``self.reset_parameters()``, as ML010's fix writes it), with the index of the
        top-level statement that is its call (None: called inside a statement); or None."""
        tops, nested = self._self_calls()
        for first in sorted({*tops, *nested} - {hook}):
            seen: set[str] = set()
            todo = [first]
            while todo:
                name = todo.pop()
                method = self.cls.methods.get(name)
                if name in seen or method is None:
                    continue
                seen.add(name)
                for n in walk_code(method.node.body):
                    if type(n) is cst.Call and (d := dotted(n.func) or "").startswith("self."):
                        if d[5:] == hook:
                            at = tops.get(first, [])
                            return first, (at[0] if len(at) == 1 and first not in nested else None)
                        todo.append(d[5:])
        return None

    def _own_reset(self, hook: str) -> str:
        """The private method that the class's ``reset_parameters()`` (extending a base's)
        calls, when ``hook`` is that hook: new code goes there, guarded as it is."""
        return OWN_RESET if hook == RESET_HOOK and OWN_RESET in self.cls.methods else hook

    def _unsettled_after(self, index: int, random: bool) -> bool:
        """Would a new hook called at the end of ``__init__`` run elsewhere than where the
        value was made? Later top-level code draws random numbers (``random``: the hook's draws
        would come after those) or uses every tensor of the module (``self.load_state_dict``,
        ``self.half()``, also through a method of the class). Then the hook is called right
        after statement ``index`` (:meth:`_call_after`), where ``__init__`` made the value."""
        memo = self.memo()
        later = self.init_body[index + 1 :]
        # later children (``self.proj = nn.Linear(d, d)``, a method building them) may get
        # in-place inits that a later fix moves into this hook, after their draws: the call
        # then belongs at the end, where they are made (draws after draws: that fix says so)
        if random and any(not rng_free(s, self.ctx) for s in later):
            if not any(self._makes_children(s) for s in later):
                return True
        for s in later:
            for name in _uses(s, memo)[2]:
                if name in WHOLE_MODULE_METHODS:
                    return True
                for m in self.cls.reachable(name):
                    if m.name != "__init__" and _uses(m.node.body, memo)[2] & WHOLE_MODULE_METHODS:
                        return True
        return False

    def _makes_children(self, s: cst.CSTNode) -> bool:
        """May statement ``s`` make a child module? A ``torch.nn`` class, a class of the file
        that has bases, or a method of ``self`` (other than registering a tensor)."""
        if _uses(s, self.memo())[2] - set(REGISTER_METHODS):
            return True
        classes = {c.name: c for c in self.ctx.facts.classes}
        for n in walk_code(s):
            if type(n) is not cst.Call:
                continue
            q = self.ctx.qualify(n.func) or ""
            if (
                q.startswith("torch.nn.")
                and q.rsplit(".", 1)[-1][:1].isupper()
                and q not in PARAMETER_CLASSES | BUFFER_CLASSES | PARAMETER_CONTAINERS
            ):
                return True
            name = n.func.value if type(n.func) is cst.Name else None
            if name in classes and any(b not in ("object", "") for b in classes[name].bases):
                return True
        return False

    def _call_after(self, hook: str, index: int) -> None:
        """Call ``hook`` right after top-level statement ``index`` of ``__init__``."""
        top = self.init_body[index]
        old = self.replace.get(id(top))
        current = old[1] if old else [top]
        self.replace[id(top)] = (top, [*current, stmt(f"self.{hook}()")])
        self._hook_call_added.add(hook)

    def _call_later(self, hook: str, calls: list[int], index: int, stmts) -> None:
        """``__init__`` calls ``hook`` (once, as a statement) before top-level statement
        ``index`` makes the value the hook is now to set (peft's ``MontecloraSampler``: an
        earlier fix called it right after the first parameter, before the sampler draws, and
        the next parameter is made on the next line). The call moves right after ``index``
        when the code between calls no method (registering a tensor aside), touches no tensor
        the hook already sets and, if the hook draws, draws nothing: it then runs as before,
        with the new value in the order ``__init__`` made it. Else it moves to the end of
        ``__init__`` when no code after it calls a method or touches those tensors (unsafe
        when the hook draws and that code draws too: the draws change order). Raises
        :class:`Unfixable`."""
        why = f"`__init__` calls `{hook}()` before the value is created"
        if len(calls) != 1:
            raise Unfixable(why)
        memo = self.memo()
        had = list(self.hook_append.get(hook, []))
        if hook in self.cls.methods:
            had.append(self.cls.methods[hook].node.body)
        attrs: set[str] = set()
        for node in had:
            written, read, _ = _uses(node, memo)
            attrs |= written | read
        draws = not all(rng_free(n, self.ctx) for n in [*had, *stmts])
        aside = set(REGISTER_METHODS) | {"add_module", "register_module"}

        def touches(s: cst.CSTNode) -> bool:
            written, read, methods = _uses(s, memo)
            return bool((written | read) & attrs or methods - aside)

        c = calls[0]
        old = self.init_body[c]
        between = self.init_body[c + 1 : index]
        if not any(touches(s) for s in between) and not (
            draws and not all(rng_free(s, self.ctx) for s in between)
        ):
            self.replace[id(old)] = (old, [])
            self._call_after(hook, index)
            return
        rest = [s for i, s in enumerate(self.init_body) if i > c and i != index]
        if any(touches(s) for s in rest):
            raise Unfixable(why)
        if draws and not all(rng_free(s, self.ctx) for s in rest):
            self.unsafe.append(
                f"`{hook}()` is now called at the end of `__init__`: its random draws come "
                "after other random draws, so eager values differ under the same seed"
            )
        self.replace[id(old)] = (old, [])
        self.init_append.append(stmt(f"self.{hook}()"))
        self._hook_call_added.add(hook)

    def _root_calls_reset(self) -> None:
        """A new ``reset_parameters()`` in a class that already has a root ``init_weights()``
        that construction does not call (timm ``RotAttentionPool2d``: its
        ``init_weights(zero_init_last=False)`` inits the projections, ML001 moves
        ``cls_token``'s zeros into a new ``reset_parameters()``): under timm's protocol a
        module with an ``init_weights()`` is initialised by it alone, so ``init_weights()``
        calls ``reset_parameters()`` first, as the root hooks the fixes make do
        (:func:`metalint.fix.parent_init.own_hook_first`). Eager construction does not run
        ``init_weights()``: nothing changes there."""
        root = ROOT_ENTRIES[0]
        if root not in self.cls.methods or root not in self.ctx.hooks:
            return
        if root in {m.name for m in construction(self.cls)}:
            return  # ``__init__`` calls it: its own edits decide (choose_hook, own_hook_first)
        method = self.cls.methods[root]
        if (
            any(len(p.name.value) and p.default is None for p in method.node.params.params[1:])
            or method.node.params.posonly_params
        ):
            # ``init_weights(self, batch)`` (titans-pytorch's ``NeuralMemory``: it returns the
            # memory's starting weights): no protocol calls it without arguments; not a hook
            return
        if RESET_HOOK in method.self_calls:
            return
        if not isinstance(method.node.body, cst.IndentedBlock) or self.returns(method.node.body):
            raise Unfixable(f"`{root}()` returns early or is written on one line")
        self.hook_prepend.setdefault(root, []).insert(0, stmt(f"self.{RESET_HOOK}()"))

    _hook_call_added: set = field(default_factory=set)
    #: ids of the methods other than ``__init__`` holding a replaced statement (a helper that
    #: ``__init__`` calls: esm1's ``_init_submodules_esm1()`` creating a parameter)
    _replaced_methods: set = field(default_factory=set)

    def replace_in_method(
        self, method: cst.FunctionDef, line: cst.BaseStatement, new: list[cst.BaseStatement]
    ) -> None:
        """Replace statement ``line`` of ``method`` (not ``__init__``) by ``new``."""
        self.replace[id(line)] = (line, new)
        self._replaced_methods.add(id(method))

    def join_called_hook(self, hook: str, first: int, last: int, moved: set[int]) -> int:
        """The class already has ``hook()`` (a root ``init_weights()``: the library's, or one an
        earlier fix made) and ``__init__`` calls it once, as a statement, at top-level statement
        ``c``. Code moved from ``first``..``last`` joins it in the order ``__init__`` ran it:
        what ran before the call opens the hook (the caller puts it in :attr:`hook_prepend`;
        the call stays), what ran after ends it (the call moves to where ``last`` was; this
        removes the old call, the caller puts the new one in place of ``last``). The init then
        runs in the same order, provided that nothing that stays between the moved code and
        the call draws random numbers, calls a method, reads a tensor (``.weight``, ``.bias``,
        ``.data``), touches a tensor the moved code initialises or writes what the code that
        now runs later reads. timm HieraDet: ``trunc_normal_(self.pos_embed, ...)`` right
        before the ``if weight_init != 'skip': named_apply(...)`` that ML010's fix made the
        root ``init_weights()``. Returns ``c``. Raises :class:`Unfixable`."""
        by_hand = f"`{self.cls.name}` already has an `{hook}()`: merge this init into it by hand"
        m = self.cls.methods.get(hook)
        if m is None or not isinstance(m.node.body, cst.IndentedBlock) or self.returns(m.node.body):
            raise Unfixable(by_hand)
        if any(p.default is None for p in m.node.params.params[1:]):
            raise Unfixable(by_hand)
        calls, nested = self.hook_calls(hook)
        if nested or len(calls) != 1 or calls[0] in moved or calls[0] in (first, last):
            raise Unfixable(by_hand)
        c = calls[0]
        memo = self.memo()
        # the code that now runs later: the moved code before the call, the hook's own body
        # when the call moves after it
        later = [self.init_body[i] for i in sorted(moved) if i < c]
        if last > c:
            later.append(m.node.body)
        reads: set[str] = set()
        for node in later:
            reads |= _uses(node, memo)[1]
        inits: set[str] = set()
        for i in moved:
            inits |= _uses(self.init_body[i], memo)[0]
        for i in range(min(first, c) + 1, max(last, c)):
            if i in moved or i == c:
                continue
            s = self.init_body[i]
            written, read, methods = _uses(s, memo)
            if (
                not isinstance(s, cst.SimpleStatementLine)
                or not rng_free(s, self.ctx)
                or methods
                or written & reads
                or (written | read) & inits
                or any(
                    isinstance(n, cst.Attribute) and n.attr.value in ("weight", "bias", "data")
                    for n in walk_code(s)
                )
            ):
                where = "earlier" if c < first else "later"
                raise Unfixable(
                    f"{by_hand} (`__init__` calls it {where}, and code between draws random "
                    "numbers, calls a method or reads a tensor)"
                )
        if last > c:
            old = self.init_body[c]
            self.replace[id(old)] = (old, [])
            self._hook_call_added.add(hook)
        return c

    def choose_hook(self, index: int, prefer: tuple[str, ...] = ()) -> str:
        """``reset_parameters`` when the class has one (the private method a hook extending a
        base's calls, when it has that); else an existing public hook that
        ``__init__`` already calls after statement ``index`` (``init_weights``: extending it
        keeps every tensor in one hook); else a new ``reset_parameters``."""
        for hook in (*prefer, OWN_RESET, RESET_HOOK):
            if hook in self.cls.methods:
                return hook
        for hook in (ROOT_ENTRIES[0], BUFFER_HOOK):
            if hook in self.cls.methods and hook in self.ctx.hooks:
                calls, nested = self.hook_calls(hook)
                if calls and not nested and all(c > index for c in calls):
                    return hook
        return RESET_HOOK

    def check_bases(self, hook: str) -> None:
        """A torch base with its own ``reset_parameters()`` (pypots' ``PeepholeLSTMCell(nn.
        LSTMCell)``, a LoRA ``nn.Linear``): a new hook must extend the base's
        (:meth:`_extending_base`, which :meth:`rewrite` then requires); one the class already
        has, or calls, is refused, as the base's ``__init__`` runs it before this class made
        its tensors."""
        for b in self.cls.bases:
            if b.startswith("torch.nn.") and b not in TORCH_WITHOUT_RESET and hook == RESET_HOOK:
                if hook in self.cls.methods or self.hook_calls(hook)[1]:
                    raise Unfixable(f"the base class `{b}` has its own `reset_parameters()`")
                self.torch_base = b

    # -- storing values ----------------------------------------------------------------------
    def store_names(
        self,
        value,
        before: cst.BaseStatement,
        index: int,
        bound=frozenset(),
        private=False,
        not_tensors=frozenset(),
    ):
        """``value`` with the local names it reads replaced by ``self.<attr>``; the statements
        that store those attributes are inserted before ``before``. Names in ``bound`` are
        bound by the moved code itself (a loop variable) and stay as they are; ``private``
        stores them as ``self._<name>`` (code applied to every module may test ``hasattr``).
        ``not_tensors``: attributes of ``self`` known not to be tensors (compared with a
        string)."""
        init = self.init
        replace: dict[int, cst.BaseExpression] = {}
        stores: list[cst.BaseStatement] = []
        chosen: dict[str, str] = {}
        # locals the value calls a tensor method on (``emb.unsqueeze(0)``): tensors
        tensor_receivers = {
            n.func.value.value: n.func.attr.value
            for n in walk_code(value)
            if type(n) is cst.Call
            and type(n.func) is cst.Attribute
            and type(n.func.value) is cst.Name
            and n.func.attr.value in TENSOR_METHODS
        }
        for name in list(names_in(value)):
            n = name.value
            if n == "self" or n in bound:
                continue
            if n not in init.arguments and n not in init.local_values:
                if (
                    n in BUILTIN_NAMES
                    or self.ctx.qualify(name) is not None
                    or n in self.ctx.facts.local_classes
                ):
                    continue
                continue  # a module-level name: it is still there in the hook
            if n in init.local_values:
                for _, v in init.local_values[n]:
                    if value_kind(v, self.ctx.qualify, init):
                        raise Unfixable(f"the value reads the local tensor `{n}`")
                if changed_in_place(init, n, self.ctx.qualify) and self._filled_with_tensors(
                    name, init
                ):
                    # julius's ``LowPassFilters``: ``filters.append(filter_)`` in a loop; kept
                    # as ``self._filters`` its tensors stayed on meta, and the hook raised
                    raise Unfixable(f"the value reads `{n}`, filled in place with tensors")
                if n in tensor_receivers:
                    # kornia ``ExplicitSpacialEncoding``: ``emb = spatial_kernel_embedding(..)``,
                    # ``register_buffer("emb", emb.unsqueeze(0))``; kept as ``self._emb`` the
                    # tensor stayed on meta, and the hook's copy raised after ``to_empty()``
                    raise Unfixable(
                        f"the value reads the local tensor `{n}` (`{n}.{tensor_receivers[n]}()`)"
                    )
            if n not in chosen:
                attr, new = self._attr_for(n, index, private)
                chosen[n] = attr
                if new:
                    stores.append((n, stmt(f"self.{attr} = {n}")))
            replace[id(name)] = self_attr_expr(chosen[n])
        self.refuse_plain_reads(value, not_tensors)
        if stores:
            self.check_after_super(index)
        # an argument is stored before the top-level statement that holds ``before``: the
        # hook's guard may hold on another path than the block ``before`` is in (mace
        # ``BesselBasis``: ``if trainable: self.w = nn.Parameter(v)`` / ``else:
        # self.register_buffer("w", v)``; the store inside the ``if`` was missing on the
        # default path and eager construction raised AttributeError)
        top = self.init_body[index] if index < len(self.init_body) else before
        places: dict[int, tuple[cst.CSTNode, list]] = {}
        for n, store in stores:
            at = top if n in init.arguments and n not in init.local_values else before
            places.setdefault(id(at), (at, []))[1].append(store)
        for at, new in places.values():
            old = self.replace.get(id(at))
            current = old[1] if old else [at]
            self.replace[id(at)] = (at, new + current)
        return substitute(value, replace)

    def refuse_plain_reads(self, value, not_tensors=frozenset()) -> None:
        """Raise :class:`Unfixable` when ``value`` reads ``self.<attr>``, a plain attribute
        that may be a tensor (:meth:`plain_tensor`): a hook computing ``value`` after
        ``to_empty()`` would find it on ``meta``."""
        # ``self.cls_logits.weight``: an attribute of a module (a tensor has no ``.weight``)
        modules = {
            id(n.value)
            for n in walk_code(value)
            if type(n) is cst.Attribute
            and n.attr.value not in TENSOR_METHODS
            and n.attr.value not in ("data", "T", "mT")
        }
        for n in walk_code(value):
            if (
                type(n) is cst.Attribute
                and type(n.value) is cst.Name
                and n.value.value == "self"
                and id(n) not in modules
                and n.attr.value not in not_tensors
                and self.plain_tensor(n.attr.value)
            ):
                raise Unfixable(
                    f"the value reads `self.{n.attr.value}`, a plain attribute that may be a "
                    "tensor: it stays on `meta` after `to_empty()`, so the hook would raise"
                )

    def super_index(self) -> int | None:
        """The index of the first top-level statement of ``__init__`` that calls an
        ``__init__`` (``super().__init__()``, ``nn.Module.__init__(self)``); None: none does."""
        for i, s in enumerate(self.init_body):
            if any(
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "__init__"
                for n in walk_code(s)
            ):
                return i
        return None

    def check_after_super(self, index: int) -> None:
        """Raise :class:`Unfixable` when statement ``index`` runs before ``super().__init__()``:
        what a fix keeps on ``self`` there would be set before ``Module.__init__`` (gpytorch's
        ``Interval`` computes its bounds first, from arguments a float or a tensor: kept on
        ``self`` before it, the argument became a new plain tensor attribute, which ML007
        reported in the fixed file)."""
        first = self.super_index()
        if first is not None and index < first:
            raise Unfixable(
                "the value is computed before `super().__init__()`: nothing can be kept on "
                "`self` there"
            )

    def plain_tensor(self, attr: str, depth: int = 0) -> bool:
        """May ``self.<attr>`` be a tensor that is neither parameter nor buffer (monai's
        ``Scheduler.alphas``, unpacked from a schedule function)? ``to_empty()`` leaves such a
        tensor on ``meta``. False for registered tensors, modules, numbers and arguments."""
        memo = getattr(self.cls, "_plain_tensor_memo", None)
        if memo is None:
            memo = self.cls._plain_tensor_memo = {}
        if attr not in memo:
            memo[attr] = False  # a cycle (``self.a = self.a * 2``) adds nothing
            memo[attr] = self._plain_tensor(attr, depth)
        return memo[attr]

    def _plain_tensor(self, attr: str, depth: int) -> bool:
        methods = self.cls.reachable("__init__") if self.cls.init is not None else []
        if attr in {r.attr for r in registrations(methods, self.ctx.qualify)}:
            return False
        for m in methods:
            for a in m.assigns:
                if a.target != f"self.{attr}":
                    continue
                # unpacked from a call (``self.esm, self.esm_dict = load()``): not judged
                if a.value is not None and self._may_be_tensor(a.value, m, depth):
                    return True
        return False

    def _filled_with_tensors(self, name: cst.Name, method: MethodFacts) -> bool:
        """May local ``name``, changed in place by ``method``, hold tensors? What is put into
        it (:func:`fills`, the values of ``name.attr = ..``) may be a tensor, or it may be one
        itself, changed otherwise than by setting its attributes (``w.mul_(2)``).
        torch-geometric's ``GITMol``: ``config = AutoConfig.from_pretrained(..)``, then
        ``config.encoder_width = vision_graph_width``: a config given numbers."""
        n = name.value
        if any(self._may_be_tensor(x, method, 1) for x in [*fills(method, n), *set_on(method, n)]):
            return True
        return changed_in_place(
            method, n, self.ctx.qualify, attributes=False
        ) and self._may_be_tensor(name, method, 0)

    def _may_be_tensor(self, v: cst.BaseExpression, method: MethodFacts, depth: int) -> bool:
        if depth > 4 or is_tensor(v, self.ctx.qualify, method):
            return depth <= 4
        if is_number(v, self.ctx.qualify, method) or (
            type(v) is cst.Call and builds_module(self.ctx.qualify(v.func), self.ctx.facts)
        ):
            # a Python number (``x.item()``, ``grid.shape[-1]``, ``int(...)``), or a module,
            # whatever its arguments (``default(dim_out, dim_in)``)
            return False
        if type(v) is cst.IfExp:  # its value is one of its branches, never its test
            return self._may_be_tensor(v.body, method, depth) or self._may_be_tensor(
                v.orelse, method, depth
            )
        if type(v) in CONTAINERS:
            # a list of sizes (monai's ``self.window = [1 + 2 * r for r in ..]``) is none; a
            # list of tensors (``[torch.zeros(n) for _ in ..]``) stays on meta as one does
            return any(self._may_be_tensor(e, method, depth + 1) for e in _elements(v))
        for n in walk_code(v):
            if isinstance(n, cst.Call):
                q = self.ctx.qualify(n.func) or ""
                name = getattr(n.func, "value", None) if isinstance(n.func, cst.Name) else None
                if q.startswith(("torch.", "math.", "numpy.")) or name in BUILTIN_NAMES:
                    continue
                if self._builds_instance(n, q, name) or (
                    name is not None and repackages_arguments(self.ctx.module, name)
                ):
                    continue  # ``pair(image_size)``: its arguments, read below
                return True  # an unknown function (a noise schedule) may return a tensor
            if isinstance(n, cst.Attribute) and dotted(n.value) == "self":
                if self.plain_tensor(n.attr.value, depth + 1):
                    return True
            if isinstance(n, cst.Name) and n is not getattr(v, "func", None):
                if self._local_may_be_tensor(n.value, v, method, depth):
                    return True
        return False

    def _builds_instance(self, call: cst.Call, q: str, name: str | None) -> bool:
        """Does ``call`` build an instance of a class that is not a tensor: a class of the
        file, a ``partial`` of one (``LinearNoBias = partial(nn.Linear, ...)``), or an
        imported name spelled as a class (e3nn's ``self.irreps = o3.Irreps(irreps)``; a tensor
        subclass is torch's, judged before)? A name the file binds otherwise (a ``partial``
        that binds ``device=``) is not known to build anything."""
        facts = self.ctx.facts
        if name in facts.local_classes or name in facts.aliases.constructors:
            return True
        spelled = dotted(call.func) or ""
        imported = spelled.split(".")[0] in facts.aliases.names
        return imported and _class_name(q or spelled)

    def _local_may_be_tensor(self, n: str, v, method: MethodFacts, depth: int) -> bool:
        """May local ``n`` of ``method``, read by ``v``, hold a tensor: a value it is given
        may be one, or one put into it in place (``filters = []`` filled by
        ``filters.append(filter_)``, julius's ``LowPassFilters``)?"""
        values = [lv for _, lv in method.local_values.get(n, ()) if lv is not v]
        return any(self._may_be_tensor(x, method, depth + 1) for x in [*values, *fills(method, n)])

    def _attr_for(self, name: str, index: int, private: bool = False) -> tuple[str, bool]:
        """An attribute that holds local ``name``: an existing ``self.x = name`` before the
        statement, else a free attribute name. (attr, needs a new store). A store before a
        statement that assigns ``name`` again holds its old value: not that one."""
        last = max(
            (i for i, s in enumerate(self.init_body[:index]) if name in binds(s, self.ctx.qualify)),
            default=-1,
        )
        for i, s in enumerate(self.init_body[:index]):
            if i > last and isinstance(s, cst.SimpleStatementLine):
                for small in s.body:
                    if (
                        isinstance(small, cst.Assign)
                        and len(small.targets) == 1
                        and isinstance(small.value, cst.Name)
                        and small.value.value == name
                    ):
                        t = dotted(small.targets[0].target)
                        if t and t.startswith("self.") and t.count(".") == 1:
                            return t[5:], False
        top = self.init_body[index] if index < len(self.init_body) else None
        for stored in self.replace.values():
            if stored[0] is not top and not any(
                stored[0] is s for s in self.init_body[last + 1 : index]
            ):
                continue  # a store inside a block: not there on every path
            for s in stored[1]:
                code = render(s).strip()
                if code.endswith(f" = {name}") and code.startswith("self."):
                    return code.split(" ", 1)[0][5:], False
        # torchani's ``_ChemModule`` has a ``symbols`` property and a ``_symbols``
        for cand in (
            (f"_{name}", f"_init_{name}") if private else (name, f"_{name}", f"_init_{name}")
        ):
            if not self._taken(cand, inherited=True):
                return cand, True
        raise Unfixable(f"no free attribute name to keep `{name}`")

    def _taken(self, attr: str, inherited: bool = False) -> bool:
        """Is ``attr`` a name the class already uses (a method, a property, an attribute, a
        registered tensor)? ``inherited``: or a base of this file, or ``nn.Module`` (asked for
        a new attribute, not a hook, which may override a base's): torchani's
        ``AtomicOneHot`` kept its ``symbols`` argument as ``self.symbols``, a read-only
        property of its base ``_ChemModule`` (eager construction raised AttributeError), and
        ``ANINetworks`` its ``modules`` as ``self.modules``, shadowing ``Module.modules()``."""
        if not inherited:
            return _uses_name(self.cls, attr)
        if attr in MODULE_MEMBERS:
            return True
        by_name = {c.fullname: c for c in self.ctx.facts.classes}
        seen: set[str] = set()
        todo = [self.cls]
        while todo:
            c = todo.pop()
            if c.fullname in seen:
                continue
            seen.add(c.fullname)
            if _uses_name(c, attr):
                return True
            todo.extend(by_name[b] for b in c.bases if b in by_name)
        return False

    # -- build ---------------------------------------------------------------------------------
    def _init_statements(self) -> list[cst.BaseStatement]:
        """``__init__``'s body with the replacements made."""
        # top-level statements are spliced directly; only a statement holding a replaced
        # statement deeper down (inside an ``if``) is visited
        body: list[cst.BaseStatement] = []
        tops = {id(t) for t in self.init_body}
        nested = [v[0] for k, v in self.replace.items() if k not in tops]
        for top in self.init_body:
            hit = self.replace.get(id(top))
            if hit is not None and hit[0] is top:
                new = top
                if nested and any(path_to(top, n) is not None for n in nested):
                    # stores put before an ``if`` whose block also changes (ML003's
                    # condition for the hook, read from an argument kept on ``self``)
                    inner = {k: v for k, v in self.replace.items() if k not in tops}
                    new = top.visit(_ReplaceStatements(inner))
                body.extend(_expand(top, new, hit[1]))
            elif nested and any(path_to(top, n) is not None for n in nested):
                new = top.visit(_ReplaceStatements(self.replace))
                if isinstance(new, cst.FlattenSentinel):
                    body.extend(new.nodes)
                elif not isinstance(new, cst.RemovalSentinel):
                    body.append(new)
            else:
                body.append(top)
        return body

    def build(self) -> cst.ClassDef:
        cls_node = self.cls.node
        init_node = self.init.node
        new_init = init_node
        if self.replace:
            new_init = new_init.with_changes(
                body=new_init.body.with_changes(body=self._init_statements())
            )
        if self.init_append:
            body = new_init.body
            new_init = new_init.with_changes(
                body=body.with_changes(body=[*body.body, *self.init_append])
            )
        members = list(cls_node.body.body)
        out: list[cst.BaseStatement] = []
        for m in members:
            if id(m) in self._replaced_methods and m is not init_node:
                if m.name.value in self.hook_append:
                    raise Unfixable(f"`{m.name.value}()` is both changed and extended")
                out.append(m.visit(_ReplaceStatements(self.replace)))
                continue
            if m is init_node:
                out.append(new_init)
                for hook, stmts in self.hook_append.items():
                    if hook not in self.cls.methods:
                        out.append(_new_method(hook, self.on_module_device(stmts), init_node))
                continue
            name = m.name.value if isinstance(m, cst.FunctionDef) else None
            if (
                (name in self.hook_append or name in self.hook_prepend)
                and self.cls.methods.get(name)
                and self.cls.methods[name].node is m
            ):
                stmts = self.on_module_device(self.hook_append.get(name, []))
                body = m.body
                kept = [s for s in body.body if not _is_pass(s)]
                doc = kept[:1] if kept and is_docstring(kept[0]) else []
                opening = list(self.hook_prepend.get(name, []))
                if opening:
                    rest = kept[len(doc) :]
                    kept = [*doc, *_join_with_blocks(opening + rest[:1]), *rest[1:]]
                joined = [*kept[:-1], *_join_with_blocks(kept[-1:] + list(stmts))]
                out.append(m.with_changes(body=body.with_changes(body=joined)))
                continue
            out.append(m)
        return cls_node.with_changes(body=cls_node.body.with_changes(body=out))

    def on_module_device(self, stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A hook's new statements with the tensors they make put on the module's device
        when they compute with one of its tensors. ``to_empty(device="cuda")`` moves the
        module's tensors; a factory without ``device=`` still makes its tensor on the CPU, and
        ``torch.arange(n)[..., None] & self.mask`` (vector-quantize-pytorch's ``LFQ``, where
        ``__init__`` made both on the default device) raises. A tensor of the module only
        written (``self.b.copy_(torch.arange(n))``: ``copy_`` crosses devices; an in-place
        init) or only measured (``self.w.shape``, ``self.w is not None``) does not count."""
        own = {r.attr for r in registrations(construction(self.cls), self.ctx.qualify)}
        stmts = [self._off_captured_device(s, stmts[i:], own) for i, s in enumerate(stmts)]
        written: set[int] = set()
        measured: set[int] = set()
        for n in (x for s in stmts for x in walk_code(s)):
            if type(n) is cst.Attribute and n.attr.value in METADATA_ATTRIBUTES | METADATA_METHODS:
                measured.add(id(n.value))
            if type(n) is cst.Comparison and all(
                type(c.operator) in (cst.Is, cst.IsNot) for c in n.comparisons
            ):  # ``if self.output_mask is not None:``, the guard of an optional buffer
                measured.update(id(x) for x in (n.left, *(c.comparator for c in n.comparisons)))
            if type(n) is cst.Call and inplace_write(n, self.ctx.qualify) is not None:
                target = n.func.value if type(n.func) is cst.Attribute else None
                if type(n.func) is not cst.Attribute or n.func.attr.value not in INPLACE_METHODS:
                    target = n.args[0].value if n.args else None
                written.update(id(x) for x in walk_code(target) if target is not None)
        read = next(
            (
                n.attr.value
                for n in _on_self(stmts)
                if n.attr.value in own and id(n) not in written | measured
            ),
            None,
        )
        if read is None:
            return stmts
        device = expr(f"self.{read}.device")
        return [s.visit(_OnDevice(device, self.ctx.qualify)) for s in stmts]

    def _off_captured_device(
        self, s: cst.BaseStatement, rest: list[cst.BaseStatement], own: set[str]
    ) -> cst.BaseStatement:
        """A hook statement's factories (and ``.to()`` copies) placed on a device ``__init__``
        kept as a plain attribute (torchrl's ``GAE``: ``self._device =
        torch.get_default_device()``, then ``torch.tensor(gamma, device=self._device)``) are put
        on the device of the module's tensor the statement works on instead: under
        ``torch.device("meta")`` the kept device is ``meta``, and the hook's copy out of it
        raised after ``to_empty()``. Eagerly both are the device the tensor was made on. A
        statement computing a local takes the tensor of the first statement after it (``rest``:
        this one and those after it) that works on one."""
        tensor = next((n.attr.value for n in _on_self(rest) if n.attr.value in own), None)
        if tensor is None:
            return s
        kept = {
            id(n)
            for n in _on_self([s])
            if n.attr.value not in own and "device" in n.attr.value.lower()
        }
        if not kept:
            return s
        return s.visit(_OffKeptDevice(kept, expr(f"self.{tensor}.device"), self.ctx.qualify))

    def rewrite(self, message: str) -> Rewrite:
        new = self.build()
        app = Applicability.UNSAFE if self.unsafe else Applicability.SAFE
        if self.unsafe:
            message += " (unsafe: " + "; ".join(dict.fromkeys(self.unsafe)) + ")"
        hook = next(reversed(self.hook_append), None)
        done = Rewrite(new, app, message, hook, kept=self.keep_value)
        done.over_base_hook = self._extending_base(new, app, message)
        if self.torch_base is not None and hook == RESET_HOOK:
            if done.over_base_hook is None:
                raise Unfixable(
                    f"the base class `{self.torch_base}` has its own `reset_parameters()`"
                )
            return done.over_base_hook
        return done

    def _extending_base(
        self, new: cst.ClassDef, app: Applicability, message: str
    ) -> Rewrite | None:
        """The rewrite to apply instead of ``new`` (which gives the class a new
        ``reset_parameters()``) when the tree shows that a base class (of this file or another)
        has its own ``reset_parameters()``: the new hook would override the base's. What a
        maintainer writes then: the moved code goes into a private method (``__init__`` calls
        it where it called the new hook), and ``reset_parameters()`` extends the base's::

            def reset_parameters(self):
                super().reset_parameters()
                if hasattr(self, "_exponents"):  # not yet when BasePairPotential.__init__() calls it
                    self.__reset_own_tensors()

        The base's ``__init__`` may call the hook (torchani ``_ChemModule``, which ML002's fix
        of ``atomic_numbers`` gives a ``reset_parameters()`` called last; neuralop
        ``DiscreteContinuousConv``, whose ``weight`` ML001's fix draws there): virtual dispatch
        runs the override before this class made its tensors, so the private method is
        guarded by the last tensor ``__init__`` registers before calling it. ``__init__`` does
        not call the hook itself: that would run the base's init a second time (a second
        random draw where the base draws). The method's name is private to the class (name
        mangling): a subclass extending this hook in turn has its own. Eager construction runs
        the same code in the same order as ``new`` does (same applicability). None when the
        class defines or calls ``reset_parameters()`` already, has only torch bases, or no
        tensor of it can guard the method."""
        hook = RESET_HOOK
        if hook not in self.hook_append or hook in self.cls.methods:
            return None
        bases = [
            b for b in self.cls.bases if not b.startswith("torch.nn.") and b not in HOOKLESS_BASES
        ] or ([self.torch_base] if self.torch_base else [])
        if not bases:
            return None
        calls, nested = self.hook_calls(hook)
        # ``__init__`` calling the torch base's hook itself (pypots' ``PeepholeLSTMCell``:
        # ``self.reset_parameters()`` last): that call runs the override, which the moved code
        # joined at its end, as :meth:`use_hook` judged it
        inherited = bool(calls) and self.torch_base is not None
        if (calls and not inherited) or nested or self._taken(OWN_RESET):
            return None
        if self.super_index() is None:
            return None
        members = list(new.body.body)
        where = {m.name.value: i for i, m in enumerate(members) if isinstance(m, cst.FunctionDef)}
        if "__init__" not in where or hook not in where:
            return None
        called = hook if inherited else OWN_RESET
        init = members[where["__init__"]]
        if not inherited:
            swap = _SwapCall(hook, OWN_RESET)
            init = init.visit(swap)
            if not swap.swapped:
                return None
        if not isinstance(init.body, cst.IndentedBlock):
            return None
        own = members[where[hook]]
        written, read, _ = _uses(own.body)
        last = self._guard_tensor(list(init.body.body), called, written | read)
        if last is None:
            return None
        returns = " -> None" if own.returns is not None else ""
        reset = stmt(
            f"def {hook}(self){returns}:\n"
            f"    super().{hook}()\n"
            f'    if hasattr(self, "{last}"):  {base_guard_comment(bases[0])}\n'
            f"        self.{OWN_RESET}()\n"
        ).with_changes(leading_lines=own.leading_lines)
        private = own.with_changes(
            name=cst.Name(OWN_RESET), leading_lines=[cst.EmptyLine(indent=False)]
        )
        members[where["__init__"]] = init
        members[where[hook] : where[hook] + 1] = [reset, private]
        out = new.with_changes(body=new.body.with_changes(body=members))
        return Rewrite(
            out,
            app,
            f"{message}, in a private method that a `{hook}()` extending the base's calls",
            hook,
            kept=self.keep_value,
        )

    def _guard_tensor(self, body: list, called: str, used: set[str]) -> str | None:
        """The last tensor of ``used`` that ``__init__`` (``body``) makes after calling the
        base's ``__init__`` and before its first statement calling ``self.<called>()``: the
        guard of the hook's own code. None when there is none (or the call is in a block)."""
        first = None
        for i, s in enumerate(body):
            if isinstance(s, cst.SimpleStatementLine) and any(
                isinstance(x, cst.Expr) and _calls_self(x.value, called) for x in s.body
            ):
                first = i
                break
        if first is None:
            return None  # called inside a block only
        start = next(
            i
            for i, s in enumerate(body)
            if any(
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "__init__"
                for n in walk_code(s)
            )
        )
        last = None
        for s in body[start + 1 : first]:
            for small in s.body if isinstance(s, cst.SimpleStatementLine) else ():
                made = self._made_tensor(small)
                if made is not None and made in used:
                    last = made
        return last

    def _made_tensor(self, small: cst.BaseSmallStatement) -> str | None:
        """``x`` for ``self.x = nn.Parameter(...)`` / ``nn.Buffer(...)`` and
        ``self.register_buffer("x", ...)`` / ``self.register_parameter("x", ...)``."""
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            attr = _self_attr(dotted(small.targets[0].target))
            v = small.value
            if (
                attr
                and isinstance(v, cst.Call)
                and self.ctx.qualify(v.func) in PARAMETER_CLASSES | BUFFER_CLASSES
            ):
                return attr
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            d = dotted(call.func) or ""
            if (
                d in ("self.register_buffer", "self.register_parameter")
                and call.args
                and isinstance(call.args[0].value, cst.SimpleString)
            ):
                return call.args[0].value.evaluated_value
        return None


def _drawn_later(hook: str, called: bool) -> str:
    """Why a random value moved into ``hook`` changes eager values: ``called``, ``__init__``
    already calls the hook after other draws (and a value kept in ``__init__`` would be drawn
    twice: :meth:`ClassEdit.keeps_value`); else the new call comes at its end."""
    if called:
        return (
            f"the random value is now drawn in `{hook}()`, which `__init__` already calls after "
            "other random draws, so eager values differ under the same seed (same distribution)"
        )
    return (
        "the random value is now drawn at the end of `__init__`, after other random draws, "
        "so eager values differ under the same seed (same distribution)"
    )


def _uses_name(cls: ClassFacts, attr: str) -> bool:
    """Does class ``cls`` itself use the name ``attr`` (see :meth:`ClassEdit._taken`)?"""
    if attr in cls.methods:
        return True
    for m in cls.methods.values():
        for a in m.assigns:
            if a.target == f"self.{attr}" or a.target.startswith(f"self.{attr}."):
                return True
        for c in m.calls:
            if c.receiver == "self" and c.method in (
                "register_buffer",
                "register_parameter",
                "add_module",
                "register_module",
            ):
                if c.node.args and isinstance(c.node.args[0].value, cst.SimpleString):
                    if c.node.args[0].value.evaluated_value == attr:
                        return True
    # a class-level attribute
    for s in cls.node.body.body if isinstance(cls.node.body, cst.IndentedBlock) else ():
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = small.targets if isinstance(small, cst.Assign) else [small]
                    for t in targets:
                        if dotted(t.target) == attr:
                            return True
    return False


#: the private method a ``reset_parameters()`` that extends a base's calls (name-mangled: each
#: class of a hierarchy keeps its own)
OWN_RESET = "__reset_own_tensors"


def _calls_self(node: cst.CSTNode, name: str) -> bool:
    """Is ``node`` the call ``self.<name>()`` (no arguments)?"""
    return isinstance(node, cst.Call) and not node.args and dotted(node.func) == f"self.{name}"


class _SwapCall(cst.CSTTransformer):
    """``self.<old>()`` -> ``self.<new>()``, counting them."""

    def __init__(self, old: str, new: str):
        self.old, self.new, self.swapped = old, new, 0

    def leave_Call(self, original_node, updated_node):
        if _calls_self(original_node, self.old):
            self.swapped += 1
            return updated_node.with_changes(func=expr(f"self.{self.new}"))
        return updated_node


def _does_nothing(body: cst.BaseSuite) -> bool:
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


def _is_pass(s: cst.BaseStatement) -> bool:
    return isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body)


def _expand(original_node, updated_node, replacement) -> list:
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


class _ReplaceStatements(cst.CSTTransformer):
    def __init__(self, replace):
        self.replace = replace

    def on_leave(self, original_node, updated_node):
        hit = self.replace.get(id(original_node))
        if hit is None or hit[0] is not original_node:
            return updated_node
        new = _expand(original_node, updated_node, hit[1])
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


class _OnDevice(cst.CSTTransformer):
    """Torch factories without ``device=`` given ``device=<device>`` (a class of the module, not
    of a method: a class made per call would hold the syntax tree in a reference cycle)."""

    def __init__(self, device: cst.BaseExpression, qualify) -> None:
        super().__init__()
        self.device = device
        self.qualify = qualify

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if (self.qualify(original.func) or "") not in DEVICE_FACTORIES - SAMPLERS or any(
            a.star or (a.keyword is not None and a.keyword.value == "device") for a in original.args
        ):
            return updated
        return with_device(updated, self.device)


def _on_self(stmts: list[cst.BaseStatement]) -> Iterator[cst.Attribute]:
    """Every ``self.<name>`` of the statements, in order."""
    for s in stmts:
        for n in walk_code(s):
            if type(n) is cst.Attribute and type(n.value) is cst.Name and n.value.value == "self":
                yield n


class _OffKeptDevice(cst.CSTTransformer):
    """``device=self._device`` of a torch factory, and ``x.to(self._device)``, where ``kept``
    holds the ids of those attributes, become ``device``."""

    def __init__(self, kept: set[int], device: cst.BaseExpression, qualify) -> None:
        super().__init__()
        self.kept = kept
        self.device = device
        self.qualify = qualify

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


def _new_method(
    hook: str, stmts: list[cst.BaseStatement], init_node: cst.FunctionDef
) -> cst.FunctionDef:
    returns = " -> None" if init_node.returns is not None else ""
    fn = stmt(f"def {hook}(self){returns}:\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    return fn.with_changes(
        body=fn.body.with_changes(body=_join_with_blocks(stmts)),
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def _join_with_blocks(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
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


def legacy_empty(ctx: RuleContext, edit: ClassEdit, data: cst.BaseExpression):
    """``torch.empty(sizes)`` for a legacy ``torch.Tensor(sizes)`` (PyG's
    ``Parameter(Tensor(out_channels))``): the same uninitialised tensor of the same dtype, but
    allocated where the default device says. None when ``data`` is not such a call or an
    argument may be data rather than a size (``Tensor(values)``: only a literal integer, a
    product or sum, several arguments, or an ``__init__`` parameter annotated ``int`` count as
    sizes)."""
    if not isinstance(data, cst.Call):
        return None
    q = ctx.qualify(data.func)
    if q not in LEGACY_CONSTRUCTOR_DTYPES or not data.args or not legacy_sizes(data, edit.init):
        return None
    args = [a.value for a in data.args]
    torch_name, _ = torch_spelling(ctx)
    dtype = LEGACY_CONSTRUCTOR_DTYPES[q]
    text = ", ".join(render(a) for a in args)
    if dtype:
        text += f", dtype={torch_name}.{dtype}"
    return expr(f"{torch_name}.empty({text})")


# -- values through locals ------------------------------------------------------------------
COMPOUND = (
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.IfExp,
)


def _paren(e: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(e, COMPOUND) and not e.lpar:
        return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return e


def inline_locals(
    edit: ClassEdit,
    e: cst.BaseExpression,
    depth: int = 0,
    method: MethodFacts | None = None,
    index: int | None = None,
) -> cst.BaseExpression:
    """``e`` with the local tensors it reads replaced by the expressions that computed them.
    ``method``: the locals are those of that method (a helper ``__init__`` calls), not of
    ``__init__``; then every local is inlined, numbers too: nothing stores them on ``self``.
    ``index``: the top-level statement of ``__init__`` that reads ``e``; a local assigned
    once that ``__init__`` already keeps on ``self`` before it (``self.codebook_dim =
    codebook_dim``) is left for :meth:`ClassEdit.store_names`, which reads that attribute
    (vector-quantize-pytorch's ``LFQ``: ``codebook_dim`` comes from ``codebook_size =
    default(codebook_size, lambda: 2 ** dim)``, which no hook can inline)."""
    if depth > 4:
        raise Unfixable("the value is computed through too many local variables")
    init = edit.init if method is None else method
    replace = {}
    for name in list(names_in(e)):
        n = name.value
        values = init.local_values.get(n)
        if not values or n == "self":
            continue
        node, v = values[-1]
        if method is None and index is not None and _kept_on_self(edit, n, index):
            continue
        changed = changed_in_place(init, n, edit.ctx.qualify)
        tensor = (
            value_kind(v, edit.ctx.qualify, init) is not None
            or (
                # a list of numbers (``[1 for _ in range(n)]``, a shape) is kept on self as it is
                not type(v) in (cst.List, cst.Tuple, cst.ListComp)
                and any(type(x) is cst.Call for x in walk_code(v))
            )
            # a list filled later (``filters = []``, ``filters.append(f)``): it may hold
            # tensors, which kept on self stay on meta (julius's ``LowPassFilters``)
            or (changed and type(v) in CONTAINERS)
        )
        if not tensor and method is None:
            continue  # a number: stored on self by store_names
        if len(values) != 1:
            raise Unfixable(f"the local `{n}` is assigned more than once")
        if method is None and _validated_argument(edit, n, node, v, index):
            continue  # kept on self as it is at ``index`` by store_names
        if n in init.arguments:
            # ``if loc is None: loc = np.random.randn(n, d)`` (normflows ``GaussianMixture``):
            # the caller's ``loc`` is its value on the other path; inlining the assignment
            # dropped it
            raise Unfixable(f"the argument `{n}` is assigned again in `__init__`")
        if type(node) is cst.Assign and any(
            type(t.target) in (cst.Tuple, cst.List) for t in node.targets
        ):
            raise Unfixable(f"the local `{n}` is unpacked from a call")
        if method is None:
            edit.locate(node)  # a local computed inside a loop or `with` cannot be inlined
        elif (at := path_to(method.node.body, node)) is None or any(type(x) in NESTING for x in at):
            raise Unfixable(f"the local `{n}` is computed inside a loop, `with` or `try`")
        if changed:
            # ``coords[:, 0] += 1`` / ``coords.view(-1).add_(1)`` / ``kernels.append(k)``: its
            # value is not the expression that created it
            raise Unfixable(f"the local `{n}` is changed in place")
        inlined = inline_locals(edit, v, depth + 1, method, index)
        replace[id(name)] = inlined if name is e else _paren(inlined)
    return substitute(e, replace)


def _validated_argument(edit: ClassEdit, n: str, node, v, index: int | None) -> bool:
    """Is ``n`` an argument that ``__init__`` assigns again exactly once, by a top-level
    statement ``n = <value>`` before statement ``index``, to a value that makes no tensor, and
    never changes in place (torchani's ``charges = self._validate_elem_seq("charges",
    charges)``, then ``register_buffer("_charges", torch.tensor(charges))``)? Its value at
    ``index`` is then the validated one on every path: kept on ``self`` as it is there
    (:meth:`ClassEdit.store_names`), eager construction runs the same statements. Inlining
    the assignment would read the caller's value back under the same name, and one assigned
    inside an ``if`` (normflows ``GaussianMixture``: ``if loc is None: loc = ...``) is the
    caller's on the other path: both refused."""
    init = edit.init
    if n not in init.arguments or index is None or type(node) is not cst.Assign:
        return False
    if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
        return False
    if value_kind(v, edit.ctx.qualify, init) is not None:
        return False
    found = edit._path(node)
    if found is None or found[0] >= index:
        return False
    top = edit.init_body[found[0]]
    if type(top) is not cst.SimpleStatementLine or node not in top.body:
        return False
    return not any(
        n in binds(line, edit.ctx.qualify)
        for line in walk_code(init.node)
        if type(line) is cst.SimpleStatementLine and line is not top
    )


def _kept_on_self(edit: ClassEdit, n: str, index: int) -> bool:
    """Is local ``n`` kept on ``self`` by a top-level ``self.<attr> = n`` before statement
    ``index``, after every assignment of ``n`` (an argument too: ``codebook_size =
    default(codebook_size, ...)``, then ``self.codebook_size = codebook_size``), and never
    changed in place? That attribute then holds the value ``n`` has at ``index``."""
    init = edit.init
    values = init.local_values.get(n, ())
    nodes = [node for node, _ in values]
    last = -1
    for node in nodes:
        found = edit._path(node)
        if found is None or any(type(x) in NESTING for x in found[1]):
            return False
        last = max(last, found[0])
    if changed_in_place(init, n, edit.ctx.qualify):
        return False
    for i, s in enumerate(edit.init_body[:index]):
        if i <= last or type(s) is not cst.SimpleStatementLine:
            continue
        for small in s.body:
            if (
                type(small) is cst.Assign
                and len(small.targets) == 1
                and type(small.value) is cst.Name
                and small.value.value == n
                and (t := dotted(small.targets[0].target) or "").startswith("self.")
                and t.count(".") == 1
            ):
                return True
    return False


def _class_name(name: str) -> bool:
    """Is the last part of a dotted name spelled as a class (``Irreps``, ``o3.Irreps``), by
    Python's convention: a capital first letter and a lower-case letter (not ``N`` or ``MAX``)?"""
    last = name.rpartition(".")[2]
    return bool(last) and last[0].isupper() and any(c.islower() for c in last)


#: literals of a Python container a later statement may fill (``filters = []``)
CONTAINERS = (cst.List, cst.Tuple, cst.ListComp, cst.Dict, cst.DictComp, cst.Set, cst.SetComp)


def changed_in_place(method: MethodFacts, n: str, qualify, attributes: bool = True) -> bool:
    """Does a statement of ``method`` other than the assignments of local ``n`` write it
    (:func:`binds`: ``n[0] = ..``, ``n.add_(1)``, ``n.append(x)``; ``n.size = 3`` unless not
    ``attributes``)? Its value is then not the expression that made it."""
    nodes = [node for node, _ in method.local_values.get(n, ())]
    return any(
        n in binds(line, qualify, attributes)
        for line in walk_code(method.node)
        if type(line) is cst.SimpleStatementLine and not any(x in line.body for x in nodes)
    )


def _elements(v: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a container literal holds (a comprehension: its element)."""
    if type(v) in (cst.ListComp, cst.SetComp):
        return [v.elt]
    if type(v) is cst.DictComp:
        return [v.value]
    return [e.value for e in v.elements]


def fills(method: MethodFacts, n: str) -> Iterator[cst.BaseExpression]:
    """The values statements of ``method`` put into the container local ``n`` in place: what
    ``n.append(x)`` / ``n.extend(xs)`` / ``n.insert(i, x)`` / ``n.update(..)`` pass, ``x``
    of ``n[i] = x`` and of ``n += x``."""
    for node in walk_code(method.node):
        if type(node) is cst.Call:
            f = node.func
            if (
                type(f) is cst.Attribute
                and f.attr.value in CONTAINER_MUTATORS
                and type(f.value) is cst.Name
                and f.value.value == n
            ):
                yield from (a.value for a in node.args)
        elif type(node) in (cst.Assign, cst.AugAssign):
            aug = type(node) is cst.AugAssign
            for t in [node.target] if aug else [t.target for t in node.targets]:
                into = aug or type(t) is cst.Subscript  # ``n = x`` is no fill
                while type(t) is cst.Subscript:
                    t = t.value
                if into and type(t) is cst.Name and t.value == n:
                    yield node.value


def set_on(method: MethodFacts, n: str) -> Iterator[cst.BaseExpression]:
    """The values statements of ``method`` set as attributes of local ``n`` (``n.size = x``)."""
    for node in walk_code(method.node):
        if type(node) is cst.Assign:
            for t in node.targets:
                if type(t.target) is cst.Attribute and dotted(t.target.value) == n:
                    yield node.value


def binds(s: cst.CSTNode, qualify, attributes: bool = True) -> set[str]:
    """Local names a statement assigns or writes in place: the targets of ``x = ..``,
    ``x[0] += ..`` and ``del x[0]``, the tensor :func:`inplace_write` says a call writes
    (``x.mul_(2)``, ``zeros_(x)``, a view ``x.view(-1).zero_()``, ``torch.arange(n, out=x)``),
    and the list, dict or set a method changes in place (``kernels.append(kernel)``,
    ``groups[0].extend(..)``; ``x.sort()`` as a statement): julius's ``ResampleFrac`` fills
    ``kernels = []`` in a loop, and a hook that took ``[]`` for its value stacked nothing."""

    out: set[str] = set()
    for n in walk_code(s):
        targets: list[cst.CSTNode] = []
        if type(n) is cst.Assign:
            targets = [t.target for t in n.targets]
        elif type(n) in (cst.AugAssign, cst.AnnAssign):
            targets = [n.target]
        elif type(n) is cst.Del:
            targets = [n.target]
        elif type(n) is cst.Expr and type(n.value) is cst.Call:
            f = n.value.func
            if type(f) is cst.Attribute and f.attr.value == "sort":
                targets = [f.value]
        elif type(n) is cst.Call:
            f = n.func
            if type(f) is cst.Attribute and f.attr.value in CONTAINER_MUTATORS:
                targets = [f.value]
            w = inplace_write(n, qualify)
            if w is not None and w.chain[0] != "self":
                out.add(w.chain[0])
        for t in targets:
            for x in walk_code(t) if type(t) in (cst.Tuple, cst.List) else [t]:
                if not attributes and type(x) is cst.Attribute:
                    continue  # ``n.size = 3``: an attribute set, asked apart (:func:`set_on`)
                while type(x) in (cst.Subscript, cst.Attribute):
                    x = x.value
                if type(x) is cst.Name:
                    out.add(x.value)
    return out
