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
            "## Use instead",
            "## Fix safety",
        ):
            assert section in page
        assert f"[{rule.code}]({rule.code}.md)" in generated["README.md"]


def test_rule_command(cli):
    r = cli("rule", "ML001")
    assert r.exit_code == 0 and r.output.startswith("# parameter-from-value (ML001)")
    assert "## Use instead" in r.output
    r = cli("rule")
    assert "ML001  parameter-from-value" in r.output
    r = cli("rule", "ML999")
    assert r.exit_code == 2 and "unknown rule code" in r.output
