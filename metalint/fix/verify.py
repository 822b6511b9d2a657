"""``fix --verify``: probe each rewritten class; a rewrite stays only when the probe passes.

The probe (``metalint.probe``) builds the class eagerly and on meta in a child process, runs its
init and compares every tensor. A class passes when its own tensors all come back; a class the
probe cannot construct (required arguments it cannot infer) is reported as not verified and
its rewrite is kept; a class that fails, or a file that no longer imports, fails.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Verdict:
    cls: str
    status: str  # passed | failed | skipped
    detail: str = ""
    #: the class's own tensors that did not come back (a failure on them)
    lost: tuple[str, ...] = ()


def verify_classes(
    path: str, classes: list[str], *, timeout: float = 120.0, hooks: tuple[str, ...] = ()
) -> list[Verdict]:
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options

    out: list[Verdict] = []
    tops = sorted({c.split(".")[0] for c in classes})
    if not tops:
        return out
    # one probe run for the file (one child process imports it once)
    rep = run_probe(
        [f"{path}:{','.join(tops)}"], Options(device="cpu", timeout=timeout, hooks=hooks)
    )
    for cls in tops:
        mine = [o for o in rep.outcomes if o.label.rpartition(":")[2] == cls]
        if not mine:
            errors = [o for o in rep.outcomes if o.kind == "error"]
            detail = errors[0].message if errors else "the probe reported nothing"
            out.append(Verdict(cls, "failed", detail))
            continue
        o = mine[0]
        if o.kind == "skip":
            out.append(Verdict(cls, "skipped", o.message))
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
