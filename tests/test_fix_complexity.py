"""The fixer's functions stay small: ruff's C901 at complexity 10 on ``metalint/fix``, with no
``# noqa`` (``tests/test_fix_layers.py`` refuses those)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed")
    return found


def _ruff_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_ruff(), "check", "--no-cache", "metalint/fix", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fix_functions_pass_c901_at_10():
    r = _ruff_check("--select", "C901", "--config", "lint.mccabe.max-complexity=10")
    assert r.returncode == 0, r.stdout + r.stderr


def test_fix_size_findings_per_thousand_lines():
    """Too many arguments, returns, branches or statements (ruff's PLR0911/0912/0913/0915):
    at most 2.9 findings per 1,000 lines of ``metalint/fix``."""
    r = _ruff_check(
        "--select", "PLR0911,PLR0912,PLR0913,PLR0915", "--output-format", "concise", "--exit-zero"
    )
    assert r.returncode == 0, r.stderr
    findings = [line for line in r.stdout.splitlines() if ": PLR09" in line]
    lines = sum(
        p.read_text(encoding="utf-8").count("\n") for p in (ROOT / "metalint/fix").glob("*.py")
    )
    assert len(findings) * 1000 / lines <= 2.9, "\n".join(findings)
