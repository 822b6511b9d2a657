"""Resolve probe TARGETs (in the parent: no import) and their items (in the child: imports).

A TARGET is a file path (``models/layers.py``), a directory (every ``*.py`` below it), a dotted
module (``pkg.layers``), ``module:Class`` / ``path.py:Class`` or ``module:factory`` (a callable
that takes no arguments and returns an ``nn.Module``). For a file or module, every
``nn.Module`` subclass defined there (top level, in source order) is an item, constructed with
its defaults or with small arguments inferred from its signature (:func:`infer_arguments`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Target:
    spec: str  # as given
    path: str | None  # file path when the target names a file
    module: str | None  # dotted module when it names a module
    attr: str | None  # Class / factory inside it

    @property
    def display(self) -> str:
        return self.spec


def parse_target(spec: str) -> list[Target]:
    """Split a TARGET into targets (a directory gives one per file). Imports nothing."""
    base, attr = spec, None
    if ":" in spec:
        head, _, tail = spec.rpartition(":")
        # a Windows drive letter is not a separator
        if not (len(head) == 1 and head.isalpha()):
            base, attr = head, tail or None
    p = Path(base)
    if base.endswith(".py") or p.is_file():
        return [Target(spec, str(p), None, attr)]
    if p.is_dir() and attr is None:
        return [
            Target(str(f), str(f), None, None)
            for f in sorted(p.rglob("*.py"))
            if not any(part.startswith(".") for part in f.parts)
        ]
    return [Target(spec, None, base, attr)]


# ----------------------------------------------------------------------------- child side


def import_file(path: str):
    """Import a file as part of its package (walk up ``__init__.py``), else as a top-level module."""
    file = Path(path).resolve()
    parts = [file.stem]
    d = file.parent
    while (d / "__init__.py").exists():
        parts.insert(0, d.name)
        d = d.parent
    root = str(d)
    if root not in sys.path:
        sys.path.insert(0, root)
    if parts[-1] == "__init__":
        parts.pop()
    name = ".".join(parts)
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == file:
        return mod
    if len(parts) > 1:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Item:
    label: str  # what the user reads: layers.py:LayerScale
    qualname: str
    make: Callable[[], Any] | None
    skip: str | None = None  # "cannot construct: <reason>"
    file: str | None = None
    args: str = ""  # the inferred arguments, for the text output


class CannotConstruct(Exception):
    pass


_DIM_NAMES = {
    "dim",
    "d_model",
    "hidden_size",
    "hidden_dim",
    "embed_dim",
    "embedding_dim",
    "in_features",
    "out_features",
    "in_channels",
    "out_channels",
    "channels",
    "num_channels",
    "features",
    "num_features",
    "in_dim",
    "out_dim",
    "width",
    "d_ff",
    "ffn_dim",
    "intermediate_size",
    "mlp_dim",
    "inner_dim",
    "dim_out",
    "dim_in",
    "hidden_features",
    "out_chans",
    "in_chans",
    "normalized_shape",
    "size",
    "head_dim",
    "dim_head",
    "n_embd",
    "d_hidden",
    "input_size",
    "output_size",
    "model_dim",
    "emb_dim",
    "c",
    "ch",
    "planes",
    "inplanes",
}
_HEAD_NAMES = {
    "num_heads",
    "heads",
    "n_heads",
    "n_head",
    "num_attention_heads",
    "nhead",
    "num_key_value_heads",
    "n_kv_heads",
    "num_kv_heads",
    "groups",
    "num_groups",
}
_COUNT_NAMES = {
    "num_layers",
    "depth",
    "n_layers",
    "n_layer",
    "num_hidden_layers",
    "layers",
    "num_blocks",
    "n_blocks",
}
_VOCAB_NAMES = {"vocab_size", "num_embeddings", "num_classes", "n_vocab", "num_tokens", "n_classes"}
_SEQ_NAMES = {
    "max_seq_len",
    "max_position_embeddings",
    "seq_len",
    "max_len",
    "block_size",
    "context_length",
    "max_seq_length",
    "n_positions",
    "num_positions",
    "img_size",
    "image_size",
}
_KERNEL_NAMES = {"kernel_size", "patch_size", "stride", "window_size"}
_FLOAT_SMALL = {"eps", "layer_norm_eps", "norm_eps", "rms_norm_eps", "epsilon"}


def _int_for(name: str) -> int | None:
    n = name.lower()
    if n in _HEAD_NAMES:
        return 2
    if n in _COUNT_NAMES:
        return 1
    if n in _VOCAB_NAMES:
        return 32
    if n in _SEQ_NAMES:
        return 16
    if n in _KERNEL_NAMES:
        return 2 if n != "kernel_size" else 3
    if n in _DIM_NAMES or n.endswith(("_dim", "_size", "_features", "_channels", "_chans")):
        return 16
    if n.startswith(("num_", "n_")):
        return 2
    return None


#: a dtype annotation left as text (its module imports torch under another name, or not at all)
_DTYPE_TEXT = frozenset({"torch.dtype", "dtype"})


def infer_arguments(cls: type) -> dict[str, Any]:
    """Small keyword arguments for the required parameters of ``cls.__init__``."""
    import torch

    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError) as exc:
        raise CannotConstruct(f"no signature ({exc})") from None
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    kwargs: dict[str, Any] = {}
    params = list(sig.parameters.values())[1:]  # self
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if p.kind is p.POSITIONAL_ONLY:
            raise CannotConstruct(f"positional-only parameter `{p.name}`")
        ann = hints.get(p.name, p.annotation)
        if isinstance(ann, str):  # get_type_hints failed on some annotation: this one alone
            try:
                ann = eval(ann, getattr(cls.__init__, "__globals__", {}))  # as get_type_hints does
            except Exception:
                pass
        origin = typing.get_origin(ann)
        if origin is typing.Union or type(ann).__name__ == "UnionType":
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            ann = args[0] if len(args) == 1 else ann
        if ann is bool:
            kwargs[p.name] = False
            continue
        named_dtype = ann is p.empty and p.name.lower() == "dtype"
        if ann is torch.dtype or (isinstance(ann, str) and ann in _DTYPE_TEXT) or named_dtype:
            kwargs[p.name] = torch.float32  # torchtune's KVCache(..., dtype)
            continue
        if ann is float:
            kwargs[p.name] = (
                1e-5 if p.name.lower() in _FLOAT_SMALL or "eps" in p.name.lower() else 0.1
            )
            continue
        guess = _int_for(p.name)
        if ann is int or (ann is p.empty and guess is not None):
            kwargs[p.name] = guess if guess is not None else 4
            continue
        if ann is p.empty and (
            "eps" in p.name.lower() or p.name.lower() in ("dropout", "p", "drop")
        ):
            kwargs[p.name] = 1e-5 if "eps" in p.name.lower() else 0.0
            continue
        shown = "" if ann is p.empty else f": {getattr(ann, '__name__', ann)}"
        raise CannotConstruct(f"required parameter `{p.name}{shown}` cannot be inferred")
    return kwargs


def module_items(mod, file: str | None) -> list[Item]:
    from torch import nn

    found = []
    for name, obj in vars(mod).items():
        if (
            inspect.isclass(obj)
            and issubclass(obj, nn.Module)
            and obj.__module__ == mod.__name__
            and not inspect.isabstract(obj)
        ):
            try:
                line = inspect.getsourcelines(obj)[1]
            except (OSError, TypeError):
                line = 0
            found.append((line, name, obj))
    found.sort(key=lambda x: (x[0], x[1]))
    prefix = os.path.basename(file) if file else mod.__name__
    return [class_item(obj, f"{prefix}:{obj.__qualname__}", file) for _, _, obj in found]


def class_item(cls: type, label: str, file: str | None) -> Item:
    try:
        kwargs = infer_arguments(cls)
    except CannotConstruct as exc:
        return Item(label, cls.__qualname__, None, f"cannot construct: {exc}", file)
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return Item(label, cls.__qualname__, lambda: cls(**kwargs), None, file, args)


def resolve_items(target: Target) -> list[Item]:
    """Import the target and list what to probe (may raise: reported as ML900)."""
    if target.path is not None:
        mod = import_file(target.path)
        file = str(Path(target.path).resolve())
    else:
        mod = importlib.import_module(target.module)
        file = getattr(mod, "__file__", None)
    if target.attr is None:
        return module_items(mod, file)
    names = target.attr.split(",")
    prefix = target.spec[: -len(target.attr)]
    items = []
    for name in names:
        # ``module:A,B.Inner``: several classes or factories of one module, imported once
        label = target.spec if len(names) == 1 else prefix + name
        obj: Any = mod
        for part in name.split("."):
            obj = getattr(obj, part)
        if inspect.isclass(obj):
            items.append(class_item(obj, label, file))
        elif callable(obj):
            items.append(Item(label, name, obj, None, file, "factory"))
        else:
            raise TypeError(f"{label} is neither a class nor a callable")
    return items


def load_settings_for_probe(
    start: str | os.PathLike | None = None, config: str | os.PathLike | None = None
):
    """The settings (``hooks`` and ``[tool.metalint.probe]``) of ``config``, else of the
    nearest pyproject.toml with a ``[tool.metalint]`` table above ``start`` (a file or folder;
    default: the working directory), read by :mod:`metalint.config` like every other setting;
    a bad one is a usage error."""
    import click

    from metalint.config import ConfigError, load_settings

    try:
        return load_settings(Path(start) if start else None, Path(config) if config else None)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
