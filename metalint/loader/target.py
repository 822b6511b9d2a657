"""Resolve a model target ``pkg.mod:factory`` or ``path/to/file.py:factory``.

A stand-in until the probe's own resolver lands: import the module (or load the file), look up
the attribute (dotted attributes allowed: ``mod:Class.build``) and return it; call it with no
arguments to build the model.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path


def resolve_target(target: str) -> Callable:
    """Return the zero-argument callable named by ``target`` (not called)."""
    if ":" not in target:
        raise ValueError(f"model target {target!r} must look like 'module:factory' or "
                         "'path/to/file.py:factory'")
    mod_name, _, attr = target.rpartition(":")
    if not mod_name or not attr:
        raise ValueError(f"model target {target!r} must look like 'module:factory'")
    if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
        path = Path(mod_name).resolve()
        if not path.is_file():
            raise ValueError(f"model target file {mod_name} does not exist")
        name = f"_metalint_target_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
    else:
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")
        module = importlib.import_module(mod_name)
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"model target {target!r}: {mod_name} has no {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"model target {target!r} is not callable")
    return obj


def resolve_factory(target: str):
    """Import ``target`` and call it with no arguments; return what it builds."""
    return resolve_target(target)()
