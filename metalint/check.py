"""``metalint check``: discover, analyse (parallel, cached), resolve across files, report."""

from __future__ import annotations

import fnmatch
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from metalint.cache import Cache, NoKey, allowed_folder, secret, user_cache_home
from metalint.config import (
    DEFAULT_FILE_TIME_BUDGET,
    ConfigError,
    Settings,
    load_settings,
    project_root,
    time_budget,
    validate_selectors,
)
from metalint.diagnostics import Diagnostic, HelperReads, Position
from metalint.extras import torch_missing
from metalint.files import Discovery, display_path
from metalint.jobs import analyze_isolated, analyze_one, can_isolate, preload
from metalint.report import FORMATS, TEXT_FORMATS, exit_code, is_error, render
from metalint.show import settings_text
from metalint.static.hierarchy import Hierarchy
from metalint.static.pipeline import drop_repeated
from metalint.static.protocol import Protocols
from metalint.static.results import FileResult, decode, read_source
from metalint.stdin import STDIN, read_stdin, stdin_job
from metalint.terminal import progress, use_color

UNUSED_NOQA = "ML100"


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic]
    files_checked: int
    results: list[FileResult]


def analyze_files(
    jobs: list, workers: int, budget: float = DEFAULT_FILE_TIME_BUDGET
) -> list[FileResult]:
    """Results of ``jobs`` in order; each file is analysed in a worker process under
    ``budget`` CPU seconds (see :mod:`metalint.jobs`): one bad file costs that file only."""
    if not jobs:
        return []
    preload()  # once, before the workers fork
    if not can_isolate():
        return [analyze_one(j) for j in jobs]
    return analyze_isolated(jobs, workers, budget)


def all_codes() -> tuple[list[str], set[str]]:
    # read from the rule files' text: importing the rules imports libcst
    from metalint.rules import rule_codes

    codes, defaults = rule_codes()
    return list(codes), set(defaults)


def run_check(
    paths: Sequence[Path],
    settings: Settings,
    *,
    use_cache: bool = True,
    workers: int | None = None,
    project: Path | None = None,
    force_exclude: bool = False,
) -> CheckResult:
    """Check ``paths``. With ``project`` (see :func:`project_root`) the files named are judged
    among every file of the project (from the cache; the others are analysed) exactly as a run
    on the whole project judges them, and the findings reported are theirs plus those of other
    files that the named files cause (:func:`_named_and_caused`). ``force_exclude``: a path
    named that an ``exclude`` pattern names is skipped too (pre-commit names every file)."""
    codes, defaults = all_codes()
    enabled = settings.enabled(codes, defaults)

    def warn(message: str) -> None:
        click.echo(f"metalint: warning: {message}", err=True)

    discovery = Discovery(settings.root, settings.exclude, warn=warn)
    if force_exclude:
        paths = [p for p in paths if not _force_excluded(p, discovery, settings.root)]
    files = list(discovery.files(paths))
    checked_files = len(files)
    named: set[int] | None = None  # a partial run: the indices of the files named
    if project is not None and files:
        files, named = _in_project_order(files, discovery, project)
    base = project or settings.root
    cache = _open_cache(settings, base, codes) if use_cache else None
    results: list[FileResult] = [None] * len(files)  # type: ignore[list-item]
    jobs, job_index, digests = [], [], {}
    checked: dict[int, str] = {}  # the digest of each file's bytes as checked
    for i, path in enumerate(files):
        job = _read(i, path, cache, settings, results, checked)
        if job is not None:
            jobs.append(job[0])
            job_index.append(i)
            digests[i] = job[1]
    workers = workers or os.cpu_count() or 1
    analysed = analyze_files(jobs, workers, settings.file_time_budget)
    for i, result in zip(job_index, analysed):
        results[i] = result
        if cache is not None and not any(is_error(d.code) for d in result.diagnostics):
            cache.put(*digests[i], _to_cache(result))
    if cache is not None:
        cache.save()
    _confirmed_helper_reads(results, files, checked, settings, workers, named)
    if named is None:
        diagnostics = resolve(results, settings, enabled)
    else:
        diagnostics = _named_and_caused(results, named, settings, enabled)
    return CheckResult(diagnostics, checked_files, results)


def _in_project_order(files: list[Path], discovery, project: Path):
    """The files named and every file of the project, in the project's order (as a run on
    the whole project reads them) after the files named outside its tree, with the indices
    of those named; the files named alone (None) when the project adds none."""
    by_key = {_abs_key(f): f for f in files}
    tree = [by_key.get(_abs_key(f), f) for f in discovery.files([project])]
    in_tree = {_abs_key(f) for f in tree}
    ordered = [f for f in files if _abs_key(f) not in in_tree] + tree
    if len(ordered) > len(files):
        return ordered, {i for i, f in enumerate(ordered) if _abs_key(f) in by_key}
    return files, None


def _read(i: int, path: Path, cache, settings: Settings, results: list, checked: dict):
    """File ``i``: its result read back from the cache (or its error) into ``results``, or
    the job that analyses it and its cache key and digest. The digest of its bytes goes
    into ``checked``."""
    display = display_path(path)
    data, err = read_source(path, display)
    if err:
        results[i] = err
        return None
    key = _abs_key(path)
    digest = checked[i] = Cache.digest(data)
    cached = cache.get(key, digest) if cache else None
    if cached is not None:
        try:
            results[i] = _from_cache(display, cached)
            return None
        except (KeyError, TypeError, ValueError, AttributeError):
            cache.drop(key)  # not what this version writes: a miss
    source, err = decode(data, display)
    if err:
        results[i] = err
        return None
    # imports libcst: only on a cache miss
    from metalint.static.names import module_name_for

    module = module_name_for(path.absolute())
    job = (source, display, module, path.name == "__init__.py", settings.hooks, True)
    return job, (key, digest)


def _abs_key(path: Path) -> str:
    return os.path.normpath(str(path.absolute()))


def _open_cache(settings: Settings, base: Path, codes: list[str]) -> Cache | None:
    """The cache of ``base`` (the project, else the settings' root); None, with a warning, when
    it cannot be used. A configured ``cache-dir`` outside the project (and outside the user's
    cache folder) is a ConfigError: ``check`` writes nowhere else."""

    def warn(message: str) -> None:
        click.echo(f"metalint: warning: {message}", err=True)

    folder = settings.cache_dir or base / ".metalint_cache"
    if not allowed_folder(folder, base):
        if settings.cache_dir is not None:
            where = settings.config_file or "cache-dir"
            raise ConfigError(
                f"{where}: cache-dir {folder} is outside the project {base}: use a folder "
                f"inside it or under {user_cache_home() or '~/.cache'}"
            )
        warn(f"cache not used ({folder} leads outside the project {base})")
        return None
    try:
        key = secret()
    except NoKey as exc:
        warn(f"cache not used ({exc})")
        return None
    return Cache(folder, Cache.key(codes, settings.hooks), base, key, warn=warn)


def _to_cache(result: FileResult) -> dict:
    """A result as cached: without its display path, which is each run's own."""
    out = result.to_json()
    for d in out["diagnostics"]:
        d["filename"] = ""
    return out


def _from_cache(display: str, cached: dict) -> FileResult:
    result = FileResult.from_json(display, cached)
    result.diagnostics = [d.with_(filename=display) for d in result.diagnostics]
    return result


def _force_excluded(path: Path, discovery: Discovery, root: Path) -> bool:
    """``--force-exclude`` (ruff's meaning): a path named on the command line that an
    ``exclude`` pattern names, itself or a folder above it below ``root``, is skipped."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(root).parts
    except ValueError:
        return False
    last = len(parts)
    return any(
        discovery.exclude.match_file(
            "/".join(parts[:k]) + ("/" if k < last or os.path.isdir(path) else "")
        )
        for k in range(1, last + 1)
    )


def _named_and_caused(
    results: list[FileResult], named: set[int], settings: Settings, enabled: set[str]
) -> list[Diagnostic]:
    """The findings of a run on some files of a project: the whole project's analysis judges
    every file; reported are every finding of the named files, and each finding of another
    file that the named files cause. A finding elsewhere is caused when the analysis of the
    project without the named files does not make it, makes it otherwise (another root,
    protocol or message), or finds other model roots containing its class (a class of a named
    file builds it: that root's re-initialisation decides it, even once deleted). Input errors
    (ML9xx) of the other files are theirs, not reported."""
    found, protocols = _judged(results, settings, enabled)
    shown = {results[i].path for i in named}
    others = [r for i, r in enumerate(results) if i not in named]
    alone, alone_protocols = _judged(others, settings, enabled)
    without = Counter(_identity(d) for d in alone)
    out = []
    for d in found:
        if d.filename in shown:
            out.append(d)
        elif is_error(d.code):
            continue
        elif without[_identity(d)] and (
            d.condition is None
            or protocols.roots(d.condition.cls) == alone_protocols.roots(d.condition.cls)
        ):
            without[_identity(d)] -= 1
        else:
            out.append(d)
    return out


def _identity(d: Diagnostic) -> tuple:
    """What a reader of the finding sees (its fix is its own file's, the same either way)."""
    return (
        d.code,
        d.message,
        d.filename,
        (d.start.row, d.start.column, d.end.row, d.end.column),
        d.symbol,
        d.subject,
        d.hook,
        d.help,
        d.protocol,
        d.root,
        d.via,
    )


def _confirmed_helper_reads(
    results: list[FileResult],
    files: list[Path],
    checked: dict[int, str],
    settings: Settings,
    workers: int,
    named: set[int] | None = None,
) -> None:
    """Analyse again in full, in place in ``results``, each file holding a left-out finding
    (``FileResult.helper_reads``: a call of a function of another file that may read a
    tensor's value) that the tree confirms. A file's result (and its cache entry) cannot
    depend on other files, so its analysis lists such calls and only a confirmed one costs a
    second analysis; every other left-out finding is one the tree drops.

    ``named``: a partial run, with the indices of the files named: another file is analysed
    again only when the named files decide a confirmation (without them the tree answers
    otherwise), the only way its left-out findings can be reported."""
    if not any(r.helper_reads for r in results):
        return
    hierarchy = Hierarchy(results)
    reduced = None
    if named is not None:
        reduced = Hierarchy([r for i, r in enumerate(results) if i not in named])
    jobs, where = [], []
    for i, r in enumerate(results):
        reads = [hierarchy.construction_read(function, code) for code, function in r.helper_reads]
        if all(read is None for read in reads):
            continue
        if (
            reduced is not None
            and i not in named
            and reads
            == [reduced.construction_read(function, code) for code, function in r.helper_reads]
        ):
            continue
        path = files[i]
        data, err = read_source(path, r.path)
        if err is not None or Cache.digest(data) != checked.get(i):
            continue  # changed during the run: the findings are those of the text checked
        source, err = decode(data, r.path)
        if err is not None:
            continue
        from metalint.static.names import module_name_for

        module = module_name_for(path.absolute())
        jobs.append((source, r.path, module, path.name == "__init__.py", settings.hooks, False))
        where.append(i)
    if not jobs:
        return
    for i, result in zip(where, analyze_files(jobs, workers, settings.file_time_budget)):
        results[i] = result


def resolve(results: list[FileResult], settings: Settings, enabled: set[str]) -> list[Diagnostic]:
    """Answer cross-file conditions, apply selection, per-file ignores and ``# noqa``."""
    return _judged(results, settings, enabled)[0]


def _judged(
    results: list[FileResult], settings: Settings, enabled: set[str]
) -> tuple[list[Diagnostic], Protocols]:
    """:func:`resolve`, and the protocols it judged under."""
    hierarchy = Hierarchy(results)
    protocols = Protocols(hierarchy, settings.protocol)
    out: list[Diagnostic] = []
    for r in results:
        ignored_here = _per_file_ignores(r.path, settings)
        kept: list[Diagnostic] = []
        for d in r.diagnostics:
            if not is_error(d.code):
                if d.code not in enabled or any(d.code.startswith(p) for p in ignored_here):
                    continue
                if d.condition is not None:
                    d = _judge(d, hierarchy, protocols, settings)
                    if d is None:
                        continue
            kept.append(d)
        used: dict[int, set[str]] = {}
        for d in drop_repeated(kept):
            codes = r.noqa.get(d.start.row, ())
            if (
                not is_error(d.code)
                and d.start.row in r.noqa
                and (codes is None or d.code in codes)
            ):
                used.setdefault(d.start.row, set()).add(d.code)
                continue
            out.append(d)
        if UNUSED_NOQA in enabled:
            out.extend(_unused_noqa(r, used, enabled))
    return sorted(out, key=lambda d: d.sort_key), protocols


def _judge(d: Diagnostic, hierarchy, protocols, settings: Settings) -> Diagnostic | None:
    """A finding with a condition across files, judged: None when it does not hold or every
    root's protocol re-creates what it says is lost; a read in a helper of another file
    names that helper's line."""
    if not hierarchy.holds(d.condition, settings.hooks, d.code):
        return None
    reads = d.condition.get(HelperReads)
    if reads:
        via = hierarchy.construction_read(reads.function, d.code)
        d = d.with_(
            via=via,
            help=f"{d.help} (the line is in `{via[0]}` at {via[1]}:{via[2]})",
        )
    return protocols.judge(d)


def _unused_noqa(r: FileResult, used: dict[int, set[str]], enabled: set[str]) -> list:
    """ML100 findings: codes of a file's ``# noqa`` comments nothing was reported
    for."""
    out = []
    for row, codes in sorted(r.noqa.items()):
        if not codes:
            continue
        stale = [
            c for c in codes if c in enabled and c != UNUSED_NOQA and c not in used.get(row, set())
        ]
        if stale:
            pos = Position(row, 1)
            out.append(
                Diagnostic(
                    UNUSED_NOQA,
                    f"unused `# noqa` for {', '.join(stale)}: nothing is reported here",
                    r.path,
                    pos,
                    pos,
                    help=f"Remove {', '.join(stale)} from the `# noqa` comment",
                )
            )
    return out


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


def _per_file_ignores(display: str, settings: Settings) -> list[str]:
    if not settings.per_file_ignores:
        return []
    path = Path(display).absolute()
    try:
        rel = path.relative_to(settings.root).as_posix()
    except ValueError:
        rel = path.as_posix()
    out: list[str] = []
    for pattern, codes in settings.per_file_ignores.items():
        if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern):
            out += codes
    return out


def _split(values: tuple[str, ...]) -> list[str]:
    return [
        v.strip().upper() if v.strip().upper() != "ALL" else "ALL"
        for s in values
        for v in s.split(",")
        if v.strip()
    ]


def cli_settings(paths, config, select, extend_select, ignore) -> Settings:
    """Settings of the nearest ``[tool.metalint]`` (or ``--config``) with the command line's
    ``--select``/``--extend-select``/``--ignore`` applied; unknown selectors are a ConfigError."""
    settings = load_settings(paths[0] if paths[0].exists() else Path.cwd(), config)
    codes, _ = all_codes()
    for name, values in (
        ("--select", select),
        ("--extend-select", extend_select),
        ("--ignore", ignore),
    ):
        validate_selectors(_split(values), codes, name)
    for what, values in (
        ("select", settings.select),
        ("extend-select", settings.extend_select),
        ("ignore", settings.ignore),
    ):
        validate_selectors(values, codes, f"{settings.config_file}: {what}")
    if select:
        settings.select = _split(select)
    settings.extend_select += _split(extend_select)
    settings.ignore += _split(ignore)
    return settings


FORCE_EXCLUDE_HELP = (
    "Apply the exclude patterns to paths named on the command line too (as pre-commit names them)."
)


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
    return CheckResult(resolve([result], settings, settings.enabled(codes, defaults)), 1, [result])


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
