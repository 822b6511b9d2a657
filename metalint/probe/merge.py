"""Mark static findings confirmed/refuted with the probe's results (``check --probe``).

A static diagnostic names its class (``symbol``, qualified name inside ``filename``) and
the tensors it is about (``subject``: ``("gamma",)``, ``("bn.weight",)`` for a child's). The probe's
per-class summary (:attr:`metalint.probe.command.ProbeReport.classes`) says, for every class
it built (a probed class, or any submodule of a probed factory), which of its own tensors were
broken and which class-level findings (MP006 construct raised, MP007 device escape, MP009 hook
order) it had.

- ``confirmed``: the class was probed and the named attribute is broken (any MP001-MP005,
  MP008); with no attribute named, any own tensor broken. ML008 (data-dependent ``__init__``)
  is confirmed by MP006; ML009 (explicit real device) by MP007 or a broken named tensor;
  ML006/ML010 (parent/children init) by a broken tensor anywhere in the class's subtree,
  ML006 also by MP009 (the result depends on whether parents or children reset first); a
  finding about a child's tensor (subject ``bn.weight``) likewise by its subtree;
  ML011 (tie by assignment) by MP005 (tie broken) on the class that made the tie.
- ``refuted``: the class was probed and none of the above holds.
- When the meta build of a model raised (MP006), the probe judged its tensors on an eager
  build that ``to_empty()`` wiped in its place (``substitute``): that proves or refutes every
  rule but ML007 (a plain tensor left on meta) and ML009 (memory allocated on meta).
- ``None``: the class was not probed, or its model's meta build raised and the claim is
  ML007/ML009 or the eager stand-in failed too (ML008: MP006 confirms it; the ML008 of a
  class the raising meta build never reached is unproven), or the build did not make the
  tensor the finding names (a buffer that is None, a parameter behind a flag, with the
  arguments the class was built with; or made it as another kind: a plain tensor attribute
  of the name of the buffer ML002 is about, the buffer only registered on a branch the build
  did not take): not exercised.

This module does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from metalint.diagnostics import Diagnostic

_SUBTREE_RULES = {"ML006", "ML010", "ML016"}
#: rules whose claim is about per-module ``reset_parameters()`` (FSDP's materialisation): a
#: class no model root contains is probed under that protocol for them
PER_MODULE_RULES = _SUBTREE_RULES - {"ML016"}
#: rules about one tensor of their class (``subject``): `gamma` is created from a value...
_NAMED_TENSOR_RULES = {"ML001", "ML002", "ML003", "ML005", "ML007", "ML015"}
#: the kind of tensor a rule's subject is, as the probe's class summary lists them: ``attrs``
#: (parameters and buffers, every rule not listed) or ``plain`` (plain tensor attributes)
_TENSOR_KINDS = {"ML007": ("plain",), "ML009": ("attrs", "plain")}
#: rules about what the meta build itself does: no eager build can stand in for it
_META_ONLY_RULES = {"ML007", "ML009"}


def _child_tensor(diag: Diagnostic) -> bool:
    """The finding is about a child's tensor (``bn.weight``: ML003 on a child)."""
    return bool(diag.subject) and "." in diag.subject[0]


def _norm(path: str | None) -> str:
    return os.path.normcase(os.path.realpath(path)) if path else ""


def _classes_of(probe_report: Any) -> Mapping[str, Mapping[str, Any]]:
    if isinstance(probe_report, Mapping):
        return probe_report.get("classes", probe_report)  # a summary dict or {"classes": ...}
    return probe_report.classes


def _lookup(
    classes: Iterable[Mapping[str, Any]], filename: str, symbol: str
) -> Mapping[str, Any] | None:
    want = _norm(filename)
    fallback = None
    for info in classes:
        if info.get("cls") != symbol:
            continue
        have = _norm(info.get("file"))
        if have == want:
            return info
        if (
            have
            and want
            and (
                have.endswith(os.sep + os.path.basename(want))
                and want.endswith(os.sep + os.path.basename(have))
            )
        ):
            fallback = fallback or info
    return fallback


def verdict_for(diag: Diagnostic, info: Mapping[str, Any] | None) -> str | None:
    if info is None:
        return None
    # the tensors of the kind the rule is about: ML007's plain attributes, the others'
    # parameters and buffers (monai's SABlock keeps a plain empty `causal_mask` unless
    # `causal=True` registers the buffer ML002 is about: that build did not make it)
    kinds = _TENSOR_KINDS.get(diag.code, ("attrs",))
    made = {a for k in kinds for a in info.get(k, ())}
    other = {a for k in ("attrs", "plain") if k not in kinds for a in info.get(k, ())}
    built = made | (set(info.get("broken", {})) - other)
    subject = diag.subject
    child = _child_tensor(diag)
    if not child:
        # a claim about tensors that the build with these arguments did not make (a buffer
        # that is None by default, a parameter behind a flag) can be neither proved nor refuted
        if diag.code == "ML004" and subject and not built & set(subject):
            return None
        if diag.code in _NAMED_TENSOR_RULES and subject and subject[0] not in built:
            return None
    # ML004 is about the class (all the tensors it lists), not about one of them
    one = subject[0] if subject and diag.code != "ML004" else None
    attr = one if one in built else None
    codes = set(info.get("codes", ()))
    compared = info.get("compared", True)
    if diag.code == "ML008":
        if "MP006" in codes or info.get("raised"):
            return "confirmed"
        return "refuted" if compared else None  # another class of its model raised first
    # the meta build raised: its tensors were compared on an eager build that to_empty()
    # wiped (``substitute``), which says nothing of what stays on meta (ML007) or escapes it
    # (ML009); without that stand-in, nothing was compared
    stood_in = info.get("substitute", False) and diag.code not in _META_ONLY_RULES
    if not compared and not stood_in:
        return None
    return _compared_verdict(diag, info, codes, child, attr)


def _compared_verdict(diag: Diagnostic, info, codes: set[str], child, attr) -> str:
    """The verdict on a finding whose class's tensors were compared: ``attr`` the tensor it
    names, when that build made it."""
    broken = info.get("broken", {})
    if diag.code == "ML009" and "MP007" in codes:
        return "confirmed"
    if diag.code == "ML011":  # weight tying by assignment
        tie_broken = "MP005" in codes or any("MP005" in c for c in broken.values())
        return "confirmed" if tie_broken else "refuted"
    if diag.code == "ML006" and "MP009" in codes:
        return "confirmed"  # the children's values depend on the order the hooks run in
    if diag.code in _SUBTREE_RULES or child:
        return "confirmed" if info.get("subtree_broken", 0) or broken else "refuted"
    if attr is not None:
        return "confirmed" if attr in broken else "refuted"
    return "confirmed" if broken or codes & {"MP007", "MP009"} else "refuted"


#: probe codes that say one tensor's value was lost (its ``subject``)
_LOST_TENSOR_CODES = {"MP001", "MP002", "MP003", "MP004"}


def lost_tensor(diag: Diagnostic) -> tuple[str, str, str] | None:
    """``(file, class, tensor)`` when ``diag`` says that one tensor of its own class is lost:
    a static finding of a rule that names its tensor first, or the probe's MP001-MP004. A
    static finding the probe confirmed and the probe's own finding then say the same thing."""
    if diag.symbol is None or (
        diag.code not in _NAMED_TENSOR_RULES and diag.code not in _LOST_TENSOR_CODES
    ):
        return None
    if not diag.subject or _child_tensor(diag):
        return None
    return _norm(diag.filename), diag.symbol, diag.subject[0]


def mark_verdicts(static_diags: Iterable[Diagnostic], probe_report: Any) -> list[Diagnostic]:
    """Return ``static_diags`` with ``verdict`` set from ``probe_report`` (a
    :class:`~metalint.probe.command.ProbeReport` or its ``classes`` mapping)."""
    classes = list(_classes_of(probe_report).values())
    out = []
    for d in static_diags:
        if d.symbol is None or not d.code.startswith("ML") or d.code == "ML900":
            out.append(d)
            continue
        out.append(d.with_(verdict=verdict_for(d, _lookup(classes, d.filename, d.symbol))))
    return out
