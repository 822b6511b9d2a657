"""The fix fixtures as ruff's snapshots, next to their rule.

``fixtures/fix/<CODE>/<NAME>.in.py`` is code ``check`` reports under ``<CODE>`` (its main rule:
a pair that several rules report says the others in its header comment), ``NAME.out.py`` what
``fix --unsafe-fixes`` makes of it (``tests/test_fix.py``), and ``NAME.snap`` the two together:
``check``'s concise report of the ``.in.py`` followed by the diff ``fix`` makes, one file to
review per pair. ``METALINT_UPDATE_FIXTURES=1`` rewrites the ``.snap`` files (review the diff).

``fixtures/fix/<CODE>/refused/<NAME>.py``: code whose ``<CODE>`` finding the fix refuses; its
first line is ``# refused: <the reason the fix gives>``. The example is fixed as ``m.py`` (the
reasons name classes as ``m.Class``).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from metalint.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "fix"
PAIRS = sorted(FIXTURES.glob("*/*.in.py"))
REFUSED = sorted(FIXTURES.glob("*/refused/*.py"))
CODE = re.compile(r"ML\d{3}")


def _cli(*args: str) -> str:
    return CliRunner().invoke(main, list(args), catch_exceptions=False).output


def _snapshot(path: Path, folder: Path) -> str:
    name = path.name[: -len(".in.py")]
    shutil.copy(path, folder / f"{name}.py")
    report = _cli(
        "check", "--no-cache", "--select", "ALL", "--output-format", "concise", f"{name}.py"
    )
    diff = _cli("fix", "--no-cache", "--select", "ALL", "--unsafe-fixes", "--diff", f"{name}.py")
    return f"# metalint check --select ALL --output-format concise {name}.py\n{report}\n" + (
        f"# metalint fix --select ALL --unsafe-fixes --diff {name}.py\n{diff}"
    )


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name[: -len('.in.py')]}"


@pytest.mark.parametrize("path", PAIRS, ids=_name)
def test_snapshot(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = _snapshot(path, tmp_path)
    snap = path.with_name(path.name.replace(".in.py", ".snap"))
    if os.environ.get("METALINT_UPDATE_FIXTURES"):
        snap.write_text(got, encoding="utf-8")
    assert got == snap.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", PAIRS, ids=_name)
def test_a_pair_sits_under_a_rule_its_check_reports(path):
    snap = path.with_name(path.name.replace(".in.py", ".snap")).read_text(encoding="utf-8")
    report = snap.split("# metalint fix", 1)[0]
    codes = {m.group(0) for line in report.splitlines()[1:] for m in CODE.finditer(line[:80])}
    assert path.parent.name in codes, (path.parent.name, sorted(codes))


def test_every_pair_has_its_output_and_snapshot():
    assert len(PAIRS) >= 100
    assert all(CODE.fullmatch(p.parent.name) for p in PAIRS)
    for p in PAIRS:
        assert p.with_name(p.name.replace(".in.py", ".out.py")).exists(), p
        assert p.with_name(p.name.replace(".in.py", ".snap")).exists(), p
    snaps = {s.with_name(s.name.replace(".snap", ".in.py")) for s in FIXTURES.glob("*/*.snap")}
    assert snaps == set(PAIRS)
    assert list(FIXTURES.glob("*.py")) == []  # no pair left outside its rule's folder


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_a_refused_fix_says_why_and_the_finding_stands(path, tmp_path, monkeypatch):
    code = path.parent.parent.name
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# refused: "), first
    reason = first[len("# refused: ") :]
    monkeypatch.chdir(tmp_path)
    shutil.copy(path, tmp_path / "m.py")
    out = _cli("fix", "--no-cache", "--select", "ALL", "--unsafe-fixes", "--write", "m.py")
    refused = [line for line in out.splitlines() if f" {code} " in line and "[not fixed: " in line]
    assert any(f"[not fixed: {reason}]" in line for line in refused), out
    # nothing else fixed it: check still reports it
    left = _cli("check", "--no-cache", "--select", "ALL", "--output-format", "concise", "m.py")
    assert f" {code} " in left, left


def test_there_are_refused_examples():
    assert len(REFUSED) >= 8
