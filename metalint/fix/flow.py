"""What statements do, read from the syntax: the ``self`` attributes they write and read,
the methods they call, their returns, their random draws, the locals they bind."""

from __future__ import annotations

import libcst as cst

from metalint.static.names import dotted
from metalint.static.syntax import code_children, walk_code
from metalint.vocabulary import (
    INPLACE_METHODS,
    METADATA_ATTRIBUTES,
    METADATA_METHODS,
    TENSOR_ATTRIBUTES,
)


def touches(
    node: cst.CSTNode, attr: str, writes_only: bool, memo: dict | None = None
) -> str | None:
    """ "written" / "read" when ``node`` uses ``self.<attr>``."""
    written, read, _ = uses(node, memo)
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
        if type(small) is not cst.Assign or touches(small.value, attr, False):
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


def reads_metadata_only(node: cst.CSTNode, attr: str, memo: dict | None = None) -> bool:
    """Does ``node`` read only what the tensor ``self.<attr>`` tells without its values
    (``torch.zeros(self.r_weight.shape)``, speechbrain's quaternion convolutions;
    ``self.w.size(0)``), and write nothing of it? Such code sees the same either way when the
    values are set later, by a hook."""
    attrs = [n for n in walk_code(node) if type(n) is cst.Attribute]
    whole = {id(n) for n in attrs if dotted(n) == f"self.{attr}"}
    if not whole or attr in uses(node, memo)[0]:
        return False
    meta = {id(n.value) for n in attrs if n.attr.value in METADATA_ATTRIBUTES}
    meta |= {
        id(n.func.value)
        for n in walk_code(node)
        if type(n) is cst.Call
        and type(n.func) is cst.Attribute
        and n.func.attr.value in METADATA_METHODS
    }
    return whole <= meta


def self_attr(d: str | None) -> str | None:
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
        if f.attr.value in INPLACE_METHODS and (a := self_attr(dotted(f.value))):
            written.add(a)
        if dotted(f.value) == "self":
            calls.add(f.attr.value)
            if f.attr.value == "apply" and n.args:
                m = dotted(n.args[0].value)
                if m and m.startswith("self."):
                    calls.add(m[5:])
    name = dotted(f) or ""
    if name.rsplit(".", 1)[-1].endswith("_") and n.args:
        if a := self_attr(dotted(n.args[0].value)):
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


def uses(
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


def return_count(node: cst.CSTNode) -> int:
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


def early_return(s: cst.CSTNode) -> cst.SimpleStatementLine | None:
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


def bare_self_call(s: cst.CSTNode) -> str | None:
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
