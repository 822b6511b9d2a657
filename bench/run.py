"""One command for every metalint benchmark, side by side with what users would use instead.

    python bench/run.py                       # full run (downloads ~20 MB from PyPI; long)
    python bench/run.py --quick               # timm only, one repetition, tiny probe/loader
    python bench/run.py --out bench/RESULTS.md

What it does, in a fresh temp dir (``--workdir`` to reuse one, ``--keep`` to keep it):

1. ``pip download --no-deps`` the pinned timm and transformers wheels and unzips them: the
   source trees to check.
2. Installs ruff and TorchFix (pinned), each in its own venv inside the temp dir, so their
   pins (TorchFix pins an old libcst) never touch metalint's environment.
3. Static check, for each tree, ``--reps`` alternating repetitions (median reported):
   ``metalint check`` cold (cache dir deleted: it parses everything and writes the cache) and
   warm (every file a cache hit), ``ruff check`` (default rules, ``--isolated``) with and
   without its cache, ``torchfix``, and the floor under any Python-hosted checker:
   ``bench/parse_floor.py`` (CPython's ``ast.parse`` of every file; ``--walk``: and one visit
   of every node).
   Wall seconds by ``time.perf_counter`` around each subprocess; files/s = ``*.py`` files in
   the tree / wall seconds. A command that runs past ``--timeout`` is killed and reported as
   ``>T``.
4. Probe: ``bench/probe_bench.py`` (synthetic model) and, when ``--probe-python`` can import
   timm, seconds and peak anonymous RSS of ``probe()`` on a few real timm models over their
   eager build.
5. Loader: the table of ``bench/loader_bench.py`` (three runs of each method), accelerate
   included: installed pinned with ``pip install --target`` into the temp dir, beside (not
   into) metalint's environment.
6. GPU: the probe's CUDA figures when ``torch.cuda.is_available()``.

Prints the markdown report and writes it to ``--out`` (with date, machine and versions).
The static part alone runs on any folder with ``--tree NAME=PATH`` (used by the smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = {
    "timm": "1.0.31",
    "transformers": "5.23.0",
    "ruff": "0.17.6",
    "torchfix": "0.7.0",
    "accelerate": "1.15.0",
}
PROBE_MODELS = (
    "vit_tiny_patch16_224",
    "convnext_atto",
    "resnet18",
    "vit_base_patch16_224",
)
#: targets from the issue: metalint cold/TorchFix, cold/ruff, warm/ruff
TARGETS = {"cold_vs_torchfix": 0.05, "cold_vs_ruff": 10.0, "warm_vs_ruff": 1.0}
#: rows of bench/parse_floor.py: what CPython alone costs on the same tree
FLOOR = "floor: ast.parse"
FLOOR_WALK = "floor: ast.parse + ast.walk"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


# ---------------------------------------------------------------------------------- setup


def pip(python: str, *args: str) -> None:
    r = sh([python, "-m", "pip", "--disable-pip-version-check", *args])
    if r.returncode != 0:
        raise SystemExit(f"pip {' '.join(args)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def fetch_tree(work: Path, name: str) -> Path:
    """Download the pinned wheel of ``name`` and unzip it; return the package folder."""
    dest = work / "trees" / name
    if not dest.exists():
        wheels = work / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        log(f"pip download {name}=={PINS[name]}")
        pip(
            sys.executable,
            "download",
            "--no-deps",
            "-q",
            "-d",
            str(wheels),
            f"{name}=={PINS[name]}",
        )
        (wheel,) = wheels.glob(f"{name}-{PINS[name]}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)
    return dest


def tool_venv(work: Path, name: str) -> Path | None:
    """A venv of its own holding ``name`` (pinned); the path of its executable."""
    venv = work / f"venv-{name}"
    exe = venv / "bin" / name
    if not exe.exists():
        log(f"venv for {name}=={PINS[name]}")
        r = sh([sys.executable, "-m", "venv", str(venv)])
        if r.returncode != 0:
            log(f"cannot create a venv for {name}: {r.stderr.strip()[-300:]}")
            return None
        try:
            pip(str(venv / "bin" / "python"), "install", "-q", f"{name}=={PINS[name]}")
        except SystemExit as exc:
            log(str(exc))
            return None
    return exe


# ------------------------------------------------------------------------- static check


@dataclass
class Tool:
    name: str  # row label
    cmd: list[str]
    prepare: object = None  # called before each timed run (not timed)
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    timeouts: int = 0
    last: subprocess.CompletedProcess | None = None

    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


def timed(
    cmd: list[str], cwd: Path, timeout: float
) -> tuple[float | None, subprocess.CompletedProcess | None]:
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None, None
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    # CPU seconds of the command and the workers it waited for (the machine may be shared)
    proc.cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return wall, proc


def count_py(tree: Path) -> tuple[int, int]:
    files = lines = 0
    for dirpath, _, names in os.walk(tree):
        for n in names:
            if n.endswith(".py"):
                files += 1
                with open(os.path.join(dirpath, n), "rb") as f:
                    lines += f.read().count(b"\n")
    return files, lines


def static_tools(tree: Path, ruff: Path | None, torchfix: Path | None) -> list[Tool]:
    # cold: the cache dir is deleted first, so the run parses every file and writes the cache
    # (a user's first run); warm, right after it: every file is a cache hit
    ml = [sys.executable, "-m", "metalint", "check", "--exit-zero"]
    cache = tree / ".metalint_cache"
    tools = [
        Tool(
            "metalint cold",
            [*ml, "."],
            lambda: shutil.rmtree(cache, ignore_errors=True),
        ),
        Tool("metalint warm", [*ml, "."]),
    ]
    if ruff is not None:
        rc = [
            str(ruff),
            "check",
            "--isolated",
            "--exit-zero",
            "--output-format",
            "concise",
        ]
        tools += [
            Tool("ruff (no cache)", [*rc, "--no-cache", "."]),
            Tool("ruff (cache)", [*rc, "."]),
        ]
    if torchfix is not None:
        tools.append(Tool("TorchFix", [str(torchfix), "."]))
    # not a linter: CPython's own parser on every file, the floor under any Python-hosted check
    floor = [sys.executable, str(ROOT / "bench" / "parse_floor.py"), "."]
    tools += [Tool(FLOOR, floor), Tool(FLOOR_WALK, [*floor, "--walk"])]
    return tools


def run_static(
    trees: dict[str, Path],
    ruff: Path | None,
    torchfix: Path | None,
    reps: int,
    timeout: float,
    single_above: float = float("inf"),
) -> list[dict]:
    rows = []
    for name, tree in trees.items():
        files, lines = count_py(tree)
        tools = static_tools(tree, ruff, torchfix)
        log(f"{name}: {files} files, {lines} lines; priming caches")
        for t in tools:
            if t.name == "ruff (cache)":
                timed(t.cmd, tree, timeout)  # fill the cache once
        for rep in range(reps):
            for t in tools:
                if t.timeouts or (t.times and t.times[0] > single_above):
                    continue  # once past the limit (or slow), not again
                if callable(t.prepare):
                    t.prepare()
                wall, proc = timed(t.cmd, tree, timeout)
                if wall is None:
                    t.timeouts += 1
                    log(f"{name} rep {rep + 1}: {t.name}: >{timeout:.0f} s (killed)")
                    continue
                t.times.append(wall)
                t.cpu.append(proc.cpu_s)
                t.last = proc
                log(f"{name} rep {rep + 1}: {t.name}: {wall:.2f} s (exit {proc.returncode})")
        for t in tools:
            tail = summary_line(t.last) if t.last is not None else ""
            rows.append(
                {
                    "tree": name,
                    "files": files,
                    "lines": lines,
                    "tool": t.name,
                    "median_s": t.median(),
                    "cpu_s": statistics.median(t.cpu) if t.cpu else None,
                    "runs": len(t.times),
                    "timed_out": bool(t.timeouts),
                    "timeout_s": timeout,
                    "exit": t.last.returncode if t.last else None,
                    "summary": tail[:120],
                }
            )
    return rows


def summary_line(proc: subprocess.CompletedProcess) -> str:
    """What the tool said it did: its 'Found ...' / 'Finished checking ...' line."""
    lines = (proc.stdout + "\n" + proc.stderr).splitlines()
    for line in reversed(lines):
        if (
            line.startswith(("Found ", "Finished checking", "All checks passed", "No ", "Parsed "))
            and "fix" not in line
        ):
            return line.strip()
    return lines[-1].strip() if lines else ""


def fmt_s(row: dict) -> str:
    if row["median_s"] is None:
        return f">{row['timeout_s']:.0f}" if row["timed_out"] else "n/a"
    return f"{row['median_s']:.2f}"


def ratio(a: dict | None, b: dict | None) -> tuple[str, float | None]:
    """``a``/``b`` as text; a timed-out denominator gives an upper bound (``<``)."""
    if a is None or b is None or a["median_s"] is None:
        return "n/a", None
    if b["median_s"] is None:
        if b["timed_out"]:
            r = a["median_s"] / b["timeout_s"]
            return f"<{r:.3f}", r
        return "n/a", None
    r = a["median_s"] / b["median_s"]
    return (f"{r:.3f}" if r < 1 else f"{r:.2f}"), r


def static_table(rows: list[dict]) -> str:
    out = [
        (
            "| tree | .py files | lines | tool | wall s (median) | CPU s (median) | runs | files/s "
            "| exit | last line of output |"
        ),
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        fps = f"{r['files'] / r['median_s']:.0f}" if r["median_s"] else "n/a"
        summary = r["summary"].replace("|", "\\|")
        cpu = f"{r['cpu_s']:.2f}" if r.get("cpu_s") is not None else "n/a"
        out.append(
            f"| {r['tree']} | {r['files']} | {r['lines']} | {r['tool']} | {fmt_s(r)} | {cpu} | {r['runs']} "
            f"| {fps} | {r['exit'] if r['exit'] is not None else ''} | {summary} |"
        )
    out += ["", "| tree | ratio | value | target | met |", "|---|---|---:|---:|---|"]
    for tree in dict.fromkeys(r["tree"] for r in rows):
        by = {r["tool"]: r for r in rows if r["tree"] == tree}
        for label, a, b, target in (
            (
                "metalint cold / TorchFix",
                "metalint cold",
                "TorchFix",
                TARGETS["cold_vs_torchfix"],
            ),
            (
                "metalint cold / ruff (no cache)",
                "metalint cold",
                "ruff (no cache)",
                TARGETS["cold_vs_ruff"],
            ),
            (
                "metalint warm / ruff (cache)",
                "metalint warm",
                "ruff (cache)",
                TARGETS["warm_vs_ruff"],
            ),
            (
                "metalint warm / ruff (no cache)",
                "metalint warm",
                "ruff (no cache)",
                None,
            ),
            (f"{FLOOR} / ruff (no cache)", FLOOR, "ruff (no cache)", None),
            (f"{FLOOR_WALK} / ruff (no cache)", FLOOR_WALK, "ruff (no cache)", None),
            (f"metalint cold / {FLOOR}", "metalint cold", FLOOR, None),
        ):
            if b not in by:
                continue
            text, value = ratio(by.get(a), by.get(b))
            met = "" if value is None or target is None else ("yes" if value <= target else "no")
            out.append(
                f"| {tree} | {label} | {text} | {'≤ ' + str(target) if target else ''} | {met} |"
            )
    return "\n".join(out)


# --------------------------------------------------------------------------------- probe


PROBE_CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import torch, timm
from metalint.probe.build import probe
from metalint.probe.memory import PeakSampler, rss_anon
name = sys.argv[1]
make = lambda: timm.create_model(name)
torch.ones(1); gc.collect()
base = rss_anon(); t0 = time.perf_counter()
with PeakSampler() as eager:
    m = make()
eager_s = time.perf_counter() - t0
size = sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
del m; gc.collect()
eager_peak = eager.peak - base
base = rss_anon(); t0 = time.perf_counter()
with PeakSampler() as peak:
    res = probe(make, device=sys.argv[3], init="auto", label=name)
print(json.dumps({"model": name, "device": res.device, "model_mb": size / 2**20,
                  "eager_s": eager_s, "eager_peak_mb": eager_peak / 2**20,
                  "probe_s": time.perf_counter() - t0, "probe_peak_mb": (peak.peak - base) / 2**20,
                  "verdict": str(res.verdict()), "findings": len(res.findings)}))
"""


def run_probe_models(
    python: str, models: list[str], device: str, timeout: float
) -> tuple[list[dict], str]:
    r = sh([python, "-c", "import timm, metalint.probe.build"])
    if r.returncode != 0:
        return (
            [],
            f"real models skipped: `{python}` cannot import timm and metalint.probe ({r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''})",
        )
    rows = []
    for name in models:
        log(f"probe {name} ({device})")
        wall, proc = timed([python, "-c", PROBE_CHILD, name, str(ROOT), device], ROOT, timeout)
        if wall is None:
            rows.append({"model": name, "error": f"timed out after {timeout:.0f} s"})
        elif proc.returncode != 0:
            err = (proc.stderr.strip().splitlines() or ["?"])[-1]
            rows.append({"model": name, "error": err[:150]})
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows, ""


def probe_models_table(rows: list[dict]) -> str:
    out = [
        (
            "| model | device | params+buffers MB | eager build s | eager peak MB | probe s | probe peak MB "
            "| probe s ÷ eager | probe peak ÷ eager peak | verdict |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | | | | | | | | | error: {r['error']} |")
            continue
        ep = r["eager_peak_mb"]
        out.append(
            f"| {r['model']} | {r['device']} | {r['model_mb']:.1f} | {r['eager_s']:.2f} | {ep:.1f} | {r['probe_s']:.2f} "
            f"| {r['probe_peak_mb']:.1f} | {r['probe_s'] / r['eager_s']:.1f} "
            f"| {r['probe_peak_mb'] / ep:.2f} | {r['verdict']} ({r['findings']} findings) |"
            if ep > 0
            else f"| {r['model']} | {r['device']} | {r['model_mb']:.1f} | {r['eager_s']:.2f} | {ep:.1f} | {r['probe_s']:.2f} "
            f"| {r['probe_peak_mb']:.1f} | {r['probe_s'] / r['eager_s']:.1f} | n/a | {r['verdict']} |"
        )
    return "\n".join(out)


def run_probe_bench(args: list[str], timeout: float) -> str:
    script = ROOT / "bench" / "probe_bench.py"
    if not script.exists():
        return "bench/probe_bench.py not found."
    wall, proc = timed([sys.executable, str(script), *args], ROOT, timeout)
    if wall is None:
        return f"`probe_bench.py {' '.join(args)}` timed out after {timeout:.0f} s."
    if proc.returncode != 0:
        return f"`probe_bench.py {' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    try:
        d = json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError:
        return f"`probe_bench.py {' '.join(args)}` printed no JSON: {proc.stdout[-300:]}"
    mb = lambda b: f"{b / 2**20:.1f}"
    head = (
        "| model | device | model MB | eager build peak MB | probe peak MB | probe peak ÷ model "
        "| meta build RSS delta MB | probe s | verdict |\n|---|---|---:|---:|---:|---:|---:|---:|---|"
    )
    row = (
        f"| {d.get('layers')} x Linear({d.get('width')}, {d.get('width')}) | {d.get('device')} "
        f"| {mb(d['model_bytes'])} | {mb(d['eager_build_peak_delta_bytes'])} | {mb(d['probe_peak_delta_bytes'])} "
        f"| {d.get('probe_peak_over_model')} | {mb(d.get('meta_build_rss_delta_bytes') or 0)} "
        f"| {d.get('probe_seconds')} | {d.get('verdict')} |"
    )
    return f"`{' '.join(['python bench/probe_bench.py', *args])}`\n\n{head}\n{row}"


def accelerate_dir(work: Path) -> Path | None:
    """A folder from which ``accelerate`` (pinned) and what it imports are importable beside
    this environment's torch and safetensors, so that the loader bench can compare with it
    without touching metalint's venv; None when it cannot be installed."""
    dest = work / "accelerate"
    if not (dest / "accelerate").exists():
        log(f"accelerate=={PINS['accelerate']} into {dest}")
        try:
            pip(
                sys.executable,
                "install",
                "-q",
                "--target",
                str(dest),
                "--no-deps",
                f"accelerate=={PINS['accelerate']}",
                "huggingface_hub",
                "numpy",
                "packaging",
                "psutil",
                "pyyaml",
            )
        except SystemExit as exc:
            log(str(exc))
            return None
    return dest


def run_loader_bench(args: list[str], work: Path, timeout: float) -> str:
    script = ROOT / "bench" / "loader_bench.py"
    if not script.exists():
        return "bench/loader_bench.py not found."
    out = work / "loader.md"
    wall, proc = timed([sys.executable, str(script), *args, "--out", str(out)], ROOT, timeout)
    if wall is None:
        return f"`loader_bench.py {' '.join(args)}` timed out after {timeout:.0f} s."
    if proc.returncode != 0 or not out.exists():
        return f"`loader_bench.py {' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return f"`{' '.join(['python bench/loader_bench.py', *args])}` ({wall:.0f} s)\n\n{out.read_text().strip()}"


# ------------------------------------------------------------------------------ context


def version_of(cmd: list[str]) -> str:
    try:
        r = sh(cmd)
    except OSError:
        return "n/a"
    return (r.stdout.strip() or r.stderr.strip()).splitlines()[-1] if r.returncode == 0 else "n/a"


def context(ruff: Path | None, torchfix: Path | None, trees: dict[str, Path]) -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    sha = version_of(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = sh(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]
    ).stdout.strip()
    mod = sh(
        [
            sys.executable,
            "-c",
            (
                "import torch, libcst, importlib.metadata as m; "
                "print(torch.__version__, m.version('libcst'), m.version('metalint'))"
            ),
        ]
    ).stdout.split()
    mod += ["?"] * (3 - len(mod))
    return [
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        (
            f"- machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), load average at start "
            f"{os.getloadavg()[0]:.1f}"
        ),
        (
            f"- python {platform.python_version()}, torch {mod[0]}, libcst {mod[1]}, metalint {mod[2]} "
            f"(git {sha}{', uncommitted changes in the tree' if dirty else ''})"
        ),
        f"- ruff {version_of([str(ruff), '--version']).split()[-1] if ruff else 'not installed'}, "
        f"TorchFix {version_of([str(torchfix), '--version']) if torchfix else 'not installed'}, "
        + ", ".join(f"{n} {PINS.get(n, '(local ' + str(p) + ')')}" for n, p in trees.items()),
    ]


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="timm only, 1 repetition, tiny probe/loader",
    )
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions per tool (default 3; --quick 1)",
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds before a run is killed")
    ap.add_argument(
        "--single-above",
        type=float,
        default=120,
        help="a tool whose first run took longer than this many seconds runs once",
    )
    ap.add_argument(
        "--trees",
        default=None,
        help="comma-separated: timm,transformers (default both)",
    )
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="check a local folder instead of downloading (repeatable)",
    )
    ap.add_argument("--workdir", type=Path, help="reuse this folder for downloads and venvs")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--no-ruff", action="store_true")
    ap.add_argument("--no-torchfix", action="store_true")
    ap.add_argument(
        "--no-accelerate",
        action="store_true",
        help="leave accelerate out of the loader comparison (nothing installed for it)",
    )
    ap.add_argument("--static-only", action="store_true", help="skip probe, loader and GPU")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="add bench/profile_check.py's phase table for the first tree",
    )
    ap.add_argument(
        "--probe-python",
        default=sys.executable,
        help="python that can import timm and metalint, for the real-model probe",
    )
    ap.add_argument("--probe-models", default=",".join(PROBE_MODELS))
    a = ap.parse_args(argv)
    reps = a.reps or (1 if a.quick else 3)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="metalint-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work dir {work}")
    start = time.time()
    try:
        trees: dict[str, Path] = {}
        for spec in a.tree:
            name, _, path = spec.partition("=")
            trees[name] = Path(path).resolve()
        if not a.tree:
            for name in (a.trees or ("timm" if a.quick else "timm,transformers")).split(","):
                trees[name] = fetch_tree(work, name)
        ruff = None if a.no_ruff else tool_venv(work, "ruff")
        torchfix = None if a.no_torchfix else tool_venv(work, "torchfix")
        report = [
            "# metalint benchmarks",
            "",
            *context(ruff, torchfix, trees),
            "",
            f"Command: `python bench/run.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
            "",
            "## Static check",
            "",
            (
                f"Each tool runs up to {reps} time(s), alternating, on the unzipped wheel (a tool whose "
                f"first run took more than {a.single_above:.0f} s runs once; one past {a.timeout:.0f} s is "
                "killed: `>T`); median wall time of the whole command (process start included) and "
                "median CPU seconds (user+sys of the command and its worker processes: the figure to "
                "trust when the machine is shared). metalint: `metalint check --exit-zero .` (cold: the "
                "cache dir deleted first, so it parses everything and writes the cache, as a first run "
                "does; warm: the run right after, every file a cache hit). ruff: `ruff check --isolated "
                "--exit-zero --output-format concise .` (its default rules; no cache: `--no-cache`; "
                "cache: after a priming run). TorchFix: `torchfix .` (its default rules). Every tool "
                "uses all CPUs by default. The two floor rows are no linter: `bench/parse_floor.py` "
                "runs CPython's own parser (`ast.parse`) on every file, and with `--walk` visits every "
                "node once, in forked workers as metalint's: the least any checker written in Python "
                "pays on the tree, before a rule runs."
            ),
            "",
        ]
        rows = run_static(trees, ruff, torchfix, reps, a.timeout, a.single_above)
        report += [static_table(rows), ""]
        if a.profile:
            first = next(iter(trees))
            log(f"profile of a cold check of {first}")
            _, proc = timed(
                [
                    sys.executable,
                    str(ROOT / "bench" / "profile_check.py"),
                    str(trees[first]),
                ],
                ROOT,
                a.timeout,
            )
            report += [
                f"## Where time goes: one cold check of {first}",
                "",
                (
                    f"`python bench/profile_check.py {first}` (one process, no cache, CPU seconds "
                    "per phase; process start measured in fresh interpreters)"
                ),
                "",
                proc.stdout.strip()
                if proc is not None and proc.returncode == 0
                else "profile failed",
                "",
            ]
        if not a.static_only:
            report += ["## Probe", ""]
            report += [run_probe_bench(["--tiny"] if a.quick else [], a.timeout), ""]
            models = [m for m in a.probe_models.split(",") if m][: 1 if a.quick else None]
            prows, note = run_probe_models(a.probe_python, models, "cpu", a.timeout)
            report += [
                (
                    "Real models (timm), `probe(create_model(name), init='auto')` in a fresh process; "
                    "peak = max RssAnon sampled every 2 ms minus RssAnon before; eager = "
                    "`create_model(name)` in the same process before the probe."
                ),
                "",
            ]
            report += [probe_models_table(prows) if prows else note, ""]
            # three fresh runs of each method, interleaved (peak = max, wall = min): one
            # sub-second run on a shared box is noise
            loader_args = ["--tiny"] if a.quick else ["--repeat", "3"]
            acc = None if a.no_accelerate else accelerate_dir(work)
            if acc is not None:
                loader_args += ["--accelerate-path", str(acc)]
            report += [
                "## Loader",
                "",
                run_loader_bench(loader_args, work, a.timeout),
                "",
            ]
            report += ["## GPU", ""]
            cuda = sh(
                [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"]
            ).stdout.strip()
            if cuda == "True":
                gpu = sh(
                    [
                        sys.executable,
                        "-c",
                        "import torch; print(torch.cuda.get_device_name())",
                    ]
                ).stdout.strip()
                report += [
                    f"Device: {gpu}",
                    "",
                    run_probe_bench(
                        ["--device", "cuda"] + (["--tiny"] if a.quick else []),
                        a.timeout,
                    ),
                    "",
                    "bench/loader_bench.py has no device option: its figures above are CPU.",
                ]
            else:
                report += ["GPU: not available in this run (`torch.cuda.is_available()` is False)."]
            report.append("")
        report += [
            (
                f"Total bench time {time.time() - start:.0f} s; load average at end "
                f"{os.getloadavg()[0]:.1f}."
            )
        ]
        text = "\n".join(report) + "\n"
        print(text)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(text, encoding="utf-8")
        return 0
    finally:
        if not (a.keep or a.workdir):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
