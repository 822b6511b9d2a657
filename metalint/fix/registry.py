"""Rule code -> codemod, and a codemod's rewrite -> :class:`~metalint.diagnostics.Fix`.

The static engine calls :func:`fix_for` for each finding (in the worker process, with the
syntax tree at hand), so ``check`` shows which findings ``fix`` can rewrite and how safely;
the cache stores the fix with the diagnostic. ``metalint fix`` re-analyses each file after every
round of rewrites, so the edits it applies always come from the current text.
"""

from __future__ import annotations

import ast
import difflib
import importlib
from types import ModuleType

import libcst as cst
from libcst._nodes.internal import CodegenState

from metalint.diagnostics import Edit, Fix, Position
from metalint.fix.codemod import Rewrite, Unfixable, path_to
from metalint.lines import count_breaks, split_lines
from metalint.rules import all_rules
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import code_ranges

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


def top_class(ctx: RuleContext, finding: Finding) -> cst.ClassDef | None:
    """The top-level class statement that holds the finding's class."""
    head = finding.cls.qualname.split(".")[0]
    for node in ctx.module.body:
        if isinstance(node, cst.ClassDef) and node.name.value == head:
            if node is finding.cls.node or path_to(node, finding.cls.node) is not None:
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
        else top.deep_replace(finding.cls.node, rewrite.new_class)
    )
    return top, new_top


def line_edits(old: str, new: str, shift: int = 0) -> tuple[Edit, ...]:
    """Minimal whole-line edits that turn ``old`` into ``new`` (rows shifted by ``shift``)."""
    a = split_lines(old, keepends=True)
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


def _first_row(source: str | None, old: str, row: int, module: cst.Module, top, finding) -> int:
    """The file row where the class text ``old`` starts (the occurrence holding ``row``)."""
    if source is not None:
        at = source.find(old)
        while at >= 0:
            first = count_breaks(source, 0, at) + 1
            if first <= row < first + count_breaks(old) + 1:
                return first
            at = source.find(old, at + 1)
    pos = code_ranges(module)
    return row - pos[finding.node].start.line + 1


#: the statement node types (a rendered statement's text is kept by id)
_STATEMENTS = frozenset(
    t
    for t in vars(cst).values()
    if isinstance(t, type) and issubclass(t, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
)


class _Pieces(CodegenState):
    """A rendering that also keeps where each statement starts and ends in its tokens, with
    the indentation it was rendered at."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module.default_indent, module.default_newline)
        self.spans: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        self.open: list[list[int]] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _STATEMENTS:
            span = [len(self.tokens), 0]
            self.spans[id(node), tuple(self.indent_tokens)] = span
            self.open.append(span)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _STATEMENTS:
            self.open.pop()[1] = len(self.tokens)


class ClassText:
    """A top-level class's text, rendered once, with where each of its statements (at any
    depth) is in it. A rewrite of the class (codemods build it with ``with_changes``: the
    statements they keep are the same objects) is rendered from those pieces: only its new
    statements are rendered, each compound one as a shell around its kept statements."""

    def __init__(self, module: cst.Module, top: cst.ClassDef) -> None:
        state = _Pieces(module)
        top._codegen(state)
        self.module = module
        self.top = top  # keeps the ids of ``spans`` alive
        self.tokens = state.tokens
        self.spans = state.spans
        self.text = "".join(self.tokens)

    def render(self, new: cst.ClassDef) -> str:
        """The text of ``new``, a rewrite of this class."""
        return self._statement(new, ())

    def _statement(self, stmt: cst.CSTNode, indents: tuple[str, ...]) -> str:
        span = self.spans.get((id(stmt), indents))
        if span is not None:
            return "".join(self.tokens[span[0] : span[1]])
        module = self.module
        state = CodegenState(module.default_indent, module.default_newline)
        state.indent_tokens = list(indents)
        body = getattr(stmt, "body", None)
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            stmt._codegen(state)
            return "".join(state.tokens)
        # the statement with a marker line for each statement of its body, then each marker
        # replaced by that statement's text
        inner = (*indents, module.default_indent if body.indent is None else body.indent)
        stmt.with_changes(body=body.with_changes(body=_markers(len(body.body))))._codegen(state)
        shell = "".join(state.tokens)
        out, at = [], 0
        for i, child in enumerate(body.body):
            line = f"{''.join(inner)}__metalint_piece_{i}__{module.default_newline}"
            found = shell.index(line, at)
            out += (shell[at:found], self._statement(child, inner))
            at = found + len(line)
        out.append(shell[at:])
        return "".join(out)


#: ``__metalint_piece_<i>__`` marker statements, made once (nodes are immutable: a shell
#: holds the same ones every time)
_MARKERS: list[cst.SimpleStatementLine] = []


def _markers(n: int) -> list[cst.SimpleStatementLine]:
    while len(_MARKERS) < n:
        name = f"__metalint_piece_{len(_MARKERS)}__"
        _MARKERS.append(cst.SimpleStatementLine([cst.Expr(cst.Name(name))]))
    return _MARKERS[:n]


def class_text(ctx: RuleContext, top: cst.ClassDef) -> ClassText:
    """``top``'s :class:`ClassText`, rendered on the first fix of a finding in it."""
    texts = ctx.memo.setdefault(ClassText, {})
    if id(top) not in texts:
        texts[id(top)] = ClassText(ctx.module, top)
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
    try:
        pair = class_rewrite(ctx, finding, result)
        if pair is None:
            return None
        top, new_top = pair
        texts = class_text(ctx, top)
        old = texts.text
        new = texts.render(new_top)
        if new == old:
            _remember(ctx.path, code, row, "the rewrite changes nothing")
            return None
        parsed = ctx.memo.setdefault(ast.parse, set())  # rewrites of a class often agree
        if new not in parsed:
            ast.parse(new)  # a codemod must never produce code that does not parse
            parsed.add(new)
        shift = _first_row(source, old, row, alone(ctx.module, top), top, finding) - 1
    except Exception as exc:
        _remember(ctx.path, code, row, f"the rewrite failed: {type(exc).__name__}: {exc}")
        return None
    return Fix(result.applicability, result.message, line_edits(old, new, shift), result.hook)
