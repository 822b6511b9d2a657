"""The base class of a static rule.

A rule is one file in ``metalint/rules/``: a :class:`Rule` subclass whose docstring is its
reference page (ruff's sections, :data:`DOC_SECTIONS`: What it does, Why is this bad on meta?,
Example with its "Use instead:" block, Fix safety, Options, When to switch it off, Known
limits; at most 60 lines of page) and whose ``VALID``/``INVALID`` examples are executed as tests (Fixit's way). In an
``INVALID`` example every line that must be reported ends with ``# ERROR``.

A rule reads the facts of one class (:class:`~metalint.static.model.ClassFacts`) and yields
:class:`Finding` s; the engine turns them into :class:`~metalint.diagnostics.Diagnostic` s.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import libcst as cst

from metalint.diagnostics import Clause, Fix, clause_of
from metalint.static.model import ClassFacts, FileFacts
from metalint.static.ownership import meta_returning_functions

_C = TypeVar("_C")

DOC_SECTIONS = (
    "What it does",
    "Why is this bad on meta?",
    "Example",
    "Fix safety",
    "Options",
    "When to switch it off",
    "Known limits",
)


@dataclass
class Finding:
    node: cst.CSTNode
    message: str
    cls: ClassFacts
    fix: Fix | None = None
    #: the tensors or attributes the finding is about (see ``Diagnostic.subject``)
    subject: tuple[str, ...] = ()
    #: the init hook the finding is about, if it names one
    hook: str | None = None
    #: what to do about it (printed on its own line)
    help: str | None = None
    #: what must hold across files for the finding to stand: the kinds of
    #: :mod:`metalint.diagnostics` (``NotRecreated(("gamma",))``, ``HelperReads(name)``);
    #: the engine carries them in the diagnostic's ``Condition``
    conditions: tuple[Clause, ...] = ()
    #: what the rule matched, handed to its codemod (a dataclass of the rule's module, e.g.
    #: ``ParameterSite``): the fix reads it and never detects the pattern again
    site: object = None

    def get(self, kind: type[_C]) -> _C | None:
        """The condition of ``kind``, if the finding stands under one."""
        return clause_of(self.conditions, kind)


@dataclass(frozen=True)
class Invalid:
    """An INVALID example with the source ``metalint fix --write`` must turn it into
    (``unsafe``: with ``--unsafe-fixes``), as Fixit's ``Invalid(expected_replacement=...)``."""

    source: str
    fixed: str | None = None
    unsafe: bool = False


#: the key of :attr:`RuleContext.meta_returning` in its memo
_META_RETURNING = "meta_returning_functions"


@dataclass
class RuleContext:
    facts: FileFacts
    module: cst.Module
    hooks: tuple[str, ...]
    path: str
    source: str = ""  # the whole file's text (``module`` may have unread code elided)
    #: CPython's tree of ``source`` when ``module`` is the parse of its elided text (every row
    #: and every kept function the same in both), else None
    tree: ast.Module | None = None
    #: what a layer above computes once per file (the fix registry's class renders); it
    #: lives as long as this context
    memo: dict = field(default_factory=dict)
    #: findings that stand only while a function of another file reads a tensor
    #: (``HelperReads``) are not made but listed in ``helper_reads`` as ``(code, function)``
    #: (see :meth:`Rule.deferred`; the engine's ``defer_helper_reads``)
    defer_helper_reads: bool = False
    helper_reads: set[tuple[str, str]] = field(default_factory=set)

    #: id of each node asked of :meth:`qualify` -> (the node, kept alive so that no other
    #: node takes its id, its answer): the rules ask of the same nodes again and again. It
    #: holds while the imports are those of ``_qualified_at`` (``Aliases.changes``).
    _qualified: dict[int, tuple[cst.CSTNode, str | None]] = field(default_factory=dict, repr=False)
    _qualified_at: int = field(default=-1, repr=False)

    def qualify(self, node: cst.BaseExpression) -> str | None:
        aliases = self.facts.aliases
        if aliases.changes != self._qualified_at:
            self._qualified.clear()
            self._qualified_at = aliases.changes
        hit = self._qualified.get(id(node))
        if hit is not None:
            return hit[1]
        name = aliases.qualify(node, self.facts.local_classes)
        self._qualified[id(node)] = (node, name)
        return name

    @property
    def meta_returning(self) -> frozenset[str]:
        """:func:`~metalint.static.ownership.meta_returning_functions` of the module, once
        for the imports of the moment (``Aliases.changes``)."""
        at, found = self.memo.get(_META_RETURNING, (None, None))
        now = self.facts.aliases.changes
        if at != now or found is None:
            found = meta_returning_functions(self.module, self.facts, self.qualify)
            self.memo[_META_RETURNING] = (now, found)
        return found


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, what it means to a PyTorch user
    summary: ClassVar[str]  # one line
    default: ClassVar[bool] = True  # enabled without --select
    #: the module of the codemod that rewrites this rule's findings (``plan(ctx, cls,
    #: finding) -> Rewrite``), or None: the fix registry, ``fix_availability`` and the rule
    #: page are derived from it
    codemod: ClassVar[str | None] = None
    #: the class of the site (``Finding.site``) each finding hands that codemod: a frozen
    #: dataclass of the rule's module holding the nodes and facts the rule matched
    site_type: ClassVar[type | None] = None
    #: "none" or "sometimes" (a codemod that may refuse a finding): derived from ``codemod``
    fix_availability: ClassVar[str] = "none"
    VALID: ClassVar[list[str]] = []
    #: sources with ``# ERROR`` on each reported line; an :class:`Invalid` also gives the
    #: source after ``metalint fix --write`` (the example test applies the fix and compares)
    INVALID: ClassVar[list[str | Invalid]] = []

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.fix_availability = "sometimes" if cls.codemod else "none"

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        #: :meth:`RuleContext.qualify`, bound once (rules call it for every name they read)
        self.qualify = ctx.qualify

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        raise NotImplementedError

    def deferred(self, function: str) -> bool:
        """Is a finding of this rule that stands only while ``function`` (of another file)
        reads a tensor left unmade (``RuleContext.defer_helper_reads``)? Then it is listed in
        ``RuleContext.helper_reads`` here, and the rule skips its message and its fix site."""
        if not self.ctx.defer_helper_reads:
            return False
        self.ctx.helper_reads.add((self.code, function))
        return True

    def function_reads(self, fn) -> Iterable[cst.CSTNode]:
        """Nodes of the module-level function ``fn`` (its ``MethodFacts``) that this rule
        reports when construction calls it from another file (kept in the file's summary,
        answered by ``Hierarchy.construction_read``); most rules report none."""
        return ()

    # -- documentation -------------------------------------------------------------------------
    @classmethod
    def sections(cls) -> dict[str, str]:
        doc = (cls.__doc__ or "").strip("\n")
        lines = doc.splitlines()
        indent = min((len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()), default=0)
        text = "\n".join([lines[0].strip(), *(l[indent:] for l in lines[1:])]) if lines else ""
        parts = re.split(r"^## (.+)$", text, flags=re.M)
        out = {}
        for title, body in zip(parts[1::2], parts[2::2]):
            out[title.strip()] = body.strip("\n")
        return out

    @classmethod
    def markdown(cls) -> str:
        fix = {
            "none": "No automatic fix.",
            "sometimes": "Fix is sometimes available (`metalint fix`).",
            "always": "Fix is always available (`metalint fix`).",
        }[cls.fix_availability]
        enabled = (
            ""
            if cls.default
            else "\n\nThis rule is opt-in: enable it with `--select` or `extend-select`."
        )
        out = [f"# {cls.name} ({cls.code})", "", f"{cls.summary}", "", f"{fix}{enabled}", ""]
        for title, body in cls.sections().items():
            out += [f"## {title}", "", body, ""]
        return "\n".join(out).rstrip() + "\n"
