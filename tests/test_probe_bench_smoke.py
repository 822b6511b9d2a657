import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench" / "probe_bench.py"


def test_probe_bench_tiny_runs():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tiny"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    data = json.loads(out.stdout)
    assert data["model_bytes"] == 2 * (64 * 64 + 64) * 4
    assert data["findings"] == 0 and data["verdict"].startswith("passed")
    assert data["meta_build_escape_bytes"] == 0
