"""``metalint check --add-noqa``: add ``# noqa: MLxxx`` to the line of each finding, as
``ruff check --add-noqa`` does, changing nothing else in the file.

A finding is suppressed by a ``# noqa`` on its first line (see ``metalint.static.engine``),
so that is where the comment goes: after the code (two spaces, then ``# noqa: CODES``), after
an existing comment (``x = 1  # keep  # noqa: ML001``), or merged into an existing
``# noqa: CODES`` (``# noqa: F401, ML001``). A line that does not end in code (it continues
with a backslash, or a string spans its end) cannot hold a comment there: it is reported and
left alone. Input errors (``ML9xx``), ``ML100`` (unused ``# noqa``) and the probe's findings
get none. Each file is written atomically, only if it still has the bytes that were read, and
only if the result compiles.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

from metalint.diagnostics import Diagnostic
from metalint.fix.write import ChangedOnDisk, NotPython, digest, write_atomic
from metalint.lines import source_encoding, split_lines
from metalint.report import is_error
from metalint.static.engine import NOQA

#: findings that get no noqa comment: it would hide nothing or the wrong thing
NEVER = {"ML100"}


def wanted(diagnostics: Iterable[Diagnostic]) -> dict[str, dict[int, set[str]]]:
    """file -> row -> the codes to add there."""
    out: dict[str, dict[int, set[str]]] = {}
    for d in diagnostics:
        if is_error(d.code) or d.code in NEVER or not d.code.startswith("ML"):
            continue
        out.setdefault(d.filename, {}).setdefault(d.start.row, set()).add(d.code)
    return out


def add_to_source(text: str, rows: dict[int, set[str]]) -> tuple[str, int, list[int]]:
    """``text`` with the codes of ``rows`` added to those lines' ``# noqa``; how many lines
    got a new or longer comment, and the rows that cannot hold one."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text, newline="").readline))
    ends = {t.start[0] for t in tokens if t.type in (tokenize.NEWLINE, tokenize.NL)}
    comments = {t.start[0]: t for t in tokens if t.type == tokenize.COMMENT}
    lines = split_lines(text, keepends=True)
    added, refused = 0, []
    for row, codes in sorted(rows.items()):
        if row not in ends or row > len(lines):
            refused.append(row)
            continue
        line = lines[row - 1]
        body = line.rstrip("\r\n")
        eol = line[len(body) :]
        comment = comments.get(row)
        m = NOQA.search(comment.string) if comment else None
        if m is not None and m.group("codes") is None:
            continue  # a bare noqa comment already suppresses everything
        if m is not None:
            present = {c.upper() for c in re.split(r"[,\s]+", m.group("codes")) if c}
            new = sorted(codes - present)
            if not new:
                continue
            at = comment.start[1] + m.end("codes")
            body = body[:at] + ", " + ", ".join(new) + body[at:]
        else:
            body = body.rstrip(" \t") + "  # noqa: " + ", ".join(sorted(codes))
        lines[row - 1] = body + eol
        added += 1
    return "".join(lines), added, refused


def add_noqa(diagnostics: Iterable[Diagnostic], checked: set[str]) -> tuple[int, list[str]]:
    """Add the comments to the files; how many were added, and one line per row or file that
    could not get one. ``checked``: the files of this run, as shown; a finding that names
    another path (a stale cache entry) writes nothing."""
    total, problems = 0, []
    for filename, rows in sorted(wanted(diagnostics).items()):
        if filename not in checked:
            problems.append(f"{filename}: no `# noqa` added: not a file of this run")
            continue
        path = Path(filename)
        try:
            data = path.read_bytes()
            encoding = source_encoding(data)
            text = data.decode(encoding)
            if text.encode(encoding) != data:
                raise UnicodeError(f"bytes that are not valid {encoding}")
            new, added, refused = add_to_source(text, rows)
        except (OSError, SyntaxError, LookupError, UnicodeError, tokenize.TokenError) as exc:
            why = getattr(exc, "strerror", None) or exc
            problems.append(f"{filename}: no `# noqa` added: {why}")
            continue
        for row in refused:
            problems.append(
                f"{filename}:{row}: no `# noqa` added: the line continues "
                "(a backslash or a string spans its end)"
            )
        if not added:
            continue
        try:
            write_atomic(path, new.encode(encoding), digest(data))
        except (ChangedOnDisk, NotPython, OSError) as exc:
            why = getattr(exc, "strerror", None) or exc
            problems.append(f"{filename}: no `# noqa` added: {why}")
            continue
        total += added
    return total, problems
