"""Leave out of the libcst parse what no rule reads, keeping every line where it was.

libcst's parse is most of a cold check (it builds a Python object for every token). About half
of a model file is code no rule reads: ``forward`` methods (what runs after construction; the
fact collector skips them), methods and functions nothing kept calls, and module-level
statements other than imports, classes and functions (timm's ``default_cfgs`` tables).
CPython's own parser finds them in a fraction of the time; each is replaced by one string
literal that spans exactly its lines (a function keeps its name: ``def forward():`` heads it),
so every line and column the rules report, and every line a fix edits, is the one in the real
file.

A string's lines carry their own line number (``#12``), so no two elided lines are equal and a
line diff of a class before and after a rewrite (see :mod:`metalint.fix.registry`) never aligns
a new line with an elided one: a fix computed on the elided text edits only real lines.
"""

from __future__ import annotations

import ast
import re

from metalint.lines import split_lines
from metalint.vocabulary import APPLY_METHOD, SKIPPED_METHOD_PREFIXES

_KEEP_AT_MODULE_LEVEL = (
    ast.Import,
    ast.ImportFrom,
    ast.ClassDef,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith)
if hasattr(ast, "TryStar"):
    _COMPOUND = (*_COMPOUND, ast.TryStar)
if hasattr(ast, "Match"):
    _COMPOUND = (*_COMPOUND, ast.Match)


def elide(source: str, tree: ast.Module, hooks: tuple[str, ...] = ()) -> str:
    """``source`` with the spans no rule reads replaced by line-preserving string literals
    (``source`` itself when there is nothing worth leaving out). ``hooks``: the configured
    init hooks, whose bodies are always read."""
    lines, spans, _ = _unread(source, tree, hooks)
    if not spans:
        return source
    for first, last, *rest in spans:
        indent = _indent(lines[first - 1])
        for row in range(first, last + 1):
            text = lines[row - 1]
            ending = text[len(text.rstrip("\r\n")) :] or "\n"
            head = f'{indent}{rest[0] if rest else ""}"""' if row == first else ""
            tail = '"""' if row == last else ""
            lines[row - 1] = f"{head}#{row}{tail}{ending}"
    return "".join(lines)


def unread_functions(source: str, tree: ast.Module, hooks: tuple[str, ...] = ()) -> set[str]:
    """The module-level functions whose bodies :func:`elide` leaves out: an analysis of the
    whole text summarises none of them either, so both give one result."""
    return _unread(source, tree, hooks)[2]


def _unread(source: str, tree: ast.Module, hooks: tuple[str, ...]) -> tuple[list, list, set]:
    lines = split_lines(source, keepends=True)
    spans: list[tuple] = []  # (first, last[, head]): rows, 1-based, inclusive
    _module_level(tree.body, lines, spans)
    classes = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            _class(node, lines, spans, classes)
    unreached = _methods(classes, lines, spans, hooks)
    functions = _functions(tree.body, lines, spans)
    # after both: what these name still keeps a method or a function, as before
    spans.extend(unreached)
    for cls in classes:
        _class_statements(cls.body, lines, spans)
    return lines, spans, functions


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t\f"))]


def _starts_line(node: ast.stmt, lines: list[str]) -> bool:
    """Whether only indentation stands before ``node`` on its first line."""
    return not lines[node.lineno - 1].encode("utf-8")[: node.col_offset].strip()


def _def_span(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
) -> tuple[int, int, str] | None:
    """The rows of a whole function, decorators and signature included, and the head that
    keeps its name (``def name():`` before the string). A function no rule reads still names
    a method of its class (class summaries list them) or a function of its module; its
    parameters, annotations and decorators are no rule's business (transformers' ``forward``
    signatures alone were 6% of the text of that tree left to parse)."""
    first = _first_row(fn)
    last = fn.end_lineno
    if last is None or last == first or lines[first - 1].lstrip()[:1] not in ("@", "d", "a"):
        return None
    return first, last, f"def {fn.name}(): "


def _first_row(node: ast.stmt) -> int:
    """A statement's first row: its first decorator's, if it has any."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


class _Rows:
    """Rows left out of the text whose words tell what kept code names: those already elided
    (``spans``) and those of the definitions being decided."""

    def __init__(self, lines: list[str], spans: list) -> None:
        self.lines = lines
        self.out = bytearray(len(lines) + 2)
        for first, last, *_ in spans:
            self.leave_out(first, last)

    def leave_out(self, first: int, last: int) -> None:
        self.out[first : last + 1] = b"\x01" * (last + 1 - first)

    def words_of_the_rest(self) -> set[str]:
        return _words("".join(line for row, line in enumerate(self.lines, 1) if not self.out[row]))


#: bytes -> themselves for ASCII letters, digits, ``_`` and every non-ASCII byte, else a space
_WORD_BYTES = bytes(
    c if chr(c).isalnum() and c < 128 or c == 95 or c >= 128 else 32 for c in range(256)
)


def _words(text: str) -> set[str]:
    """The identifiers of ``text`` (and, read off the text, words of its strings and
    comments, and numbers: they can only keep a function that could have been left out).
    Four times as fast as a regular expression: the text's bytes are translated, not matched.
    An identifier in code always stands between ASCII characters that are not part of one."""
    data = text.encode("utf-8", "surrogatepass").translate(_WORD_BYTES)
    return set(data.decode("utf-8", "surrogatepass").split())


def _functions(body: list[ast.stmt], lines: list[str], spans: list) -> set[str]:
    """Bodies of module-level functions no kept code can reach. Rules read a function's body
    when construction calls it by name (a helper), when it only calls ``reset_parameters()``
    (an applied per-module reset) or when it returns such a function by mode (an init factory,
    maybe applied from another file); the rest (timm's ``@register_model`` factories,
    checkpoint filters) is left out. Names are the words of the text (faster than walking
    CPython's tree, and never fewer)."""
    defs = [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return set()
    functions = {n.name: n for n in defs}
    rows = _Rows(lines, spans)
    texts: dict[str, str] = {}
    for fn in defs:
        rows.leave_out(_first_row(fn), fn.end_lineno)
        texts[fn.name] = "".join(lines[fn.lineno - 1 : fn.end_lineno])
    referenced = rows.words_of_the_rest()
    # an applied per-module reset, or a helper looping over its argument's modules (timm's
    # ``efficientnet_init_weights(model)``, called from another file)
    resets = {
        name for name, text in texts.items() if "reset_parameters" in text or "modules(" in text
    }
    keep = {name for name in functions if name in referenced or name in resets}
    if resets:
        keep |= {name for name, text in texts.items() if not resets.isdisjoint(_words(text))}
    # a helper another file's hook may hand a tensor to (PyG's ``glorot(value)``:
    # ``value.data.uniform_(...)``), and the functions that hand it on (``zeros`` -> ``constant``)
    # (short ones: an optimiser's 200-line ``_multi_tensor_adamw`` is nobody's init helper)
    short = {n for n, fn in functions.items() if fn.end_lineno - fn.lineno <= HELPER_LINES}
    # (or that reads a tensor's value: construction may call it from another file, ML008)
    # (or that returns a tensor made by a torch factory: ``steps(n).tolist()`` in another file)
    writers = {
        name
        for name in short
        if _INPLACE_CALL.search(texts[name])
        or HOST_READ.search(texts[name])
        or REPARAMETRIZE.search(texts[name])
        or (_RETURNS.search(texts[name]) and _FACTORY.search(texts[name]))
    }
    while True:
        more = {n for n in short - writers if writers & _words(texts[n])}
        if not more:
            break
        writers |= more
    keep |= writers
    # (or that registers buffers on its argument under names it is given, ML002)
    keep |= {n for n in short if "register_buffer(" in texts[n]}
    todo = list(keep)
    while todo:  # what a kept function calls is kept too
        for name in _words(texts[todo.pop()]) & functions.keys() - keep:
            keep.add(name)
            todo.append(name)
    unread = set()
    for fn in defs:
        if fn.name not in keep and (span := _def_span(fn, lines)) is not None:
            spans.append(span)
            unread.add(fn.name)
    return unread


_RETURNS = re.compile(r"\breturn\b")
#: a torch factory called by name (see :func:`metalint.static.ownership.meta_returning_functions`)
_FACTORY = re.compile(
    r"\btorch\.(?:linspace|logspace|arange|tensor|as_tensor|ones|zeros|full|rand|randn|randint"
    r"|randperm|eye|empty)\("
)

#: the longest module-level function read as an init helper another file may call
HELPER_LINES = 40
#: a call of an in-place method or function (``t.uniform_(``, ``nn.init.zeros_(``)
_INPLACE_CALL = re.compile(r"[A-Za-z0-9]_\(")
#: a read of a tensor's value (``.item()``, ``.tolist()``, ``.numpy()``, ``assert t``, ML008)
#: or a copy of it to a real device (``.cpu()``, ``.cuda()``, ML009; not ``.to(...)``, too
#: common to follow)
HOST_READ = re.compile(r"\.(?:item|tolist|numpy|cpu|cuda)\(|\bassert\b")
#: a call that re-parametrises a layer's weight (``weight_norm(nn.Conv1d(...))``, ML014): a
#: helper doing it may be called from another file's construction (DAC's ``WNConv1d``)
REPARAMETRIZE = re.compile(r"\b(?:weight_norm|spectral_norm|orthogonal|register_parametrization)\(")


def _module_level(body: list[ast.stmt], lines: list[str], spans: list) -> None:
    for i, node in enumerate(body):
        if isinstance(node, (*_KEEP_AT_MODULE_LEVEL, *_COMPOUND)):
            continue  # compound statements may hold imports and classes (``if TYPE_CHECKING:``)
        if node.end_lineno - node.lineno < 2:
            continue  # a short statement costs less to parse than to leave out
        if _class_table(node) or _partial(node):
            continue  # ``ATTENTION_CLASSES = {"eager": Attention, ...}``: construction picks from it
        alone = (i == 0 or body[i - 1].end_lineno < node.lineno) and (
            i + 1 == len(body) or body[i + 1].lineno > node.end_lineno
        )
        if alone and _starts_line(node, lines):
            spans.append((node.lineno, node.end_lineno))


def _partial(node: ast.stmt) -> bool:
    """``LinearNoBias = partial(nn.Linear, bias=False)`` over several lines: a call of the name
    builds the class (:func:`metalint.static.names.partial_class`)."""
    value = node.value if isinstance(node, ast.Assign) else None
    func = value.func if isinstance(value, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "partial") or (
        isinstance(func, ast.Attribute) and func.attr == "partial"
    )


def _class_table(node: ast.stmt) -> bool:
    """A module-level dict, list or tuple of names (``{"eager": Attention, "sdpa": Sdpa}``):
    a call through it builds one of the classes it names."""
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if isinstance(value, ast.Dict):
        items = value.values
    elif isinstance(value, (ast.List, ast.Tuple)):
        items = value.elts
    else:
        return False
    return bool(items) and all(isinstance(v, (ast.Name, ast.Attribute)) for v in items)


def _class(node: ast.ClassDef, lines: list[str], spans: list, classes: list) -> None:
    classes.append(node)
    for item in node.body:
        if isinstance(item, ast.ClassDef):
            _class(item, lines, spans, classes)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith(
            SKIPPED_METHOD_PREFIXES
        ):
            if (span := _def_span(item, lines)) is not None:
                spans.append(span)


def _class_statements(body: list[ast.stmt], lines: list[str], spans: list) -> None:
    """Runs of class-level statements the fact collector passes by (of a class body it reads
    the definitions and imports only): transformers' ``ModelOutput`` fields and config
    attributes, ``_no_split_modules`` lists. A run is left out when it spans two rows or
    more (a short one costs less to parse than to leave out). A docstring, an import, a
    compound statement (it may hold a class or an import) and a statement naming ``_apply``
    (``_apply = move_states``: a rule reads it) stay."""
    run: list[ast.stmt] = []
    for i, item in enumerate(body):
        if _unread_class_statement(body, i, lines):
            run.append(item)
            continue
        _leave_out_run(run, spans)
        run = []
    _leave_out_run(run, spans)


def _unread_class_statement(body: list[ast.stmt], i: int, lines: list[str]) -> bool:
    item = body[i]
    if isinstance(item, (*_KEEP_AT_MODULE_LEVEL, *_COMPOUND)) or (
        i == 0 and isinstance(item, ast.Expr)
    ):
        return False
    alone = (i == 0 or body[i - 1].end_lineno < item.lineno) and (
        i + 1 == len(body) or _first_row(body[i + 1]) > item.end_lineno
    )
    return (
        alone
        and _starts_line(item, lines)
        and APPLY_METHOD not in _words("".join(lines[item.lineno - 1 : item.end_lineno]))
    )


def _leave_out_run(run: list[ast.stmt], spans: list) -> None:
    if run and run[-1].end_lineno > run[0].lineno:
        spans.append((run[0].lineno, run[-1].end_lineno))


#: methods read by name (init hooks, ``tie_weights``, ``_reset_parameters``, ``__init__`` ...)
_READ_BY_NAME = re.compile(r"init|reset|tie|weight|param|buffer|^__new__$|^_apply$")
#: what rules read in any method of a class, not only in those construction reaches: attribute
#: writes (``self.x = ...``, ``setattr``), registrations, applied functions, nested definitions,
#: imports (a name imported anywhere in a file is one of its names)
_READ_ANYWHERE = re.compile(
    r"\b(?:setattr|register_\w+|add_module|apply|class|def|lambda|global|nonlocal)\b"
    r"|^[ \t]*(?:import|from)[ \t]",
    re.M,
)
#: a line assigning to ``self`` or to something of it (``self`` before the line's first ``=``)
_SELF_WRITE = re.compile(r"[ \t]*[^#=\n]*\bself\b[^=\n]*(?<![=!<>])=(?!=)")
#: a call of a method on ``self`` (``self.name(``)
_SELF_CALL = re.compile(r"\bself\s*\.\s*(\w+)\s*\(")


def _read_anywhere(body: str) -> bool:
    if _READ_ANYWHERE.search(body):
        return True
    # line by line, and only lines with both: the pattern is slow on every line of a body
    return "self" in body and any(
        "self" in line and "=" in line and _SELF_WRITE.match(line) for line in body.split("\n")
    )


def _methods(
    classes: list[ast.ClassDef], lines: list[str], spans: list, hooks: tuple[str, ...]
) -> list:
    """Methods no kept code calls and no rule reads: timm's ``get_classifier``,
    ``load_pretrained``, ``no_weight_decay``, an optimizer's ``step``. Rules read the methods
    construction reaches (a method is reached by name: its name is a word of the kept text),
    the init hooks, and, in every method, writes to ``self`` and the calls that register
    tensors or apply functions; a method whose text has none of those and that nothing
    calls is left out, and so are the module-level helpers only it called (see
    :func:`_functions`).

    Rules follow calls (``ClassFacts.reachable``) only from ``__init__``, the hooks, the
    methods read by name and the public ones (a root's entry point): a private method kept
    for what it writes that none of those reaches does not keep what it calls (transformers'
    ``Trainer._inner_training_loop`` and its callees). A method calling another of its
    class's methods stays when that one is reached or not a candidate (the number of call
    sites of a method construction runs tells what arguments it sees in a default build), or
    when it is public. What only these refinements leave out is returned, to be left out
    once :func:`_functions` has decided from the text kept before."""
    rows = _Rows(lines, spans)
    # (name, span, text, body, methods of its class, those of them no candidate)
    candidates: list[tuple] = []
    for cls in classes:
        own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found = [f for item in cls.body if (f := _candidate(item, lines, hooks)) is not None]
        fixed = own - {f[0] for f in found}
        for name, span, text, body, end in found:
            candidates.append((name, span, text, body, own, fixed))
            rows.leave_out(span[0], end)
    if not candidates:
        return []
    referenced = rows.words_of_the_rest() & {c[0] for c in candidates}
    reads = _Reads(candidates)
    before = _kept(candidates, set(referenced), reads, refined=False)
    kept = _kept(candidates, referenced, reads, refined=True)
    spans.extend(c[1] for i, c in enumerate(candidates) if i not in before)
    return [c[1] for i, c in enumerate(candidates) if i in before and i not in kept]


def _kept(candidates: list, reached: set[str], reads: _Reads, refined: bool) -> set[int]:
    """Indexes of the candidates kept: named by kept code (``reached``, grown as kept
    methods pass on what they name) or read wherever they are (:class:`_Reads`). With
    ``refined``, only a reached or public method passes on what it names."""
    names = {c[0] for c in candidates}
    kept: set[int] = set()
    passed: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, (name, _, text, *_rest) in enumerate(candidates):
            if i not in kept and (name in reached or reads.read(i, reached if refined else None)):
                kept.add(i)
                changed = True
            if (
                i in kept
                and i not in passed
                and (name in reached or not refined or not name.startswith("_"))
            ):
                passed.add(i)
                changed = True
                reached |= _words(text) & names  # what such a method names is kept too
    return kept


class _Reads:
    """What rules read in a method wherever it is (checked only of those nothing calls:
    most are called), once per method."""

    def __init__(self, candidates: list) -> None:
        self.candidates = candidates
        self.anywhere: dict[int, bool] = {}
        self.calls: dict[int, set[str]] = {}

    def read(self, i: int, reached: set[str] | None) -> bool:
        """Does a rule read method ``i`` wherever it is? ``reached``: the names construction,
        a hook or an entry point may run (None: any call of an own method counts)."""
        name, _, _, body, own, fixed = self.candidates[i]
        if i not in self.anywhere:
            self.anywhere[i] = _read_anywhere(body)
            self.calls[i] = {m.group(1) for m in _SELF_CALL.finditer(body)} & own
        if self.anywhere[i]:
            return True
        calls = self.calls[i]
        if reached is None or not name.startswith("_"):
            return bool(calls)
        return not calls.isdisjoint(reached) or not calls.isdisjoint(fixed)


def _candidate(item: ast.stmt, lines: list[str], hooks: tuple[str, ...]):
    """(name, span, text, body, last row) of a method that could be left out: not a hook, not read by
    its name, with a body on rows of its own; else None."""
    if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    name = item.name
    if name in hooks or name.startswith(SKIPPED_METHOD_PREFIXES) or _READ_BY_NAME.search(name):
        return None
    span = _def_span(item, lines)
    start = _first_row(item.body[0])
    if span is None or start == item.lineno:
        return None
    text = "".join(lines[span[0] - 1 : item.end_lineno])
    body = "".join(lines[start - 1 : item.end_lineno])
    return name, span, text, body, item.end_lineno
