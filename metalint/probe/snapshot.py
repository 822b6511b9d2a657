"""The tensors of a built model as the probe compares them: each one's class, file and
attribute (``Entry``), a model's values after a build (``Snapshot``), and where in the user's
code an exception was raised."""

from __future__ import annotations

import functools
import gc
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from metalint.probe import attribute, compare


def release_memory() -> None:
    """Free the eager model for real: collect, then return freed heap pages to the OS (glibc
    raises its mmap threshold after the first large free, so later tensors live in the heap)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Entry:
    name: str  # path in the model: blocks.0.ls1.gamma
    kind: str  # parameter | buffer | attribute
    owner: str  # module path: blocks.0.ls1
    attr: str  # gamma
    cls: str  # owner class qualname
    cls_file: str | None
    cls_module: str
    stats: compare.Stats | None = None
    site: attribute.Site | None = None


@functools.lru_cache(maxsize=None)
def _class_file(cls: type) -> str | None:
    try:
        return os.path.realpath(inspect.getsourcefile(cls) or "")
    except (TypeError, OSError):
        return None


def _walk_tensors(model: nn.Module) -> Iterator[tuple[str, str, str, nn.Module, torch.Tensor]]:
    """(kind, owner path, attr, owner module, tensor) for every name, ties included. A lazy
    module's uninitialised parameters and buffers (``nn.LazyLinear``: no shape until the first
    forward, eagerly as on meta) hold no value to compare: left out (torchrl's ``MLP`` of lazy
    layers raised "Attempted to use an uninitialized parameter")."""
    for path, mod in model.named_modules(remove_duplicate=False):
        for attr, p in mod._parameters.items():
            if p is not None and not is_lazy(p):
                yield "parameter", path, attr, mod, p
        for attr, b in mod._buffers.items():
            if b is not None and not is_lazy(b):
                yield "buffer", path, attr, mod, b
        for attr, v in vars(mod).items():
            if isinstance(v, torch.Tensor) and not attr.startswith("__"):
                yield "attribute", path, attr, mod, v


def _name(path: str, attr: str) -> str:
    return f"{path}.{attr}" if path else attr


@dataclass
class Snapshot:
    entries: dict[str, Entry]
    ties: list[list[str]]  # groups of names that share one Parameter/buffer object
    classes: dict[str, dict[str, Any]]  # module path -> {cls, file, module}


def snapshot(
    model: nn.Module,
    recorder: attribute.WriteRecorder | None,
    *,
    stats: bool = True,
    keep_copy: bool = True,
) -> tuple[Snapshot, dict[str, torch.Tensor]]:
    entries: dict[str, Entry] = {}
    by_id: dict[int, list[str]] = {}
    tensors: dict[str, torch.Tensor] = {}
    seen_stats: dict[int, compare.Stats] = {}
    classes: dict[str, dict[str, Any]] = {}
    for path, mod in model.named_modules(remove_duplicate=False):
        cls = type(mod)
        classes[path] = {
            "cls": cls.__qualname__,
            "file": _class_file(cls),
            "module": cls.__module__,
        }
    for kind, path, attr, mod, t in _walk_tensors(model):
        name = _name(path, attr)
        cls = type(mod)
        e = Entry(name, kind, path, attr, cls.__qualname__, _class_file(cls), cls.__module__)
        if kind != "attribute":
            by_id.setdefault(id(t), []).append(name)
        if stats:
            if id(t) not in seen_stats:
                seen_stats[id(t)] = compare.tensor_stats(t, keep_copy=keep_copy)
            e.stats = seen_stats[id(t)]
        if recorder is not None:
            e.site, rand = recorder.lookup(t)
            if e.stats is not None:
                e.stats.random = bool(rand)
                e.stats.uninitialised = recorder.never_written(t)
        entries[name] = e
        tensors[name] = t
    ties = [names for names in by_id.values() if len(names) > 1]
    return Snapshot(entries, ties, classes), tensors


def _mark_seed_dependent(make: Callable[[], nn.Module], seed: int, eager: Snapshot) -> None:
    """Build eager again under another seed: a tensor whose bytes differ is random, whatever
    the write recorder saw (a draw through numpy or Python's ``random``, a 1-element tensor)."""
    torch.manual_seed(seed + 7919)
    try:
        model = make()
    except Exception:
        return  # the first build succeeded: the recorder's verdict stands
    for kind, path, attr, _mod, t in _walk_tensors(model):
        e = eager.entries.get(_name(path, attr))
        st = e.stats if e is not None else None
        if st is None or st.random or st.numel == 0 or tuple(t.shape) != st.shape:
            continue
        if t.device.type != "meta" and compare._hash(t) != st.digest:
            st.random = True
    del model
    release_memory()


def _raise_site(exc: BaseException) -> tuple[attribute.Site | None, str | None]:
    tb = exc.__traceback__
    site = None
    owner = None
    torch_dir = attribute._TORCH_DIR
    while tb is not None:
        fr = tb.tb_frame
        fn = fr.f_code.co_filename
        if (
            not fn.startswith(torch_dir)
            and not fn.startswith(attribute._PROBE_DIR)
            and not fn.startswith("<")
        ):
            site = attribute.Site(fn, tb.tb_lineno, fr.f_code.co_name)
            obj = fr.f_locals.get("self")
            if isinstance(obj, nn.Module):
                owner = type(obj).__qualname__
                site.owner = owner
        tb = tb.tb_next
    return site, owner
