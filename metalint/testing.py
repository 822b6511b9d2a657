"""Helpers for users' test suites.

    from metalint.testing import assert_meta_init_parity

    def test_my_model_is_meta_safe():
        assert_meta_init_parity(lambda: MyModel(dim=64), init="auto", device="cpu")

The check runs in the test's own process (no child process, no timeout): build eagerly,
build on meta, ``to_empty``, run the init entry point, compare every tensor - see
``metalint probe``. It fails with the same readable report as ``metalint probe``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
) -> None:
    """Assert that ``factory()`` built on meta and initialised with ``init`` matches eager.

    ``factory``: a zero-argument callable returning an ``nn.Module`` (called three times:
    eager, meta, and once more when the hook order must be checked).
    ``init``: ``"auto"`` (a root ``init_weights()`` when present, else ``reset_parameters()``
    on every module, children first), ``"reset_parameters"``, ``"init_weights"``, or a
    ``"module:callable"`` called with the model.
    ``device``: where ``to_empty`` materialises the model (``"auto"`` picks cuda when available).
    ``hooks``: more methods your code calls on every module that has them after the init,
    as in ``[tool.metalint] hooks`` (e.g. ``("rope_init",)``).
    Raises ``AssertionError`` listing every finding (MP001-MP009) with its source line.
    """
    from metalint.probe.build import probe

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
    if res.findings:
        text = report.render(res.findings, "text")
        raise AssertionError(
            f"{label} is not meta-safe with init={init!r} on {res.device} "
            f"(ran {res.init_used}): {res.verdict()}\n{text}"
        )
