"""ML010 parent-applied-init: move the parent's init of its children into the root hook.

``self.apply(self._init_weights)`` (timm's ``named_apply(partial(_init_weights, ...), self)``,
torchvision's ``for m in self.modules(): ...``) in ``__init__`` becomes a root
``init_weights()``, the protocol timm 1.0 and transformers already follow::

    self.head = nn.Linear(dim, n)
    self.init_weights()                  # where the statement was

    def init_weights(self) -> None:
        self.apply(self._init_weights)

After ``to_empty()`` the model's ``init_weights()`` runs after its children's own hooks
(children first), so the parent's law wins, as it does eagerly. The statement stays where it
ran (the call takes its place), so eager construction draws the same random numbers in the same
order: the fix is safe. A statement alone in an ``if`` with the locals it reads (timm Hiera's
``if weight_init != 'skip':``) moves with its ``if``. Constructor arguments the statement reads are kept on ``self`` under a private name
(``self._zero_init_last``: the applied function may test ``hasattr(module, "zero_init_last")``).
A loop right after it that goes on with the children's init through a method of theirs (timm
ConVit's ``for n, m in self.named_modules(): if hasattr(m, 'local_init'): m.local_init()``)
moves with it, in order (:func:`_module_method_loop`).

A private method of ``__init__``'s (``self._init_params()``) that applies the init is called
from a new ``init_weights()`` in the same way. A class that already has an ``init_weights()``
that ``__init__`` calls earlier (the library's, or one ML003's fix made for the children's
tensors) gets the statement at its end, and the call moves to where the statement was, when
nothing between draws random numbers, calls a method or reads a tensor: the init runs in the
same order. Its safe fix goes before an unsafe ML003 fix of the same class (``fix.apply``), so
the in-place inits around the statement then join the new hook in the order they ran (timm
HieraDet). Not fixable: a call already inside ``init_weights()`` (timm's protocol replays it),
other classes with an ``init_weights()`` (merge by hand), and a statement inside a loop,
``with`` or ``try``.
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import Rewrite, Unfixable, render, stmt
from metalint.fix.recompute import draws_or_builds, local_only
from metalint.fix.root_hook import (
    bound_names,
    new_hook,
    own_hook_first,
    own_hook_last,
    through_method,
)
from metalint.static.names import dotted
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.vocabulary import (
    PARAMETER_FREE_LAYERS,
    RESET_HOOK,
    ROOT_ENTRIES,
    TORCH_WITHOUT_RESET,
)

CODE = "ML010"
BLOCKS = (cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef, cst.Lambda)


HOOK = ROOT_ENTRIES[0]


def _in_init(edit: ClassEdit, site, index: int, path) -> Rewrite:
    moved = site.statement
    if moved is None:
        raise Unfixable("the call is part of a larger statement")
    for n in path:
        if n is moved:
            break
        if isinstance(n, BLOCKS):
            raise Unfixable("the statement is inside a loop, `with`, `try` or nested function")
    moved = _with_its_if(edit, moved, index)
    _no_child_created_after(edit, moved, index, site.children)
    then = _module_method_loop(edit, index + 1) if moved is edit.init_body[index] else None
    first = []
    tail = None
    if HOOK in edit.cls.methods:
        if edit.join_called_hook(HOOK, index, index, set()) > index:
            raise Unfixable(
                f"`{edit.cls.name}` already has an `{HOOK}()`, called later: merge this init "
                "into it by hand"
            )
    else:
        new_hook(edit)
        first = own_hook_first(edit, index, index, set())
        tail = None if first else own_hook_last(edit, index, {index})
    edit.replace[id(moved)] = (moved, [])
    body = edit.store_names(moved, moved, index, bound=bound_names(moved), private=True)
    stores = edit.replace[id(moved)][1]
    # blank lines above go above the group, comments stay with the call (``expand``)
    at = moved if tail is None else tail
    call = stmt(f"self.{HOOK}()").with_changes(leading_lines=at.leading_lines)
    if tail is None:
        edit.replace[id(moved)] = (moved, [*stores, call])
    else:
        edit.replace[id(moved)] = (moved, stores)
        edit.replace[id(tail)] = (tail, [call])
    last = [stmt(f"self.{RESET_HOOK}()")] if tail is not None else []
    follow = []
    if then is not None:
        edit.replace[id(then)] = (then, [])
        follow = [then.with_changes(leading_lines=())]
    edit.hook_append[HOOK] = [*first, body.with_changes(leading_lines=()), *follow, *last]
    return edit.rewrite(f"Move the children's init into a root `{HOOK}()` called from `__init__`")


def _module_method_loop(edit: ClassEdit, i: int) -> cst.For | None:
    """Statement ``i`` of ``__init__`` when it goes on with the parent's init of its children
    by a method of theirs (timm ConVit, right after ``self.apply(self._init_weights)``: ``for
    n, m in self.named_modules(): if hasattr(m, 'local_init'): m.local_init()``, which sets
    GPSA's ``v.weight`` to the identity over the law just applied): a loop over
    ``self.modules()``/``self.named_modules()`` whose body only calls, when the module has it,
    a method without arguments that a class of this file defines and that assigns no
    attribute (it writes tensors in place). The root ``init_weights()`` takes it with the
    applied init, in order; else the protocol applies the law and never the method."""
    body = edit.init_body
    if i >= len(body) or not isinstance(body[i], cst.For):
        return None
    loop = body[i]
    it = loop.iter
    if not (
        isinstance(it, cst.Call)
        and dotted(it.func) in ("self.modules", "self.named_modules")
        and not it.args
        and loop.orelse is None
    ):
        return None
    target = loop.target.elements[-1].value if isinstance(loop.target, cst.Tuple) else loop.target
    if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
        return None
    m = target.value
    inner = loop.body.body
    if len(inner) != 1 or not isinstance(inner[0], cst.If) or inner[0].orelse is not None:
        return None
    test, then = inner[0].test, inner[0].body
    if not (
        isinstance(test, cst.Call)
        and dotted(test.func) == "hasattr"
        and len(test.args) == 2
        and dotted(test.args[0].value) == m
        and isinstance(then, cst.IndentedBlock)
        and len(then.body) == 1
        and isinstance(then.body[0], cst.SimpleStatementLine)
        and len(then.body[0].body) == 1
        and isinstance(then.body[0].body[0], cst.Expr)
    ):
        return None
    name = test.args[1].value
    call = then.body[0].body[0].value
    method = name.evaluated_value if isinstance(name, cst.SimpleString) else None
    if not (isinstance(call, cst.Call) and not call.args and dotted(call.func) == f"{m}.{method}"):
        return None
    defs = [c.methods[method] for c in edit.ctx.facts.classes if method in c.methods]
    if not defs or any(
        t.count(".") == 1 and t.startswith("self.") for d in defs for t in _assigned(d.node)
    ):
        return None
    return loop


def _assigned(fn: cst.FunctionDef) -> list[str]:
    """The plain targets a function assigns (``self.x``, ``x``; not ``t[i]`` or ``t.data``
    chains, which write a tensor in place)."""
    out = []
    for n in walk_code(fn.body):
        if isinstance(n, cst.Assign):
            out += [dotted(t.target) or "" for t in n.targets]
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
            out.append(dotted(n.target) or "")
    return out


#: what in a statement reaches every module of ``self``
_WHOLE_SELF = ("self.modules(", "self.named_modules(", "self.children(", "self.apply(", ", self)")


def _no_child_created_after(
    edit: ClassEdit, moved: cst.BaseStatement, index: int, children: frozenset[str]
) -> None:
    """Refuse when ``__init__`` creates, after the statement ran, a child the statement would
    reach when replayed (pypots' SCINet: ``for m in self.modules(): ... elif isinstance(m,
    nn.Linear): m.bias.data.zero_()``, then ``self.div_projection = nn.ModuleList()`` filled
    with ``nn.Linear`` modules): eagerly that child keeps its own init, but ``init_weights()``,
    replayed after construction, would initialise it too. A child that holds no tensor
    (``nn.Dropout``), or a torch layer none of the loop's ``isinstance`` tests names (an
    ``nn.Linear`` after a loop over convolutions and norms: torchvision's ResNet), is not
    reached."""
    text = render(moved)
    whole = any(w in text for w in _WHOLE_SELF)
    tested = _isinstance_types(moved, edit) if isinstance(moved, cst.For) else None
    for later in edit.init_body[index + 1 :]:
        for n in walk_code(later):
            if not isinstance(n, (cst.Assign, cst.AnnAssign)):
                continue
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            for t in targets:
                name = dotted(t)
                if not name or name.count(".") != 1 or not name.startswith("self."):
                    continue
                attr = name[5:]
                if attr not in children or not (whole or f"self.{attr}" in text):
                    continue
                built = edit.ctx.qualify(n.value.func) if isinstance(n.value, cst.Call) else None
                if built in PARAMETER_FREE_LAYERS:
                    continue
                if (
                    tested is not None
                    and built is not None
                    and built.startswith("torch.nn.")
                    and built not in TORCH_WITHOUT_RESET
                    and built not in tested
                ):
                    continue
                raise Unfixable(
                    f"`self.{attr}` is created after it in `__init__`: replayed after "
                    f"construction, `{HOOK}()` would initialise that child too"
                )


def _isinstance_types(loop: cst.For, edit: ClassEdit) -> set[str] | None:
    """The classes the loop's ``isinstance`` tests name, qualified; None when one is not a
    public torch layer (a base class may match many) or there is none."""
    out: set[str] = set()
    for n in walk_code(loop.body):
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Name)
            and n.func.value == "isinstance"
            and len(n.args) == 2
        ):
            kinds = n.args[1].value
            items = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
            for e in items:
                q = edit.ctx.qualify(e)
                if not q or not q.startswith("torch.nn.") or q.rpartition(".")[2].startswith("_"):
                    return None
                out.add(q)
    return out or None


def _with_its_if(edit: ClassEdit, moved: cst.BaseStatement, index: int) -> cst.BaseStatement:
    """The top-level ``if`` of ``__init__`` holding ``moved`` when the rest of its block only
    computes locals (timm Hiera/HieraDet: ``if weight_init != 'skip': init_fn = ...;
    named_apply(init_fn, self)``): the hook gets the whole ``if``, so it tests the condition
    as ``__init__`` did; moving the call alone left a hook reading ``self._init_fn``, which
    the ``'skip'`` branch never set (``init_weights()`` then raised AttributeError). Else
    ``moved`` itself."""
    top = edit.init_body[index]
    if not isinstance(top, cst.If) or top.orelse is not None:
        return moved
    if not isinstance(top.body, cst.IndentedBlock) or not any(s is moved for s in top.body.body):
        return moved
    others = [s for s in top.body.body if s is not moved]
    if all(local_only(s, edit) for s in others) and not draws_or_builds(top.test, edit):
        return top
    return moved


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    site = finding.site
    if site.base is not None:
        # ``self._finish()`` of a base class: the init is in the base's method
        raise Unfixable(f"the init is in `{site.base}()` of a base class")
    edit = ClassEdit(ctx, cls)
    found = edit.path_of(finding.node)
    if found is None:
        owner = site.method if cls.methods.get(site.method.name) is site.method else None
        return through_method(edit, owner)
    index, path = found
    return _in_init(edit, site, index, path)
