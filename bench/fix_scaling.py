"""Does ``metalint fix --write`` take time in proportion to the number of files?

    python bench/fix_scaling.py [--files 1000] [--timm PATH] [--json]

Two measurements, each of a tree and of the same tree twice as large:

- ``generated``: N small model files (each a module with fixable findings that builds the
  class of an earlier file), then 2N;
- ``timm``: the timm sources copied once, then twice (two packages side by side).

Each run is ``metalint fix --write --no-cache --unsafe-fixes`` on a fresh copy (the fix
writes), timed in CPU seconds of the whole process tree (``RUSAGE_CHILDREN``) and wall
seconds. Printed: each time and the ratio 2x/1x (linear: 2.0; the target is <= 2.2).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMM = Path("/work/wt/src/timm-1.0.31/timm")

MODEL = '''"""Generated model file {i}."""

import torch
from torch import nn

from .{prev} import Block{prev_i}


class Block{i}(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.inner = Block{prev_i}(dim)
        self.proj = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.ones(dim))
        self.register_buffer("steps", torch.arange(dim), persistent=False)

    def forward(self, x):
        return self.proj(self.inner(x)) * self.scale + self.steps
'''

FIRST = '''"""Generated model file 0."""

import torch
from torch import nn


class Block0(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.gamma
'''


def generate(folder: Path, n: int) -> Path:
    """A package of ``n`` model files under ``folder``; its path."""
    pkg = folder / "genmodels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m0.py").write_text(FIRST)
    for i in range(1, n):
        # each builds the class of an earlier file: a tree of files log2(n) deep
        parent = (i - 1) // 2
        text = MODEL.format(i=i, prev=f"m{parent}", prev_i=parent)
        (pkg / f"m{i}.py").write_text(text)
    return pkg


def run_fix(cwd: Path, targets: list[str], timeout: float) -> dict:
    cmd = [sys.executable, "-m", "metalint", "fix", "--write", "--no-cache", "--unsafe-fixes"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*cmd, *targets], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise SystemExit(f"bench/fix_scaling.py: fix exited {proc.returncode}: {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def generated(n: int, work: Path, timeout: float) -> dict:
    out = {}
    for size in (n, 2 * n):
        folder = work / f"gen{size}"
        pkg = generate(folder, size)
        out[size] = run_fix(folder, [pkg.name], timeout)
        print(f"[fix_scaling] generated {size}: {out[size]}", file=sys.stderr, flush=True)
        shutil.rmtree(folder)
    return _pair("generated", n, out[n], out[2 * n])


def timm_twice(src: Path, work: Path, timeout: float) -> dict:
    out = {}
    for copies in (1, 2):
        folder = work / f"timm{copies}"
        names = [f"timm{k}" for k in range(copies)]
        for name in names:
            shutil.copytree(src, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        out[copies] = run_fix(folder, names, timeout)
        print(f"[fix_scaling] timm x{copies}: {out[copies]}", file=sys.stderr, flush=True)
        shutil.rmtree(folder)
    files = sum(1 for _ in src.rglob("*.py"))
    return _pair("timm", files, out[1], out[2])


def _pair(name: str, files: int, one: dict, two: dict) -> dict:
    return {
        "tree": name,
        "files": files,
        "1x": one,
        "2x": two,
        "ratio_cpu": round(two["cpu_s"] / one["cpu_s"], 3) if one["cpu_s"] else None,
        "ratio_wall": round(two["wall_s"] / one["wall_s"], 3) if one["wall_s"] else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000, help="generated files at 1x (default 1000)")
    ap.add_argument("--timm", type=Path, default=TIMM, help="timm sources (copied once, twice)")
    ap.add_argument("--no-timm", action="store_true")
    ap.add_argument("--no-generated", action="store_true")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="metalint-fix-scaling-") as tmp:
        work = Path(tmp)
        if not a.no_generated:
            rows.append(generated(a.files, work, a.timeout))
        if not a.no_timm and a.timm.is_dir():
            rows.append(timm_twice(a.timm, work, a.timeout))
    report = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "rows": rows}
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    print("| tree | files at 1x | 1x CPU s | 2x CPU s | ratio CPU | ratio wall |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['tree']} | {r['files']} | {r['1x']['cpu_s']:.2f} | {r['2x']['cpu_s']:.2f} "
            f"| {r['ratio_cpu']:.2f} | {r['ratio_wall']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
