"""ML008 data-dependent-init: a constant read during construction is computed on the CPU.

``dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]`` (timm/monai stochastic
depth) raises under ``with torch.device("meta")``: the linspace lands on meta and has no data.
The values it reads are constants computable on the CPU, so the factory they come from gets
``device="cpu"``: ``torch.linspace(0, drop_path_rate, depth, device="cpu")``. That temporary is
real and small and freed after the read; what the module keeps is unchanged.

The rule hands the factories that create the tensor whose value is read, followed back
through arithmetic, tensor methods, torch functions, indexing, locals and loop variables
(``ReadSite.origin``, :mod:`metalint.static.origins`). Two shapes of rewrite:

- the tensor only feeds reads of its value (and shape queries): each factory gets
  ``device="cpu"`` in place;
- a local also flows elsewhere (PyG's ``GaussianSmearing``: ``offset`` is read by
  ``(offset[1] - offset[0]).item()`` and registered as a buffer): a CPU twin
  ``offset_cpu = torch.linspace(..., device="cpu")`` is inserted after it and every read of
  the local's value in ``__init__`` uses the twin; the buffer stays on meta. A local
  assigned again after the reads takes its twin from the assignment they see (timm
  ``DistributionBalancedLoss``'s check of ``counts`` before ``counts = counts.clamp(...)``);
  a condition's tensor (``if (counts < 0).any():``) is itself the read.

Refused (reported with the reason): a factory that draws random numbers (a meta build does not
advance the CPU generator as the eager one does, so the values read would differ), that
allocates uninitialised memory, that already names a device, or takes ``*args``/``**kwargs``;
a value read from the module's own tensors, a tensor argument, a copy to a device in the
chain; a read outside ``__init__``'s body.

Safe: under the default CPU device the factory made a CPU tensor already, so every value read
and every tensor of the module is bit-identical (on a CUDA default device the constant is now
computed by the CPU kernel, like the meta build does).
"""

from __future__ import annotations

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import Rewrite, Unfixable, guarded, path_to, render, stmt, with_device
from metalint.static.model import MethodFacts
from metalint.static.names import dotted
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import META_GUARD
from metalint.vocabulary import (
    HOST_READS,
    NOT_TENSOR_METHODS,
)

#: attribute reads of a tensor that answer the same on meta and on the CPU
SHAPE_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "is_floating_point"})


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    edit = ClassEdit(ctx, cls)
    node, site = finding.node, finding.site
    if site.distribution is not None:
        raise Unfixable(
            f"`{site.distribution}`'s constructor checks the values it is given: no rewrite "
            "keeps that check and builds on meta (hand it CPU tensors, or turn the check off "
            "with `validate_args=False` where that is enough)"
        )
    if edit.path_of(node) is None:
        return _handed_to_method(ctx, edit, cls, site)
    found = site.read
    if found is None:
        return _guard_move(edit, node, site)
    if found.kind in ("shape", "mask"):
        raise Unfixable(
            "an op whose output's shape depends on the values (`nonzero`, a boolean mask): "
            "compute the whole value on the CPU by hand"
        )
    if site.origin is None:
        raise Unfixable("the value is read outside `__init__`'s own body")
    return _on_the_cpu(ctx, edit, site.origin, list(site.init_reads))


#: why the fix stops where the rule's walk to the factories stopped (``Stop.kind``)
STOPPED = {
    "deep": "the value is computed through too many steps",
    "own": "the value is the module's own tensor `{node}`",
    "argument": "the value is computed with the tensor argument `{name}`",
    "self": "the value is computed with `{node}`",
    "expression": "the value is computed by `{node}`",
    "device": "`{node}` already names a device",
    "starred": "`{node}` takes `*args`/`**kwargs`: they may name a device",
    "random": "`{name}` draws random numbers: built on meta the CPU generator is not where it "
    "is eagerly, so the value read would differ",
    "empty": "`{name}` is uninitialised memory: its value is not a constant",
    "function": "the value comes from `{node}(...)`",
    "copy": "the value is copied with `.{name}()` on its way",
    "unbound": "`{name}` is not a local of `__init__`",
}


def _on_the_cpu(ctx, edit: ClassEdit, chain, reads) -> Rewrite:
    """Make the factories of the value read (``chain``, the site's origin) on the CPU, or, for
    a local also kept (a buffer), read a CPU twin of it where ``reads`` are."""
    init = edit.init
    stop = chain.stop
    if stop is not None:
        node = render(stop.node) if stop.node is not None else ""
        raise Unfixable(STOPPED[stop.kind].format(node=node, name=stop.name))
    if not chain.roots:
        raise Unfixable("no factory of the value was found")
    only_read = _only_read(init, chain, reads)
    shared = [name for name in chain.locals if name not in only_read]
    for name, loop in chain.loops.items():
        if not all(_inside(use, reads) for use in uses(loop, name)):
            raise Unfixable(f"the loop variable `{name}` is kept, not only read")
    if shared:
        return _twin(ctx, edit, chain, shared, reads)
    calls = {id(c): _on_cpu(c) for c in chain.roots}
    _replace_calls(edit, calls)
    return edit.rewrite(
        'Create the constant with `device="cpu"`: its value is read during construction, and '
        'under `torch.device("meta")` a factory without a device has no data'
    )


def _handed_to_method(ctx: RuleContext, edit: ClassEdit, cls, site) -> Rewrite:
    """The value is read in a method ``__init__`` calls with a tensor it made (spikingjelly's
    ``ActivationAwareIFNode``: ``self._check_threshold(threshold)``, a staticmethod testing
    ``torch.isfinite(v_threshold).all()``). When the method only tests it (it sets nothing on
    ``self`` and returns nothing), the call is handed a CPU copy made by the same factories,
    as a read in ``__init__`` would be: the same values, so the same outcome."""
    init, method = edit.init, site.method
    if method is init or cls.methods.get(method.name) is not method or not site.params:
        raise Unfixable("the value is read outside `__init__`'s own body")
    if _sets_or_returns(method.node):
        raise Unfixable(
            f"`{method.name}()` does more than test the tensor it is handed (it sets, returns "
            "or hands on something)"
        )
    args = list(site.handed)
    if not args or any(edit.path_of(a) is None for a in args):
        raise Unfixable(f"`{method.name}()` is handed the tensor elsewhere than in `__init__`")
    return _on_the_cpu(ctx, edit, site.origin, [*site.init_reads, *args])


def _sets_or_returns(fn: cst.FunctionDef) -> bool:
    """Does the method assign anything but a local name, return a value or call a method of
    ``self``?"""
    for n in walk_code(fn.body):
        if isinstance(n, cst.Assign):
            if any(not isinstance(t.target, cst.Name) for t in n.targets):
                return True
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            if not isinstance(n.target, cst.Name):
                return True
        elif isinstance(n, cst.Return) and n.value is not None:
            return True
        elif isinstance(n, cst.Call) and (dotted(n.func) or "").startswith("self."):
            return True
    return False


def _guard_move(edit: ClassEdit, node: cst.Call, site) -> Rewrite:
    """``self.to(self.device)`` at the end of ``__init__`` (peft's ``MontecloraSampler``)
    runs only when no tensor of the module is on meta, as peft guards its own moves of adapters
    (``if not any(p.device == meta for p in module.parameters()): module.to(weight.device)``).
    Eagerly no tensor is on meta, so the move runs as before (safe); under
    ``torch.device("meta")`` the copy, which raised, is skipped and the caller places the
    module (``to_empty(device=...)``)."""
    edit.locate(node)  # refuses a move inside a loop, `with` or `try`
    if site.cast:
        raise Unfixable(
            "the move is chained to a cast of the module (`self.half().cuda()`): skipping it on "
            "meta would skip the cast too"
        )
    line = site.statement
    if line is None:
        raise Unfixable("the move is part of a larger statement")
    inner = line.with_changes(leading_lines=())
    new = guarded(META_GUARD, inner).with_changes(leading_lines=line.leading_lines)
    edit.replace[id(line)] = (line, [new])
    return edit.rewrite(
        f"Run `{render(node)}` only when no tensor of the module is on meta: under "
        '`torch.device("meta")` the caller places the module with `to_empty()`'
    )


def _only_read(init: MethodFacts, chain, reads) -> set[str]:
    """The locals of the chain whose every use is inside a read, or inside the value of
    another such local (``win = torch.as_tensor(window)``, ``n = torch.prod(win)``, then only
    ``torch.ones(n)`` and ``.view(n, 1)``: both are only read, and their factories can move
    to the CPU in place)."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name in chain.locals:
            if name in found:
                continue
            feeds = [v for other in found for _s, v in chain.locals[other]]
            if all(_inside(use, reads) or _inside(use, feeds) for use in uses(init.node, name)):
                found.add(name)
                changed = True
    return found


def uses(scope: cst.CSTNode, name: str) -> list[cst.Name]:
    """The Name nodes of ``scope`` that read variable ``name`` (not the targets binding it);
    a shape query (``t.shape``, ``t.size(0)``, ``len(t)``) is not a use of its value."""
    bound: set[int] = set()
    shape: set[int] = set()
    for n in walk_code(scope):
        if isinstance(n, (cst.AssignTarget, cst.For, cst.CompFor)):
            bound.update(id(x) for x in walk_code(n.target) if isinstance(x, cst.Name))
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            bound.update(id(x) for x in walk_code(n.target) if isinstance(x, cst.Name))
        elif isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name):
            if n.attr.value in SHAPE_ATTRIBUTES or n.attr.value in NOT_TENSOR_METHODS - set(
                HOST_READS
            ):
                shape.add(id(n.value))
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len":
            if n.args and isinstance(n.args[0].value, cst.Name):
                shape.add(id(n.args[0].value))
    return [
        n
        for n in walk_code(scope)
        if isinstance(n, cst.Name)
        and n.value == name
        and id(n) not in bound
        and id(n) not in shape
        and not _attribute_name(scope, n)
    ]


def _attribute_name(scope: cst.CSTNode, name: cst.Name) -> bool:
    """``x`` in ``self.x`` / ``t.x``, or a keyword name: not a variable."""
    for n in walk_code(scope):
        if isinstance(n, cst.Attribute) and n.attr is name:
            return True
        if isinstance(n, cst.Arg) and n.keyword is name:
            return True
    return False


def _inside(node: cst.CSTNode, reads: list[cst.BaseExpression]) -> bool:
    return any(path_to(r, node) is not None for r in reads)


def _on_cpu(call: cst.Call) -> cst.Call:
    """``call`` with ``device="cpu"`` added as its last argument."""
    return with_device(call, cst.SimpleString('"cpu"'))


class _Replace(cst.CSTTransformer):
    def __init__(self, replace: dict[int, cst.CSTNode]):
        self.replace = replace

    def on_leave(self, original_node, updated_node):
        return self.replace.get(id(original_node), updated_node)


def _statement(edit: ClassEdit, node: cst.CSTNode) -> cst.BaseStatement:
    """The innermost statement of ``__init__`` holding ``node``."""
    found = edit.path_of(node)
    if found is None:
        raise Unfixable("the value is not created in `__init__`'s own body")
    _i, path = found
    stmts = [n for n in path if isinstance(n, cst.BaseStatement)]
    for n in path:
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            raise Unfixable("the value is created in a nested function")
    return stmts[-1]


def _replace_calls(edit: ClassEdit, new: dict[int, cst.CSTNode], nodes=None) -> None:
    """Replace nodes (by id) inside the statements of ``__init__`` holding them; a statement
    holding another one to change is rewritten as a whole."""
    nodes = nodes if nodes is not None else _nodes_by_id(edit, new)
    stmts: dict[int, cst.BaseStatement] = {}
    for n in nodes:
        s = _statement(edit, n)
        stmts[id(s)] = s
    outer = [
        s
        for s in stmts.values()
        if not any(o is not s and path_to(o, s) is not None for o in stmts.values())
    ]
    for s in outer:
        edit.replace[id(s)] = (s, [s.visit(_Replace(new))])


def _nodes_by_id(edit: ClassEdit, new: dict[int, cst.CSTNode]) -> list[cst.CSTNode]:
    return [n for n in walk_code(edit.init.node) if id(n) in new]


def _twin(ctx: RuleContext, edit: ClassEdit, chain, shared: list[str], reads) -> Rewrite:
    """A CPU copy of each shared local, created after it; the reads of the local use it."""
    init = edit.init
    replace: dict[int, cst.CSTNode] = {}
    inserts: list[tuple[cst.BaseStatement, cst.BaseStatement]] = []
    roots = {id(r) for r in chain.roots}
    for name in shared:
        at, value = _reaching(edit, name, chain.locals[name], reads)
        line = next(
            (s for s in edit.init_body if isinstance(s, cst.SimpleStatementLine) and at in s.body),
            None,
        )
        if line is None or len(line.body) != 1:
            raise Unfixable(f"`{name}` is not assigned by a statement of its own in `__init__`")
        inner = {id(n): _on_cpu(n) for n in walk_code(value) if id(n) in roots}
        if not inner or any(
            isinstance(n, cst.Name) and n.value in chain.locals for n in walk_code(value)
        ):
            raise Unfixable(f"`{name}` is computed from other locals and also kept")
        twin = _free_name(init, f"{name}_cpu")
        copy = stmt(f"{twin} = {render(value.visit(_Replace(inner)))}")
        inserts.append((line, copy))
        used = [use for use in uses(init.node, name) if _inside(use, reads)]
        if not used:
            raise Unfixable(f"`{name}` is kept and reaches the read through other locals")
        for use in used:
            replace[id(use)] = cst.Name(twin)
    # the reads (and the roots of non-shared locals) change in place, then the twins go in
    for r in chain.roots:
        if not any(path_to(v, r) is not None for n in shared for _s, v in chain.locals[n]):
            replace[id(r)] = _on_cpu(r)
    _replace_calls(edit, replace)
    for line, copy in inserts:
        old = edit.replace.get(id(line), (line, [line]))[1]
        edit.replace[id(line)] = (line, [*old, copy])
    names = ", ".join(f"`{n}`" for n in shared)
    return edit.rewrite(
        f'Read a copy of {names} created with `device="cpu"`: its value is read during '
        'construction, and under `torch.device("meta")` a factory without a device has no data'
    )


def _reaching(edit: ClassEdit, name: str, values: list, reads) -> tuple:
    """The one assignment of local ``name`` whose value every read of it sees: the only one,
    or, for a local assigned again later (timm ``DistributionBalancedLoss``: ``counts =
    torch.as_tensor(class_counts, ...)``, the check ``(counts < 0).any()``, then ``counts =
    counts.clamp(...)``), the top-level statement of ``__init__`` that assigns it last before
    the reads, when no assignment comes between it and them."""
    if len(values) == 1:
        return values[0]
    tops = {id(t): i for i, t in enumerate(edit.init_body)}
    where = []
    for at, value in values:
        line = next(
            (t for t in edit.init_body if isinstance(t, cst.SimpleStatementLine) and at in t.body),
            None,
        )
        if line is None:
            raise Unfixable(f"the local `{name}` is assigned more than once and also kept")
        where.append((tops[id(line)], at, value))
    used = [
        found[0]
        for use in uses(edit.init.node, name)
        if _inside(use, reads) and (found := edit.path_of(use)) is not None
    ]
    if not used:
        raise Unfixable(f"the local `{name}` is assigned more than once and also kept")
    before = [w for w in where if w[0] < min(used)]
    if not before or any(min(used) <= w[0] <= max(used) for w in where):
        raise Unfixable(f"the local `{name}` is assigned more than once and also kept")
    _i, at, value = max(before, key=lambda w: w[0])
    return at, value


def _free_name(init: MethodFacts, name: str) -> str:
    taken = {n.value for n in walk_code(init.node) if isinstance(n, cst.Name)}
    cand, i = name, 2
    while cand in taken:
        cand, i = f"{name}{i}", i + 1
    return cand
