"""ML013 apply-without-recurse: ``def _apply(self, fn)`` takes torch's ``recurse=True``.

``Module.to_empty()`` calls ``self._apply(fn, recurse=recurse)``; an override without the
argument raises TypeError there. The rewrite adds ``recurse=True`` after ``fn`` and passes
``recurse`` on in every call of the base's ``_apply`` the override makes (``super()._apply(fn)``,
``super(Cls, self)._apply(fn)``, ``Base._apply(self, fn)``)::

    def _apply(self, fn, recurse=True):
        ...
        return super()._apply(fn, recurse)

Passing it on is right only when the base's ``_apply`` takes it: torch's does (2.1 and
later); a base of this file either takes it or is reported and fixed itself. A base of another
file is not known here: the rewrite is refused.

Unsafe: a signature change (calls that worked before behave the same).
"""

from __future__ import annotations

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.fix.edits import Rewrite, Unfixable, replaced
from metalint.static.model import ClassFacts
from metalint.static.rule import Finding, RuleContext
from metalint.vocabulary import APPLY_METHOD as APPLY


def _base_takes_recurse(ctx: RuleContext, cls: ClassFacts, seen: frozenset = frozenset()) -> None:
    """Raise :class:`Unfixable` unless the ``_apply`` that ``cls``'s bases provide is torch's
    or one of this file (which takes ``recurse`` or is fixed to)."""
    local = {c.fullname: c for c in ctx.facts.classes}
    for base in cls.bases:
        if base.startswith("torch."):
            continue
        facts = local.get(base)
        if facts is None or base in seen:
            raise Unfixable(
                f"the base class `{base.rpartition('.')[2]}` is not of this file: whether its "
                f"`_apply()` takes `recurse` is not known"
            )
        if APPLY not in facts.methods:
            _base_takes_recurse(ctx, facts, seen | {base})


def _is_base_apply(call: cst.Call, self_name: str) -> bool:
    """``super()._apply(fn)``, ``super(C, self)._apply(fn)``, ``Base._apply(self, fn)``."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == APPLY):
        return False
    owner = func.value
    if isinstance(owner, cst.Call):
        return isinstance(owner.func, cst.Name) and owner.func.value == "super"
    return (
        isinstance(owner, (cst.Name, cst.Attribute))
        and bool(call.args)
        and isinstance(call.args[0].value, cst.Name)
        and call.args[0].value.value == self_name
    )


class _PassRecurse(cst.CSTTransformer):
    def __init__(self, self_name: str) -> None:
        self.self_name = self_name
        self.count = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function's calls are not the override's

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not _is_base_apply(original, self.self_name):
            return updated
        if any(a.star or a.keyword is not None for a in updated.args):
            raise Unfixable("the base's `_apply()` is called with keyword or starred arguments")
        self.count += 1
        args = list(updated.args)
        comma = args[-1].comma if args else cst.MaybeSentinel.DEFAULT
        if args:
            args[-1] = args[-1].with_changes(
                comma=cst.Comma(cst.SimpleWhitespace(""), cst.SimpleWhitespace(" "))
            )
        new = cst.Arg(cst.Name("recurse"), comma=comma)
        return updated.with_changes(args=[*args, new])


def plan(ctx: RuleContext, cls: ClassFacts, finding: Finding) -> Rewrite:
    fn = finding.site.fn
    if fn is None:
        raise Unfixable(f"`{cls.name}` defines no `_apply()`")
    params = fn.params
    if (
        params.posonly_params
        or params.kwonly_params
        or params.star_arg is not cst.MaybeSentinel.DEFAULT
    ):
        raise Unfixable("`_apply()` takes other arguments than `fn`")
    if len(params.params) != 2 or params.params[1].default is not None:
        raise Unfixable("`_apply()` takes other arguments than `fn`")
    self_name = params.params[0].name.value
    _base_takes_recurse(ctx, cls)
    passing = _PassRecurse(self_name)
    body = fn.body.visit(passing)
    last = params.params[-1]
    recurse = cst.Param(
        cst.Name("recurse"),
        default=cst.Name("True"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        comma=last.comma,
    )
    new_params = params.with_changes(
        params=[
            params.params[0],
            last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            recurse,
        ]
    )
    new_fn = fn.with_changes(params=new_params, body=body)
    new_class = replaced(cls.node, fn, new_fn)
    passed = " and passes it to the base's `_apply()`" if passing.count else ""
    return Rewrite(
        new_class,
        Applicability.UNSAFE,
        f"`_apply()` takes `recurse=True` like torch's{passed} (unsafe: a signature change)",
    )
