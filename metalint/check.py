"""``metalint check``: discover, analyse (parallel, cached), resolve across files, report."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from metalint.checking import (
    FORCE_EXCLUDE_HELP,
    CheckResult,
    all_codes,
    analyze_files,
    cli_settings,
    read_installed,
    resolve,
    run_check,
)
from metalint.config import (
    DEFAULT_FILE_TIME_BUDGET,
    ConfigError,
    Settings,
    project_root,
    time_budget,
)
from metalint.diagnostics import Diagnostic
from metalint.extras import torch_missing
from metalint.files import Discovery, display_path
from metalint.report import FORMATS, TEXT_FORMATS, exit_code, is_error, render
from metalint.show import settings_text
from metalint.static.results import FileResult
from metalint.stdin import STDIN, read_stdin, stdin_job
from metalint.terminal import progress, use_color


def probe_findings(
    diagnostics: list[Diagnostic],
    hooks: tuple[str, ...] = (),
    results: Sequence[FileResult] = (),
    factories: dict[str, str] | None = None,
) -> list[Diagnostic]:
    """Probe what materialises each flagged class; mark the findings and add the probe's own.
    ``hooks``: the configured hooks, which the probe runs on every module as check assumes;
    ``results``: the files checked (where each model root is defined); ``factories``: class
    full name -> the configured probe target that builds it (``[tool.metalint.probe]``).

    A finding judged under a model root (``root``: the class that contains it and whose
    protocol loses the tensor) is probed by building that root under ``--init auto`` (its
    ``init_weights()`` after the children's own hooks); a finding on a class no root contains
    by building the class alone, under per-module ``reset_parameters()`` for the rules about
    that protocol (ML006, ML010) and ``auto`` otherwise. A root or class with a configured
    factory is built by it, any other with the arguments the probe guesses. Each root or class
    is built once.

    A probe finding on the same line as a static one of the same class, or about the same lost
    tensor as a confirmed static one (the static finding names the registration, the probe the
    line that computed the value), is not repeated: the static one carries the verdict.
    """
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options
    from metalint.probe.merge import PER_MODULE_RULES, lost_tensor, mark_verdicts

    files_of = {r.module: r.path for r in results if r.module}
    module_of = {_norm_path(r.path): r.module for r in results if r.module}
    factories = factories or {}
    plan: dict[str, dict[str, set[str]]] = {"auto": {}, "reset_parameters": {}}
    built_by: dict[str, set[str]] = {"auto": set(), "reset_parameters": set()}
    flagged: dict[str, list[Diagnostic]] = {"auto": [], "reset_parameters": []}
    others: list[Diagnostic] = []
    for d in diagnostics:
        if not d.symbol or is_error(d.code) or not d.code.startswith("ML"):
            others.append(d)
            continue
        where = _defined_in(d.root, files_of) if d.root else None
        in_root = d.root is not None and (where is not None or d.root in factories)
        init = "reset_parameters" if not in_root and d.code in PER_MODULE_RULES else "auto"
        module = module_of.get(_norm_path(d.filename))
        cls = d.root if in_root else f"{module}.{d.symbol}" if module else None
        if cls in factories:
            built_by[init].add(factories[cls])
        else:
            file, name = where or (d.filename, d.symbol)
            plan[init].setdefault(file, set()).add(name)
        flagged[init].append(d)
    if not any(flagged.values()):
        return diagnostics
    marked: list[Diagnostic] = list(others)
    found: list[Diagnostic] = []
    for init, targets in plan.items():
        if not flagged[init]:
            continue
        specs = [f"{file}:{','.join(sorted(names))}" for file, names in sorted(targets.items())]
        specs += sorted(built_by[init])
        report = run_probe(
            specs, Options(device="auto", init=init, hooks=hooks), progress=sys.stderr.isatty()
        )
        marked += mark_verdicts(flagged[init], report)
        found += report.diagnostics
    seen = {(d.filename, d.start.row, d.symbol) for d in marked}
    confirmed = {lost_tensor(d) for d in marked if d.verdict == "confirmed"} - {None}
    extra = []
    for d in found:
        key = (d.filename, d.start.row, d.symbol)
        if is_error(d.code) or (key not in seen and lost_tensor(d) not in confirmed):
            seen.add(key)
            extra.append(d)
    return sorted(marked + extra, key=lambda d: d.sort_key)


def _norm_path(path: str | None) -> str:
    return os.path.normcase(os.path.realpath(path)) if path else ""


def _defined_in(fullname: str, files_of: dict[str, str]) -> tuple[str, str] | None:
    """(file, qualified name inside it) of the class ``pkg.mod.Root`` among the checked files."""
    module = fullname
    while "." in module:
        module = module.rpartition(".")[0]
        if module in files_of:
            return files_of[module], fullname[len(module) + 1 :]
    return None


@click.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--output-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="full (= text): each finding, its help line, a summary; concise: one line each; "
    "grouped: under their file; json, json-lines, github, gitlab (Code Quality), sarif.",
)
@click.option("--select", multiple=True, help="Codes or prefixes to enable (comma-separated; ALL).")
@click.option("--extend-select", multiple=True, help="Codes to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--statistics", is_flag=True, help="Count findings per code.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--config", type=click.Path(path_type=Path), help="pyproject.toml to use.")
@click.option("--force-exclude", is_flag=True, help=FORCE_EXCLUDE_HELP)
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: CPUs).")
@click.option(
    "--file-time-budget",
    type=float,
    default=None,
    help="CPU seconds one file's analysis may take before it is reported as ML901 "
    f"(default: [tool.metalint] file-time-budget, else {DEFAULT_FILE_TIME_BUDGET:g}).",
)
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report to a file.")
@click.option(
    "--probe",
    "probe",
    is_flag=True,
    help="Prove each finding: build its classes on meta (child processes) and mark it "
    "confirmed or refuted; add what the probe found beyond the rules.",
)
@click.option(
    "--fix", is_flag=True, help="Apply the safe fixes (as `metalint fix --write`), then report."
)
@click.option("--unsafe-fixes", is_flag=True, help="With --fix: apply the unsafe fixes too.")
@click.option("--show-fixes", is_flag=True, help="With --fix: list the fixes applied per file.")
@click.option(
    "--exit-non-zero-on-fix",
    is_flag=True,
    help="With --fix: exit 1 when a file was fixed, even if no finding remains.",
)
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: MLxxx` to each reported line.")
@click.option(
    "--extend-exclude",
    multiple=True,
    metavar="PATTERN",
    help="Exclude these too (gitignore-style, as `exclude`; comma-separated or repeated).",
)
@click.option(
    "--stdin-filename",
    metavar="NAME",
    help="The name of the file when passing it through stdin (`metalint check -`).",
)
@click.option("--show-files", is_flag=True, help="List the files that would be checked; exit.")
@click.option("--show-settings", is_flag=True, help="Print the settings that would be used; exit.")
@click.option("--quiet", "-q", is_flag=True, help="Print the findings, but nothing else.")
def check_command(
    paths,
    output_format,
    select,
    extend_select,
    ignore,
    exit_zero,
    statistics,
    no_cache,
    config,
    force_exclude,
    jobs,
    file_time_budget,
    output,
    probe,
    fix,
    unsafe_fixes,
    show_fixes,
    exit_non_zero_on_fix,
    add_noqa,
    extend_exclude,
    stdin_filename,
    show_files,
    show_settings,
    quiet,
):
    """Check PATHS (default: .) for modules that break when built on the meta device.

    `-` as the only PATH reads the source from stdin (see --stdin-filename)."""
    applied = None
    sources: dict[str, str] = {}
    text_format = output_format in TEXT_FORMATS
    try:
        paths, stdin = _check_paths(paths, stdin_filename, fix or add_noqa)
        settings = cli_settings(paths, config, select, extend_select, ignore)
        settings.exclude += [p.strip() for v in extend_exclude for p in v.split(",") if p.strip()]
        if file_time_budget is not None:
            settings.file_time_budget = time_budget(file_time_budget, "--file-time-budget")
        if show_settings or show_files:
            click.echo(_shown(paths, settings, show_settings), nl=False)
            sys.exit(0)
        _needs_torch(probe)
        with progress(text_format and not quiet):
            if fix:
                fixer = click.get_current_context().find_root().obj["apply_fixes"]
                applied = fixer(
                    paths, settings, unsafe=unsafe_fixes, use_cache=not no_cache, workers=jobs
                )
            if stdin:
                result = _check_stdin(str(paths[0]), settings, sources)
            else:
                result = run_check(
                    paths,
                    settings,
                    use_cache=not no_cache,
                    workers=jobs,
                    project=project_root(settings, paths[0]),
                    force_exclude=force_exclude,
                )
    except ConfigError as exc:
        click.echo(f"metalint: error: {exc}", err=True)
        sys.exit(2)
    diagnostics = result.diagnostics + (applied.errors if applied else [])
    if add_noqa:
        sys.exit(_add_noqa(diagnostics, {r.path for r in result.results}))
    if probe:
        diagnostics = probe_findings(
            diagnostics, settings.hooks, result.results, settings.factories
        )
    from metalint.rules import describe, page  # the rules' names and pages: --statistics, SARIF

    color = output is None and use_color(sys.stdout, text_format)

    text = render(
        diagnostics,
        output_format,
        statistics=statistics,
        files_checked=result.files_checked,
        describe=describe,
        quiet=quiet,
        color=color,
        fixed=applied.fixed if applied else None,
        fixes=applied.applied if applied and show_fixes else None,
        root=settings.root,
        sources=sources,
        page=page,
    )
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False, color=color)  # click strips colour off a terminal itself
    rc = exit_code(diagnostics, exit_zero=exit_zero)
    if rc == 0 and applied and applied.files and exit_non_zero_on_fix and not exit_zero:
        rc = 1
    sys.exit(rc)


def _check_paths(paths, stdin_filename: str | None, writes: bool) -> tuple[list[Path], bool]:
    """The paths to check and whether the source comes from stdin (``-`` alone, or no path
    and ``--stdin-filename``), shown as ``--stdin-filename`` (default ``-``)."""
    stdin = list(paths) == [Path(STDIN)] or (not paths and stdin_filename is not None)
    if not stdin and Path(STDIN) in paths:
        raise ConfigError("`-` (the source on stdin) cannot be combined with other paths")
    if stdin and writes:
        raise ConfigError(
            "--fix and --add-noqa write files: they cannot read the source from stdin"
        )
    if stdin:
        return [Path(stdin_filename or STDIN)], True
    return list(paths) or [Path(".")], False


def _check_stdin(name: str, settings: Settings, sources: dict[str, str]) -> CheckResult:
    """The check of the source on stdin as the file ``name`` (its text goes to ``sources``)."""
    job, result, sources[name] = stdin_job(name, settings, read_stdin())
    if job is not None:
        [result] = analyze_files([job], 1, settings.file_time_budget)
    codes, defaults = all_codes()
    # the installed packages it builds on, read without cache (stdin writes nothing)
    installed = read_installed([result], settings, codes, 1, None)
    enabled = settings.enabled(codes, defaults)
    return CheckResult(resolve([result], settings, enabled, installed), 1, [result])


def _shown(paths: list[Path], settings: Settings, show_settings: bool) -> str:
    """``--show-settings`` (the settings, for the first path) or ``--show-files``."""
    if show_settings:
        codes, defaults = all_codes()
        return settings_text(settings, str(paths[0]), settings.enabled(codes, defaults))
    files = Discovery(settings.root, settings.exclude).files(paths)
    return "".join(display_path(f) + "\n" for f in files)


def _needs_torch(probe: bool) -> None:
    needs = torch_missing("metalint check --probe") if probe else None
    if needs:
        click.echo(needs, err=True)
        sys.exit(2)


def _add_noqa(diagnostics: list[Diagnostic], checked: set[str]) -> int:
    """``--add-noqa``: the exit code (2: some input could not be checked; 1: some finding
    could not get a comment; 0: every finding has one)."""
    from metalint.noqa_add import add_noqa  # writes through metalint.fix.write

    added, problems = add_noqa(diagnostics, checked)
    for problem in problems:
        click.echo(f"metalint: warning: {problem}", err=True)
    errors = [d for d in diagnostics if is_error(d.code)]
    if errors:
        click.echo(render(errors, "concise", quiet=True), nl=False, err=True)
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    return 2 if errors else 1 if problems else 0
