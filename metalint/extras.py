"""Optional dependencies: ``check``, ``fix`` and ``rule`` need no torch; ``probe`` and ``load``
(and ``check --probe``, ``fix --verify``) need the ``torch`` extra (torch and safetensors).

Whether a module is installed is asked of the import system (``find_spec``) without importing
it: the commands that need torch import it later, in the process that uses it.
"""

from __future__ import annotations

import importlib.util

#: how to install what the torch-backed commands need
TORCH_EXTRA = "pip install 'metalint[torch]'"


def missing(*modules: str) -> list[str]:
    """Those of ``modules`` that cannot be imported here."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it, a broken install
            found = False
        if not found:
            out.append(name)
    return out


def torch_missing(what: str, modules: tuple[str, ...] = ("torch",)) -> str | None:
    """The one-line error for ``what`` (``metalint probe``) when ``modules`` are not
    installed; None when they are."""
    gone = missing(*modules)
    if not gone:
        return None
    return f"metalint: error: `{what}` needs {' and '.join(gone)}: {TORCH_EXTRA}"
