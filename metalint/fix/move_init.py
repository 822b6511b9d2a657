"""Moving an in-place init of an own tensor out of ``__init__`` into a hook (:func:`move_own`, :func:`move_own_in_block`, :func:`method_into_reset`). Shared by the codemods."""

from __future__ import annotations

import libcst as cst

from metalint.fix.children_first import (
    ROOT_HOOK,
    call_after,
    children_first,
    creates_child,
    made_once,
)
from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    Rewrite,
    Unfixable,
    base_guard_comment,
    expr,
    guarded,
    names_in,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import touches, uses
from metalint.fix.init_statements import (
    attr_of,
    call_writes,
    init_call,
    init_only,
    module_tensor,
    own_tensor,
    take,
)
from metalint.fix.root_hook import (
    called_once,
    hook_call,
)
from metalint.static.draws import Draws, draws
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensor_kind import binds
from metalint.static.tensors import Write
from metalint.vocabulary import (
    HOOKLESS_BASES,
    PARAMETER_CLASSES,
    RESET_HOOK,
)

HOOK = RESET_HOOK


def overwrites(s: cst.CSTNode, attr: str, ctx: RuleContext) -> bool:
    """Is the statement one call that sets every element of ``self.<attr>`` without reading
    it (``trunc_normal_(self.pos, std=.02)``, ``self.w.data.zero_()``)?"""
    if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1):
        return False
    call = getattr(s.body[0], "value", None)
    w = call_writes(call, ctx) if isinstance(call, cst.Call) else None
    return (
        w is not None
        and w.target in (f"self.{attr}", f"self.{attr}.data")
        and w.kind not in (None, "storage")
    )


def sets_every_element(body, attr: str, ctx: RuleContext) -> bool:
    """Do the statements ``body`` set every element of ``self.<attr>`` on every path before
    anything reads it (nflows ``LULinear._initialize(identity_init)``: ``init.zeros_`` in one
    branch of an ``if``, ``init.uniform_`` in the other)? Then the value it had before does
    not matter. Conservative: a statement that calls another method of ``self`` may read it."""
    for s in body:
        if isinstance(s, cst.SimpleStatementLine) and overwrites(s, attr, ctx):
            return True
        written, read, methods = uses(s)
        if isinstance(s, cst.If):
            blocks, node, tests_free = [], s, True
            while isinstance(node, cst.If):
                tests_free &= not (touches(node.test, attr, False) or uses(node.test)[2])
                blocks.append(node.body)
                node = node.orelse
            if tests_free and isinstance(node, cst.Else):
                blocks.append(node.body)
                if all(
                    isinstance(b, cst.IndentedBlock) and sets_every_element(b.body, attr, ctx)
                    for b in blocks
                ):
                    return True
        if isinstance(s, cst.With) and isinstance(s.body, cst.IndentedBlock):
            if sets_every_element(s.body.body, attr, ctx):
                return True
        if attr in written or attr in read or methods:
            return False
    return False


def _own_writes(node: cst.CSTNode, ctx: RuleContext):
    """The in-place writes of this module's own tensors in ``node``, in order (not ``set_``)."""
    for n in walk_code(node):
        w = call_writes(n, ctx) if isinstance(n, cst.Call) else None
        if w is not None and own_tensor(w.target) and w.own and w.kind != "storage":
            yield w


def _changes_values(w: Write) -> bool:
    """Does the write compute the tensor's new values from its old ones (``mul_``, ``add_``,
    ``clamp_``: a tensor method of no init kind, not ``copy_``)?"""
    return w.kind is None and w.method and w.name != "copy_"


def rescales(stmts, ctx: RuleContext, full: set[str] | None = None) -> str | None:
    """The first own tensor that a call of ``stmts`` (a node or a list, in order) changes from
    its old values (``self.gain.data.mul_(0.5)``: :func:`_changes_values`) before one of them
    sets all of it, and not in ``full`` (tensors a hook sets already); None when there is
    none. A hook running such a statement alone would change uninitialised memory."""
    full = set(full or ())
    for s in stmts if isinstance(stmts, list) else [stmts]:
        for w in _own_writes(s, ctx):
            if _changes_values(w) and w.own not in full:
                return w.own
            full.add(w.own)
    return None


def _set_by_hook(edit: ClassEdit, ctx: RuleContext) -> set[str]:
    """The own tensors the class's ``reset_parameters()`` sets from no old values (an init of
    a kind, or ``copy_``)."""
    method = edit.cls.methods.get(HOOK)
    if method is None:
        return set()
    return {
        w.own for w in _own_writes(method.node.body, ctx) if w.kind is not None or w.name == "copy_"
    }


def _refuse_rescaling(edit: ClassEdit, ctx: RuleContext, stmts) -> None:
    """Raise :class:`Unfixable` when the statements moving into the hook change a tensor's
    values that no hook sets first (:func:`rescales`)."""
    a = rescales(list(stmts), ctx, _set_by_hook(edit, ctx))
    if a is not None:
        raise Unfixable(
            f"the in-place init changes `self.{a}`'s values (it reads them), and no hook makes "
            "them first: moved alone it would change uninitialised memory"
        )


def init_in_branch(ctx: RuleContext, edit: ClassEdit, attr: str, index: int) -> int | None:
    """The first top-level statement of ``__init__`` after ``index`` that touches
    ``self.<attr>``, when it is an ``if`` that only initialises this module's own tensors in
    place, on some paths only (vit-pytorch's ``GoldenGatePoPENd``: ``self.learned_bias =
    nn.Parameter(torch.zeros(heads, dim_head))``, then ``if init_learned_bias_uniform:
    self.learned_bias.uniform_(-2. * pi, 0.)``), writes no other tensor, calls no method, and
    nothing after it (nor a method ``__init__`` calls) uses more than the tensor's shape. The
    value is then not dead (the other path keeps it): a hook re-creating it must run the ``if``
    after it, moved there. The ``if`` reads no other attribute of ``self`` (the hook would read
    it later), and its tests read none. None otherwise."""
    body = edit.init_body
    memo = edit.memo()
    j = next((k for k in range(index + 1, len(body)) if touches(body[k], attr, False, memo)), None)
    if j is None or any(uses(body[k], memo)[2] for k in range(index + 1, j)):
        return None
    s = body[j]
    if isinstance(s, cst.SimpleStatementLine) and init_only(s, ctx) and rescales(s, ctx) == attr:
        # ``self.gain.data.mul_(0.5)``: it changes the value, which a hook must make first
        return None if edit.used_after(attr, j, tensor=True) else j
    if not (isinstance(s, cst.If) and init_only(s, ctx, module_tensor)):
        return None
    _written, read, calls = uses(s, memo)
    if calls or read - {attr}:
        return None  # a tensor it reads may change before the hook
    if any(any(uses(n.test)[:2]) for n in walk_code(s) if isinstance(n, cst.If)):
        # ``if self.pos_embed is not None:`` asks about the module (timm): ML003's own fix
        return None
    writes = [call_writes(n, ctx) for n in walk_code(s) if isinstance(n, cst.Call)]
    writes = [w for w in writes if w is not None]
    if not writes or not all(own_tensor(w.target) and w.own == attr for w in writes):
        return None  # another tensor's value, created before the `if`, would be lost
    return None if edit.used_after(attr, j, tensor=True) else j


def initialising(method, ctx: RuleContext) -> bool:
    """Does ``method`` (a method of the class) only initialise tensors in place (open_clip
    ``TextTransformer.init_parameters()``: ``nn.init.normal_(...)`` of its own and its
    children's tensors, in loops and ``if``s; PyTorch's ``MultiheadAttention._reset_parameters()``
    and the attention layers that copy it)? It creates nothing, assigns no attribute and
    registers nothing, so a hook may call it again after ``to_empty()``. A builder that also
    makes a child (fairseq's ``build_output_projection()``) does not."""
    for n in walk_code(method.node.body):
        if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            if any(not isinstance(t, cst.Name) for t in targets):
                return False  # self.x = ..., t[...] = ...
        if isinstance(n, cst.Call):
            name = getattr(n.func, "attr", None) or n.func
            called = getattr(name, "value", "")
            if called in ("register_buffer", "register_parameter", "add_module", "setattr"):
                return False
            q = ctx.qualify(n.func) or ""
            if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper():
                return False  # builds a module or a Parameter
    return True


def only_own(method, ctx: RuleContext, children: frozenset[str] | None = None) -> bool:
    """Does every in-place write of ``method`` initialise a tensor of this module itself (none
    of a child's: the parent's law for a child belongs in the root ``init_weights()``)? In a
    class whose ``children`` (its rule's site says) are none, a loop over ``self.parameters()``
    writes only its own (torch-geometric-temporal's attention layers: ``for p in
    self.parameters(): nn.init.xavier_uniform_(p)``)."""
    own_loops: set[str] = set()
    if children is not None and not children:
        own_loops = {
            n.target.value
            for n in walk_code(method.node.body)
            if type(n) is cst.For
            and type(n.target) is cst.Name
            and type(n.iter) is cst.Call
            and dotted(n.iter.func) == "self.parameters"
        }
    writes = [call_writes(n, ctx) for n in walk_code(method.node.body) if type(n) is cst.Call]
    return all(w is None or own_tensor(w.target) or w.target in own_loops for w in writes)


def method_into_reset(edit: ClassEdit, method) -> Rewrite:
    """A method of this module's own in-place inits (``self._reset_parameters()``), called by
    ``__init__`` once as a statement: ``reset_parameters()`` calls it and takes its call's
    place, the protocol of every module's own hook (FSDP's, and timm's before its root hook).
    ``__init__`` runs the same code in the same order: safe."""
    c = called_once(edit, method, arguments=True)
    exists = HOOK in edit.cls.methods
    _refuse_rescaling(edit, edit.ctx, [method.node.body])
    if not exists and edit.taken(HOOK):
        raise Unfixable(f"`{HOOK}` is already an attribute of `{edit.cls.name}`")
    line = edit.init_body[c]
    call = hook_call(edit, method, c)
    _empty_before(edit, method, c)
    # an existing hook (pypots' ``FeatureRegression``, whose mask buffer ML002's fix recomputes
    # there) takes the call; where the hook runs later than the call did, the draws it moves
    # past decide safety (:meth:`ClassEdit.use_hook`)
    called = exists and edit.hook_calls(HOOK)[0]
    # the hook called where the method was (``call_at``) moves no draw; one ``__init__``
    # already calls elsewhere does
    random = bool(called) and draws(method.node.body, edit.ctx) is not Draws.NEVER
    edit.use_hook(HOOK, c, [call], random=random, call_at=line)
    if called:
        # ``__init__`` calls the hook already, so the method's own call goes (the hook runs it)
        kept = edit.replace.get(id(line), (line, [line]))[1]
        edit.replace[id(line)] = (line, [s for s in kept if s is not line])
    done = edit.rewrite(
        f"Call `{method.name}()` from `{HOOK}()`"
        + (", which `__init__` calls" if exists else ", called where it was")
    )
    if any(not b.startswith("torch.nn.") and b not in HOOKLESS_BASES for b in edit.cls.bases):
        alternative = _over_base_hook(ClassEdit(edit.ctx, edit.cls), method)
        done.over_base_hook = alternative or done.over_base_hook
    return done


def _over_base_hook(edit: ClassEdit, method) -> Rewrite | None:
    """:func:`method_into_reset` for a class whose base (of another file: the tree tells, see
    :func:`metalint.fix.apply.hook_refusal`) has its own ``reset_parameters()``, which the
    base's ``__init__`` calls (nflows ``LULinear``/``QRLinear``/``SVDLinear`` of ``Linear``,
    whose ``bias`` ML001's fix initialises there). The new hook extends the base's, as a
    maintainer writes it: ``super().reset_parameters()`` first, then the method, guarded by
    the last parameter the class makes before the call, because the base's ``__init__`` calls
    the overriding hook before this class made its tensors (calling the method there raised
    AttributeError). ``__init__`` keeps calling the method itself where it did (the arguments
    kept on ``self`` for the hook): calling the hook there would run the base's init a
    second time, a second draw where it draws. Eager construction runs the same code in the
    same order: safe. None when no parameter of the class can guard it."""
    try:
        c = called_once(edit, method, arguments=True)
        if HOOK in edit.cls.methods or edit.taken(HOOK):
            return None
        body = edit.init_body
        written = uses(method.node.body)[0]
        last = None
        for i in range(edit.super_index() or 0, c):
            s = body[i]
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1:
                small = s.body[0]
                target = dotted(small.targets[0].target) if isinstance(small, cst.Assign) else None
                if (
                    target
                    and target.startswith("self.")
                    and target[5:] in written
                    and isinstance(small.value, cst.Call)
                    and edit.ctx.qualify(small.value.func) in PARAMETER_CLASSES
                ):
                    last = target[5:]
        if last is None:
            return None
        line = body[c]
        call = hook_call(edit, method, c)
        stores = edit.replace.get(id(line), (line, []))[1]
        edit.replace[id(line)] = (line, [*stores, line])
        _empty_before(edit, method, c)
        guard = stmt(
            f'if hasattr(self, "{last}"):  {base_guard_comment(edit.cls.bases[0])}'
            f"\n    {render(call).strip()}\n"
        )
        edit.hook_append[HOOK] = [stmt(f"super().{HOOK}()"), guard]
        return edit.rewrite(
            f"Call `{method.name}()` from a `{HOOK}()` that extends the base's, guarded: the "
            "base's `__init__` calls it first"
        )
    except Unfixable:
        return None


def _empty_before(edit: ClassEdit, method, c: int) -> list[str]:
    """The parameters ``__init__`` creates from a constant (``nn.Parameter(torch.zeros(n))``,
    a top-level statement before ``c``, the call of ``method``) that nothing reads before
    ``method`` sets every element of them on every path (:func:`sets_every_element`; nflows
    ``LULinear``'s ``lower_entries``, ``upper_entries``, ``unconstrained_upper_diag``) are
    created with ``torch.empty``: the constant was never seen, so eager values stay the same
    (no factory that draws is replaced), and on meta nothing is computed. Returns their names."""
    ctx = edit.ctx
    body = edit.init_body
    memo = edit.memo()
    done = []
    for i in range(c):
        s = body[i]
        if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1):
            continue
        small = s.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        attr = dotted(small.targets[0].target) or ""
        if not attr.startswith("self.") or attr.count(".") != 1:
            continue
        attr = attr[5:]
        pcall = small.value
        if not (
            isinstance(pcall, cst.Call)
            and ctx.qualify(pcall.func) in PARAMETER_CLASSES
            and len(pcall.args) == 1
            and pcall.args[0].keyword is None
            and not pcall.args[0].star
        ):
            continue
        data = pcall.args[0].value
        # ``torch.zeros(n)``/``torch.ones(n)`` with positional sizes only: a constant, no draw
        if not (
            isinstance(data, cst.Call)
            and ctx.qualify(data.func) in ("torch.zeros", "torch.ones")
            and data.args
            and all(a.keyword is None and not a.star for a in data.args)
        ):
            continue
        if any(
            touches(body[j], attr, False, memo) or uses(body[j], memo)[2] for j in range(i + 1, c)
        ):
            continue
        if id(s) in edit.replace or not sets_every_element(method.node.body.body, attr, ctx):
            continue
        shape = ", ".join(render(a.value) for a in data.args)
        empty = expr(f"{torch_spelling(ctx)[0]}.empty({shape})")
        edit.replace[id(s)] = (s, [s.deep_replace(data, empty)])
        done.append(attr)
    return done


def _untouched_after_init(ctx: RuleContext, edit: ClassEdit, moved: list[int]) -> None:
    """Raise :class:`Unfixable` when code that stays touches a tensor after its first moved
    init: what runs before it (recbole's CompositePrior creates `logvar_prior` after
    `mu_prior`'s init, then inits it) sees no init of it, moved or not."""
    body = edit.init_body
    since: dict[str, int] = {}
    for i in moved:
        for c in walk_code(body[i]):
            if isinstance(c, cst.Call) and init_call(c, ctx):
                a = attr_of(c, ctx)
                if a is not None:
                    since.setdefault(a, i)
    for i, s in enumerate(body):
        if i > moved[0] and i not in moved:
            for a in sorted(since):
                hit = touches(s, a, False, edit.memo()) if i > since[a] else None
                if hit:
                    raise Unfixable(
                        f"`self.{a}` is {hit} later in `__init__`, after its in-place init"
                    )


def _own_call_at(ctx: RuleContext, edit: ClassEdit, moved: list[int]) -> cst.BaseStatement | None:
    """Where ``__init__`` calls the hook the ``moved`` inits go to, when they draw random
    numbers and code that stays draws too: a new hook, called where the draws were (the last
    moved statement), when nothing between them draws; else None (called last: unsafe)."""
    body = edit.init_body
    first, last = moved[0], moved[-1]
    if all(draws(body[i], ctx) is Draws.NEVER for i in moved):
        return None
    rest = [s for i, s in enumerate(body) if i > first and i not in moved]
    between = [body[i] for i in range(first + 1, last) if i not in moved]
    if all(draws(s, ctx) is Draws.NEVER for s in rest):
        return None
    if (
        HOOK not in edit.cls.methods
        and not edit.taken(HOOK)
        and edit.hook_calls(HOOK) == ([], False)
        and all(draws(s, ctx) is Draws.NEVER for s in between)
    ):
        return body[last]  # a new hook, called where the draws were: same order
    edit.unsafe.append(
        "random draws move after other random draws of `__init__`: eager values differ"
    )
    return None


def move_own(ctx: RuleContext, edit: ClassEdit, message: str | None = None) -> Rewrite:
    """Move every statement of ``__init__`` that only initialises the module's own tensors in
    place, in order, into ``reset_parameters()``. The hook is called last in ``__init__``; when
    that would move random draws after other draws and the hook is new, it is called where the
    last moved statement was instead (the draws keep their order)."""
    body = edit.init_body
    moved = [i for i, s in enumerate(body) if init_only(s, ctx)]
    _refuse_rescaling(edit, ctx, [body[i] for i in moved])
    first, last = moved[0], moved[-1]
    calls, nested = edit.hook_calls(ROOT_HOOK)
    if ROOT_HOOK in edit.cls.methods and HOOK not in edit.cls.methods:
        if len(calls) == 1 and not nested and calls[0] < first:
            # under timm's protocol a module with an ``init_weights()`` is initialised by it
            # alone: the own init joins it (with any children's init, in order)
            return children_first(ctx, edit)

    _untouched_after_init(ctx, edit, moved)
    call_at = _own_call_at(ctx, edit, moved)
    stmts = take(edit, body, moved)
    # stores that replaced a removed statement keep its blank lines
    edit.use_hook(HOOK, last, stmts, call_at=call_at)
    n = len(moved)
    return edit.rewrite(
        message or f"Move {n} in-place init statement{'s' if n != 1 else ''} into `{HOOK}()`"
    )


def _init_run(ctx: RuleContext, stmts: list, first) -> tuple[int, list]:
    """The run of in-place init statements of a block (``stmts``) holding ``first``: where it
    starts, and its statements."""
    at = next(i for i, s in enumerate(stmts) if s is first)
    while at > 0 and init_only(stmts[at - 1], ctx):
        at -= 1
    run = []
    for s in stmts[at:]:
        if not init_only(s, ctx):
            break
        run.append(s)
    return at, run


def _untouched_after_run(edit: ClassEdit, attrs: set[str], after: list, index: int) -> None:
    """Raise :class:`Unfixable` when code after a run of in-place inits (``after``, then the
    top-level statements after ``index``) touches a tensor they init."""
    memo = edit.memo()
    for s in after:
        for a in sorted(attrs):
            hit = touches(s, a, False, memo)
            if hit:
                raise Unfixable(f"`self.{a}` is {hit} later in `__init__`, after its in-place init")
    for a in sorted(attrs):
        later = edit.used_after(a, index)
        if later:
            raise Unfixable(later)


def _moved_in_block(edit: ClassEdit, s, index: int, *, guard: bool) -> cst.BaseStatement:
    """In-place init statement ``s`` of a block, removed from it, as the hook runs it
    (``guard``: when its tensor is there)."""
    edit.replace[id(s)] = (s, [])
    new = edit.store_names(s, s, index).with_changes(leading_lines=())
    written = uses(s, edit.memo())[0]
    if len(written) != 1:
        raise Unfixable("an in-place init statement writes several tensors")
    (a,) = written
    return guarded(f"getattr(self, {a!r}, None) is not None", new) if guard else new


def move_own_in_block(ctx: RuleContext, edit: ClassEdit, first, index: int, what: str) -> Rewrite:
    """In-place init of own tensors inside a block of top-level statement ``index``: the run of
    in-place init statements of that block holding ``first`` moves, in order, into
    ``reset_parameters()``, guarded so that it runs when the block ran:

    - by its tensor being there, when the block creates it and nothing else does (timm
      mvitv2's ``if rel_pos: self.rel_pos_h = nn.Parameter(torch.zeros(..))`` then
      ``trunc_normal_tf_(self.rel_pos_h, std=0.02)``);
    - else by the block's own condition, read again in the hook (monai ``PatchEmbeddingBlock``:
      ``position_embeddings`` is made before the ``if``, ``trunc_normal_`` runs only in the
      ``elif self.pos_embed_type == "learnable":`` branch, and the ``"sincos"`` branch
      replaces it with a fixed table that a guard on the tensor being there would overwrite).

    A value created before it stays (dead: on meta it costs nothing). When the hook is new and
    ``__init__`` draws random numbers after the block, the hook is called right after the
    block, so the draws keep their order; else it is called last (unsafe when something after
    the run draws). ``what`` starts the message."""
    found = edit.path_of(first)
    block = found[1][-2] if found and len(found[1]) > 1 else None
    if not isinstance(block, cst.IndentedBlock):
        raise Unfixable("the in-place init is not a statement of a block")
    stmts = list(block.body)
    at, run = _init_run(ctx, stmts, first)
    memo = edit.memo()
    attrs = {a for s in run for a in uses(s, memo)[0]}
    after = [*stmts[at + len(run) :], *edit.block_tail(block)]
    _untouched_after_run(edit, attrs, after, index)
    made_here = all(_created_on(found[1], run[0], a) and made_once(edit, a) for a in attrs)
    condition = None if made_here else _branch_condition(edit, found[1], index)
    moved = [_moved_in_block(edit, s, index, guard=condition is None) for s in run]
    if condition is not None:
        node = stmt("if True:\n    pass\n")
        moved = [node.with_changes(test=condition, body=node.body.with_changes(body=moved))]
    random = not all(draws(s, ctx) is Draws.NEVER for s in run)
    if not all(draws(s, ctx) is Draws.NEVER for s in after):
        edit.unsafe.append(
            "random draws move after other random draws of `__init__`: eager values differ"
        )
    if (
        random
        and not edit.draws_nothing_after(index)
        and HOOK not in edit.cls.methods
        and not edit.taken(HOOK)
        and edit.hook_calls(HOOK) == ([], False)
    ):
        # a new hook, called right after the block: the draws keep their order
        edit.check_bases(HOOK)
        call_after(edit, index, False, HOOK)
        edit.hook_call_added.add(HOOK)
        random = False
    edit.use_hook(HOOK, index, moved, random=random)
    n = len(run)
    return edit.rewrite(
        f"{what} {'that init' if n == 1 else f'those {n} init statements'} into `{HOOK}()`, "
        "in order"
    )


def _created_on(path: list, line: cst.CSTNode, attr: str) -> bool:
    """Is ``self.<attr>`` assigned in a block on ``path`` (from the top-level statement down
    to ``line``) before the statement of that block that leads to ``line``?"""
    for k in range(1, len(path)):
        block, child = path[k - 1], path[k]
        if isinstance(block, cst.IndentedBlock):
            for st in block.body:
                if st is child:
                    break
                if creates_child(st, attr):
                    return True
    return False


def _branch_tests(path: list) -> list[tuple[cst.BaseExpression, bool]]:
    """The tests of the ``if``/``elif`` chain on ``path``, each with whether its branch or its
    ``else`` is taken (see :func:`_branch_condition`)."""
    parts: list[tuple[cst.BaseExpression, bool]] = []
    for k, n in enumerate(path[:-1]):
        nxt = path[k + 1]
        if isinstance(n, (cst.For, cst.While, cst.Try, cst.FunctionDef, cst.ClassDef)):
            raise Unfixable("the in-place init is inside a loop, `try` or nested function")
        if not isinstance(n, cst.If):
            continue
        if nxt is n.body:
            parts = [p for p in parts if not _exclusive(p, n.test)]
            parts.append((n.test, True))
        elif nxt is n.orelse:
            parts.append((n.test, False))
    if not parts:
        raise Unfixable("the in-place init is inside a block that is not a branch of an `if`")
    return parts


def _branch_condition(edit: ClassEdit, path: list, index: int) -> cst.BaseExpression:
    """The condition under which the block at the end of ``path`` runs, as the hook reads it:
    the tests of the ``if``/``elif`` chain on the path (``not`` the tests of the branches
    before it, left out when they compare the same expression with another literal, as
    ``elif self.pos_embed_type == "learnable":`` after ``if self.pos_embed_type == "none":``),
    with the constructor arguments they read kept on ``self``. Raises :class:`Unfixable` when
    the hook could not read it as ``__init__`` did."""
    top = edit.init_body[index]
    parts = _branch_tests(path)
    memo = edit.memo()
    written_here, _r, _c = uses(top, memo)
    bound = binds(top, edit.ctx.qualify) - {"self"}
    for test, _pos in parts:
        _w, read, calls = uses(test, memo)
        if (
            calls
            or draws(test, edit.ctx) is not Draws.NEVER
            or any(
                isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute)
                for c in walk_code(test)
            )
        ):
            # ``if self.mask.any():`` would read a tensor that ``to_empty()`` wiped
            raise Unfixable("the block's condition calls a method or draws random numbers")
        for a in sorted(read):
            if a in written_here or edit.used_after(a, index, writes_only=True):
                raise Unfixable(f"the block's condition reads `self.{a}`, which `__init__` changes")
        if {x.value for x in names_in(test)} & bound:
            raise Unfixable("the block's condition reads a local that the block changes")
    code = " and ".join(
        (f"({render(t)})" if len(parts) > 1 and isinstance(t, _LOOSE) else render(t))
        if pos
        else f"not ({render(t)})"
        for t, pos in parts
    )
    # ``self.pos_embed_type == "learnable"``: compared with a string, it is no tensor (monai
    # sets it from ``look_up_option(..)``, a function that may return anything)
    strings = {
        dotted(side)[5:]
        for test, _pos in parts
        for c in walk_code(test)
        if isinstance(c, cst.Comparison) and len(c.comparisons) == 1
        for side, other in (
            (c.left, c.comparisons[0].comparator),
            (c.comparisons[0].comparator, c.left),
        )
        if isinstance(other, cst.SimpleString)
        and (dotted(side) or "").count(".") == 1
        and (dotted(side) or "").startswith("self.")
    }
    return edit.store_names(expr(code), top, index, not_tensors=frozenset(strings))


_LOOSE = (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)


def _exclusive(earlier: tuple[cst.BaseExpression, bool], test: cst.BaseExpression) -> bool:
    """Is the negated ``earlier`` test implied by ``test`` (``x == "none"`` when the branch's
    test is ``x == "learnable"``)? Then it adds nothing to the branch's condition."""
    t, positive = earlier
    if positive:
        return False

    def eq(c):
        if (
            isinstance(c, cst.Comparison)
            and len(c.comparisons) == 1
            and isinstance(c.comparisons[0].operator, cst.Equal)
            and isinstance(c.comparisons[0].comparator, (cst.SimpleString, cst.Integer))
        ):
            return render(c.left), c.comparisons[0].comparator.evaluated_value
        return None

    a, b = eq(t), eq(test)
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]
