"""bench/rule_audit.py on two fixtures: every finding is proved, none refuted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_rule_audit_tiny(tmp_path):
    out = tmp_path / "audit.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rule_audit.py"), "--tiny", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    rows = [l for l in text.splitlines() if l.startswith("| fixtures/check | ML")]
    counts = {r.split("|")[2].split()[0]: [int(x) for x in r.split("|")[3:7]] for r in rows}
    # findings, confirmed, refuted, unproven
    assert counts["ML006"][0] >= 5 and counts["ML006"][1] == counts["ML006"][0]
    assert counts["ML003"][1] >= 1
    assert all(c[2] == 0 for c in counts.values()), text
    assert "Refuted findings:\n\n- none" in text
