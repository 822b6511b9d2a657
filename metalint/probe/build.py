"""Probe one module: eager build -> statistics -> meta build -> to_empty -> poison -> init ->
compare. Runs in-process; :mod:`.isolate` runs it in a child process.

Steps (:func:`probe` runs them in this order, one function each):

1. build eagerly on CPU under a fixed seed while :class:`~.attribute.WriteRecorder` records
   the source line that last wrote each tensor and whether the value is random; keep
   statistics only (:mod:`.compare`) and free the model;
2. build under ``torch.device("meta")`` while :class:`~.attribute.EscapeDetector` records any
   real allocation (MP007); an exception is MP006, and the steps below then run on an eager
   build in its place (``to_empty()`` wipes it as it would the meta one): what else is lost;
3. ``to_empty(device=...)`` and poison every tensor (NaN / integer sentinel / negated bools),
   so a tensor that no hook re-initialises is certain to differ from eager;
4. run the init entry point (``auto``: a root ``init_weights()`` when the model has one, else
   ``reset_parameters()`` on every module children-first; then ``init_non_persistent_buffers()``
   on every module that has it);
5. compare every parameter, buffer and plain tensor attribute, and the ties;
6. when some ``reset_parameters()`` wrote tensors of another module, run again parent-first
   and report MP009 if the verdict changes.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import linecache
import os
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from metalint.diagnostics import Diagnostic, Position, Severity
from metalint.lines import split_lines
from metalint.probe import attribute, compare
from metalint.probe.materialise import (
    LazyModules,
    ProbeSetupError,
    _HookWrites,
    _lazy_modules,
    _poison,
    _stage_error,
    materialisation_site,
    replay_load,
    run_init,
)
from metalint.probe.materialise import per_module_hooks as per_module_hooks
from metalint.probe.memory import rss_anon
from metalint.probe.results import verdict_text
from metalint.probe.snapshot import (
    Snapshot,
    _class_file,
    _mark_seed_dependent,
    _raise_site,
    release_memory,
    snapshot,
)
from metalint.vocabulary import ROOT_ONLY_PROTOCOL

INIT_CHOICES = ("auto", "reset_parameters", "init_weights", ROOT_ONLY_PROTOCOL)
#: a device escape that the build frees again is reported only from this size on
TRANSIENT_ESCAPE_BYTES = 1 << 20


def pick_device(device: str, ranks: int = 1) -> str:
    """``auto``: CUDA when this process (each of ``ranks`` processes) can have a device of its
    own, else CPU. ``cuda`` with fewer devices than ranks is refused: NCCL needs one each."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        return "cuda" if have >= ranks else "cpu"
    if device.startswith("cuda") and ranks > 1 and have < ranks:
        raise ProbeSetupError(
            f"--device cuda on {ranks} ranks needs {ranks} CUDA devices (one per rank, NCCL); "
            f"this machine has {have}: use --device cpu (gloo) or --nproc {max(have, 2)}"
        )
    return device


# ----------------------------------------------------------------------------- tensors


# ----------------------------------------------------------------------------- init


# ----------------------------------------------------------------------------- results


@dataclass
class Finding:
    code: str
    cls: str
    cls_file: str | None
    attr: str | None
    names: list[str]
    detail: str
    site: attribute.Site | None
    severity: str = "error"


@dataclass
class ProbeResult:
    label: str
    status: str = "passed"  # passed | failed | error
    init_used: str = ""
    device: str = "cpu"
    tensors: int = 0
    lost: int = 0
    findings: list[Diagnostic] = field(default_factory=list)
    meta_alloc_bytes: int = 0  # RssAnon delta during the meta build
    escape_bytes: int = 0  # bytes of tensors created off meta during the meta build
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def verdict(self) -> str:

        return verdict_text(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "status": self.status,
            "init_used": self.init_used,
            "device": self.device,
            "tensors": self.tensors,
            "lost": self.lost,
            "findings": [d.to_json() for d in self.findings],
            "meta_alloc_bytes": self.meta_alloc_bytes,
            "escape_bytes": self.escape_bytes,
            "classes": self.classes,
            "seconds": self.seconds,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProbeResult":
        data = dict(data)
        data["findings"] = [Diagnostic.from_cache(d) for d in data.get("findings", [])]
        return cls(**data)


def _display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _diag(f: Finding, message: str, fallback_file: str | None) -> Diagnostic:
    if f.site is not None:
        filename, row = f.site.file, f.site.line
    else:
        filename, row = (f.cls_file or fallback_file or "<unknown>"), 1
    text = linecache.getline(filename, row) if row else ""
    col = len(text) - len(text.lstrip()) + 1 if text.strip() else 1
    end = len(text.rstrip("\n")) + 1 if text.strip() else 1
    return Diagnostic(
        code=f.code,
        message=message,
        filename=_display_path(filename),
        start=Position(row, col),
        end=Position(row, max(end, col)),
        symbol=f.cls,
        severity=Severity(f.severity),
        subject=(f.attr,) if f.attr else (),
    )


_WHAT = {
    "MP001": "lost its value",
    "MP002": "lost its random distribution",
    "MP003": "is left on meta",
    "MP004": "is non-finite",
    "MP008": "changed shape/dtype/requires_grad",
}


def _findings_to_diags(
    findings: list[Finding], init_used: str, fallback_file: str | None, built: str = "meta build"
) -> list[Diagnostic]:
    # one diagnostic per (code, class, attr, site, detail kind); further paths are counted
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        key = (
            f.code,
            f.cls,
            f.attr,
            f.site.file if f.site else None,
            f.site.line if f.site else None,
        )
        groups.setdefault(key, []).append(f)
    out = []
    for fs in groups.values():
        f = fs[0]
        names = [n for g in fs for n in g.names]
        where = names[0] if names else ""
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        at = f"; set at {f.site.short()}" if f.site and f.code in _WHAT else ""
        if f.code in _WHAT:
            msg = (
                f"`{f.attr}` of {f.cls} ({where}{more}) {_WHAT[f.code]} after {built} + "
                f"{init_used}: {f.detail}{at}"
            )
        else:
            msg = f.detail
        out.append(_diag(f, msg, fallback_file))
    return out


# ----------------------------------------------------------------------------- probe


def _tie_site(model_classes: dict[str, dict[str, Any]], names: list[str]) -> attribute.Site | None:
    """Find the assignment that made a tie: ``self.<...>.<attr> = ...`` in an ancestor's source."""
    for name in names[1:] + names[:1]:
        parts = name.split(".")
        for i in range(len(parts)):
            anc = ".".join(parts[:i])
            info = model_classes.get(anc)
            if not info or not info["file"] or info["file"].startswith(attribute._TORCH_DIR):
                continue
            rest = r"\.".join(map(re.escape, parts[i:]))
            pat = re.compile(rf"self\.{rest}\s*=[^=]")
            try:
                lines = split_lines(open(info["file"], encoding="utf-8", newline="").read())
            except OSError:
                continue
            for lineno, text in enumerate(lines, 1):
                if pat.search(text):
                    return attribute.Site(info["file"], lineno, "__init__", info["cls"])
    return None


def _class_site(info: dict[str, Any]) -> attribute.Site | None:
    if not info.get("file"):
        return None
    try:
        lines = split_lines(open(info["file"], encoding="utf-8", newline="").read())
    except OSError:
        return None
    name = info["cls"].rpartition(".")[2]
    for i, text in enumerate(lines, 1):
        if re.match(rf"\s*class\s+{re.escape(name)}\b", text):
            return attribute.Site(info["file"], i, "<class>", info["cls"])
    return None


def _deferred(
    make: Callable[[], nn.Module],
    device: str,
    init: str,
    order: str,
    eager: Snapshot,
    track: bool,
    hooks: Sequence[str] = (),
    on_meta: bool = True,
    seed: int = 0,
):
    # ``on_meta=False``: the meta build raised, and an eager build stands in for it;
    # ``to_empty()`` wipes its tensors as it would the meta one's
    with torch.device("meta") if on_meta else contextlib.nullcontext():
        model = make()
    site = materialisation_site(type(model)) if init == "auto" and on_meta else None
    if site is not None and site.loads:
        del model
        model, used = replay_load(make, device, site, seed, eager)
        return model, used, {}, None
    model.to_empty(device=device)
    _, tensors = snapshot(model, None, stats=False)
    poisons = _poison(tensors, eager)
    tracker = None
    if track:
        owners = {}
        for name, t in tensors.items():
            k = attribute._storage_key(t)
            if k is not None:
                owners.setdefault(k, name)
        tracker = _HookWrites(owners)
    del tensors
    if tracker is not None:
        with tracker:
            used = run_init(model, init, order, tracker, hooks, device)
    else:
        used = run_init(model, init, order, hooks=hooks, device=device)
    return model, used, poisons, tracker


def _poison_hit(t: torch.Tensor, st: compare.Stats, eager: compare.Stats | None) -> bool:
    if st.numel == 0 or st.device == "meta":
        return False
    if t.is_floating_point() or t.is_complex():
        value = compare.float_poison(t.dtype, eager)
        if value == value:  # eager holds NaN: the poison was the largest finite value
            return st.nonfinite == 0 and st.min == st.max == value
        return st.nan == st.numel
    if t.dtype == torch.bool:
        if eager is not None and eager.copy is not None and tuple(t.shape) == eager.shape:
            return bool(torch.equal(t.detach().cpu(), ~eager.copy.to(torch.bool)))
        return False
    return (
        st.min == st.max
        and st.min in (compare.INT_POISON, torch.iinfo(t.dtype).min, torch.iinfo(t.dtype).max)
        and not (eager is not None and eager.min == eager.max == st.min)
    )


def _compare_models(eager: Snapshot, model: nn.Module) -> tuple[list[Finding], Snapshot]:
    deferred, tensors = snapshot(model, None, stats=True, keep_copy=False)
    findings: list[Finding] = []
    for name, e in eager.entries.items():
        d = deferred.entries.get(name)
        if d is None:
            findings.append(
                Finding(
                    "MP008",
                    e.cls,
                    e.cls_file,
                    e.attr,
                    [name],
                    f"missing after meta build ({e.kind} in eager)",
                    e.site,
                )
            )
            continue
        t = tensors[name]
        # plain tensor attributes are not poisoned: to_empty does not move them
        hit = e.kind != "attribute" and _poison_hit(t, d.stats, e.stats)
        diff = compare.compare(e.stats, d.stats, t, poison_hit=hit)
        if diff is not None:
            findings.append(
                Finding(diff.code, e.cls, e.cls_file, e.attr, [name], diff.detail, e.site)
            )
    for name, d in deferred.entries.items():
        if name not in eager.entries:
            findings.append(
                Finding(
                    "MP008",
                    d.cls,
                    d.cls_file,
                    d.attr,
                    [name],
                    f"extra {d.kind} after meta build (absent in eager)",
                    None,
                )
            )
    # ties
    for group in eager.ties:
        objs = {id(tensors[n]) for n in group if n in tensors}
        if len(objs) > 1:
            e = eager.entries[group[-1]]
            site = _tie_site(eager.classes, group) or _class_site(eager.classes.get("", {}))
            findings.append(
                Finding(
                    "MP005",
                    site.owner if site and site.owner else e.cls,
                    e.cls_file,
                    e.attr,
                    group,
                    f"tied parameters {', '.join(group)} are {len(objs)} different objects after "
                    f"meta build + init (the same object in eager)",
                    site,
                )
            )
    return findings, deferred


def probe(
    make: Callable[[], nn.Module],
    *,
    device: str = "cpu",
    init: str = "auto",
    seed: int = 0,
    label: str = "model",
    check_order: bool = True,
    hooks: Sequence[str] = (),
) -> ProbeResult:
    """Probe ``make()``: see the module docstring. ``hooks``: the configured ``[tool.metalint]
    hooks`` (see :func:`run_init`). Never raises for the model's own failures (those become
    findings); raises :class:`ProbeSetupError` for a bad ``init``."""
    t0 = time.perf_counter()
    device = pick_device(device)
    res = ProbeResult(label=label, device=device)
    # 1. eager
    eager, fallback_file = _eager_stage(make, seed, label, res)
    # 2. meta build
    findings, raised = _meta_stage(make, eager, label, fallback_file, res)
    on_meta = raised is None
    built = "meta build" if on_meta else "an eager build (its meta build raised) + to_empty()"
    # 3-5. deferred build, poison, init, compare; when the meta build raised (MP006), on an
    # eager build that to_empty() wipes as it would the meta one: what else is lost
    torch.manual_seed(seed + 1)
    try:
        model, used, _, tracker = _deferred(
            make, device, init, "post", eager, track=True, hooks=hooks, on_meta=on_meta, seed=seed
        )
    except ProbeSetupError:
        raise
    except Exception as exc:
        if not on_meta:  # the stand-in failed too: the MP006 is all there is to say
            res.findings = _findings_to_diags(findings, "", fallback_file)
            res.status = "failed"
            res.classes = _class_summary(eager, findings, raised)
            for info in res.classes.values():
                info["substitute"] = False
            res.seconds = time.perf_counter() - t0
            return res
        raise _stage_error(f"to_empty(device={device!r}) + init {init!r}", exc) from exc
    res.init_used = used
    diffs, _ = _compare_models(eager, model)
    make_info = {p: type(m) for p, m in model.named_modules()}
    del model
    gc.collect()
    # 6. hook order
    if (
        check_order
        and tracker is not None
        and tracker.foreign
        and init in ("auto", "reset_parameters")
    ):
        torch.manual_seed(seed + 1)
        findings += _hook_order_stage(
            make, device, init, eager, diffs, tracker, make_info, hooks, on_meta
        )
    findings.extend(diffs)
    res.lost = len(
        {n for f in diffs if f.code in ("MP001", "MP002", "MP003", "MP004") for n in f.names}
    )
    res.findings = _findings_to_diags(findings, used, fallback_file, built)
    res.status = "failed" if res.findings else "passed"
    res.classes = _class_summary(eager, findings, raised)
    res.seconds = time.perf_counter() - t0
    return res


def _eager_stage(make, seed: int, label: str, res: ProbeResult) -> tuple[Snapshot, str | None]:
    """Step 1: build eagerly under ``seed`` recording who wrote each tensor; keep statistics."""
    torch.manual_seed(seed)
    rec = attribute.WriteRecorder()
    try:
        with rec:
            model = make()
    except Exception as exc:
        raise _stage_error("eager construction", exc) from exc
    if not isinstance(model, nn.Module):
        raise ProbeSetupError(f"{label} returned {type(model).__name__}, not an nn.Module")
    lazy = _lazy_modules(model)
    if lazy:
        raise LazyModules(
            f"{label} has lazy modules ({', '.join(lazy[:3])}{', ...' if len(lazy) > 3 else ''}"
            "): their tensors get a shape at the first forward, so `to_empty()` cannot "
            "materialise them; probe a factory that runs a dry forward first"
        )
    fallback_file = _class_file(type(model))
    eager, _ = snapshot(model, rec)
    res.tensors = len([e for e in eager.entries.values()])
    del model, rec, _
    release_memory()
    _mark_seed_dependent(make, seed, eager)
    return eager, fallback_file


def _meta_stage(
    make, eager: Snapshot, label: str, fallback_file: str | None, res: ProbeResult
) -> tuple[list[Finding], str | None]:
    """Step 2: build under ``torch.device("meta")``; the real allocations (MP007) and None,
    or, when the build raised, its MP006 and the class that raised."""
    esc = attribute.EscapeDetector()
    rss0 = rss_anon()
    try:
        with torch.device("meta"), esc:
            model = make()
    except Exception as exc:  # data-dependent __init__
        site, owner = _raise_site(exc)
        cls = owner or eager.classes.get("", {}).get("cls", label)
        msg = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        f = Finding(
            "MP006",
            cls,
            fallback_file,
            None,
            [],
            f"constructing {cls} on the meta device raised {msg[:300]}",
            site,
        )
        return [f], cls
    res.meta_alloc_bytes = max(rss_anon() - rss0, 0)
    res.escape_bytes = esc.nbytes
    if isinstance(model, nn.Module):
        esc.mark_kept(model)
    findings = _escape_findings(esc, eager, label)
    del model, esc
    return findings, None


def _escape_findings(esc, eager: Snapshot, label: str) -> list[Finding]:
    """MP007 per source line that allocated real memory during the meta build."""
    findings: list[Finding] = []
    by_site: dict[tuple, list[attribute.Escape]] = {}
    for e in esc.escapes:
        by_site.setdefault((e.site.file, e.site.line) if e.site else None, []).append(e)
    for es in by_site.values():
        site = es[0].site
        ops = sorted({e.op for e in es})
        nbytes = sum(e.nbytes for e in es)
        kept = [e for e in es if e.retained]
        if not kept and nbytes < TRANSIENT_ESCAPE_BYTES:
            continue  # a small temporary freed before the build ended (e.g. linspace().tolist())
        owner = site.owner if site and site.owner else eager.classes.get("", {}).get("cls", label)
        how = "kept in the model" if kept else "temporary"
        findings.append(
            Finding(
                "MP007",
                owner,
                None,
                None,
                [],
                f"building {owner} on meta allocated {nbytes} bytes on {es[0].device} "
                f"({len(es)} tensor{'s' if len(es) != 1 else ''}, {how}: "
                f"{', '.join('aten.' + o for o in ops)})",
                site,
            )
        )
    return findings


def _hook_order_stage(
    make, device: str, init: str, eager: Snapshot, diffs, tracker, make_info, hooks, on_meta=True
) -> list[Finding]:
    """Step 6: some ``reset_parameters()`` wrote a child's tensors: run parents-first too;
    MP009 when the verdict differs, on each module whose hook wrote a tensor whose verdict
    changed (the first foreign writer when none of them did)."""
    model2, _used2, _, _ = _deferred(
        make, device, init, "pre", eager, track=False, hooks=hooks, on_meta=on_meta
    )
    diffs2, _ = _compare_models(eager, model2)
    del model2
    gc.collect()
    a = {(f.code, tuple(f.names)) for f in diffs}
    b = {(f.code, tuple(f.names)) for f in diffs2}
    if a == b:
        return []
    only_post = sorted(n for c, ns in a - b for n in ns)
    only_pre = sorted(n for c, ns in b - a for n in ns)
    changed = set(only_post) | set(only_pre)
    writers: dict[str, str] = {}
    for hook, written in tracker.foreign:
        if written in changed:
            writers.setdefault(hook, written)
    if not writers:
        hook, written = tracker.foreign[0]
        writers[hook] = written
    return [
        _order_finding(hook, written, only_post, only_pre, eager, make_info)
        for hook, written in writers.items()
    ]


def _order_finding(hook, written, only_post, only_pre, eager, make_info) -> Finding:
    owner_cls = eager.classes.get(hook, {}).get("cls", "?")
    site = None
    try:
        hook_fn = make_info[hook].reset_parameters
    except Exception:
        hook_fn = None
    if hook_fn is not None:
        try:
            _, line = inspect.getsourcelines(hook_fn)
            site = attribute.Site(
                inspect.getsourcefile(hook_fn), line, "reset_parameters", owner_cls
            )
        except (OSError, TypeError):
            site = None
    return Finding(
        "MP009",
        owner_cls,
        eager.classes.get(hook, {}).get("file"),
        None,
        [written],
        f"the verdict depends on hook order: {owner_cls}.reset_parameters() "
        f"({hook or 'root'}) writes {written} of a child; children-first fails "
        f"{only_post or 'nothing more'}, parents-first fails {only_pre or 'nothing more'}",
        site,
    )


def _class_summary(
    eager: Snapshot, findings: list[Finding], raised: str | None
) -> dict[str, dict[str, Any]]:
    """Per probed class (``file::qualname``): own parameters and buffers (``attrs``), own
    plain tensor attributes (``plain``), broken attrs, class-level codes, broken tensors in its
    subtree. Used by :func:`metalint.probe.merge.mark_verdicts`."""
    out: dict[str, dict[str, Any]] = {}
    path_cls: dict[str, str] = {}
    for path, info in eager.classes.items():
        key = f"{info['file']}::{info['cls']}"
        path_cls[path] = key
        out.setdefault(key, _empty_summary(info, raised))
    for e in eager.entries.values():
        key = path_cls.get(e.owner)
        kind = "plain" if e.kind == "attribute" else "attrs"
        if key and e.attr not in out[key][kind]:
            out[key][kind].append(e.attr)
    for f in findings:
        _mark_finding(out, path_cls, eager, f)
    if raised:
        for info in out.values():
            if info["cls"] == raised:
                info["raised"] = True
    return out


def _empty_summary(info: dict[str, Any], raised: str | None) -> dict[str, Any]:
    return {
        "file": info["file"],
        "cls": info["cls"],
        "module": info["module"],
        "attrs": [],
        "plain": [],
        "broken": {},
        "codes": [],
        "subtree_broken": 0,
        "raised": False,
        # its tensors were compared after a meta build: False when the model's meta
        # build raised (in this class or another one); then ``substitute``: they were
        # compared on an eager build wiped by to_empty() (not what stays on meta)
        "compared": raised is None,
        "substitute": raised is not None,
    }


#: probe codes about a class as a whole (MP005 also names its tensors)
_CLASS_CODES = ("MP006", "MP007", "MP009", "MP005")


def _mark_finding(out: dict, path_cls: dict[str, str], eager: Snapshot, f: Finding) -> None:
    """A finding in the summaries: a class-level code on its class, a broken tensor in its
    owner's class and its ancestors' subtrees."""
    if f.code in _CLASS_CODES:
        for key in path_cls.values():
            if out[key]["cls"] == f.cls and f.code not in out[key]["codes"]:
                out[key]["codes"].append(f.code)
        if f.code != "MP005":
            return
    for n in f.names:
        e = eager.entries.get(n)
        if e is not None:
            _mark_broken(out, path_cls, e, f.code)


def _mark_broken(out: dict, path_cls: dict[str, str], e, code: str) -> None:
    """Tensor ``e`` is broken (``code``): in its owner's class, and in every ancestor's subtree."""
    key = path_cls.get(e.owner)
    if key:
        out[key]["broken"].setdefault(e.attr, [])
        if code not in out[key]["broken"][e.attr]:
            out[key]["broken"][e.attr].append(code)
    parts = e.owner.split(".") if e.owner else []
    for i in range(len(parts) + 1):
        k = path_cls.get(".".join(parts[:i]))
        if k:
            out[k]["subtree_broken"] += 1
