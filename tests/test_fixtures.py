"""``fixtures/check/*.py``: each file's expected diagnostics are in the ``.txt`` beside it.

Run with ``METALINT_UPDATE_FIXTURES=1`` to rewrite the ``.txt`` files after a deliberate change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metalint.check import run_check
from metalint.config import Settings
from metalint.report import render

ROOT = Path(__file__).resolve().parent.parent
CHECK = sorted((ROOT / "fixtures" / "check").glob("*.py"))


@pytest.mark.parametrize("path", CHECK, ids=lambda p: p.stem)
def test_check_fixture(path, monkeypatch):
    monkeypatch.chdir(path.parent)
    settings = Settings(root=path.parent, select=["ALL"])
    result = run_check([Path(path.name)], settings, use_cache=False, workers=1)
    got = render(result.diagnostics, "text")
    expected = path.with_suffix(".txt")
    if os.environ.get("METALINT_UPDATE_FIXTURES"):
        expected.write_text(got, encoding="utf-8")
    assert expected.exists(), f"missing {expected.name}; run with METALINT_UPDATE_FIXTURES=1"
    assert got == expected.read_text(encoding="utf-8")


def test_there_are_fixtures():
    assert len(CHECK) >= 2
