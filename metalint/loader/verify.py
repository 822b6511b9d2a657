"""``--verify``: compare a streamed load with an eager ``load_state_dict`` of the same file."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from metalint.loader.core import LoadReport, VerifyResult
from metalint.loader.dtype_policy import DtypePolicy
from metalint.loader.formats import open_checkpoint


def eager_load(
    factory: Callable[[], nn.Module], checkpoint, *, dtype=None, keep_in_fp32: Iterable[str] = ()
) -> nn.Module:
    """The reference: build eagerly on CPU, read the whole state dict, ``load_state_dict``
    (``strict=False``), then apply the same dtype policy with plain ``.to``."""
    policy = DtypePolicy.make(dtype, keep_in_fp32)
    ref = factory()
    with open_checkpoint(checkpoint) as src:
        sd = {name: src.read(name).clone() for name in src.entries}
    ref.load_state_dict(sd, strict=False)
    del sd
    seen = set()
    with torch.no_grad():
        for name, t in list(ref.named_parameters(remove_duplicate=False)) + list(
            ref.named_buffers(remove_duplicate=False)
        ):
            if id(t) in seen:
                continue
            seen.add(id(t))
            target = policy.target(name, t.dtype)
            if t.dtype != target:
                t.data = t.data.to(target)
    return ref


def compare(model: nn.Module, ref: nn.Module, report: LoadReport | None = None) -> VerifyResult:
    """Compare every parameter and buffer: dtype, shape, values (exact), ties."""
    res = VerifyResult()
    materialized = report.materialized if report is not None else {}
    ours = dict(model.named_parameters(remove_duplicate=False))
    ours.update(model.named_buffers(remove_duplicate=False))
    theirs = dict(ref.named_parameters(remove_duplicate=False))
    theirs.update(ref.named_buffers(remove_duplicate=False))
    param_names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        if a is None or b is None:
            res.mismatches.append(
                f"{name}: only in the {'eager' if a is None else 'streamed'} model"
            )
            continue
        res.compared += 1
        if a.dtype != b.dtype or a.shape != b.shape:
            res.mismatches.append(
                f"{name}: {a.dtype}{list(a.shape)} vs eager {b.dtype}{list(b.shape)}"
            )
            continue
        if a.device.type == "meta":
            res.mismatches.append(f"{name}: left on meta")
            continue
        if torch.equal(a.detach().cpu(), b.detach()):
            res.identical += 1
        elif name in materialized and name in param_names:
            # randomly initialised: the draw order differs between the two paths
            res.compared -= 1
            res.skipped.append(name)
        else:
            diff = (a.detach().cpu().double() - b.detach().double()).abs().max().item()
            res.mismatches.append(f"{name}: values differ (max abs diff {diff:g})")

    # ties must be the same in both
    def ties(m):
        by_id: dict[int, list[str]] = {}
        for n, t in list(m.named_parameters(remove_duplicate=False)) + list(
            m.named_buffers(remove_duplicate=False)
        ):
            by_id.setdefault(id(t), []).append(n)
        return {tuple(v) for v in by_id.values() if len(v) > 1}

    for t in ties(ref) - ties(model):
        res.mismatches.append(f"tie {' = '.join(t)} is intact eagerly but not when streamed")
    return res


def verify_against_eager(
    factory,
    checkpoint,
    model: nn.Module,
    *,
    dtype=None,
    keep_in_fp32: Iterable[str] = (),
    report: LoadReport | None = None,
) -> VerifyResult:
    ref = eager_load(factory, checkpoint, dtype=dtype, keep_in_fp32=keep_in_fp32)
    res = compare(model, ref, report)
    if report is not None:
        report.verify = res
    return res
