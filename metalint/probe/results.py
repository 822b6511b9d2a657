"""Torch-free helpers over a probe result (``ProbeResult.to_json()`` dicts)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metalint.diagnostics import Diagnostic

#: how many of the other classes a merged finding names in its message
SHOWN_CLASSES = 5

LOST_CODES = ("MP001", "MP002")


def verdict_text(result: dict[str, Any]) -> str:
    if result.get("status") == "error":
        return f"error: {result.get('error')}"
    findings = result.get("findings", [])
    tensors = result.get("tensors", 0)
    if not findings:
        return f"passed ({tensors} tensors)"
    parts = []
    lost = result.get("lost", 0)
    if lost:
        parts.append(f"{lost} of {tensors} tensors lost")
    other = [f for f in findings if f["code"] not in LOST_CODES]
    if other or not parts:
        codes = sorted({f["code"] for f in findings})
        parts.append(
            f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(codes)})"
        )
    return "failed: " + ", ".join(parts)


def merge_across_classes(found: list[tuple[str, Diagnostic]]) -> list[Diagnostic]:
    """One diagnostic per code, source line and tensor of ``found`` (``(probed item,
    diagnostic)`` pairs): a class's lost tensor is reported by every probed model that
    contains it, at the same line. The first report stands, with ``seen_in`` listing every
    probed item that showed it and its message ending ``(also in N other classes: ...)``."""
    groups: dict[tuple, list[tuple[str, Diagnostic]]] = {}
    for item, d in found:
        # a finding about no tensor (MP006 construct raised, MP007) may sit at its class's
        # first line for want of a site: one per class then
        owner = None if d.subject else d.symbol
        key = (d.code, d.filename, d.start.row, d.start.column, d.subject, owner)
        groups.setdefault(key, []).append((item, d))
    out = []
    for pairs in groups.values():
        first = pairs[0][1]
        items = tuple(dict.fromkeys(item for item, _ in pairs))
        if len(items) < 2:
            out.append(first)
            continue
        others = items[1:]
        shown = ", ".join(others[:SHOWN_CLASSES]) + (", ..." if len(others) > SHOWN_CLASSES else "")
        n = len(others)
        note = f" (also in {n} other class{'es' if n != 1 else ''}: {shown})"
        out.append(first.with_(message=first.message + note, seen_in=items))
    return out


@dataclass(frozen=True)
class Declared:
    """An intended difference from eager init: ``tensor`` of class ``cls`` (a qualified name;
    None: any class) of the module or file ``where`` (None: anywhere)."""

    spec: str  # as written
    where: str | None
    cls: str | None
    tensor: str

    @classmethod
    def parse(cls, spec: str, *, need_where: bool = True) -> "Declared":
        """``pkg.mod:Class.tensor`` or ``path/to/file.py:Class.tensor``; without
        ``need_where`` also ``Class.tensor`` or ``tensor``. A bad one: ValueError."""
        where, sep, name = spec.rpartition(":")
        owner, dot, tensor = name.rpartition(".")
        parts = [p for p in (owner.split(".") if owner else [])] + [tensor]
        if not all(p.isidentifier() for p in parts) or (need_where and not (where and owner)):
            shape = "'pkg.mod:Class.tensor'" + (
                "" if need_where else ", 'Class.tensor' or 'tensor'"
            )
            raise ValueError(f"{spec!r} must look like {shape}")
        return cls(spec, where if sep else None, owner or None, tensor)

    def names(self, d: Diagnostic) -> bool:
        """Is ``d`` about this tensor of this class (its file aside)?"""
        return (
            bool(d.subject)
            and d.subject[0] == self.tensor
            and (self.cls is None or d.symbol == self.cls)
        )

    def in_file(self, path: str | None) -> bool:
        """Is ``path`` the file of ``where`` (a module: ``pkg/mod.py`` or ``pkg/mod/__init__.py``)?"""
        if self.where is None:
            return True
        if not path:
            return False
        have = os.path.normcase(os.path.realpath(path))
        if self.where.endswith(".py"):
            return have == os.path.normcase(os.path.realpath(self.where))
        tail = os.path.normcase(os.sep + self.where.replace(".", os.sep))
        return have.endswith((tail + ".py", tail + os.sep + "__init__.py"))


def split_declared(
    diags: list[Diagnostic],
    declared: list[Declared],
    classes: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[Diagnostic], list[tuple[Diagnostic, Declared]], list[Declared]]:
    """``(undeclared, declared, stale)``: the findings no declaration names, those one names
    (with it), and the declarations that named no finding. ``classes`` (the probe's class
    summaries, ``file``/``cls``) give the file of a finding's class, whose tensor a base
    class in another file may set, and make a declaration stale only when its class was
    built; None: every unmatched declaration is stale."""
    files: dict[str, set[str]] = {}
    for info in (classes or {}).values():
        files.setdefault(info.get("cls", ""), set()).add(info.get("file") or "")
    undeclared, matched, used = [], [], set()
    for d in diags:
        where = {d.filename} | files.get(d.symbol or "", set())
        decl = next((x for x in declared if x.names(d) and any(map(x.in_file, where))), None)
        if decl is None:
            undeclared.append(d)
        else:
            matched.append((d, decl))
            used.add(decl)
    stale = [
        x
        for x in declared
        if x not in used
        and (
            classes is None
            or any(x.in_file(f) for c, fs in files.items() if c == x.cls for f in fs)
        )
    ]
    return undeclared, matched, stale
