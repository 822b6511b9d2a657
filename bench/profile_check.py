"""Where the time of one cold ``metalint check`` goes, phase by phase.

    python bench/profile_check.py PATH [--jobs N] [--cprofile out.prof]

Runs the check in this process with one worker (so every phase is seen), timing each phase by
wrapping the functions that implement it, in CPU seconds (``time.process_time``) and wall
seconds. Process start and imports are measured separately, in fresh interpreters. With
``--jobs N`` (N > 1) it also times the real parallel run end to end (``metalint check
--no-cache -j N`` in a subprocess).
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CPU: dict[str, float] = defaultdict(float)
WALL: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
_stack: list[str] = []


def timed(phase: str, fn):
    """Wrap ``fn``; time spent in nested timed phases is charged to them, not to ``phase``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        c0, w0 = time.process_time(), time.perf_counter()
        _stack.append(phase)
        try:
            return fn(*args, **kwargs)
        finally:
            _stack.pop()
            dc, dw = time.process_time() - c0, time.perf_counter() - w0
            CPU[phase] += dc
            WALL[phase] += dw
            CALLS[phase] += 1
            if _stack:  # exclusive times: take it out of the caller's phase
                CPU[_stack[-1]] -= dc
                WALL[_stack[-1]] -= dw

    return wrapper


def fresh(code: str) -> float:
    """Wall seconds of ``python -c code`` (best of 3)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--jobs", type=int, default=0, help="also time the real run with N workers")
    ap.add_argument("--cprofile", type=Path, help="also write a cProfile (CPU time) here")
    a = ap.parse_args()

    startup = {
        "python -c pass": fresh("pass"),
        "import metalint.check": fresh("import metalint.check"),
        "... + all_rules()": fresh(
            "import metalint.check; from metalint.rules import all_rules; all_rules()"
        ),
    }

    from metalint import checking as check
    from metalint import report
    from metalint.config import load_settings
    from metalint.rules import all_rules
    from metalint.static import engine, names

    check.read_source = timed("read", check.read_source)
    check.Cache.digest = staticmethod(timed("hash", check.Cache.digest))
    check.decode = timed("decode", check.decode)
    names.module_name_for = timed("module names", names.module_name_for)
    engine.noqa_directives = timed("noqa comments", engine.noqa_directives)
    engine.ast.parse = timed("ast.parse (all files)", engine.ast.parse)
    engine.elide = timed("elision (what no rule reads)", engine.elide)
    engine.parse_valid_module = timed("parse (libcst)", engine.parse_valid_module)
    engine.collect = timed("fact collection", engine.collect)
    engine.summarize = timed("class summaries", engine.summarize)
    if hasattr(engine, "_positions"):
        engine._positions = timed("positions", engine._positions)
    if hasattr(engine, "_codemod_fix"):
        engine._codemod_fix = timed("fix computation", engine._codemod_fix)
    for rule in all_rules():  # check_class may be a generator: time its iteration too
        rule.check_class = timed(
            f"rule {rule.code}",
            lambda self, cls, _f=rule.check_class: list(_f(self, cls)),
        )
    check.resolve = timed("cross-file resolution", check.resolve)
    check.can_isolate = lambda: False  # analyse in this process, where the timers are
    render = timed("reporting", report.render)

    orig_files = check.Discovery.files
    check.Discovery.files = timed(
        "discovery", lambda self, paths: iter(list(orig_files(self, paths)))
    )
    settings = load_settings(a.path if a.path.exists() else Path.cwd(), None)
    engine.analyze_source = timed("analyze (rest: engine glue)", engine.analyze_source)

    prof = None
    if a.cprofile:
        import cProfile

        prof = cProfile.Profile(time.process_time)
        prof.enable()
    c0, w0 = time.process_time(), time.perf_counter()
    result = timed("run_check (rest)", check.run_check)(
        [a.path], settings, use_cache=False, workers=1
    )
    render(result.diagnostics, "text", statistics=False, files_checked=result.files_checked)
    cpu_total, wall_total = time.process_time() - c0, time.perf_counter() - w0
    if prof is not None:
        prof.disable()
        prof.dump_stats(a.cprofile)

    parsed = sum(r.parsed for r in result.results)
    print(
        f"Cold check of {a.path}: {result.files_checked} files, {parsed} parsed by libcst, "
        f"{len(result.diagnostics)} findings; one process, no cache"
    )
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs\n")
    print("| phase | calls | CPU s | % of CPU | wall s |\n|---|---:|---:|---:|---:|")
    for phase in sorted(CPU, key=lambda p: -CPU[p]):
        print(
            f"| {phase} | {CALLS[phase]} | {CPU[phase]:.2f} | {100 * CPU[phase] / cpu_total:.1f} | {WALL[phase]:.2f} |"
        )
    print(f"| **total in process** | | {cpu_total:.2f} | 100 | {wall_total:.2f} |\n")
    print("| process start (fresh interpreter, best of 3) | wall s |\n|---|---:|")
    for k, v in startup.items():
        print(f"| `{k}` | {v:.2f} |")
    if a.jobs > 1:
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "metalint",
                "check",
                "--no-cache",
                "--exit-zero",
                "-j",
                str(a.jobs),
                str(a.path),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(
            f"| `metalint check --no-cache -j {a.jobs}` end to end | {time.perf_counter() - t0:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
