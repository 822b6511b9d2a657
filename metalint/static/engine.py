"""Analyse one file: read, prefilter, parse once, collect facts, run every rule.

The result of a file (:class:`FileResult`) does not depend on any other file, so it can be
computed in a worker process and cached by content. What does depend on other files (is a base
class an ``nn.Module``? does a base class's hook re-create the value?) is carried as a
:class:`~metalint.diagnostics.Condition` and answered by :mod:`metalint.static.hierarchy`.
"""

from __future__ import annotations

import ast
import bisect
import gc
import io
import itertools
import re
import tokenize
from collections.abc import Callable, Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from metalint.codes import TOO_COMPLEX_CODE
from metalint.diagnostics import Condition, Diagnostic, Fix, HelperReads, Position
from metalint.lines import split_lines
from metalint.static.composition import summarize_class, summarize_functions
from metalint.static.defaults import init_functions
from metalint.static.elide import HOST_READ, REPARAMETRIZE, elide, unread_functions
from metalint.static.model import NOT_THE_TREE, ClassFacts, collect
from metalint.static.names import exports_from_ast
from metalint.static.pipeline import materialisations
from metalint.static.references import add_references

# re-exported: the results live in a module that does not import libcst (cache hits need no parser)
from metalint.static.results import HELPER_MARK, STAR, ClassSummary, FileResult, error_result
from metalint.static.rule import Finding, Rule, RuleContext
from metalint.static.syntax import (
    TRIVIA,
    children,
    code_ranges,
    code_ranges_of,
    node_text,
    parse_valid_module,
    walk,
    walk_code,
)
from metalint.static.tensors import argument_registrations, argument_writes, recreated
from metalint.vocabulary import (
    BUFFER_CLASSES,
    DEFAULT_HOOKS,
    HOOKLESS_BASES,
    MODULE_API,
    PARAMETER_CLASSES,
)

#: ``fix_for(code, ctx, finding, row, source) -> Fix | None``: the fix of a finding
FixFor = Callable[[str, RuleContext, Finding, int, str], "Fix | None"]

#: a file that mentions none of these cannot hold a finding; it is not parsed
PREFILTER = re.compile(rb"torch|nn\.|Parameter|register_buffer|Module|Tensor|PreTrainedModel")
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)


def noqa_directives(source: str, tree: ast.Module | None = None) -> dict[int, list[str] | None]:
    """Row -> the codes of the ``# noqa`` comment on it (None: every code). With CPython's
    ``tree`` of ``source``, only the lines that say ``noqa`` are read, and the file is
    tokenized only when the first ``#`` of one of them may stand inside a string."""
    out: dict[int, list[str] | None] = {}
    if NOQA.search(source) is None:  # no comment can hold one
        return out
    comments = _noqa_comments(source, tree) if tree is not None else None
    if comments is None:
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(source, newline="").readline))
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return out
        comments = [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    for row, comment in comments:
        m = NOQA.search(comment)
        if not m:
            continue
        codes = m.group("codes")
        out[row] = sorted({c.upper() for c in re.split(r"[,\s]+", codes) if c}) if codes else None
    return out


def _noqa_comments(source: str, tree: ast.Module) -> list[tuple[int, str]] | None:
    """``(row, text)`` of the comment of each line saying ``noqa`` that has one, as
    ``tokenize`` reads them: from the first ``#`` of the line outside the strings of
    ``tree``; None when a ``#`` before it may start a comment inside a string's span (a
    string spanning lines, or strings joined around a comment): ``tokenize`` tells. A string
    on one line holds no comment (one would run to the end of the line)."""
    lines = split_lines(source)
    rows = [
        row
        for row, line in enumerate(lines, 1)
        if (at := line.find("#")) >= 0 and "noqa" in line[at:].lower()
    ]
    spans = _string_spans(tree, rows)
    out = []
    for row in rows:
        line = lines[row - 1].encode("utf-8", "surrogatepass")  # CPython's columns: bytes
        at = line.find(b"#")
        while at >= 0:
            inside = [(a, b) for a, b in spans.get(row, ()) if a <= (row, at) < b]
            if not inside:
                out.append((row, line[at:].decode("utf-8", "surrogatepass")))
                break
            if any(a[0] != b[0] for a, b in inside):
                return None
            # the next ``#`` past the strings this one is in (a string of many holds none)
            at = line.find(b"#", max(b[1] for _, b in inside))
    return out


def _string_spans(tree: ast.Module, rows: list[int]) -> dict[int, list]:
    """Row of ``rows`` (ascending) -> the spans (start and end, CPython's rows and columns)
    of the string literals on it (an f-string is one span), in one descent of ``tree``
    that enters only the nodes spanning one of ``rows``."""
    out: dict[int, list] = {}
    todo: list[ast.AST] = [tree]
    while todo:
        for child in ast.iter_child_nodes(todo.pop()):
            first = getattr(child, "lineno", None)
            if first is not None:
                decorated = getattr(child, "decorator_list", None)
                if decorated:  # decorators stand above the node's row
                    first = min(first, *(d.lineno for d in decorated))
                last = child.end_lineno or first
                i = bisect.bisect_left(rows, first)
                if i == len(rows) or rows[i] > last:
                    continue
                kind = type(child)
                if kind is ast.JoinedStr or (
                    kind is ast.Constant and isinstance(child.value, (str, bytes))
                ):
                    span = ((child.lineno, child.col_offset), _end(child))
                    for row in rows[i : bisect.bisect_right(rows, last)]:
                        out.setdefault(row, []).append(span)
                    continue
            todo.append(child)
    return out


def _end(node: ast.AST) -> tuple[int, int]:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


def summarize(cls: ClassFacts, ctx: RuleContext) -> ClassSummary:
    hooks: dict[str, tuple[list[str], bool]] = {}
    for name in ctx.hooks:
        if name not in cls.methods:
            continue
        names: set[str] = set()
        calls_super = False
        for m in cls.reachable(name):
            names |= recreated(m, ctx.qualify)
            calls_super = calls_super or name in m.super_calls
        hooks[name] = (sorted(_qualified_helpers(names, ctx)), calls_super)
    api = False
    # a class of no base but ``object``/``ABC`` holding a module (sbi's ``DivergenceOptimizer
    # (ABC)``: ``self.modules = nn.ModuleList([self.q])``) is no module; one of an unknown base
    # that does is taken for one (a mixin, a base of another package); a parameter or buffer
    # makes either one
    plain = all(b in HOOKLESS_BASES for b in cls.bases)
    for m in cls.methods.values():
        for call in m.calls:
            if call.receiver == "self" and call.method in MODULE_API:
                api = True
        for a in m.assigns:
            # self.x = nn.Linear(...) / nn.Parameter(...): only modules hold these
            if type(a.value) is cst.Call:
                q = ctx.qualify(a.value.func) or ""
                if q in PARAMETER_CLASSES | BUFFER_CLASSES or (
                    not plain
                    and q.startswith("torch.nn.")
                    and not q.startswith("torch.nn.functional.")
                ):
                    api = True
    return ClassSummary(
        cls.fullname, cls.bases, hooks, api, sorted(cls.methods), summarize_class(cls, ctx)
    )


def _qualified_helpers(names: set[str], ctx: RuleContext) -> set[str]:
    """``@glorot#0=w`` of a function of this file -> ``@pkg.mod.glorot#0=w``; a helper that is
    neither imported nor defined here (a builtin: ``print(self.w)``) is dropped."""
    out: set[str] = set()
    for n in names:
        if n.startswith(HELPER_MARK):
            helper = n[1:].partition("#")[0]
            if "." not in helper:
                full = ctx.facts.local_functions.get(helper)
                if full is None:
                    continue
                n = HELPER_MARK + full + n[1 + len(helper) :]
        out.add(n)
    return out


def _short_functions(
    module: cst.Module, source: str, tree: ast.Module | None
) -> list[tuple[cst.FunctionDef, str]]:
    """The module-level functions of at most :data:`HELPER_STATEMENTS` statements, each with
    its body's text, for both summaries below (which only search it for calls and reads)."""
    defs = [s for s in module.body if type(s) is cst.FunctionDef]
    texts = _body_texts(defs, source, tree)
    return [
        (
            stmt,
            texts.get(i) or node_text(stmt.body, module.default_indent, module.default_newline),
        )
        for i, stmt in enumerate(defs)
        if type(stmt.body) is cst.IndentedBlock and len(stmt.body.body) <= HELPER_STATEMENTS
    ]


def _body_texts(defs: list[cst.FunctionDef], source: str, tree: ast.Module | None) -> dict:
    """index in ``defs`` -> the text of its body cut from ``source`` at CPython's rows (no
    render), for each whose text holds nothing else than libcst's render of the body would
    for a search: from the ``:`` ending its header (nothing but blanks after it on that line)
    to the end of its last statement's line, when only blank lines follow up to the next
    statement (libcst gives the body the comments after it that are indented further)."""
    if tree is None or not defs:
        return {}
    nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if [d.name.value for d in defs] != [n.name for n in nodes]:
        return {}
    lines = split_lines(source, keepends=True)
    starts = [_first_row(n) for n in tree.body]
    nexts = {
        id(n): (starts[i + 1] if i + 1 < len(starts) else len(lines) + 1)
        for i, n in enumerate(tree.body)
    }
    out = {}
    for i, fn in enumerate(nodes):
        end = fn.end_lineno
        if end is None or any(lines[r - 1].strip() for r in range(end + 1, nexts[id(fn)])):
            continue
        header = _first_row(fn.body[0]) - 1  # the row of the ``:``: above any comment
        while header > fn.lineno and lines[header - 1].lstrip()[:1] in ("", "#"):
            header -= 1
        line = lines[header - 1].rstrip()
        if header < fn.lineno or not line.endswith(":"):
            continue
        out[i] = lines[header - 1][len(line) :] + "".join(lines[header:end])
    return out


def _first_row(node: ast.stmt) -> int:
    """A statement's first row: its first decorator's, if it has any."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _helper_summaries(functions, facts, ctx: RuleContext) -> dict[str, dict]:
    """:func:`argument_writes` of the module-level functions that may write an argument: an
    in-place call (``_(``) or a call of another function of the file or an import in their
    text (elided bodies hold neither)."""
    from metalint.static.model import function_facts

    out: dict[str, dict] = {}
    known = set(facts.local_functions) | set(facts.aliases.names)
    for stmt, text in functions:
        if not stmt.params.params:
            continue
        if "_(" not in text and not known & set(_WORD.findall(text)) - {stmt.name.value}:
            continue
        summary = argument_writes(function_facts(stmt, facts), ctx.qualify, facts.local_functions)
        if summary is not None:
            out[facts.local_functions.get(stmt.name.value, stmt.name.value)] = summary
    return out


def _registering_helpers(functions, facts) -> dict[str, list]:
    """:func:`argument_registrations` of the module-level functions whose text registers a
    buffer (``_bufferize(module, names)``: ``module.register_buffer(name, ...)`` for each)."""
    from metalint.static.model import function_facts

    out: dict[str, list] = {}
    for stmt, text in functions:
        if "register_buffer" not in text or not stmt.params.params:
            continue
        registers = argument_registrations(function_facts(stmt, facts))
        if registers:
            out[facts.local_functions.get(stmt.name.value, stmt.name.value)] = registers
    return out


def _construction_reads(module: cst.Module, functions, source: str, facts, instances, tree) -> dict:
    """What a module-level function does that crashes on meta when construction calls it
    from another file: ``{"meta_reads": [[code, line], ...], "calls": [callee, ...]}``, the
    lines a rule reports in it (:meth:`Rule.function_reads`: ``.item()`` on a tensor it
    creates) and the functions of the tree it calls (followed by the hierarchy). Only short
    functions are read, and only those whose text holds a host read by the rules."""
    from metalint.static.model import function_facts

    out: dict[str, dict] = {}
    lines = None
    for stmt, text in functions:
        reads_host = HOST_READ.search(text) is not None or REPARAMETRIZE.search(text) is not None
        full = facts.local_functions.get(stmt.name.value, stmt.name.value)
        summary: dict = {}
        if reads_host:
            fn = function_facts(stmt, facts)
            found = [(r.code, n) for r in instances for n in r.function_reads(fn)]
            if found:
                lines = lines if lines is not None else split_lines(source)
                pos = _render_alone(module, stmt, [n for _, n in found], lines, tree) or {}
                summary["meta_reads"] = sorted(
                    {(code, pos[n].start.line) for code, n in found if n in pos}
                )
        # the functions of the tree it may call, from its text (``make_window(``,
        # ``utils.make_window(``): a name the hierarchy does not resolve is ignored there
        calls = set()
        for head, name in _CALLED.findall(text):
            if head:
                target = facts.aliases.names.get(head)
                callee = f"{target}.{name}" if target else None
            else:
                callee = facts.local_functions.get(name) or facts.aliases.names.get(name)
            if callee and not callee.startswith(NOT_THE_TREE) and callee != full:
                calls.add(callee)
        if calls:
            summary["calls"] = sorted(calls)
        if summary:
            out[full] = summary
    return out


#: a call by name or through a module alias: ``make_window(`` or ``utils.make_window(``
_CALLED = re.compile(r"(?<![\w.])(?:([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)\s*\(")

#: the most top-level statements of a function read as an init helper (see elide.HELPER_LINES)
HELPER_STATEMENTS = 12
_WORD = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _last_statement_holding(body, targets: set[int]) -> int | None:
    """Index of the last statement of ``body`` needed to hold every node in ``targets`` (ids),
    or None when some is not inside ``body``."""
    left = set(targets)
    for i, stmt in enumerate(body):
        left.difference_update(id(n) for n in walk(stmt))
        if not left:
            return i
    return None


def _positions(
    module: cst.Module, source: str, found, facts, tree: ast.Module | None = None
) -> dict:
    """Code ranges of the reported nodes.

    ``PositionProvider`` on a whole module re-generates all of its code; instead each top-level
    class that holds a finding (or module-level function: a helper a class's ``__init__``
    calls) is rendered alone and shifted to the line its ``class``/``def`` keyword has in the
    source. Anything else falls back to the whole module.
    """

    def whole() -> dict:
        return code_ranges(module)

    groups = _by_top_level_class(module, found, facts)
    if groups is None:
        return whole()
    lines = split_lines(source)
    out: dict = {}
    strays: dict[int, tuple[cst.FunctionDef, list]] = {}
    for top, nodes in groups.values():
        pos = _render_alone(module, top, nodes, lines, tree)
        if pos is None:
            return whole()
        out.update(pos)
        for node in nodes:
            if node in pos:
                continue
            # a finding outside the class: in a module-level helper it calls, or in a
            # method it inherits from a base class of the same file
            holder = _holder(module, node)
            if holder is None:
                return whole()
            strays.setdefault(id(holder), (holder, []))[1].append(node)
    for holder, nodes in strays.values():
        pos = _render_alone(module, holder, nodes, lines, tree)
        if pos is None or any(node not in pos for node in nodes):
            return whole()
        out.update(pos)
    return out


def _render_alone(
    module: cst.Module, top, nodes: list, lines: list[str], tree: ast.Module | None = None
) -> dict | None:
    """Positions of those of ``nodes`` inside the top-level ``top`` (a class or a function),
    from ``top`` rendered alone; None when its line in the source cannot be told.

    Of a class, only what of its methods holds a finding is rendered, each piece at its
    indentation and with no shell around it: of each method, the statements holding one
    (their rows and columns are CPython's, from ``tree``) and its header if it holds one,
    or, without ``tree``, the method up to the last such statement, shifted to the row of
    its ``def``. A finding in a class-level statement renders the class up to there."""
    name = top.name.value
    kind = type(top)
    keyword = r"class\s+" if kind is cst.ClassDef else r"(?:async\s+)?def\s+"
    # the n-th top-level ``class Name`` in the source is the n-th such node in the module
    nth = [s for s in module.body if type(s) is kind and s.name.value == name]
    if tree is not None:  # CPython's row of the keyword (decorators come before it)
        ast_kind = ast.ClassDef if kind is cst.ClassDef else (ast.FunctionDef, ast.AsyncFunctionDef)
        rows = [n.lineno for n in tree.body if isinstance(n, ast_kind) and n.name == name]
    else:
        pattern = re.compile(rf"{keyword}{re.escape(name)}\b")
        rows = [i for i, line in enumerate(lines, 1) if pattern.match(line)]
    if len(rows) != len(nth):
        return None
    row = rows[next(i for i, s in enumerate(nth) if s is top)]
    body = top.body.body if isinstance(top.body, cst.IndentedBlock) else None
    targets = {id(n) for n in nodes}
    # no finding is whitespace or punctuation: look for them among code nodes only
    walker = walk if any(type(n) in TRIVIA for n in nodes) else walk_code
    parts = (
        _methods_holding(top, body, targets, module, lines, row, tree, walker)
        if kind is cst.ClassDef and body
        else None
    )
    if parts == [] and not _in_header(top, targets, walker):
        return {}  # none of them is in the class (in a helper it calls): nothing to render
    pieces, anchors = _shown(top, body, parts, targets, row)
    pos = code_ranges_of(pieces, module.default_indent, module.default_newline)
    out = {}
    for anchor, r, col, held in anchors:
        start = pos[anchor].start
        if col is None:  # a name: it stands at its column of row ``r``
            if lines[r - 1][start.column : start.column + len(anchor.value)] != anchor.value:
                return None
        elif start.column != col:  # a statement: it starts where CPython says
            return None
        shift = r - start.line
        for node in nodes:
            rng = pos.get(node) if id(node) in held else None
            if rng is not None:
                out[node] = CodeRange(
                    CodePosition(rng.start.line + shift, rng.start.column),
                    CodePosition(rng.end.line + shift, rng.end.column),
                )
    return out


def _shown(top, body, parts, targets: set[int], row: int) -> tuple:
    """What of ``top`` to render (see :func:`_render_alone`): ``(node, indentation)`` of
    each piece, and the anchors. ``parts``: the pieces and anchors of each method holding
    the findings (``[]``: no statement of the class body holds one, so its header does: the
    class is rendered with an empty body, ``pass``)."""
    if parts:
        pieces = [piece for method_pieces, _ in parts for piece in method_pieces]
        return pieces, [a for _, method_anchors in parts for a in method_anchors]
    # what follows the last statement holding a finding (often everything after
    # __init__) cannot move it: render only up to there
    last = -1 if parts == [] else _last_statement_holding(body, targets) if body else None
    shown = (
        top if last is None else top.with_changes(body=top.body.with_changes(body=body[: last + 1]))
    )
    return [(shown, ())], [(shown.name, row, None, targets)]


def _held_in(stmt: cst.FunctionDef, left: set[int], walk):
    """The findings of ``left`` a method holds, those of them in its header (its name,
    signature or decorators), and (index, findings) of each body statement holding
    some."""
    header = {
        n
        for part in children(stmt)
        if part is not stmt.body
        for n in left.intersection(map(id, walk(part)))
    }
    held = set(header)
    holding: list[tuple[int, set[int]]] = []
    for j, inner in enumerate(stmt.body.body):
        if held == left:
            break
        found = left.intersection(map(id, walk(inner)))
        if found:
            held |= found
            holding.append((j, found))
    return held, header, holding


def _def_row(body, i: int, indent: str, lines: list[str], row: int) -> int | None:
    """The row of the ``def`` of ``body[i]``: the k-th ``def name`` line after the class's
    ``row`` at the body's indentation, for the k-th method of that name."""
    name = body[i].name.value
    k = sum(1 for s in body[:i] if isinstance(s, cst.FunctionDef) and s.name.value == name)
    pattern = re.compile(rf"{re.escape(indent)}(?:async\s+)?def\s+{re.escape(name)}\b")
    rows = (r for r in range(row + 1, len(lines) + 1) if pattern.match(lines[r - 1]))
    return next(itertools.islice(rows, k, None), None)


def _by_top_level_class(module: cst.Module, found, facts) -> dict | None:
    """The reported nodes by the top-level class holding them (its node, the nodes); None
    when a class is not at the top level."""
    by_qual = {c.qualname: c for c in facts.classes}
    top_level = {id(stmt) for stmt in module.body}
    groups: dict[int, tuple[cst.ClassDef | cst.FunctionDef, list]] = {}
    for cls, node in found:
        top = by_qual.get(cls.qualname.split(".")[0], cls)
        if id(top.node) not in top_level:
            return None
        groups.setdefault(id(top.node), (top.node, []))[1].append(node)
    return groups


def _in_header(top: cst.ClassDef, targets: set[int], walk) -> bool:
    """Whether a node of ``targets`` is in the class statement outside its body (its name,
    bases, decorators)."""
    return any(
        not targets.isdisjoint(map(id, walk(part)))
        for part in children(top)
        if part is not top.body
    )


def _holder(module: cst.Module, node: cst.CSTNode) -> cst.CSTNode | None:
    """The module-level function or class that holds ``node``, if any."""
    walker = walk if type(node) in TRIVIA else walk_code
    return next(
        (
            s
            for s in module.body
            if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and any(n is node for n in walker(s))
        ),
        None,
    )


def _methods_holding(
    top: cst.ClassDef,
    body,
    targets: set[int],
    module: cst.Module,
    lines: list[str],
    row: int,
    tree,
    walk=walk,
):
    """(pieces to render, their anchors) for each method of ``top`` holding some of
    ``targets`` (:func:`_method_part`; none: no statement of the class holds one); None
    when a class-level
    statement holds one or a row cannot be told. An
    anchor is (node, its row, its column or None for a name, ids of the findings under it).
    ``walk`` lists the nodes under a statement (:func:`walk_code` when no finding is trivia).

    The k-th method of a name in the class is the k-th ``def name`` line after the class's
    ``row`` at the class body's indentation."""
    indent = top.body.indent if top.body.indent is not None else module.default_indent
    out = []
    left = set(targets)  # what is not in the class (a finding in a helper it calls) stays
    for i, stmt in enumerate(body):
        if not left:
            break
        if not isinstance(stmt, cst.FunctionDef) or not isinstance(stmt.body, cst.IndentedBlock):
            if left.intersection(id(n) for n in walk(stmt)):
                return None
            continue
        held, header, holding = _held_in(stmt, left, walk)
        if not held:
            continue
        left -= held
        r = _def_row(body, i, indent, lines, row)
        if r is None:
            return None
        statements = _statements_of(tree, row, r, len(stmt.body.body))
        inside = stmt.body.indent if stmt.body.indent is not None else module.default_indent
        out.append(_method_part(stmt, (indent, inside), r, header, holding, statements))
    return out


def _method_part(stmt, at: tuple, r: int, header: set[int], holding, statements) -> tuple:
    """What of a method to render for the findings it holds (``(node, indentation)`` of
    each piece), with its anchors (see :func:`_methods_holding`): its header, for those in it
    (``header``: its name is the anchor, at row ``r``), and of its body the statements in
    ``holding`` alone, each anchored at CPython's row and column (``statements``) and
    rendered at the indentation ``at`` (the class body's, the method body's), or else
    the body up to the last of them, anchored by the name. What follows a node cannot move
    it: a finding in the header needs no body; a statement, no header."""
    inner = stmt.body.body
    pieces, anchors = [], []
    if statements is not None:
        for j, ids in holding:
            pieces.append((inner[j], at))
            anchors.append((inner[j], statements[j].lineno, statements[j].col_offset, ids))
        shown = []
    else:
        shown = inner[: holding[-1][0] + 1] if holding else []
        header = header.union(*(ids for _, ids in holding))
    if header:
        method = stmt.with_changes(body=stmt.body.with_changes(body=shown))
        pieces.insert(0, (method, at[:1]))
        anchors.insert(0, (stmt.name, r, None, header))
    return pieces, anchors


def _statements_of(
    tree: ast.Module | None, class_row: int, def_row: int, count: int
) -> list | None:
    """CPython's statements of the body of the method whose ``def`` is on ``def_row``, in
    the class whose ``class`` is on ``class_row``; None unless there are ``count`` of them."""
    if tree is None:
        return None
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.lineno == class_row), None
    )
    if cls is None:
        return None
    fn = next(
        (
            n
            for n in cls.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno == def_row
        ),
        None,
    )
    if fn is None or len(fn.body) != count:
        return None
    return fn.body


def cpython_tree(source: str, display: str) -> tuple[ast.Module | None, FileResult | None]:
    """CPython's tree of ``source``, or the ML900 result naming why CPython cannot build one
    (its own message and line)."""
    try:
        return ast.parse(source, display), None
    except SyntaxError as exc:
        return None, error_result(
            display,
            f"could not be checked: syntax error: {exc.msg}",
            exc.lineno or 1,
            exc.offset or 1,
        )
    except MemoryError:  # the worker's memory bound (or CPython's parser stack)
        why = "file too complex to analyse (out of memory)"
        return None, error_result(display, why, code=TOO_COMPLEX_CODE)
    except (ValueError, RecursionError) as exc:
        return None, error_result(
            display, f"could not be checked: {str(exc) or type(exc).__name__}"
        )


def analyze_source(
    source: str,
    display: str,
    module_name: str,
    *,
    is_package: bool = False,
    hooks: tuple[str, ...] = DEFAULT_HOOKS,
    rules: Sequence[type[Rule]],
    fix_for: FixFor | None = None,
    elide_unread: bool = True,
    defer_helper_reads: bool = False,
) -> FileResult:
    """Run ``rules`` on ``source``; ``fix_for(code, ctx, finding, row, source)`` gives each
    finding its fix (the fix registry's; None: findings carry no fix). Both are handed in by
    the layer above (``metalint.jobs``, ``metalint.fix``): this layer imports neither the
    rules nor the codemods.

    ``elide_unread`` parses with libcst only the code rules read (the same findings, positions
    and fixes, in less time); ``metalint fix`` turns it off, so that what it writes is rendered
    from the whole file.

    ``defer_helper_reads`` leaves out the findings that stand only if a function of another
    file reads a tensor's value (ML008/ML009 at a call of an imported function: on timm five
    in six of a file's findings, almost none of which the tree confirms) and lists the
    ``(code, function)`` of each in ``FileResult.helper_reads`` instead: ``check`` analyses a
    file again in full when the tree confirms one (see :func:`metalint.checking.run_check`).

    The cycle collector is paused meanwhile: a libcst tree is tens of thousands of objects
    that live exactly as long as this call and are freed by reference counting when it
    returns, so the collector's passes over them while they are built find nothing (they cost
    a tenth of the time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze(
            source,
            display,
            module_name,
            is_package,
            hooks,
            rules,
            fix_for,
            elide_unread,
            defer_helper_reads,
        )
    finally:
        if enabled:
            gc.enable()


def _returns_meta(module, facts, ctx: RuleContext, result: FileResult) -> None:
    """Mark the module-level functions returning a meta tensor (``returns_meta``):
    ``steps(n).tolist()`` in another file reads one (``ReturnsMeta``)."""
    if not facts.local_functions:
        return
    for name in ctx.meta_returning:
        full = facts.local_functions.get(name[:-2])
        if full:
            result.functions.setdefault(full, {})["returns_meta"] = True


def _analyze(
    source, display, module_name, is_package, hooks, rules, fix_for, elide_unread, defer
) -> FileResult:
    # CPython first: what it rejects is ML900 with its own message, and nothing else touches
    # it (libcst's native parser overflows its stack on some of what CPython refuses)
    tree, err = cpython_tree(source, display)
    if err is not None:
        return err
    result = FileResult(display, module_name, noqa=noqa_directives(source, tree))
    result.materialisations = materialisations(tree, source, module_name, is_package)
    if not PREFILTER.search(source.encode("utf-8", "surrogatepass")):
        result.exports = exports_from_ast(tree, module_name, is_package)
        return result
    whole, whole_tree = source, tree
    if elide_unread:
        # CPython's parser finds what no rule reads; libcst then parses the rest (see elide.py)
        source = elide(source, tree, hooks)
        unread: set[str] = set()  # their bodies are strings: nothing to summarise
    else:
        unread = unread_functions(source, tree, hooks)
        tree = None
    try:
        # no re-validation by libcst of what CPython accepted
        module = parse_valid_module(source)
    except cst.ParserSyntaxError as exc:
        msg = str(exc.message).splitlines()[0] if exc.message else "invalid syntax"
        return error_result(
            display, f"could not be checked: syntax error: {msg}", exc.raw_line, exc.raw_column + 1
        )
    result.parsed = True
    facts = collect(module, module_name, is_package)

    ctx = RuleContext(facts, module, hooks, display, whole, tree=tree, defer_helper_reads=defer)
    functions = _summarise(result, module, module_name, ctx, source, tree, unread)
    add_references(whole_tree, facts, result.classes, whole)
    instances = [r(ctx) for r in rules]
    for name, summary in _construction_reads(
        module, functions, source, facts, instances, tree
    ).items():
        result.functions.setdefault(name, {}).update(summary)
    _returns_meta(module, facts, ctx, result)
    findings = _findings(facts, instances, ctx, result)
    if findings:
        positions = _positions(module, source, [(f.cls, f.node) for _, f in findings], facts, tree)
        result.diagnostics.extend(
            _diagnostic(code, f, positions[f.node], ctx, fix_for, source) for code, f in findings
        )
    # what the fixes memoised holds the context (a class's tensors ask it): a cycle that
    # reference counting alone would never free while the collector is paused
    ctx.memo.clear()
    return result


def _summarise(result: FileResult, module, module_name: str, ctx, source: str, tree, unread):
    """What the cross-file step needs of a file: its exports, class summaries and
    module-level functions (init functions, helpers' writes, what they apply). The
    module-level functions a rule may read, with their CPython trees."""
    facts = ctx.facts
    result.exports = dict(facts.aliases.names)
    result.exports.update(facts.local_classes)
    result.exports.update({f"{STAR}{m}": m for m in facts.aliases.stars})
    result.classes = [summarize(c, ctx) for c in facts.classes]
    result.functions = init_functions(module, module_name, ctx.qualify)
    functions = [
        (f, t) for f, t in _short_functions(module, source, tree) if f.name.value not in unread
    ]
    for name, summary in _helper_summaries(functions, facts, ctx).items():
        result.functions.setdefault(name, {})["arg_writes"] = summary
    for name, registers in _registering_helpers(functions, facts).items():
        result.functions.setdefault(name, {})["arg_registers"] = registers
    protocols = [c.protocol for c in result.classes]
    applied = tuple(
        s.get("function", "")
        for site in result.materialisations
        for s in site.get("steps", ())
        if s.get("kind") in ("apply", "fn")
    )
    for name, summary in summarize_functions(module, module_name, ctx, protocols, applied).items():
        result.functions.setdefault(name, {}).update(summary)
    return functions


def _findings(facts, instances, ctx: RuleContext, result: FileResult) -> list[tuple[str, Finding]]:
    """Every rule's findings on every class; with ``ctx.defer_helper_reads``, those that stand
    only while a helper of another file reads a tensor are listed (``result.helper_reads``),
    not made (a rule asks :meth:`Rule.deferred` before making one)."""
    findings: list[tuple[str, Finding]] = []
    defer = ctx.defer_helper_reads
    helper_reads = ctx.helper_reads
    for cls in facts.classes:
        for rule in instances:
            for finding in rule.check_class(cls):
                reads = finding.get(HelperReads)
                if defer and reads:
                    helper_reads.add((rule.code, reads.function))
                else:
                    findings.append((rule.code, finding))
    result.helper_reads = sorted(helper_reads)
    return findings


def _diagnostic(code: str, f: Finding, rng, ctx, fix_for, source: str) -> Diagnostic:
    return Diagnostic(
        code,
        f.message,
        ctx.path,
        Position(rng.start.line, rng.start.column + 1),
        Position(rng.end.line, rng.end.column + 1),
        symbol=f.cls.qualname,
        subject=f.subject,
        hook=f.hook,
        help=f.help,
        # a finding that stands only across files (a helper's read) has no fix
        fix=f.fix
        if f.fix is not None or fix_for is None or f.get(HelperReads)
        else fix_for(code, ctx, f, rng.start.line, source),
        condition=Condition(f.cls.fullname, True, f.conditions),
    )
