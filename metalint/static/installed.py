"""Classes of installed packages, read as source, and their findings reported in the tree.

A class of the checked tree may build or extend a class of another package: an audio model
building a feature layer whose ``__init__`` calls ``.item()`` (it crashes on meta), an
encoder extending torchvision's ``ResNet``, whose ``__init__`` initialises every conv with
``kaiming_normal_`` (lost under per-module ``reset_parameters()``). :func:`reach` reads the
modules of installed packages that the tree's classes name, as the tree's own files are read
(never imported, never executed: see :mod:`metalint.sitepackages`), transitively through the
classes they name in turn, within bounds; :func:`reached_findings` reports a finding of such
a class on the class of the tree that builds or extends it, at the name there, naming the
installed class and its line as the cause (``Diagnostic.via``).

Only the modules that define a class reached are analysed; those that merely re-export one
(``from .resnet import *``) are read with CPython's parser for their names alone. Each
summary is cached per file under the installed distribution's name and version and the
file's size and modification time (:attr:`metalint.sitepackages.ModuleFile.stamp`): a
different version is a miss.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from metalint.codes import is_error
from metalint.diagnostics import Diagnostic, Position
from metalint.files import TooLarge
from metalint.sitepackages import NEVER_READ, Environment, ModuleFile
from metalint.static.results import OWN_REF, ClassSummary, FileResult, decode, star_exports

#: installed files read (parsed) in one run, at most; past it the classes stay unknown
MAX_FILES = 128
#: how many classes away from the tree an installed class may be (its bases and the classes
#: its construction builds count one step)
MAX_DEPTH = 4
#: the findings of an installed class reported where the tree builds or extends it: what
#: construction loses or where it crashes (not the style of its source, nor a reset hook's
#: shape, nor a materialisation site of that package)
TRANSFERRED = frozenset(
    {"ML001", "ML002", "ML003", "ML007", "ML008", "ML009", "ML010", "ML013", "ML014"}
)

#: the findings that say construction (or ``to_empty()``) raises
CRASHES = frozenset({"ML008", "ML013"})

#: ``analyze(jobs) -> results``, one per job (``metalint.jobs.Job``), in order
Analyze = Callable[[list], list[FileResult]]


@dataclass
class _Module:
    file: ModuleFile
    exports: dict[str, str]
    classes: set[str]
    source: str | None = None  # when read this run
    result: FileResult | None = None  # the full analysis
    failed: bool = False


@dataclass
class Installed:
    """What a run read of installed packages."""

    #: the summaries of the modules reached (full analyses, and the names of those read only
    #: for their re-exports): they join the tree's in the hierarchy; their findings are
    #: reported only through :func:`reached_findings`
    results: list[FileResult] = field(default_factory=list)
    #: module -> its file
    files: dict[str, ModuleFile] = field(default_factory=dict)
    #: files read (parsed) this run, and analysed
    read: int = 0
    analysed: int = 0
    notes: list[str] = field(default_factory=list)


def reach(
    tree: list[FileResult],
    env: Environment,
    analyze: Analyze,
    hooks: tuple[str, ...],
    cache=None,
    limit: int | None = None,
) -> Installed:
    """The installed modules the classes of ``tree`` lead to, analysed (``analyze``) or read
    from ``cache`` (a :class:`metalint.cache.Cache`, or None), reading at most ``limit``
    files (default :data:`MAX_FILES`)."""
    return _Reach(tree, env, analyze, hooks, cache, limit or MAX_FILES).run()


class _Reach:
    def __init__(self, tree, env, analyze, hooks, cache, limit):
        self.tree = tree
        self.tops = {r.module.split(".")[0] for r in tree if r.module}
        self.env = env
        self.analyze = analyze
        self.hooks = hooks
        self.cache = cache
        self.limit = limit
        self.modules: dict[str, _Module | None] = {}
        self.located: dict[str, tuple[str, str] | None] = {}
        self.out = Installed()

    def run(self) -> Installed:
        # a name of another top-level module than the tree's cannot be a class of the tree
        pending = [
            (name, 0)
            for r in self.tree
            for c in r.classes
            for name in (*c.bases, *c.protocol.get("children", ()))
            if self.outside(name)
        ]
        names: set[str] = set()
        classes: set[str] = set()
        while pending:
            found: list[tuple[str, str, int]] = []
            for name, depth in pending:
                if name in names:
                    continue
                names.add(name)
                hit = self.locate(name)
                if hit is not None:
                    found.append((*hit, depth))
            self.analyse_all({m for m, _, _ in found})
            pending = []
            for module, cls, depth in found:
                summary = self.summary(module, cls)
                if summary is None or cls in classes or depth >= MAX_DEPTH:
                    continue
                classes.add(cls)
                pending += [
                    (n, depth + 1)
                    for n in (*summary.bases, *summary.protocol.get("children", ()))
                    if self.outside(n)
                ]
        for m in self.modules.values():
            if m is not None:
                self.out.results.append(
                    m.result or FileResult(m.file.path, m.file.name, exports=dict(m.exports))
                )
                self.out.files[m.file.name] = m.file
        return self.out

    def outside(self, name: str) -> bool:
        top = name.split(".")[0]
        return "." in name and top not in self.tops and top not in NEVER_READ

    def summary(self, module: str, cls: str) -> ClassSummary | None:
        m = self.modules.get(module)
        if m is None or m.result is None:
            return None
        return next((c for c in m.result.classes if c.fullname == cls), None)

    # -- names --------------------------------------------------------------------------
    def locate(self, name: str, depth: int = 0) -> tuple[str, str] | None:
        """``(module, class)``: the installed module defining the class ``name`` (followed
        through re-exports), and the class's full name; None when it is not found. Each
        name is followed once a run (re-exports may loop, star imports fan out)."""
        if name not in self.located:
            self.located[name] = None
            self.located[name] = self._locate(name, depth)
        return self.located[name]

    def _locate(self, name: str, depth: int) -> tuple[str, str] | None:
        head, _, attr = name.rpartition(".")
        m = self.module(head) if head and depth <= 8 else None
        if m is None:
            return None
        if attr in m.classes:
            return head, name
        target = m.exports.get(attr)
        if target is not None:
            return self.locate(target, depth + 1) if target != name else None
        for star in star_exports(m.exports):
            hit = self.locate(f"{star}.{attr}", depth + 1)
            if hit is not None:
                return hit
        return None

    def module(self, name: str) -> _Module | None:
        if name in self.modules:
            return self.modules[name]
        self.modules[name] = m = self._load(name)
        return m

    def _load(self, name: str) -> _Module | None:
        file = self.env.find(name)
        if file is None:
            return None
        cached = self.cache.get(file.path, file.stamp) if self.cache is not None else None
        if cached is not None:
            try:
                return _from_cache(file, cached)
            except (KeyError, TypeError, ValueError, AttributeError):
                self.cache.drop(file.path)  # not what this version writes: a miss
        source = self._read(file)
        if source is None:
            return None
        try:
            tree = ast.parse(source, file.path)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            self.note(file, f"not read ({type(exc).__name__}: {exc})")
            return None
        # libcst: only on a miss
        from metalint.static.names import exports_from_ast
        from metalint.static.references import class_nodes

        exports = exports_from_ast(tree, name, file.is_package)
        # its top-level classes, also under ``if``/``try`` (as the full analysis finds them)
        classes = {q for q, _ in class_nodes(tree.body, ()) if "." not in q}
        m = _Module(file, exports, classes, source)
        self._put(m)
        return m

    def _read(self, file: ModuleFile) -> str | None:
        if self.out.read >= self.limit:
            if self.out.read == self.limit:
                self.out.read += 1  # noted once
                self.out.notes.append(
                    f"read {self.limit} files of installed packages, the most for one run: "
                    "the classes of others stay unknown"
                )
            return None
        self.out.read += 1
        try:
            data = self.env.read(file)
        except TooLarge as exc:
            self.note(file, f"not read (larger than {exc.limit} bytes)")
            return None
        except OSError as exc:
            self.note(file, f"not read ({exc.strerror or exc})")
            return None
        source, err = decode(data, file.path)
        if err is not None:
            self.note(file, f"not read ({err.diagnostics[0].message})")
        return source

    def note(self, file: ModuleFile, what: str) -> None:
        self.out.notes.append(f"{file.path}: {what}")

    # -- analyses -------------------------------------------------------------------------
    def analyse_all(self, modules: set[str]) -> None:
        todo = []
        for name in sorted(modules):
            m = self.modules.get(name)
            if m is None or m.result is not None or m.failed:
                continue
            if m.source is None:
                m.source = self._read(m.file)
                if m.source is None:
                    m.failed = True
                    continue
            todo.append(m)
        if not todo:
            return
        jobs = [
            (m.source, m.file.path, m.file.name, m.file.is_package, self.hooks, False) for m in todo
        ]
        for m, result in zip(todo, self.analyze(jobs)):
            self.out.analysed += 1
            m.source = None
            errors = [d for d in result.diagnostics if is_error(d.code)]
            if errors:
                self.note(m.file, f"not analysed ({errors[0].message})")
                m.failed = True
                continue
            result.materialisations = []  # the package's own scripts are not the user's
            m.result = result
            self._put(m)

    def _put(self, m: _Module) -> None:
        if self.cache is None:
            return
        entry = {"exports": m.exports, "classes": sorted(m.classes)}
        if m.result is not None:
            entry["analysis"] = m.result.to_json()
        self.cache.put(m.file.path, m.file.stamp, entry)


def _from_cache(file: ModuleFile, entry: dict) -> _Module:
    exports, classes = entry["exports"], entry["classes"]
    if not isinstance(exports, dict) or not all(
        type(k) is str and type(v) is str for k, v in exports.items()
    ):
        raise TypeError("exports are names")
    if not isinstance(classes, list) or not all(type(c) is str for c in classes):
        raise TypeError("classes are names")
    m = _Module(file, exports, set(classes))
    if "analysis" in entry:
        m.result = FileResult.from_json(file.path, entry["analysis"])
    return m


# -- findings -------------------------------------------------------------------------------


def reached_findings(
    tree: list[FileResult], installed: Installed, hierarchy, protocols, hooks: tuple[str, ...]
) -> dict[str, list[Diagnostic]]:
    """The findings of installed classes that the tree's classes build or extend, each
    judged for the class built (the tree's subclass, when it extends one: its own hooks
    count) and reported on the tree's class, at the name of the installed class there:
    file (as displayed) -> findings."""
    outside = _Outside(installed, hierarchy, protocols)
    if not outside.causes:
        return {}
    out: dict[str, list[Diagnostic]] = {}
    seen: set[tuple] = set()
    for r in tree:
        for summary in r.classes:
            for name, span in _named(summary):
                cls = hierarchy.resolve(name)
                if cls is None or cls not in outside.classes:
                    continue
                extends = name in summary.bases
                for built, cause in outside.closure(cls, summary.fullname if extends else None):
                    for d in outside.causes.get(cause, ()):
                        found = outside.judged(d, built, cause, hooks)
                        if found is None:
                            continue
                        key = (r.path, tuple(span), d.code, cause, d.start.row, found.message)
                        if key in seen:
                            continue
                        seen.add(key)
                        out.setdefault(r.path, []).append(
                            outside.report(found, r, summary, span, cls, cause, extends)
                        )
    return out


def _named(summary: ClassSummary) -> list[tuple[str, list[int]]]:
    """The classes of other files ``summary``'s class extends or builds, each with where it
    names it (the class's own name when that was not found)."""
    own = summary.refs.get(OWN_REF)
    if own is None:
        return []
    names = dict.fromkeys([*summary.bases, *summary.protocol.get("children", ())])
    return [(n, summary.refs.get(n, own)) for n in names if n in summary.refs or "." in n]


class _Outside:
    """The installed classes a run reached, and their findings that may be reported."""

    def __init__(self, installed: Installed, hierarchy, protocols):
        self.h = hierarchy
        self.protocols = protocols
        self.installed = installed
        #: installed class -> (its file's result, its summary)
        self.classes: dict[str, tuple[FileResult, ClassSummary]] = {}
        self.causes: dict[str, list[Diagnostic]] = {}
        for r in installed.results:
            for c in r.classes:
                self.classes.setdefault(c.fullname, (r, c))
            for d in r.diagnostics:
                if d.code not in TRANSFERRED or d.condition is None or _silenced(d, r):
                    continue
                self.causes.setdefault(d.condition.cls, []).append(d)

    def closure(self, cls: str, built: str | None) -> list[tuple[str, str]]:
        """``(built, cause)``: each installed class whose construction runs when ``cls`` is
        built (its installed bases, the installed classes it builds, theirs...), with the
        class that instance is (``built``, when the tree extends ``cls``)."""
        out: list[tuple[str, str]] = []
        todo = [(cls, built or cls)]
        seen = {cls}
        while todo and len(out) < 256:
            cur, instance = todo.pop(0)
            for c in self.protocols.mro(cur):
                if c not in self.classes:
                    continue
                out.append((instance, c))
                for child in self.classes[c][1].protocol.get("children", ()):
                    q = self.h.resolve(child)
                    if q in self.classes and q not in seen:
                        seen.add(q)
                        todo.append((q, q))
        return out

    def judged(self, d: Diagnostic, built: str, cause: str, hooks) -> Diagnostic | None:
        """``d`` (a finding of the installed class ``cause``) judged for an instance of
        ``built``, as the tree's own findings are: None when it does not stand."""
        cond = d.condition if built == cause else replace(d.condition, cls=built)
        if not self.h.holds(cond, hooks, d.code):
            return None
        return self.protocols.judge(d.with_(condition=cond))

    def report(self, found, r, summary, span, cls, cause, extends) -> Diagnostic:
        module, file = self._file_of(cls)
        package = f"{file.dist} {file.version}" if file and file.dist else module.split(".")[0]
        name = summary.fullname.rsplit(".", 1)[-1]
        runs = "" if cause == cls else f" `{cause}`,"
        line = found.start.row
        where = self.classes[cause][0].path
        verb = "extends" if extends else "builds"
        message = (
            f"`{name}` {verb} `{cls}` (installed: {package}), whose construction runs{runs} "
            f"{where}:{line}: {found.message}"
        )
        help = _help(found.code, cls, cause, name, package.split()[0], extends)
        symbol = summary.fullname[len(r.module) + 1 :] if r.module else summary.fullname
        return Diagnostic(
            found.code,
            message,
            r.path,
            Position(span[0], span[1]),
            Position(span[2], span[3]),
            symbol=symbol,
            subject=found.subject,
            hook=found.hook,
            help=help,
            protocol=found.protocol,
            root=found.root,
            via=(cause, where, line),
            materialised=found.materialised,
        )

    def _file_of(self, cls: str) -> tuple[str, ModuleFile | None]:
        r = self.classes[cls][0]
        return r.module, self.installed.files.get(r.module)


def _help(code: str, cls: str, cause: str, name: str, package: str, extends: bool) -> str:
    """What the user of an installed class can do: build it elsewhere (it crashes on meta),
    or re-create what its construction set (in the subclass's own hook, when the tree's class
    extends it; where the model is materialised, when it builds it)."""
    if code in CRASHES:
        return (
            f'`{cls}` cannot be built on meta: build it outside `torch.device("meta")` and '
            f"attach it, or report it to {package}"
        )
    what = f"what `{cause.rsplit('.', 1)[-1]}.__init__` sets"
    if extends:
        where = f"in `{name}`'s own `reset_parameters()` (or the root's `init_weights()`)"
    else:
        where = "after `to_empty()`, where the model is materialised (the root's `init_weights()`)"
    return f"Re-create {what} {where}, or report it to {package}"


def _silenced(d: Diagnostic, r: FileResult) -> bool:
    """Does the package's own ``# noqa`` silence ``d``?"""
    if d.start.row not in r.noqa:
        return False
    codes = r.noqa[d.start.row]
    return codes is None or d.code in codes
