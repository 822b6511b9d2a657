"""Every metalint benchmark, side by side with what users would use instead: one page.

    python bench/run.py --out bench/RESULTS.md                 # measure what changed, write it all
    python bench/run.py --only speed,fix --out bench/RESULTS.md  # re-measure these sections
    python bench/run.py --render --out bench/RESULTS.md        # write the page, measure nothing
    python bench/run.py --quick ...                            # the short variant of each section

The page is written whole from the stored results of its sections, ``bench/results/<section>.json``
(``--results DIR``): each holds the figures, the date, the commit and the command that measured
them. A section is measured again when it is named in ``--only``, or (without ``--only``) when
it has no stored result or metalint's code changed since (a hash of ``metalint/`` and the
section's bench scripts with docstrings and comments left out), or the stored result was
``--quick`` and this run is not. Sections:

- ``speed``: ``metalint check`` cold and warm, and warm on one file of timm (what pre-commit
  runs on one staged file), against ``ruff check``, TorchFix (timm only: it takes ~1,000 s on
  transformers), pyflakes (a Python linter that only resolves names) and the floor under any
  checker written in Python (``bench/parse_floor.py``: CPython's ``ast.parse`` of every file,
  and one ``ast.walk``; libcst's parse of every file, and metalint's own reading: CPython's
  parse, then libcst's of what the rules read), on the pinned timm and
  transformers wheels (downloaded into ``--workdir``, or ``--tree NAME=PATH``: copied first).
- ``fix``: ``metalint fix --write`` on 1k, 2k and 4k small generated files and on timm copied
  once and twice, with the ratio per doubling.
- ``truth``: ``bench/rule_audit.py`` (every finding judged by probing the model roots that
  contain its class) on timm and transformers; ``--quick``: a sample of roots.
- ``coverage``: ``bench/fix_coverage.py`` on timm (findings offered a fix, safe, resolved,
  rewritten classes passing the probe).
- ``probe``: ``bench/probe_bench.py`` and ``probe()`` on real timm models (``--probe-python``).
- ``loader``: ``bench/loader_bench.py`` against ``torch.load``, ``safetensors`` and accelerate.
- ``sharded``: ``bench/sharded_load_bench.py`` (FSDP2 over gloo; ``--sharded-python`` must have
  numpy).
- ``gpu``: ``bench/loader_gpu.py`` and ``probe_bench.py --device cuda``; without CUDA the
  stored result is kept as it is.
- ``profile``: ``bench/profile_check.py`` on timm (where a cold check's CPU time goes).
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
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
BENCH = ROOT / "bench"
PINS = {
    "timm": "1.0.31",
    "transformers": "5.23.0",
    "ruff": "0.17.6",
    "torchfix": "0.7.0",
    "pyflakes": "4.1.0",
    "accelerate": "1.15.0",
}
PROBE_MODELS = ("vit_tiny_patch16_224", "convnext_atto", "resnet18")
#: rows of bench/parse_floor.py: what CPython alone costs on the same tree
FLOOR = "floor: ast.parse"
FLOOR_WALK = "floor: ast.parse + ast.walk"
#: what a libcst-based tool pays to read the tree, and what ``metalint check`` pays to read it
#: before any rule runs (CPython's parse, then libcst's of what the rules read)
LIBCST_WHOLE = "libcst parse, every file"
LIBCST_READ = "metalint's reading: ast.parse + libcst of what rules read"
#: section -> the bench scripts whose code its figures depend on (besides metalint/)
SECTIONS = {
    "speed": ("parse_floor.py",),
    "fix": (),
    "truth": ("rule_audit.py", "audit_models.py"),
    "coverage": ("fix_coverage.py",),
    "probe": ("probe_bench.py",),
    "loader": ("loader_bench.py",),
    "sharded": ("sharded_load_bench.py",),
    "gpu": ("loader_gpu.py", "probe_bench.py"),
    "profile": ("profile_check.py",),
}
#: the file of timm that the one-file run checks (pre-commit with one staged file)
ONE_FILE = "models/vision_transformer.py"


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
    return dest / name if (dest / name).is_dir() else dest


def local_tree(work: Path, name: str, path: Path) -> Path:
    """A copy of ``path`` in the work dir: the runs write their caches into the tree."""
    dest = work / "trees" / "local" / name / path.name
    if not dest.exists():
        shutil.copytree(path, dest, ignore=shutil.ignore_patterns("__pycache__", ".metalint_cache"))
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


# ------------------------------------------------------------------------- timing


@dataclass
class Tool:
    name: str  # row label
    cmd: list[str]
    prepare: object = None  # called before each timed run (not timed)
    summary: object = None  # proc -> the row's last column (default: summary_line)
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    timeouts: int = 0
    last: subprocess.CompletedProcess | None = None


def timed(
    cmd: list[str], cwd: Path, timeout: float
) -> tuple[float | None, subprocess.CompletedProcess | None]:
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
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


def run_tools(label: str, tools: list[Tool], cwd: Path, reps: int, opts) -> None:
    """``reps`` alternating runs of each tool; one past ``--single-above`` s runs once, one
    past ``--timeout`` is killed (and not run again)."""
    for rep in range(reps):
        for t in tools:
            if t.timeouts or (t.times and t.times[0] > opts.single_above):
                continue
            if callable(t.prepare):
                t.prepare()
            wall, proc = timed(t.cmd, cwd, opts.timeout)
            if wall is None:
                t.timeouts += 1
                log(f"{label} rep {rep + 1}: {t.name}: >{opts.timeout:.0f} s (killed)")
                continue
            t.times.append(wall)
            t.cpu.append(proc.cpu_s)
            t.last = proc
            log(f"{label} rep {rep + 1}: {t.name}: {wall:.2f} s (exit {proc.returncode})")


def tool_row(t: Tool, timeout: float) -> dict:
    return {
        "tool": t.name,
        "median_s": statistics.median(t.times) if t.times else None,
        "cpu_s": statistics.median(t.cpu) if t.cpu else None,
        "runs": len(t.times),
        "timed_out": bool(t.timeouts),
        "timeout_s": timeout,
        "exit": t.last.returncode if t.last else None,
        "summary": ((t.summary or summary_line)(t.last) if t.last is not None else "")[:120],
    }


def fmt_s(row: dict | None, key: str = "median_s") -> str:
    if row is None:
        return "n/a"
    if row.get(key) is None:
        return f">{row['timeout_s']:.0f}" if row.get("timed_out") else "n/a"
    return f"{row[key]:.2f}"


def ratio(a: dict | None, b: dict | None) -> tuple[str, float | None]:
    """``a``/``b`` as text; a timed-out denominator gives an upper bound (``<``)."""
    if a is None or b is None or a.get("median_s") is None:
        return "n/a", None
    if b.get("median_s") is None:
        if b.get("timed_out"):
            r = a["median_s"] / b["timeout_s"]
            return f"<{r:.3f}", r
        return "n/a", None
    r = a["median_s"] / b["median_s"]
    return (f"{r:.3f}" if r < 1 else f"{r:.2f}"), r


# ---------------------------------------------------------------------------- speed


def metalint_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "metalint", *args]


def message_count(proc: subprocess.CompletedProcess) -> str:
    """pyflakes prints one line per message and no summary."""
    return f"{len(proc.stdout.splitlines())} messages."


def speed_tools(
    tree: Path, ruff: Path | None, torchfix: Path | None, pyflakes: Path | None = None
) -> list[Tool]:
    # cold: the cache dir is deleted first, so the run parses every file and writes the cache
    # (a user's first run); warm, right after it: every file is a cache hit
    ml = metalint_cmd("check", "--exit-zero")
    cache = tree / ".metalint_cache"
    tools = [
        Tool("metalint cold", [*ml, "."], lambda: shutil.rmtree(cache, ignore_errors=True)),
        Tool("metalint warm", [*ml, "."]),
    ]
    one = tree / ONE_FILE
    if one.is_file():
        # pre-commit on one staged file: the hook's command, the rest of the tree cached
        tools.append(Tool("metalint warm, one file", [*ml, "--force-exclude", ONE_FILE]))
    if ruff is not None:
        rc = [str(ruff), "check", "--isolated", "--exit-zero", "--output-format", "concise"]
        tools += [
            Tool("ruff (no cache)", [*rc, "--no-cache", "."]),
            Tool("ruff (cache)", [*rc, "."]),
        ]
        if one.is_file():
            tools.append(Tool("ruff (cache), one file", [*rc, ONE_FILE]))
    if torchfix is not None:
        tools.append(Tool("TorchFix", [str(torchfix), "."]))
    if pyflakes is not None:
        # a linter written in Python that only resolves names: one pass over CPython's tree
        tools.append(Tool("pyflakes", [str(pyflakes), "."], summary=message_count))
    # not a linter: CPython's own parser on every file, the floor under any Python-hosted check
    floor = [sys.executable, str(BENCH / "parse_floor.py"), "."]
    return [
        *tools,
        Tool(FLOOR, floor),
        Tool(FLOOR_WALK, [*floor, "--walk"]),
        Tool(LIBCST_WHOLE, [*floor, "--libcst", "whole"]),
        Tool(LIBCST_READ, [*floor, "--libcst", "read"]),
    ]


def measure_speed(ctx: Context) -> dict:
    ruff = None if ctx.opts.no_ruff else tool_venv(ctx.work, "ruff")
    pyflakes = None if ctx.opts.no_pyflakes else tool_venv(ctx.work, "pyflakes")
    trees = []
    for name, tree in ctx.trees().items():
        torchfix = None
        if name in ctx.opts.torchfix_trees.split(",") and not ctx.opts.no_torchfix:
            torchfix = tool_venv(ctx.work, "torchfix")
        files, lines = count_py(tree)
        tools = speed_tools(tree, ruff, torchfix, pyflakes)
        log(f"{name}: {files} files, {lines} lines; priming ruff's cache")
        for t in tools:
            if t.name == "ruff (cache)":
                timed(t.cmd, tree, ctx.opts.timeout)
        run_tools(name, tools, tree, ctx.reps, ctx.opts)
        rows = [tool_row(t, ctx.opts.timeout) for t in tools]
        trees.append({"tree": name, "files": files, "lines": lines, "rows": rows})
    return {
        "trees": trees,
        "reps": ctx.reps,
        "single_above": ctx.opts.single_above,
        "versions": {
            "ruff": version_of([str(ruff), "--version"]).split()[-1] if ruff else "not run",
            "TorchFix": PINS["torchfix"],
            "pyflakes": PINS["pyflakes"] if pyflakes else "not run",
            **{n: PINS.get(n, "local") for n in ctx.trees()},
        },
    }


SPEED_RATIOS = (
    ("metalint cold / floor: ast.parse", "metalint cold", FLOOR),
    ("metalint cold / ruff (no cache)", "metalint cold", "ruff (no cache)"),
    ("metalint warm / ruff (cache)", "metalint warm", "ruff (cache)"),
    (
        "metalint warm, one file / ruff (cache), one file",
        "metalint warm, one file",
        "ruff (cache), one file",
    ),
    ("metalint cold / TorchFix", "metalint cold", "TorchFix"),
    ("floor: ast.parse / ruff (no cache)", FLOOR, "ruff (no cache)"),
    ("pyflakes / floor: ast.parse", "pyflakes", FLOOR),
    ("metalint cold / pyflakes", "metalint cold", "pyflakes"),
    (f"{LIBCST_WHOLE} / floor: ast.parse", LIBCST_WHOLE, FLOOR),
    (f"{LIBCST_READ} / floor: ast.parse", LIBCST_READ, FLOOR),
    (f"metalint cold / {LIBCST_READ}", "metalint cold", LIBCST_READ),
)


def render_speed(res: dict) -> list[str]:
    data = res["data"]
    out = [
        "| tree | tool | wall s | CPU s | files/s | runs | last line of output |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for tr in data["trees"]:
        for r in tr["rows"]:
            nfiles = 1 if "one file" in r["tool"] else tr["files"]
            fps = f"{nfiles / r['median_s']:.0f}" if r["median_s"] else "n/a"
            summary = r["summary"].replace("|", "\\|")
            out.append(
                f"| {tr['tree']} ({tr['files']} files, {tr['lines']} lines) | {r['tool']} "
                f"| {fmt_s(r)} | {fmt_s(r, 'cpu_s')} | {fps} | {r['runs']} | {summary} |"
            )
    out += ["", "| tree | ratio | wall | CPU |", "|---|---|---:|---:|"]
    for tr in data["trees"]:
        by = {r["tool"]: r for r in tr["rows"]}
        for label, a, b in SPEED_RATIOS:
            if a in by and b in by:
                cpu = ratio(*({"median_s": by[t]["cpu_s"]} for t in (a, b)))[0]
                out.append(f"| {tr['tree']} | {label} | {ratio(by[a], by[b])[0]} | {cpu} |")
    versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items())
    return [
        *out,
        "",
        f"Median of {data['reps']} alternating runs (a tool whose first run took more than "
        f"{data['single_above']:.0f} s runs once); wall seconds of the whole command, process start "
        "included, and CPU seconds (user + sys of the command and its workers: the figure to trust "
        "on a shared machine). metalint: `metalint check --exit-zero .`; cold: its cache deleted "
        "first; warm: every file a cache hit; one file: `metalint check --force-exclude "
        f"{ONE_FILE}` with the rest of the tree cached (what the pre-commit hook runs for one "
        "staged file: every file of the project is read, from the cache). ruff: `ruff check "
        "--isolated --exit-zero --output-format concise` (its default rules). TorchFix: "
        "`torchfix .` (it checks only files containing `torch`). pyflakes: `pyflakes .`, a "
        "linter written in Python that only resolves names, in one process. The floor rows are "
        "no linter: CPython's `ast.parse` of every file (and one `ast.walk`) in forked workers, "
        "the least any checker written in Python pays. The libcst rows are no linter either "
        "(`bench/parse_floor.py --libcst`): libcst's parse of every file, what a "
        "format-preserving tool pays to read the tree, and what `metalint check` pays to read "
        "it before any rule runs (CPython's parse, then libcst's of the code its rules read). "
        f"Versions: {versions}.",
    ]


# ------------------------------------------------------------------------------ fix

GENERATED = """import torch
from torch import nn


class LayerScale{i}(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Clean{i}(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)
"""


def generated_tree(base: Path, n: int) -> Path:
    """``n`` small files, each a fixable ML001 class and a clean one, in packages of 100."""
    dest = base / f"generated-{n}"
    if not dest.exists():
        for i in range(n):
            pkg = dest / f"pkg{i // 100}"
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / f"layer{i}.py").write_text(GENERATED.format(i=i))
    return dest


def fix_case(label: str, source: list[Path], work: Path, ctx: Context) -> dict:
    """``metalint fix --write .`` on a fresh copy of the sources (one folder per source)."""
    dest = work / "fix-run"

    def prepare() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        for i, src in enumerate(source):
            shutil.copytree(
                src, dest / f"{src.name}{i or ''}", ignore=shutil.ignore_patterns(".metalint_cache")
            )

    tool = Tool(label, metalint_cmd("fix", "--write", "--no-cache", "."), prepare)
    prepare()
    files, lines = count_py(dest)
    run_tools("fix", [tool], dest, ctx.reps, ctx.opts)
    row = tool_row(tool, ctx.opts.timeout)
    row.update(files=files, lines=lines, summary=fix_summary(tool.last))
    return row


def fix_summary(proc: subprocess.CompletedProcess | None) -> str:
    if proc is None:
        return ""
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("Fixed ")]
    return lines[-1].strip() if lines else (proc.stdout + proc.stderr).strip()[-120:]


def measure_fix(ctx: Context) -> dict:
    work = ctx.work / "fix"
    work.mkdir(parents=True, exist_ok=True)
    sizes = [
        int(n)
        for n in (
            ctx.opts.fix_sizes or ("250,500,1000" if ctx.opts.quick else "1000,2000,4000")
        ).split(",")
    ]
    rows = [fix_case(f"{n} generated files", [generated_tree(work, n)], work, ctx) for n in sizes]
    trees = ctx.trees()
    if "timm" in trees:
        timm = trees["timm"]
        rows.append(fix_case("timm, once", [timm], work, ctx))
        rows.append(fix_case("timm, twice", [timm, timm], work, ctx))
    shutil.rmtree(work / "fix-run", ignore_errors=True)
    return {"rows": rows, "reps": ctx.reps, "single_above": ctx.opts.single_above}


def render_fix(res: dict) -> list[str]:
    rows = res["data"]["rows"]
    out = [
        "| tree | .py files | lines | wall s | CPU s | per doubling: wall / CPU | runs | output |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    prev = None
    for r in rows:
        doubling = ""
        if prev is not None and r["files"] == 2 * prev["files"]:
            cpu = ratio(*({"median_s": x["cpu_s"]} for x in (r, prev)))[0]
            doubling = f"{ratio(r, prev)[0]} / {cpu}"
        out.append(
            f"| {r['tool']} | {r['files']} | {r['lines']} | {fmt_s(r)} | {fmt_s(r, 'cpu_s')} "
            f"| {doubling} | {r['runs']} | {r['summary']} |"
        )
        prev = r
    return [
        *out,
        "",
        f"`metalint fix --write --no-cache .` on a fresh copy (median of {res['data']['reps']}; "
        f"a run past {res['data']['single_above']:.0f} s runs once). Generated files: one class whose "
        "parameter is made from a value (a safe ML001 fix) and one clean class each, 20 lines. "
        "A ratio of 2.0 per doubling is linear.",
    ]


# ---------------------------------------------------------------------------- truth


def lib_python(opts, lib: str) -> str:
    return getattr(opts, f"{lib}_python", None) or sys.executable


def measure_truth(ctx: Context) -> dict:
    work = ctx.work / "audit"
    work.mkdir(parents=True, exist_ok=True)
    args = []
    libs = ["timm", "transformers"]
    for lib in libs:
        args += ["--python", f"{lib}={lib_python(ctx.opts, lib)}"]
    if ctx.opts.quick:
        # a sample: a few roots of each library, then the roots its findings name (up to 25),
        # no class probed alone
        args += ["--limit", "timm=8", "--every", "transformers=100", "--limit", "transformers=8"]
        args += ["--extra-roots", "25", "--no-alone", "timm", "--no-alone", "transformers"]
    args += ["--timeout", "120", "--workdir", str(work), "--json", str(work / "verdicts.json")]
    args += libs
    wall, proc = timed(
        [sys.executable, str(BENCH / "rule_audit.py"), *args], ROOT, ctx.opts.long_timeout
    )
    if wall is None or proc.returncode != 0:
        return {"error": "timed out" if wall is None else proc.stderr.strip()[-300:], "args": args}
    verdicts = json.loads((work / "verdicts.json").read_text())
    summary = [line[2:] for line in proc.stdout.splitlines() if line.startswith("- ")]
    return {
        "args": [a if not a.startswith("/") else Path(a).name for a in args],
        "wall_s": wall,
        "verdicts": [{k: v[k] for k in ("library", "code", "verdict", "judged")} for v in verdicts],
        "summary": summary[:2],
    }


SAMPLE = (
    "a sample of each library's roots (`--limit`, `--every`) and up to 25 roots its findings "
    "name (`--extra-roots`), no class probed alone (findings on classes outside the built roots "
    "are not judged),"
)


def render_truth(res: dict) -> list[str]:
    data = res["data"]
    if "error" in data:
        return [f"Not measured: {data['error']}"]
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for v in data["verdicts"]:
        for key in ((v["library"], v["code"]), (v["library"], "all rules")):
            c = counts.setdefault(key, {"confirmed": 0, "refuted": 0, "unproven": 0})
            c[v["verdict"]] += 1
    out = [
        "| library | rule | judged | confirmed | refuted | unproven | precision (confirmed ÷ proved) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (lib, code), c in sorted(
        counts.items(), key=lambda kv: (kv[0][0], kv[0][1] == "all rules", kv[0][1])
    ):
        proved = c["confirmed"] + c["refuted"]
        prec = f"{c['confirmed'] / proved:.0%}" if proved else "n/a"
        name = f"**{code}**" if code == "all rules" else code
        out.append(
            f"| {lib} | {name} | {sum(c.values())} | {c['confirmed']} | {c['refuted']} "
            f"| {c['unproven']} | {prec} |"
        )
    ran = f"Ran `python bench/rule_audit.py {' '.join(data['args'])}` ({data['wall_s']:.0f} s): "
    how = (
        f"{SAMPLE if res.get('quick') else 'every root of each library'} built at tiny size and "
        "probed under `--init auto`; a finding is confirmed when the probe saw its tensor lost under a "
        "root, refuted when every root built it and it survived, unproven when no root made it."
    )
    return [*out, "", ran + how, "", *(f"- {line}" for line in data["summary"])]


# ------------------------------------------------------------------------- coverage


def measure_coverage(ctx: Context) -> dict:
    timm = ctx.trees().get("timm")
    if timm is None:
        return {"error": "no timm tree"}
    python = lib_python(ctx.opts, "timm")
    spec = f"timm={timm}" if ctx.opts.quick else f"timm={timm}:{python}"
    out = ctx.work / "coverage.json"
    cmd = [sys.executable, str(BENCH / "fix_coverage.py"), "--lib", spec, "--probe-timeout", "120"]
    wall, proc = timed([*cmd, "--json", str(out)], ROOT, ctx.opts.long_timeout)
    if wall is None or proc.returncode != 0:
        return {"error": "timed out" if wall is None else proc.stderr.strip()[-300:]}
    return {"results": json.loads(out.read_text()), "wall_s": wall, "probed": not ctx.opts.quick}


def render_coverage(res: dict) -> list[str]:
    data = res["data"]
    if "error" in data:
        return [f"Not measured: {data['error']}"]
    sys.path.insert(0, str(BENCH))
    import fix_coverage

    note = (
        "Rewritten classes probed (`metalint.fix.verify`) with timm's interpreter."
        if data["probed"]
        else "`--quick`: `bench/fix_coverage.py --lib timm=DIR` without an interpreter: no probe "
        "of the rewritten classes and no import check (those columns are empty)."
    )
    return [fix_coverage.markdown(data["results"]), "", note]


# ------------------------------------------------------------------------ probe etc.

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


def script_json(args: list[str], timeout: float, python: str = sys.executable) -> dict:
    """Run a bench script that prints JSON last; its object, or ``{"error": ...}``."""
    wall, proc = timed([python, *args], ROOT, timeout)
    if wall is None:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    try:
        return json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError:
        return {"error": f"no JSON: {proc.stdout[-200:]}"}


def script_text(args: list[str], timeout: float, python: str = sys.executable) -> dict:
    """Run a bench script that prints a markdown table: ``{"table", "wall_s"}``."""
    wall, proc = timed([python, *args], ROOT, timeout)
    if wall is None:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return {"table": proc.stdout.strip(), "wall_s": wall}


def measure_probe(ctx: Context) -> dict:
    synthetic = script_json(
        [str(BENCH / "probe_bench.py"), *(["--tiny"] if ctx.opts.quick else [])], ctx.opts.timeout
    )
    python = ctx.opts.probe_python
    r = sh([python, "-c", "import timm, torch"])
    models = []
    if r.returncode == 0:
        for name in PROBE_MODELS[: 1 if ctx.opts.quick else None]:
            log(f"probe {name}")
            models.append(
                script_json(["-c", PROBE_CHILD, name, str(ROOT), "cpu"], ctx.opts.timeout, python)
            )
    return {"synthetic": synthetic, "models": models}


def render_probe(res: dict) -> list[str]:
    d = res["data"]["synthetic"]
    mb = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    out = [
        "| model | params+buffers MB | eager build s | eager peak MB | probe s | probe peak MB | probe peak ÷ eager peak | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    if "error" not in d:
        out.append(
            f"| {d['layers']} x Linear({d['width']}, {d['width']}) | {mb(d['model_bytes'])} | | "
            f"{mb(d['eager_build_peak_delta_bytes'])} | {d['probe_seconds']} | {mb(d['probe_peak_delta_bytes'])} "
            f"| {d['probe_peak_over_model']} (of the model) | {d['verdict']} |"
        )
    for m in res["data"]["models"]:
        if "error" in m:
            out.append(f"| ? | | | | | | | error: {m['error']} |")
            continue
        ep = m["eager_peak_mb"]
        out.append(
            f"| timm `{m['model']}` | {m['model_mb']:.1f} | {m['eager_s']:.2f} | {ep:.1f} | {m['probe_s']:.2f} "
            f"| {m['probe_peak_mb']:.1f} | {m['probe_peak_mb'] / ep if ep > 0 else 0:.2f} "
            f"| {m['verdict']} ({m['findings']} findings) |"
        )
    return [
        *out,
        "",
        "`probe(factory, init='auto')` on the CPU in a fresh process; peak = max RssAnon sampled "
        "every 2 ms minus RssAnon before (the meta build allocates nothing; the eager build it "
        "compares with is the peak). timm models: `create_model(name)`.",
    ]


def measure_loader(ctx: Context) -> dict:
    args = ["--tiny"] if ctx.opts.quick else ["--repeat", "3"]
    acc = None if ctx.opts.no_accelerate else accelerate_dir(ctx.work)
    if acc is not None:
        args += ["--accelerate-path", str(acc)]
    out = ctx.work / "loader.md"
    res = script_text([str(BENCH / "loader_bench.py"), *args, "--out", str(out)], ctx.opts.timeout)
    if "error" not in res and out.exists():
        res["table"] = out.read_text().strip()
    return res


def measure_sharded(ctx: Context) -> dict:
    args = ["--tiny"] if ctx.opts.quick else ["--repeat", "2"]
    out = ctx.work / "sharded.md"
    script = [str(BENCH / "sharded_load_bench.py"), *args, "--out", str(out)]
    res = script_text(script, ctx.opts.long_timeout, ctx.opts.sharded_python)
    if "error" not in res and out.exists():
        res["table"] = out.read_text().strip()  # without the progress lines
    return res


def measure_gpu(ctx: Context) -> dict | None:
    cuda = sh(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"]
    ).stdout.strip()
    if cuda != "True":
        return None  # keep the stored result
    loader = script_text([str(BENCH / "loader_gpu.py")], ctx.opts.timeout)
    probe = script_json([str(BENCH / "probe_bench.py"), "--device", "cuda"], ctx.opts.timeout)
    name = sh(
        [sys.executable, "-c", "import torch; print(torch.cuda.get_device_name())"]
    ).stdout.strip()
    return {"device": name, "loader": loader, "probe": probe}


def render_gpu(res: dict) -> list[str]:
    d = res["data"]
    p = d["probe"]
    probe = (
        f"Probe on CUDA (`bench/probe_bench.py --device cuda`, {p.get('layers')} x Linear("
        f"{p.get('width')}, {p.get('width')})): {p.get('verdict')} in {p.get('probe_seconds')} s, "
        f"host peak {p.get('probe_peak_over_model')}x the model."
        if "error" not in p
        else f"Probe on CUDA: {p['error']}"
    )
    return [
        f"Device: {d['device']}.",
        "",
        d["loader"].get("table", d["loader"].get("error", "")),
        "",
        probe,
    ]


def measure_profile(ctx: Context) -> dict:
    tree = ctx.trees().get("timm") or next(iter(ctx.trees().values()))
    return script_text([str(BENCH / "profile_check.py"), str(tree)], ctx.opts.timeout)


def render_text(res: dict) -> list[str]:
    d = res["data"]
    return [d.get("table") or f"Not measured: {d.get('error')}"]


def accelerate_dir(work: Path) -> Path | None:
    """A folder from which ``accelerate`` (pinned) and what it imports are importable beside
    this environment's torch and safetensors, so that the loader bench can compare with it
    without touching metalint's venv; None when it cannot be installed."""
    dest = work / "accelerate"
    if not (dest / "accelerate").exists():
        log(f"accelerate=={PINS['accelerate']} into {dest}")
        try:
            pip(
                sys.executable, "install", "-q", "--target", str(dest), "--no-deps",
                f"accelerate=={PINS['accelerate']}", "huggingface_hub", "numpy", "packaging",
                "psutil", "pyyaml",
            )  # fmt: skip
        except SystemExit as exc:
            log(str(exc))
            return None
    return dest


# --------------------------------------------------------------------- the page

TITLES = {
    "speed": "Speed: check against ruff, TorchFix and the parse floor",
    "fix": "`fix --write` time against tree size",
    "truth": "Truth: findings judged at model level",
    "coverage": "Fix coverage on timm",
    "probe": "Probe: time and memory",
    "loader": "Loader: memory and wall time",
    "sharded": "Sharded loading (FSDP2, gloo on CPU)",
    "gpu": "GPU",
    "profile": "Where a cold check's time goes (timm)",
}
#: what the short variant of a section runs, said on the page where a section ran it (the full
#: variant of these takes more than 15 minutes on a shared 2-CPU machine)
QUICK_NOTES = {
    "fix": "The short variant: smaller generated trees (`--fix-sizes`; 1k, 2k and 4k files take "
    "over an hour on a shared 2-CPU machine, 1k alone 7 minutes at load 25), one run each.",
    "truth": "The short variant: a sample of roots, below.",
    "coverage": "The short variant: no probe of the rewritten classes, below.",
}
#: what the page says of a section with no stored result
NOT_STORED = {
    "gpu": "Measured only where CUDA is available; none was where this page was written. "
    "Figures measured by hand on an H200: [panels.md](panels.md#gpu).",
}
RENDER = {
    "speed": render_speed,
    "fix": render_fix,
    "truth": render_truth,
    "coverage": render_coverage,
    "probe": render_probe,
    "gpu": render_gpu,
}
MEASURE = {
    "speed": measure_speed,
    "fix": measure_fix,
    "truth": measure_truth,
    "coverage": measure_coverage,
    "probe": measure_probe,
    "loader": measure_loader,
    "sharded": measure_sharded,
    "gpu": measure_gpu,
    "profile": measure_profile,
}


@dataclass
class Context:
    opts: argparse.Namespace
    work: Path
    reps: int
    _trees: dict[str, Path] | None = None

    def trees(self) -> dict[str, Path]:
        if self._trees is None:
            self._trees = {}
            for spec in self.opts.tree:
                name, _, path = spec.partition("=")
                self._trees[name] = local_tree(self.work, name, Path(path).resolve())
            if not self.opts.tree:
                for name in self.opts.trees.split(","):
                    self._trees[name] = fetch_tree(self.work, name)
        return self._trees


def version_of(cmd: list[str]) -> str:
    try:
        r = sh(cmd)
    except OSError:
        return "n/a"
    return (r.stdout.strip() or r.stderr.strip()).splitlines()[-1] if r.returncode == 0 else "n/a"


def _code_hash(path: Path) -> str:
    """The code of a file without its docstrings and comments (those change no figure)."""
    return _text_hash(path.read_text(encoding="utf-8"))


@functools.cache  # every section's fingerprint hashes all of metalint/ again
def _text_hash(text: str) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return hashlib.sha256(text.encode()).hexdigest()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body[0] = ast.Pass()
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def fingerprint(section: str) -> str:
    h = hashlib.sha256()
    files = sorted((ROOT / "metalint").rglob("*.py")) + [BENCH / s for s in SECTIONS[section]]
    for path in files:
        if path.is_file():
            h.update(str(path.relative_to(ROOT)).encode() + _code_hash(path).encode())
    return h.hexdigest()[:16]


def commit() -> str:
    sha = version_of(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = sh(
        [
            "git",
            "-C",
            str(ROOT),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "metalint",
            "bench",
            ":!bench/RESULTS.md",  # this script's own output
            ":!bench/results",
        ]
    ).stdout
    return sha + (" + uncommitted changes" if dirty.strip() else "")


@functools.cache  # the same for every section of a run: one torch import, not one a section
def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mod = sh(
        [sys.executable, "-c", "import torch, libcst, importlib.metadata as m; "
         "print(torch.__version__, m.version('libcst'))"]
    ).stdout.split() + ["?", "?"]  # fmt: skip
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"torch {mod[0]}, libcst {mod[1]}"
    )


def stored(results: Path, section: str) -> dict | None:
    path = results / f"{section}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def wanted(section: str, old: dict | None, opts) -> bool:
    """Whether this run measures ``section``."""
    if opts.render:
        return False
    if opts.only is not None:
        return section in opts.only
    return (
        old is None
        or old.get("fingerprint") != fingerprint(section)
        or (old.get("quick") and not opts.quick)
    )


def measure(section: str, ctx: Context, argv: list[str]) -> dict | None:
    log(f"section {section}")
    load = os.getloadavg()[0]
    t0 = time.time()
    data = MEASURE[section](ctx)
    if data is None:
        return None
    return {
        "section": section,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "command": " ".join(["python bench/run.py", *argv]),
        "quick": bool(ctx.opts.quick),
        "machine": machine(),
        "load": f"{load:.1f} at start, {os.getloadavg()[0]:.1f} at end",
        "seconds": round(time.time() - t0),
        "fingerprint": fingerprint(section),
        "data": data,
    }


def render_section(section: str, res: dict | None) -> list[str]:
    title = TITLES[section]
    if res is None:
        why = NOT_STORED.get(section, f"Not measured yet: `python bench/run.py --only {section}`.")
        return [f"## {title}", "", why, ""]
    quick = " **(`--quick`: the short variant)**" if res.get("quick") else ""
    head = [
        f"## {title}",
        "",
        f"{res['date']}, commit {res['commit']}, {res['seconds']} s{quick}; {res['machine']}; "
        f"load average {res['load']}. `{res['command']}`",
        "",
    ]
    if res.get("quick") and section in QUICK_NOTES:
        head += [QUICK_NOTES[section], ""]
    return [*head, *RENDER.get(section, render_text)(res), ""]


def page(results: Path, sections: list[str]) -> str:
    out = [
        "# metalint benchmarks",
        "",
        "Written whole by `python bench/run.py --out bench/RESULTS.md` from the stored results "
        "in `bench/results/*.json` (`--only SECTION,...` re-measures sections; see "
        "[bench/README.md](README.md)). Each section gives its date, commit and command; a "
        "section marked `--quick` ran its short variant. Do not edit by hand. Figures measured "
        "by hand (other libraries, a GPU, long fuzzing): [panels.md](panels.md); the "
        "model-level audit of seven libraries: [model_audit.md](model_audit.md).",
        "",
    ]
    for section in sections:
        out += render_section(section, stored(results, section))
    return "\n".join(out).rstrip() + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the page here (else print it)")
    ap.add_argument("--only", help=f"re-measure these sections: {','.join(SECTIONS)}")
    ap.add_argument("--render", action="store_true", help="measure nothing: write the page")
    ap.add_argument("--quick", action="store_true", help="the short variant of each section")
    ap.add_argument("--results", type=Path, default=BENCH / "results", help="stored results")
    ap.add_argument("--reps", type=int, help="repetitions per timed command (default 3; --quick 1)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a run is killed")
    ap.add_argument("--long-timeout", type=float, default=7200, help="the same for audits")
    ap.add_argument("--single-above", type=float, default=120, help="a slower tool runs once")
    ap.add_argument("--trees", default="timm,transformers", help="pinned wheels to check")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="a local tree")
    ap.add_argument("--torchfix-trees", default="timm", help="trees TorchFix runs on")
    ap.add_argument("--fix-sizes", help="generated files for `fix` (default 1000,2000,4000)")
    ap.add_argument("--workdir", type=Path, help="reuse this folder for downloads and venvs")
    ap.add_argument("--no-ruff", action="store_true")
    ap.add_argument("--no-torchfix", action="store_true")
    ap.add_argument("--no-pyflakes", action="store_true")
    ap.add_argument("--no-accelerate", action="store_true")
    ap.add_argument("--probe-python", default=sys.executable, help="imports timm: real models")
    ap.add_argument("--timm-python", help="imports timm: truth and coverage")
    ap.add_argument("--transformers-python", help="imports transformers: truth")
    ap.add_argument("--sharded-python", default=sys.executable, help="has numpy: sharded")
    a = ap.parse_args(argv)
    if a.only is not None:
        a.only = [s for s in a.only.split(",") if s]
        unknown = set(a.only) - set(SECTIONS)
        if unknown:
            ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = parse(argv)
    work = opts.workdir or Path(tempfile.mkdtemp(prefix="metalint-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(opts, work, opts.reps or (1 if opts.quick else 3))
    opts.results.mkdir(parents=True, exist_ok=True)
    try:
        for section in SECTIONS:
            if wanted(section, stored(opts.results, section), opts):
                res = measure(section, ctx, argv)
                if res is not None:
                    path = opts.results / f"{section}.json"
                    path.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        text = page(opts.results, list(SECTIONS))
        if opts.out:
            opts.out.write_text(text, encoding="utf-8")
        else:
            print(text)
        return 0
    finally:
        if not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
