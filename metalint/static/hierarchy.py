"""Class hierarchy across the files of a checked tree.

Answers the questions a single file cannot: is ``Block`` (whose base lives in another file,
maybe re-exported through a package ``__init__``) an ``nn.Module``? Which tensors do the reset
hooks it inherits re-create?
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable

from metalint.diagnostics import (
    AppliesInit,
    Condition,
    HelperReads,
    HelperRegisters,
    NoHook,
    NoMethod,
    NotOnlyReset,
    NotRecreated,
    ReturnsMeta,
)
from metalint.static import templates
from metalint.static.constants import dispatch
from metalint.static.results import HELPER_MARK, ClassSummary, FileResult, star_exports
from metalint.vocabulary import PUBLIC_HOOKS, TORCH_WITHOUT_RESET


class Hierarchy:
    def __init__(self, results: Iterable[FileResult], public_hooks: Iterable[str] = PUBLIC_HOOKS):
        self.classes: dict[str, ClassSummary] = {}
        self.functions: dict[str, dict] = {}
        #: the file each module-level function of the tree is in (as displayed)
        self.function_files: dict[str, str] = {}
        self.exports: dict[str, dict[str, str]] = {}
        #: ``(file, site)`` of every place the tree materialises a model built on meta
        #: (:mod:`metalint.static.pipeline`)
        self.sites: list[tuple[str, dict]] = []
        #: import root -> the names its modules define that a module of the same name in
        #: another root defined first (see :meth:`for_file`)
        self._elsewhere: dict[str, _Names] = {}
        roots: dict[str, str] = {}  # module -> the import root of its first file
        for r in results:
            self.sites += [(r.path, site) for site in r.materialisations]
            root = import_root(r)
            lost = None
            if r.module and roots.setdefault(r.module, root) != root:
                lost = self._elsewhere.setdefault(root, _Names())
            _add(self, r, lost)
        self.public_hooks = tuple(public_hooks)
        self._forget()

    def _forget(self) -> None:
        self._module_memo: dict[str, bool] = {}
        #: answers that depend only on the classes' names and bases and the exports, which
        #: never change once the hierarchy is built (:class:`metalint.static.tree.Tree` only
        #: swaps a result for one of the same shape): each is made once, on first use
        self._subclasses: dict[str, list[str]] | None = None
        self._twins: dict[str, str] | None = None
        self._views: dict[str, Hierarchy] = {}

    def replaced(self) -> None:
        """Drop what was memoised from the summaries, after :class:`metalint.static.tree.Tree`
        replaced one file's by others of the same shape."""
        self._module_memo = {}
        self._views = {}

    def for_file(self, result: FileResult) -> Hierarchy:
        """The hierarchy as the file of ``result`` sees it. Two package-less folders may hold
        modules of the same name (``a/models/net.py`` and ``b/models/net.py`` are both
        ``net``): the tree keeps the first one's classes, functions and exports, and a file
        under the other folder (its own classes included) sees that folder's instead."""
        root = import_root(result) if self._elsewhere else ""
        names = self._elsewhere.get(root)
        if names is None:
            return self
        view = self._views.get(root)
        if view is None:
            view = copy.copy(self)
            view.classes = {**self.classes, **names.classes}
            view.functions = {**self.functions, **names.functions}
            view.function_files = {**self.function_files, **names.function_files}
            view.exports = {**self.exports, **names.exports}
            view._elsewhere = {}
            view._forget()
            self._views[root] = view
        return view

    def resolve(self, name: str, depth: int = 0, table: dict | None = None) -> str | None:
        """The full name of a class (or a name in ``table``) defined in the tree, following
        re-exports."""
        table = self.classes if table is None else table
        if name in table:
            return name
        if depth > 8 or "." not in name:
            return None
        head, _, attr = name.rpartition(".")
        # ``pkg.layers.LayerScale`` where pkg/layers/__init__.py imports it from a submodule
        exports = self.exports.get(head, {})
        target = exports.get(attr)
        if target and target != name:
            return self.resolve(target, depth + 1, table)
        if target is None:
            # ``from .base import *`` in FrEIA/modules/__init__.py, and ``from . import
            # InvertibleModule`` in the modules beside it
            for mod in star_exports(exports):
                found = self.resolve(f"{mod}.{attr}", depth + 1, table)
                if found is not None:
                    return found
        return None

    def only_resets(self, name: str, args) -> bool:
        """Does the applied init function ``name`` (or what the factory ``name(**args)``
        returns) only call each module's own ``reset_parameters()``?"""
        full = self.resolve(name, table=self.functions)
        summary = self.functions.get(full) if full else None
        if summary is None:
            return False
        if args is None:
            return summary.get("kind") == "reset"
        return "branches" in summary and dispatch(summary, dict(args)) == "reset"

    def bases(self, fullname: str) -> list[str]:
        cls = self.classes.get(fullname)
        if cls is None:
            return []
        out = []
        for b in cls.bases:
            r = self.resolve(b)
            if r is not None and r != fullname:
                out.append(r)
        return out

    def subclasses(self, fullname: str) -> list[str]:
        """The classes of the tree that have ``fullname`` among their :meth:`bases`, in the
        tree's order."""
        if self._subclasses is None:
            index: dict[str, list[str]] = {}
            for name in self.classes:
                for b in dict.fromkeys(self.bases(name)):
                    index.setdefault(b, []).append(name)
            self._subclasses = index
        return self._subclasses.get(fullname, [])

    def twins(self) -> dict[str, str]:
        """Template class -> its generated class in the tree
        (:func:`metalint.static.templates.twins`)."""
        if self._twins is None:
            self._twins = templates.twins(self.classes)
        return self._twins

    def is_module(self, fullname: str) -> bool:
        if fullname in self._module_memo:
            return self._module_memo[fullname]
        self._module_memo[fullname] = False  # cycles
        cls = self.classes.get(fullname)
        result = False
        if cls is not None:
            result = (
                cls.uses_module_api
                or any(b.startswith("torch.nn.") for b in cls.bases)
                or any(self.is_module(b) for b in self.bases(fullname))
            )
        self._module_memo[fullname] = result
        return result

    def hook_tensors(self, fullname: str, hook: str, depth: int = 0) -> set[str] | None:
        """Tensors re-created when ``hook`` runs on an instance of the class (None: no hook)."""
        cls = self.classes.get(fullname)
        if cls is None or depth > 32:
            return None
        if hook in cls.hooks:
            own, calls_super = cls.hooks[hook]
            names = self._helpers_resolved(own)
            if calls_super:
                for base in self.bases(fullname):
                    inherited = self.hook_tensors(base, hook, depth + 1)
                    if inherited is not None:
                        names |= inherited
                        break
            return names
        for base in self.bases(fullname):
            inherited = self.hook_tensors(base, hook, depth + 1)
            if inherited is not None:
                return inherited
        return None

    def _helpers_resolved(self, names: Iterable[str]) -> set[str]:
        """``names`` with each ``@helper#arg=attr`` (an own tensor handed to a helper, see
        :func:`metalint.static.tensors.helper_writes`) replaced by ``attr`` when the helper
        writes that argument, and dropped otherwise."""
        out: set[str] = set()
        for n in names:
            if not n.startswith(HELPER_MARK):
                out.add(n)
                continue
            helper, _, rest = n[1:].partition("#")
            arg, _, attr = rest.partition("=")
            if self.writes_argument(helper, arg, set()):
                out.add(attr)
        return out

    def writes_argument(self, helper: str, arg: str, seen: set[tuple[str, str]]) -> bool:
        """Does the module-level function ``helper`` write its argument ``arg`` (a position
        or a keyword) in place, itself or through the functions it hands it to?"""
        full = self.resolve(helper, table=self.functions)
        summary = (self.functions.get(full) or {}).get("arg_writes") if full else None
        if summary is None or (full, arg) in seen:
            return False
        seen.add((full, arg))
        params = summary["params"]
        name = params[int(arg)] if arg.isdigit() and int(arg) < len(params) else arg
        if name in summary["writes"]:
            return True
        return any(
            param == name and self.writes_argument(callee, key, seen)
            for callee, key, param in summary["forwards"]
        )

    def registers_names(self, helper: str, module: str, names: str) -> bool:
        """Does the module-level function ``helper`` register buffers on its argument
        ``module`` under the names of its argument ``names`` (each a position or a keyword)?"""
        full = self.resolve(helper, table=self.functions)
        summary = (self.functions.get(full) or {}).get("arg_registers") if full else None
        if summary is None:
            return False
        params = summary["params"]

        def name(arg: str) -> str:
            return params[int(arg)] if arg.isdigit() and int(arg) < len(params) else arg

        return [name(module), name(names)] in summary["registers"]

    def construction_read(
        self, function: str, code: str, seen: set[str] | None = None
    ) -> tuple[str, str, int] | None:
        """``(function, file, line)`` of the first line reported as ``code`` (ML008: a read
        of a tensor's value) in the module-level ``function`` or in a function of the tree it
        calls, transitively; None when there is none."""
        seen = set() if seen is None else seen
        full = self.resolve(function, table=self.functions)
        if full is None or full in seen or len(seen) > 32:
            return None
        seen.add(full)
        summary = self.functions[full]
        for found, line in summary.get("meta_reads", ()):
            if found == code:
                return full, self.function_files.get(full, ""), line
        for callee in summary.get("calls", ()):
            hit = self.construction_read(callee, code, seen)
            if hit is not None:
                return hit
        return None

    def recreated(self, fullname: str, hooks: Iterable[str]) -> set[str]:
        names: set[str] = set()
        for hook in hooks:
            names |= self.hook_tensors(fullname, hook) or set()
        return names

    def has_hook(self, fullname: str, hooks: Iterable[str]) -> bool:
        hooks = tuple(hooks)
        if any(self.hook_tensors(fullname, h) is not None for h in hooks):
            return True
        return "reset_parameters" in hooks and self._torch_reset_base(fullname, set())

    def _torch_reset_base(self, fullname: str, seen: set[str]) -> bool:
        """Does the class inherit ``reset_parameters`` from a torch.nn built-in?"""
        cls = self.classes.get(fullname)
        if cls is None or fullname in seen:
            return False
        seen.add(fullname)
        for b in cls.bases:
            if b.startswith("torch.nn.") and b not in TORCH_WITHOUT_RESET:
                return True
        return any(self._torch_reset_base(b, seen) for b in self.bases(fullname))

    def defines(self, fullname: str, names: Iterable[str], seen: set[str]) -> bool:
        """Does the class or one of its bases in the tree define a method named in ``names``?"""
        cls = self.classes.get(fullname)
        if cls is None or fullname in seen:
            return False
        seen.add(fullname)
        names = tuple(names)
        if any(n in cls.methods for n in names):
            return True
        return any(self.defines(b, names, seen) for b in self.bases(fullname))

    def holds(self, cond: Condition, hooks: Iterable[str], code: str = "") -> bool:
        """Does a finding (of rule ``code``) with this condition stand?"""
        hooks = tuple(hooks)
        if cond.module and not self.is_module(cond.cls):
            return False
        return all(self._clause_holds(cond.cls, c, hooks, code) for c in cond.clauses)

    def _clause_holds(self, cls: str, clause, hooks: tuple[str, ...], code: str) -> bool:
        """Does one clause of a condition about the class ``cls`` hold? (The clauses that
        the model roots' protocols answer, :meth:`Protocols.judge`, hold here.)"""
        kind = type(clause)
        if kind is NotRecreated:
            done = self.recreated(cls, clause.hooks or hooks)
            return not ("*" in done or any(a in done for a in clause.tensors))
        if kind is NoHook:
            return not self.has_hook(cls, [h for h in hooks if not h.startswith("_")])
        if kind is NoMethod:
            return not self.defines(cls, clause.names, set())
        if kind is NotOnlyReset:
            return not self.only_resets(clause.function, clause.args)
        if kind is HelperReads:
            return self.construction_read(clause.function, code) is not None
        if kind is HelperRegisters:
            return self.registers_names(clause.function, clause.module, clause.names)
        if kind in (AppliesInit, ReturnsMeta):
            full = self.resolve(clause.function, table=self.functions)
            key = "applies_to_modules" if kind is AppliesInit else "returns_meta"
            return bool(full and self.functions[full].get(key))
        return True


class _Names:
    """The classes, functions and exports of the modules of one import root whose names
    another root's modules of the same name hold first (:meth:`Hierarchy.for_file`)."""

    def __init__(self) -> None:
        self.classes: dict[str, ClassSummary] = {}
        self.functions: dict[str, dict] = {}
        self.function_files: dict[str, str] = {}
        self.exports: dict[str, dict[str, str]] = {}


def _add(tables, r: FileResult, lost: _Names | None) -> None:
    """Add the names of ``r`` to ``tables`` (a :class:`Hierarchy`) where nothing holds them
    yet; ``lost``: where those that another import root holds go (None: the module of ``r``
    is in the root that holds its name)."""
    mine = {id(c) for c in r.classes} if lost is not None else set()
    for c in r.classes:
        # held by another root's module of the same name (not by a class of ``r``: ``if
        # has_xlstm: class xLSTMBlock(...) else: class xLSTMBlock(...)``)
        held = lost is not None and id(tables.classes.get(c.fullname, c)) not in mine
        _keep_class(lost.classes if held else tables.classes, c)
    for name, summary in r.functions.items():
        where = tables if lost is None or name not in tables.functions else lost
        where.functions.setdefault(name, summary)
        where.function_files.setdefault(name, r.path)
    if r.module:
        where = tables if lost is None or r.module not in tables.exports else lost
        where.exports.setdefault(r.module, r.exports)


def _keep_class(classes: dict[str, ClassSummary], c: ClassSummary) -> None:
    kept = classes.setdefault(c.fullname, c)
    if kept is not c:
        # ``if has_xlstm: class xLSTMBlock(...) else: class xLSTMBlock(...)``:
        # either may be the one built, so a child of either is a child
        both = {*kept.protocol.get("children", ()), *c.protocol.get("children", ())}
        if both:
            kept.protocol["children"] = sorted(both)


def import_root(r: FileResult) -> str:
    """The folder a file's module name starts from (the folder above its outermost package):
    ``a/models/net.py`` outside any package is ``net`` from ``a/models``."""
    depth = r.module.count(".") + (os.path.basename(r.path) == "__init__.py")
    folder = os.path.join(os.path.dirname(r.path) or ".", *[os.pardir] * depth)
    return os.path.abspath(folder)
