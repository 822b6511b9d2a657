"""Does the probe reach the same verdict on CUDA as on the CPU?

    python bench/probe_devices.py [FILE ...] [--devices cpu,cuda] [-j 8] [--timeout 60]

Runs ``metalint probe FILE --device D --output-format json`` on every file (default: every
fixture pair of ``fixtures/fix/<CODE>/`` and every example of ``fixtures/check``) once per device and
compares what each reports: the findings as (code, class, tensors, line). The probe builds
eagerly on the CPU, then on meta, materialises with ``to_empty(device=D)`` and runs the init
there, so a finding that appears on one device only is a device bug of the probe, of the
codemod's hooks (a hook that allocates on the CPU), or of the fixture. Prints one row per file
that differs and a summary; exits 1 when any file differs or a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def probe(path: Path, device: str, timeout: float):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    cmd = [sys.executable, "-m", "metalint", "probe", str(path), "--device", device]
    cmd += ["--output-format", "json", "--exit-zero", "--timeout", str(timeout)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    note = (r.stderr.strip().splitlines() or [""])[-1] if r.returncode else ""
    try:
        reported = json.loads(r.stdout or "[]")
    except json.JSONDecodeError:
        return None, note or f"exit {r.returncode}, no JSON"
    # exit 2 with a report: an item could not be built; the same note on both devices agrees
    found = {
        (f["code"], f.get("symbol") or "", tuple(f.get("subject") or ()), f["location"]["row"])
        for f in reported
    }
    return found | ({("not built", note, (), 0)} if note else set()), ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    files = a.files or sorted((ROOT / "fixtures" / "fix").glob("*/*.py")) + sorted(
        (ROOT / "fixtures" / "check").glob("*.py")
    )
    devices = a.devices.split(",")
    jobs = [(f, d) for f in files for d in devices]
    results = {}
    with ThreadPoolExecutor(a.jobs) as pool:
        futures = {pool.submit(probe, f, d, a.timeout): (f, d) for f, d in jobs}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            f, d = futures[fut]
            print(f"{len(results)}/{len(jobs)} {f.name} {d}", file=sys.stderr, flush=True)
    differ = failed = findings = 0
    for f in files:
        name = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
        runs = {d: results[(f, d)] for d in devices}
        errors = {d: e for d, (got, e) in runs.items() if got is None}
        if errors:
            failed += 1
            print(f"{name}: run failed: " + "; ".join(f"{d}: {e}" for d, e in errors.items()))
            continue
        first = runs[devices[0]][0]
        findings += len(first)
        for d in devices[1:]:
            other = runs[d][0]
            if other != first:
                differ += 1
                print(
                    f"{name}: {devices[0]} only {sorted(first - other)}; {d} only {sorted(other - first)}"
                )
    print(
        f"{len(files)} files on {', '.join(devices)}: {len(files) - differ - failed} agree "
        f"({findings} findings on {devices[0]}), {differ} differ, {failed} failed to run"
    )
    return 1 if differ or failed else 0


if __name__ == "__main__":
    sys.exit(main())
