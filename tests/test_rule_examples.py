"""Every rule's VALID and INVALID examples, executed through the real checker."""

from __future__ import annotations

import textwrap

import pytest

from metalint.check import run_check
from metalint.config import Settings
from metalint.rules import all_rules
from metalint.static.rule import DOC_SECTIONS

CASES = [
    pytest.param(rule, kind, i, src, id=f"{rule.code}-{kind}-{i}")
    for rule in all_rules()
    for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
    for i, src in enumerate(examples)
]


def expected_lines(source: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith("# ERROR")]


@pytest.mark.parametrize("rule, kind, index, source", CASES)
def test_example(tmp_path, rule, kind, index, source):
    source = textwrap.dedent(source).lstrip("\n")
    path = tmp_path / "example.py"
    path.write_text(source, encoding="utf-8")
    settings = Settings(root=tmp_path, select=["ALL"])
    result = run_check([path], settings, use_cache=False, workers=1)
    assert not [d for d in result.diagnostics if d.code == "ML900"], result.diagnostics
    got = sorted(d.start.row for d in result.diagnostics if d.code == rule.code)
    if kind == "valid":
        assert got == [], f"{rule.code} fired on a VALID example at lines {got}"
    else:
        want = expected_lines(source)
        assert want, "an INVALID example must mark its lines with # ERROR"
        assert got == want


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_is_documented(rule):
    sections = rule.sections()
    for title in DOC_SECTIONS:
        assert sections.get(title, "").strip(), f"{rule.code} lacks a '## {title}' section"
    assert rule.INVALID or rule.code == "ML100", f"{rule.code} has no INVALID example"
    assert rule.VALID, f"{rule.code} has no VALID example"
    assert rule.name == rule.name.lower() and " " not in rule.name


def test_codes_are_unique_and_well_formed():
    codes = [r.code for r in all_rules()]
    assert len(codes) == len(set(codes))
    for code in codes:
        assert code[:2] == "ML" and code[2:].isdigit() and len(code) == 5
