"""``metalint fix``: rewrite non-deferrable init so modules become meta-safe.

Without ``--write`` it prints a unified diff and changes nothing (exit 1 when it would change
something, 0 when not). With ``--write`` it writes each changed file atomically (only if the
file still has the bytes that were read) and prints ``Fixed N errors (M remaining; K
unfixable).``; exit 1 while findings remain. Files that cannot be read or parsed are reported
(``ML900``), never touched, and make the exit code 2.
"""

from __future__ import annotations

import difflib
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import click

from metalint.checking import FORCE_EXCLUDE_HELP, all_codes, cli_settings, resolve, run_check
from metalint.codes import ERROR_CODE
from metalint.config import ConfigError, project_root
from metalint.diagnostics import Applicability, Diagnostic, Fix, Position
from metalint.extras import torch_missing
from metalint.files import MAX_SOURCE_BYTES, read_regular
from metalint.fix.apply import SITE_FIXED, UNSAFE_HINT, FileFix, Fixer, SiteFix
from metalint.fix.registry import CODEMODS
from metalint.fix.write import (
    ChangedOnDisk,
    NotPython,
    OutsideTree,
    digest,
    tree_of,
    write_atomic,
)
from metalint.lines import source_encoding, split_lines
from metalint.report import is_error, render
from metalint.static.names import module_name_for
from metalint.static.results import decode
from metalint.terminal import progress

#: findings about a tensor a materialisation site leaves uninitialised (a script's rewrite
#: resolves them before any class's)
SITE_CODES = frozenset({"ML001", "ML002", "ML004", SITE_FIXED})


def _summary(fixed: int, remaining: int, unfixable: int, unsafe_hidden: int, write: bool) -> str:
    verb = "Fixed" if write else "Would fix"
    text = f"{verb} {fixed} error{'s' if fixed != 1 else ''} ({remaining} remaining; {unfixable} unfixable"
    if unsafe_hidden:
        text += f"; {unsafe_hidden} fixable with --unsafe-fixes"
    return text + ")."


def run_fix(
    paths,
    settings,
    *,
    write: bool,
    show_diff: bool,
    unsafe: bool,
    verify: bool,
    use_cache: bool = True,
    workers=None,
    echo=click.echo,
    show_fixes: bool = False,
    force_exclude: bool = False,
) -> int:
    """Check, fix every file a codemod applies to, write (or diff), summarise; the exit code."""

    checked, errors, fixer, fixes = _fix_all(
        paths, settings, unsafe, use_cache, workers, force_exclude=force_exclude
    )
    changed = [ff for ff in fixes if ff.changed]
    if show_diff or not write:
        _echo_diff(changed, echo)
    tree = tree_of(paths or [Path(".")])
    proven = _write(changed, fixer, errors, echo, verify=verify, tree=tree) if write else {}
    shown: set[str] = set()
    for d in (d for site in fixer.sites for d in site.applied):
        _echo_applied(d, None, echo, write=write, show_fixes=show_fixes, shown=shown)
    for ff in fixes:
        for d in ff.applied:
            _echo_applied(
                d,
                proven.get((ff.display, (d.symbol or "").split(".")[0])),
                echo,
                write=write,
                show_fixes=show_fixes,
                shown=shown,
            )
    remaining = _summarise(checked.diagnostics, fixes, fixer, errors, echo, write=write)
    if errors:
        return 2
    if not write:
        return 1 if changed else 0
    return 1 if remaining else 0


def _fix_all(paths, settings, unsafe: bool, use_cache: bool, workers, force_exclude=False):
    """Check ``paths`` and run the codemods on every file they apply to (nothing written):
    the check's result, the errors so far, the fixer and each file's :class:`FileFix`."""
    codes, defaults = all_codes()
    enabled = settings.enabled(codes, defaults)
    # some files of a project are judged among all of its files, as ``check`` judges them;
    # only the files named are rewritten
    checked = run_check(
        paths,
        settings,
        use_cache=use_cache,
        workers=workers,
        project=project_root(settings, (paths or [Path(".")])[0]),
        force_exclude=force_exclude,
    )
    errors = [d for d in checked.diagnostics if is_error(d.code)]
    fixer = Fixer(checked.results, settings, enabled, unsafe, resolve)
    # the scripts first: a site that no longer loses a tensor needs no hook for it
    scripts = _fix_sites(checked, fixer, errors)
    candidates = sorted(
        {
            d.filename
            for d in checked.diagnostics
            if d.code in CODEMODS and (checked.named is None or d.filename in checked.named)
        }
    )
    fixes = [
        ff
        for ff in (_fix_file(c, fixer, errors, scripts.get(c)) for c in candidates)
        if ff is not None
    ]
    fixes += [ff for name, ff in scripts.items() if name not in candidates]
    return checked, errors, fixer, fixes


def _fix_sites(checked, fixer, errors: list) -> dict[str, FileFix]:
    """Rewrite the scripts whose materialisation site loses a tensor (ML015 at a checkpoint
    load: :mod:`metalint.fix.unrestored_at_materialisation`), in memory: each script's
    :class:`FileFix` by its display path. The tree is analysed again with the new scripts, so
    the classes' own fixes see the sites as they now are; what each site rewrite resolved is
    in ``fixer.sites``."""
    from metalint.fix.unrestored_at_materialisation import site_at

    sites = [(r.path, s) for r in checked.results for s in r.materialisations]
    named: dict[tuple[str, int], list[Diagnostic]] = {}
    for d in checked.diagnostics:
        # a tensor lost at a site (ML015, and ML001/ML002 judged there): the codes whose
        # findings name a tensor the site leaves, not a root's hook (ML016)
        if d.materialised and d.materialised[1] and d.subject and d.code in SITE_CODES:
            named.setdefault(d.materialised[1:], []).append(d)
    scripts: dict[str, FileFix] = {}
    for (file, line), diags in sorted(named.items()):
        site = site_at(sites, ("", file, line))
        if site is None:
            continue
        if checked.named is not None and file not in checked.named:
            why = f"the fix edits {file}, which is not among the files named"
            fixer.refused_sites[file, line] = why
            continue
        ff = scripts.get(file) or _read(file, errors)
        if ff is not None and _fix_site(ff, site, (file, line), fixer):
            scripts[file] = ff
            fixer.sites[-1].applied = [d.with_(fix=fixer.sites[-1].fix) for d in diags]
    _reanalyse(scripts, checked, fixer)
    return scripts


def _fix_site(ff: FileFix, site: dict, where: tuple[str, int], fixer) -> bool:
    """Rewrite ``ff`` (a script) at ``site``; False, with the reason noted, when the fix does
    not apply."""
    from metalint.fix.codemod import Unfixable
    from metalint.fix.unrestored_at_materialisation import plan_site

    try:
        rewrite = plan_site(ff.display, ff.text or ff.original, site)
    except Unfixable as exc:
        fixer.refused_sites[where] = str(exc)
        return False
    if not fixer.unsafe and rewrite.applicability != Applicability.SAFE:
        fixer.refused_sites[where] = UNSAFE_HINT
        return False
    ff.text = rewrite.text
    fixer.sites.append(SiteFix(ff.display, [], Fix(rewrite.applicability, rewrite.message)))
    return True


def _reanalyse(scripts: dict[str, FileFix], checked, fixer) -> None:
    """Analyse the rewritten scripts (the tree's results now hold them) and note which
    findings naming each rewritten site still stand."""
    for ff in scripts.values():
        diags, _ = fixer.analyse(ff, ff.text)
        ff.before = [d for d in checked.diagnostics if d.filename == ff.display]
        ff.after = [d for d in diags if not is_error(d.code)]
    if scripts:
        now = fixer.resolve_tree()
        for site in fixer.sites:
            site.after = [d for d in now if any(_key(d)[:3] == _key(b)[:3] for b in site.before)]


def _key(d: Diagnostic) -> tuple:
    return (d.code, d.symbol, d.subject, d.filename, d.start.row)


@dataclass
class Applied:
    """What ``metalint check --fix`` wrote: findings resolved, each fix applied, files
    rewritten, and the files that could not be fixed or written (``ML900``)."""

    fixed: int
    applied: list[Diagnostic]
    files: int
    errors: list[Diagnostic]


def apply_fixes(paths, settings, *, unsafe: bool, use_cache: bool = True, workers=None) -> Applied:
    """``metalint check --fix``: the machinery of ``fix --write``, printing nothing (the check
    that follows reports what remains)."""
    checked, errors, fixer, fixes = _fix_all(paths, settings, unsafe, use_cache, workers)
    changed = [ff for ff in fixes if ff.changed]
    tree = tree_of(paths or [Path(".")])
    _write(changed, fixer, errors, lambda *a, **k: None, verify=False, tree=tree)
    return Applied(
        fixed=sum(_resolved(ff.before, ff.after) for ff in [*fixes, *fixer.sites]),
        applied=[d for ff in [*fixer.sites, *fixes] for d in ff.applied],
        files=sum(1 for ff in changed if ff.changed),
        errors=[e for e in errors if e not in checked.diagnostics],
    )


def _fix_file(display: str, fixer, errors: list, start: FileFix | None = None):
    """Read one file and run the codemods on it (``start``: the file as a site rewrite left
    it); ``None`` when it cannot be read or decoded (the reason goes to ``errors``)."""
    ff = start or _read(display, errors)
    if ff is None:
        return None
    if start is not None:
        ff.start = start.text
    fixer.run(ff)
    if ff.error:
        errors.append(_error(display, ff.error, ff.error_code))
    return ff


def _read(display: str, errors: list) -> FileFix | None:
    """One file, read and decoded for a rewrite; ``None`` when it cannot be (the reason goes
    to ``errors``)."""
    path = Path(display)
    try:
        data = read_regular(path, MAX_SOURCE_BYTES)
    except OSError as exc:
        errors.append(_error(display, f"could not be fixed: {exc.strerror or exc}"))
        return None
    text, err = decode(data, display)
    if err is not None:
        errors.extend(err.diagnostics)
        return None
    encoding = "utf-8"
    try:
        encoding = source_encoding(data)
        faithful = text.encode(encoding) == data
    except (SyntaxError, LookupError, UnicodeError, ValueError):
        faithful = False
    if not faithful:  # CPython skips them in a comment; a rewrite would replace them
        why = f"could not be fixed: the file holds bytes that are not valid {encoding}"
        errors.append(_error(display, why))
        return None
    return FileFix(
        path,
        display,
        module_name_for(path.absolute()),
        path.name == "__init__.py",
        data,
        encoding,
        text,
        text,
    )


def _echo_diff(changed: list, echo) -> None:
    for ff in changed:
        diff = difflib.unified_diff(
            split_lines(ff.original, keepends=True),
            split_lines(ff.text, keepends=True),
            fromfile=f"a/{ff.display}",
            tofile=f"b/{ff.display}",
        )
        echo("".join(diff), nl=False)


def _write(changed: list, fixer, errors: list, echo, *, verify: bool, tree: list[str]) -> dict:
    """Write each changed file atomically, inside ``tree`` only (a file that cannot be written,
    or is a link out of the tree, keeps its original and its findings); with ``verify`` probe
    the rewritten classes. Returns ``(file, top-level class) -> the probe's verdict``."""

    for ff in changed:
        try:
            write_atomic(ff.path, ff.text.encode(ff.encoding), digest(ff.data), inside=tree)
        except (ChangedOnDisk, NotPython, OutsideTree) as exc:
            errors.append(_error(ff.display, str(exc)))
            ff.text = ff.original
            ff.applied, ff.after = [], ff.before
        except (OSError, UnicodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            errors.append(_error(ff.display, f"could not be written: {why}"))
            ff.text = ff.original
            ff.applied, ff.after = [], ff.before
    proven: dict = {}
    if verify:
        from metalint.fix.verify import verify_files

        todo = [f for f in changed if f.changed]
        # one probe run (one child process) for every rewritten file; once a file is restored,
        # the files after it are probed again, as the first run may have imported it
        first = verify_files(
            [(str(ff.path), ff.classes) for ff in todo], hooks=fixer.settings.hooks
        )
        stale = False
        for ff, verdicts in zip(todo, first):
            probed = ff.text
            verdicts = _verify(ff, fixer, echo, None if stale else verdicts)
            stale = stale or ff.text != probed
            proven.update({(ff.display, v.cls): v for v in verdicts})
    return proven


def _resolved(before: list, after: list) -> int:
    """How many findings of ``before`` no longer stand in ``after``, matched by code, class
    and tensor (lines move): a finding a fix reveals (litgpt's ``GroupedTopkRouter``: once it
    has a ``reset_parameters()``, ML005 asks it for ``weight`` too) does not cancel one it
    resolved."""

    def key(d: Diagnostic) -> tuple:
        return (d.code, d.symbol, d.subject)

    left = Counter(key(d) for d in after)
    out = 0
    for d in before:
        if left[key(d)]:
            left[key(d)] -= 1
        else:
            out += 1
    return out


def _summarise(diagnostics: list, fixes: list, fixer, errors: list, echo, *, write: bool) -> list:
    """Print what remains (with why it was not fixed), the errors and the summary line; the
    remaining findings."""
    fixed = sum(_resolved(ff.before, ff.after) for ff in [*fixes, *fixer.sites])
    fixed_files = {f.display for f in fixes}
    # a finding a script's rewrite resolved stands no more; one it left, once
    at_sites = {_key(d) for site in fixer.sites for d in site.before}
    remaining = [
        d
        for d in diagnostics
        if not is_error(d.code) and d.filename not in fixed_files and _key(d) not in at_sites
    ]
    for ff in fixes:
        remaining.extend(ff.after)
    for site in fixer.sites:
        remaining += [d for d in site.after if d.filename not in fixed_files]
    unfixable = unsafe_hidden = 0
    by_file: dict[str, FileFix] = {}
    for f in fixes:
        by_file.setdefault(f.display, f)
    for d in sorted(remaining, key=lambda d: d.sort_key):
        ff = by_file.get(d.filename)
        why = fixer.reason(ff, d)
        if (d.fix is not None and not fixer.applicable(d)) or why == UNSAFE_HINT:
            unsafe_hidden += 1
        elif why is not None or d.fix is None:
            unfixable += 1
        echo(
            f"{d.filename}:{d.start.row}:{d.start.column}: {d.code} {d.message}"
            + (f" [not fixed: {why}]" if why else "")
        )
    if errors:
        echo(render(errors, "text"), nl=False)
    echo(_summary(fixed, len(remaining), unfixable, unsafe_hidden, write))
    return remaining


def _error(display: str, message: str, code: str = ERROR_CODE):

    pos = Position(1, 1)
    return Diagnostic(code, message, display, pos, pos)


def _echo_applied(d, verdict, echo, *, write: bool, show_fixes: bool, shown: set) -> None:
    """One line per fix: ``fixed and proven`` (``--verify``: the probe passed), ``fixed``,
    ``fixed (not proven: why)``; without ``--write`` only with ``--show-fixes``. A finding
    fixed over two rounds (ML003's replaced child tensor: copied in place, then moved into a
    hook) is one line unless ``--show-fixes`` lists each rewrite (``shown``: lines printed)."""
    if not write and not show_fixes:
        return
    state = "fixed" if write else "would fix"
    if verdict is not None and verdict.status == "passed":
        state = "fixed and proven (probe passed)"
    elif verdict is not None:
        state += f" (not proven: {verdict.detail})"
    line = f"{d.filename}:{d.start.row}: {d.code} [{d.symbol}] {state}"
    if show_fixes:
        line = f"fix {line}: {d.fix.message}"
    if line not in shown:
        shown.add(line)
        echo(line)


def _verify(ff, fixer, echo, first: list | None = None) -> list:
    """Probe the rewritten classes (``first``: the verdicts of a probe of the file as written,
    when there is one); restore the file when one fails, then retry without it.
    Returns the verdicts of the last probe run (for the per-finding summary)."""
    from metalint.fix.verify import broke_construction, verify_classes

    hooks = fixer.settings.hooks
    excluded: set[str] = set()
    for attempt in range(3):
        verdicts = first if attempt == 0 and first is not None else None
        if verdicts is None:
            verdicts = verify_classes(str(ff.path), ff.classes, hooks=hooks)
        verdicts = broke_construction(verdicts, lambda classes: _probe_original(ff, classes, hooks))
        failed = [v for v in verdicts if v.status == "failed"]
        _echo_verdicts(ff, verdicts, echo)
        if not failed:
            return verdicts
        written = ff.text.encode(ff.encoding)
        write_atomic(ff.path, ff.data, digest(written))  # restore the original
        for v in failed:
            echo(
                f"restored {ff.display}: the probe failed on {v.cls} after the rewrite: {v.detail}"
            )
            excluded.add(v.cls)
        fixer.run(ff, exclude=excluded)
        _refuse_probed(ff, excluded)
        if not ff.changed:
            return []
        write_atomic(ff.path, ff.text.encode(ff.encoding), digest(ff.data))
    # out of attempts: leave the original
    write_atomic(ff.path, ff.data, digest(ff.text.encode(ff.encoding)))
    ff.text, ff.applied, ff.after = ff.original, [], ff.before
    return []


def _echo_verdicts(ff, verdicts: list, echo) -> None:
    for v in verdicts:
        if v.status == "passed":
            echo(f"verified {ff.display}:{v.cls}: probe passed")
        elif v.status == "skipped":
            echo(f"not verified {ff.display}:{v.cls}: {v.detail}")


def _refuse_probed(ff, excluded: set[str]) -> None:
    """The findings of the classes whose probe failed after the rewrite are left, refused."""
    for cls in excluded:
        for d in ff.after:
            if (d.symbol or "").split(".")[0] == cls:
                ff.refused.setdefault(
                    (d.code, d.start.row, d.symbol or ""),
                    "the probe failed after the rewrite (--verify)",
                )


def _probe_original(ff, classes: list[str], hooks) -> list:
    """The probe's verdicts on ``classes`` of ``ff`` as it was before the rewrite: the original
    is put back on disk for the probe, then the rewrite again (each write atomic)."""
    from metalint.fix.verify import verify_classes

    written = ff.text.encode(ff.encoding)
    write_atomic(ff.path, ff.data, digest(written))
    try:
        return verify_classes(str(ff.path), classes, hooks=hooks)
    finally:
        write_atomic(ff.path, written, digest(ff.data))


@click.command("fix")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--write", is_flag=True, help="Write the fixes (default: print a diff, change nothing)."
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Print a unified diff of the changes (the default without --write).",
)
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    help="Also apply fixes that may change eager behaviour or a signature.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Probe each rewritten class; restore the file when the probe fails.",
)
@click.option(
    "--show-fixes", is_flag=True, help="List every fix applied (or that would be applied)."
)
@click.option("--select", multiple=True, help="Codes or prefixes to fix (comma-separated; ALL).")
@click.option("--extend-select", multiple=True, help="Codes to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Codes or prefixes not to fix.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--config", type=click.Path(path_type=Path), help="pyproject.toml to use.")
@click.option("--force-exclude", is_flag=True, help=FORCE_EXCLUDE_HELP)
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: CPUs).")
def fix_command(
    paths,
    write,
    show_diff,
    unsafe_fixes,
    verify,
    show_fixes,
    select,
    extend_select,
    ignore,
    no_cache,
    config,
    force_exclude,
    jobs,
):
    """Rewrite PATHS (default: .) so their modules can be built on the meta device."""

    try:
        paths = list(paths) or [Path(".")]
        settings = cli_settings(paths, config, select, extend_select, ignore)
        if verify and not write:
            raise click.UsageError("--verify needs --write")
        needs = torch_missing("metalint fix --verify") if verify else None
        if needs:
            click.echo(needs, err=True)
            sys.exit(2)
        with progress(True):  # on a terminal only
            rc = run_fix(
                paths,
                settings,
                write=write,
                show_diff=show_diff,
                unsafe=unsafe_fixes,
                verify=verify,
                use_cache=not no_cache,
                workers=jobs,
                show_fixes=show_fixes,
                force_exclude=force_exclude,
            )
    except ConfigError as exc:
        click.echo(f"metalint: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(rc)
