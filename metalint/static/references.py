"""Where a class names the classes of other files (``ClassSummary.refs``).

A finding of a class outside the checked tree (an installed package) is reported on the class
of the tree that builds or extends it, at the place that names it: the base in ``class
Encoder(ResNet):``, the call in ``self.features = MelFilterbank(40)``. The positions are read
from CPython's tree (cheap, exact rows and columns) for the names the class's summary already
holds (its bases and the classes its construction refers to) that are not of its own file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from metalint.lines import split_lines
from metalint.static.model import construction
from metalint.static.names import canonical
from metalint.static.results import OWN_REF, ClassSummary


def add_references(
    tree: ast.Module | None, facts, summaries: list[ClassSummary], source: str
) -> None:
    """Fill ``refs`` of each summary (in the order of ``facts.classes``) with the first
    mention of each name of another file among its bases and construction's classes
    (``source``: the text ``tree`` was parsed from, for the columns of a non-ASCII line)."""
    if tree is None:
        return
    local = set(facts.local_classes.values())
    # a class of the file's own package is the tree's (never read from an installed copy)
    own = facts.module.split(".")[0] + "." if facts.module else None
    wanted: dict[str, tuple[set[str], set[str]]] = {}
    for cls, summary in zip(facts.classes, summaries):
        bases = {b for b in summary.bases if _elsewhere(b, local, own)}
        children = {c for c in summary.protocol.get("children", ()) if _elsewhere(c, local, own)}
        if bases or children:
            wanted.setdefault(cls.qualname, (bases, children))
    if not wanted:
        return
    # the k-th class of a name (``if ...: class Block`` / ``else: class Block``) is the k-th
    # node of that name
    nodes: dict[str, list[ast.ClassDef]] = {}
    for qual, node in class_nodes(tree.body, ()):
        nodes.setdefault(qual, []).append(node)
    for cls, summary in zip(facts.classes, summaries):
        same = nodes.get(cls.qualname)
        node = same.pop(0) if same else None
        if node is None or cls.qualname not in wanted:
            continue
        bases, children = wanted[cls.qualname]
        methods = {m.name for m in construction(cls)} if children else set()
        found = _mentions(node, bases, children, methods, facts)
        summary.refs = {k: _characters(v, source) for k, v in found.items()}


def _elsewhere(name: str, local: set[str], own: str | None) -> bool:
    return (
        "." in name
        and name not in local
        and not name.startswith("torch.")
        and not (own and name.startswith(own))
    )


def class_nodes(body: list, stack: tuple[str, ...]) -> Iterator[tuple[str, ast.ClassDef]]:
    """``(qualname, node)`` of every class outside a function, in source order."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            qual = (*stack, node.name)
            yield ".".join(qual), node
            yield from class_nodes(node.body, qual)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from class_nodes(inner, stack)


def _mentions(node: ast.ClassDef, bases: set[str], children: set[str], methods, facts) -> dict:
    out: dict[str, list[int]] = {}
    out[OWN_REF] = [node.lineno, node.col_offset + 1, node.lineno, node.col_offset + 1]
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        q = _qualify(target, facts)
        if q in bases:
            out.setdefault(q, _span(base))
    if children:
        for q, span in _children(node, children, methods, facts).items():
            out.setdefault(q, span)
    return out


def _children(node: ast.ClassDef, children: set[str], methods, facts) -> dict:
    """The first mention of each of ``children`` in the class's ``methods``: a call (a call
    of each ends the search: ``MelFilterbank(40)`` rather than an annotation), else a name."""
    last = {c.rpartition(".")[2] for c in children}
    called: dict[str, list[int]] = {}
    named: dict[str, list[int]] = {}
    for n in _walk_methods(node, methods):
        kind = type(n)
        if kind is ast.Call:
            q = _qualify(n.func, facts) if _last(n.func) in last else None
            if q in children and q not in called:
                called[q] = _span(n.func)
                if len(called) == len(children):
                    break
        elif (kind is ast.Name or kind is ast.Attribute) and _last(n) in last:
            q = _qualify(n, facts)
            if q in children:
                named.setdefault(q, _span(n))
    return {**named, **called}


def _last(node: ast.AST) -> str | None:
    kind = type(node)
    return node.id if kind is ast.Name else node.attr if kind is ast.Attribute else None


def _walk_methods(node: ast.ClassDef, methods: set[str]) -> Iterator[ast.AST]:
    """The nodes of the class's ``methods`` (those construction runs, where it names the
    classes it builds), ``__init__`` first, then in source order."""
    body = [
        s
        for s in node.body
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in methods
    ]
    body.sort(key=lambda s: s.name != "__init__")
    todo = list(reversed(body))
    while todo:
        n = todo.pop()
        yield n
        todo.extend(reversed(list(ast.iter_child_nodes(n))))


def _qualify(node: ast.AST, facts) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = facts.aliases.names.get(node.id)
    if head is None:
        return None
    return canonical(".".join([head, *reversed(parts)]))


def _characters(span: list[int], source: str) -> list[int]:
    """``span`` with CPython's columns (UTF-8 bytes) counted in characters, as the reports'."""
    if source.isascii():
        return span
    lines = split_lines(source)
    out = list(span)
    for i in (0, 2):
        row = out[i]
        if 0 < row <= len(lines) and not lines[row - 1].isascii():
            head = lines[row - 1].encode("utf-8", "surrogatepass")[: out[i + 1] - 1]
            out[i + 1] = len(head.decode("utf-8", "replace")) + 1
    return out


def _span(node: ast.AST) -> list[int]:
    end_row = getattr(node, "end_lineno", None) or node.lineno
    end_col = getattr(node, "end_col_offset", None)
    end_col = node.col_offset if end_col is None else end_col
    return [node.lineno, node.col_offset + 1, end_row, end_col + 1]
