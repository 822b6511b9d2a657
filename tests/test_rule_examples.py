"""Every rule's VALID and INVALID examples, executed through the real checker."""

from __future__ import annotations

import textwrap

import pytest

from metalint.check import run_check
from metalint.config import Settings
from metalint.fix.command import run_fix
from metalint.rules import all_rules
from metalint.static.rule import DOC_SECTIONS, Invalid


def _source(example: str | Invalid) -> str:
    return example.source if isinstance(example, Invalid) else example


CASES = [
    pytest.param(rule, kind, i, _source(src), id=f"{rule.code}-{kind}-{i}")
    for rule in all_rules()
    for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
    for i, src in enumerate(examples)
]
FIXED = [
    pytest.param(rule, ex, id=f"{rule.code}-invalid-{i}")
    for rule in all_rules()
    for i, ex in enumerate(rule.INVALID)
    if isinstance(ex, Invalid) and ex.fixed is not None
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
        # every finding says what to do, on its own (``= help:``), not inside the message
        assert all(d.help for d in result.diagnostics if d.code == rule.code)


@pytest.mark.parametrize("rule, example", FIXED)
def test_fixed_example(tmp_path, rule, example):
    """``metalint fix --write`` turns the INVALID example into its ``fixed`` source (Fixit's
    ``expected_replacement``)."""
    path = tmp_path / "example.py"
    path.write_text(textwrap.dedent(example.source).lstrip("\n"), encoding="utf-8")
    settings = Settings(root=tmp_path, select=[rule.code])
    run_fix(
        [path],
        settings,
        write=True,
        show_diff=False,
        unsafe=example.unsafe,
        verify=False,
        use_cache=False,
        workers=1,
        echo=lambda *a, **k: None,
    )
    assert path.read_text(encoding="utf-8") == textwrap.dedent(example.fixed).lstrip("\n")


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.codemod], ids=lambda r: r.code)
def test_a_rule_with_a_codemod_shows_its_fix(rule):
    """Its page says a fix exists, and one INVALID example shows what the fix writes."""
    assert rule.fix_availability != "none"
    assert "No automatic fix" not in rule.markdown()
    assert any(isinstance(ex, Invalid) and ex.fixed for ex in rule.INVALID), rule.code


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


def test_default_build_evaluator():
    """The constants a default build sees: unknown never decides."""
    from metalint.static.constants import UNKNOWN, dispatch, evaluate_text

    env = {"weight_init": "reset", "self.mode": "jax_nlhb", "n": 3}
    assert evaluate_text("'reset' if weight_init == 'skip' else weight_init", env) == "reset"
    assert evaluate_text("mode or self.mode", {**env, "mode": ""}) == "jax_nlhb"
    assert evaluate_text("self.mode.startswith('jax') and n > 2", env) is UNKNOWN  # '>' unsupported
    assert evaluate_text("self.mode.startswith(('moco', 'jax'))", env) is True
    assert evaluate_text("not weight_init", env) is False
    assert evaluate_text("weight_init in ('reset', '')", env) is True
    assert evaluate_text("unknown_name == 'reset'", env) is UNKNOWN
    assert evaluate_text("x if unknown_name else 'a'", env) is UNKNOWN
    assert evaluate_text("f(weight_init)", env) is UNKNOWN
    summary = {
        "params": ["mode", "needs_reset"],
        "defaults": {"mode": "jax"},
        "branches": [
            ["mode.startswith('jax')", "init"],
            ["mode == 'reset'", "reset"],
            [None, "init"],
        ],
    }
    assert dispatch(summary, {}) == "init"
    assert dispatch(summary, {"0": "reset"}) == "reset"
    assert dispatch(summary, {"mode": "moco"}) == "init"
    assert dispatch({**summary, "defaults": {}}, {}) is None  # mode unknown
