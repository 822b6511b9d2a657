"""Import aliases and qualified names, without libcst's slow metadata providers.

``Aliases`` maps a local name to the dotted name it was imported as, so ``nn.Parameter``,
``torch.nn.Parameter``, ``P`` (``from torch.nn import Parameter as P``) and
``from torch.nn.parameter import Parameter`` all qualify to ``torch.nn.Parameter``.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

# Public spellings for the same object: private module paths fold to the public name.
_CANONICAL_PREFIXES = (
    ("torch.nn.parameter.", "torch.nn."),
    ("torch.nn.modules.module.", "torch.nn."),
    ("torch.nn.modules.", "torch.nn."),  # torch.nn.modules.linear.Linear -> torch.nn.linear.Linear
    ("torch.nn.init.", "torch.nn.init."),
    ("torch.functional.", "torch."),
    ("torch._C._VariableFunctions.", "torch."),
)


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
    parts: list[str] = []
    # ``type(...) is``: libcst's node classes are ABCs, whose isinstance is a Python call
    # (Attribute and Name have no subclasses); this runs for every name a rule qualifies
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


class Aliases:
    """Local name -> qualified dotted name, filled from import statements."""

    def __init__(self, module: str, is_package: bool = False) -> None:
        self.module = module
        self.is_package = is_package
        self.names: dict[str, str] = {}

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.names[alias.asname.name.value] = full
            else:
                top = full.split(".")[0]
                self.names[top] = top

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        mod = dotted(node.module) if node.module is not None else None
        level = len(node.relative)
        if level:
            mod = _resolve_relative(self.module, self.is_package, level, mod)
        if mod is None:
            return
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.names[local] = f"{mod}.{name}" if mod else name

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


def exports_from_ast(tree, module: str, is_package: bool) -> dict[str, str]:
    """Top-level import aliases of a file that was not parsed with libcst (``ast`` tree)."""
    import ast

    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    out[top] = top
        elif isinstance(node, ast.ImportFrom):
            mod = node.module
            if node.level:
                mod = _resolve_relative(module, is_package, node.level, mod)
            if not mod:
                continue
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{mod}.{a.name}"
        elif isinstance(node, ast.ClassDef):
            out[node.name] = f"{module}.{node.name}" if module else node.name
    return out
