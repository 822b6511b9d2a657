"""``metalint fix --write`` on real libraries downloaded from PyPI (opt-in, slow: minutes).

    METALINT_REAL_LIBS=1 python -m pytest -q -m slow tests/test_fix_real_libraries.py

Each wheel is downloaded into a temporary folder (never committed), unpacked, fixed with
``--unsafe-fixes``; then every file compiles, a second ``fix`` changes nothing, and ``check``
offers no fix any more. ``METALINT_REAL_LIBS_IMPORT=python`` (an interpreter with torch, and
torchvision for timm) also imports every changed module from the fixed copy.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = [("timm", "0.9.16", "timm"), ("timm", "1.0.9", "timm"), ("dinov2", "0.0.1.dev2", "dinov2")]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("METALINT_REAL_LIBS"), reason="set METALINT_REAL_LIBS=1"),
]


def _metalint(*args, cwd):
    """``python -m metalint ARGS`` from this checkout: bench/fix_coverage.py's runner."""
    spec = importlib.util.spec_from_file_location(
        "fix_coverage", ROOT / "bench" / "fix_coverage.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.metalint(list(args), cwd, timeout=1800)


@pytest.mark.parametrize("name,version,package", SPECS, ids=lambda x: str(x))
def test_fix_real_library(name, version, package, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--pre",
            f"{name}=={version}",
            "-d",
            str(tmp_path / "wheel"),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot download {name}=={version}: {r.stderr[-200:]}")
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    src, orig = tmp_path / "src", tmp_path / "orig"
    for d in (src, orig):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(d)
    r = _metalint(
        "fix", "--no-cache", "--unsafe-fixes", "--write", "--show-fixes", package, cwd=src
    )
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    fixed = [l for l in r.stdout.splitlines() if l.startswith("fix ")]
    print(f"{name} {version}: {len(fixed)} fixes; {r.stdout.splitlines()[-1]}")
    assert fixed
    assert compileall.compile_dir(str(src / package), quiet=1, force=True)
    second = _metalint("fix", "--no-cache", "--unsafe-fixes", package, cwd=src)
    assert second.returncode == 0 and "--- a/" not in second.stdout, second.stdout[-2000:]
    changed = [
        p
        for p in (src / package).rglob("*.py")
        if p.read_bytes() != (orig / p.relative_to(src)).read_bytes()
    ]
    assert changed
    python = os.environ.get("METALINT_REAL_LIBS_IMPORT")
    if python:
        mods = [".".join(p.relative_to(src).with_suffix("").parts) for p in changed]
        code = "import importlib,sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
        r = subprocess.run(
            [python, "-c", code, *mods],
            cwd=src,
            env=dict(os.environ, PYTHONPATH=str(src)),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, r.stderr[-2000:]
