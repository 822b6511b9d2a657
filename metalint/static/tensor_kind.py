"""Is a value a tensor? One answer, in three values (:class:`TensorKind`), for the values
computed while one class is built (:class:`ClassTensors`): certainly (what
:func:`metalint.static.construction.is_tensor` knows), maybe (what an unknown function returns,
a plain attribute or a local that may hold one), or not (a number, a module, a container of
none). The codemods ask it before they keep a value on ``self`` or recompute it in a hook.
Also the locals a statement binds or changes in place (:func:`binds`, :func:`fills`), which
the answer follows."""

from __future__ import annotations

import builtins
import enum
from collections.abc import Iterator

import libcst as cst

from metalint.static.construction import is_number, is_tensor, registrations, repackages_arguments
from metalint.static.model import ClassFacts, MethodFacts, builds_module
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import node_text, walk_code
from metalint.static.tensors import inplace_write
from metalint.vocabulary import CONTAINER_MUTATORS

BUILTIN_NAMES = frozenset(dir(builtins))

#: how deep :meth:`ClassTensors.kind` follows attributes, locals and elements
_DEPTH = 4


class TensorKind(enum.Enum):
    CERTAINLY = "certainly"
    MAYBE = "maybe"
    NOT = "not"


def _either(a: TensorKind, b: TensorKind) -> TensorKind:
    """The kind of a value that is one of two."""
    return a if a is b else TensorKind.MAYBE


class ClassTensors:
    """What may be a tensor while one class is built; one per class and file context
    (:func:`class_tensors`), which owns what it works out for the class's attributes."""

    def __init__(self, ctx: RuleContext, cls: ClassFacts) -> None:
        self.ctx = ctx
        self.cls = cls
        #: attribute -> may ``self.<attr>`` be a plain tensor
        self._plain: dict[str, bool] = {}

    def plain_tensor(self, attr: str, depth: int = 0) -> bool:
        """May ``self.<attr>`` be a tensor that is neither parameter nor buffer (monai's
        ``Scheduler.alphas``, unpacked from a schedule function)? ``to_empty()`` leaves such a
        tensor on ``meta``. False for registered tensors, modules, numbers and arguments."""
        memo = self._plain
        if attr not in memo:
            memo[attr] = False  # a cycle (``self.a = self.a * 2``) adds nothing
            memo[attr] = self._plain_tensor(attr, depth)
        return memo[attr]

    def _plain_tensor(self, attr: str, depth: int) -> bool:
        methods = self.cls.reachable("__init__") if self.cls.init is not None else []
        if attr in {r.attr for r in registrations(methods, self.ctx.qualify)}:
            return False
        for m in methods:
            for a in m.assigns:
                if a.target != f"self.{attr}":
                    continue
                # unpacked from a call (``self.esm, self.esm_dict = load()``): not judged
                if a.value is not None and self.may_be_tensor(a.value, m, depth):
                    return True
        return False

    def filled_with_tensors(self, name: cst.Name, method: MethodFacts) -> bool:
        """May local ``name``, changed in place by ``method``, hold tensors? What is put into
        it (:func:`fills`, the values of ``name.attr = ..``) may be a tensor, or it may be one
        itself, changed otherwise than by setting its attributes (``w.mul_(2)``).
        torch-geometric's ``GITMol``: ``config = AutoConfig.from_pretrained(..)``, then
        ``config.encoder_width = vision_graph_width``: a config given numbers."""
        n = name.value
        if any(self.may_be_tensor(x, method, 1) for x in [*fills(method, n), *set_on(method, n)]):
            return True
        return changed_in_place(
            method, n, self.ctx.qualify, attributes=False
        ) and self.may_be_tensor(name, method, 0)

    def certainly(self, v: cst.BaseExpression, method: MethodFacts, itself: str = "") -> bool:
        """Is ``v`` certainly a tensor: what :func:`is_tensor` knows, an argument annotated
        ``Tensor`` (:func:`argument_kind`), or ``itself``, the dotted name of the tensor that
        ``v`` is assigned to (``self.t = self.t.to(device)``)?"""

        def vouch(e) -> bool:
            if isinstance(e, cst.Attribute):
                return bool(itself) and dotted(e) == itself
            return isinstance(e, cst.Name) and (
                argument_kind(method, e.value) is TensorKind.CERTAINLY
            )

        return is_tensor(v, self.ctx.qualify, method, extra=vouch)

    def may_be_tensor(self, v: cst.BaseExpression, method: MethodFacts, depth: int = 0) -> bool:
        """Is :meth:`kind` of ``v`` other than ``NOT``?"""
        return self.kind(v, method, depth) is not TensorKind.NOT

    def kind(self, v: cst.BaseExpression, method: MethodFacts, depth: int = 0) -> TensorKind:
        """Is ``v``, computed in ``method``, a tensor? ``CERTAINLY`` what :func:`is_tensor`
        knows; ``NOT`` a Python number, a module, a container of no tensor, an expression of
        such values; ``MAYBE`` what an unknown function returns, what reads a plain attribute
        or a local that may hold one. Past the depth it follows (4) a value is taken for
        ``NOT``, as the codemods always did."""
        if depth > _DEPTH:
            return TensorKind.NOT
        if is_tensor(v, self.ctx.qualify, method):
            return TensorKind.CERTAINLY
        if is_number(v, self.ctx.qualify, method) or (
            type(v) is cst.Call and builds_module(self.ctx.qualify(v.func), self.ctx.facts)
        ):
            # a Python number (``x.item()``, ``grid.shape[-1]``, ``int(...)``), or a module,
            # whatever its arguments (``default(dim_out, dim_in)``)
            return TensorKind.NOT
        if type(v) is cst.IfExp:  # its value is one of its branches, never its test
            return _either(self.kind(v.body, method, depth), self.kind(v.orelse, method, depth))
        if type(v) in CONTAINERS:
            # a list of sizes (monai's ``self.window = [1 + 2 * r for r in ..]``) is none; a
            # list of tensors (``[torch.zeros(n) for _ in ..]``) stays on meta as one does
            held = any(self.may_be_tensor(e, method, depth + 1) for e in container_elements(v))
            return TensorKind.MAYBE if held else TensorKind.NOT
        return TensorKind.MAYBE if self._reads_a_tensor(v, method, depth) else TensorKind.NOT

    def _reads_a_tensor(self, v: cst.BaseExpression, method: MethodFacts, depth: int) -> bool:
        """Does ``v`` call an unknown function (a noise schedule may return a tensor), or read
        a plain attribute or a local that may hold a tensor?"""
        for n in walk_code(v):
            if isinstance(n, cst.Call):
                q = self.ctx.qualify(n.func) or ""
                name = getattr(n.func, "value", None) if isinstance(n.func, cst.Name) else None
                if q.startswith(("torch.", "math.", "numpy.")) or name in BUILTIN_NAMES:
                    continue
                if self._builds_instance(n, q, name) or (
                    name is not None and repackages_arguments(self.ctx.module, name)
                ):
                    continue  # ``pair(image_size)``: its arguments, read below
                return True
            if isinstance(n, cst.Attribute) and dotted(n.value) == "self":
                if self.plain_tensor(n.attr.value, depth + 1):
                    return True
            if isinstance(n, cst.Name) and n is not getattr(v, "func", None):
                if self._local_may_be_tensor(n.value, v, method, depth):
                    return True
        return False

    def _builds_instance(self, call: cst.Call, q: str, name: str | None) -> bool:
        """Does ``call`` build an instance of a class that is not a tensor: a class of the
        file, a ``partial`` of one (``LinearNoBias = partial(nn.Linear, ...)``), or an
        imported name spelled as a class (e3nn's ``self.irreps = o3.Irreps(irreps)``; a tensor
        subclass is torch's, judged before)? A name the file binds otherwise (a ``partial``
        that binds ``device=``) is not known to build anything."""
        facts = self.ctx.facts
        if name in facts.local_classes or name in facts.aliases.constructors:
            return True
        spelled = dotted(call.func) or ""
        imported = spelled.split(".")[0] in facts.aliases.names
        return imported and class_name(q or spelled)

    def _local_may_be_tensor(self, n: str, v, method: MethodFacts, depth: int) -> bool:
        """May local ``n`` of ``method``, read by ``v``, hold a tensor: a value it is given
        may be one, or one put into it in place (``filters = []`` filled by
        ``filters.append(filter_)``, julius's ``LowPassFilters``)?"""
        values = [lv for _, lv in method.local_values.get(n, ()) if lv is not v]
        return any(self.may_be_tensor(x, method, depth + 1) for x in [*values, *fills(method, n)])


def argument_kind(method: MethodFacts, name: str) -> TensorKind:
    """Is argument ``name`` of ``method`` a tensor by its annotation? ``CERTAINLY`` annotated
    ``Tensor`` (``torch.Tensor``), ``MAYBE`` an annotation naming it otherwise
    (``Optional[Tensor]``, ``list[Tensor]``), ``NOT`` without one (or not an argument)."""
    if name not in method.params:
        return TensorKind.NOT
    for p in (*method.node.params.params, *method.node.params.kwonly_params):
        if p.name.value == name and p.annotation is not None:
            spelled = node_text(p.annotation.annotation)
            if spelled.rsplit(".", 1)[-1] == "Tensor":
                return TensorKind.CERTAINLY
            if "Tensor" in spelled:
                return TensorKind.MAYBE
            return TensorKind.NOT
    return TensorKind.NOT


def class_tensors(ctx: RuleContext, cls: ClassFacts) -> ClassTensors:
    """The :class:`ClassTensors` of ``cls``, kept in the file context's memo."""
    key = ("class-tensors", id(cls.node))
    found = ctx.memo.get(key)
    if found is None or found.cls is not cls:
        found = ctx.memo[key] = ClassTensors(ctx, cls)
    return found


def class_name(name: str) -> bool:
    """Is the last part of a dotted name spelled as a class (``Irreps``, ``o3.Irreps``), by
    Python's convention: a capital first letter and a lower-case letter (not ``N`` or ``MAX``)?"""
    last = name.rpartition(".")[2]
    return bool(last) and last[0].isupper() and any(c.islower() for c in last)


#: literals of a Python container a later statement may fill (``filters = []``)
CONTAINERS = (cst.List, cst.Tuple, cst.ListComp, cst.Dict, cst.DictComp, cst.Set, cst.SetComp)


def changed_in_place(method: MethodFacts, n: str, qualify, attributes: bool = True) -> bool:
    """Does a statement of ``method`` other than the assignments of local ``n`` write it
    (:func:`binds`: ``n[0] = ..``, ``n.add_(1)``, ``n.append(x)``; ``n.size = 3`` unless not
    ``attributes``)? Its value is then not the expression that made it."""
    nodes = [node for node, _ in method.local_values.get(n, ())]
    return any(
        n in binds(line, qualify, attributes)
        for line in walk_code(method.node)
        if type(line) is cst.SimpleStatementLine and not any(x in line.body for x in nodes)
    )


def container_elements(v: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a container literal holds (a comprehension: its element)."""
    if type(v) in (cst.ListComp, cst.SetComp):
        return [v.elt]
    if type(v) is cst.DictComp:
        return [v.value]
    return [e.value for e in v.elements]


def fills(method: MethodFacts, n: str) -> Iterator[cst.BaseExpression]:
    """The values statements of ``method`` put into the container local ``n`` in place: what
    ``n.append(x)`` / ``n.extend(xs)`` / ``n.insert(i, x)`` / ``n.update(..)`` pass, ``x``
    of ``n[i] = x`` and of ``n += x``."""
    for node in walk_code(method.node):
        if type(node) is cst.Call:
            f = node.func
            if (
                type(f) is cst.Attribute
                and f.attr.value in CONTAINER_MUTATORS
                and type(f.value) is cst.Name
                and f.value.value == n
            ):
                yield from (a.value for a in node.args)
        elif type(node) in (cst.Assign, cst.AugAssign):
            aug = type(node) is cst.AugAssign
            for t in [node.target] if aug else [t.target for t in node.targets]:
                into = aug or type(t) is cst.Subscript  # ``n = x`` is no fill
                while type(t) is cst.Subscript:
                    t = t.value
                if into and type(t) is cst.Name and t.value == n:
                    yield node.value


def set_on(method: MethodFacts, n: str) -> Iterator[cst.BaseExpression]:
    """The values statements of ``method`` set as attributes of local ``n`` (``n.size = x``)."""
    for node in walk_code(method.node):
        if type(node) is cst.Assign:
            for t in node.targets:
                if type(t.target) is cst.Attribute and dotted(t.target.value) == n:
                    yield node.value


def binds(s: cst.CSTNode, qualify, attributes: bool = True) -> set[str]:
    """Local names a statement assigns or writes in place: the targets of ``x = ..``,
    ``x[0] += ..`` and ``del x[0]``, the tensor :func:`inplace_write` says a call writes
    (``x.mul_(2)``, ``zeros_(x)``, a view ``x.view(-1).zero_()``, ``torch.arange(n, out=x)``),
    and the list, dict or set a method changes in place (``kernels.append(kernel)``,
    ``groups[0].extend(..)``; ``x.sort()`` as a statement): julius's ``ResampleFrac`` fills
    ``kernels = []`` in a loop, and a hook that took ``[]`` for its value stacked nothing."""

    out: set[str] = set()
    for n in walk_code(s):
        if type(n) is cst.Call:
            w = inplace_write(n, qualify)
            if w is not None and w.chain[0] != "self":
                out.add(w.chain[0])
        for t in _targets(n):
            for x in walk_code(t) if type(t) in (cst.Tuple, cst.List) else [t]:
                if not attributes and type(x) is cst.Attribute:
                    continue  # ``n.size = 3``: an attribute set, asked apart (:func:`set_on`)
                while type(x) in (cst.Subscript, cst.Attribute):
                    x = x.value
                if type(x) is cst.Name:
                    out.add(x.value)
    return out


def _targets(n: cst.CSTNode) -> list[cst.CSTNode]:
    """What node ``n`` of a statement assigns, deletes or changes in place by a method of a
    container (:func:`binds`)."""
    if type(n) is cst.Assign:
        return [t.target for t in n.targets]
    if type(n) in (cst.AugAssign, cst.AnnAssign, cst.Del):
        return [n.target]
    if type(n) is cst.Expr and type(n.value) is cst.Call:
        f = n.value.func
        return [f.value] if type(f) is cst.Attribute and f.attr.value == "sort" else []
    if type(n) is cst.Call:
        f = n.func
        return [f.value] if type(f) is cst.Attribute and f.attr.value in CONTAINER_MUTATORS else []
    return []
