"""Codes of the probe's findings (``MP0xx``).

``PROBE_CODES[code] = (name, one-line summary, long doc)``. This module does not import torch,
so :func:`metalint.rules.describe` can consult it cheaply.
"""

from __future__ import annotations

PROBE_CODES: dict[str, tuple[str, str, str]] = {
    "MP001": (
        "deterministic-value-lost",
        "A deterministic tensor differs from eager after meta build + init.",
        "The tensor's value in eager construction does not depend on the random generator "
        "(a constant, `arange`, a computed buffer, ...). After building on `meta`, `to_empty` and "
        "the init entry point, its value differs from eager (exact comparison; `allclose` with "
        "rtol 1e-5 on another device). A tensor that no hook re-initialised still holds the "
        "probe's poison (NaN for floats, a sentinel for integers, the negation for bools) and "
        "is reported here as *never re-initialised*. The diagnostic is located at the source "
        "line that last wrote the tensor during eager construction.",
    ),
    "MP002": (
        "random-distribution-differs",
        "A randomly initialised tensor's distribution differs from eager.",
        "The tensor is random in eager construction (some random op wrote it, directly or "
        "through the values it was computed from). After meta build + init its mean, standard "
        "deviation or range differs from eager beyond a tolerance scaled by `1/sqrt(numel)` "
        "(6 standard errors), or it was never re-initialised (still poisoned).",
    ),
    "MP003": (
        "left-on-meta",
        "A tensor is still on the meta device after init.",
        "A parameter, buffer or plain tensor attribute is on `meta` after `to_empty` and the "
        "init entry point. Plain tensor attributes (not registered with `register_buffer`) are "
        "not moved by `to_empty`, so they stay on meta and crash the first forward.",
    ),
    "MP004": (
        "non-finite-after-init",
        "A tensor has NaN/inf after deferred init where eager was finite.",
        "The init entry point ran over the tensor but left non-finite values in it (inf "
        "anywhere, or NaN in only part of it). A tensor that is NaN everywhere after init was "
        "never re-initialised (it still holds the NaN poison): that is reported as MP001/MP002 "
        "(value lost), not here.",
    ),
    "MP005": (
        "tie-broken",
        "Tied parameters are no longer the same object after meta build + init.",
        "In eager construction two module attributes hold the same `Parameter` object "
        "(`self.head.weight = self.embed.weight`). After `to_empty` and the init entry point "
        "they are different objects: `to_empty` re-creates each module's parameters separately, "
        "so the tie must be re-established (e.g. by a `tie_weights()` hook).",
    ),
    "MP006": (
        "meta-construct-raised",
        "Constructing the module on the meta device raised.",
        "`__init__` depends on tensor data (`.item()`, `.tolist()`, `float(t)`, a tensor in an "
        "`if`), which meta tensors do not have. The diagnostic is located at the line of user "
        "code that raised.",
    ),
    "MP007": (
        "device-escape",
        "Real memory was allocated while building on the meta device.",
        "An operation in `__init__` created a tensor on a real device while the module was "
        "built under `torch.device('meta')` (`torch.Tensor(3, 4)`, `torch.LongTensor(list)`, "
        "`device='cpu'`, `.cpu()`, `.to(dev)`): it allocates memory that the meta build is meant "
        "to avoid, and its value is wiped by `to_empty` unless a hook re-creates it.",
    ),
    "MP008": (
        "metadata-differs",
        "Shape, dtype or requires_grad differs from eager.",
        "After meta build + init a parameter or buffer has another shape, dtype or "
        "`requires_grad` than in eager construction, or it is missing/extra.",
    ),
    "MP009": (
        "hook-order-dependent",
        "The verdict depends on the order in which reset hooks run.",
        "Some `reset_parameters()` writes tensors of a child module. Run children-first "
        "(post-order, the probe's default, like timm's `named_apply(depth_first=True)`) and "
        "parent-first (pre-order), the results differ: frameworks that reset in the other order "
        "get different values.",
    ),
}


def describe(code: str) -> tuple[str, str, str] | None:
    return PROBE_CODES.get(code)
