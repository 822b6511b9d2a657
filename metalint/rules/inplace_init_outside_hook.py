from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import NotRecreated, SameLaw
from metalint.static.child_defaults import (
    child_class,
    file_calls_and_dicts,
    law_names,
    no_op_by_default,
    norm_default,
    overwritten_by_parent,
    reset_while_built,
    restored_by_child,
    tensor_name,
)
from metalint.static.construction import attached_child, tensor_registrations
from metalint.static.model import AttrAssign, ClassFacts, MethodFacts, construction
from metalint.static.names import dotted
from metalint.static.ownership import module_children
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import keyword, shares_line, short
from metalint.static.tensors import (
    Write,
    all_zeros,
    assigned_writes,
    every_parameter_written,
    init_law,
    inplace_write,
    law_text,
    leaves_values,
    own_attributes,
    parameter_value,
    same_tensor,
    value_kind,
    write_target,
)
from metalint.vocabulary import (
    INPLACE_METHODS,
    NORM_LAYERS,
    ZEROS_LAW,
)

#: in-place methods that set a tensor's values when called on an own tensor in ``__init__``
_SETTERS = INPLACE_METHODS - {"set_"}


@dataclass(frozen=True)
class InitSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.inplace_init`): the method
    of construction holding the write (the finding's node), and its form: ``"call"`` (an
    in-place init call), ``"loop"`` (a loop writing every parameter), ``"assign"`` (a write by
    assignment: ``.data``, a slice) or ``"replace"`` (a child's tensor replaced by an
    ``nn.Parameter`` made from a value). For ``"replace"``: the tensor replaced
    (``"self.emb.weight"``), whether the statement sets it alone on a line of its own
    (``alone``: not ``a = b = ...``, not ``n = 4; self.emb.weight = ...``), and the arguments of that ``nn.Parameter(...)``: its ``data`` (None when the call
    is wrapped, as in ``nn.Parameter(w).requires_grad_(False)``), its ``requires_grad=`` and
    whether it takes ``*args``/``**kwargs`` (``starred``). ``children``: the class's child
    modules (a method initialising only its own tensors in a class without any may loop
    over ``self.parameters()``)."""

    method: MethodFacts
    form: str
    data: cst.BaseExpression | None = None
    requires_grad: cst.BaseExpression | None = None
    starred: bool = False
    tensor: str | None = None
    alone: bool = True
    #: the class's attributes that hold child modules (:func:`module_children`)
    children: frozenset[str] = frozenset()


class InplaceInitOutsideHook(Rule):
    """
    ## What it does
    Finds in-place init of the module's tensors in `__init__` outside any reset hook:
    `nn.init.trunc_normal_(self.pos_embed, std=.02)`, `self.weight.data.fill_(1.0)`, and writes
    to a child's tensor (`self.head.weight.data.mul_(0.1)`), unless every root's protocol
    re-creates that tensor the same way (a transformers model's `_init_weights` in any way:
    the eager build's `post_init()` overwrites the write too).

    ## Why is this bad on meta?
    The init runs on meta tensors and does nothing; after `to_empty()` only the hooks run. A
    child's own `reset_parameters()` restores its default init, not the parent's choice.

    ## Example
    ```python
        def __init__(self, dim, num_patches):
            super().__init__()
            self.pos_embed = nn.Parameter(torch.empty(1, num_patches, dim))
            self.head = nn.Linear(dim, 1000)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            self.head.weight.data.mul_(0.001)
    ```

    Use instead:
    ```python
            self.head = nn.Linear(dim, 1000)
            self.init_weights()

        def init_weights(self):  # after materialisation, after the children's resets
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            with torch.no_grad():
                self.head.weight.mul_(0.001)
    ```

    ## Fix safety
    Own tensors' inits move, in order, into `reset_parameters()`; children's into a root
    `init_weights()`, each called where the last moved statement ran. Safe when no random draw
    of `__init__` comes between them and their new place, unsafe otherwise.

    ## Options
    `protocol`, `hooks`.

    ## When to switch it off
    When the tree's models are never built on meta, or always loaded from a checkpoint.

    ## Known limits
    - A write under a condition on a config value counts as run.
    - A caller in another file passing the constructor another default is not seen.
    - Writes by assignment, through `.data` or into a slice are reported, not fixed.
    """

    code = "ML003"
    name = "inplace-init-outside-hook"
    summary = "In-place init of the module's tensors in `__init__`, outside any reset hook"
    codemod = "metalint.fix.inplace_init"
    site_type = InitSite

    def _reset_by_parents(self) -> set[str]:
        if not hasattr(self, "_parents_reset"):
            self._parents_reset = reset_while_built(self.ctx)
        return self._parents_reset

    def _file_calls(self) -> tuple[list, list] | None:
        """:func:`file_calls_and_dicts` of the whole file (elided code calls too), once per file:
        of CPython's tree when the engine has it, else of a parse; None when it does not
        parse."""
        if not hasattr(self, "_calls"):
            tree = self.ctx.tree
            if tree is None:
                try:
                    tree = ast.parse(self.ctx.source or self.ctx.module.code)
                except (SyntaxError, ValueError):
                    tree = None
            self._calls = None if tree is None else file_calls_and_dicts(tree)
        return self._calls

    def _child_default_kept(self, cls: ClassFacts, methods, call, name: str) -> bool:
        """Is the write into a child's tensor a no-op on its default (a norm layer's ones),
        or one a parent's reset overwrites anyway?"""
        if not hasattr(self, "_code"):
            # callers' keywords are read from the whole file: elided code calls too
            self._code = self.ctx.source or self.ctx.module.code
        restored = norm_default(cls, methods, name, self.qualify)
        others = frozenset(
            c.name
            for c in self.ctx.facts.classes
            if c.name != cls.name and cls.fullname not in c.bases  # a subclass forwards it
        )
        if no_op_by_default(cls, call, name, restored, self._code, others):
            return True
        return restored is not None and overwritten_by_parent(
            child_class(cls, methods, name.split(".")[0], self.qualify),
            self._reset_by_parents(),
        )

    def _same_law(self, cls: ClassFacts, method, methods, call, name: str) -> tuple:
        """``(SameLaw(child class, tensor, law),)`` of a write into a child's tensor of a known
        class (law "" when it cannot be read), else ()."""
        held = child_class(cls, methods, name.split(".")[0], self.qualify)
        if not held:
            return ()
        names = law_names(cls, method, self._file_calls())
        text = init_law(call.node, self.qualify, lambda e: law_text(e, names))
        return (SameLaw(held, name.split(".", 1)[1], text or ""),)

    #: (class, its children) of the class last asked: :meth:`_children`
    _children_of: tuple[ClassFacts, frozenset[str]] | None = None

    def _children(self, cls: ClassFacts) -> frozenset[str]:
        """The attributes of ``cls`` that hold child modules (:func:`module_children`)."""
        if self._children_of is None or self._children_of[0] is not cls:
            self._children_of = (cls, frozenset(module_children(cls, self.qualify)))
        return self._children_of[1]

    def _write(self, call: cst.Call) -> Write | None:
        """:func:`inplace_write` of ``call``, once per call and imports (three passes over
        construction ask it): the call is kept, so that no other node takes its id."""
        writes = self.__dict__.setdefault("_writes", {})
        now = self.ctx.facts.aliases.changes
        hit = writes.get(id(call))
        if hit is None or hit[1] != now:
            w = inplace_write(call, self.qualify)
            if w is not None and not w.method and self._value_free(call):
                w = None
            hit = writes[id(call)] = (call, now, w)
        return hit[2]

    def _value_free(self, call: cst.Call) -> bool:
        """Is ``call`` one of a function of this file whose name ends in ``_`` but that
        writes no tensor's values (:func:`leaves_values`)?"""
        if type(call.func) is not cst.Name:
            return False
        if not hasattr(self, "_functions"):
            tree = self.ctx.tree
            if tree is None:
                try:
                    tree = ast.parse(self.ctx.source or self.ctx.module.code)
                except (SyntaxError, ValueError):
                    tree = ast.Module(body=[], type_ignores=[])
            self._functions = {
                s.name: s
                for s in tree.body
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        fn = self._functions.get(call.func.value)
        return fn is not None and leaves_values(fn)

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        methods = construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
        for method in methods:
            for call in method.calls:
                target = write_target(self._write(call.node))
                if target is None:
                    continue
                name = tensor_name(target)
                if not name or restored_by_child(cls, methods, name, call, self.qualify):
                    continue
                if "." in name and self._child_default_kept(cls, methods, call, name):
                    continue
                attr = name.split(".")[0]
                child = "." in name
                # the child's tensor drawn from a law (``SameLaw``), if known
                law = self._same_law(cls, method, methods, call, name) if child else ()
                what = f"`{name}` (a tensor of the child `{attr}`)" if child else f"`{name}`"
                where = (
                    "the child's own `reset_parameters()` restores its default init and "
                    if child
                    else ""
                )
                yield Finding(
                    call.node,
                    f"{what} is initialised in place (`{short(call.node)}`) in `{method.name}`, "
                    f"outside any reset hook: on meta this does nothing and after `to_empty()` "
                    f"{where}the value is lost",
                    cls,
                    help="Move this init into `reset_parameters()` (own tensors) or the model's "
                    "`init_weights()`, and call that hook from `__init__`",
                    conditions=(NotRecreated((attr,)), *law),
                    subject=(name,),
                    site=InitSite(method, "call", children=self._children(cls)),
                )
        yield from _parameter_loops(cls, methods, self.qualify, lambda: self._children(cls))
        yield from self._local_children(cls, methods)
        yield from self._data_writes(cls, methods)
        yield from self._replaced_child_tensors(cls, methods)
        yield from self._child_container_loops(cls, methods)
        yield from self._child_method_writes(cls, methods)

    def _child_writes(self, child: ClassFacts, name: str) -> list[str]:
        """The tensors of ``child`` that its method ``name`` (and the methods of the class it
        calls, its reset hooks aside) initialises in place; none when ``name`` is a reset hook or when the child's
        own construction runs it (then the child's finding says so)."""
        if name in self.ctx.hooks or name not in child.methods:
            return []
        hooks = self.ctx.hooks
        if any(m.name == name for m in construction(child, enter_hooks=False, hooks=hooks)):
            return []
        found = []
        for method in child.reachable(name):
            if method.name in hooks:
                continue  # the protocol runs the child's hooks again
            for call in method.calls:
                target = write_target(self._write(call.node))
                tensor = tensor_name(target) if target is not None else None
                if tensor and tensor not in found:
                    found.append(tensor)
        return found

    def _child_method_writes(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """``self.token_emb.init_()`` in construction, where ``init_`` is a method (not a reset
        hook) of the child's class, of this file, that initialises its tensors in place
        (x-transformers' ``TransformerWrapper``): after ``to_empty()`` the child's own
        ``reset_parameters()`` restores the default init, and nothing calls ``init_()``."""
        by_name = {c.fullname: c for c in self.ctx.facts.classes}
        for method in methods:
            for call in method.calls:
                parts = (call.receiver or "").split(".")
                if len(parts) != 2 or parts[0] != "self" or call.method is None:
                    continue
                held = by_name.get(
                    child_class(cls, methods, parts[1], self.qualify, through_locals=True) or ""
                )
                written = self._child_writes(held, call.method) if held else []
                if not written:
                    continue
                names = ", ".join(f"`{w}`" for w in written)
                yield Finding(
                    call.node,
                    f"`{short(call.node)}` in `{method.name}` initialises {names} of the child "
                    f"`{parts[1]}` in place, outside any reset hook: on meta this does nothing "
                    f"and after `to_empty()` the child's own `reset_parameters()` restores its "
                    f"default init and the value is lost",
                    cls,
                    help=f"Call `self.{parts[1]}.{call.method}()` from the model's "
                    "`init_weights()` (or make it the child's `reset_parameters()`)",
                    conditions=(NotRecreated((parts[1],)),),
                    subject=tuple(f"{parts[1]}.{w}" for w in written),
                    site=InitSite(method, "call", children=self._children(cls)),
                )

    def _local_children(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """``fc1 = nn.Linear(...)``, ``nn.init.normal_(fc1.weight)``, then ``self.mlp =
        nn.Sequential(fc1, act)``: the init of a module's tensor before it is attached is a
        write into a child's tensor, which the child's own ``reset_parameters()`` restores to
        its default after ``to_empty()``."""
        for method in methods:
            for call in method.calls:
                if call.loops:
                    continue  # a loop variable or a local made again on each pass
                w = self._write(call.node)
                if w is None or w.kind == "storage":
                    continue
                chain = w.chain[:-1] if w.chain[-1:] == ("data",) else w.chain
                if len(chain) != 2 or chain[0] == "self" or "[]" in chain:
                    continue
                found = attached_child(chain[0], method, self.qualify, self.ctx.facts)
                if found is None:
                    continue
                attr, made = found
                built = self.qualify(made.func)
                if built in NORM_LAYERS and (chain[1], w.kind) in (
                    ("weight", "ones"),
                    ("bias", "zeros"),
                ):
                    continue  # what the norm's own reset gives
                name = ".".join(chain)
                yield Finding(
                    call.node,
                    f"`{name}` (a tensor of `{short(made.func)}` `{chain[0]}`, which "
                    f"`{method.name}` makes the child `{attr}`) is initialised in place "
                    f"(`{short(call.node)}`), outside any reset hook: on meta this does "
                    f"nothing and after `to_empty()` the child's own `reset_parameters()` "
                    f"restores its default init and the value is lost",
                    cls,
                    help="Move this init into `reset_parameters()` or the model's "
                    "`init_weights()` (on the child's tensor), and call that hook from `__init__`",
                    conditions=(NotRecreated((attr,)),),
                    subject=(f"{attr}.{chain[1]}",),
                    site=InitSite(method, "call", children=self._children(cls)),
                )

    def _data_writes(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """A child's tensor written by an assignment, not a call (``assigned_writes``):
        ``self.conv.weight.data[:] = torch.arange(...)``, ``child.weight.data = t`` of a local
        module then attached (``self.fc = child``). The child's own ``reset_parameters()``
        restores its default init after ``to_empty()``."""
        for method in methods:
            for stmt in method.binds:
                for parts in assigned_writes(stmt):
                    if parts[0] == "self" and len(parts) == 3:
                        if parts[1] not in self._children(cls):
                            continue
                        attr, what = parts[1], f"the child `{parts[1]}`"
                        held = child_class(cls, methods, attr, self.qualify)
                    elif parts[0] != "self" and len(parts) == 2:
                        found = attached_child(parts[0], method, self.qualify, self.ctx.facts)
                        if found is None:
                            continue
                        attr, held = found[0], self.qualify(found[1].func)
                        what = f"`{parts[0]}`, which `{method.name}` makes the child `{attr}`"
                    else:
                        continue
                    # a value the rule does not read: only a protocol re-drawing the child's
                    # tensor whatever the law (transformers' ``_init_weights``) restores it
                    law = (SameLaw(held, parts[-1], ""),) if held else ()
                    name = ".".join(parts[1:] if parts[0] == "self" else parts)
                    yield Finding(
                        stmt,
                        f"`{name}` (a tensor of {what}) is written in `{method.name}` "
                        f"(`{short(stmt)}`), outside any reset hook: on meta this does nothing "
                        f"and after `to_empty()` the child's own `reset_parameters()` restores "
                        f"its default init and the value is lost",
                        cls,
                        help="Move this init into the model's `init_weights()` (or a "
                        "`reset_parameters()` of this class), and call that hook from `__init__`",
                        conditions=(NotRecreated((attr,)), *law),
                        subject=(f"{attr}.{parts[-1]}",),
                        site=InitSite(method, "assign", children=self._children(cls)),
                    )

    def _child_container_loops(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """``for lin in self.lins: nn.init.zeros_(lin.bias)``: the tensors of each module of a
        container child (``nn.ModuleList``, ``nn.Sequential``) initialised in place by the
        parent's loop, as ``nn.init.zeros_(self.lins[0].bias)`` would be for one. After
        ``to_empty()`` each of those modules' own ``reset_parameters()`` restores its default
        init."""
        for method in methods:
            for call in method.calls:
                loop = next((n for n in reversed(call.loops) if isinstance(n, cst.For)), None)
                if loop is None or type(loop.target) is not cst.Name:
                    continue
                head = dotted(loop.iter) or ""
                if head.endswith(".children") or not head.startswith("self."):
                    head = dotted(getattr(loop.iter, "func", None)) or ""
                    head = head[: -len(".children")] if head.endswith(".children") else ""
                if not head.startswith("self.") or head.count(".") != 1:
                    continue
                w = self._write(call.node)
                if (
                    w is None
                    or w.kind == "storage"
                    or len(w.chain) < 2
                    or w.chain[0] != loop.target.value
                    or "[]" in w.chain
                ):
                    continue
                attr = head[5:]
                if attr not in self._children(cls):
                    continue
                name = f"{attr}.*.{'.'.join(w.chain[1:])}"
                yield Finding(
                    call.node,
                    f"`{name}` (a tensor of each module of the child `{attr}`) is initialised "
                    f"in place (`{short(call.node)}`) by a loop in `{method.name}`, outside any "
                    "reset hook: on meta this does nothing and after `to_empty()` each module's "
                    "own `reset_parameters()` restores its default init and the value is lost",
                    cls,
                    help="Move the loop into the model's `init_weights()` (or a hook that runs "
                    "after the children's), and call that hook from `__init__`",
                    conditions=(NotRecreated((attr,)),),
                    subject=(name,),
                    site=InitSite(method, "call", children=self._children(cls)),
                )

    def _replaced_child_tensors(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """``self.emb.weight = nn.Parameter(w, requires_grad=False)`` with ``w`` computed in
        ``__init__`` (the sinusoidal ``FixedEmbedding`` of Informer-family time-series models):
        the child's tensor replaced by a value. After ``to_empty()`` the child's own
        ``reset_parameters()`` draws its default init there, as for an init in place. A random
        value or a tensor of the caller or of ``self`` is not one."""
        for method in methods:
            for a in method.assigns:
                if a.augmented or a.target.count(".") != 2 or type(a.value) is not cst.Call:
                    continue
                data = parameter_value(a.value, self.qualify)
                if data is None or value_kind(data, self.qualify, method) != "value":
                    continue
                _self, child, tensor = a.target.split(".")
                if child not in self._children(cls):
                    continue
                name = f"{child}.{tensor}"
                conditions: tuple = (NotRecreated((child,)),)
                held = child_class(cls, methods, child, self.qualify)
                if held and all_zeros(data, self.qualify, method):
                    # a protocol zeroing that tensor of the child restores it
                    conditions += (SameLaw(held, tensor, ZEROS_LAW),)
                yield Finding(
                    a.node,
                    f"`{name}` (a tensor of the child `{child}`) is replaced by a parameter made "
                    f"from a value (`{short(data)}`) in `{method.name}`, outside any reset hook: "
                    f"on meta it holds no data and after `to_empty()` the child's own "
                    f"`reset_parameters()` restores its default init and the value is lost",
                    cls,
                    help="Copy the value into the child's tensor in `reset_parameters()` (own "
                    "tensors) or the model's `init_weights()`, and call that hook from `__init__`",
                    conditions=conditions,
                    subject=(name,),
                    site=_replaced(method, a, data, self._children(cls)),
                )


def _replaced(method: MethodFacts, assign: AttrAssign, data, children) -> InitSite:
    """The site of a child's tensor replaced by ``assign``'s ``nn.Parameter(data, ...)``."""
    value = assign.value
    call = same_tensor(value)
    return InitSite(
        method,
        "replace",
        data=data if call is value else None,
        requires_grad=keyword(call, "requires_grad"),
        starred=any(a.star for a in call.args),
        tensor=assign.target,
        alone=assign.alone and not shares_line(method.node, assign.node),
        children=children,
    )


def _parameter_loops(cls: ClassFacts, methods, qualify, children) -> Iterable[Finding]:
    """``for param in self.parameters(): nn.init.xavier_uniform_(param)`` in a class with
    no child modules (titans-pytorch's memory MLPs: a `ParameterList` and a projection):
    every parameter initialised in place by the parent's loop. With children it is ML010's
    (the parent's init of its children's tensors). ``children()``: the class's child
    attributes, asked only when there is such a loop."""
    lists = frozenset(
        a.target[5:]
        for m in methods
        for a in m.assigns
        if a.target.count(".") == 1
        and isinstance(a.value, cst.Call)
        and qualify(a.value.func) == "torch.nn.ParameterList"
    )
    loops = [
        (node, method, head)
        for method in methods
        for node, _targets, _it in method.loops
        if isinstance(node, cst.For)
        and (head := every_parameter_written(node, qualify, lists)) is not None
    ]
    if not loops:
        return
    kids = children()
    # every parameter (``self.parameters()``) of a module with children is ML010's: the
    # parent's init of its children's tensors; an own ``ParameterList`` is this module's
    loops = [x for x in loops if not x[2].endswith("()")] + (
        [] if kids else [x for x in loops if x[2].endswith("()")]
    )
    if not loops:
        return
    own = tuple(
        sorted(r.attr for r in tensor_registrations(methods, qualify) if r.kind == "parameter")
    )
    for node, method, head in loops:
        # a literal list of own tensors (``[self.w_qkv_c, self.w_o_c]``): those
        listed = own_attributes(node.iter) if type(node.iter) in (cst.List, cst.Tuple) else []
        written = tuple(listed) or own
        which = (
            "every parameter"
            if head.endswith("()")
            else f"every parameter of `{head.split(' in ', 1)[1]}`"
        )
        yield Finding(
            node,
            f"{which} is initialised in place by the loop `{head}` in "
            f"`{method.name}`, outside any reset hook: on meta this does nothing and after "
            "`to_empty()` the values are lost",
            cls,
            help="Move the loop into `reset_parameters()` and call it from `__init__`",
            conditions=(NotRecreated(written),) if written else (),
            subject=written,
            site=InitSite(method, "loop", children=kids),
        )


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
InplaceInitOutsideHook.VALID = [
    # the init lives in reset_parameters, called from __init__
    """
import torch
import torch.nn as nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
""",
    # timm-style: init_weights() called from __init__, helpers of the hook are hook code
    """
import torch
from torch import nn
from torch.nn.init import trunc_normal_

class VisionTransformer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.empty(1, 197, dim))
        self.init_weights()

    def init_weights(self):
        self._init_tokens()
        trunc_normal_(self.pos_embed, std=.02)

    def _init_tokens(self):
        nn.init.normal_(self.cls_token, std=1e-6)
""",
    # a base class in the same tree re-initialises it; writes on a local are not own tensors
    """
import torch
from torch.nn import init as I
import torch.nn as nn

class Base(nn.Module):
    def reset_parameters(self):
        I.xavier_uniform_(self.proj)

class Proj(Base):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Parameter(torch.empty(d, d))
        I.xavier_uniform_(self.proj)
        w = torch.empty(d)
        nn.init.normal_(w)
""",
    # timm's ConvNorm: the BatchNorm's own reset_parameters() gives ones / zeros again
    """
import torch
from torch import nn

class ConvNorm(nn.Sequential):
    def __init__(self, a, b, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.add_module("c", nn.Conv2d(a, b, 1, bias=False))
        self.add_module("bn", nn.BatchNorm2d(b))
        self.norm = norm_layer(b)
        nn.init.constant_(self.bn.weight, 1)
        nn.init.constant_(self.bn.bias, 0)
        nn.init.zeros_(self.norm.bias)
""",
    # a no-op by default, and no caller in the file passes another value
    """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, dim, classes, head_init_scale=1.0, bn_weight_init=1):
        super().__init__()
        self.head = nn.Linear(dim, classes)
        self.bn = nn.BatchNorm2d(dim)
        self.head.weight.data.mul_(head_init_scale)
        nn.init.constant_(self.bn.weight, bn_weight_init)

def make():
    return Net(8, 10, head_init_scale=1.0)
""",
    # timm LeViT: another class of the file gets bn_weight_init=0, ConvNorm never does
    """
import torch
from torch import nn

class ConvNorm(nn.Module):
    def __init__(self, a, b, bn_weight_init=1):
        super().__init__()
        self.c = nn.Conv2d(a, b, 1, bias=False)
        self.bn = nn.BatchNorm2d(b)
        nn.init.constant_(self.bn.weight, bn_weight_init)

class LinearNorm(nn.Module):
    def __init__(self, a, b, bn_weight_init=1):
        super().__init__()
        self.c = nn.Linear(a, b, bias=False)
        self.bn_weight_init = bn_weight_init

class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = ConvNorm(3, 8)
        self.proj = nn.Sequential(nn.Flatten(), LinearNorm(8, 8, bn_weight_init=0))
""",
    # timm EfficientViM: the model, while built, resets every BatchNorm it holds, so the
    # block's zero init of its BatchNorm is overwritten in an eager build too
    """
from functools import partial
import torch
from torch import nn

class ConvLayer(nn.Module):
    def __init__(self, a, b, norm=nn.BatchNorm2d, bn_weight_init=1.0):
        super().__init__()
        self.conv = nn.Conv2d(a, b, 1, bias=False)
        self.norm = norm(b) if norm else None
        if isinstance(self.norm, nn.modules.batchnorm._BatchNorm):
            nn.init.constant_(self.norm.weight, bn_weight_init)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = ConvLayer(8, 8, bn_weight_init=0)
        self.head = nn.Linear(8, 10)
        self.init_weights(needs_reset=False)

    def init_weights(self, needs_reset=True):
        self.apply(partial(self._init_weights, needs_reset=needs_reset))

    def _init_weights(self, m, needs_reset=True):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            m.reset_parameters()
""",
    # the init a norm's own reset gives, written before the norm is attached
    """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, d, device=None, dtype=None):
        super().__init__()
        norm = nn.LayerNorm(d, device=device, dtype=dtype)
        nn.init.ones_(norm.weight)
        nn.init.zeros_(norm.bias)
        self.pre = nn.Sequential(norm, nn.GELU())
""",
]

InplaceInitOutsideHook.INVALID = [
    # a child's tensor replaced by a table computed here (Informer's FixedEmbedding)
    """
import math
import torch
import torch.nn as nn

class FixedEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super().__init__()
        w = torch.zeros(c_in, d_model)
        position = torch.arange(0, c_in).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        w[:, 0::2] = torch.sin(position * div_term)
        w[:, 1::2] = torch.cos(position * div_term)
        self.emb = nn.Embedding(c_in, d_model)
        self.emb.weight = nn.Parameter(w, requires_grad=False)  # ERROR
""",
    # a loop over every parameter of a module with no child modules (titans-pytorch)
    """
import torch
from torch import nn

class MemoryMLP(nn.Module):
    def __init__(self, dim, depth=2):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.empty(dim, dim)) for _ in range(depth)])
        self.final_proj = nn.Parameter(torch.empty(dim, dim))
        for param in self.parameters():  # ERROR
            nn.init.xavier_uniform_(param)
""",
    # a loop over an own ParameterList, beside a child module
    """
import torch
from torch import nn

class MemoryMLP(nn.Module):
    def __init__(self, dim, depth=2):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.weights = nn.ParameterList([nn.Parameter(torch.empty(dim, dim)) for _ in range(depth)])
        for weight in self.weights:  # ERROR
            nn.init.xavier_uniform_(weight)
""",
    # a loop over the modules of a container child (torch-geometric's DimeNet blocks,
    # in __init__ rather than reset_parameters())
    """
import torch
from torch import nn

class Mlp(nn.Module):
    def __init__(self, dim, depth=2):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
        for lin in self.lins:
            nn.init.zeros_(lin.bias)  # ERROR
""",
    # a subclass built with bn_weight_init=0 forwards it to the class that sets it
    """
import torch
from torch import nn

class ConvNorm(nn.Module):
    def __init__(self, a, b, bn_weight_init=1):
        super().__init__()
        self.c = nn.Conv2d(a, b, 1, bias=False)
        self.bn = nn.BatchNorm2d(b)
        nn.init.constant_(self.bn.weight, bn_weight_init)  # ERROR

class ConvNormAct(ConvNorm):
    def __init__(self, a, b, **kwargs):
        super().__init__(a, b, **kwargs)
        self.act = nn.ReLU()

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = ConvNormAct(8, 8, bn_weight_init=0)
""",
    # llm-foundry style RMSNorm, every spelling of nn.init
    # timm's tokens, then a head that draws: the new hook is called where the init was
    Invalid(
        """
import torch
from torch import nn

class Tokens(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        nn.init.normal_(self.cls_token, std=1e-6)  # ERROR
        self.head = nn.Linear(dim, dim)
""",
        fixed="""
import torch
from torch import nn

class Tokens(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.reset_parameters()
        self.head = nn.Linear(dim, dim)

    def reset_parameters(self):
        nn.init.normal_(self.cls_token, std=1e-6)  # ERROR
""",
    ),
    Invalid(
        """
import torch
from torch import nn
from torch.nn import init as I
from torch.nn.init import trunc_normal_

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.pos = nn.Parameter(torch.empty(4, dim))
        self.scale = nn.Parameter(torch.empty(dim))
        self.weight.data.fill_(1.0)  # ERROR
        I.zeros_(self.bias)  # ERROR
        trunc_normal_(self.pos, std=.02)  # ERROR
        torch.nn.init.constant_(self.scale, 0.1)  # ERROR
""",
        fixed="""
import torch
from torch import nn
from torch.nn import init as I
from torch.nn.init import trunc_normal_

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.pos = nn.Parameter(torch.empty(4, dim))
        self.scale = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        self.weight.data.fill_(1.0)  # ERROR
        I.zeros_(self.bias)  # ERROR
        trunc_normal_(self.pos, std=.02)  # ERROR
        torch.nn.init.constant_(self.scale, 0.1)  # ERROR
""",
    ),
    # no_grad copy and a child's tensor (ConvNeXt head_init_scale)
    """
import torch
import torch.nn as nn

class ConvNeXt(nn.Module):
    def __init__(self, dim, classes, head_init_scale=1.0):
        super().__init__()
        self.head = nn.Linear(dim, classes)
        self.table = nn.Parameter(torch.empty(16, dim))
        with torch.no_grad():
            self.table.copy_(torch.randn(16, dim) * 0.02)  # ERROR
        self.head.weight.data.mul_(head_init_scale)  # ERROR
        self.head.bias.data.mul_(head_init_scale)  # ERROR

def convnext_atto():
    return ConvNeXt(40, 1000, head_init_scale=0.001)
""",
    # MultiheadAttention-style private hook: not a reset hook, so the init is lost
    """
import torch
from torch import nn

class MHA(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self._reset_parameters()

    def _reset_parameters(self):
        nn.init.xavier_uniform_(self.in_proj_weight)  # ERROR
        self.in_proj_bias.data.zero_()  # ERROR
""",
    # timm LeViT: the model resets its modules only when asked (`needs_reset`), and not
    # while it is built, so the block's zero init of its BatchNorm is the built value
    """
from functools import partial
import torch
from torch import nn

class ConvNorm(nn.Module):
    def __init__(self, a, b, bn_weight_init=1):
        super().__init__()
        self.c = nn.Conv2d(a, b, 1, bias=False)
        self.bn = nn.BatchNorm2d(b)
        nn.init.constant_(self.bn.weight, bn_weight_init)  # ERROR

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = ConvNorm(8, 8, bn_weight_init=0)
        self.init_weights(needs_reset=False)

    def init_weights(self, needs_reset=True):
        self.apply(partial(self._init_weights, needs_reset=needs_reset))

    def _init_weights(self, m, needs_reset=True):
        if needs_reset and hasattr(m, "reset_parameters"):
            m.reset_parameters()
""",
    # a timm-style MLP: the first layer initialised before it is attached
    """
import torch
from torch import nn

class Mlp(nn.Module):
    def __init__(self, d, hidden, device=None, dtype=None):
        super().__init__()
        fc1 = nn.Linear(d, hidden, device=device, dtype=dtype)
        nn.init.normal_(fc1.weight, std=0.02)  # ERROR
        fc2 = nn.Linear(hidden, d, device=device, dtype=dtype)
        fc2.bias.data.zero_()  # ERROR
        self.mlp = nn.Sequential(fc1, nn.GELU())
        self.add_module("out", fc2)
""",
    # a fixed filter bank and an identity start written through `.data`
    """
import torch
from torch import nn

class FilterBank(nn.Module):
    def __init__(self, c, device=None, dtype=None):
        super().__init__()
        self.conv = nn.Conv1d(c, c, 1, bias=False, device=device, dtype=dtype)
        self.conv.weight.data[:] = torch.arange(c * c).view(c, c, 1)  # ERROR
        mix = nn.Linear(c, c, device=device, dtype=dtype)
        mix.weight.data = torch.eye(c)  # ERROR
        self.mix = mix
""",
]
