"""Import aliases and qualified names, without libcst's slow metadata providers.

``Aliases`` maps a local name to the dotted name it was imported as, so ``nn.Parameter``,
``torch.nn.Parameter``, ``P`` (``from torch.nn import Parameter as P``) and
``from torch.nn.parameter import Parameter`` all qualify to ``torch.nn.Parameter``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import libcst as cst

from metalint.static.results import STAR
from metalint.vocabulary import (
    BUFFER_CLASSES,
    PARAMETER_CLASSES,
    PARTIAL_FUNCTIONS,
    PARTIAL_HIDDEN_KEYWORDS,
)

# Public spellings for the same object: private module paths fold to the public name.
_CANONICAL_PREFIXES = (
    ("torch.nn.parameter.", "torch.nn."),
    ("torch.nn.modules.module.", "torch.nn."),
    ("torch.nn.modules.", "torch.nn."),  # torch.nn.modules.linear.Linear -> torch.nn.linear.Linear
    ("torch.nn.init.", "torch.nn.init."),
    ("torch.functional.", "torch."),
    ("torch._C._VariableFunctions.", "torch."),
)


@functools.lru_cache(maxsize=1 << 16)  # rules qualify the same few names again and again
def canonical(name: str) -> str:
    for prefix, public in _CANONICAL_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            if prefix == "torch.nn.modules.":
                # torch.nn.modules.linear.Linear -> torch.nn.Linear
                rest = rest.rsplit(".", 1)[-1]
            return public + rest
    return name


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    # ``type(...) is``: libcst's node classes are ABCs, whose isinstance is a Python call
    # (Attribute and Name have no subclasses); this runs for every name a rule qualifies
    if type(node) is cst.Name:
        return node.value
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is cst.Name:
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def module_name_for(path: Path) -> str:
    """Dotted module name of a file: parent packages are the folders holding ``__init__.py``."""
    path = path.resolve() if not path.is_absolute() else path
    parts = [path.stem] if path.stem != "__init__" else []
    parent = path.parent
    while (parent / "__init__.py").is_file():
        parts.append(parent.name)
        if parent.parent == parent:
            break
        parent = parent.parent
    return ".".join(reversed(parts)) or path.stem


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if module else []
    if not is_package and base:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)] if level - 1 <= len(base) else []
    if target:
        base = base + target.split(".")
    return ".".join(base)


def partial_class(
    func: str | None, target: str | None, keywords: Sequence[str | None]
) -> str | None:
    """What a call of ``NAME`` constructs when the module binds ``NAME = func(target, ...)``
    with ``func`` qualified to ``functools.partial`` (x-transformers' ``LinearNoBias =
    partial(nn.Linear, bias = False)``): ``target``, the qualified class, or None.

    Only a capitalised name (a class, as construction reads one: ``Block(...)``), outside
    torch only ``torch.nn.<Module>`` (not ``Parameter``/``Buffer``: tensors), and only when the
    partial binds keywords alone (``keywords``: the name of each argument after ``target``,
    None for a positional or starred one): a positional argument would shift the call's own,
    ``**kwargs`` hides what it binds, and a bound ``device``/``dtype`` hides where the module
    is made (a call site reads those from its own keywords)."""
    if func not in PARTIAL_FUNCTIONS or not target:
        return None
    if any(k is None or k in PARTIAL_HIDDEN_KEYWORDS for k in keywords):
        return None
    if not target.rpartition(".")[2][:1].isupper():
        return None
    if target.startswith("torch.") and not torch_module_class(target):
        return None
    return target


def torch_module_class(name: str) -> bool:
    """Is the qualified ``name`` a module class of ``torch.nn`` (``torch.nn.Linear``), not a
    tensor class (``torch.nn.Parameter``, ``torch.nn.Buffer``)?"""
    return (
        name.startswith("torch.nn.")
        and name.count(".") == 2
        and name[9:10].isupper()
        and name not in PARAMETER_CLASSES
        and name not in BUFFER_CLASSES
    )


class Aliases:
    """Local name -> qualified dotted name, filled from import statements, and from the
    module-level partials of a class (:func:`partial_class`: a call of the name constructs
    the class, so it qualifies to it; ``constructors`` lists those names)."""

    def __init__(self, module: str, is_package: bool = False) -> None:
        self.module = module
        self.is_package = is_package
        self.names: dict[str, str] = {}
        #: module-level partials of a class: name -> the class (also in ``names``)
        self.constructors: dict[str, str] = {}
        #: modules whose names this one takes with ``from <module> import *``
        self.stars: list[str] = []
        #: how many times an import changed ``names`` or ``stars``: the facts of a
        #: module-level function, collected after the file's (``function_facts``), add its
        #: imports, and a memo of answers (``RuleContext.qualify``) holds while this stays
        self.changes = 0

    def _bind(self, local: str, full: str) -> None:
        if self.names.get(local) != full:
            self.names[local] = full
            self.changes += 1

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, full)
            else:
                top = full.split(".")[0]
                self._bind(top, top)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        mod = dotted(node.module) if node.module is not None else None
        level = len(node.relative)
        if level:
            mod = _resolve_relative(self.module, self.is_package, level, mod)
        if mod is None:
            return
        if isinstance(node.names, cst.ImportStar):
            self.stars.append(mod)
            self.changes += 1
            return
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._bind(local, f"{mod}.{name}" if mod else name)

    def qualify(
        self, node: cst.BaseExpression, local_classes: dict[str, str] | None = None
    ) -> str | None:
        """Qualified, canonical name of a Name/Attribute chain, or None when not importable."""
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.names:
            full = self.names[head]
        elif local_classes is not None and head in local_classes:
            full = local_classes[head]
        else:
            return None
        return canonical(f"{full}.{rest}" if rest else full)


def _ast_partial(node, out: dict[str, str]) -> str | None:
    """:func:`partial_class` of ``NAME = partial(Cls, k=v)`` read from CPython's tree, its
    names qualified by the exports found so far (``out``)."""
    import ast

    def qualify(e) -> str | None:
        parts = []
        while isinstance(e, ast.Attribute):
            parts.append(e.attr)
            e = e.value
        if not isinstance(e, ast.Name) or e.id not in out:
            return None
        return canonical(".".join([out[e.id], *reversed(parts)]))

    value = node.value
    if (
        len(node.targets) != 1
        or not isinstance(node.targets[0], ast.Name)
        or not isinstance(value, ast.Call)
        or not value.args
        or isinstance(value.args[0], ast.Starred)
    ):
        return None
    rest = [None] * (len(value.args) - 1) + [k.arg for k in value.keywords]
    return partial_class(qualify(value.func), qualify(value.args[0]), rest)


def _ast_imports(node, out: dict[str, str], module: str, is_package: bool) -> None:
    import ast

    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                out[top] = top
        return
    mod = node.module
    if node.level:
        mod = _resolve_relative(module, is_package, node.level, mod)
    if not mod:
        return
    for a in node.names:
        if a.name != "*":
            out[a.asname or a.name] = f"{mod}.{a.name}"
        else:
            out[f"{STAR}{mod}"] = mod


def exports_from_ast(tree, module: str, is_package: bool) -> dict[str, str]:
    """Top-level import aliases of a file that was not parsed with libcst (``ast`` tree),
    its classes and its module-level partials of a class (:func:`partial_class`)."""
    import ast

    out: dict[str, str] = {}
    partials: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            # the last binding of a name wins, as for imports; another binding of a partial's
            # name makes it unknown (one of an imported name changes nothing, as before)
            made = _ast_partial(node, out)
            for n in (n for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                if made is not None:
                    out[n.id] = partials[n.id] = made
                elif out.get(n.id, 0) == partials.get(n.id):
                    del out[n.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _ast_imports(node, out, module, is_package)
        elif isinstance(node, ast.ClassDef):
            out[node.name] = f"{module}.{node.name}" if module else node.name
    return out
