"""Reporters shared by ``check``, ``probe`` and ``fix``: text, json, github, sarif.

``render(diagnostics, fmt, ...)`` returns the whole output as a string. ``errors`` are
diagnostics about input that could not be checked (code ``E902`` style, see
:data:`ERROR_CODE`); they are reported in every format and make the exit code 2.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from metalint import __version__
from metalint.codes import (  # noqa: F401 (ERROR_CODE, is_error: the reporters' names too)
    CRASH_CODE,
    DOCS_URL,
    ERROR_CODE,
    ERROR_CODES,
    TOO_COMPLEX_CODE,
    RuleInfo,
    describe_code,
    is_error,
)
from metalint.diagnostics import Diagnostic

FORMATS = ("text", "json", "github", "sarif")

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: d.sort_key)


def render(
    diagnostics: Sequence[Diagnostic],
    fmt: str = "text",
    *,
    statistics: bool = False,
    describe: Callable[[str], RuleInfo | None] | None = None,
    files_checked: int | None = None,
) -> str:
    diagnostics = sort_diagnostics(diagnostics)
    describe = describe or describe_code
    if fmt == "text":
        return _text(diagnostics, statistics, describe, files_checked)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "github":
        return _github(diagnostics)
    if fmt == "sarif":
        return json.dumps(_sarif(diagnostics, describe), indent=2) + "\n"
    raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _fixable_mark(d: Diagnostic) -> str:
    if d.fix is None:
        return ""
    return " [*]" if d.fix.applicability.value == "safe" else " [unsafe fix]"


def _text(diagnostics, statistics, describe, files_checked) -> str:
    lines = []
    for d in diagnostics:
        verdict = f" ({d.verdict} by probe)" if d.verdict else ""
        lines.append(
            f"{d.filename}:{d.start.row}:{d.start.column}: {d.code} {d.message}"
            f"{_fixable_mark(d)}{verdict}"
        )
        if d.help:
            lines.append(f"  = help: {d.help}")
    findings = [d for d in diagnostics if not is_error(d.code)]
    errors = len(diagnostics) - len(findings)
    if statistics and diagnostics:
        lines.append("")
        counts = Counter(d.code for d in diagnostics)
        for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            info = describe(code)
            name = info.name if info else ""
            lines.append(f"{n:>5}  {code}  {name}")
    fixable = sum(1 for d in findings if d.fix is not None)
    safe = sum(1 for d in findings if d.fix is not None and d.fix.applicability.value == "safe")
    if findings:
        summary = f"Found {len(findings)} error{'s' if len(findings) != 1 else ''}"
        if files_checked is not None:
            summary += f" in {files_checked} file{'s' if files_checked != 1 else ''} checked"
        summary += "."
        unsafe = fixable - safe
        hidden = f"{unsafe} unsafe fix{'es' if unsafe != 1 else ''} with `--unsafe-fixes`"
        if safe:
            summary += f"\n[*] {safe} fixable with `metalint fix --write`"
            summary += f" ({hidden})." if unsafe else "."
        elif unsafe:
            summary += f"\nNo safe fixes available ({hidden})."
        lines.append(summary)
    elif not errors:
        lines.append("All checks passed!")
    if errors:
        lines.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked.")
    return "\n".join(lines) + "\n"


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


def _uri(filename: str) -> str:
    from pathlib import PurePath

    return PurePath(filename).as_posix()


def _sarif(diagnostics, describe) -> dict:
    codes = sorted({d.code for d in diagnostics})
    rules = []
    index = {}
    for i, code in enumerate(codes):
        info = describe(code)
        rule = {
            "id": code,
            "name": info.name if info else code,
            "shortDescription": {"text": info.summary if info else code},
            "helpUri": DOCS_URL.format(code=code),
        }
        rules.append(rule)
        index[code] = i
    results = []
    for d in diagnostics:
        result = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": "error" if d.severity.value == "error" else "warning",
            "message": {"text": _with_help(d)},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(d.filename)},
                        "region": {
                            "startLine": max(d.start.row, 1),
                            "startColumn": max(d.start.column, 1),
                            "endLine": max(d.end.row, 1),
                            "endColumn": max(d.end.column, 1),
                        },
                    }
                }
            ],
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
