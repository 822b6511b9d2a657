"""Resolve probe TARGETs (in the parent: no import) and their items (in the child: imports).

A TARGET is a file path (``models/layers.py``), a directory (every ``*.py`` below it), a dotted
module (``pkg.layers``), ``module:Class`` / ``path.py:Class`` or ``module:factory`` (a callable
that takes no arguments and returns an ``nn.Module``). For a file or module, every
``nn.Module`` subclass defined there (top level, in source order) is an item, constructed with
its defaults or with small arguments inferred from its signature (:func:`infer_arguments`).
"""

from __future__ import annotations

import ast
import collections.abc
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from metalint.config import ConfigError, load_settings


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


def project_paths(cwd: Path | None = None) -> list[str]:
    """Where a dotted TARGET is looked for besides ``sys.path``: the working directory (as
    ``python -m`` puts it first) and the project root, the folder of the nearest
    ``pyproject.toml`` above it."""
    here = (cwd or Path.cwd()).resolve()
    paths = [str(here)]
    root = next((d for d in (here, *here.parents) if (d / "pyproject.toml").is_file()), None)
    if root is not None and str(root) not in paths:
        paths.append(str(root))
    return paths


def import_module(name: str):
    """Import the dotted module of a TARGET with :func:`project_paths` on ``sys.path``:
    ``metalint probe`` (whose child runs with the working directory first) and ``metalint
    load`` (a console script, which has not) find the same modules without ``PYTHONPATH``."""
    for i, p in enumerate(project_paths()):
        if p not in sys.path and not (p == os.getcwd() and "" in sys.path):
            sys.path.insert(i, p)
    return importlib.import_module(name)


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
#: a callable parameter that is an activation (torch-geometric DimeNet's blocks take ``act:
#: Callable``, the module ``activation_resolver`` makes)
_ACTIVATION_NAMES = {"act", "activation", "act_fn", "activation_fn", "nonlinearity"}


def _int_for(name: str) -> int | None:
    n = name.lower()
    if n in _HEAD_NAMES:
        return 2
    if n in _COUNT_NAMES:
        return 1
    if n in _VOCAB_NAMES:
        return 32
    if n in _SEQ_NAMES or n.endswith(("_len", "_length", "_steps")):
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


#: no guess for a parameter
_NO = object()
#: the guess for an unannotated parameter used as a number that neither its name nor where it
#: is forwarded explains
_FALLBACK_INT = 4


def _guess(name: str, ann: Any, empty: Any) -> Any:
    """A small value for a parameter named ``name`` annotated ``ann`` (``empty``: none), or
    ``_NO``. ``Optional[X]``/``Union``: the first member with a guess (``None`` when only
    ``None`` fits); ``Literal``: its first value; ``tuple[int, int]``/``tuple[int, ...]``/
    ``list[int]``: guesses of the members; an activation (``act: Callable``): ``nn.SiLU()``;
    ``Tensor``: a small one (torch-geometric's ``LinkPredDiversity(k, category: Tensor)``)."""
    import torch

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    text = ann.split("[")[0].rsplit(".", 1)[-1] if isinstance(ann, str) else None
    callable_ann = collections.abc.Callable in (ann, origin) or ann is typing.Callable
    if name.lower() in _ACTIVATION_NAMES and (callable_ann or text == "Callable" or ann is empty):
        return torch.nn.SiLU()
    if ann is torch.Tensor or text == "Tensor":
        return torch.ones(4)
    composite = _composite_guess(name, ann, empty, origin, args)
    if composite is not _SIMPLE:
        return composite
    return _simple_guess(name, ann, empty)


#: :func:`_composite_guess` of an annotation that is no ``Literal``, union, tuple or list
_SIMPLE = object()


def _composite_guess(name: str, ann: Any, empty: Any, origin: Any, args: tuple) -> Any:
    """:func:`_guess` of ``Literal``, ``Optional``/``Union``, ``tuple`` and ``list``
    annotations; ``_SIMPLE`` for any other."""
    if origin is typing.Literal and args:
        return args[0]
    if origin is typing.Union or type(ann).__name__ == "UnionType":
        members = [a for a in args if a is not type(None)]
        for a in members:
            g = _guess(name, a, empty)
            if g is not _NO:
                return g
        return None if len(members) < len(args) else _NO
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            g = _guess(name, args[0], empty)
            return _NO if g is _NO else (g, g)
        gs = [_guess(name, a, empty) for a in args]
        return _NO if _NO in gs else tuple(gs)
    if origin in (list, collections.abc.Sequence) and args:
        g = _guess(name, args[0], empty)
        return _NO if g is _NO else [g, g]
    return _SIMPLE


def _simple_guess(name: str, ann: Any, empty: Any) -> Any:
    """:func:`_guess` of a ``bool``, dtype, ``float`` or ``int`` parameter, or one without
    annotation whose name tells (``dim``, ``eps``, ``dropout``)."""
    import torch

    if ann is bool:
        return False
    named_dtype = ann is empty and name.lower() == "dtype"
    if ann is torch.dtype or (isinstance(ann, str) and ann in _DTYPE_TEXT) or named_dtype:
        return torch.float32  # torchtune's KVCache(..., dtype)
    if ann is float:
        return 1e-5 if name.lower() in _FLOAT_SMALL or "eps" in name.lower() else 0.1
    guess = _int_for(name)
    if ann is int or (ann is empty and guess is not None):
        return guess if guess is not None else 4
    if ann is empty and ("eps" in name.lower() or name.lower() in ("dropout", "p", "drop")):
        return 1e-5 if "eps" in name.lower() else 0.0
    return _NO


@functools.lru_cache(maxsize=256)
def _init_tree(cls: type):
    """CPython's tree of ``cls.__init__``'s source, parsed once per class for every
    parameter :func:`_used_as_number` and :func:`_forwarded_guess` ask about; None without
    source."""
    import ast
    import textwrap

    try:
        return ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    except (OSError, TypeError, SyntaxError):
        return None


def _used_as_number(cls: type, name: str) -> bool:
    """Does ``cls.__init__`` use parameter ``name`` as a number: in arithmetic, a comparison
    with a number, ``range(name)`` or a ``torch`` call's argument (pypots' ``SpectralConv1d``:
    ``modes1`` in ``min(modes1, seq_len // 2)``)? A parameter only kept or called is not."""
    import ast

    tree = _init_tree(cls)
    if tree is None:
        return False

    def named(e) -> bool:
        return isinstance(e, ast.Name) and e.id == name

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and (named(node.left) or named(node.right)):
            return True
        if isinstance(node, ast.Compare) and _compared_to_number(node, named):
            return True
        if isinstance(node, ast.Call) and any(named(a) for a in node.args):
            if _numeric_call(node):
                return True
    return False


def _compared_to_number(node, named) -> bool:
    """``n > 0``: the parameter compared with a number."""
    import ast

    others = [node.left, *node.comparators]
    return any(named(o) for o in others) and any(
        isinstance(o, ast.Constant) and type(o.value) in (int, float) for o in others
    )


def _numeric_call(node) -> bool:
    """``range(n)``, ``min(n, m)``, ``int(n)`` or a ``torch`` function's call."""
    import ast

    f = node.func
    if isinstance(f, ast.Name) and f.id in ("range", "min", "max", "int"):
        return True
    while isinstance(f, ast.Attribute):
        f = f.value
    return isinstance(f, ast.Name) and f.id == "torch"


def _forwarded_guess(cls: type, name: str, depth: int = 0) -> Any:
    """A guess for ``name`` from where ``cls.__init__`` forwards it: ``nn.Conv2d(c1, ...)``
    or ``Block(dim=width)`` take it as one of *their* parameters, whose default (or guess)
    is a value of the right kind. ``_NO`` when it is not forwarded to anything resolvable."""
    import ast

    tree = _init_tree(cls)
    if tree is None:
        return _NO
    scope = getattr(cls.__init__, "__globals__", {})
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        slot = _slot(node, name)
        if slot is None:
            continue
        callee = _callee(node, scope)
        if callee is _NO:
            continue
        g = _callee_guess(callee, slot, depth)
        if g is not _NO:
            return g
    return _NO


def _slot(node, name: str) -> int | str | None:
    """Where a call takes the parameter ``name``: its position or keyword (the last)."""
    import ast

    slot: int | str | None = None
    for i, a in enumerate(node.args):
        if isinstance(a, ast.Name) and a.id == name:
            slot = i
    for kw in node.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id == name and kw.arg:
            slot = kw.arg
    return slot


def _callee(node, scope: dict) -> Any:
    """What a call calls, evaluated in ``scope`` when it is a plain name or a dotted path
    (nothing is called); ``_NO`` otherwise."""
    import ast

    func = node.func
    while isinstance(func, ast.Attribute):
        func = func.value
    if not isinstance(func, ast.Name) or func.id == "self":
        return _NO
    try:
        return eval(compile(ast.Expression(node.func), "<callee>", "eval"), dict(scope))
    except Exception:
        return _NO


def _callee_guess(callee: Any, slot: int | str, depth: int) -> Any:
    target = callee.__init__ if inspect.isclass(callee) else callee
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return _NO
    if inspect.isclass(callee) and params and params[0].name == "self":
        params = params[1:]
    if isinstance(slot, int):
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if slot >= len(positional):
            return _NO
        p = positional[slot]
    else:
        p = next((q for q in params if q.name == slot), None)
        if p is None:
            return _NO
    if p.default is not p.empty and p.default is not None:
        return p.default
    try:
        hints = typing.get_type_hints(target)
    except Exception:
        hints = {}
    g = _guess(p.name, hints.get(p.name, p.annotation), p.empty)
    if g is _NO and inspect.isclass(callee) and depth < 2:
        g = _forwarded_guess(callee, p.name, depth + 1)
    return g


def infer_arguments(cls: type) -> dict[str, Any]:
    """Small keyword arguments for the required parameters of ``cls.__init__``: from each
    parameter's annotation and name (:func:`_guess`), else from the parameter of another
    class or function it is forwarded to (:func:`_forwarded_guess`), else, for a parameter
    without annotation, a small int."""
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
        ann = _annotation(cls, hints.get(p.name, p.annotation))
        value = _guess(p.name, ann, p.empty)
        if value is _NO:
            value = _forwarded_guess(cls, p.name)
        if value is _NO and ann is p.empty and _used_as_number(cls, p.name):
            # nothing tells (pypots' ``SpectralConv1d(in_channels, out_channels, modes1)``,
            # ``DampingLayer(pred_len, ...)``): most such parameters are sizes and counts; a
            # wrong kind fails eager construction, which the probe reports with its error
            value = _FALLBACK_INT
        if value is _NO:
            shown = "" if ann is p.empty else f": {getattr(ann, '__name__', ann)}"
            raise CannotConstruct(f"required parameter `{p.name}{shown}` cannot be inferred")
        kwargs[p.name] = value
    return kwargs


def _annotation(cls: type, ann: Any) -> Any:
    """A parameter's annotation; one still a string (``get_type_hints`` failed on some
    annotation) evaluated alone, as ``get_type_hints`` does."""
    if isinstance(ann, str):
        try:
            return eval(ann, getattr(cls.__init__, "__globals__", {}))
        except Exception:
            pass
    return ann


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
        mod = import_module(target.module)
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
            if not hasattr(obj, part) and obj is mod and _defined_in_source(file, part):
                # cellpose's segformer ``Transformer``, defined in a ``try:`` that imports an
                # optional dependency: the import left it undefined
                obj = None
                break
            obj = getattr(obj, part)
        if obj is None:
            why = f"cannot construct: `{name}` is not defined once the module is imported"
            items.append(
                Item(label, name, None, why + " (a condition around it did not hold)", file)
            )
            continue
        if inspect.isclass(obj):
            items.append(class_item(obj, label, file))
        elif callable(obj):
            items.append(Item(label, name, obj, None, file, "factory"))
        else:
            raise TypeError(f"{label} is neither a class nor a callable")
    return items


def _defined_in_source(file: str | None, name: str) -> bool:
    """Does the file's text define a class or function ``name`` (at any depth)?"""
    if not file or not file.endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    return any(
        isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        for n in ast.walk(tree)
    )


def load_settings_for_probe(
    start: str | os.PathLike | None = None, config: str | os.PathLike | None = None
):
    """The settings (``hooks`` and ``[tool.metalint.probe]``) of ``config``, else of the
    nearest pyproject.toml with a ``[tool.metalint]`` table above ``start`` (a file or folder;
    default: the working directory), read by :mod:`metalint.config` like every other setting;
    a bad one is a usage error."""
    import click

    try:
        return load_settings(Path(start) if start else None, Path(config) if config else None)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
