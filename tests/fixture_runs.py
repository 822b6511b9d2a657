"""check, fix and import on a fixture the way the tests of one idiom do: every rule
selected, no cache, one worker, in the test's own folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from metalint.check import run_check
from metalint.config import Settings
from metalint.diagnostics import Diagnostic


def check_all(paths: list[Path], root: Path) -> list[Diagnostic]:
    """``metalint check --select ALL --no-cache`` of ``paths``: its diagnostics."""
    settings = Settings(root=root, select=["ALL"])
    return run_check(paths, settings, use_cache=False, workers=1).diagnostics


def fix_all(paths: list[Path], root: Path) -> str:
    """``metalint fix --write --unsafe-fixes --no-cache`` of ``paths``: what it printed."""
    from metalint.fix.command import run_fix

    lines: list[str] = []
    run_fix(
        paths,
        Settings(root=root, select=["ALL"]),
        write=True,
        show_diff=False,
        unsafe=True,
        verify=False,
        use_cache=False,
        workers=1,
        echo=lambda s="", nl=True: lines.append(str(s)),
    )
    return "\n".join(lines)


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Import the file ``path`` as a module of its own (``name``: its stem)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
