"""Model-level audit of the static rules: every finding judged under the protocol of the models
that contain its class.

    python bench/rule_audit.py --out audit.md \\
        --python transformers=/work/audit/venv-hf/bin/python --every transformers=4 \\
        transformers timm open_clip diffusers torch_geometric monai peft

A class is materialised inside model *roots*, under the root's protocol, not alone. For each
library the audit lists its roots (``bench/audit_models.py``: transformers families at tiny size
with every model class of the family, ``timm.create_model`` models, open_clip/diffusers/monai/
torch-geometric/peft models from tiny configs) and probes each root under ``--init auto`` (each
module's ``init_weights()`` or ``reset_parameters()``, children first, the root's last: for a
transformers ``PreTrainedModel`` that is the root's ``init_weights()``, which applies
``_init_weights`` to every module; for timm the root's ``init_weights()``; else
``reset_parameters()`` per module). The probe maps each lost tensor to the class that owns it
(module path -> class -> file and qualified name). ``metalint check`` runs on the installed
package; a finding on a class some built root contains is ``confirmed`` when the probe saw the
tensor it names lost under at least one root, ``refuted`` when every root built it and the tensor
survived, ``unproven`` when no root made that tensor (a root whose meta build raised is judged
on an eager build that ``to_empty()`` wipes in its place, except for ML007/ML009). A finding on a
class that no built root contains is judged by probing its class alone (``reset_parameters``
per module for ML006/ML010, ``auto`` otherwise), as a user without a root would materialise
it; ``--no-alone LIB`` leaves those out (counted as "outside roots"). Before that, the roots
the findings name that the sample did not build are built too (``--extra-roots``, per
library): the root a finding is judged under (``d.root``) when no build made it, then the
roots that contain the classes no built root contains (``d.root``, else the roots the static
composition finds), most findings first; ``audit_models.py resolve`` says how to build each.

Per library and rule: findings, confirmed, refuted, unproven; per library: the library-defined
classes the probe shows losing a tensor that ``check`` does not flag at all ("missed"). Then
every refuted finding (by rule, library, class) so that it is fixed or written up as a known
limit. ``--tiny`` audits fixtures/audit/tinylib (the smoke test).

Each library is probed in the interpreter given with ``--python LIB=PATH`` (one that imports the
library; metalint is put on its path), with ``--pythonpath LIB=DIR`` prepended to its
``PYTHONPATH``. ``--timeout`` bounds every root (and every class probed alone).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

#: rules whose claim is about per-module ``reset_parameters()`` (FSDP's materialisation)
PER_MODULE_RULES = {"ML006", "ML010"}
#: default cap on the roots a library's findings name that its sample did not build
EXTRA_ROOTS = 150
VERDICTS = ("confirmed", "refuted", "unproven")


@dataclass
class LibraryAudit:
    label: str
    package: str
    roots: int = 0
    built: int = 0
    groups: int = 0
    groups_of: int | None = None
    groups_built: int = 0
    extra_named: int = 0  # roots the findings name that the sample did not build
    extra_roots: int = 0  # ... of which audit_models could build (probed)
    extra_built: int = 0
    groups_built_extra: int = 0
    not_built: collections.Counter = field(default_factory=collections.Counter)
    findings: list = field(default_factory=list)  # (Diagnostic with verdict, how judged)
    outside: int = 0  # findings on classes no built root contains, not probed alone
    missed: list[str] = field(default_factory=list)  # "file::Class: attrs"
    losing: int = 0  # library classes the probe shows losing a tensor in some root
    check_s: float = 0.0
    probe_s: float = 0.0


def _kv(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, _, v = p.partition("=")
        out[k] = v
    return out


def _with_env(pythonpath: str | None):
    """Context: ``PYTHONPATH`` for the probe's child processes (the library's extra folder)."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        old = os.environ.get("PYTHONPATH")
        if pythonpath:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, old) if p)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old

    return cm()


def list_roots(library: str, python: str, every: int, limit: int | None) -> dict:
    cmd = [python, str(BENCH / "audit_models.py"), "list", library, "--every", str(every)]
    if limit:
        cmd += ["--limit", str(limit)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _factory_name(root: str) -> str:
    return "r_" + re.sub(r"\W", "_", root)


def write_factories(library: str, roots: list[str], workdir: Path, tag: str = "roots") -> Path:
    """A module with one factory per root (``r_<root>() -> build(library, root)``)."""
    lines = [
        "import sys",
        f"sys.path.insert(0, {str(BENCH)!r})",
        "from audit_models import build",
        "",
    ]
    for r in roots:
        lines.append(f"def {_factory_name(r)}():\n    return build({library!r}, {r!r})\n")
    path = workdir / f"{tag}_{library}.py"
    path.write_text("\n".join(lines))
    return path


def _static(package: Path) -> tuple[list, Callable[[str], list], Any, float]:
    """The findings of ``metalint check`` on the package, the lineage of its classes (see
    :func:`_lineage`), the roots and protocols of the tree and the seconds the check took."""
    from metalint.check import run_check
    from metalint.codes import ERROR_CODE
    from metalint.config import Settings
    from metalint.static.hierarchy import Hierarchy
    from metalint.static.protocol import Protocols

    settings = Settings(root=package.parent, select=["ML"])
    t0 = time.perf_counter()
    result = run_check([package], settings, use_cache=False)
    diags = [
        d
        for d in result.diagnostics
        if d.code != ERROR_CODE and d.code.startswith("ML") and d.code != "ML100" and d.symbol
    ]
    protocols = Protocols(Hierarchy(result.results))
    return diags, _lineage(result.results, protocols), protocols, time.perf_counter() - t0


def _lineage(results, protocols) -> Callable[[str], list]:
    """``module.Class`` -> ``(file, qualname)`` of the class and of its bases in the checked
    tree: a tensor a base's ``__init__`` creates is lost on the subclass the model builds
    (transformers' ``Sam3LiteTextRepMixer(Sam3LiteTextLayerScaledResidual)``), and the
    finding is on the base. A class generated from a code-generation template
    (``modeling_llama.py`` from ``modular_llama.py``) lists the template's class too: the
    template's findings are about the generated class, the one a model builds."""
    from metalint.static.templates import twins

    where: dict[str, tuple[str, str]] = {}
    for r in results:
        for c in r.classes:
            if r.module and c.fullname.startswith(r.module + "."):
                where[c.fullname] = (_norm(r.path), c.fullname[len(r.module) + 1 :])
    template_of = {g: t for t, g in twins(where).items()}

    def lineage(fullname: str) -> list:
        mro = protocols.mro(fullname)
        return [where[c] for c in [*mro, *(template_of.get(c) for c in mro)] if c in where]

    return lineage


def _generated_root(root: str | None) -> str | None:
    """The class a model builds for the root a finding names: a code-generation template's
    class (``pkg.modular_llama.LlamaModel``) is never built, the generated one is."""
    from metalint.static.templates import generated_name

    return (generated_name(root) or root) if root else root


def _norm(path: str | None) -> str:
    return os.path.normcase(os.path.realpath(path)) if path else ""


def audit(
    library: str,
    python: str,
    *,
    every: int = 1,
    limit: int | None = None,
    timeout: float = 120.0,
    alone: bool = True,
    workdir: Path,
    pythonpath: str | None = None,
    extra: int = EXTRA_ROOTS,
    saved: Path | None = None,
    wait: float = 0.0,
) -> LibraryAudit:
    with _with_env(pythonpath):
        listing = list_roots(library, python, every, limit)
    package = Path(listing["package"])
    res = LibraryAudit(library, str(package), groups=listing["groups"], groups_of=listing.get("of"))
    roots = [r for r, _ in listing["roots"]]
    group_of = {r: g for r, g in listing["roots"]}
    res.roots = len(roots)
    static, lineage, protocols, res.check_s = _static(package)
    print(
        f"{library}: {len(static)} findings ({res.check_s:.0f} s); probing {len(roots)} roots "
        f"of {res.groups} groups",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    from metalint.probe.command import ProbeReport

    rep, built, built_groups = _probe_roots(
        library,
        roots,
        group_of,
        python,
        timeout,
        pythonpath,
        workdir,
        "roots",
        res.not_built,
        saved,
        wait,
    )
    res.built = built
    # the roots the findings name that the sample did not build (a finding judged under
    # ``d.root`` is unproven until that root is built), then those containing the classes no
    # built root contains: built too, up to ``extra``
    wanted = _unbuilt_roots(static, rep, protocols) if extra else []
    if wanted:
        with _with_env(pythonpath):
            resolved = resolve_roots(library, python, wanted)
        ids = dict.fromkeys(r for c in wanted for r in resolved.get(c, ()) if r not in group_of)
        more = list(ids)[:extra]
        res.extra_named, res.extra_roots = len(wanted), len(more)
        if more:
            print(f"{library}: probing {len(more)} roots the findings name", file=sys.stderr)
            group_of.update({r: r.partition("/")[0] for r in more})
            rep2, res.extra_built, more_groups = _probe_roots(
                library,
                more,
                group_of,
                python,
                timeout,
                pythonpath,
                workdir,
                "named",
                res.not_built,
                saved,
            )
            rep = ProbeReport(outcomes=[*rep.outcomes, *rep2.outcomes])
            res.groups_built_extra = len(more_groups - built_groups)
    res.groups_built = len(built_groups)
    judged = _with_bases(rep, lineage)
    classes = list(judged.classes.values())
    contained = {(_norm(c["file"]), c["cls"]) for c in classes}
    inside, outside = [], []
    for d in static:
        (inside if (_norm(d.filename), d.symbol) in contained else outside).append(d)
    # a root whose meta build raised (MP006: monai's SwinTransformer calls ``.item()``) was
    # judged on an eager stand-in: the probe's summary says so (``compared``, ``substitute``),
    # and ``verdict_for`` reads it
    built_in = _roots_built(judged)
    for d in inside:
        res.findings.append((d.with_(verdict=_verdict(d, classes, built_in)), "root"))
    if alone and outside:
        res.findings += _probe_alone(outside, python, timeout, pythonpath, workdir, library)
    else:
        res.outside = len(outside)
    res.probe_s = time.perf_counter() - t0
    _missed(res, rep, static, lineage, _norm(str(package)) + os.sep, package.parent)
    return res


def _probe_roots(
    library,
    roots,
    group_of,
    python,
    timeout,
    pythonpath,
    workdir,
    tag,
    not_built,
    saved=None,
    wait=0.0,
):
    """Probe ``roots`` (one generated factory each) under ``--init auto``: the report, how many
    built, and the groups (families) they cover; why the others did not build is counted in
    ``not_built``. ``saved``: a folder of each root's outcome, reused when there (see
    ``--probe-cache``) and written for each root probed."""
    from metalint.probe.command import ProbeReport, run_probe
    from metalint.probe.isolate import Options

    factories = write_factories(library, roots, workdir, tag)
    names = [_factory_name(r) for r in roots]
    by_name = dict(zip(names, roots))
    _wait_for(saved, library, roots, wait)
    reused = [o for n in names if (o := _load_outcome(saved, library, by_name[n], tag))]
    done = {o.label.rpartition(":")[2] for o in reused}
    names = [n for n in names if n not in done]
    # one child per batch (it imports torch and the library once); a child that times out
    # before it lists its roots costs its batch only, and counts as each of its roots not built
    # each batch's outcomes are saved as it ends: an audit stopped midway keeps what it probed
    batches = [names[i : i + ROOTS_PER_CHILD] for i in range(0, len(names), ROOTS_PER_CHILD)]
    probed: list = []
    for i, batch in enumerate(batches, 1):
        with _with_env(pythonpath):
            part = run_probe(
                [f"{factories}:{','.join(batch)}"],
                Options(device="cpu", init="auto", timeout=timeout, python=python),
                progress=sys.stderr.isatty(),
            )
        for o in part.outcomes:
            _save_outcome(saved, library, by_name.get(o.label.rpartition(":")[2]), o)
        probed += part.outcomes
        done = sum(len(b) for b in batches[:i])
        print(f"{library}: {tag}: {done}/{len(names)} roots probed", file=sys.stderr, flush=True)
    rep = ProbeReport(outcomes=[*reused, *probed])
    built, groups = 0, set()
    for o in rep.outcomes:
        label = o.label.rpartition(":")[2]
        if o.kind == "result":
            built += 1
            groups.add(group_of.get(by_name.get(label)))
        else:
            not_built[_why(o.message)] += len(label.split(","))
    return rep, built, groups


def _wait_for(saved: Path | None, library: str, roots: list[str], wait: float) -> None:
    """Wait up to ``wait`` seconds for another audit (judging other static findings on the
    same probe) to save the outcome of every root of ``roots``."""
    end = time.monotonic() + wait
    while saved and time.monotonic() < end:
        if all(_outcome_path(saved, library, r).is_file() for r in roots):
            return
        time.sleep(10)


def _outcome_path(saved: Path, library: str, root: str) -> Path:
    import hashlib

    return saved / f"{library}-{hashlib.sha1(root.encode()).hexdigest()[:16]}.json"


def _load_outcome(saved: Path | None, library: str, root: str, tag: str):
    """The saved outcome of ``root``'s probe, its label that of this run's factory module."""
    import dataclasses

    from metalint.probe.isolate import Outcome

    path = _outcome_path(saved, library, root) if saved else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    if data.pop("root", None) != root:
        return None
    fields = {f.name for f in dataclasses.fields(Outcome)}
    data = {k: v for k, v in data.items() if k in fields}
    if data.get("site"):
        data["site"] = tuple(data["site"])
    data["label"] = f"{tag}_{library}.py:{_factory_name(root)}"
    return Outcome(**data)


def _save_outcome(saved: Path | None, library: str, root: str | None, outcome) -> None:
    """Save the outcome of one root's probe (one of a whole batch is not saved)."""
    import dataclasses

    if saved is None or root is None:
        return
    saved.mkdir(parents=True, exist_ok=True)
    data = {"root": root, **dataclasses.asdict(outcome)}
    _outcome_path(saved, library, root).write_text(json.dumps(data))


#: roots probed by one child process (see :func:`_probe_roots`)
ROOTS_PER_CHILD = 40


def _unbuilt_roots(static: list, rep, protocols) -> list[str]:
    """Model roots (class full names) to build beyond the sample, most wanted first: the root
    a finding on a built class is judged under (``d.root``) when no build made it, then the
    roots containing the classes no build made (``d.root``, else the roots the static
    composition finds), each ranked by how many findings it would judge."""
    built = _roots_built(rep)
    contained = {(_norm(c["file"]), c["cls"]) for c in rep.classes.values()}
    named: collections.Counter = collections.Counter()
    containing: collections.Counter = collections.Counter()
    for d in static:
        cls = d.condition.cls if d.condition is not None else ""
        if (_norm(d.filename), d.symbol) in contained:
            if d.root and _generated_root(d.root) not in built:
                named[_generated_root(d.root)] += 1
            continue
        for root in [d.root] if d.root else sorted(protocols.roots(cls)) if cls else []:
            root = _generated_root(root)
            if root not in built:
                containing[root] += 1
    first = sorted(named, key=lambda r: (-named[r], r))
    rest = sorted((r for r in containing if r not in named), key=lambda r: (-containing[r], r))
    return first + rest


def resolve_roots(library: str, python: str, classes: list[str]) -> dict[str, list[str]]:
    """Root ids of ``bench/audit_models.py`` that build each class (``resolve``)."""
    cmd = [python, str(BENCH / "audit_models.py"), "resolve", library]
    out = subprocess.run(
        cmd, input=json.dumps(classes), capture_output=True, text=True, timeout=600, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _missed(res: LibraryAudit, rep, static: list, lineage, pkg: str, top: Path) -> None:
    """Classes of the library the probe shows losing a tensor, and those check does not flag:
    a class counts as flagged when check flags it or a base it inherits the tensor from, or
    when the root it lost the tensor in carries a finding about its whole subtree (ML010,
    ML006, ML003 on a child's tensor: the parent's init that per-module hooks do not replay)."""
    flagged = {(_norm(d.filename), d.symbol) for d in static}
    subtree = {
        (_norm(d.filename), d.symbol)
        for d in static
        if d.code in PER_MODULE_RULES or (d.subject and "." in d.subject[0])
    }
    losing: set = set()
    missed: dict[tuple, set] = {}
    for o in rep.outcomes:
        infos = list(o.result.get("classes", {}).values()) if o.kind == "result" else []
        if not infos:
            continue
        root = infos[0]  # the probe lists the model's classes root first

        def keys(info) -> list:
            return [(_norm(info["file"]), info["cls"]), *lineage(f"{info['module']}.{info['cls']}")]

        covered = any(k in subtree for k in keys(root))
        for info in infos:
            key = (_norm(info["file"]), info["cls"])
            if not info["broken"] or not key[0].startswith(pkg):
                continue
            losing.add(key)
            if not covered and not any(k in flagged for k in keys(info)):
                missed.setdefault(key, set()).update(info["broken"])
    res.losing = len(losing)
    res.missed = sorted(
        f"{os.path.relpath(f, top)}::{cls}: {', '.join(sorted(attrs))}"
        for (f, cls), attrs in missed.items()
    )


def _with_bases(rep, lineage):
    """The probe report with each class a root built also listed under its bases in the
    checked tree: a finding on a base is about the tensors its ``__init__`` creates, which
    live on the subclass the model builds (peft's ``_BaseAdaptedAttention`` ->
    ``AdaptedAttention``, ``RoadLayer`` -> ``road.Linear``). A base the root built itself
    keeps its own summary."""
    import dataclasses

    from metalint.probe.command import ProbeReport

    out = []
    for o in rep.outcomes:
        infos = o.result.get("classes", {}) if o.kind == "result" and o.result else {}
        if infos:
            have = {(_norm(i["file"]), i["cls"]) for i in infos.values()}
            extra = {}
            for info in infos.values():
                for file, qualname in lineage(f"{info['module']}.{info['cls']}"):
                    if (file, qualname) not in have:
                        extra.setdefault(
                            f"{file}::{qualname}", {**info, "file": file, "cls": qualname}
                        )
            o = dataclasses.replace(o, result={**o.result, "classes": {**infos, **extra}})
        out.append(o)
    return ProbeReport(outcomes=out)


def _roots_built(rep) -> dict[str, list]:
    """Class full name (``module.qualname``) -> the probe outcomes of the roots that built it."""
    out: dict[str, list] = collections.defaultdict(list)
    for o in rep.outcomes:
        if o.kind == "result" and o.result:
            for info in o.result.get("classes", {}).values():
                name = f"{info.get('module')}.{info['cls']}"
                if not out[name] or out[name][-1] is not o:
                    out[name].append(o)
    return out


def _verdict(d, classes: list, built_in: dict[str, list]) -> str | None:
    """A finding is about its class inside the roots that contain it: ``confirmed`` when some
    built root loses the tensor. A finding that names the root it is lost under (``d.root``)
    is ``refuted`` only by a build of that root in which the tensor survived; when that root
    was not built, it is unproven (another root keeping the tensor says nothing about it)."""
    from metalint.probe.command import ProbeReport
    from metalint.probe.merge import _lookup, verdict_for

    anywhere = verdict_for(d, _lookup(classes, d.filename, d.symbol))
    if anywhere == "confirmed" or not d.root:
        return anywhere
    outcomes = built_in.get(_generated_root(d.root))
    if not outcomes:
        return None
    named = list(ProbeReport(outcomes=outcomes).classes.values())
    return verdict_for(d, _lookup(named, d.filename, d.symbol))


def _why(message: str) -> str:
    """A short reason a root did not build (the exception type, or timeout)."""
    m = re.search(r"(timed out|\b[A-Z][A-Za-z]*(?:Error|Exception)\b)", message)
    return m.group(1) if m else (message[:40] or "unknown")


def _probe_alone(
    diags: list, python: str, timeout: float, pythonpath: str | None, workdir: Path, library: str
) -> list:
    """Findings on classes no root contains: each class probed on its own, with the arguments
    ``metalint probe`` guesses. All classes are factories of one generated module, so one
    child process imports the library once (a child per file would import it per file)."""
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options
    from metalint.probe.merge import mark_verdicts

    out = []
    for init, per_module in (("auto", False), ("reset_parameters", True)):
        chosen = [d for d in diags if (d.code in PER_MODULE_RULES) == per_module]
        classes = sorted({(d.filename, d.symbol) for d in chosen})
        if not classes:
            continue
        lines = ["from metalint.probe.target import import_file, infer_arguments", ""]
        names = []
        for i, (file, symbol) in enumerate(classes):
            names.append(f"a{i}_" + re.sub(r"\W", "_", symbol))
            lines.append(
                f"def {names[-1]}():\n"
                f"    cls = import_file({file!r})\n"
                f"    for part in {symbol.split('.')!r}:\n"
                f"        cls = getattr(cls, part)\n"
                f"    return cls(**infer_arguments(cls))\n"
            )
        module = workdir / f"alone_{library}_{init}.py"
        module.write_text("\n".join(lines))
        with _with_env(pythonpath):
            report = run_probe(
                [f"{module}:{','.join(names)}"],
                Options(device="cpu", init=init, timeout=timeout, python=python),
                progress=sys.stderr.isatty(),
            )
        out += [(d, "alone") for d in mark_verdicts(chosen, report)]
    return out


def _counts(findings) -> dict[str, collections.Counter]:
    per_rule: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for d, how in findings:
        c = per_rule[d.code]
        c[d.verdict or "unproven"] += 1
        c[f"{how}"] += 1
    return per_rule


def table(results: list[LibraryAudit]) -> list[str]:
    from metalint.rules import all_rules

    names = {r.code: r.name for r in all_rules()}
    lines = [
        "| library | rule | findings | in roots | alone | confirmed | refuted | unproven "
        "| refuted ÷ proved |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for res in results:
        per_rule = _counts(res.findings)
        for code in sorted(per_rule):
            totals[code].update(per_rule[code])
            lines.append(_row(res.label, f"{code} {names.get(code, '')}", per_rule[code]))
        all_c = sum(per_rule.values(), collections.Counter())
        lines.append(_row(res.label, "**all rules**", all_c))
    for code in sorted(totals):
        lines.append(_row("**panel**", f"{code} {names.get(code, '')}", totals[code]))
    lines.append(_row("**panel**", "**all rules**", sum(totals.values(), collections.Counter())))
    return lines


def by_file_kind(results: list[LibraryAudit]) -> list[str]:
    """The findings of code-generation templates (transformers' ``modular_*.py``) and those of
    the other files, apart: a template's class is judged as the class generated from it."""
    from metalint.vocabulary import TEMPLATE_MODULE_PREFIXES

    lines = [
        "",
        "| library | files | findings | in roots | alone | confirmed | refuted | "
        "unproven | refuted ÷ proved |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shown = False
    for res in results:
        kinds: dict[bool, collections.Counter] = {
            False: collections.Counter(),
            True: collections.Counter(),
        }
        for d, how in res.findings:
            template = os.path.basename(d.filename).startswith(TEMPLATE_MODULE_PREFIXES)
            kinds[template][d.verdict or "unproven"] += 1
            kinds[template][how] += 1
        if sum(kinds[True].values()):
            shown = True
            lines.append(_row(res.label, "templates (`modular_*.py`)", kinds[True]))
            lines.append(_row(res.label, "other files", kinds[False]))
    return lines if shown else []


def _row(label: str, rule: str, c: collections.Counter) -> str:
    proved = c["confirmed"] + c["refuted"]
    ratio = f"{c['refuted'] / proved:.0%}" if proved else "n/a"
    n = c["confirmed"] + c["refuted"] + c["unproven"]
    return (
        f"| {label} | {rule} | {n} | {c['root']} | {c['alone']} | {c['confirmed']} | "
        f"{c['refuted']} | {c['unproven']} | {ratio} |"
    )


def render(results: list[LibraryAudit], command: str) -> str:
    out = ["## Model-level audit", "", f"`{command}`", ""]
    for r in results:
        groups = f"{r.groups_built}/{r.groups} groups"
        if r.groups_of:
            groups += f" (sampled from {r.groups_of})"
        nb = ", ".join(f"{k} {v}" for k, v in r.not_built.most_common(6)) or "-"
        named = (
            f" + {r.extra_built}/{r.extra_roots} roots the findings name"
            f" ({r.groups_built_extra} more groups)"
            if r.extra_roots
            else ""
        )
        out.append(
            f"- {r.label}: {r.built}/{r.roots} roots built, {groups}{named}; not built: {nb}; "
            f"{len(r.findings)} findings judged"
            + (
                f", {r.outside} on classes outside the built roots (not judged)"
                if r.outside
                else ""
            )
            + f"; {r.losing} classes lose a tensor, {len(r.missed)} of them not flagged; "
            f"check {r.check_s:.0f} s, probe {r.probe_s:.0f} s"
        )
    out += ["", *table(results), *by_file_kind(results)]
    out += ["", "Refuted findings (rule, library, class: tensors):", ""]
    groups: dict[tuple, list[str]] = collections.defaultdict(list)
    for r in results:
        for d, how in r.findings:
            if d.verdict == "refuted":
                key = (d.code, r.label, _rel(d.filename), d.symbol, how)
                groups[key].append(", ".join(d.subject) or f"line {d.start.row}")
    out += [
        f"- {code} {label} `{file}` {symbol}{' (alone)' if how == 'alone' else ''}: "
        + ", ".join(sorted(set(names)))
        for (code, label, file, symbol, how), names in sorted(groups.items())
    ] or ["- none"]
    out += ["", "Classes the probe shows losing a tensor that check does not flag:", ""]
    out += [f"- {r.label} {m}" for r in results for m in r.missed] or ["- none"]
    return "\n".join(out) + "\n"


def _rel(path: str) -> str:
    m = re.search(r"(?:site-packages|/audit-[^/]+)/(.*)$", path)
    return m.group(1) if m else os.path.relpath(path, ROOT) if path.startswith(str(ROOT)) else path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("libraries", nargs="*", help="libraries of bench/audit_models.py")
    ap.add_argument("--python", action="append", default=[], help="LIB=interpreter")
    ap.add_argument("--pythonpath", action="append", default=[], help="LIB=extra folder")
    ap.add_argument("--every", action="append", default=[], help="LIB=N: every Nth root group")
    ap.add_argument("--limit", action="append", default=[], help="LIB=N: at most N roots")
    ap.add_argument("--no-alone", action="append", default=[], help="LIB: no class-alone probes")
    ap.add_argument(
        "--extra-roots",
        type=int,
        default=EXTRA_ROOTS,
        help="at most N more roots per library: those the findings name that were not built",
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/metalint-audit"))
    ap.add_argument(
        "--probe-cache",
        type=Path,
        help="folder of each root's probe outcome: reused when there, written when probed "
        "(two static versions judged on one probe; empty it when the library or probe changes)",
    )
    ap.add_argument(
        "--probe-cache-wait",
        type=float,
        default=0.0,
        help="seconds to wait for another audit to save the sampled roots' outcomes there",
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per root or class")
    ap.add_argument("--out", type=Path, help="write the markdown here too")
    ap.add_argument("--json", type=Path, help="write per-finding verdicts as JSON here")
    ap.add_argument("--tiny", action="store_true", help="audit fixtures/audit/tinylib")
    args = ap.parse_args(argv)
    pythons, paths = _kv(args.python), _kv(args.pythonpath)
    every, limit = _kv(args.every), _kv(args.limit)
    libraries = list(args.libraries) + (["tiny"] if args.tiny else [])
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for lib in libraries:
        try:
            results.append(
                audit(
                    lib,
                    pythons.get(lib, sys.executable),
                    every=int(every.get(lib, 1)),
                    limit=int(limit[lib]) if lib in limit else None,
                    timeout=args.timeout,
                    alone=lib not in args.no_alone,
                    workdir=args.workdir,
                    pythonpath=paths.get(lib),
                    extra=args.extra_roots,
                    saved=args.probe_cache,
                    wait=args.probe_cache_wait,
                )
            )
        except subprocess.CalledProcessError as exc:
            print(f"{lib}: cannot list its roots: {exc.stderr[-500:]}", file=sys.stderr)
    command = " ".join(
        ["python bench/rule_audit.py", *(argv if argv is not None else sys.argv[1:])]
    )
    text = render(results, command)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "library": r.label,
                        "code": d.code,
                        "file": _rel(d.filename),
                        "line": d.start.row,
                        "class": d.symbol,
                        "verdict": d.verdict or "unproven",
                        "judged": how,
                        "message": d.message,
                    }
                    for r in results
                    for d, how in r.findings
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
