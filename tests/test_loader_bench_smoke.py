"""The loader benchmark runs end to end on a tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "loader_bench.py"


def test_loader_bench_tiny(tmp_path):
    out = tmp_path / "bench.md"
    res = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--tiny",
            "--out",
            str(out),
            "--methods",
            "metalint,eager torch.load,meta + mmap + assign,accelerate",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    text = out.read_text()
    assert text == res.stdout
    assert "| method | peak RssAnon above baseline (MB) |" in text
    for method in ("metalint", "eager torch.load", "meta + mmap + assign"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {method} |"))
        assert "–" not in row, row
    # accelerate is optional: a row either way, a note when it is not importable
    assert "| accelerate |" in text
    assert "metalint bound 1.05 x final + largest tensor" in text
