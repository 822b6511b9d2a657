"""Moving the in-place inits of a class's children into its root hook, children first, in the order ``__init__`` ran them. Shared by the codemods."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    names_in,
    render,
    stmt,
)
from metalint.fix.flow import touches
from metalint.fix.init_statements import (
    attr_of,
    call_writes,
    child_tensor,
    init_call,
    init_only,
    module_tensor,
    take,
)
from metalint.fix.recompute import recompute_locals
from metalint.fix.root_hook import (
    bound_names,
    own_hook_first,
    own_hook_last,
)
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.vocabulary import (
    RESET_HOOK,
    ROOT_ENTRIES,
)

ROOT_HOOK = ROOT_ENTRIES[0]


def _if_blocks(s: cst.If) -> Iterator[cst.IndentedBlock]:
    """The blocks of an ``if``/``elif``/``else`` chain."""
    node = s
    while node is not None:
        if isinstance(node.body, cst.IndentedBlock):
            yield node.body
        node = getattr(node, "orelse", None)


def _child_of(s: cst.CSTNode, ctx: RuleContext) -> set[str]:
    """The children whose tensors an init-only statement writes (``g_proj`` for
    ``zeros_(self.g_proj.weight)``)."""
    out = set()
    for c in walk_code(s):
        if isinstance(c, cst.Call):
            w = call_writes(c, ctx)
            if w is not None and child_tensor(w.target):
                out.add(w.target.split(".")[1])
    return out


def creates_child(s: cst.CSTNode, child: str) -> bool:
    return isinstance(s, cst.SimpleStatementLine) and any(
        isinstance(x, cst.Assign) and any(dotted(t.target) == f"self.{child}" for t in x.targets)
        for x in s.body
    )


def block_runs(ctx: RuleContext, edit: ClassEdit) -> list[tuple[int, list, frozenset]]:
    """Runs of in-place inits of children's tensors inside a block of a top-level ``if`` of
    ``__init__`` that creates those children earlier in the same block (esmfold's
    ``Attention``: ``if gated: self.g_proj = nn.Linear(..)``, then
    ``zeros_(self.g_proj.weight)``, ``ones_(self.g_proj.bias)``): (index of the ``if``, the run,
    its children). The children must be created nowhere else (``None`` aside): whether they
    exist then tells whether the block ran."""
    out = []
    for i, top in enumerate(edit.init_body):
        if not isinstance(top, cst.If) or init_only(top, ctx, module_tensor):
            continue
        for block in _if_blocks(top):
            stmts = list(block.body)
            j = 0
            while j < len(stmts):
                run = []
                while j < len(stmts) and init_only(stmts[j], ctx, child_tensor):
                    run.append(stmts[j])
                    j += 1
                if not run:
                    j += 1
                    continue
                at = stmts.index(run[0])
                kids = frozenset(k for st in run for k in _child_of(st, ctx))
                if kids and all(
                    any(creates_child(st, k) for st in stmts[:at])
                    and (made_once(edit, k) or _placeholder(edit, k) is not None)
                    for k in kids
                ):
                    out.append((i, run, kids))
    return out


def made_once(edit: ClassEdit, child: str) -> bool:
    """Is ``self.<child>`` given a value other than ``None`` once during construction?"""
    n = 0
    for m in edit.cls.reachable("__init__"):
        for a in m.assigns:
            if a.target == f"self.{child}" and not (
                isinstance(a.value, cst.Name) and a.value.value == "None"
            ):
                n += 1
        for c in m.calls:
            if c.receiver == "self" and c.method in ("add_module", "register_module", "setattr"):
                return False
    return n == 1


def _placeholder(edit: ClassEdit, child: str) -> str | None:
    """The ``nn.Identity`` that ``self.<child>`` is otherwise (x-transformers' and titans'
    ``self.talking_heads = nn.Identity()``, then ``if talking_heads: self.talking_heads =
    nn.Conv2d(..)`` and ``dirac_(self.talking_heads.weight)``), as spelled there, when the
    child is made once as something else: whether it is that placeholder tells whether the
    block ran. None otherwise."""
    spelled: str | None = None
    others = 0
    for m in edit.cls.reachable("__init__"):
        for a in m.assigns:
            if a.target != f"self.{child}":
                continue
            v = a.value
            if isinstance(v, cst.Call) and edit.ctx.qualify(v.func) == "torch.nn.Identity":
                spelled = render(v.func)
            elif not (isinstance(v, cst.Name) and v.value == "None"):
                others += 1
        for c in m.calls:
            if c.receiver == "self" and c.method in ("add_module", "register_module", "setattr"):
                return None
    return spelled if others == 1 else None


def children_guarded(
    stmts: list, kids: frozenset, edit: ClassEdit | None = None
) -> cst.BaseStatement:
    def guard_of(k: str) -> str:
        identity = _placeholder(edit, k) if edit is not None else None
        if identity is not None:
            return f"not isinstance(self.{k}, {identity})"
        return f"getattr(self, {k!r}, None) is not None"

    guard = " and ".join(guard_of(k) for k in sorted(kids))
    node = stmt(f"if {guard}:\n    pass\n")
    return node.with_changes(body=node.body.with_changes(body=stmts))


def _between(edit: ClassEdit, first: int, last: int, moved, runs, inits=None) -> list:
    """What runs after a moved init and before the new call: (statement, the children it may
    touch: those a run later in its block initialises, created before it, and those whose
    every moved init comes after it (``inits``: child -> indices of the statements that
    initialise it), as sine's ``self.concept_embedding = nn.Embedding(..)`` between the init
    of ``item_embedding`` and its own: it runs before them eagerly and before the hook)."""
    body = edit.init_body
    inits = inits or {}
    out: list[tuple[cst.CSTNode, frozenset]] = []
    for i in range(first, last + 1):
        if i in moved:
            continue
        mine = [(r, k) for j, r, k in runs if j == i]
        if not mine:
            if i > first:
                later = frozenset(a for a, at in inits.items() if min(at) > i)
                out.append((body[i], later))
            continue
        in_runs = {id(st) for r, _k in mine for st in r}
        kids = frozenset().union(*(k for _r, k in mine))
        for block in _if_blocks(body[i]):
            stmts = list(block.body)
            starts = [stmts.index(r[0]) for r, _k in mine if r[0] in stmts]
            for at, st in enumerate(stmts):
                if id(st) in in_runs:
                    continue
                if starts and at > min(starts):
                    out.append((st, frozenset()))
                elif i > first:
                    out.append((st, kids))
    return out


def call_after(edit: ClassEdit, last: int, replaces: bool, hook: str = ROOT_HOOK) -> None:
    """Call ``hook`` in place of top-level statement ``last`` (``replaces``: it moved), else
    right after it."""
    body = edit.init_body
    call = stmt(f"self.{hook}()")
    if replaces:
        s = body[last]
        call = call.with_changes(leading_lines=s.leading_lines)
        edit.replace[id(s)] = (s, [*edit.replace[id(s)][1], call])
    elif last + 1 < len(body):
        nxt = body[last + 1]
        old = edit.replace.get(id(nxt))
        edit.replace[id(nxt)] = (nxt, [call, *(old[1] if old else [nxt])])
    else:
        edit.init_append.append(call)


def _recomputed(edit: ClassEdit, i: int, why: str) -> list:
    """Statement ``i`` of ``__init__`` for the root hook, after copies of the statements that
    compute the local tensors it reads (regunet's affine head: ``out_init = torch.tensor([1,
    0, 0, 0, 1, 0], ...)`` chosen by an ``if`` on the spatial dims, then
    ``self.fc.bias.data.copy_(out_init)``). Raises :class:`Unfixable` (``why``) when they do
    more than compute locals."""
    s = edit.init_body[i]
    out = recompute_locals(edit, s, i, ROOT_HOOK, why)
    edit.replace[id(s)] = (s, [])
    lead = [line for line in getattr(s, "leading_lines", ()) if line.comment is not None]
    out[-1] = out[-1].with_changes(leading_lines=lead)
    return out


def children_first(ctx: RuleContext, edit: ClassEdit, keep: int | None = None) -> Rewrite:
    """:func:`move_children_first` for a top-level statement: with the runs inside blocks when they can
    move, else without them (they stay where they are, as their own findings say). ``keep``:
    the top-level statement of the finding, which must move."""
    try:
        return move_children_first(ctx, ClassEdit(ctx, edit.cls), keep=keep)
    except Unfixable:
        return move_children_first(ctx, edit, with_runs=False, keep=keep)


def root_hook(edit: ClassEdit, first: int, last: int, moved: set[int]):
    """The root ``init_weights()`` that takes the statements ``first``..``last``: (the
    statements that open it, the ``reset_parameters()`` call it replaces, to be called last
    in it, or None; the statement of ``__init__`` that calls an existing ``init_weights()``,
    or None). See :func:`own_hook_first`, :func:`own_hook_last` and
    :meth:`ClassEdit.join_called_hook`."""
    if ROOT_HOOK in edit.cls.methods:
        return [], None, edit.join_called_hook(ROOT_HOOK, first, last, moved)
    if edit.taken(ROOT_HOOK):
        raise Unfixable(f"`{ROOT_HOOK}` is already an attribute of `{edit.cls.name}`")
    opening = own_hook_first(edit, first, last, moved)
    tail = None if opening else own_hook_last(edit, last, moved)
    if not opening and tail is None and edit.hook_calls(RESET_HOOK)[0]:
        # x-transformers' ``TPREncoder``: ``binding``'s zeros moved into a
        # ``reset_parameters()`` called last, the embeddings' init before child modules that
        # draw: a new ``init_weights()`` could neither open nor end with that call, and under
        # the root protocol, where it alone initialises the module, ``binding`` would be lost
        raise Unfixable(
            f"`__init__` calls `{RESET_HOOK}()` after code that draws random numbers or calls a "
            f"method: a new `{ROOT_HOOK}()` could not call it, and the module's own tensors "
            "would be lost under the root protocol"
        )
    return opening, tail, None


def _called_at(edit: ClassEdit) -> int | None:
    """The top-level statement of ``__init__`` that calls an existing root ``init_weights()``
    (the only call), or None."""
    if ROOT_HOOK not in edit.cls.methods:
        return None
    calls, nested = edit.hook_calls(ROOT_HOOK)
    return calls[0] if len(calls) == 1 and not nested else None


def _joined(edit: ClassEdit, moved: list[int], runs: list, keep: int | None):
    """The statements that move (``moved``, ``runs``) and :func:`root_hook`'s answer for them.
    When those after an existing call of ``init_weights()`` cannot join its end, the ones
    before it alone, provided the finding's own statement ``keep`` is among them."""
    tops = sorted({*moved, *(i for i, _r, _k in runs)})
    try:
        return moved, runs, root_hook(edit, tops[0], tops[-1], set(moved))
    except Unfixable:
        c = _called_at(edit)
        if c is None or keep is None or keep > c or not tops[0] < c < tops[-1]:
            raise
    moved = [i for i in moved if i < c]
    runs = [r for r in runs if r[0] < c]
    tops = [i for i in tops if i < c]
    return moved, runs, root_hook(edit, tops[0], tops[-1], set(moved))


def place_call(edit: ClassEdit, last: int, replaces: bool, tail, called: int | None) -> list:
    """Call the root hook after the moved statement ``last``; what the hook then ends with."""
    if called is not None and last < called:
        return []  # the existing call stays where it is
    if tail is None:
        call_after(edit, last, replaces)
        return []
    # called where reset_parameters() was, which it calls last
    call = stmt(f"self.{ROOT_HOOK}()").with_changes(leading_lines=tail.leading_lines)
    edit.replace[id(tail)] = (tail, [call])
    return [stmt(f"self.{RESET_HOOK}()")]


def _locals_stay_bound(body, moved: list[int]) -> None:
    """Raise :class:`Unfixable` when a local that a moving ``if`` block computes (``fan_in``)
    is read by a statement of ``__init__`` that stays: it would be unbound there."""
    for i in moved:
        made = bound_names(body[i]) if isinstance(body[i], cst.If) else set()
        for j in range(i + 1, len(body)):
            read = {n.value for n in names_in(body[j])} & made
            if read and j not in moved:
                raise Unfixable(
                    f"`{sorted(read)[0]}`, computed in a block that moves into the hook, is "
                    "read later in `__init__`"
                )


def _take_units(edit: ClassEdit, units, called: int | None, inits: dict[str, set[int]]):
    """The hook's statements from ``units`` (top-level index, its guarded run or None: the
    statement itself): (those that ran before an existing call of the hook, which open it;
    the rest). Statements after an early return of ``__init__`` init children made on some
    paths only (bs-roformer's ``AdaLN``: ``if not exists(time_cond_dim): return``, then
    ``to_gamma_beta_gate`` is made and initialised): the hook guards them by those children
    being there, as it does a run inside an ``if`` (:func:`children_guarded`)."""
    body = edit.init_body
    stmts: list = []
    before: list = []  # what ran before an existing call: it opens the hook
    late: list = []  # after an early return: guarded together
    kids: set[str] = set()
    for i, guarded_run in units:
        into = before if called is not None and i < called else stmts
        if guarded_run is not None:
            into.append(guarded_run)
            continue
        try:
            taken = take(edit, body, [i], private=True)
        except Unfixable as exc:
            taken = _recomputed(edit, i, str(exc))
        if into is stmts and edit.after_return(i):
            late.extend(taken)
            kids |= {a for a, at in inits.items() if i in at}
            continue
        into.extend(taken)
    if late:
        stmts.append(children_guarded(late, frozenset(kids), edit))
    return before, stmts


def _init_indices(ctx: RuleContext, body, moved, runs) -> dict[str, set[int]]:
    """Child -> the top-level statements of ``__init__`` that initialise its tensors in place
    (a moved statement, or the ``if`` holding a run)."""
    inits: dict[str, set[int]] = {}
    for i in moved:
        for c in walk_code(body[i]):
            if isinstance(c, cst.Call) and init_call(c, ctx, module_tensor) and attr_of(c, ctx):
                inits.setdefault(attr_of(c, ctx), set()).add(i)
    for i, _run, kids in runs:
        for a in kids:
            inits.setdefault(a, set()).add(i)
    return inits


def move_children_first(
    ctx: RuleContext, edit: ClassEdit, with_runs: bool = True, keep: int | None = None
) -> Rewrite:
    """In-place init of children's tensors (``trunc_normal_(self.linear.weight, std=std)``):
    the parent's value for a child belongs in its root ``init_weights()``, which runs after the
    children's own hooks. Every init-only statement moves there in order, and the call takes
    the place of the last one, so eager construction draws the same numbers in the same order.
    A run of them inside an ``if`` block that creates those children (:func:`block_runs`)
    moves too, guarded by the children being there; the call then follows that ``if``.

    A class whose ``__init__`` already calls its ``init_weights()`` (ML010's fix of timm
    HieraDet's ``named_apply``) gets the statements that ran before that call at the start of
    the hook, and those after it at its end (:meth:`ClassEdit.join_called_hook`). When those
    after it cannot join (HieraDet's head init follows ``self.fix_init_weight()``, a method
    that changes the children), the ones before it still move, provided the finding's own
    statement (``keep``) is among them; the others stay, as their own findings say."""

    body = edit.init_body
    moved = [i for i, s in enumerate(body) if init_only(s, ctx, module_tensor)]
    runs = block_runs(ctx, edit) if with_runs else []
    moved, runs, (opening, tail, called) = _joined(edit, moved, runs, keep)
    tops = sorted({*moved, *(i for i, _r, _k in runs)})
    first, last = tops[0], tops[-1]
    inits = _init_indices(ctx, body, moved, runs)
    attrs = set(inits)
    _locals_stay_bound(body, moved)
    between = _between(edit, first, last, moved, runs, inits)
    for s, exempt in between:
        for a in sorted(attrs - exempt):
            if touches(s, a, False, edit.memo()):
                raise Unfixable(f"`self.{a}` is used between its in-place inits in `__init__`")
    if not all(draws(s, ctx) is Draws.NEVER for s, _e in between):
        edit.unsafe.append(
            "random draws move after other random draws of `__init__`: eager values differ"
        )
    units: list[tuple[int, cst.BaseStatement | None]] = []
    for i in tops:
        if i in moved:
            units.append((i, None))
        for j, run, kids in runs:
            if j == i:
                units.append(
                    (i, children_guarded(take(edit, run, range(len(run)), True, i), kids, edit))
                )
    before, stmts = _take_units(edit, units, called, inits)
    stmts.extend(place_call(edit, last, last in moved, tail, called))
    if before:
        edit.hook_prepend[ROOT_HOOK] = before
    edit.hook_append[ROOT_HOOK] = [*opening, *stmts]
    n = len(moved) + sum(len(r) for _i, r, _k in runs)
    return edit.rewrite(
        f"Move {n} in-place init statement{'s' if n != 1 else ''} of children's tensors into a "
        f"root `{ROOT_HOOK}()` called from `__init__`"
    )
