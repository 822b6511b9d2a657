"""One line model: rows are what Python's tokenizer counts.

A line ends at ``\\n``, ``\\r\\n`` or ``\\r`` and nowhere else. ``str.splitlines()`` also splits
at ``\\x0b \\x0c \\x1c \\x1d \\x1e \\x85 U+2028 U+2029``, which may stand inside a string or a
comment: every row counted with it after such a character is off by one, and a fix would edit
the wrong line. Every row and column of metalint (positions, ``# noqa``, fixes, the cache)
comes from here or from CPython's own parser, and so does the encoding a file is read in (its
coding cookie is on line 1 or 2 as the tokenizer counts them).
"""

from __future__ import annotations

import re
import tokenize
from itertools import islice

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_BYTE_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """``text``'s lines as Python counts them (``str.splitlines`` with only ``\\n``,
    ``\\r\\n`` and ``\\r`` as line breaks)."""
    if "\r" not in text:  # only ``\n``: a plain split, three times as fast
        lines = text.split("\n")
        last = lines.pop()
        if keepends:
            lines = [line + "\n" for line in lines]
        if last:
            lines.append(last)
        return lines
    lines = _LINE.findall(text)
    if keepends:
        return lines
    return [line.rstrip("\r\n") for line in lines]


def count_breaks(text: str, start: int = 0, end: int | None = None) -> int:
    """How many line breaks stand in ``text[start:end]`` (``\\r\\n`` counts once)."""
    return len(_BREAK.findall(text, start, len(text) if end is None else end))


def source_encoding(data: bytes) -> str:
    """The encoding CPython reads ``data`` in: its BOM or the coding cookie of its first two
    lines, counted as the tokenizer counts them (``tokenize.detect_encoding`` on a file's
    ``readline`` ends a line at ``\\n`` only, so in a file whose lines end at ``\\r`` it takes
    the whole file for line 1). Raises ``SyntaxError`` as ``detect_encoding`` does."""
    lines = (m.group() for m in islice(_BYTE_LINE.finditer(data), 2))
    return tokenize.detect_encoding(lambda: next(lines, b""))[0]
