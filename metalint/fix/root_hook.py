"""The root hook (``init_weights()``) that ``__init__`` calls: the class's own hook first or last in it, its one call, code moved through a method that ``__init__`` calls. Shared by the codemods."""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import Rewrite, Unfixable, render, stmt
from metalint.fix.flow import bare_self_call, returns, uses
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.syntax import walk_code
from metalint.vocabulary import (
    REGISTER_METHODS,
    RESET_HOOK,
    ROOT_ENTRIES,
)

HOOK = ROOT_ENTRIES[0]


def bound_names(node: cst.CSTNode) -> set[str]:
    """Names the statement binds itself (loop targets, assignments, ``with ... as``)."""
    out: set[str] = set()
    for n in walk_code(node):
        targets: list[cst.CSTNode] = []
        if type(n) in (cst.For, cst.CompFor):
            targets.append(n.target)
        elif type(n) is cst.Assign:
            targets.extend(t.target for t in n.targets)
        elif type(n) in (cst.AnnAssign, cst.AugAssign):
            targets.append(n.target)
        elif type(n) is cst.WithItem and n.asname is not None:
            targets.append(n.asname.name)
        for t in targets:
            for x in walk_code(t):
                if type(x) is cst.Name:
                    out.add(x.value)
    return out


def new_hook(edit: ClassEdit) -> None:
    if HOOK in edit.cls.methods:
        raise Unfixable(
            f"`{edit.cls.name}` already has an `{HOOK}()`: merge this init into it by hand"
        )
    if edit.taken(HOOK):
        raise Unfixable(f"`{HOOK}` is already an attribute of `{edit.cls.name}`")


def own_hook_first(edit: ClassEdit, first: int, last: int, moved: set[int]) -> list:
    """A new root ``init_weights()`` in a class whose ``__init__`` already calls its own
    ``reset_parameters()`` earlier (an earlier fix moved the class's own in-place init there):
    under timm's protocol a module with an ``init_weights()`` is initialised by it alone, so
    it calls ``reset_parameters()`` first and the earlier call goes (the init runs in the same
    order; see :meth:`ClassEdit.join_called_hook`). Returns the statements that open it."""
    reset = RESET_HOOK
    if reset not in edit.cls.methods:
        return []
    calls, nested = edit.hook_calls(reset)
    if nested or len(calls) != 1 or calls[0] >= first:
        return []  # called last (or not at all): it stays as it is
    edit.join_called_hook(reset, first, last, moved)
    return [stmt(f"self.{reset}()")]


def own_hook_last(edit: ClassEdit, last: int, moved: set[int]) -> cst.BaseStatement | None:
    """A new root ``init_weights()`` in a class whose ``__init__`` calls its own
    ``reset_parameters()`` later, once, as a statement (an earlier fix made it, called last:
    monai regunet ``AffineHead``'s ``grid`` buffer, then the ``fc`` init moving to
    ``init_weights()``). Under timm's protocol a module with an ``init_weights()`` is
    initialised by it alone, so it ends calling ``reset_parameters()`` and ``__init__`` calls
    it where ``reset_parameters()`` was: the moved init then runs later, which keeps eager
    values only when nothing in between draws random numbers (when the moved init draws:
    a ``zeros_`` may pass children that draw), calls a method (other than one registering a
    tensor or a child aside), loops (:func:`_straight`), reads a tensor
    (``.weight``, ``.bias``, ``.data``) or writes what the moved code reads. Returns the call
    statement to replace (the caller puts the new call there and ``self.reset_parameters()``
    last in the hook), or None."""
    reset = RESET_HOOK
    if reset not in edit.cls.methods:
        return None
    calls, nested = edit.hook_calls(reset)
    if nested or len(calls) != 1 or calls[0] <= last:
        return None
    body = edit.init_body
    memo = edit.memo()
    reads: set[str] = set()
    for i in moved:
        reads |= uses(body[i], memo)[1]
    # an init that draws nothing (enformer ``Attention``'s ``zeros_(self.to_out.weight)``)
    # may move past children that draw (``self.to_rel_k = nn.Linear(..)``)
    draws_random = not all(draws(body[i], edit.ctx) is Draws.NEVER for i in moved)
    for i in range(last + 1, calls[0]):
        if i in moved:
            continue
        s = body[i]
        written, _read, methods = uses(s, memo)
        if (
            not _straight(s)
            or (draws_random and draws(s, edit.ctx) is not Draws.NEVER)
            or methods - ASIDE
            or written & reads
            or any(
                isinstance(n, cst.Attribute) and n.attr.value in ("weight", "bias", "data")
                for n in walk_code(s)
            )
        ):
            return None
    edit.hook_call_added.add(HOOK)
    return body[calls[0]]


#: methods of ``self`` that register a tensor or a child aside: no child's tensor changes
ASIDE = frozenset({*REGISTER_METHODS, "add_module", "register_module"})


def _straight(s: cst.CSTNode) -> bool:
    """A statement whose code runs at most once, in order: a simple statement, or an ``if``,
    ``try`` or ``with`` of such statements (x-transformers' ``Attend``: ``if
    softclamp_logits: assert not flash; self.softclamp_value = ...``); no loop, no nested
    function or class."""
    if isinstance(s, cst.SimpleStatementLine):
        return True
    if isinstance(s, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)):
        return False
    if isinstance(s, (cst.If, cst.Else, cst.Try, cst.With, cst.ExceptHandler, cst.Finally)):
        inner = [
            c
            for c in walk_code(s)
            if c is not s and isinstance(c, (cst.BaseStatement, cst.ExceptHandler, cst.Finally))
        ]
        return all(
            not isinstance(c, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)) for c in inner
        )
    return False


def called_once(edit: ClassEdit, method, arguments: bool = False) -> int:
    """The top-level statement of ``__init__`` that calls ``method`` (which a hook may call
    again: no return value; no arguments, or with ``arguments`` ones :func:`hook_call` can
    pass again), the only call of it in ``__init__``."""
    calls, nested = edit.hook_calls(method.name)
    if nested and not calls:
        calls = _guarded_call(edit, method.name)
    elif nested:
        calls = []
    if len(calls) != 1:
        raise Unfixable(f"`__init__` does not call `{method.name}()` once, as a statement")
    if returns(method.node.body) or (
        not arguments and any(p.default is None for p in method.node.params.params[1:])
    ):
        raise Unfixable(f"`{method.name}()` takes arguments or returns a value")
    return calls[0]


def _guarded_call(edit: ClassEdit, name: str) -> list[int]:
    """``[c]`` when ``__init__`` calls ``self.<name>()`` once, as the only statement of a
    top-level ``if`` (no ``else``) whose test calls nothing: sbi's ``MixtureDensityEstimator``,
    ``if custom_initialization: self._initialize()``. The hook then runs that ``if``
    (:func:`hook_call`)."""
    sites = [
        n
        for n in walk_code(edit.init.node.body)
        if type(n) is cst.Call and dotted(n.func) == f"self.{name}"
    ]
    for c, s in enumerate(edit.init_body):
        if (
            type(s) is cst.If
            and s.orelse is None
            and len(sites) == 1
            and len(s.body.body) == 1
            and bare_self_call(s.body.body[0]) == name
            and not any(type(n) is cst.Call for n in walk_code(s.test))
        ):
            return [c]
    return []


def hook_call(edit: ClassEdit, method, c: int) -> cst.BaseStatement:
    """The statement a hook runs to call ``method`` as ``__init__``'s statement ``c`` does,
    which the caller replaces (``use_hook(call_at=...)``). Its arguments are passed again
    (nflows ``LULinear.__init__``: ``self._initialize(identity_init)``): the ``__init__``
    arguments and locals they read are kept on ``self`` the way every fix keeps them
    (:meth:`ClassEdit.store_names`, stored where the call was), so the hook calls
    ``self._initialize(self.identity_init)``. Refused: ``*args``/``**kwargs``, an argument
    that calls something (the hook would call it again) and one reading ``self.<attr>``
    written later in ``__init__`` (the hook would pass another value)."""
    line = edit.init_body[c]
    guarded = type(line) is cst.If  # ``if flag: self._initialize()`` (:func:`_guarded_call`)
    call = (line.body.body[0] if guarded else line).body[0].value
    if not call.args and not guarded:
        return stmt(f"self.{method.name}()")
    name = method.name
    for attr in sorted(uses(line.test)[1]) if guarded else ():
        later = edit.used_after(attr, c, writes_only=True)
        if later:
            raise Unfixable(f"`{name}()` is called if `self.{attr}`: {later}")
    for a in call.args:
        if a.star:
            raise Unfixable(f"`__init__` calls `{name}()` with `{a.star}` arguments")
        for n in walk_code(a.value):
            if isinstance(n, cst.Call):
                raise Unfixable(
                    f"`__init__` passes `{render(a.value).strip()}` to `{name}()`: the hook "
                    "would call it again"
                )
        for attr in sorted(uses(a.value)[1]):
            later = edit.used_after(attr, c, writes_only=True)
            if later:
                raise Unfixable(f"`{name}()` is passed `self.{attr}`: {later}")
    edit.replace[id(line)] = (line, [])
    return edit.store_names(line, line, c).with_changes(leading_lines=())


def through_method(edit: ClassEdit, owner) -> Rewrite:
    """``owner``, the method of the class (None: of no method of it) holding an init that a
    rule matched, called from a new root hook called where ``__init__`` calls it."""
    if owner is None:
        raise Unfixable("the init is not in a method of this class")
    if HOOK in edit.cls.methods and owner in edit.cls.reachable(HOOK):
        raise Unfixable(
            f"it is in the root hook `{HOOK}()`: materialise with `to_empty()` then `{HOOK}()`"
        )
    c = called_once(edit, owner)
    new_hook(edit)
    # the class's own reset_parameters() (an earlier fix's) runs from the root hook too: under
    # timm's protocol a module with an init_weights() is initialised by it alone (open_clip
    # TextTransformer: ML002's attn_mask in reset_parameters(), init_parameters() here)
    first = own_hook_first(edit, c, c, {c})
    tail = None if first else own_hook_last(edit, c, {c})
    line = edit.init_body[c]
    # the method's call as the hook makes it (guarded: ``if self.flag: self._initialize()``),
    # with what it reads kept on self before ``line``
    moved = hook_call(edit, owner, c)
    kept = [s for s in edit.replace.get(id(line), (line, []))[1] if s is not line]
    at = line if tail is None else tail
    call = stmt(f"self.{HOOK}()").with_changes(leading_lines=at.leading_lines)
    if tail is None:
        edit.replace[id(line)] = (line, [*kept, call])
    else:
        edit.replace[id(line)] = (line, kept)
        edit.replace[id(tail)] = (tail, [call])
    last = [stmt(f"self.{RESET_HOOK}()")] if tail is not None else []
    edit.hook_append[HOOK] = [*first, moved, *last]
    return edit.rewrite(f"Call `{owner.name}()` from a root `{HOOK}()` called from `__init__`")
