"""Apply fixes to a file until nothing changes (ruff's loop).

Each round re-analyses the current text (so edits never go stale), answers the cross-file
conditions with the hierarchy of the whole checked tree, picks the applicable fixes that do not
conflict (at most one per class and round: a fix rewrites its class), applies them, and checks
that the result still parses (libcst and Python's own compiler) before taking it. Several fixes
in one class compose over rounds; the loop is bounded in rounds and in CPU time: the analyses of
one file may spend at most ``FIX_BUDGET_FACTOR`` times the file time budget (``check`` already
analysed the file within one budget in an isolated worker); past that the file is left exactly
as it was read, with one error naming it.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst

from metalint.diagnostics import Applicability, Diagnostic, Fix
from metalint.fix.registry import CODEMODS, REASONS, apply_edits, fix_for
from metalint.report import ERROR_CODE, TOO_COMPLEX_CODE, is_error
from metalint.rules import all_rules
from metalint.static.engine import FileResult, analyze_source
from metalint.static.hierarchy import Hierarchy
from metalint.static.protocol import ROOT_INIT, Protocols
from metalint.static.tree import Tree
from metalint.vocabulary import EXTERNAL_RESET_BASES, HOOKLESS_BASES, RESET_HOOK, ROOT_ENTRIES

MAX_ROUNDS = 64
#: ML015's fix rewrites the script that materialises the model, not a class
SITE_FIXED = "ML015"
UNSAFE_HINT = "unsafe fix: use --unsafe-fixes"
#: CPU seconds the fix loop of one file may spend, as a multiple of the file time budget
FIX_BUDGET_FACTOR = 4


#: codes whose fix rewrites a value in place, picked before the others of a class
IN_PLACE_FIRST = ("ML008", "ML009")
#: the parent's init of its children, whose safe fix goes before the class's unsafe fix of an
#: in-place init
PARENT_INIT = "ML010"
IN_PLACE_INIT = "ML003"


@dataclass
class FileFix:
    path: Path
    display: str
    module: str
    is_package: bool
    data: bytes  # the bytes that were read
    encoding: str
    original: str
    text: str = ""
    before: list[Diagnostic] = field(default_factory=list)
    after: list[Diagnostic] = field(default_factory=list)
    applied: list[Diagnostic] = field(default_factory=list)
    refused: dict[tuple[str, int, str], str] = field(
        default_factory=dict
    )  # (code,row,symbol) -> why
    error: str | None = None
    error_code: str = ERROR_CODE  # ML900, or ML901 when the fix loop ran past its budget
    #: the text the codemods start from: a site rewrite's of a script (None: ``original``)
    start: str | None = None

    @property
    def changed(self) -> bool:
        return self.text != self.original

    @property
    def classes(self) -> list[str]:
        return sorted({d.symbol for d in self.applied if d.symbol})


@dataclass
class SiteFix:
    """A rewrite of the script ``display`` at a materialisation site: the findings naming the
    site before (``applied``, each with the fix that resolves it) and those naming it after."""

    display: str
    applied: list[Diagnostic]
    #: the rewrite, as each finding it resolves carries it
    fix: Fix | None = None
    after: list[Diagnostic] = field(default_factory=list)

    @property
    def before(self) -> list[Diagnostic]:
        return self.applied


class Fixer:
    def __init__(
        self, results: list[FileResult], settings, enabled: set[str], unsafe: bool, resolve
    ):
        #: ``resolve(results, settings, enabled)``: the findings that stand across the tree
        #: (the check pipeline's, handed in by the command)
        self._resolve = resolve
        self.results = {r.path: r for r in results}
        self.settings = settings
        self.enabled = enabled
        self.unsafe = unsafe
        #: the tree's protocols, made once per hierarchy (:meth:`_unrun_root_hook`)
        self._protocols: tuple[Hierarchy | None, Protocols | None] = (None, None)
        #: the cross-file view of the tree, as each file's analysis replaces its result
        self.tree = Tree(results, settings.protocol)
        #: the scripts' rewrites (:mod:`metalint.fix.unrestored_at_materialisation`)
        self.sites: list[SiteFix] = []
        #: why a site was not rewritten: (script, row of the call findings name) -> why
        self.refused_sites: dict[tuple[str, int], str] = {}

    def resolve_tree(self) -> list[Diagnostic]:
        """The findings that stand across the tree as it now is (the last text of each file
        analysed)."""
        return self._resolve(list(self.results.values()), self.settings, self.enabled)

    # -- analysis of the current text ---------------------------------------------------------
    def analyse(self, ff: FileFix, text: str) -> tuple[list[Diagnostic], Hierarchy]:
        result = analyze_source(
            text,
            ff.display,
            ff.module,
            is_package=ff.is_package,
            hooks=self.settings.hooks,
            rules=all_rules(),
            fix_for=fix_for,
            elide_unread=False,
        )
        self.results[ff.display] = result
        # the tree's view, updated for this file alone: building it again from every result
        # each round made a fix of N files take time in N squared
        self.tree.replace(result)
        diags = [
            d
            for d in self._resolve([result], self.settings, self.enabled, tree=self.tree)
            if d.filename == ff.display
        ]
        h = self.tree.hierarchy.for_file(result)
        if h is self.tree.hierarchy:
            self._protocols = (h, self.tree.protocols)
        return diags, h

    def blocked(self, d: Diagnostic, h: Hierarchy) -> str | None:
        """Why the whole tree forbids this fix (None: it does not): the hook it puts code in,
        or the hook the fix that must follow it does (ML007's buffer, whose value ML002's fix
        computes next round: registered and then left uncomputed, it is uninitialised after
        ``to_empty()``, worse than the plain attribute it was)."""
        if d.fix is None or d.condition is None:
            return None
        if d.fix.hook is not None:
            why = hook_refusal(h, d.condition.cls, d.fix.hook)
            return None if why is None else str(why)
        if d.fix.then_hook is not None:
            why = hook_refusal(h, d.condition.cls, d.fix.then_hook)
            return None if why is None else f"{why.follow_up()}"
        return None

    def _unrun_root_hook(self, d: Diagnostic, h: Hierarchy) -> str | None:
        """Why a fix that puts code in this class's ``init_weights()`` would do nothing under
        its model's protocol: the model's root ``init_weights()`` calls each module's
        ``reset_parameters()`` and never its ``init_weights()`` (timm's Levit, whose
        ``_init_weights(m)`` calls ``m.reset_parameters()``). A child's value written in the
        class's ``reset_parameters()`` would race the child's own reset under per-module
        materialisers (ML006), so no rewrite is both run and order-free there."""
        if d.fix is None or d.fix.hook != ROOT_ENTRIES[0] or d.protocol != ROOT_INIT:
            return None
        root = d.root
        if not root or d.condition is None or d.condition.cls == root:
            return None
        if self._protocols[0] is not h:
            self._protocols = (h, Protocols(h, self.settings.protocol))
        hooks = self._protocols[1].module_hooks(root)
        if RESET_HOOK not in hooks or ROOT_ENTRIES[0] in hooks:
            return None
        short = root.rsplit(".", 1)[-1]
        return (
            f"`{short}.init_weights()`, the model's init, calls each module's "
            f"`{RESET_HOOK}()` and never its `{ROOT_ENTRIES[0]}()`: a new "
            f"`{ROOT_ENTRIES[0]}()` would not run there, and a child's value in "
            f"`{RESET_HOOK}()` races the child's own reset (ML006): move it by hand"
        )

    def applicable(self, d: Diagnostic) -> bool:
        return d.fix is not None and (self.unsafe or d.fix.applicability == Applicability.SAFE)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, ff: FileFix, exclude: set[str] = frozenset()) -> FileFix:
        ff.text = ff.original if ff.start is None else ff.start
        ff.applied = []
        ff.refused = {}
        broken: set[str] = set(exclude)
        started = time.process_time()
        diags, h = self.analyse(ff, ff.text)
        ff.before = [d for d in diags if not is_error(d.code)]
        if any(is_error(d.code) for d in diags):
            ff.error = next(d.message for d in diags if is_error(d.code))
            ff.after = ff.before
            return ff
        for _ in range(MAX_ROUNDS):
            picked = self._pick(ff, diags, h, broken)
            if not picked:
                break
            try:
                new = apply_edits(ff.text, [e for d in picked for e in d.fix.edits])
                cst.parse_module(new)
                compile(new, ff.display, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            except Exception:
                # never keep a rewrite that does not parse: drop these classes, go on
                broken |= {d.symbol or "" for d in picked}
                for d in picked:
                    ff.refused[(d.code, d.start.row, d.symbol or "")] = "the rewrite did not parse"
                continue
            ff.text = new
            ff.applied.extend(picked)
            diags, h = self.analyse(ff, ff.text)
            limit = self.settings.file_time_budget * FIX_BUDGET_FACTOR
            if time.process_time() - started > limit:
                return self._give_up(ff, f"file too complex to fix: over {limit:g} s of CPU")
        ff.after = [d for d in diags if not is_error(d.code)]
        for d in ff.after:
            if d.fix is None and d.code in CODEMODS:
                why = REASONS.get((ff.display, d.code, d.start.row))
                if why:
                    ff.refused.setdefault((d.code, d.start.row, d.symbol or ""), why)
        return ff

    def _allowed(self, d: Diagnostic, h: Hierarchy) -> tuple[Diagnostic, str | None]:
        """``d`` and why the tree forbids its fix (None: it does not); when a base class has
        its own ``reset_parameters()``, ``d`` with the fix whose hook extends the base's."""
        why = self.blocked(d, h) or self._unrun_root_hook(d, h)
        if why and d.fix.over_base_hook is not None and d.condition is not None:
            # a base class has its own reset_parameters(): the fix whose hook extends it
            refusal = hook_refusal(h, d.condition.cls, d.fix.hook)
            if refusal is not None and refusal.kind == "base_hook":
                alternative = replace(d, fix=d.fix.over_base_hook)
                if self.applicable(alternative) and not hook_refusal(
                    h, d.condition.cls, d.fix.hook, extends_base=True
                ):
                    return alternative, None
        return d, why

    def _pick(self, ff: FileFix, diags, h: Hierarchy, broken: set[str]) -> list[Diagnostic]:
        """The fixes of one round: applicable, not forbidden by the tree, at most one per class,
        no overlapping lines."""
        picked: list[Diagnostic] = []
        waiting: list[Diagnostic] = []  # fixes whose follow-up puts code in a hook
        rows: list[tuple[int, int]] = []
        # fixes that rewrite a value where ``__init__`` makes it (ML008's ``device="cpu"``,
        # ML009's ``torch.empty`` and ``device=``) go first: a fix that later copies that value
        # into a hook (ML001, ML002) then copies the rewritten one. monai DiNTS'
        # ``torch.zeros(n).normal_(1, 0.01).to(self.device)`` copied first kept the copy of a
        # meta tensor in the hook, which ``__init__`` calls under meta too.
        # an unsafe ML003 fix waits while its class has a safe fix of the parent's init (ML010):
        # that fix leaves the statement where it ran and makes the root ``init_weights()``,
        # which the class's in-place inits then join before or after it, in the order
        # ``__init__`` ran them. timm Hiera/HieraDet: ML003 first moved the position
        # embeddings' init into a new hook called after ``named_apply(init_fn, self)`` (their
        # draws after its: unsafe) and left that init to be merged by hand.
        parent_safe = {
            d.symbol for d in diags if d.code == PARENT_INIT and _safe(d) and self.applicable(d)
        }
        for d in sorted(diags, key=lambda d: _round_order(d, parent_safe)):
            if not self.applicable(d) or _related(d.symbol, broken):
                continue
            d, why = self._allowed(d, h)
            if why:
                ff.refused[(d.code, d.start.row, d.symbol or "")] = why
                continue
            if _waits(h, d, picked, waiting) or not _claim_rows(d, rows):
                continue
            if d.fix.hook is None and d.fix.then_hook is not None:
                waiting.append(d)
            else:
                picked.append(d)
        # a fix whose follow-up puts code in a hook (ML007's: ML002's fix, next round) yields
        # to a fix of a kin class that puts code in one now, wherever it stands in the file:
        # next round ``blocked`` then answers for the follow-up with that hook in place. monai
        # ``TopologyConstruction.arch_code_a`` became a buffer in the round its subclass
        # ``TopologySearch`` got its own ``reset_parameters()``; ML002's fix was then refused
        # and the buffer left uninitialised after ``to_empty()`` (the probe failed DiNTS).
        for d in waiting:
            if not any(_kin(h, d, p) for p in picked):
                picked.append(d)
        # the parent's init of its children (ML010) waits while another class of the file gets
        # a hook this round: the root ``init_weights()`` it makes re-initialises the children's
        # tensors, so next round ``check`` no longer reports the ones their own fixes had yet
        # to move, and a child's new ``reset_parameters()`` would restore only the tensors
        # fixed before. torchvision MViT: ``PositionalEncoding`` got a hook for
        # ``class_token`` in the round MViT got ``init_weights()``, and lost ``spatial_pos``,
        # ``temporal_pos`` and ``class_pos`` after ``to_empty()`` (the probe failed it).
        if any(d.code != PARENT_INIT and _hook_of(d) for d in picked):
            picked = [
                d
                for d in picked
                if d.code != PARENT_INIT
                or not any(
                    p.code != PARENT_INIT and _hook_of(p) and not _related(p.symbol, {d.symbol})
                    for p in picked
                )
            ]
        return picked

    def _give_up(self, ff: FileFix, why: str) -> FileFix:
        """Leave the file exactly as it was read, with one error naming why."""
        ff.text, ff.applied, ff.after = ff.original, [], ff.before
        ff.error, ff.error_code = why, TOO_COMPLEX_CODE
        return ff

    def reason(self, ff: FileFix | None, d: Diagnostic) -> str | None:
        site = None
        if d.code == SITE_FIXED and d.materialised:
            # its only fix is the script's (the other codes keep their own codemod's answer)
            site = self.refused_sites.get(d.materialised[1:])
        if site is not None:
            return site
        if d.via is not None and d.fix is None and d.code in CODEMODS:
            return (
                f"the line is in `{d.via[0]}`, a function of another file that construction "
                "calls: the fix rewrites the class, not that function"
            )
        if ff is None:
            return None
        why = ff.refused.get((d.code, d.start.row, d.symbol or ""))
        if why:
            return why
        if d.fix is not None and not self.applicable(d):
            return UNSAFE_HINT
        if d.code not in CODEMODS:
            return None
        return REASONS.get((ff.display, d.code, d.start.row))


@dataclass(frozen=True)
class HookRefusal:
    """Why the tree forbids putting code in ``hook`` of a class: ``kind`` is
    ``"subclass_hook"`` (``other``, a subclass, defines its own ``hook``: a new one would
    never run for it), ``"base_unknown"`` (base class ``other`` is not among the checked
    files) or ``"base_hook"`` (base class ``other`` has its own ``reset_parameters()``, which
    a new one would override)."""

    kind: str
    other: str
    hook: str

    def __str__(self) -> str:
        if self.kind == "subclass_hook":
            return f"subclass `{self.other}` defines its own `{self.hook}()`"
        if self.kind == "base_unknown":
            return f"base class `{self.other}` is not among the checked files"
        return f"base class `{self.other}` has its own `{RESET_HOOK}()`"

    def follow_up(self) -> str:
        """The reason of a fix whose follow-up (ML002's fix) would be refused for this."""
        return (
            f"the buffer's value would be re-created in `{self.hook}()` by ML002's fix, which "
            f"is refused: {self}"
        )


def _waits(h: Hierarchy, d: Diagnostic, picked: list, waiting: list) -> bool:
    """Does ``d`` wait for the next round: a fix of its class is taken already, or of a kin
    class (a base class and its subclass both given a hook in one round: neither saw the
    other's, and a base ``__init__`` calling ``reset_parameters()`` then runs the subclass's
    before the subclass made its tensors; PyG's LinkPredNDCG: AttributeError on
    ``self.discount``; next round, ``blocked`` sees the first)?"""
    if any(_related(d.symbol, {p.symbol}) for p in (*picked, *waiting)):
        return True
    return any(_kin(h, d, p) for p in picked)


def _claim_rows(d: Diagnostic, rows: list[tuple[int, int]]) -> bool:
    """Add the rows ``d``'s fix edits to ``rows``, unless they overlap rows already there."""
    span = (min(e.start.row for e in d.fix.edits), max(e.end.row for e in d.fix.edits))
    if any(not (span[1] < a or b < span[0]) for a, b in rows):
        return False
    rows.append(span)
    return True


def _round_order(d: Diagnostic, parent_safe: set) -> tuple:
    """The order in which :meth:`Fixer._pick` takes the fixes of one round."""
    return (
        d.code not in IN_PLACE_FIRST,
        # a value kept in ``__init__`` waits for its class's other fixes: next round
        # it may be moved by them instead of re-created by a second hook (timm
        # HieraDet's position embeddings join the root ``init_weights()`` that ML010's
        # fix makes, in the order ``__init__`` ran them)
        d.fix is not None and d.fix.kept,
        d.code == IN_PLACE_INIT and d.symbol in parent_safe and not _safe(d),
        # the parent's init of its children (the root ``init_weights()``) waits for the
        # class's own tensors' fixes (``reset_parameters()``): made after them, it
        # calls that hook as timm's protocol needs (``own_hook_last``). enformer's
        # ``Attention``: its new ``init_weights()``, called early in ``__init__``,
        # never called the ``reset_parameters()`` made next round, and under the
        # root's protocol ``rel_content_bias``/``rel_pos_bias`` were lost.
        d.fix is not None and d.fix.hook == ROOT_ENTRIES[0],
        d.sort_key,
    )


def hook_refusal(
    h: Hierarchy, cls: str, hook: str, extends_base: bool = False
) -> HookRefusal | None:
    """Why the whole tree forbids a fix putting code in ``hook`` of class ``cls`` (None: it
    does not). One answer for a fix that puts code there (ML001, ML002, ML003, ...) and for
    ML007's, whose buffer ML002's fix re-creates there the next round. ``extends_base``: the
    new hook calls the base's first (``Fix.over_base_hook``): a base's own hook does not
    forbid it."""
    me = h.classes.get(cls)
    if me is None:
        return None
    for name in h.subclasses(me.fullname):
        other = h.classes[name]
        defined = getattr(other, "methods", None) or other.hooks
        if hook in defined:
            return HookRefusal("subclass_hook", other.fullname, hook)
    for b in me.bases:
        if b.startswith("torch.nn.") or b in HOOKLESS_BASES:
            continue
        refusal = _base_refusal(h, me, b, hook, extends_base)
        if refusal is not None:
            return refusal
    return None


def _base_refusal(h: Hierarchy, me, b: str, hook: str, extends_base: bool) -> HookRefusal | None:
    """:func:`hook_refusal` for one base ``b`` of class ``me`` (not torch's)."""
    r = h.resolve(b)
    if r is None and b in EXTERNAL_RESET_BASES:
        if hook == RESET_HOOK and RESET_HOOK not in me.hooks and not extends_base:
            return HookRefusal("base_hook", b, hook)
        return None
    if r is None:
        return HookRefusal("base_unknown", b, hook)
    if (
        h.hook_tensors(r, RESET_HOOK) is not None
        and RESET_HOOK not in me.hooks
        and not extends_base
    ):
        # a new hook would override the base's; one the class defines already does
        # (peft's GloraEmptyPath overrides its base's abstract ``reset_parameters``)
        return HookRefusal("base_hook", r, hook)
    return None


def _kin(h: Hierarchy, a: Diagnostic, b: Diagnostic) -> bool:
    """Do fixes ``a`` and ``b`` both put code in a hook (or their follow-ups do), of classes one
    of which inherits from the other?"""
    if None in (a.condition, b.condition) or not (_hook_of(a) and _hook_of(b)):
        return False
    x, y = a.condition.cls, b.condition.cls
    return x != y and (x in _ancestors(h, y) or y in _ancestors(h, x))


def _hook_of(d: Diagnostic) -> str | None:
    """The hook ``d``'s fix puts code in, or its follow-up does (ML007's: ML002's)."""
    if d.fix is None:
        return None
    return d.fix.hook or d.fix.then_hook


def _ancestors(h: Hierarchy, fullname: str) -> set[str]:
    seen: set[str] = set()
    stack = [fullname]
    while stack:
        for b in h.bases(stack.pop()):
            if b not in seen:
                seen.add(b)
                stack.append(b)
    return seen


def _safe(d: Diagnostic) -> bool:
    return d.fix is not None and d.fix.applicability == Applicability.SAFE


def _related(symbol: str | None, others) -> bool:
    s = symbol or ""
    for o in others:
        o = o or ""
        if s == o or s.startswith(o + ".") or o.startswith(s + "."):
            return True
    return False
