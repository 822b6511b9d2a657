"""The pages a newcomer reads: README, docs/, the rule pages and the benchmark page.

README stays short and its set-up commands true; every page of docs/ is listed in its index and
every relative link leads to a file (and heading) that exists; each rule page is generated from
its rule's docstring, has ruff's sections and stays short; bench/RESULTS.md is written whole
by ``bench/run.py`` from the stored results, and no page logs how the project was worked on.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metalint.codes import INPUT_CODES, PROBE_CODES
from metalint.docs import pages
from metalint.rules import all_rules

ROOT = Path(__file__).resolve().parent.parent
RULE_SECTIONS = (
    "## What it does",
    "## Why is this bad on meta?",
    "## Example",
    "Use instead:",
    "## Fix safety",
    "## Options",
    "## When to switch it off",
    "## Known limits",
)
MAX_RULE_LINES = 60
#: what a page that logs the work (not the project) says
LOG_WORDS = re.compile(r"session|round [0-9]|helper|agent|issue [0-9]+", re.I)


def _tracked_markdown() -> list[Path]:
    """Tracked and untracked-but-not-ignored ``*.md`` files outside tests/ and fixtures/."""
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        files = [ROOT / f for f in out]
    else:
        files = [p for p in ROOT.rglob("*.md") if ".venv" not in p.parts]
    return [
        f
        for f in files
        if f.is_file() and f.relative_to(ROOT).parts[0] not in ("tests", "fixtures")
    ]


# --- README ---------------------------------------------------------------------------------


def test_readme_is_short_and_links_the_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for link in ("docs/index.md", "rules/README.md", "bench/RESULTS.md", "CONTRIBUTING.md"):
        assert f"]({link})" in text
    for command in ("check", "fix", "probe", "load"):
        assert f"## `metalint {command}`" in text
    assert "## pre-commit and CI" in text


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", text, re.S)


def test_readme_set_up_commands_are_the_ones_ci_runs():
    """The two set-up commands come first; CI runs the test command verbatim and installs
    with the same pins, so neither can drift from what a fresh clone does."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    run, test = _bash_blocks(text)[:2]
    assert text.index(run) < text.index("## Quick start")
    assert run.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && ")
    assert run.endswith(".venv/bin/metalint check fixtures/check/dinov2_layerscale.py")
    assert test.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test in ci.splitlines()


def test_readme_example_command_finds_one_error(cli):
    """The first command's last step, as README says: one finding, exit 1."""
    r = cli("check", "--no-cache", "fixtures/check/dinov2_layerscale.py", cwd=ROOT)
    assert r.exit_code == 1
    assert "Found 1 error in 1 file checked." in r.output
    assert "ML001" in r.output


# --- docs/ ----------------------------------------------------------------------------------


def test_docs_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages_here = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages_here <= listed, f"docs/index.md does not list {sorted(pages_here - listed)}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_relative_links_lead_somewhere():
    broken = []
    for page in _tracked_markdown():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)  # code spans hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_no_page_logs_how_the_project_was_worked_on():
    found = []
    for page in _tracked_markdown():
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if LOG_WORDS.search(line):
                found.append(f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    assert not found, found


# --- rule pages -----------------------------------------------------------------------------


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_page_has_ruffs_sections_and_is_short(rule):
    page = pages()[f"{rule.code}.md"]
    at = [page.find(s) for s in RULE_SECTIONS]
    assert -1 not in at, [s for s, i in zip(RULE_SECTIONS, at) if i < 0]
    assert at == sorted(at), "sections out of order"
    for title, body in rule.sections().items():
        assert body.strip(), f"{title} is empty"
    assert len(page.splitlines()) <= MAX_RULE_LINES
    assert page == (ROOT / "rules" / f"{rule.code}.md").read_text(encoding="utf-8")


def test_code_pages_are_short_and_committed():
    generated = pages()
    for code in [*PROBE_CODES, *INPUT_CODES]:
        page = generated[f"{code}.md"]
        assert "## What it means" in page
        assert len(page.splitlines()) <= MAX_RULE_LINES
        assert page == (ROOT / "rules" / f"{code}.md").read_text(encoding="utf-8")


# --- bench/RESULTS.md -----------------------------------------------------------------------


def _load_run():
    spec = importlib.util.spec_from_file_location("bench_run_docs", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run_docs"] = module
    spec.loader.exec_module(module)
    return module


def test_results_page_is_the_render_of_the_stored_results():
    run = _load_run()
    results = ROOT / "bench" / "results"
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert text == run.page(results, list(run.SECTIONS)), (
        "bench/RESULTS.md is not what bench/run.py writes: "
        "`python bench/run.py --render --out bench/RESULTS.md`"
    )
    assert len(text.splitlines()) <= 400
    stored = sorted(p.stem for p in results.glob("*.json"))
    assert set(stored) <= set(run.SECTIONS)
    for section in ("speed", "fix", "truth", "coverage", "loader", "probe"):
        assert section in stored, f"no stored result for {section}"
        res = json.loads((results / f"{section}.json").read_text())
        for key in ("date", "commit", "command", "machine", "fingerprint"):
            assert res[key], (section, key)
        assert res["command"].startswith("python bench/run.py ")
        # each table says when, on what and how
        assert f"{res['date']}, commit {res['commit']}" in text


def test_results_headline_tables():
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    speed = text.split("## Speed", 1)[1].split("\n## ", 1)[0]
    for row in ("metalint cold", "metalint warm", "metalint warm, one file", "TorchFix"):
        assert f"| {row} |" in speed
    for ratio in ("metalint cold / floor: ast.parse", "metalint cold / ruff (no cache)"):
        assert f"| timm | {ratio} |" in speed and f"| transformers | {ratio} |" in speed
    fix = text.split("## `fix --write`", 1)[1].split("\n## ", 1)[0]
    sizes = [int(n) for n in re.findall(r"^\| (\d+) generated files \|", fix, re.M)]
    # 1k, 2k, 4k (or the --quick variant's smaller sizes, marked so): each a doubling
    assert len(sizes) == 3 and sizes[1] == 2 * sizes[0] and sizes[2] == 2 * sizes[1]
    assert sizes == [1000, 2000, 4000] or "**(`--quick`: the short variant)**" in fix
    assert "| timm, once |" in fix and "| timm, twice |" in fix


class _Stub:
    """Stands for the measuring functions of ``bench/run.py``: records each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, name):
        def measure(ctx):
            self.calls.append(name)
            return {"rows": [], "reps": ctx.reps, "single_above": 1.0, "table": f"{name} table"}

        return measure


def _run(run, tmp_path, *args):
    out = tmp_path / "PAGE.md"
    argv = ["--results", str(tmp_path / "results"), "--workdir", str(tmp_path / "w")]
    assert run.main([*argv, *args, "--out", str(out)]) == 0
    return out.read_text()


def test_bench_run_measures_only_what_changed(tmp_path, monkeypatch):
    run = _load_run()
    stub = _Stub()
    sections = ["fix", "loader"]
    monkeypatch.setattr(run, "SECTIONS", {s: run.SECTIONS[s] for s in sections})
    monkeypatch.setattr(run, "MEASURE", {s: stub(s) for s in sections})
    first = _run(run, tmp_path)
    assert stub.calls == ["fix", "loader"]  # nothing stored: both measured
    assert "loader table" in first
    # stored and unchanged: nothing measured, the page written whole again
    (tmp_path / "PAGE.md").write_text("stale text\n")
    again = _run(run, tmp_path)
    assert stub.calls == ["fix", "loader"] and again == first
    # --only re-measures that section alone; --render measures nothing
    _run(run, tmp_path, "--only", "loader")
    assert stub.calls[2:] == ["loader"]
    _run(run, tmp_path, "--render")
    assert len(stub.calls) == 3
    # a section whose code changed is measured again; so is a --quick result on a full run
    stored = tmp_path / "results" / "fix.json"
    data = json.loads(stored.read_text())
    stored.write_text(json.dumps({**data, "fingerprint": "0"}))
    _run(run, tmp_path)
    assert stub.calls[3:] == ["fix"]
    stored = tmp_path / "results" / "loader.json"
    stored.write_text(json.dumps({**json.loads(stored.read_text()), "quick": True}))
    text = _run(run, tmp_path, "--render")
    assert "**(`--quick`: the short variant)**" in text
    _run(run, tmp_path)
    assert stub.calls[4:] == ["loader"]


def test_bench_run_fingerprint_ignores_docstrings_and_comments(tmp_path, monkeypatch):
    run = _load_run()
    code = tmp_path / "a.py"
    code.write_text('"""One."""\n\ndef f():\n    """Doc."""\n    return 1  # note\n')
    before = run._code_hash(code)
    code.write_text('"""Two, longer."""\n\ndef f():\n    """Other."""\n    return 1\n')
    assert run._code_hash(code) == before
    code.write_text('"""Two."""\n\ndef f():\n    return 2\n')
    assert run._code_hash(code) != before


def test_bench_run_rejects_an_unknown_section(tmp_path, capsys):
    run = _load_run()
    with pytest.raises(SystemExit) as exc:
        run.main(["--only", "speed,nope", "--results", str(tmp_path)])
    assert exc.value.code == 2
    assert "unknown sections: nope" in capsys.readouterr().err
