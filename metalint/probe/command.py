"""``metalint probe``: prove findings by building each module on the meta device."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from metalint import report
from metalint.codes import ERROR_CODE
from metalint.diagnostics import Diagnostic, Position
from metalint.extras import torch_missing
from metalint.probe.isolate import Options, Outcome, run_target
from metalint.probe.results import Declared, merge_across_classes, split_declared, verdict_text
from metalint.probe.target import Target, load_settings_for_probe, parse_target


@dataclass
class ProbeReport:
    """Everything a probe run found: per item outcomes, diagnostics, per class summaries."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        found: list[tuple[str, Diagnostic]] = []
        out: list[Diagnostic] = []
        for o in self.outcomes:
            if o.kind == "result" and o.result:
                item = o.label.rpartition(":")[2]
                found.extend((item, Diagnostic.from_cache(d)) for d in o.result["findings"])
            elif o.kind == "error":
                out.append(error_diagnostic(o))
        return merge_across_classes(found) + out

    @property
    def classes(self) -> dict[str, dict[str, Any]]:
        """``file::qualname`` -> summary (see ``build._class_summary``), merged over results.
        A model whose meta build raised (``compared`` False) had its parameters and buffers
        compared on an eager stand-in (``substitute``), its plain tensors not at all: those do
        not count as made by the class (one only such a build made would read as surviving);
        when the stand-in failed too, only its codes and ``raised`` count."""
        merged: dict[str, dict[str, Any]] = {}
        for o in self.outcomes:
            if o.kind != "result" or not o.result:
                continue
            for key, info in o.result.get("classes", {}).items():
                m = merged.setdefault(
                    key,
                    {
                        **info,
                        "attrs": [],
                        "plain": [],
                        "broken": {},
                        "codes": [],
                        "subtree_broken": 0,
                        "raised": False,
                        "compared": False,
                        "substitute": False,
                    },
                )
                compared = info.get("compared", True)
                if compared:
                    kinds: tuple[str, ...] = ("attrs", "plain")
                elif info.get("substitute", False):
                    kinds = ("attrs",)  # an eager stand-in: nothing of it stays on meta
                else:
                    kinds = ()
                for kind in kinds:
                    m[kind] = sorted(set(m[kind]) | set(info.get(kind, ())))
                for a, codes in info["broken"].items():
                    m["broken"][a] = sorted(set(m["broken"].get(a, [])) | set(codes))
                m["codes"] = sorted(set(m["codes"]) | set(info["codes"]))
                m["subtree_broken"] += info["subtree_broken"]
                m["raised"] = m["raised"] or info["raised"]
                m["compared"] = m["compared"] or compared
                m["substitute"] = m["substitute"] or info.get("substitute", False)
        return merged


def error_diagnostic(o: Outcome) -> Diagnostic:
    filename, row = o.site if o.site else (o.file or o.label, 1)
    try:
        rel = os.path.relpath(filename)
        filename = filename if rel.startswith("..") else rel
    except ValueError:
        pass
    return Diagnostic(
        code=ERROR_CODE,
        message=f"probe target `{o.label}` could not be checked: {o.message}",
        filename=filename,
        start=Position(row, 1),
        end=Position(row, 1),
        symbol=o.label.rpartition(":")[2] if ":" in o.label else None,
    )


def _progress_enabled() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


def run_probe(
    specs: list[str],
    opts: Options,
    *,
    progress: bool = False,
    nproc: int = 1,
    shard: str | None = None,
) -> ProbeReport:
    """Probe every target; ``progress``: a line on stderr (a terminal) with the classes built
    so far and those left in the current file, rewritten as each starts. With ``shard``, on
    ``nproc`` ranks (:mod:`.distributed`)."""
    targets: list[Target] = [t for s in specs for t in parse_target(s)]
    rep = ProbeReport()
    for i, t in enumerate(targets, 1):
        if progress:
            before = len(rep.outcomes)

            def show(label: str, done: int, total: int, i: int = i, before: int = before) -> None:
                where = f"class {done + 1}/{total}: " if total else ""
                sys.stderr.write(
                    f"\r\x1b[Kprobe: {before + done} classes done; file {i}/{len(targets)}, "
                    f"{where}{label}"[:200]
                )
                sys.stderr.flush()

            opts = dataclasses.replace(opts, on_start=show)
            show(t.display, 0, 0)
        if shard is not None:
            from metalint.probe.distributed import run_sharded

            rep.outcomes.extend(run_sharded(t, opts, nproc, shard))
        else:
            rep.outcomes.extend(run_target(t, opts))
    if progress:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
    return rep


def coverage(rep: ProbeReport) -> tuple[int, str | None]:
    """(items built, a line saying what was not probed and why, or None when everything was)."""
    built = sum(o.kind == "result" for o in rep.outcomes)
    skipped = [o for o in rep.outcomes if o.kind == "skip"]
    errors = sum(o.kind == "error" for o in rep.outcomes)
    if not skipped and not errors:
        return built, None
    why: dict[str, int] = {}
    for o in skipped:
        reason = o.message.split(":")[0] or "skipped"
        why[reason] = why.get(reason, 0) + 1
    parts = [f"{n} skipped ({r})" for r, n in sorted(why.items())]
    if errors:
        parts.append(f"{errors} could not be checked")
    return built, f"probed {built} of {len(rep.outcomes)} items; {', '.join(parts)}"


def summary_lines(rep: ProbeReport, declared: list[Declared] = ()) -> list[str]:
    """One line per probed item; an item whose every finding is a ``declared`` difference
    passed (with them counted)."""
    lines = []
    classes = rep.classes
    for o in rep.outcomes:
        if o.kind == "skip":
            lines.append(f"skip  {o.label}: {o.message}")
        elif o.kind == "error":
            lines.append(f"error {o.label}: {o.message}")
        else:
            r = o.result or {}
            args = f"({o.args})" if o.args and o.args != "factory" else ""
            meta = r.get("meta_alloc_bytes", 0)
            note = (
                f"; the meta build grew RssAnon by {meta / 2**20:.1f} MiB"
                if meta >= 1 << 20
                else ""
            )
            verdict = verdict_text(r)
            findings = [Diagnostic.from_cache(d) for d in r.get("findings", [])]
            if declared and findings and not split_declared(findings, declared, classes)[0]:
                n = len(findings)
                verdict = (
                    f"passed with {n} declared difference{'s' if n != 1 else ''} "
                    f"({r.get('tensors', 0)} tensors)"
                )
            lines.append(
                f"probe {o.label}{args} on {r.get('device')} via "
                f"{r.get('init_used') or '-'}: {verdict}{note}"
            )
    return lines


def _targets(targets, config):
    """The targets to probe (those given, else the configured factories) and the
    settings."""
    specs = list(targets)
    first = parse_target(specs[0]) if specs else []
    settings = load_settings_for_probe(first[0].path if first else None, config)
    if not specs:
        specs = list(settings.probe.get("factories", []))
        if not specs:
            raise click.UsageError("no TARGET given and no [tool.metalint.probe] factories")
    return [_through_factory(s, settings.factories) for s in specs], settings


def _through_factory(spec: str, factories: dict[str, str]) -> str:
    """``module:Class`` of a class the project builds through a factory (``[tool.metalint.probe]
    factories`` as a table): that factory, as ``check --probe`` builds it; any other target
    as given."""
    module, sep, name = spec.partition(":")
    factory = factories.get(f"{module}.{name}") if sep and not module.endswith(".py") else None
    if factory is None:
        return spec
    click.echo(f"metalint: note: {spec} is built by its factory {factory}", err=True)
    return factory


def _show_declared(intended, stale, where: str, fmt: str) -> None:
    """The differences ``expected-differences`` declares (not failures) and the stale
    declarations."""
    for d, x in intended:
        click.echo(
            f"declared {d.filename}:{d.start.row}:{d.start.column}: {d.code} {d.message} "
            f"(expected-differences {x.spec!r} in {where}: not a failure)",
            err=fmt != "text",
        )
    for x in stale:
        click.echo(
            f"metalint probe: warning: expected-differences {x.spec!r} in {where} matched no "
            f"difference: {x.cls} was built and no finding names its `{x.tensor}` (stale)",
            err=True,
        )


@click.command("probe")
@click.argument("targets", nargs=-1)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Device for to_empty and init (auto: cuda when available).",
)
@click.option(
    "--init",
    "init",
    default="auto",
    show_default=True,
    help="auto | reset_parameters | init_weights | <module:callable> called with the model.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds per probed class/factory (and for importing a target).",
)
@click.option(
    "--output-format", "fmt", type=click.Choice(report.FORMATS), default="text", show_default=True
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings are reported.")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    default=None,
    help="pyproject.toml to use (default: the nearest one above the first TARGET "
    "that is a file or folder, else above the working directory).",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=2),
    default=None,
    help="With --shard: ranks to launch (gloo on CPU, NCCL on CUDA; default 2).",
)
@click.option(
    "--shard",
    type=click.Choice(["fsdp", "tp"]),
    default=None,
    help="Shard the meta build (FSDP2 fully_shard / tensor parallel) on --nproc ranks and "
    "compare its init with the single-device build (MP010, MP011).",
)
def probe_command(
    targets, device, init, seed, timeout, fmt, exit_zero, config, nproc, shard
) -> None:
    """Build each TARGET eagerly and on meta, run its init, and compare every tensor.

    TARGET: a file, a directory, a dotted module, module:Class or module:factory (several
    of one module: module:ClassA,ClassB).
    Without TARGET, the factories listed in [tool.metalint.probe] of pyproject.toml.
    The configured [tool.metalint] hooks are run on every module that has them after the init.
    """
    needs = torch_missing("metalint probe")
    if needs:
        click.echo(needs, err=True)
        sys.exit(2)
    specs, settings = _targets(targets, config)
    opts = Options(device=device, init=init, seed=seed, timeout=timeout, hooks=settings.hooks)
    if nproc is not None and shard is None:
        raise click.UsageError("--nproc needs --shard fsdp|tp")
    declared = [Declared.parse(x) for x in settings.expected_differences]
    rep = run_probe(specs, opts, progress=_progress_enabled(), nproc=nproc or 2, shard=shard)
    diags, intended, stale = split_declared(rep.diagnostics, declared, rep.classes)
    built, not_probed = coverage(rep)
    if fmt in report.TEXT_FORMATS:
        for line in summary_lines(rep, declared):
            click.echo(line)
    _show_declared(intended, stale, settings.config_file or "pyproject.toml", fmt)
    if not_probed:
        click.echo(not_probed, err=True)
    if built == 0:
        # "All checks passed!" over nothing built would be a false green
        if fmt not in report.TEXT_FORMATS or diags:
            click.echo(report.render(diags, fmt), nl=False)
        click.echo("Nothing was probed: no item could be built.", err=True)
        sys.exit(2)
    click.echo(report.render(diags, fmt), nl=False)
    sys.exit(report.exit_code(diags, exit_zero=exit_zero))
