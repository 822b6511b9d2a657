"""Locating statements in ``__init__``: the :class:`Locating` part of
:class:`metalint.fix.codemod.ClassEdit`, over :class:`InitFacts` (what is worked out once
per class)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import libcst as cst

from metalint.fix.edits import Unfixable
from metalint.fix.flow import (
    NESTING,
    bare_self_call,
    early_return,
    reads_metadata_only,
    return_count,
    returns,
    sets_metadata,
    statements_after,
    touches,
    uses,
)
from metalint.static.draws import Draws, draws
from metalint.static.model import ClassFacts, MethodFacts
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import code_children, walk_code
from metalint.static.tensors import (
    every_parameter_written,
)


class InitFacts:
    """What the codemods work out once per class and ask once per finding: the parents of
    the nodes of ``__init__``'s body, its early returns, the ``self.<name>()`` calls it makes,
    and the memos of :func:`metalint.fix.flow.uses` and :func:`metalint.fix.flow.returns`. One
    per class and file context
    (:func:`init_facts`)."""

    def __init__(self, cls: ClassFacts) -> None:
        self.cls = cls
        #: id of a statement -> what :func:`uses` answered, and the statement
        self.uses: dict = {}
        #: id of a body -> what :func:`returns` answered, and the body
        self.returns: dict = {}
        #: id of a statement -> what :func:`every_parameter_written` answered, and the statement
        self.loops: dict = {}

    @property
    def body(self) -> Sequence[cst.BaseStatement]:
        init = self.cls.init
        if init is None:
            raise Unfixable(f"`{self.cls.name}` has no `__init__`")
        if not isinstance(init.node.body, cst.IndentedBlock):
            raise Unfixable("`__init__` is written on one line")
        return init.node.body.body

    def parameter_loop(self, stmt: cst.BaseStatement, qualify) -> str | None:
        """:func:`every_parameter_written` of a statement of ``__init__``, worked out once."""
        hit = self.loops.get(id(stmt))
        if hit is None or hit[1] is not stmt:
            hit = self.loops[id(stmt)] = (every_parameter_written(stmt, qualify), stmt)
        return hit[0]

    @cached_property
    def index(self) -> tuple[dict[int, cst.CSTNode], dict[int, int]]:
        """Parents of the nodes of ``__init__``'s body (by id), and the index of each top-level
        statement."""
        parents: dict[int, cst.CSTNode] = {}
        tops: dict[int, int] = {}
        for i, top in enumerate(self.body):
            tops[id(top)] = i
            stack = [top]
            while stack:
                n = stack.pop()
                for c in code_children(n):
                    parents[id(c)] = n
                    stack.append(c)
        return parents, tops

    @cached_property
    def early_returns(self) -> list[tuple[int, cst.SimpleStatementLine]] | None:
        """The early returns of ``__init__``: (index of the top-level ``if cond: ...
        return``, its ``return`` line), in order; None when ``__init__`` returns otherwise
        (from a nested block, with a value, in an ``else``). vector-quantize-pytorch's
        ``Codebook``: ``if not affine_param: return`` before the affine buffers."""
        body = self.body
        out = [(i, r) for i, s in enumerate(body) if (r := early_return(s))]
        if return_count(self.cls.init.node.body) != len(out) or any(
            return_count(body[i]) != 1 for i, _ in out
        ):
            return None
        return out

    @cached_property
    def self_calls(self) -> tuple[dict[str, list[int]], frozenset[str]]:
        """Of ``__init__``'s body: the top-level statements that are ``self.<name>()``, by
        name, and the names of the ``self.<name>(...)`` called anywhere else in it."""
        tops: dict[str, list[int]] = {}
        nested: set[str] = set()
        for i, s in enumerate(self.body):
            names = _called_on_self(s)
            d = _self_call_statement(s)
            if d is not None:
                # the call of that hook is this statement; of any other, inside it
                tops.setdefault(d, []).append(i)
                names.discard(d)
            nested |= names
        return tops, frozenset(nested)


def _called_on_self(s: cst.BaseStatement) -> set[str]:
    """The names of the ``self.<name>(...)`` that top-level statement ``s`` calls. The
    ``self.<hook>()`` calls right before an early return (see
    :meth:`metalint.fix.hooks.HookPlacement.use_hook`) are that hook's call on that path,
    not calls inside a block."""
    scan = [s]
    if early_return(s) is not None:
        stmts = list(s.body.body[:-1])
        while stmts and bare_self_call(stmts[-1]):
            stmts.pop()
        scan = [s.test, *stmts]
    return {
        d[5:]
        for x in scan
        for n in walk_code(x)
        if type(n) is cst.Call and (d := dotted(n.func) or "").startswith("self.")
    }


def _self_call_statement(s: cst.BaseStatement) -> str | None:
    """``name`` for a statement that is one call ``self.<name>(...)``."""
    if (
        type(s) is cst.SimpleStatementLine
        and len(s.body) == 1
        and type(s.body[0]) is cst.Expr
        and type(s.body[0].value) is cst.Call
        and (d := dotted(s.body[0].value.func) or "").startswith("self.")
    ):
        return d[5:]
    return None


def init_facts(ctx: RuleContext, cls: ClassFacts) -> InitFacts:
    """The :class:`InitFacts` of ``cls``, kept in the file context's memo (which lives as long
    as the facts it holds)."""
    key = ("init-facts", id(cls.node))
    found = ctx.memo.get(key)
    if found is None or found.cls is not cls:
        found = ctx.memo[key] = InitFacts(cls)
    return found


class Locating:
    """Where a node is in ``__init__`` and what runs around it (part of
    :class:`metalint.fix.codemod.ClassEdit`)."""

    ctx: RuleContext
    cls: ClassFacts

    @property
    def facts(self) -> InitFacts:
        return init_facts(self.ctx, self.cls)

    @property
    def init(self) -> MethodFacts:
        init = self.cls.init
        if init is None:
            raise Unfixable(f"`{self.cls.name}` has no `__init__`")
        return init

    @property
    def init_body(self) -> Sequence[cst.BaseStatement]:
        return self.facts.body

    def returns(self, body: cst.CSTNode) -> bool:
        """:func:`returns` of a method body of this class, worked out once per body."""
        memo = self.facts.returns
        hit = memo.get(id(body))
        if hit is None or hit[1] is not body:
            hit = memo[id(body)] = (returns(body), body)
        return hit[0]

    def early_returns(self) -> list[tuple[int, cst.SimpleStatementLine]] | None:
        """:attr:`InitFacts.early_returns`."""
        return self.facts.early_returns

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
        """What :func:`uses` worked out for this class's statements (:attr:`InitFacts.uses`)."""
        return self.facts.uses

    def path_of(self, node: cst.CSTNode) -> tuple[int, list[cst.CSTNode]] | None:
        """(index of the top-level statement of ``__init__`` holding ``node``, the path from it
        down to ``node``), or None when ``node`` is not in ``__init__``'s body."""
        parents, tops = self.facts.index
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
        found = self.path_of(node)
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
        found = self.path_of(stmt_node)
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
            written, read, calls = uses(s, memo)
            # a statement that does not name ``self.<attr>`` neither sets nor reads its
            # metadata, nor touches it
            if attr in written or attr in read:
                if tensor and (sets_metadata(s, attr) or reads_metadata_only(s, attr, memo)):
                    continue
                hit = touches(s, attr, writes_only, memo)
                if hit:
                    return f"`self.{attr}` is {hit} later in `__init__` (line order matters)"
            loop = self.facts.parameter_loop(s, self.ctx.qualify)
            if loop:
                return f"every parameter is written later in `__init__`, by `{loop}` (line order matters)"
            methods |= calls
        for name in sorted(methods):
            for m in self.cls.reachable(name):
                if m.name == "__init__":
                    continue
                hit = touches(m.node.body, attr, writes_only, memo)
                if hit:
                    return f"`self.{attr}` is {hit} by `{m.name}()`, which `__init__` calls later"
        return None

    def draws_nothing_after(self, index: int) -> bool:
        return all(draws(s, self.ctx) is Draws.NEVER for s in self.init_body[index + 1 :])

    def block_tail(self, line: cst.CSTNode) -> list[cst.BaseStatement]:
        """The statements that run after ``line`` inside the compound statements holding it
        (the rest of its block, then the rest of each enclosing block), up to its top-level
        statement of ``__init__``: what ``used_after``/``draws_nothing_after`` (which start at the
        next top-level statement) do not see. An ``else`` of an ``if`` holding ``line`` does
        not run after it."""
        found = self.path_of(line)
        return [] if found is None else statements_after(found[1])
