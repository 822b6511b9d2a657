"""Storing values a hook recomputes: the locals they read kept on ``self``
(:class:`Storing`, part of :class:`metalint.fix.codemod.ClassEdit`), locals inlined
(:func:`inline_locals`)."""

from __future__ import annotations

import libcst as cst

from metalint.fix.edits import (
    Unfixable,
    expr,
    names_in,
    paren,
    path_to,
    render,
    self_attr_expr,
    stmt,
    substitute,
    torch_spelling,
)
from metalint.fix.flow import NESTING
from metalint.fix.locate import Locating
from metalint.static.model import ClassFacts, MethodFacts
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensor_kind import (
    CONTAINERS,
    binds,
    changed_in_place,
    class_tensors,
)
from metalint.static.tensors import (
    value_kind,
)
from metalint.vocabulary import (
    MODULE_MEMBERS,
    TENSOR_METHODS,
)


class Storing(Locating):
    """Values a hook recomputes, with the locals they read kept on ``self`` (part of
    :class:`metalint.fix.codemod.ClassEdit`)."""

    replace: dict

    def store_names(
        self,
        value,
        before: cst.BaseStatement,
        index: int,
        bound=frozenset(),
        private=False,
        not_tensors=frozenset(),
    ):
        """``value`` with the local names it reads replaced by ``self.<attr>``; the statements
        that store those attributes are inserted before ``before``. Names in ``bound`` are
        bound by the moved code itself (a loop variable) and stay as they are; ``private``
        stores them as ``self._<name>`` (code applied to every module may test ``hasattr``).
        ``not_tensors``: attributes of ``self`` known not to be tensors (compared with a
        string)."""
        init = self.init
        replace: dict[int, cst.BaseExpression] = {}
        stores: list[cst.BaseStatement] = []
        chosen: dict[str, str] = {}
        receivers = _tensor_receivers(value)
        for name in list(names_in(value)):
            n = name.value
            if n == "self" or n in bound:
                continue
            if n not in init.arguments and n not in init.local_values:
                continue  # a builtin, an import, a class or a module-level name: still there
            if n in init.local_values:
                self._refuse_local(name, receivers)
            if n not in chosen:
                attr, new = self.attr_for(n, index, private)
                chosen[n] = attr
                if new:
                    stores.append((n, stmt(f"self.{attr} = {n}")))
            replace[id(name)] = self_attr_expr(chosen[n])
        self.refuse_plain_reads(value, not_tensors)
        if stores:
            self.check_after_super(index)
        self._place_stores(stores, before, index)
        return substitute(value, replace)

    def _refuse_local(self, name: cst.Name, receivers: dict[str, str]) -> None:
        """Raise :class:`Unfixable` when local ``name``, read by a value a hook recomputes,
        may hold a tensor: kept on ``self`` it would stay on ``meta``."""
        init, n = self.init, name.value
        for _, v in init.local_values[n]:
            if value_kind(v, self.ctx.qualify, init):
                raise Unfixable(f"the value reads the local tensor `{n}`")
        if changed_in_place(init, n, self.ctx.qualify) and class_tensors(
            self.ctx, self.cls
        ).filled_with_tensors(name, init):
            # julius's ``LowPassFilters``: ``filters.append(filter_)`` in a loop; kept
            # as ``self._filters`` its tensors stayed on meta, and the hook raised
            raise Unfixable(f"the value reads `{n}`, filled in place with tensors")
        if n in receivers:
            # kornia ``ExplicitSpacialEncoding``: ``emb = spatial_kernel_embedding(..)``,
            # ``register_buffer("emb", emb.unsqueeze(0))``; kept as ``self._emb`` the
            # tensor stayed on meta, and the hook's copy raised after ``to_empty()``
            raise Unfixable(f"the value reads the local tensor `{n}` (`{n}.{receivers[n]}()`)")

    def _place_stores(self, stores: list, before: cst.BaseStatement, index: int) -> None:
        """Insert the stores of :meth:`store_names`. An argument is stored before the
        top-level statement that holds ``before``: the hook's guard may hold on another path
        than the block ``before`` is in (mace ``BesselBasis``: ``if trainable: self.w =
        nn.Parameter(v)`` / ``else: self.register_buffer("w", v)``; the store inside the
        ``if`` was missing on the default path and eager construction raised
        AttributeError)."""
        init = self.init
        top = self.init_body[index] if index < len(self.init_body) else before
        places: dict[int, tuple[cst.CSTNode, list]] = {}
        for n, store in stores:
            at = top if n in init.arguments and n not in init.local_values else before
            places.setdefault(id(at), (at, []))[1].append(store)
        for at, new in places.values():
            old = self.replace.get(id(at))
            current = old[1] if old else [at]
            self.replace[id(at)] = (at, new + current)

    def refuse_plain_reads(self, value, not_tensors=frozenset()) -> None:
        """Raise :class:`Unfixable` when ``value`` reads ``self.<attr>``, a plain attribute
        that may be a tensor (:meth:`plain_tensor`): a hook computing ``value`` after
        ``to_empty()`` would find it on ``meta``."""
        # ``self.cls_logits.weight``: an attribute of a module (a tensor has no ``.weight``)
        modules = {
            id(n.value)
            for n in walk_code(value)
            if type(n) is cst.Attribute
            and n.attr.value not in TENSOR_METHODS
            and n.attr.value not in ("data", "T", "mT")
        }
        for n in walk_code(value):
            if (
                type(n) is cst.Attribute
                and type(n.value) is cst.Name
                and n.value.value == "self"
                and id(n) not in modules
                and n.attr.value not in not_tensors
                and self.plain_tensor(n.attr.value)
            ):
                raise Unfixable(
                    f"the value reads `self.{n.attr.value}`, a plain attribute that may be a "
                    "tensor: it stays on `meta` after `to_empty()`, so the hook would raise"
                )

    def super_index(self) -> int | None:
        """The index of the first top-level statement of ``__init__`` that calls an
        ``__init__`` (``super().__init__()``, ``nn.Module.__init__(self)``); None: none does."""
        return next(iter(self.init_call_indices()), None)

    def init_call_indices(self) -> list[int]:
        """The index of each top-level statement of ``__init__`` that calls an ``__init__``
        (gpytorch's ``WishartPrior``: ``TModule.__init__(self)`` first, a distribution's
        ``super().__init__(...)`` later, which runs ``Module.__init__`` again)."""
        return [
            i
            for i, s in enumerate(self.init_body)
            if any(
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "__init__"
                for n in walk_code(s)
            )
        ]

    def check_after_super(self, index: int) -> None:
        """Raise :class:`Unfixable` when statement ``index`` runs before ``super().__init__()``:
        what a fix keeps on ``self`` there would be set before ``Module.__init__`` (gpytorch's
        ``Interval`` computes its bounds first, from arguments a float or a tensor: kept on
        ``self`` before it, the argument became a new plain tensor attribute, which ML007
        reported in the fixed file)."""
        first = self.super_index()
        if first is not None and index < first:
            raise Unfixable(
                "the value is computed before `super().__init__()`: nothing can be kept on "
                "`self` there"
            )

    def plain_tensor(self, attr: str, depth: int = 0) -> bool:
        """:meth:`metalint.static.tensor_kind.ClassTensors.plain_tensor` of this class."""
        return class_tensors(self.ctx, self.cls).plain_tensor(attr, depth)

    def attr_for(self, name: str, index: int, private: bool = False) -> tuple[str, bool]:
        """An attribute that holds local ``name``: an existing ``self.x = name`` before the
        statement, else a free attribute name. (attr, needs a new store). A store before a
        statement that assigns ``name`` again holds its old value: not that one."""
        last = max(
            (i for i, s in enumerate(self.init_body[:index]) if name in binds(s, self.ctx.qualify)),
            default=-1,
        )
        kept = self._kept_as(name, index, last)
        if kept is not None:
            return kept, False
        # torchani's ``_ChemModule`` has a ``symbols`` property and a ``_symbols``
        for cand in (
            (f"_{name}", f"_init_{name}") if private else (name, f"_{name}", f"_init_{name}")
        ):
            if not self.taken(cand, inherited=True):
                return cand, True
        raise Unfixable(f"no free attribute name to keep `{name}`")

    def _kept_as(self, name: str, index: int, last: int) -> str | None:
        """The attribute a top-level ``self.x = name`` after statement ``last`` and before
        ``index`` keeps ``name`` in (in ``__init__``, or stored by this edit), or None."""
        for s in self.init_body[last + 1 : index]:
            if isinstance(s, cst.SimpleStatementLine):
                for small in s.body:
                    t = _stores_name(small, name)
                    if t is not None:
                        return t
        top = self.init_body[index] if index < len(self.init_body) else None
        for stored in self.replace.values():
            if stored[0] is not top and not any(
                stored[0] is s for s in self.init_body[last + 1 : index]
            ):
                continue  # a store inside a block: not there on every path
            for s in stored[1]:
                code = render(s).strip()
                if code.endswith(f" = {name}") and code.startswith("self."):
                    return code.split(" ", 1)[0][5:]
        return None

    def taken(self, attr: str, inherited: bool = False) -> bool:
        """Is ``attr`` a name the class already uses (a method, a property, an attribute, a
        registered tensor)? ``inherited``: or a base of this file, or ``nn.Module`` (asked for
        a new attribute, not a hook, which may override a base's): torchani's
        ``AtomicOneHot`` kept its ``symbols`` argument as ``self.symbols``, a read-only
        property of its base ``_ChemModule`` (eager construction raised AttributeError), and
        ``ANINetworks`` its ``modules`` as ``self.modules``, shadowing ``Module.modules()``."""
        if not inherited:
            return _uses_name(self.cls, attr)
        if attr in MODULE_MEMBERS:
            return True
        by_name = {c.fullname: c for c in self.ctx.facts.classes}
        seen: set[str] = set()
        todo = [self.cls]
        while todo:
            c = todo.pop()
            if c.fullname in seen:
                continue
            seen.add(c.fullname)
            if _uses_name(c, attr):
                return True
            todo.extend(by_name[b] for b in c.bases if b in by_name)
        return False


def _tensor_receivers(value: cst.CSTNode) -> dict[str, str]:
    """The locals ``value`` calls a tensor method on (``emb.unsqueeze(0)``): tensors."""
    return {
        n.func.value.value: n.func.attr.value
        for n in walk_code(value)
        if type(n) is cst.Call
        and type(n.func) is cst.Attribute
        and type(n.func.value) is cst.Name
        and n.func.attr.value in TENSOR_METHODS
    }


def _stores_name(small: cst.BaseSmallStatement, name: str) -> str | None:
    """``x`` for ``self.x = name``."""
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.value, cst.Name)
        and small.value.value == name
    ):
        t = dotted(small.targets[0].target)
        if t and t.startswith("self.") and t.count(".") == 1:
            return t[5:]
    return None


def _uses_name(cls: ClassFacts, attr: str) -> bool:
    """Does class ``cls`` itself use the name ``attr`` (see :meth:`Storing.taken`)?"""
    if attr in cls.methods:
        return True
    if any(_method_sets(m, attr) for m in cls.methods.values()):
        return True
    # a class-level attribute
    for s in cls.node.body.body if isinstance(cls.node.body, cst.IndentedBlock) else ():
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = small.targets if isinstance(small, cst.Assign) else [small]
                    if any(dotted(t.target) == attr for t in targets):
                        return True
    return False


#: the methods of ``self`` that set an attribute named by their first argument
_REGISTERS = ("register_buffer", "register_parameter", "add_module", "register_module")


def _method_sets(m, attr: str) -> bool:
    """Does method ``m`` assign ``self.<attr>`` (or an attribute of it) or register it?"""
    if any(a.target == f"self.{attr}" or a.target.startswith(f"self.{attr}.") for a in m.assigns):
        return True
    return any(
        c.receiver == "self"
        and c.method in _REGISTERS
        and c.node.args
        and isinstance(c.node.args[0].value, cst.SimpleString)
        and c.node.args[0].value.evaluated_value == attr
        for c in m.calls
    )


def legacy_empty(ctx: RuleContext, call: cst.Call, dtype: str | None) -> cst.BaseExpression:
    """``torch.empty(sizes)`` for a legacy ``torch.Tensor(sizes)`` (PyG's
    ``Parameter(Tensor(out_channels))``) that its rule found to be given sizes (ML009's
    ``EscapeSite.sizes``): the same uninitialised tensor of the same ``dtype``, but allocated
    where the default device says."""
    torch_name, _ = torch_spelling(ctx)
    text = ", ".join(render(a.value) for a in call.args)
    if dtype:
        text += f", dtype={torch_name}.{dtype}"
    return expr(f"{torch_name}.empty({text})")


def inline_locals(
    edit: Storing,
    e: cst.BaseExpression,
    depth: int = 0,
    method: MethodFacts | None = None,
    index: int | None = None,
) -> cst.BaseExpression:
    """``e`` with the local tensors it reads replaced by the expressions that computed them.
    ``method``: the locals are those of that method (a helper ``__init__`` calls), not of
    ``__init__``; then every local is inlined, numbers too: nothing stores them on ``self``.
    ``index``: the top-level statement of ``__init__`` that reads ``e``; a local assigned
    once that ``__init__`` already keeps on ``self`` before it (``self.codebook_dim =
    codebook_dim``) is left for :meth:`ClassEdit.store_names`, which reads that attribute
    (vector-quantize-pytorch's ``LFQ``: ``codebook_dim`` comes from ``codebook_size =
    default(codebook_size, lambda: 2 ** dim)``, which no hook can inline)."""
    if depth > 4:
        raise Unfixable("the value is computed through too many local variables")
    init = edit.init if method is None else method
    replace = {}
    for name in list(names_in(e)):
        n = name.value
        values = init.local_values.get(n)
        if not values or n == "self":
            continue
        node, v = values[-1]
        if method is None and index is not None and _kept_on_self(edit, n, index):
            continue
        changed = changed_in_place(init, n, edit.ctx.qualify)
        if not _inlined_as_tensor(edit, init, v, changed) and method is None:
            continue  # a number: stored on self by store_names
        if len(values) != 1:
            raise Unfixable(f"the local `{n}` is assigned more than once")
        if method is None and _validated_argument(edit, n, node, v, index):
            continue  # kept on self as it is at ``index`` by store_names
        _refuse_inlining(edit, n, node, method, changed)
        inlined = inline_locals(edit, v, depth + 1, method, index)
        replace[id(name)] = inlined if name is e else paren(inlined)
    return substitute(e, replace)


def _inlined_as_tensor(edit: Storing, init: MethodFacts, v, changed: bool) -> bool:
    """Is the value ``v`` of a local one that :func:`inline_locals` inlines rather than
    :meth:`Storing.store_names` keeps on ``self``: it makes a tensor, calls something, or is a
    container changed in place later?"""
    return (
        value_kind(v, edit.ctx.qualify, init) is not None
        or (
            # a list of numbers (``[1 for _ in range(n)]``, a shape) is kept on self as it is
            type(v) not in (cst.List, cst.Tuple, cst.ListComp)
            and any(type(x) is cst.Call for x in walk_code(v))
        )
        # a list filled later (``filters = []``, ``filters.append(f)``): it may hold
        # tensors, which kept on self stay on meta (julius's ``LowPassFilters``)
        or (changed and type(v) in CONTAINERS)
    )


def _refuse_inlining(
    edit: Storing, n: str, node, method: MethodFacts | None, changed: bool
) -> None:
    """Raise :class:`Unfixable` when local ``n`` (of ``method``, else of ``__init__``),
    assigned once by ``node``, cannot be inlined where it is read."""
    init = edit.init if method is None else method
    if n in init.arguments:
        # ``if loc is None: loc = np.random.randn(n, d)`` (normflows ``GaussianMixture``):
        # the caller's ``loc`` is its value on the other path; inlining the assignment
        # dropped it
        raise Unfixable(f"the argument `{n}` is assigned again in `__init__`")
    if type(node) is cst.Assign and any(
        type(t.target) in (cst.Tuple, cst.List) for t in node.targets
    ):
        raise Unfixable(f"the local `{n}` is unpacked from a call")
    if method is None:
        edit.locate(node)  # a local computed inside a loop or `with` cannot be inlined
    elif (at := path_to(method.node.body, node)) is None or any(type(x) in NESTING for x in at):
        raise Unfixable(f"the local `{n}` is computed inside a loop, `with` or `try`")
    if changed:
        # ``coords[:, 0] += 1`` / ``coords.view(-1).add_(1)`` / ``kernels.append(k)``: its
        # value is not the expression that created it
        raise Unfixable(f"the local `{n}` is changed in place")


def _validated_argument(edit: Storing, n: str, node, v, index: int | None) -> bool:
    """Is ``n`` an argument that ``__init__`` assigns again exactly once, by a top-level
    statement ``n = <value>`` before statement ``index``, to a value that makes no tensor, and
    never changes in place (torchani's ``charges = self._validate_elem_seq("charges",
    charges)``, then ``register_buffer("_charges", torch.tensor(charges))``)? Its value at
    ``index`` is then the validated one on every path: kept on ``self`` as it is there
    (:meth:`ClassEdit.store_names`), eager construction runs the same statements. Inlining
    the assignment would read the caller's value back under the same name, and one assigned
    inside an ``if`` (normflows ``GaussianMixture``: ``if loc is None: loc = ...``) is the
    caller's on the other path: both refused."""
    init = edit.init
    if n not in init.arguments or index is None or type(node) is not cst.Assign:
        return False
    if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
        return False
    if value_kind(v, edit.ctx.qualify, init) is not None:
        return False
    found = edit.path_of(node)
    if found is None or found[0] >= index:
        return False
    top = edit.init_body[found[0]]
    if type(top) is not cst.SimpleStatementLine or node not in top.body:
        return False
    return not any(
        n in binds(line, edit.ctx.qualify)
        for line in walk_code(init.node)
        if type(line) is cst.SimpleStatementLine and line is not top
    )


def _kept_on_self(edit: Storing, n: str, index: int) -> bool:
    """Is local ``n`` kept on ``self`` by a top-level ``self.<attr> = n`` before statement
    ``index``, after every assignment of ``n`` (an argument too: ``codebook_size =
    default(codebook_size, ...)``, then ``self.codebook_size = codebook_size``), and never
    changed in place? That attribute then holds the value ``n`` has at ``index``."""
    init = edit.init
    values = init.local_values.get(n, ())
    nodes = [node for node, _ in values]
    last = -1
    for node in nodes:
        found = edit.path_of(node)
        if found is None or any(type(x) in NESTING for x in found[1]):
            return False
        last = max(last, found[0])
    if changed_in_place(init, n, edit.ctx.qualify):
        return False
    for i, s in enumerate(edit.init_body[:index]):
        if i <= last or type(s) is not cst.SimpleStatementLine:
            continue
        for small in s.body:
            if (
                type(small) is cst.Assign
                and len(small.targets) == 1
                and type(small.value) is cst.Name
                and small.value.value == n
                and (t := dotted(small.targets[0].target) or "").startswith("self.")
                and t.count(".") == 1
            ):
                return True
    return False
