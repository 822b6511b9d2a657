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
from typing import ClassVar

import libcst as cst

from metalint.diagnostics import Fix
from metalint.static.model import ClassFacts, FileFacts

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
    #: the finding stands only while no reset hook (of the class or a base) re-creates these
    unless_recreated: tuple[str, ...] = ()
    #: the finding stands only while neither the class nor a base has a public init hook
    unless_hook: bool = False
    fix: Fix | None = None
    #: ``unless_recreated`` is checked against these hooks only (empty: every configured hook)
    recreated_by: tuple[str, ...] = ()
    #: the finding stands only while neither the class nor a base defines one of these methods
    unless_method: tuple[str, ...] = ()
    #: the finding stands unless this applied init function (name, constant arguments of a
    #: factory call or None) only calls each module's ``reset_parameters()``
    unless_reset_init: tuple = ()
    #: the tensors or attributes the finding is about (see ``Diagnostic.subject``)
    subject: tuple[str, ...] = ()
    #: the init hook the finding is about, if it names one
    hook: str | None = None
    #: what to do about it (printed on its own line)
    help: str | None = None
    #: the finding stands unless the class is a model root whose entry point (this hook)
    #: replays it (see :mod:`metalint.static.protocol`)
    unless_root_replays: str = ""
    #: the finding stands unless the tree runs this method of the class on it as a model root
    #: after building it (see ``Condition.unless_run``)
    unless_run: str = ""
    #: the finding stands only while this module-level function applies init to every module
    #: of its argument (resolved across files)
    if_applies_init: str = ""
    #: the finding stands only while this module-level function of another file (resolved
    #: across files) does what the rule reports (:meth:`Rule.function_reads`: ML008 reads a
    #: tensor's value, ML009 copies one to a real device), itself or through the functions it
    #: calls (see ``Hierarchy.construction_read``)
    if_helper_reads: str = ""
    #: ``(child class, tensor, law)``: the finding stands only while no model root's protocol
    #: re-draws that tensor of the child from the same law (see ``Condition``)
    unless_same_law: tuple = ()
    #: the finding stands only while a materialisation site loses one of these tensors (see
    #: ``Condition.at_materialisation``)
    at_materialisation: tuple[str, ...] = ()
    #: the finding stands only while a site runs only this root's entry point and a module's
    #: own hook would restore what it loses (see ``Condition.skips_module_hooks``)
    skips_module_hooks: bool = False
    #: the finding stands unless every site materialising a root of the class runs the
    #: children's hooks first (see ``Condition.unless_children_first``)
    unless_children_first: bool = False
    #: the finding stands only while this module-level function of the tree returns a meta
    #: tensor (see ``Condition.if_returns_meta``)
    if_returns_meta: str = ""
    #: what the rule matched, handed to its codemod (a dataclass of the rule's module, e.g.
    #: ``ParameterSite``): the fix reads it and never detects the pattern again
    site: object = None


@dataclass(frozen=True)
class Invalid:
    """An INVALID example with the source ``metalint fix --write`` must turn it into
    (``unsafe``: with ``--unsafe-fixes``), as Fixit's ``Invalid(expected_replacement=...)``."""

    source: str
    fixed: str | None = None
    unsafe: bool = False


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

    def qualify(self, node: cst.BaseExpression) -> str | None:
        return self.facts.aliases.qualify(node, self.facts.local_classes)


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, what it means to a PyTorch user
    summary: ClassVar[str]  # one line
    default: ClassVar[bool] = True  # enabled without --select
    #: the module of the codemod that rewrites this rule's findings (``plan(ctx, cls,
    #: finding) -> Rewrite``), or None: the fix registry, ``fix_availability`` and the rule
    #: page are derived from it
    codemod: ClassVar[str | None] = None
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

    def qualify(self, node: cst.BaseExpression) -> str | None:
        return self.ctx.qualify(node)

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        raise NotImplementedError

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
