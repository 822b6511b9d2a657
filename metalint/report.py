"""Reporters shared by ``check``, ``probe`` and ``fix``.

``render(diagnostics, fmt, ...)`` returns the whole output as a string. ``errors`` are
diagnostics about input that could not be checked (code ``E902`` style, see
:data:`ERROR_CODE`); they are reported in every format and make the exit code 2.

Formats, with ruff's names: ``full`` (one line per finding, its ``= help:`` line, a summary;
``text`` is the same), ``concise`` (one line per finding, a summary), ``grouped`` (findings
under their file), ``json``, ``json-lines`` (one JSON object per line), ``github`` (workflow
annotations), ``gitlab`` (a GitLab Code Quality report) and ``sarif`` (SARIF 2.1.0). Only the
first four (:data:`TEXT_FORMATS`) are for people: they alone get colour and a summary.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

from metalint import __version__
from metalint.codes import (  # noqa: F401 (ERROR_CODE, is_error: the reporters' names too)
    CRASH_CODE,
    DOCS_URL,
    ERROR_CODE,
    ERROR_CODES,
    TOO_COMPLEX_CODE,
    RuleInfo,
    code_page,
    describe_code,
    is_error,
)
from metalint.diagnostics import Diagnostic
from metalint.lines import source_encoding, split_lines

FORMATS = (
    "text",
    "full",
    "concise",
    "grouped",
    "json",
    "json-lines",
    "github",
    "gitlab",
    "sarif",
)
#: the formats a person reads: colour, progress and the summary lines are theirs alone
TEXT_FORMATS = ("text", "full", "concise", "grouped")

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: the ``partialFingerprints`` key of a result (bump the version when the hash changes)
FINGERPRINT_KEY = "metalintFingerprint/v1"


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: d.sort_key)


def render(
    diagnostics: Sequence[Diagnostic],
    fmt: str = "text",
    *,
    statistics: bool = False,
    describe: Callable[[str], RuleInfo | None] | None = None,
    files_checked: int | None = None,
    quiet: bool = False,
    color: bool = False,
    fixed: int | None = None,
    fixes: Sequence[Diagnostic] | None = None,
    root: Path | None = None,
    sources: dict[str, str] | None = None,
    page: Callable[[str], str | None] | None = None,
) -> str:
    """``quiet``: the findings only, no summary; ``color``: ANSI colours (text formats only);
    ``fixed``: how many findings ``check --fix`` fixed (the summary counts them); ``fixes``:
    the fixes it applied, listed per file and code (``--show-fixes``); ``root``:
    the project root that SARIF and GitLab paths are relative to (default: the working
    directory); ``sources``: the text of files not on disk (stdin), for fingerprints;
    ``page``: a code's reference page (markdown), for SARIF's rule help."""
    diagnostics = sort_diagnostics(diagnostics)
    describe = describe or describe_code
    if fmt in TEXT_FORMATS:
        paint = _paint if color else _plain
        lines = _findings(diagnostics, fmt, paint)
        if statistics and diagnostics:
            lines += _statistics(diagnostics, describe)
        if fixes:
            lines += _fix_listing(fixes, describe)
        if not quiet:
            lines += _summary(diagnostics, files_checked, fixed, paint)
        return "".join(line + "\n" for line in lines)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "json-lines":
        return "".join(json.dumps(d.to_json()) + "\n" for d in diagnostics)
    if fmt == "github":
        return _github(diagnostics)
    if fmt == "gitlab":
        return json.dumps(_gitlab(diagnostics, _Paths(root), sources), indent=2) + "\n"
    if fmt == "sarif":
        sarif = _sarif(diagnostics, describe, page or code_page, _Paths(root), sources)
        return json.dumps(sarif, indent=2) + "\n"
    raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")


#: ANSI styles of the text formats (ruff's: bold paths, red codes, cyan fix marks)
BOLD, RED, GREEN, CYAN = "1", "1;31", "32", "36"


def _paint(text: str, style: str) -> str:
    return f"\x1b[{style}m{text}\x1b[0m" if text else text


def _plain(text: str, style: str) -> str:
    return text


def _fixable_mark(d: Diagnostic, paint=_plain) -> str:
    if d.fix is None:
        return ""
    return " " + paint("[*]" if d.fix.applicability.value == "safe" else "[unsafe fix]", CYAN)


def _findings(diagnostics: list[Diagnostic], fmt: str, paint) -> list[str]:
    lines: list[str] = []
    last = None
    width = max((len(f"{d.start.row}:{d.start.column}") for d in diagnostics), default=0)
    for d in diagnostics:
        verdict = f" ({d.verdict} by probe)" if d.verdict else ""
        what = f"{paint(d.code, RED)} {d.message}{_fixable_mark(d, paint)}{verdict}"
        if fmt == "grouped":
            if d.filename != last:
                if last is not None:
                    lines.append("")
                lines.append(paint(d.filename, BOLD) + ":")
                last = d.filename
            lines.append(f"  {f'{d.start.row}:{d.start.column}':<{width}} {what}")
            continue
        lines.append(f"{paint(d.filename, BOLD)}:{d.start.row}:{d.start.column}: {what}")
        if d.help and fmt in ("text", "full"):
            lines.append(f"  {paint('= help:', CYAN)} {d.help}")
    if fmt == "grouped" and lines:
        lines.append("")
    return lines


def _statistics(diagnostics: list[Diagnostic], describe) -> list[str]:
    lines = [""]
    counts = Counter(d.code for d in diagnostics)
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        info = describe(code)
        name = info.name if info else ""
        lines.append(f"{n:>5}  {code}  {name}")
    return lines


def _fix_listing(fixes: Sequence[Diagnostic], describe) -> list[str]:
    """``Fixed N errors:`` then, per file, ``  2 × ML001 (parameter-from-value)``."""
    lines = ["", f"Fixed {_plural(len(fixes), 'error')}:"]
    per_file: dict[str, Counter[str]] = {}
    for d in fixes:
        per_file.setdefault(d.filename, Counter())[d.code] += 1
    for filename in sorted(per_file):
        lines.append(f"- {filename}:")
        for code, n in sorted(per_file[filename].items()):
            info = describe(code)
            lines.append(f"    {n} × {code}" + (f" ({info.name})" if info else ""))
    return lines + [""]


def _plural(n: int, word: str, many: str = "s") -> str:
    return f"{n} {word}{many if n != 1 else ''}"


def _summary(diagnostics: list[Diagnostic], files_checked, fixed, paint) -> list[str]:
    lines = []
    findings = [d for d in diagnostics if not is_error(d.code)]
    errors = len(diagnostics) - len(findings)
    fixable = sum(1 for d in findings if d.fix is not None)
    safe = sum(1 for d in findings if d.fix is not None and d.fix.applicability.value == "safe")
    if findings or fixed:
        total = len(findings) + (fixed or 0)
        summary = f"Found {_plural(total, 'error')}"
        if fixed is not None:
            summary += f" ({fixed} fixed, {len(findings)} remaining)"
        if files_checked is not None:
            summary += f" in {_plural(files_checked, 'file')} checked"
        summary += "."
        unsafe = fixable - safe
        hidden = f"{_plural(unsafe, 'unsafe fix', 'es')} with `--unsafe-fixes`"
        if safe:
            summary += f"\n{paint('[*]', CYAN)} {safe} fixable with `metalint fix --write`"
            summary += f" ({hidden})." if unsafe else "."
        elif unsafe:
            summary += f"\nNo safe fixes available ({hidden})."
        lines.append(summary)
    elif not errors:
        lines.append(paint("All checks passed!", GREEN))
    if errors:
        lines.append(f"{_plural(errors, 'file')} could not be checked.")
    return lines


def _with_help(d: Diagnostic) -> str:
    """The message and, on its own line, what to do (as the text format prints them)."""
    return d.message + (f"\n= help: {d.help}" if d.help else "")


def _gh_escape(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def _github(diagnostics) -> str:
    out = []
    for d in diagnostics:
        out.append(
            f"::error title={_gh_escape('metalint ' + d.code, True)},"
            f"file={_gh_escape(d.filename, True)},"
            f"line={d.start.row},col={d.start.column},"
            f"endLine={d.end.row},endColumn={d.end.column}"
            f"::{_gh_escape(d.code + ' ' + _with_help(d))}"
        )
    return "\n".join(out) + ("\n" if out else "")


class _Paths:
    """Where a reported file is for SARIF and GitLab: relative to the project root (posix,
    percent-encoded), or, outside the root, an absolute ``file://`` URI; never ``../x.py``."""

    def __init__(self, root: Path | None) -> None:
        self.root = os.path.realpath(root if root is not None else os.getcwd())

    def absolute(self, filename: str) -> str:
        return os.path.realpath(os.path.join(os.getcwd(), filename))

    def relative(self, filename: str) -> str | None:
        """``filename`` relative to the root (posix), None when it is outside."""
        path = self.absolute(filename)
        try:
            rel = os.path.relpath(path, self.root)
        except ValueError:  # another drive
            return None
        if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            return None
        return Path(rel).as_posix()

    def root_uri(self) -> str:
        return Path(self.root).as_uri().rstrip("/") + "/"

    def location(self, filename: str) -> dict:
        """A SARIF ``artifactLocation``."""
        rel = self.relative(filename)
        if rel is None:
            return {"uri": Path(self.absolute(filename)).as_uri()}
        return {"uri": quote(rel), "uriBaseId": SRCROOT}


SRCROOT = "%SRCROOT%"


def _normalised_line(filename: str, row: int, texts: dict[str, list[str]], sources) -> str:
    """The reported line with its whitespace collapsed ("" when the file cannot be read)."""
    if filename not in texts:
        text = (sources or {}).get(filename)
        if text is None:
            try:
                data = Path(filename).read_bytes()
                try:
                    encoding = source_encoding(data)
                except (SyntaxError, LookupError, ValueError):
                    encoding = "utf-8"
                text = data.decode(encoding, errors="replace")
            except (OSError, LookupError):
                text = ""
        texts[filename] = split_lines(text)
    lines = texts[filename]
    return " ".join(lines[row - 1].split()) if 0 < row <= len(lines) else ""


def fingerprints(
    diagnostics: Sequence[Diagnostic], paths: _Paths, sources: dict[str, str] | None = None
) -> list[str]:
    """A stable hash per finding: its code, its file (relative to the root), the text of its
    line with whitespace collapsed, its class and tensors, and how many identical ones come
    before it in the file; never the line number, so a finding keeps its fingerprint when
    code above it moves."""
    texts: dict[str, list[str]] = {}
    seen: Counter[str] = Counter()
    out = []
    for d in diagnostics:
        where = paths.relative(d.filename) or paths.absolute(d.filename)
        line = _normalised_line(d.filename, d.start.row, texts, sources)
        key = "\0".join((d.code, where, line, d.symbol or "", ",".join(d.subject)))
        seen[key] += 1
        h = hashlib.blake2b(f"{key}\0{seen[key]}".encode(), digest_size=16)
        out.append(h.hexdigest())
    return out


def _gitlab(diagnostics, paths: _Paths, sources) -> list[dict]:
    """A GitLab Code Quality report (``artifacts: reports: codequality``)."""
    out = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, paths, sources)):
        out.append(
            {
                "check_name": d.code,
                "description": f"{d.code}: {d.message}",
                "severity": "critical" if is_error(d.code) else "major",
                "fingerprint": fingerprint,
                "location": {
                    "path": paths.relative(d.filename) or paths.absolute(d.filename),
                    "positions": {
                        "begin": {"line": max(d.start.row, 1), "column": max(d.start.column, 1)},
                        "end": {"line": max(d.end.row, 1), "column": max(d.end.column, 1)},
                    },
                },
            }
        )
    return out


_SECTION = re.compile(r"^## (.+?)\s*$", re.M)


def _what_it_does(markdown: str | None) -> str | None:
    """The first paragraph of a reference page's ``What it does`` (``What it means``)."""
    if not markdown:
        return None
    parts = _SECTION.split(markdown)
    for title, body in zip(parts[1::2], parts[2::2]):
        if title.startswith("What it"):
            return " ".join(body.strip().split("\n\n")[0].split()) or None
    return None


def _sarif_rule(code: str, describe, page) -> dict:
    info = describe(code)
    summary = info.summary if info else code
    rule = {
        "id": code,
        "name": info.name if info else code,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": summary},
        "helpUri": DOCS_URL.format(code=code),
    }
    doc = page(code)
    if doc:
        rule["fullDescription"] = {"text": _what_it_does(doc) or summary}
        rule["help"] = {"text": doc, "markdown": doc}
    return rule


def _sarif(diagnostics, describe, page, paths: _Paths, sources) -> dict:
    codes = sorted({d.code for d in diagnostics})
    rules = [_sarif_rule(code, describe, page) for code in codes]
    index = {code: i for i, code in enumerate(codes)}
    results = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, paths, sources)):
        result = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": "error" if d.severity.value == "error" else "warning",
            "message": {"text": _with_help(d)},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": paths.location(d.filename),
                        "region": {
                            "startLine": max(d.start.row, 1),
                            "startColumn": max(d.start.column, 1),
                            "endLine": max(d.end.row, 1),
                            "endColumn": max(d.end.column, 1),
                        },
                    }
                }
            ],
            "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
        }
        if d.symbol:
            result["locations"][0]["logicalLocations"] = [
                {"fullyQualifiedName": d.symbol, "kind": "type"}
            ]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "metalint",
                        "version": __version__,
                        "informationUri": "https://github.com/metalint/metalint",
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": paths.root_uri()}},
                "results": results,
            }
        ],
    }


def exit_code(diagnostics: Iterable[Diagnostic], *, exit_zero: bool = False) -> int:
    """0: nothing found; 1: findings; 2: some input could not be checked (wins over 1)."""
    codes = {d.code for d in diagnostics}
    if codes & ERROR_CODES:
        return 2
    if codes and not exit_zero:
        return 1
    return 0
