"""Audit the static rules on real libraries: every finding proved or refuted by the probe.

    python bench/rule_audit.py --python /path/to/venv/bin/python --out audit.md \
        timm==1.0.31 open_clip_torch==3.3.0 transformers==5.23.0:models/llama,models/bert

Each ``NAME==VERSION[:SUBDIR,...]`` is downloaded from PyPI (``pip download --no-deps``) into
``--workdir`` and unzipped; ``metalint check`` runs on the package (or on the listed
sub-folders), then ``metalint probe`` builds every class with a finding (eager, on meta,
``to_empty``, init, compare; one child process per file) with ``--python`` (an interpreter that can import the
library, at that version, and metalint). Rules about per-module resets (ML006 reset touches
children, ML010 parent-applied init) are judged with ``reset_parameters`` on every module, as
FSDP does; every other rule with ``auto`` (each module's ``init_weights()`` or
``reset_parameters()``, children first). A finding is ``confirmed`` when the probe sees the
value it names lost, ``refuted`` when the class was built and the value survived, ``unproven``
when the class could not be built with default or guessed arguments (or not on meta).

Prints (and writes with ``--out``) a markdown table per library and rule, then every refuted
finding, so that a rule that produced one can be fixed. ``--tiny`` audits two fixtures instead
of a download (the smoke test).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: rules whose claim is about per-module ``reset_parameters()`` (FSDP's materialisation)
PER_MODULE_RULES = {"ML006", "ML010"}
VERDICTS = ("confirmed", "refuted", "unproven")


def fetch(spec: str, workdir: Path) -> tuple[str, list[Path]]:
    """``name==version[:sub,...]`` -> (label, folders to check)."""
    req, _, subs = spec.partition(":")
    name, _, version = req.partition("==")
    dest = workdir / req.replace("==", "-")
    if not dest.exists():
        tmp = workdir / f".dl-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-q",
                "-d",
                str(tmp),
                req,
            ],
            check=True,
        )
        wheel = next(tmp.glob("*.whl"))
        part = workdir / f".unzip-{os.getpid()}"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(part)
        wheel.unlink()
        part.rename(dest)
    package = name.replace("-", "_").lower()
    if package == "open_clip_torch":
        package = "open_clip"
    top = dest / package
    folders = [top / s for s in subs.split(",")] if subs else [top]
    return req, folders


def audit(label: str, folders: list[Path], python: str, timeout: float) -> dict:
    from metalint.check import run_check
    from metalint.config import Settings
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options
    from metalint.probe.merge import mark_verdicts
    from metalint.report import ERROR_CODE

    settings = Settings(root=folders[0].parent, select=["ML"])
    t0 = time.perf_counter()
    static = [
        d
        for d in run_check(folders, settings, use_cache=False).diagnostics
        if d.code != ERROR_CODE and d.code.startswith("ML") and d.code != "ML100" and d.symbol
    ]
    t_check = time.perf_counter() - t0
    files = sorted({d.filename for d in static})
    print(
        f"{label}: {len(static)} findings in {len(files)} files ({t_check:.1f} s); probing",
        file=sys.stderr,
    )
    marked = []
    t0 = time.perf_counter()
    for init, codes in (("auto", None), ("reset_parameters", PER_MODULE_RULES)):
        chosen = [d for d in static if (d.code in PER_MODULE_RULES) == (codes is not None)]
        # each file imported once, and only its classes with a finding built
        symbols: dict[str, set[str]] = collections.defaultdict(set)
        for d in chosen:
            symbols[d.filename].add(d.symbol)
        targets = [f"{f}:{','.join(sorted(names))}" for f, names in sorted(symbols.items())]
        if not targets:
            continue
        report = run_probe(
            targets,
            Options(device="cpu", init=init, timeout=timeout, python=python),
            progress=sys.stderr.isatty(),
        )
        marked += mark_verdicts(chosen, report)
    t_probe = time.perf_counter() - t0
    return {
        "label": label,
        "findings": marked,
        "check_s": t_check,
        "probe_s": t_probe,
        "files": len(files),
    }


def table(results: list[dict]) -> list[str]:
    from metalint.rules import all_rules

    names = {r.code: r.name for r in all_rules()}
    lines = [
        "| library | rule | findings | confirmed | refuted | unproven | precision (confirmed ÷ proved) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for res in results:
        per_rule: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for d in res["findings"]:
            per_rule[d.code][d.verdict or "unproven"] += 1
        for code in sorted(per_rule):
            c = per_rule[code]
            totals[code].update(c)
            lines.append(_row(res["label"], f"{code} {names.get(code, '')}", c))
    for code in sorted(totals):
        lines.append(_row("**all**", f"{code} {names.get(code, '')}", totals[code]))
    return lines


def _row(label: str, rule: str, c: collections.Counter) -> str:
    proved = c["confirmed"] + c["refuted"]
    precision = f"{c['confirmed'] / proved:.2f}" if proved else "n/a"
    n = sum(c.values())
    return f"| {label} | {rule} | {n} | {c['confirmed']} | {c['refuted']} | {c['unproven']} | {precision} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("libraries", nargs="*", help="NAME==VERSION[:SUBDIR,...] from PyPI")
    ap.add_argument(
        "--python", default=sys.executable, help="interpreter that imports the libraries"
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/metalint-audit"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per probed class")
    ap.add_argument("--out", type=Path, help="write the markdown here too")
    ap.add_argument("--tiny", action="store_true", help="audit fixtures/check (smoke test)")
    args = ap.parse_args(argv)
    results = []
    if args.tiny:
        tiny = [
            ROOT / "fixtures" / "check" / f
            for f in ("timm_style_blocks.py", "fairseq_style_attention.py")
        ]
        results.append(audit("fixtures/check", tiny, args.python, args.timeout))
    for spec in args.libraries:
        args.workdir.mkdir(parents=True, exist_ok=True)
        label, folders = fetch(spec, args.workdir)
        results.append(audit(label, folders, args.python, args.timeout))
    out = [
        "## Rule audit",
        "",
        f"`{' '.join(['python bench/rule_audit.py', *(argv or sys.argv[1:])])}`",
        "",
    ]
    for res in results:
        out.append(
            f"- {res['label']}: {len(res['findings'])} findings in {res['files']} files; "
            f"check {res['check_s']:.1f} s, probe {res['probe_s']:.0f} s"
        )
    out += ["", *table(results), "", "Refuted findings:", ""]
    refuted = [(r["label"], d) for r in results for d in r["findings"] if d.verdict == "refuted"]
    out += [
        f"- {label} `{d.filename}:{d.start.row}` {d.code} {d.symbol}" for label, d in refuted
    ] or ["- none"]
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
