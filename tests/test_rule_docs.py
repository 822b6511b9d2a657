"""``rules/`` is generated from the rule classes and must not go stale."""

from __future__ import annotations

from pathlib import Path

from metalint.docs import pages, write

ROOT = Path(__file__).resolve().parent.parent


def test_rules_folder_is_up_to_date():
    stale = write(ROOT / "rules", check=True)
    assert not stale, f"rules/ is stale ({', '.join(stale)}): run `python -m metalint.docs rules/`"


def test_every_rule_has_a_page_and_an_index_row():
    from metalint.rules import all_rules

    generated = pages()
    for rule in all_rules():
        page = generated[f"{rule.code}.md"]
        assert page.startswith(f"# {rule.name} ({rule.code})")
        for section in (
            "## What it does",
            "## Why is this bad on meta?",
            "## Example",
            "Use instead:",
            "## Fix safety",
        ):
            assert section in page
        assert f"[{rule.code}]({rule.code}.md)" in generated["README.md"]


def test_rule_command(cli):
    r = cli("rule", "ML001")
    assert r.exit_code == 0 and r.output.startswith("# parameter-from-value (ML001)")
    assert "Use instead:" in r.output
    r = cli("rule")
    assert "ML001  parameter-from-value" in r.output
    r = cli("rule", "ML999")
    assert r.exit_code == 2 and "unknown rule code" in r.output


def test_every_printed_code_has_a_page(cli):
    """Probe codes and ML900 too: ``metalint rule CODE`` prints it and SARIF's helpUri (one
    page per code under ``rules/``) points at a file that exists."""
    from metalint.codes import DOCS_URL, INPUT_CODES, PROBE_CODES

    for code in [*PROBE_CODES, *INPUT_CODES]:
        r = cli("rule", code)
        assert r.exit_code == 0, code
        assert r.output == (ROOT / "rules" / f"{code}.md").read_text(encoding="utf-8")
        assert DOCS_URL.format(code=code).endswith(f"rules/{code}.md")
    assert cli("rule", "ML900").output.startswith("# unreadable-input (ML900)")
