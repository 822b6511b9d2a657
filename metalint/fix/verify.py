"""``fix --verify``: probe each rewritten class; a rewrite stays only when the probe passes.

The probe (``metalint.probe``) builds the class eagerly and on meta in a child process, runs its
init and compares every tensor. A class passes when its own tensors all come back; a class the
probe cannot construct (required arguments it cannot infer) is reported as not verified and
its rewrite is kept; a class that fails, or a file that no longer imports, fails. A class
whose eager construction raises after the rewrite, built from the arguments the probe guessed,
is compared with the original class built from the same arguments
(:func:`broke_construction`): when the original constructed, the rewrite broke construction
and the class fails (a rewrite must never make a working constructor raise).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Verdict:
    cls: str
    status: str  # passed | failed | skipped
    detail: str = ""
    #: the class's own tensors that did not come back (a failure on them)
    lost: tuple[str, ...] = ()
    #: skipped because the class raised when built from the probe's guessed arguments
    eager_raised: bool = False


def verify_classes(
    path: str, classes: list[str], *, timeout: float = 120.0, hooks: tuple[str, ...] = ()
) -> list[Verdict]:
    """The verdicts on ``classes`` (top-level classes, or members of them) of ``path``."""
    return _probe_files([(path, classes)], timeout, hooks)[0]


def verify_files(
    files: list[tuple[str, list[str]]], *, timeout: float = 120.0, hooks: tuple[str, ...] = ()
) -> list[list[Verdict]]:
    """:func:`verify_classes` of each ``(path, classes)``: one probe run for them all (one
    child process, one torch import; a crash costs only the class in progress)."""
    if len(files) == 1:
        return [verify_classes(*files[0], timeout=timeout, hooks=hooks)]
    return _probe_files(files, timeout, hooks)


def _probe_files(files: list[tuple[str, list[str]]], timeout: float, hooks) -> list[list[Verdict]]:
    from metalint.probe.command import ProbeReport
    from metalint.probe.isolate import Options, run_targets
    from metalint.probe.target import parse_target

    tops = [sorted({c.split(".")[0] for c in classes}) for _, classes in files]
    todo = [i for i, t in enumerate(tops) if t]
    targets = [parse_target(f"{files[i][0]}:{','.join(tops[i])}")[0] for i in todo]
    outcomes = run_targets(targets, Options(device="cpu", timeout=timeout, hooks=hooks))
    out: list[list[Verdict]] = [[] for _ in files]
    for i, mine in zip(todo, outcomes):
        out[i] = _verdicts(files[i][0], tops[i], ProbeReport(mine))
    return out


def _verdicts(path: str, tops: list[str], rep) -> list[Verdict]:
    """The verdict on each class of ``tops`` in the probe report ``rep`` of the file ``path``."""
    out: list[Verdict] = []
    for cls in tops:
        mine = [o for o in rep.outcomes if o.label.rpartition(":")[2] == cls]
        if not mine:
            errors = [o for o in rep.outcomes if o.kind == "error"]
            detail = errors[0].message if errors else "the probe reported nothing"
            out.append(Verdict(cls, "failed", detail))
            continue
        o = mine[0]
        if o.kind == "skip":
            raised = o.stage == "eager construction"
            out.append(Verdict(cls, "skipped", o.message, eager_raised=raised))
            continue
        if o.kind == "error":
            out.append(Verdict(cls, "failed", o.message))
            continue
        res = o.result or {}
        key = f"{os.path.abspath(path)}::{cls}"
        info = rep.classes.get(key)
        if info is None:  # match on the class name alone (symbolic links, relative paths)
            info = next((v for k, v in rep.classes.items() if k.endswith(f"::{cls}")), None)
        own_broken = (info or {}).get("broken") or {}
        if res.get("status") == "passed" or (
            info is not None and not own_broken and not info.get("raised")
        ):
            out.append(Verdict(cls, "passed", res.get("init_used", "")))
        else:
            if own_broken:
                detail = f"{', '.join(sorted(own_broken))} lost after meta build + init"
            else:
                msgs = [f.get("message", "") for f in res.get("findings", [])]
                detail = (
                    res.get("error")
                    or (msgs[0] if msgs else "")
                    or f"probe status {res.get('status')}"
                )
                detail = " ".join(str(detail).split())[:300]
            out.append(Verdict(cls, "failed", detail, tuple(sorted(own_broken))))
    return out


def broke_construction(
    verdicts: list[Verdict], original: Callable[[list[str]], list[Verdict]]
) -> list[Verdict]:
    """``verdicts`` of a rewritten file, with each class whose eager construction raised after
    the rewrite turned into a failure when ``original`` (the same probe of the file before the
    rewrite, for those classes) built it: the guessed arguments are the same (a fix changes no
    signature), so the rewrite made a working constructor raise. A class that raised before
    too stays "not verified"."""
    raised = [v.cls for v in verdicts if v.status == "skipped" and v.eager_raised]
    if not raised:
        return verdicts
    before = {v.cls: v for v in original(raised)}
    out = []
    for v in verdicts:
        b = before.get(v.cls)
        if v.cls in raised and b is not None and not b.eager_raised and b.status != "skipped":
            detail = f"the rewrite broke eager construction ({v.detail})"
            out.append(Verdict(v.cls, "failed", detail))
        else:
            out.append(v)
    return out
