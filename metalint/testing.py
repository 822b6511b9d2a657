"""Helpers for users' test suites.

    from metalint.testing import assert_meta_init_parity

    def test_my_model_is_meta_safe():
        assert_meta_init_parity(lambda: MyModel(dim=64), init="auto", device="cpu")

The check runs in the test's own process (no child process, no timeout): build eagerly,
build on meta, ``to_empty``, run the init entry point, compare every tensor - see
``metalint probe``. It fails with the same readable report as ``metalint probe``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from metalint import report


def assert_meta_init_parity(
    factory: Callable[[], Any],
    init: str = "auto",
    device: str = "cpu",
    *,
    seed: int = 0,
    check_order: bool = True,
    hooks: Sequence[str] = (),
    allow: Collection[str] = (),
) -> list:
    """Assert that ``factory()`` built on meta and initialised with ``init`` matches eager.

    ``factory``: a zero-argument callable returning an ``nn.Module`` (called three times:
    eager, meta, and once more when the hook order must be checked).
    ``init``: ``"auto"`` (a root ``init_weights()`` when present, else ``reset_parameters()``
    on every module, children first), ``"reset_parameters"``, ``"init_weights"``, or a
    ``"module:callable"`` called with the model.
    ``device``: where ``to_empty`` materialises the model (``"auto"`` picks cuda when available).
    ``hooks``: more methods your code calls on every module that has them after the init,
    as in ``[tool.metalint] hooks`` (e.g. ``("rope_init",)``).
    ``allow``: intended differences from eager init, each a tensor (``"gamma"``), a tensor of
    one class (``"LayerScale.gamma"``) or of one module's class (``"pkg.mod:LayerScale.gamma"``,
    as ``[tool.metalint.probe] expected-differences``): a finding about it does not fail the
    test (it is returned); an entry that names no finding fails it (stale).
    Raises ``AssertionError`` listing every other finding (MP001-MP009) with its source line.
    Returns the findings ``allow`` declared.
    """
    from metalint.probe.build import probe
    from metalint.probe.results import Declared, split_declared

    if isinstance(allow, str):
        allow = (allow,)
    try:
        declared = [Declared.parse(a, need_where=False) for a in allow]
    except ValueError as exc:
        raise ValueError(f"allow: {exc}") from None

    label = getattr(factory, "__qualname__", None) or repr(factory)
    res = probe(
        factory,
        device=device,
        init=init,
        seed=seed,
        label=label,
        check_order=check_order,
        hooks=hooks,
    )
    failing, intended, stale = split_declared(list(res.findings), declared)
    if failing:
        text = report.render(failing, "text")
        also = f" ({len(intended)} allowed difference(s) aside)" if intended else ""
        raise AssertionError(
            f"{label} is not meta-safe with init={init!r} on {res.device} "
            f"(ran {res.init_used}): {res.verdict()}{also}\n{text}"
        )
    if stale:
        names = ", ".join(repr(x.spec) for x in stale)
        raise AssertionError(
            f"{label}: allow={names} matched no difference from eager init (stale: remove it)"
        )
    return [d for d, _ in intended]
