"""metalint's static check beside ruff and the floor under any Python-hosted checker.

    python bench/speed.py [--tree NAME=PATH ...] [--rounds 3] [--json]

For each tree (default: the timm and transformers sources under ``/work/wt/src`` when they
are there), in a private copy (the warm run writes its cache there), interleaved rounds of:

- ``metalint cold``: ``metalint check --no-cache`` (every file parsed and analysed);
- ``metalint warm``: ``metalint check`` with every file a cache hit (primed once before);
- ``ruff``: ``ruff check --isolated --no-cache`` (default rules);
- ``floor``: ``bench/parse_floor.py``, CPython's ``ast.parse`` of every file.

Each figure is the median over the rounds of the CPU seconds of the whole process tree
(user + system, the command and every worker it waited for: ``RUSAGE_CHILDREN``), with the
wall seconds beside it. Printed: a table per tree with the ratios metalint/floor and
metalint/ruff; ``--json``: the same as one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = Path("/work/wt/src")
DEFAULT_TREES = {
    "timm": SRC / "timm-1.0.31" / "timm",
    "transformers": SRC / "transformers-5.23.0" / "transformers",
}
TOOLS = ("metalint cold", "metalint warm", "ruff", "floor")


def ruff_binary() -> str | None:
    """The ruff beside this interpreter (the project venv's), else one on PATH."""
    here = Path(sys.executable).with_name("ruff")
    return str(here) if here.exists() else shutil.which("ruff")


def commands(ruff: str | None, jobs: int | None) -> dict[str, list[str] | None]:
    ml = [sys.executable, "-m", "metalint", "check", "--exit-zero", "--output-format", "concise"]
    if jobs:
        ml += ["-j", str(jobs)]
    floor = [sys.executable, str(ROOT / "bench" / "parse_floor.py")]
    if jobs:
        floor += ["--jobs", str(jobs)]
    return {
        "metalint cold": [*ml, "--no-cache", "."],
        "metalint warm": [*ml, "."],
        "ruff": [ruff, "check", "--isolated", "--no-cache", "--exit-zero", "-q", "."]
        if ruff
        else None,
        "floor": [*floor, "."],
    }


def measure(cmd: list[str], cwd: Path, timeout: float) -> tuple[float, float]:
    """(CPU seconds of the process tree, wall seconds) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"bench/speed.py: {' '.join(cmd)} exited {proc.returncode}: {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def count_files(tree: Path) -> int:
    return sum(1 for _ in tree.rglob("*.py"))


def bench_tree(name: str, src: Path, cmds: dict, rounds: int, timeout: float, work: Path) -> dict:
    copy = work / name / src.name
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".metalint_cache", "__pycache__"))
    cwd = copy.parent
    cmds = {k: (v[:-1] + [src.name] if v else None) for k, v in cmds.items()}
    measure(cmds["metalint warm"], cwd, timeout)  # primes the cache the warm runs read
    runs: dict[str, list[tuple[float, float]]] = {t: [] for t in TOOLS if cmds[t]}
    for r in range(rounds):
        for tool in runs:  # interleaved: a busy moment of the box hits every tool alike
            runs[tool].append(measure(cmds[tool], cwd, timeout))
            print(
                f"[speed] {name} round {r + 1}: {tool} {runs[tool][-1][0]:.2f} CPU s",
                file=sys.stderr,
                flush=True,
            )
    out: dict = {"tree": name, "path": str(src), "files": count_files(src), "tools": {}}
    for tool, values in runs.items():
        out["tools"][tool] = {
            "cpu_s": statistics.median(c for c, _ in values),
            "wall_s": statistics.median(w for _, w in values),
            "cpu_runs": [round(c, 3) for c, _ in values],
        }
    cpu = {t: v["cpu_s"] for t, v in out["tools"].items()}
    ratios = {}
    for tool in ("metalint cold", "metalint warm"):
        if cpu.get("floor"):
            ratios[f"{tool} / floor"] = cpu[tool] / cpu["floor"]
        if cpu.get("ruff"):
            ratios[f"{tool} / ruff"] = cpu[tool] / cpu["ruff"]
    out["ratios"] = ratios
    return out


def table(result: dict) -> str:
    lines = [
        f"{result['tree']} ({result['files']} files): median of "
        f"{len(next(iter(result['tools'].values()))['cpu_runs'])} interleaved rounds",
        "| tool | CPU s (process tree) | wall s |",
        "|---|---:|---:|",
    ]
    for tool, v in result["tools"].items():
        lines.append(f"| {tool} | {v['cpu_s']:.2f} | {v['wall_s']:.2f} |")
    lines += ["", "| ratio (CPU) | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in result["ratios"].items()]
    return "\n".join(lines) + "\n"


def parse_trees(values: list[str]) -> dict[str, Path]:
    if not values:
        return {k: v for k, v in DEFAULT_TREES.items() if v.is_dir()}
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not Path(path).is_dir():
            raise SystemExit(f"bench/speed.py: --tree {value}: expected NAME=FOLDER")
        out[name] = Path(path)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="workers (default: each tool's own)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per command")
    ap.add_argument("--no-ruff", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args(argv)
    trees = parse_trees(a.tree)
    if not trees:
        raise SystemExit("bench/speed.py: no tree to measure (use --tree NAME=PATH)")
    cmds = commands(None if a.no_ruff else ruff_binary(), a.jobs)
    # an installed package has its bytecode; under PYTHONDONTWRITEBYTECODE=1 each run would
    # compile metalint's modules again (about 0.4 s of every run)
    import metalint

    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", os.path.dirname(metalint.__file__)],
        stdout=subprocess.DEVNULL,
        check=False,
    )
    with tempfile.TemporaryDirectory(prefix="metalint-speed-") as tmp:
        results = [
            bench_tree(name, path, cmds, a.rounds, a.timeout, Path(tmp))
            for name, path in trees.items()
        ]
    report = {
        "rounds": a.rounds,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "python": sys.version.split()[0],
        "trees": results,
    }
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(table(r) for r in results), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
