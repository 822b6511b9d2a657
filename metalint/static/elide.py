"""Leave out of the libcst parse what no rule reads, keeping every line where it was.

libcst's parse is most of a cold check (it builds a Python object for every token). About half
of a model file is code no rule reads: ``forward`` bodies (what runs after construction; the
fact collector skips them) and module-level statements other than imports, classes and
functions (timm's ``default_cfgs`` tables). CPython's own parser finds them in a fraction of
the time; each is replaced by one string literal that spans exactly its lines, so every line
and column the rules report, and every line a fix edits, is the one in the real file.

A string's lines carry their own line number (``#12``), so no two elided lines are equal and a
line diff of a class before and after a rewrite (see :mod:`metalint.fix.registry`) never aligns
a new line with an elided one: a fix computed on the elided text edits only real lines.
"""

from __future__ import annotations

import ast
import re

from metalint.static.model import SKIPPED_METHOD_PREFIXES

_KEEP_AT_MODULE_LEVEL = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith)
if hasattr(ast, "TryStar"):
    _COMPOUND = (*_COMPOUND, ast.TryStar)
if hasattr(ast, "Match"):
    _COMPOUND = (*_COMPOUND, ast.Match)


def elide(source: str, tree: ast.Module) -> str:
    """``source`` with the spans no rule reads replaced by line-preserving string literals
    (``source`` itself when there is nothing worth leaving out)."""
    lines = source.splitlines(keepends=True)
    spans: list[tuple[int, int]] = []  # 1-based, inclusive
    _module_level(tree.body, lines, spans)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            _class(node, lines, spans)
    _functions(tree.body, lines, spans)
    if not spans:
        return source
    for first, last in spans:
        indent = _indent(lines[first - 1])
        for row in range(first, last + 1):
            text = lines[row - 1]
            ending = text[len(text.rstrip("\r\n")):] or "\n"
            head = f'{indent}"""' if row == first else ""
            tail = '"""' if row == last else ""
            lines[row - 1] = f"{head}#{row}{tail}{ending}"
    return "".join(lines)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t\f"))]


def _starts_line(node: ast.stmt, lines: list[str]) -> bool:
    """Whether only indentation stands before ``node`` on its first line."""
    return not lines[node.lineno - 1].encode("utf-8")[: node.col_offset].strip()


def _body_span(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> tuple[int, int] | None:
    """The rows of a function's body, when it is on its own lines (not ``def f(x): return x``)
    and long enough to be worth leaving out."""
    head = fn.body[0]
    decorators = getattr(head, "decorator_list", None)
    if decorators:  # a nested ``@wraps(f) def wrapper``: its first row is its first decorator's
        first = min(d.lineno for d in decorators)
        starts = lines[first - 1].lstrip().startswith("@")
    else:
        first, starts = head.lineno, _starts_line(head, lines)
    last = fn.body[-1].end_lineno
    return (first, last) if starts and last - first >= 1 else None


#: an identifier; read off the text, it also finds words in strings and comments, which can
#: only keep a function that could have been left out
_WORD = re.compile(r"(?!\d)\w+")


def _functions(body: list[ast.stmt], lines: list[str], spans: list) -> None:
    """Bodies of module-level functions no kept code can reach. Rules read a function's body
    when construction calls it by name (a helper), when it only calls ``reset_parameters()``
    (an applied per-module reset) or when it returns such a function by mode (an init factory,
    maybe applied from another file); the rest (timm's ``@register_model`` factories,
    checkpoint filters) is left out. Names are the words of the text (faster than walking
    CPython's tree, and never fewer)."""
    defs = [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return
    functions = {n.name: n for n in defs}
    outside = bytearray(len(lines) + 2)  # rows of elided code and of the functions themselves
    for first, last in spans:
        outside[first : last + 1] = b"\x01" * (last + 1 - first)
    texts: dict[str, str] = {}
    for fn in defs:
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        outside[first : fn.end_lineno + 1] = b"\x01" * (fn.end_lineno + 1 - first)
        texts[fn.name] = "".join(lines[fn.lineno - 1 : fn.end_lineno])
    referenced = set(_WORD.findall("".join(line for row, line in enumerate(lines, 1) if not outside[row])))
    resets = {name for name, text in texts.items() if "reset_parameters" in text}
    keep = {name for name in functions if name in referenced or name in resets}
    keep |= {name for name, text in texts.items() if resets.intersection(_WORD.findall(text))}
    todo = list(keep)
    while todo:  # what a kept function calls is kept too
        for name in set(_WORD.findall(texts[todo.pop()])) & functions.keys() - keep:
            keep.add(name)
            todo.append(name)
    for name, fn in functions.items():
        if name not in keep and (span := _body_span(fn, lines)) is not None:
            spans.append(span)


def _module_level(body: list[ast.stmt], lines: list[str], spans: list) -> None:
    for i, node in enumerate(body):
        if isinstance(node, (*_KEEP_AT_MODULE_LEVEL, *_COMPOUND)):
            continue  # compound statements may hold imports and classes (``if TYPE_CHECKING:``)
        if node.end_lineno - node.lineno < 2:
            continue  # a short statement costs less to parse than to leave out
        alone = (i == 0 or body[i - 1].end_lineno < node.lineno) and (
            i + 1 == len(body) or body[i + 1].lineno > node.end_lineno
        )
        if alone and _starts_line(node, lines):
            spans.append((node.lineno, node.end_lineno))


def _class(node: ast.ClassDef, lines: list[str], spans: list) -> None:
    for item in node.body:
        if isinstance(item, ast.ClassDef):
            _class(item, lines, spans)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith(
            SKIPPED_METHOD_PREFIXES
        ):
            if (span := _body_span(item, lines)) is not None:
                spans.append(span)
