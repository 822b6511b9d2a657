"""The check pipeline below the commands: settings from the command line, discovery, analysis (parallel, cached), resolution across files. ``metalint check`` and ``metalint fix`` both run it."""

from __future__ import annotations

import fnmatch
import gc
import os
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
    validate_selectors,
)
from metalint.diagnostics import Diagnostic, HelperReads, Position
from metalint.files import Discovery, display_path
from metalint.jobs import analyze_isolated, analyze_one, can_isolate, preload
from metalint.report import is_error
from metalint.static import templates
from metalint.static.hierarchy import Hierarchy
from metalint.static.installed import Installed
from metalint.static.pipeline import drop_repeated
from metalint.static.protocol import Protocols
from metalint.static.results import FileResult, decode, read_source
from metalint.static.tree import Tree

UNUSED_NOQA = "ML100"


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic]
    files_checked: int
    results: list[FileResult]
    #: a run on some files of a project: the display paths of the files named (None: every
    #: file read was named)
    named: frozenset[str] | None = None


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
    """:func:`_run_check`, with the cycle collector paused: the results, the hierarchy and
    the protocols are many objects, without cycles, that live as long as the run and are
    freed by reference counting; a full pass over them finds nothing (on a check of timm
    from the cache, a fifth of its time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_check(
            paths,
            settings,
            use_cache=use_cache,
            workers=workers,
            project=project,
            force_exclude=force_exclude,
        )
    finally:
        if enabled:
            gc.enable()


def _run_check(
    paths: Sequence[Path],
    settings: Settings,
    *,
    use_cache: bool,
    workers: int | None,
    project: Path | None,
    force_exclude: bool,
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
    results, jobs, job_index, digests, checked = _cached_or_jobs(files, cache, settings)
    workers = workers or os.cpu_count() or 1
    analysed = analyze_files(jobs, workers, settings.file_time_budget)
    for i, result in zip(job_index, analysed):
        results[i] = result
        if cache is not None and not any(is_error(d.code) for d in result.diagnostics):
            cache.put(*digests[i], _to_cache(result))
    if cache is not None:
        cache.save()
    _confirmed_helper_reads(results, files, checked, settings, workers, named)
    installed = read_installed(results, settings, codes, workers, cache)
    if named is None:
        diagnostics = resolve(results, settings, enabled, installed)
    else:
        diagnostics = _named_and_caused(results, named, settings, enabled, installed)
    shown = None if named is None else frozenset(results[i].path for i in named)
    return CheckResult(diagnostics, checked_files, results, shown)


def read_installed(
    results: list[FileResult],
    settings: Settings,
    codes: list[str],
    workers: int,
    tree_cache: Cache | None,
) -> Installed | None:
    """The installed packages' modules the tree's classes lead to (see
    :mod:`metalint.static.installed`), their summaries cached beside the tree's results in a
    file of their own (none without ``tree_cache``; a problem writing it is not warned about
    again); None when no environment is known."""
    from metalint.sitepackages import Environment, search_folders
    from metalint.static.installed import reach

    folders = search_folders(settings.site_packages)
    if not folders:
        return None
    cache = None
    if tree_cache is not None:
        cache = Cache(
            tree_cache.folder,
            f"{Cache.key(codes, settings.hooks)}/installed",
            Path(tree_cache.project),
            tree_cache.secret,
            warn=None if tree_cache.warned else _warn,
        )
    installed = reach(
        results,
        Environment(folders),
        lambda jobs: analyze_files(jobs, workers, settings.file_time_budget),
        settings.hooks,
        cache,
    )
    if cache is not None:
        cache.save()
    for note in installed.notes:
        click.echo(f"metalint: note: {note}", err=True)
    return installed


def _warn(message: str) -> None:
    click.echo(f"metalint: warning: {message}", err=True)


def _cached_or_jobs(files: list[Path], cache: Cache | None, settings: Settings):
    """Each file's cached result, or the job analysing it: ``(results, jobs, the index of
    each job's file, (cache key, digest) of each such file, the digest of each file's bytes
    as checked)``; a file that cannot be read or decoded has its error as result."""
    results: list[FileResult] = [None] * len(files)  # type: ignore[list-item]
    jobs, job_index, digests = [], [], {}
    checked: dict[int, str] = {}  # the digest of each file's bytes as checked
    for i, path in enumerate(files):
        job = _read(i, path, cache, settings, results, checked)
        if job is not None:
            jobs.append(job[0])
            job_index.append(i)
            digests[i] = job[1]
    return results, jobs, job_index, digests, checked


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
    results: list[FileResult],
    named: set[int],
    settings: Settings,
    enabled: set[str],
    installed: Installed | None = None,
) -> list[Diagnostic]:
    """The findings of a run on some files of a project: the whole project's analysis judges
    every file; reported are every finding of the named files, and each finding of another
    file that the named files cause. A finding elsewhere is caused when the analysis of the
    project without the named files does not make it, makes it otherwise (another root,
    protocol or message), or finds other model roots containing its class (a class of a named
    file builds it: that root's re-initialisation decides it, even once deleted). Input errors
    (ML9xx) of the other files are theirs, not reported."""
    found, protocols = _judged(results, settings, enabled, installed)
    shown = {results[i].path for i in named}
    others = [r for i, r in enumerate(results) if i not in named]
    alone, alone_protocols = _judged(others, settings, enabled, installed)
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
        seen = hierarchy.for_file(r)
        reads = [seen.construction_read(function, code) for code, function in r.helper_reads]
        if all(read is None for read in reads):
            continue
        if (
            reduced is not None
            and i not in named
            and reads
            == [
                reduced.for_file(r).construction_read(function, code)
                for code, function in r.helper_reads
            ]
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


def resolve(
    results: list[FileResult],
    settings: Settings,
    enabled: set[str],
    installed: Installed | None = None,
    tree: Tree | None = None,
) -> list[Diagnostic]:
    """Answer cross-file conditions, apply selection, per-file ignores and ``# noqa``;
    ``installed``: the installed modules the tree reaches (their classes join the hierarchy,
    their findings are reported where the tree builds or extends them). ``tree``: the tree's
    cross-file view, when it holds more files than ``results`` (whose findings alone are
    judged: ``metalint fix`` judges one file at a time)."""
    return _judged(results, settings, enabled, installed, tree)[0]


def _views(results, settings: Settings, installed, tree) -> tuple[Hierarchy, Protocols]:
    """The hierarchy and protocols to judge ``results`` under: ``tree``'s, else built from
    ``results`` (and the ``installed`` modules' results)."""
    if tree is not None:
        return tree.hierarchy, tree.protocols
    hierarchy = Hierarchy([*results, *installed.results] if installed else results)
    return hierarchy, Protocols(hierarchy, settings.protocol)


def _judged(
    results: list[FileResult],
    settings: Settings,
    enabled: set[str],
    installed: Installed | None = None,
    tree: Tree | None = None,
) -> tuple[list[Diagnostic], Protocols]:
    """:func:`resolve`, and the protocols it judged under. A code-generation template's class
    whose generated class is in the tree takes that class's judgement
    (:mod:`metalint.static.templates`). ``installed``: the installed modules the tree reaches
    (their classes join the hierarchy; their findings are reported where the tree builds or
    extends them)."""
    hierarchy, protocols = _views(results, settings, installed, tree)
    reached = _reached(results, installed, hierarchy, protocols, settings)
    pairs = hierarchy.twins()
    original: dict[int, str] = {}
    judges = _judges(hierarchy, protocols, settings)
    judged = [_judge_file(r, judges(r), enabled, pairs, original, reached) for r in results]
    templates.as_generated(judged, [r.module for r in results], original, pairs)
    out: list[Diagnostic] = []
    for r, kept in zip(results, judged):
        out += _unsuppressed(r, drop_repeated(kept), enabled)
    return sorted(out, key=lambda d: d.sort_key), protocols


def _judges(hierarchy: Hierarchy, protocols: Protocols, settings: Settings):
    """``result -> (hierarchy, protocols, settings)`` a file's findings are judged under: the
    tree's, or, for a file that sees other modules than the tree's first of their names
    (:meth:`Hierarchy.for_file`), its own view's."""
    made: dict[int, tuple] = {id(hierarchy): (hierarchy, protocols, settings)}

    def judges(r: FileResult) -> tuple:
        view = hierarchy.for_file(r)
        if id(view) not in made:
            made[id(view)] = (view, Protocols(view, settings.protocol), settings)
        return made[id(view)]

    return judges


def _reached(results, installed, hierarchy, protocols, settings) -> dict:
    """The findings of installed classes, by the display path of the tree's file that builds
    or extends them."""
    if installed is None:
        return {}
    from metalint.static.installed import reached_findings

    return reached_findings(results, installed, hierarchy, protocols, settings.hooks)


def _judge_file(r, judges, enabled, pairs, original, reached) -> list[Diagnostic]:
    """The findings of one file (its own and those ``reached`` through installed classes)
    kept after selection, per-file ignores and judgement (``judges``: the hierarchy, the
    protocols and the settings); a template's finding on a class with a generated twin is left
    to that twin's judgement. ``original`` gets the message each judged finding had before."""
    hierarchy, protocols, settings = judges
    ignored_here = _per_file_ignores(r.path, settings)
    kept: list[Diagnostic] = []
    for d in (*r.diagnostics, *reached.get(r.path, ())):
        if is_error(d.code):
            kept.append(d)
            continue
        if d.code not in enabled or any(d.code.startswith(p) for p in ignored_here):
            continue
        if d.condition is not None and templates.class_of(d, r.module) not in pairs:
            message = d.message
            d = _judge(d, hierarchy, protocols, settings)
            if d is None:
                continue
            original[id(d)] = message
        kept.append(d)
    return kept


def _judge(d: Diagnostic, hierarchy, protocols, settings) -> Diagnostic | None:
    """A finding with a condition, judged across the tree: None when it does not stand."""
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


def _unsuppressed(r: FileResult, kept: list[Diagnostic], enabled: set[str]) -> list[Diagnostic]:
    """The findings of a file that no ``# noqa`` suppresses, and ML100 for the codes of a
    ``# noqa`` that suppress nothing."""
    out: list[Diagnostic] = []
    used: dict[int, set[str]] = {}
    for d in kept:
        codes = r.noqa.get(d.start.row, ())
        if not is_error(d.code) and d.start.row in r.noqa and (codes is None or d.code in codes):
            used.setdefault(d.start.row, set()).add(d.code)
            continue
        out.append(d)
    if UNUSED_NOQA in enabled:
        out.extend(_unused_noqa(r, used, enabled))
    return out


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
