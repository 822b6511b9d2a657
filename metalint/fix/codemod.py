"""Shared machinery of the codemods: editing one class with libcst, keeping formatting.

A codemod reads the facts of one class and the node a rule reported, and either returns a
:class:`Rewrite` (the new ``ClassDef``, its applicability, a message) or raises
:class:`Unfixable` with the reason. Everything is computed from the syntax tree; nothing is
imported or executed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.fix.edits import (
    OWN_RESET,
    OffKeptDevice,
    OnDevice,
    ReplaceStatements,
    Rewrite,
    SwapCall,
    Unfixable,
    base_guard_comment,
    calls_self,
    expand,
    expr,
    is_docstring,
    is_pass,
    join_with_blocks,
    new_method,
    on_self,
    path_to,
    stmt,
    transformed,
)
from metalint.fix.flow import self_attr, uses
from metalint.fix.hooks import HookPlacement
from metalint.fix.store import Storing
from metalint.static.construction import (
    registrations,
)
from metalint.static.model import ClassFacts, construction
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import (
    inplace_write,
)
from metalint.vocabulary import (
    BUFFER_CLASSES,
    HOOKLESS_BASES,
    INPLACE_METHODS,
    METADATA_ATTRIBUTES,
    METADATA_METHODS,
    PARAMETER_CLASSES,
    RESET_HOOK,
)


def extending_hook(returns: str, last: str, comment: str) -> cst.FunctionDef:
    """The tree of::

        def reset_parameters(self)<returns>:
            super().reset_parameters()
            if hasattr(self, "<last>"):  <comment>
                self.__reset_own_tensors()

    (see :meth:`ClassEdit._extending_base`): its lines parsed once, then the tensor's name
    and the comment put in their nodes."""
    fn = stmt(
        f"def {RESET_HOOK}(self){returns}:\n"
        f"    super().{RESET_HOOK}()\n"
        '    if hasattr(self, "_"):  # _\n'
        f"        self.{OWN_RESET}()\n"
    )
    call, guard = fn.body.body
    test = guard.test
    name = test.args[1].with_changes(value=test.args[1].value.with_changes(value=f'"{last}"'))
    header = guard.body.header.with_changes(comment=cst.Comment(comment))
    guard = guard.with_changes(
        test=test.with_changes(args=(test.args[0], name)),
        body=guard.body.with_changes(header=header),
    )
    return fn.with_changes(body=fn.body.with_changes(body=(call, guard)))


@dataclass
class ClassEdit(HookPlacement, Storing):
    """Edits of one class, scheduled on the original nodes and applied at once by
    :meth:`build`: the recorder. Where a node is (:class:`Locating`), which hook takes moved
    code and where ``__init__`` calls it (:class:`HookChoice`, :class:`HookPlacement`), how a
    value keeps the locals it reads (:class:`Storing`) are the parts it is made of."""

    ctx: RuleContext
    cls: ClassFacts
    #: original statement -> statements that replace it (in its block)
    replace: dict[int, tuple[cst.BaseStatement, list[cst.BaseStatement]]] = field(
        default_factory=dict
    )
    init_append: list[cst.BaseStatement] = field(default_factory=list)
    hook_append: dict[str, list[cst.BaseStatement]] = field(default_factory=dict)
    #: statements that open an existing hook (code that ran before ``__init__`` called it)
    hook_prepend: dict[str, list[cst.BaseStatement]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    #: the value stays where ``__init__`` makes it and ``use_hook`` adds no call of the hook:
    #: the hook re-creates it for the protocol only (:meth:`keeps_value`)
    keep_value: bool = False
    #: a torch base class whose ``reset_parameters()`` a new hook must extend
    torch_base: str | None = None
    #: the hooks this edit already made ``__init__`` call
    hook_call_added: set[str] = field(default_factory=set)
    #: ids of the methods other than ``__init__`` holding a replaced statement (a helper that
    #: ``__init__`` calls: esm1's ``_init_submodules_esm1()`` creating a parameter)
    replaced_methods: set[int] = field(default_factory=set)

    def replace_in_method(
        self, method: cst.FunctionDef, line: cst.BaseStatement, new: list[cst.BaseStatement]
    ) -> None:
        """Replace statement ``line`` of ``method`` (not ``__init__``) by ``new``."""
        self.replace[id(line)] = (line, new)
        self.replaced_methods.add(id(method))

    # -- build ---------------------------------------------------------------------------------
    def _init_statements(self) -> list[cst.BaseStatement]:
        """``__init__``'s body with the replacements made."""
        # top-level statements are spliced directly; only a statement holding a replaced
        # statement deeper down (inside an ``if``) is visited
        body: list[cst.BaseStatement] = []
        tops = {id(t) for t in self.init_body}
        nested = [v[0] for k, v in self.replace.items() if k not in tops]
        for top in self.init_body:
            hit = self.replace.get(id(top))
            if hit is not None and hit[0] is top:
                new = top
                if nested and any(path_to(top, n) is not None for n in nested):
                    # stores put before an ``if`` whose block also changes (ML003's
                    # condition for the hook, read from an argument kept on ``self``)
                    inner = {k: v for k, v in self.replace.items() if k not in tops}
                    new = transformed(top, ReplaceStatements(inner))
                body.extend(expand(top, new, hit[1]))
            elif nested and any(path_to(top, n) is not None for n in nested):
                new = transformed(top, ReplaceStatements(self.replace))
                if isinstance(new, cst.FlattenSentinel):
                    body.extend(new.nodes)
                elif not isinstance(new, cst.RemovalSentinel):
                    body.append(new)
            else:
                body.append(top)
        return body

    def build(self) -> cst.ClassDef:
        """The class with every scheduled edit applied."""
        cls_node = self.cls.node
        init_node = self.init.node
        out: list[cst.BaseStatement] = []
        for m in cls_node.body.body:
            if id(m) in self.replaced_methods and m is not init_node:
                if m.name.value in self.hook_append:
                    raise Unfixable(f"`{m.name.value}()` is both changed and extended")
                out.append(transformed(m, ReplaceStatements(self.replace)))
            elif m is init_node:
                out.append(self._new_init())
                for hook, stmts in self.hook_append.items():
                    if hook not in self.cls.methods:
                        out.append(new_method(hook, self.on_module_device(stmts), init_node))
            else:
                out.append(self._extended(m))
        return cls_node.with_changes(body=cls_node.body.with_changes(body=out))

    def _new_init(self) -> cst.FunctionDef:
        """``__init__`` with its statements replaced and appended."""
        new_init = self.init.node
        if self.replace:
            new_init = new_init.with_changes(
                body=new_init.body.with_changes(body=self._init_statements())
            )
        if self.init_append:
            body = new_init.body
            new_init = new_init.with_changes(
                body=body.with_changes(body=[*body.body, *self.init_append])
            )
        return new_init

    def _extended(self, m: cst.BaseStatement) -> cst.BaseStatement:
        """Member ``m`` of the class, with the code appended to and put before the code of a
        hook it is."""
        name = m.name.value if isinstance(m, cst.FunctionDef) else None
        if not (
            (name in self.hook_append or name in self.hook_prepend)
            and self.cls.methods.get(name)
            and self.cls.methods[name].node is m
        ):
            return m
        stmts = self.on_module_device(self.hook_append.get(name, []))
        body = m.body
        kept = [s for s in body.body if not is_pass(s)]
        doc = kept[:1] if kept and is_docstring(kept[0]) else []
        opening = list(self.hook_prepend.get(name, []))
        if opening:
            rest = kept[len(doc) :]
            kept = [*doc, *join_with_blocks(opening + rest[:1]), *rest[1:]]
        joined = [*kept[:-1], *join_with_blocks(kept[-1:] + list(stmts))]
        return m.with_changes(body=body.with_changes(body=joined))

    def on_module_device(self, stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A hook's new statements with the tensors they make put on the module's device
        when they compute with one of its tensors. ``to_empty(device="cuda")`` moves the
        module's tensors; a factory without ``device=`` still makes its tensor on the CPU, and
        ``torch.arange(n)[..., None] & self.mask`` (vector-quantize-pytorch's ``LFQ``, where
        ``__init__`` made both on the default device) raises. A tensor of the module only
        written (``self.b.copy_(torch.arange(n))``: ``copy_`` crosses devices; an in-place
        init) or only measured (``self.w.shape``, ``self.w is not None``) does not count."""
        own = self._registered()
        stmts = [self._off_captured_device(s, stmts[i:], own) for i, s in enumerate(stmts)]
        written: set[int] = set()
        measured: set[int] = set()
        for n in (x for s in stmts for x in walk_code(s)):
            if type(n) is cst.Attribute and n.attr.value in METADATA_ATTRIBUTES | METADATA_METHODS:
                measured.add(id(n.value))
            if type(n) is cst.Comparison and all(
                type(c.operator) in (cst.Is, cst.IsNot) for c in n.comparisons
            ):  # ``if self.output_mask is not None:``, the guard of an optional buffer
                measured.update(id(x) for x in (n.left, *(c.comparator for c in n.comparisons)))
            if type(n) is cst.Call and inplace_write(n, self.ctx.qualify) is not None:
                target = n.func.value if type(n.func) is cst.Attribute else None
                if type(n.func) is not cst.Attribute or n.func.attr.value not in INPLACE_METHODS:
                    target = n.args[0].value if n.args else None
                written.update(id(x) for x in walk_code(target) if target is not None)
        read = next(
            (
                n.attr.value
                for n in on_self(stmts)
                if n.attr.value in own and id(n) not in written | measured
            ),
            None,
        )
        if read is None:
            return stmts
        device = expr(f"self.{read}.device")
        on_device = OnDevice(device, self.ctx.qualify)
        return [transformed(s, on_device) for s in stmts]

    def _registered(self) -> frozenset[str]:
        """The tensors the class registers while it is built, worked out once per class."""
        key = ("registered", id(self.cls.node))
        hit = self.ctx.memo.get(key)
        if hit is None or hit[1] is not self.cls:
            regs = registrations(construction(self.cls), self.ctx.qualify)
            hit = self.ctx.memo[key] = (frozenset(r.attr for r in regs), self.cls)
        return hit[0]

    def _off_captured_device(
        self, s: cst.BaseStatement, rest: list[cst.BaseStatement], own: set[str]
    ) -> cst.BaseStatement:
        """A hook statement's factories (and ``.to()`` copies) placed on a device ``__init__``
        kept as a plain attribute (torchrl's ``GAE``: ``self._device =
        torch.get_default_device()``, then ``torch.tensor(gamma, device=self._device)``) are put
        on the device of the module's tensor the statement works on instead: under
        ``torch.device("meta")`` the kept device is ``meta``, and the hook's copy out of it
        raised after ``to_empty()``. Eagerly both are the device the tensor was made on. A
        statement computing a local takes the tensor of the first statement after it (``rest``:
        this one and those after it) that works on one."""
        tensor = next((n.attr.value for n in on_self(rest) if n.attr.value in own), None)
        if tensor is None:
            return s
        kept = {
            id(n)
            for n in on_self([s])
            if n.attr.value not in own and "device" in n.attr.value.lower()
        }
        if not kept:
            return s
        return transformed(s, OffKeptDevice(kept, expr(f"self.{tensor}.device"), self.ctx.qualify))

    def rewrite(self, message: str) -> Rewrite:
        new = self.build()
        app = Applicability.UNSAFE if self.unsafe else Applicability.SAFE
        if self.unsafe:
            message += " (unsafe: " + "; ".join(dict.fromkeys(self.unsafe)) + ")"
        hook = next(reversed(self.hook_append), None)
        done = Rewrite(new, app, message, hook, kept=self.keep_value)
        done.over_base_hook = self._extending_base(new, app, message)
        if self.torch_base is not None and hook == RESET_HOOK:
            if done.over_base_hook is None:
                raise Unfixable(
                    f"the base class `{self.torch_base}` has its own `reset_parameters()`"
                )
            return done.over_base_hook
        return done

    def _extending_base(
        self, new: cst.ClassDef, app: Applicability, message: str
    ) -> Rewrite | None:
        """The rewrite to apply instead of ``new`` (which gives the class a new
        ``reset_parameters()``) when the tree shows that a base class (of this file or another)
        has its own ``reset_parameters()``: the new hook would override the base's. What a
        maintainer writes then: the moved code goes into a private method (``__init__`` calls
        it where it called the new hook), and ``reset_parameters()`` extends the base's::

            def reset_parameters(self):
                super().reset_parameters()
                if hasattr(self, "_exponents"):  # not yet when BasePairPotential.__init__() calls it
                    self.__reset_own_tensors()

        The base's ``__init__`` may call the hook (torchani ``_ChemModule``, which ML002's fix
        of ``atomic_numbers`` gives a ``reset_parameters()`` called last; neuralop
        ``DiscreteContinuousConv``, whose ``weight`` ML001's fix draws there): virtual dispatch
        runs the override before this class made its tensors, so the private method is
        guarded by the last tensor ``__init__`` registers before calling it. ``__init__`` does
        not call the hook itself: that would run the base's init a second time (a second
        random draw where the base draws). The method's name is private to the class (name
        mangling): a subclass extending this hook in turn has its own. Eager construction runs
        the same code in the same order as ``new`` does (same applicability). None when the
        class defines or calls ``reset_parameters()`` already, has only torch bases, or no
        tensor of it can guard the method."""
        hook = RESET_HOOK
        found = self._base_to_extend()
        if found is None:
            return None
        bases, inherited = found
        members = list(new.body.body)
        where = {m.name.value: i for i, m in enumerate(members) if isinstance(m, cst.FunctionDef)}
        if "__init__" not in where or hook not in where:
            return None
        called = hook if inherited else OWN_RESET
        init = members[where["__init__"]]
        if not inherited:
            swap = SwapCall(hook, OWN_RESET)
            init = transformed(init, swap)
            if not swap.swapped:
                return None
        if not isinstance(init.body, cst.IndentedBlock):
            return None
        own = members[where[hook]]
        written, read, _ = uses(own.body)
        last = self._guard_tensor(list(init.body.body), called, written | read)
        if last is None:
            return None
        returns = " -> None" if own.returns is not None else ""
        reset = extending_hook(returns, last, base_guard_comment(bases[0])).with_changes(
            leading_lines=own.leading_lines
        )
        private = own.with_changes(
            name=cst.Name(OWN_RESET), leading_lines=[cst.EmptyLine(indent=False)]
        )
        members[where["__init__"]] = init
        members[where[hook] : where[hook] + 1] = [reset, private]
        out = new.with_changes(body=new.body.with_changes(body=members))
        return Rewrite(
            out,
            app,
            f"{message}, in a private method that a `{hook}()` extending the base's calls",
            hook,
            kept=self.keep_value,
        )

    def _base_to_extend(self) -> tuple[list[str], bool] | None:
        """For :meth:`_extending_base`: the bases whose ``reset_parameters()`` the new hook
        extends, and whether ``__init__`` calls the torch base's hook itself; None when no
        hook extending a base's is made."""
        hook = RESET_HOOK
        if hook not in self.hook_append or hook in self.cls.methods:
            return None
        bases = [
            b for b in self.cls.bases if not b.startswith("torch.nn.") and b not in HOOKLESS_BASES
        ] or ([self.torch_base] if self.torch_base else [])
        if not bases:
            return None
        calls, nested = self.hook_calls(hook)
        # ``__init__`` calling the torch base's hook itself (pypots' ``PeepholeLSTMCell``:
        # ``self.reset_parameters()`` last): that call runs the override, which the moved code
        # joined at its end, as :meth:`use_hook` judged it
        inherited = bool(calls) and self.torch_base is not None
        if (calls and not inherited) or nested or self.taken(OWN_RESET):
            return None
        if self.super_index() is None:
            return None
        return bases, inherited

    def _guard_tensor(self, body: list, called: str, used: set[str]) -> str | None:
        """The last tensor of ``used`` that ``__init__`` (``body``) makes after calling the
        base's ``__init__`` and before its first statement calling ``self.<called>()``: the
        guard of the hook's own code. None when there is none (or the call is in a block)."""
        first = None
        for i, s in enumerate(body):
            if isinstance(s, cst.SimpleStatementLine) and any(
                isinstance(x, cst.Expr) and calls_self(x.value, called) for x in s.body
            ):
                first = i
                break
        if first is None:
            return None  # called inside a block only
        start = next(
            i
            for i, s in enumerate(body)
            if any(
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "__init__"
                for n in walk_code(s)
            )
        )
        last = None
        for s in body[start + 1 : first]:
            for small in s.body if isinstance(s, cst.SimpleStatementLine) else ():
                made = self._made_tensor(small)
                if made is not None and made in used:
                    last = made
        return last

    def _made_tensor(self, small: cst.BaseSmallStatement) -> str | None:
        """``x`` for ``self.x = nn.Parameter(...)`` / ``nn.Buffer(...)`` and
        ``self.register_buffer("x", ...)`` / ``self.register_parameter("x", ...)``."""
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            attr = self_attr(dotted(small.targets[0].target))
            v = small.value
            if (
                attr
                and isinstance(v, cst.Call)
                and self.ctx.qualify(v.func) in PARAMETER_CLASSES | BUFFER_CLASSES
            ):
                return attr
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            d = dotted(call.func) or ""
            if (
                d in ("self.register_buffer", "self.register_parameter")
                and call.args
                and isinstance(call.args[0].value, cst.SimpleString)
            ):
                return call.args[0].value.evaluated_value
        return None
