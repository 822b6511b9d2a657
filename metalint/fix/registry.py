"""Rule code -> codemod, and a codemod's rewrite -> :class:`~metalint.diagnostics.Fix`.

The static engine calls :func:`fix_for` for each finding (in the worker process, with the
syntax tree at hand), so ``check`` shows which findings ``fix`` can rewrite and how safely;
the cache stores the fix with the diagnostic. ``metalint fix`` re-analyses each file after every
round of rewrites, so the edits it applies always come from the current text.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import itertools
from types import ModuleType

import libcst as cst

from metalint.diagnostics import Edit, Fix, Position
from metalint.fix.edits import Rewrite, Unfixable, path_to, replaced
from metalint.lines import count_breaks, split_lines
from metalint.rules import all_rules
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import TextState, code_ranges, node_text

#: rule code -> module holding ``plan(ctx, cls, finding) -> Rewrite``: as each rule class
#: names it (``Rule.codemod``)
CODEMODS = {r.code: r.codemod for r in all_rules() if r.codemod}


#: why a finding analysed in this process has no fix: (path, code, row) -> reason
REASONS: dict[tuple[str, str, int], str] = {}


def _remember(path: str, code: str, row: int, reason: str) -> None:
    if len(REASONS) > 100_000:
        REASONS.clear()
    REASONS[(path, code, row)] = reason


def codemod(code: str) -> ModuleType | None:
    name = CODEMODS.get(code)
    return importlib.import_module(name) if name else None


def plan(code: str, ctx: RuleContext, finding: Finding) -> Rewrite | str | None:
    """The rewrite for a finding, or the reason it cannot be fixed (None: no codemod)."""
    try:
        mod = codemod(code)
        if mod is None:
            return None
        return mod.plan(ctx, finding.cls, finding)
    except Unfixable as exc:
        return str(exc)
    except Exception as exc:  # a bug of a codemod must never break check
        return f"internal error in the {code} codemod: {type(exc).__name__}: {exc}"


def top_class(ctx: RuleContext, finding: Finding) -> cst.BaseCompoundStatement | None:
    """The top-level statement that holds the finding's class: its class statement, or the
    ``try``/``if``/``with`` block it is defined in (cellpose's ``Transformer``, defined in a
    ``try:`` that imports an optional dependency). Not a class made inside a function."""
    head = finding.cls.qualname.split(".")[0]
    for node in ctx.module.body:
        if isinstance(node, cst.ClassDef) and node.name.value == head:
            if node is finding.cls.node or path_to(node, finding.cls.node) is not None:
                return node
        elif isinstance(node, (cst.Try, cst.If, cst.With)):
            path = path_to(node, finding.cls.node)
            if path is not None and not any(isinstance(n, cst.FunctionDef) for n in path):
                return node
    return None


def alone(module: cst.Module, node: cst.CSTNode) -> cst.Module:
    return cst.Module(
        body=[node], default_indent=module.default_indent, default_newline=module.default_newline
    )


def class_rewrite(
    ctx: RuleContext, finding: Finding, rewrite: Rewrite
) -> tuple[cst.ClassDef, cst.ClassDef] | None:
    top = top_class(ctx, finding)
    if top is None:
        return None
    new_top = (
        rewrite.new_class
        if top is finding.cls.node
        else replaced(top, finding.cls.node, rewrite.new_class)
    )
    return top, new_top


def _must_parse(text: str, probe: str) -> None:
    """Raise what ``ast.parse(text)`` raises (a codemod must never produce code that does
    not parse), parsing only ``probe`` when that parses (see
    :meth:`ClassText.render_and_probe`)."""
    if not _parses(probe):
        ast.parse(text)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except Exception:  # what it is, the whole text's parse raises
        return False
    return True


def line_edits(
    old: str, new: str, shift: int = 0, old_lines: list[str] | None = None
) -> tuple[Edit, ...]:
    """Minimal whole-line edits that turn ``old`` into ``new`` (rows shifted by ``shift``;
    ``old_lines``: ``old``'s lines, when at hand)."""
    a = split_lines(old, keepends=True) if old_lines is None else old_lines
    b = split_lines(new, keepends=True)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        out.append(
            Edit(Position(i1 + 1 + shift, 1), Position(i2 + 1 + shift, 1), "".join(b[j1:j2]))
        )
    return tuple(out)


def apply_edits(text: str, edits) -> str:
    """Apply non-overlapping edits (1-based rows/columns, end exclusive)."""
    starts = [0]
    for line in split_lines(text, keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(p: Position) -> int:
        if p.row - 1 >= len(starts):
            return len(text)
        return min(starts[p.row - 1] + p.column - 1, len(text))

    spans = sorted(
        ((offset(e.start), offset(e.end), e.content) for e in edits), key=lambda s: (s[0], s[1])
    )
    out, pos = [], 0
    for s, e, content in spans:
        if s < pos:
            raise ValueError("overlapping edits")
        out.append(text[pos:s])
        out.append(content)
        pos = e
    out.append(text[pos:])
    return "".join(out)


def _first_row(texts: ClassText, source: str | None, row: int, ctx, top, finding) -> int:
    """The file row where the class text ``texts.text`` starts (the occurrence holding
    ``row``)."""
    if source is not None:
        rows = texts.rows()
        for first in texts.occurrences(source):
            if first <= row < first + rows:
                return first
    pos = code_ranges(alone(ctx.module, top))
    return row - pos[finding.node].start.line + 1


def _occurrences(source: str, text: str) -> list[int]:
    """The file rows where each occurrence of ``text`` in ``source`` starts."""
    out: list[int] = []
    at = source.find(text)
    while at >= 0:
        out.append(count_breaks(source, 0, at) + 1)
        at = source.find(text, at + 1)
    return out


#: the statement node types (a rendered statement's text is kept by id)
_STATEMENTS = frozenset(
    t
    for t in vars(cst).values()
    if isinstance(t, type) and issubclass(t, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
)


class _Pieces(TextState):
    """A rendering that also keeps where each statement starts and ends in its tokens, with
    the indentation it was rendered at, and the compound statements with a body."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module.default_indent, module.default_newline)
        self.spans: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        self.open: list[list[int]] = []
        self.compound: list[tuple[cst.CSTNode, tuple[str, ...]]] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _STATEMENTS:
            span = [len(self.tokens), 0]
            indents = tuple(self.indent_tokens)
            self.spans[id(node), indents] = span
            self.open.append(span)
            if type(node) in _HEADS:
                self.compound.append((node, indents))

    def after_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _STATEMENTS:
            self.open.pop()[1] = len(self.tokens)


#: compound statement type -> the fields that make its text besides its body
_HEADS = {
    t: tuple(f.name for f in dataclasses.fields(t) if f.name != "body")
    for t in _STATEMENTS
    if issubclass(t, cst.BaseCompoundStatement)
}


def _head(stmt: cst.CSTNode, indents: tuple[str, ...]) -> tuple | None:
    """What a compound statement with an indented body renders besides its body's
    statements, as the identities of the nodes that render it: two statements with the same
    head at the same indentation differ only in their body's statements."""
    body = getattr(stmt, "body", None)
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None
    fields = _HEADS.get(type(stmt))
    if fields is None:
        return None
    return (
        type(stmt),
        indents,
        body.indent,
        id(body.header),
        id(body.footer),
        *(id(getattr(stmt, f)) for f in fields),
    )


class ClassText:
    """A top-level class's text, with where each of its statements (at any depth) is in it.
    A rewrite of the class (codemods build it with ``with_changes``: the statements they keep
    are the same objects) is rendered from those pieces: only its new statements are
    rendered, each compound one as a shell around its kept statements (the shell's text cut
    from the original statement's when only its body's statements differ: the class itself
    and every method a rewrite edits).

    The text and the pieces are cut from the source at CPython's rows (see
    :func:`_cut_from_source`) where the module is libcst's parse of text CPython's tree
    describes; else the class is rendered."""

    def __init__(self, module: cst.Module, top: cst.ClassDef, cut: tuple | None = None) -> None:
        self.module = module
        self.top = top  # keeps the ids of ``spans`` and ``compound`` alive
        if cut is not None:
            self.text, self.spans, self.compound = cut
        else:
            state = _Pieces(module)
            top._codegen(state)
            offsets = list(itertools.accumulate(map(len, state.tokens), initial=0))
            self.text = "".join(state.tokens)
            self.spans = {k: (offsets[a], offsets[b]) for k, (a, b) in state.spans.items()}
            elifs = {id(n.orelse) for n, _ in state.compound if isinstance(n, cst.If)}
            self.compound = [(n, at) for n, at in state.compound if id(n) not in elifs]
        self.heads: dict[tuple, cst.CSTNode] | None = None
        self._rows: tuple[str, list[int]] | None = None
        self._breaks: int | None = None
        self._lines: list[str] | None = None
        self._made: dict[int, tuple[cst.ClassDef, str, str]] = {}
        self._edits: dict[tuple[str, int], tuple[Edit, ...]] = {}

    def made(self, new: cst.ClassDef) -> tuple[str, str]:
        """:meth:`render_and_probe`, once for each rewrite (findings of a class that share one
        ask it again)."""
        hit = self._made.get(id(new))
        if hit is None or hit[0] is not new:
            hit = self._made[id(new)] = (new, *self.render_and_probe(new))
        return hit[1], hit[2]

    def edits(self, new: str, shift: int) -> tuple[Edit, ...]:
        """:func:`line_edits` from this class's text to ``new``, once for each text."""
        key = (new, shift)
        if key not in self._edits:
            self._edits[key] = line_edits(self.text, new, shift, self.lines())
        return self._edits[key]

    def lines(self) -> list[str]:
        """The class's text split in lines (ends kept), split once for all its fixes."""
        if self._lines is None:
            self._lines = split_lines(self.text, keepends=True)
        return self._lines

    def rows(self) -> int:
        """How many rows the class's text spans."""
        if self._breaks is None:
            self._breaks = count_breaks(self.text)
        return self._breaks + 1

    def occurrences(self, source: str) -> list[int]:
        """The file rows where each occurrence of the class's text in ``source`` starts,
        found once for all the class's fixes."""
        if self._rows is None or self._rows[0] is not source:
            self._rows = (source, _occurrences(source, self.text))
        return self._rows[1]

    def render(self, new: cst.ClassDef) -> str:
        """The text of ``new``, a rewrite of this class."""
        return self._statement(new, ())

    def render_and_probe(self, new: cst.ClassDef) -> tuple[str, str]:
        """The text of ``new`` and a text that parses exactly when it does: each statement
        rendered from this class's around its body (:meth:`_statement`) with only the
        statements of that body not kept from this class, and a ``pass`` at the indentation
        of its first statement when that one is kept (it sets the body's indentation). A kept
        statement is a complete statement of text CPython parsed, at the same indentation:
        leaving it out changes neither what comes before nor after it."""
        probe: list[str] = []
        return self._statement(new, (), probe), "".join(probe)

    def _original(self, stmt: cst.CSTNode, indents: tuple[str, ...]) -> cst.CSTNode | None:
        """The statement of the class at ``indents`` with the same head as ``stmt``."""
        if self.heads is None:
            self.heads = {}
            for node, at in self.compound:
                head = _head(node, at)
                if head is not None:
                    self.heads.setdefault(head, node)
        head = _head(stmt, indents)
        return None if head is None else self.heads.get(head)

    def _statement(
        self, stmt: cst.CSTNode, indents: tuple[str, ...], probe: list[str] | None = None
    ) -> str:
        """The text of ``stmt`` at ``indents``; ``probe`` gets the text to parse for it (see
        :meth:`render_and_probe`)."""
        text = self._shell_cut(stmt, indents, probe)
        if text is None:
            text = self._rendered(stmt, indents)
            if probe is not None:
                probe.append(text)
        return text

    def _shell_cut(
        self, stmt: cst.CSTNode, indents: tuple[str, ...], probe: list[str] | None
    ) -> str | None:
        """The text of a compound statement with the head of one of this class's: that
        one's text around its body's statements, around this one's. None for any other."""
        if (id(stmt), indents) in self.spans:
            return None
        body = getattr(stmt, "body", None)
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return None
        original = self._original(stmt, indents)
        if original is None:
            return None
        inner = (*indents, self.module.default_indent if body.indent is None else body.indent)
        whole = self.spans[id(original), indents]
        first = self.spans[id(original.body.body[0]), inner]
        last = self.spans[id(original.body.body[-1]), inner]
        head, tail = self.text[whole[0] : first[0]], self.text[last[1] : whole[1]]
        out = [head]
        if probe is not None:
            probe.append(head)
        for i, child in enumerate(body.body):
            kept = probe is None or (id(child), inner) in self.spans
            out.append(self._statement(child, inner, None if kept else probe))
            if i == 0 and kept and probe is not None:
                # what sets the body's indentation: the first line of the statement kept
                probe.append(f"{''.join(inner)}pass{self.module.default_newline}")
        out.append(tail)
        if probe is not None:
            probe.append(tail)
        return "".join(out)

    def _rendered(self, stmt: cst.CSTNode, indents: tuple[str, ...]) -> str:
        """The text of a statement kept from this class, or rendered around its kept
        statements."""
        span = self.spans.get((id(stmt), indents))
        if span is not None:
            return self.text[span[0] : span[1]]
        module = self.module
        body = getattr(stmt, "body", None)
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return node_text(stmt, module.default_indent, module.default_newline, indents)
        inner = (*indents, module.default_indent if body.indent is None else body.indent)
        # the statement with a marker line for each statement of its body, then each marker
        # replaced by that statement's text
        shell = node_text(
            stmt.with_changes(body=body.with_changes(body=_markers(len(body.body)))),
            module.default_indent,
            module.default_newline,
            indents,
        )
        out, at = [], 0
        for i, child in enumerate(body.body):
            line = f"{''.join(inner)}__metalint_piece_{i}__{module.default_newline}"
            found = shell.index(line, at)
            out += (shell[at:found], self._statement(child, inner))
            at = found + len(line)
        out.append(shell[at:])
        return "".join(out)


class _Mismatch(Exception):
    """libcst's statements and CPython's do not pair up: the class is rendered instead."""


def _cut_from_source(
    module: cst.Module, top: cst.ClassDef, tree: ast.Module, lines: list[str]
) -> tuple | None:
    """What rendering ``top`` gives (its text, each statement's span in it, at each
    indentation, and the compound statements), cut from ``lines``, the text ``module`` was
    parsed from and ``tree`` describes (rows and statements shared: CPython's tree of the
    file before elision, which keeps every row and whole kept functions; a function left
    out is one statement of the same rows in both).

    Each statement's text starts ``len(leading_lines)`` rows above its first row (its first
    decorator's) in CPython's tree, and ends where the next statement of its block starts;
    the last one of a block ends ``len(footer)`` rows above where its block ends (the next
    clause's start, or its statement's end): libcst's own counts of the comment lines it
    gives each statement and block, so nothing here decides where a comment belongs. None
    when the two trees do not pair up, or ``top`` is the ``try``/``if`` holding the class (the
    class is rendered)."""
    if not isinstance(top, cst.ClassDef):
        return None
    index = next((i for i, s in enumerate(module.body) if s is top), None)
    name = top.name.value
    same = [s for s in module.body if type(s) is cst.ClassDef and s.name.value == name]
    ours = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    if index is None or len(same) != len(ours):
        return None
    node = ours[next(i for i, s in enumerate(same) if s is top)]
    at = tree.body.index(node)
    start = _code_row(node) - len(top.leading_lines)
    if index + 1 < len(module.body):
        if at + 1 >= len(tree.body):
            return None
        end = _code_row(tree.body[at + 1]) - len(module.body[index + 1].leading_lines) - 1
    else:
        end = len(lines) - len(module.footer)
    if not 1 <= start <= end <= len(lines):
        return None
    rows = lines[start - 1 : end]
    if not rows[-1].endswith(("\n", "\r")):
        rows[-1] += module.default_newline  # the file's last line: libcst's render ends it
    cut = _Cut(module, start, end, list(itertools.accumulate(map(len, rows), initial=0)))
    try:
        cut.place(top, node, (), start, end)
    except _Mismatch:
        return None
    return "".join(rows), cut.spans, cut.compound


class _Cut:
    """Spans of statements in the rows ``start``..``end`` of the text (``offsets``: where each
    of those rows starts in the class's text)."""

    def __init__(self, module: cst.Module, start: int, end: int, offsets: list[int]) -> None:
        self.default_indent = module.default_indent
        self.start, self.end, self.offsets = start, end, offsets
        self.spans: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = {}
        self.compound: list[tuple[cst.CSTNode, tuple[str, ...]]] = []

    def place(self, stmt, node, indents: tuple[str, ...], first: int, last: int) -> None:
        """``stmt`` (CPython's ``node``) stands on the rows ``first``..``last``."""
        if not self.start <= first <= last + 1 <= self.end + 1:
            raise _Mismatch
        self.spans[id(stmt), indents] = (
            self.offsets[first - self.start],
            self.offsets[last + 1 - self.start],
        )
        if not type(stmt) is cst.SimpleStatementLine:
            self.compound.append((stmt, indents))
            self.clauses(stmt, node, indents, last)

    def block(self, body, nodes: list, indents: tuple[str, ...], last: int) -> None:
        """Place the statements of an indented block ending on row ``last``."""
        if not type(body) is cst.IndentedBlock:
            return  # a one-line body: no statement in it has a span of its own
        inner = (*indents, self.default_indent if body.indent is None else body.indent)
        stmts, k, firsts = body.body, 0, []
        for stmt in stmts:
            n = len(stmt.body) if type(stmt) is cst.SimpleStatementLine else 1
            if k + n > len(nodes) or not _pairs(stmt, nodes[k]):
                raise _Mismatch
            firsts.append((_code_row(nodes[k]) - len(stmt.leading_lines), nodes[k]))
            k += n
        if k != len(nodes) or not stmts:
            raise _Mismatch
        for i, stmt in enumerate(stmts):
            first, node = firsts[i]
            end = firsts[i + 1][0] - 1 if i + 1 < len(stmts) else last - len(body.footer)
            self.place(stmt, node, inner, first, end)

    def clauses(self, stmt, node, indents: tuple[str, ...], last: int) -> None:
        """Place the statements of every block of a compound statement ending on ``last``."""
        if type(stmt) is cst.If and type(stmt.orelse) is cst.If:
            # elif: CPython's orelse is that one if
            if len(node.orelse) != 1 or not isinstance(node.orelse[0], ast.If):
                raise _Mismatch
            self.block(
                stmt.body,
                node.body,
                indents,
                node.orelse[0].lineno - len(stmt.orelse.leading_lines) - 1,
            )
            self.clauses(stmt.orelse, node.orelse[0], indents, last)
            return
        parts: list[tuple] = [(stmt.body, node.body)]  # (block, CPython's statements)
        starts: list[int] = []  # the first row of each part after the first
        if type(stmt) is cst.Try:
            if len(stmt.handlers) != len(node.handlers):
                raise _Mismatch
            for handler, theirs in zip(stmt.handlers, node.handlers):
                parts.append((handler.body, theirs.body))
                starts.append(theirs.lineno - len(handler.leading_lines))
        for clause, theirs in _else_clauses(stmt, node):
            if clause is not None:
                parts.append((clause.body, theirs))
                starts.append(_clause_start(clause, theirs))
        for i, (body, nodes) in enumerate(parts):
            self.block(body, nodes, indents, starts[i] - 1 if i < len(starts) else last)


def _else_clauses(stmt, node) -> tuple:
    """The ``else:`` (and ``finally:``) clauses of compound statement ``stmt``, with
    CPython's statements of each; raises ``_Mismatch`` for a statement not placed by rows
    (``match``, ``try``/``except*``: rendered)."""
    if type(stmt) is cst.Try:
        return ((stmt.orelse, node.orelse), (stmt.finalbody, node.finalbody))
    if type(stmt) in (cst.If, cst.For, cst.While):
        return ((stmt.orelse, node.orelse),)
    if type(stmt) in (cst.FunctionDef, cst.ClassDef, cst.With):
        return ()
    raise _Mismatch


def _clause_start(clause, nodes: list) -> int:
    """The first row of an ``else:``/``finally:`` clause (CPython has no row for it: the row
    above the first row of its body's first statement, less the comment lines above it)."""
    body = clause.body
    if not type(body) is cst.IndentedBlock or not body.body or not nodes:
        raise _Mismatch
    keyword = _code_row(nodes[0]) - len(body.body[0].leading_lines) - 1
    return keyword - len(clause.leading_lines)


#: libcst statement type -> CPython statement types it pairs with
_PAIRS: dict[type, tuple[type, ...]] = {
    cst.ClassDef: (ast.ClassDef,),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.Try: (ast.Try,),
    cst.With: (ast.With, ast.AsyncWith),
}


def _pairs(stmt: cst.CSTNode, node: ast.stmt) -> bool:
    if type(stmt) is cst.SimpleStatementLine:
        return not isinstance(node, _COMPOUND_AST)
    kinds = _PAIRS.get(type(stmt))
    return kinds is not None and isinstance(node, kinds)


_COMPOUND_AST = tuple(
    t
    for t in (
        *{k for kinds in _PAIRS.values() for k in kinds},
        getattr(ast, "Match", None),
        getattr(ast, "TryStar", None),
    )
    if t is not None
)


def _code_row(node: ast.stmt) -> int:
    """A statement's first row: its first decorator's, if it has any."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


#: ``__metalint_piece_<i>__`` marker statements, made once (nodes are immutable: a shell
#: holds the same ones every time)
_MARKERS: list[cst.SimpleStatementLine] = []


def _markers(n: int) -> list[cst.SimpleStatementLine]:
    while len(_MARKERS) < n:
        name = f"__metalint_piece_{len(_MARKERS)}__"
        _MARKERS.append(cst.SimpleStatementLine([cst.Expr(cst.Name(name))]))
    return _MARKERS[:n]


def class_text(ctx: RuleContext, top: cst.ClassDef, source: str | None = None) -> ClassText:
    """``top``'s :class:`ClassText`, made on the first fix of a finding in it: cut from
    ``source`` (the text ``ctx.module`` was parsed from) when CPython's tree of it is at hand
    (``ctx.tree``), else rendered."""
    texts = ctx.memo.setdefault(ClassText, {})
    if id(top) not in texts:
        cut = None
        if ctx.tree is not None and source is not None:
            lines = ctx.memo.get(split_lines)
            if lines is None or lines[0] is not source:
                lines = ctx.memo[split_lines] = (source, split_lines(source, keepends=True))
            cut = _cut_from_source(ctx.module, top, ctx.tree, lines[1])
        texts[id(top)] = ClassText(ctx.module, top, cut)
    return texts[id(top)]


def fix_for(
    code: str, ctx: RuleContext, finding: Finding, row: int, source: str | None = None
) -> Fix | None:
    """A :class:`Fix` for the finding reported at line ``row``, or None when no codemod can
    rewrite it. Only the top-level class is rendered (not the whole file), once for all its
    findings; of each rewrite only what it changes."""
    result = plan(code, ctx, finding)
    if not isinstance(result, Rewrite):
        if isinstance(result, str):
            _remember(ctx.path, code, row, result)
        return None
    fix = _fix_of(code, ctx, finding, row, source, result)
    if fix is not None and result.over_base_hook is not None:
        alternative = _fix_of(code, ctx, finding, row, source, result.over_base_hook)
        if alternative is not None:
            fix = dataclasses.replace(fix, over_base_hook=alternative)
    return fix


def _fix_of(
    code: str, ctx: RuleContext, finding: Finding, row: int, source: str | None, result: Rewrite
) -> Fix | None:
    try:
        pair = class_rewrite(ctx, finding, result)
        if pair is None:
            _remember(
                ctx.path,
                code,
                row,
                f"`{finding.cls.name}` is defined in a loop or a function: only a class at the "
                "top level of its module, or in a `try`/`if`/`with` block there, is rewritten",
            )
            return None
        top, new_top = pair
        texts = class_text(ctx, top, source)
        old = texts.text
        new, probe = texts.made(new_top)
        if new == old:
            _remember(ctx.path, code, row, "the rewrite changes nothing")
            return None
        parsed = ctx.memo.setdefault(ast.parse, set())  # rewrites of a class often agree
        if new not in parsed:
            _must_parse(new, probe)
            parsed.add(new)
        shift = _first_row(texts, source, row, ctx, top, finding) - 1
    except Exception as exc:
        _remember(ctx.path, code, row, f"the rewrite failed: {type(exc).__name__}: {exc}")
        return None
    edits = texts.edits(new, shift)
    return Fix(
        result.applicability, result.message, edits, result.hook, result.then_hook, kept=result.kept
    )
