"""The semantic model of one file, built in a single libcst traversal.

Rules never walk the tree themselves: they read the facts recorded here for each class —
what each method assigns to ``self``, which calls it makes (qualified through import aliases),
under which context (``torch.no_grad()``, a loop, a condition) — and look into the value
expressions they care about.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from metalint.static.names import Aliases, dotted, partial_class, torch_module_class
from metalint.static.syntax import code_children_getter, walk_code
from metalint.vocabulary import NO_GRAD_CONTEXTS, PARTIAL_FUNCTIONS, SKIPPED_METHOD_PREFIXES


@dataclass
class CallSite:
    node: cst.Call
    qualname: str | None  # canonical qualified name of the callee, when importable
    method: str | None  # attribute name when the callee is ``<expr>.method``
    receiver: str | None  # dotted receiver of a method call, e.g. "self.gamma.data"
    in_no_grad: bool
    in_loop: bool
    #: the enclosing ``for`` statements, outermost first (see ``MethodFacts.loops``)
    loops: tuple[cst.CSTNode, ...] = ()


@dataclass
class AttrAssign:
    node: cst.CSTNode  # the Assign / AnnAssign / AugAssign statement
    target: str  # dotted target, "self.gamma" or "self.head.weight"
    value: cst.BaseExpression | None
    augmented: bool = False

    @property
    def alone(self) -> bool:
        """Does the statement set this target alone (``self.x = v``, ``self.x: T = v``; not
        ``self.x = self.y = v``, ``self.x, self.y = a, b`` or ``self.x += v``)?"""
        node = self.node
        if type(node) is cst.Assign:
            return len(node.targets) == 1 and dotted(node.targets[0].target) == self.target
        return type(node) is cst.AnnAssign


#: index expressions that may be a boolean mask (a comparison, ``&``/``|``/``~`` of masks, a
#: local or a call holding one)
_MASK_SYNTAX = (cst.Comparison, cst.BinaryOperation, cst.UnaryOperation, cst.Name, cst.Call)


@dataclass
class MethodFacts:
    name: str
    node: cst.FunctionDef
    params: list[str] = field(default_factory=list)
    assigns: list[AttrAssign] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    conditions: list[cst.BaseExpression] = field(default_factory=list)
    self_calls: set[str] = field(default_factory=set)  # self.foo(...)
    super_calls: set[str] = field(default_factory=set)  # super().foo(...)
    local_values: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]] = field(
        default_factory=dict
    )
    # for-loops over self.parameters()/buffers()/modules(): re-creates everything
    loops_over_own_tensors: bool = False
    #: every ``for`` statement and comprehension ``for``: (node, target names, iterable)
    loops: list[tuple[cst.CSTNode, tuple[str, ...], cst.BaseExpression]] = field(
        default_factory=list
    )
    #: subscripts whose index may be a boolean mask (``x[x.abs() <= 1]``, ``t[mask]``, ``t[~m]``)
    masked: list[cst.Subscript] = field(default_factory=list)
    #: :func:`metalint.static.ownership.meta_tensor`'s answer for each local, by the locals
    #: assumed meta and the own tensors it was asked with: a chain of locals each computed
    #: from the one before is walked once, not once per path through it
    meta_locals: dict[tuple, bool] = field(default_factory=dict, repr=False, compare=False)

    @property
    def arguments(self) -> set[str]:
        """Every parameter name, ``*args`` and ``**kwargs`` too (``params`` leaves those out):
        monai ``Scheduler``'s ``**schedule_args``, which a hook recomputing ``__init__``'s
        locals must keep like any other argument."""
        star = [self.node.params.star_arg, self.node.params.star_kwarg]
        return set(self.params) | {p.name.value for p in star if isinstance(p, cst.Param)}

    def holds_argument(self, name: cst.Name) -> bool:
        """Does ``name``, read in this method, certainly hold what the caller passed: it names
        an argument, and it is read before any statement of the body assigns it again
        (transformers ``MimiConv1d`` reads ``stride`` before ``stride = torch.tensor(...)``:
        the caller's int)? Read after such a statement it holds what the method made, on
        every path or on some (nflows ``PointwiseAffineTransform``: ``shift, scale =
        map(torch.as_tensor, (shift, scale))``, then ``if not (scale > 0.0).all():``; kornia
        ``SpatialSoftArgmax2d``: ``if temperature is None: temperature = torch.tensor(1.0)``):
        its assignments decide, as any local's do."""
        if name.value not in self.params:
            return False
        if not self.local_values.get(name.value):
            return True  # never assigned in the body: what the caller passed, wherever read
        row = self._statement_of()
        at = row.get(id(name))
        mine = [
            row[id(stmt)] for stmt, _ in self.local_values.get(name.value, ()) if id(stmt) in row
        ]
        first = min(mine, default=None)
        return first is None or (at is not None and at <= first)

    def _statement_of(self) -> dict[int, int]:
        """id of each code node of the body -> the index of the top-level statement holding
        it, once per method (rules ask :meth:`holds_argument` of many names)."""
        index = self.__dict__.get("_statements")
        if index is None:
            index = self.__dict__["_statements"] = {}
            for i, line in enumerate(self.node.body.body):
                for n in walk_code(line):
                    index.setdefault(id(n), i)
        return index

    #: every ``Assign`` and ``AugAssign`` statement, in visiting order
    binds: list[cst.CSTNode] = field(default_factory=list)
    #: ``calls[body_calls:]`` are the calls of the body (those before it are in decorators
    #: and parameters); None when the collector did not read the body as a block
    body_calls: int | None = None
    #: the body defines a class, whose body the collector does not read
    nested_class: bool = False


@dataclass
class ClassFacts:
    name: str
    qualname: str  # inside the module, "Outer.Inner"
    fullname: str  # "pkg.mod.Outer.Inner"
    node: cst.ClassDef
    bases: list[str]  # qualified names of the bases, "?" for an expression we cannot name
    methods: dict[str, MethodFacts] = field(default_factory=dict)
    #: methods of this class that the ``__init__`` of a base of the same file calls as
    #: ``self.m()`` while the class is built (a template method: the base's ``__init__`` calls
    #: ``self._build()``, the class defines it); see :func:`inherited_calls`
    inherited: tuple[str, ...] = ()
    #: methods of the bases of the same file that the class does not define, nearest base
    #: first (see :func:`base_helpers`)
    from_bases: dict[str, MethodFacts] = field(default_factory=dict)
    #: :func:`construction`'s answers, by its arguments (every rule asks for every class)
    built: dict[tuple, list[MethodFacts]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def init(self) -> MethodFacts | None:
        return self.methods.get("__init__")

    def reachable(self, start: str) -> list[MethodFacts]:
        """``start`` and the methods of this class it calls as ``self.m()``, transitively."""
        seen: list[MethodFacts] = []
        todo = [start]
        names: set[str] = set()
        while todo:
            name = todo.pop()
            if name in names or name not in self.methods:
                continue
            names.add(name)
            m = self.methods[name]
            seen.append(m)
            todo.extend(sorted(m.self_calls))
        return seen


#: imported functions construction may call that are not the checked tree's helpers
NOT_THE_TREE = ("torch.", "builtins.", "math.", "numpy.", "typing.", "functools.", "warnings.")


def calls_into_tree(call: CallSite) -> bool:
    """Is ``call`` a call of an imported function that may be defined in another file of the
    checked tree (``make_window(n)``, ``utils.make_window(n)``)? A lower-case name outside
    torch: a class is built, not called into (its own ``__init__`` is checked where it is
    defined). Whether the tree defines it is answered across files (``Hierarchy``)."""
    return _into_tree(call.qualname)


def _into_tree(q: str | None) -> bool:
    return q is not None and q.rpartition(".")[2][:1].islower() and not q.startswith(NOT_THE_TREE)


@dataclass(frozen=True)
class ConstructionCall:
    """A call that construction makes, as :func:`construction_calls` finds it: ``call``, in
    ``caller`` (a method of construction or a function of the file it runs); ``helper``, the
    facts of the module-level function of this file the call runs (None for any other);
    ``target``, the qualified name of an imported function it runs that may be defined in
    another file of the checked tree (:func:`calls_into_tree`; None for any other);
    ``unset``, the parameters of ``caller`` (a function of the file) that hold ``None`` on
    this path because no caller passes them (``device=None``: a factory given it makes its
    tensor on the default device, meta under ``torch.device("meta")``); ``args``, the
    arguments the function called gets (those a ``partial`` binds first)."""

    call: CallSite
    caller: MethodFacts
    helper: MethodFacts | None = None
    target: str | None = None
    unset: frozenset[str] = frozenset()
    args: tuple[cst.Arg, ...] = ()


def partial_bindings(methods: list[MethodFacts], qualify) -> dict[str, cst.Call]:
    """``x`` -> ``partial(f, ...)`` for each ``self.x = partial(f, ...)`` that is the only
    assignment of ``self.x`` in ``methods`` (construction): ``self.x(...)`` there runs ``f``
    (performer's ``self.create_projection = partial(gaussian_orthogonal_random_matrix,
    ...)``, then ``self.create_projection()``)."""
    found: dict[str, list[AttrAssign]] = {}
    for m in methods:
        for a in m.assigns:
            head, _, attr = a.target.partition(".")
            if head == "self" and attr and "." not in attr:
                found.setdefault(attr, []).append(a)
    out = {}
    for attr, assigns in found.items():
        value = assigns[0].value
        if (
            len(assigns) == 1
            and assigns[0].alone
            and type(value) is cst.Call
            and value.args
            and value.args[0].keyword is None
            and not value.args[0].star
            and qualify(value.func) in PARTIAL_FUNCTIONS
        ):
            out[attr] = value
    return out


#: the key of the facts of the module-level functions :func:`construction_calls` reads, in the
#: rules' context memo (one collection per file, whichever rule asks first)
_HELPER_FACTS = "helper_function_facts"


def construction_calls(
    method: MethodFacts, bound: dict[str, cst.Call], ctx
) -> Iterator[ConstructionCall]:
    """Each call of ``method`` and of the module-level functions of this file it runs,
    transitively (``__init__`` -> ``stage_sizes(n)`` -> ``steps(n)``), also through a
    ``partial`` bound on the module (``bound``: :func:`partial_bindings`); the one answer
    to which functions construction runs. ``ctx``: the rules' context (``module``,
    ``facts``, ``qualify``, ``memo``)."""
    seen: set[tuple] = set()
    todo = [(method, frozenset())]
    while todo:
        caller, unset = todo.pop(0)
        for call in caller.calls:
            found = _construction_call(call, caller, unset, bound, ctx)
            yield found
            if found.helper is not None:
                left = unset_parameters(found.helper, found.args, caller, unset)
                if (id(found.helper.node), left) not in seen:
                    seen.add((id(found.helper.node), left))
                    todo.append((found.helper, left))


def _construction_call(call: CallSite, caller: MethodFacts, unset, bound, ctx) -> ConstructionCall:
    func, args = call.node.func, tuple(call.node.args)
    if call.receiver == "self" and call.method in bound:
        made = bound[call.method]
        func, args = made.args[0].value, (*made.args[1:], *args)
    q = call.qualname if func is call.node.func else ctx.qualify(func)
    helper = _function_facts(func.value, ctx) if type(func) is cst.Name and q is None else None
    target = q if helper is None and _into_tree(q) else None
    return ConstructionCall(call, caller, helper, target, unset, args)


def _function_facts(name: str, ctx) -> MethodFacts | None:
    known = ctx.memo.setdefault(_HELPER_FACTS, {})
    if name not in known:
        fn = next(
            (s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == name),
            None,
        )
        known[name] = function_facts(fn, ctx.facts) if fn is not None else None
    return known[name]


def unset_parameters(
    helper: MethodFacts,
    args: Sequence[cst.Arg] = (),
    caller: MethodFacts | None = None,
    unset: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The parameters of ``helper`` that a call of ``args`` leaves holding ``None``: not
    passed while their default is ``None``, or passed ``None`` or a parameter of ``caller``
    in ``unset``. None is known when the call unpacks ``*``/``**``. Without ``args``: the
    parameters whose default is ``None`` (the function as another file's construction calls
    it, with its defaults)."""
    if any(a.star for a in args):
        return frozenset()
    params = helper.node.params
    positional = [*params.posonly_params, *params.params]
    passed = {
        p.name.value: a.value for p, a in zip(positional, [a for a in args if a.keyword is None])
    }
    passed.update({a.keyword.value: a.value for a in args if a.keyword is not None})
    out = set()
    for p in (*positional, *params.kwonly_params):
        value = passed.get(p.name.value, p.default)
        if type(value) is cst.Name and (
            value.value == "None"
            or (
                value is not p.default
                and value.value in unset
                and caller is not None
                and caller.holds_argument(value)
            )
        ):
            out.add(p.name.value)
    return frozenset(out)


def construction(
    cls: ClassFacts, enter_hooks: bool = True, hooks: Collection[str] = ()
) -> list[MethodFacts]:
    """What runs while the class is built: ``__init__`` and the methods of the class it calls
    (``self.m()``), transitively, and the methods of the class that the ``__init__`` of a base
    of the same file calls (``ClassFacts.inherited``). The one answer every rule and codemod
    uses.

    With ``enter_hooks`` (the default) a reset hook ``__init__`` calls is part of it: it runs
    under the meta context too. Without, the methods named in ``hooks`` are neither included
    nor followed: for ``__init__`` -> ``reset_parameters`` -> ``_init_pos`` the answer is
    ``__init__`` alone, since what a hook does (and the helpers only it reaches) is the hook's
    job, done again after ``to_empty()``.
    """
    key = (True,) if enter_hooks else (False, *hooks)
    found = cls.built.get(key)
    if found is None:
        found = cls.built[key] = _construction(cls, enter_hooks, hooks)
    return list(found)


def _construction(cls: ClassFacts, enter_hooks: bool, hooks: Collection[str]) -> list[MethodFacts]:
    if enter_hooks:
        out = cls.reachable("__init__")
        for name in cls.inherited:
            out += [m for m in cls.reachable(name) if not any(m is o for o in out)]
        return out
    out = []
    seen: set[str] = set()
    todo = ["__init__", *reversed(cls.inherited)]
    while todo:
        name = todo.pop()
        if name in seen or name not in cls.methods:
            continue
        seen.add(name)
        if name in hooks:
            continue
        m = cls.methods[name]
        out.append(m)
        todo.extend(sorted(m.self_calls))
    return out


@dataclass
class FileFacts:
    module: str
    aliases: Aliases
    classes: list[ClassFacts] = field(default_factory=list)
    local_classes: dict[str, str] = field(default_factory=dict)  # top-level name -> fullname
    #: module-level functions: name -> fullname (helpers a hook hands its tensors to)
    local_functions: dict[str, str] = field(default_factory=dict)


def builds_module(name: str | None, facts: FileFacts, depth: int = 0) -> bool:
    """Does a call of the class qualified as ``name`` certainly make a module, never a tensor:
    a module class of ``torch.nn``, or a class of this file with such a base (through other
    classes of the file)? ``LinearNoBias(...)`` qualifies to ``torch.nn.Linear`` when the file
    binds ``LinearNoBias = partial(nn.Linear, bias = False)``."""
    if name is None or depth > 8:
        return False
    if torch_module_class(name):
        return True
    for cls in facts.classes:
        if cls.fullname == name:
            return any(builds_module(b, facts, depth + 1) for b in cls.bases)
    return False


#: node type -> the collector's (visit, leave) hooks for it (None: no hook), and its
#: code children getter (see :func:`_hooks`)
_HOOKS: dict[type, tuple] = {}


#: the hooks of a name or a literal (two in five nodes): none, and no code below it
_LEAF = (None, None, None)


def _hooks(node: cst.CSTNode) -> tuple:
    """The collector's ``visit_``/``leave_`` hooks of ``node``'s type (None: none) and the
    :func:`code_children` of that type."""
    kind = type(node)
    if kind in (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString):
        _HOOKS[kind] = _LEAF
        return _LEAF
    name = kind.__name__
    hooks = _HOOKS[kind] = (
        getattr(FactCollector, f"visit_{name}", None),
        getattr(FactCollector, f"leave_{name}", None),
        code_children_getter(node),
    )
    return hooks


def _is_self_chain(name: str | None) -> bool:
    return name is not None and (name == "self" or name.startswith("self."))


class FactCollector:
    """One pass over a module that fills :class:`FileFacts` (:meth:`run`); its ``visit_<Type>``
    and ``leave_<Type>`` hooks are named as in a libcst visitor."""

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self.class_stack: list[ClassFacts] = []
        self.func_depth = 0  # nesting of FunctionDef inside the current class
        self.method: MethodFacts | None = None
        self.no_grad = 0
        self.loop = 0
        self._for_stack: list[cst.CSTNode] = []
        self._qual_stack: list[str] = []

    def run(self, root: cst.CSTNode) -> None:
        """``root.visit(self)`` without its cost: libcst's visit rebuilds every node it passes
        (``_visit_and_replace_children``) even for a read-only visitor, and calls a hook for
        every whitespace and punctuation node. Same order of calls: the node's ``visit_``
        hook, its children in libcst's visiting order unless the hook returned False, its
        ``leave_`` hook; tokens and whitespace (no hook here, nothing below them) are passed by."""
        # a node to visit, or (its ``leave_`` hook, the node) once its children are done
        stack: list = [root]
        pop, push, extend, hooks_of = stack.pop, stack.append, stack.extend, _HOOKS
        while stack:
            node = pop()
            if type(node) is tuple:
                node[0](self, node[1])
                continue
            hooks = hooks_of.get(type(node))
            if hooks is None:
                hooks = _hooks(node)
            if hooks is _LEAF:
                continue
            visit, leave, below = hooks
            if leave is not None:
                push((leave, node))
            if visit is None or visit(self, node) is not False:
                below = below(node)  # a new list each time: reversed in place
                below.reverse()
                extend(below)

    # -- imports (module level and nested: both count) -------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self.facts.aliases.add_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.facts.aliases.add_import_from(node)

    def qualify(self, node: cst.BaseExpression) -> str | None:
        return self.facts.aliases.qualify(node, self.facts.local_classes)

    # -- classes and methods ---------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self.method is not None:
            # a class defined inside a method body is out of scope for the per-class rules
            self.method.nested_class = True
            return False
        qual = ".".join([*self._qual_stack, node.name.value])
        fullname = f"{self.facts.module}.{qual}" if self.facts.module else qual
        if not self._qual_stack:
            self.facts.local_classes[node.name.value] = fullname
            # the class shadows an import of its name (``if has_xlstm: from xlstm import
            # RMSNorm as xLSTMRMSNorm`` / ``else: class xLSTMRMSNorm``): the file's own class
            # is the one the checked tree can judge
            self.facts.aliases.names.pop(node.name.value, None)
        bases = []
        for arg in node.bases:
            if arg.keyword is not None:
                continue
            base = arg.value
            if type(base) is cst.Subscript:
                # a generic base (pykeen ``Interaction[FloatTensor, FloatTensor, FloatTensor]``,
                # ``Generic[T]``): the class it subscripts
                base = base.value
            bases.append(self.qualify(base) or (dotted(base) or "?"))
        cls = ClassFacts(node.name.value, qual, fullname, node, bases)
        self.facts.classes.append(cls)
        self.class_stack.append(cls)
        self._qual_stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        if self.class_stack and self.class_stack[-1].node is original_node:
            self.class_stack.pop()
            self._qual_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.func_depth += 1  # leave_FunctionDef runs even when the body is skipped
        if self.method is None and self.class_stack and self._direct_child_of_class(node):
            params = [p.name.value for p in node.params.params]
            params += [p.name.value for p in node.params.kwonly_params]
            params += [p.name.value for p in node.params.posonly_params]
            self.method = MethodFacts(node.name.value, node, params)
            self.class_stack[-1].methods[node.name.value] = self.method
            # what runs after construction is no rule's business; skipping it halves the walk
            return not node.name.value.startswith(SKIPPED_METHOD_PREFIXES)
        if self.method is None and not self.class_stack and self.func_depth == 1:
            name = node.name.value
            self.facts.local_functions[name] = (
                f"{self.facts.module}.{name}" if self.facts.module else name
            )
        # module-level functions (model factories, checkpoint filters) hold no class facts
        return self.method is not None

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.func_depth -= 1
        if self.method is not None and self.method.node is original_node:
            self.method = None

    def _direct_child_of_class(self, node: cst.FunctionDef) -> bool:
        body = self.class_stack[-1].node.body
        stmts = body.body if isinstance(body, cst.IndentedBlock) else ()
        return any(s is node for s in stmts)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        m = self.method
        if m is not None and m.body_calls is None and node is m.node.body:
            m.body_calls = len(m.calls)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # outside a method only imports and module-level partials of a class are facts
        # (every other visit_ below is a no-op there): skip the rest, e.g. timm's
        # module-level ``default_cfgs`` dicts
        if self.method is not None:
            return True
        if not self.class_stack:
            for s in node.body:
                if type(s) is cst.Assign:
                    self._module_assign(s)
        return any(type(s) in (cst.Import, cst.ImportFrom) for s in node.body)

    def _module_assign(self, node: cst.Assign) -> None:
        """``LinearNoBias = partial(nn.Linear, bias = False)`` (x-transformers): the name
        qualifies to the class (:func:`~metalint.static.names.partial_class`). The last
        binding wins, as for imports; another binding of a partial's name makes it unknown."""
        aliases = self.facts.aliases
        made = None
        value = node.value
        if (
            len(node.targets) == 1
            and type(node.targets[0].target) is cst.Name
            and type(value) is cst.Call
            and value.args
            and value.args[0].keyword is None
            and not value.args[0].star
        ):
            rest = [a.keyword.value if a.keyword and not a.star else None for a in value.args[1:]]
            made = partial_class(self.qualify(value.func), self.qualify(value.args[0].value), rest)
        for target in node.targets:
            for name in _target_names(target.target):
                if made is not None:
                    aliases.names[name] = aliases.constructors[name] = made
                elif name in aliases.constructors:
                    if aliases.names.get(name) == aliases.constructors.pop(name):
                        del aliases.names[name]

    # -- context -----------------------------------------------------------------------------
    def visit_With(self, node: cst.With) -> None:
        if self._is_no_grad(node):
            self.no_grad += 1

    def leave_With(self, original_node: cst.With) -> None:
        if self._is_no_grad(original_node):
            self.no_grad -= 1

    def _is_no_grad(self, node: cst.With) -> bool:
        for item in node.items:
            expr = item.item
            if isinstance(expr, cst.Call):
                expr = expr.func
            if self.qualify(expr) in NO_GRAD_CONTEXTS:
                return True
        return False

    def visit_For(self, node: cst.For) -> None:
        self.loop += 1
        self._for_stack.append(node)
        if self.method is not None:
            self.method.loops.append((node, _target_names(node.target), node.iter))
            it = node.iter
            if isinstance(it, cst.Call):
                name = dotted(it.func)
                if name in (
                    "self.parameters",
                    "self.named_parameters",
                    "self.buffers",
                    "self.named_buffers",
                ):
                    self.method.loops_over_own_tensors = True

    def leave_For(self, original_node: cst.For) -> None:
        self.loop -= 1
        if self._for_stack and self._for_stack[-1] is original_node:
            self._for_stack.pop()

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.method is not None and any(
            type(el.slice) is cst.Index and type(el.slice.value) in _MASK_SYNTAX
            for el in node.slice
        ):
            self.method.masked.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        if self.method is not None:
            self.method.loops.append((node, _target_names(node.target), node.iter))

    def visit_While(self, node: cst.While) -> None:
        self.loop += 1
        if self.method is not None:
            self.method.conditions.append(node.test)

    def leave_While(self, original_node: cst.While) -> None:
        self.loop -= 1

    def visit_If(self, node: cst.If) -> None:
        if self.method is not None:
            self.method.conditions.append(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if self.method is not None:
            self.method.conditions.append(node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        if self.method is not None:
            self.method.conditions.append(node.test)

    # -- assignments -------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if self.method is None:
            return
        self.method.binds.append(node)
        for target in node.targets:
            self._record_target(node, target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self.method is not None and node.value is not None:
            self._record_target(node, node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self.method is None:
            return
        self.method.binds.append(node)
        name = dotted(node.target)
        if _is_self_chain(name) and name != "self":
            self.method.assigns.append(AttrAssign(node, name, node.value, augmented=True))

    def _record_target(self, stmt: cst.CSTNode, target: cst.BaseExpression, value) -> None:
        assert self.method is not None
        if type(target) in (cst.Tuple, cst.List):
            values = value.elements if type(value) in (cst.Tuple, cst.List) else None
            for i, el in enumerate(target.elements):
                v = values[i].value if values is not None and i < len(values) else None
                if values is None and value is not None and type(el.value) is cst.Name:
                    # ``inv_freq, scale = rope_init_fn(...)``: a local unpacked from a call
                    # takes the whole value (its kind is what rules look at)
                    self.method.local_values.setdefault(el.value.value, []).append((stmt, value))
                    continue
                self._record_target(stmt, el.value, v)
            return
        name = dotted(target)
        if name is None:
            return
        if _is_self_chain(name) and name != "self":
            self.method.assigns.append(AttrAssign(stmt, name, value))
        elif "." not in name and value is not None:
            self.method.local_values.setdefault(name, []).append((stmt, value))

    # -- calls -------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if self.method is None:
            return
        func = node.func
        method = receiver = None
        if type(func) is cst.Attribute:
            method = func.attr.value
            receiver = dotted(func.value)
            if receiver == "self":
                self.method.self_calls.add(method)
            inner = func.value
            if (
                type(inner) is cst.Call
                and type(inner.func) is cst.Name
                and inner.func.value == "super"
            ):
                self.method.super_calls.add(method)
                receiver = "super()"
        self.method.calls.append(
            CallSite(
                node,
                self.qualify(func),
                method,
                receiver,
                self.no_grad > 0,
                self.loop > 0,
                loops=tuple(self._for_stack),
            )
        )


def _target_names(target: cst.BaseExpression) -> tuple[str, ...]:
    """Names bound by a ``for`` target: ``m``, ``name, m``, ``(i, (a, b))``."""
    if isinstance(target, cst.Name):
        return (target.value,)
    if isinstance(target, (cst.Tuple, cst.List)):
        out: list[str] = []
        for el in target.elements:
            out.extend(_target_names(el.value))
        return tuple(out)
    return ()


def function_facts(fn: cst.FunctionDef, facts: FileFacts) -> MethodFacts:
    """Facts of a module-level function (a helper ``__init__`` calls, e.g. timm's
    ``create_byob_stages``), collected on demand: the file-wide pass skips these bodies."""
    params = [
        p.name.value
        for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)
    ]
    collector = FactCollector(facts)
    collector.method = MethodFacts(fn.name.value, fn, params)
    collector.run(fn.body)
    return collector.method


def collect(module: cst.Module, module_name: str, is_package: bool = False) -> FileFacts:
    facts = FileFacts(module_name, Aliases(module_name, is_package))
    FactCollector(facts).run(module)
    inherited_calls(facts)
    aliases = facts.aliases
    for name, made in list(aliases.constructors.items()):
        if aliases.names.get(name) != made:
            del aliases.constructors[name]  # imported or defined again after the partial
    return facts


def base_helpers(cls: ClassFacts) -> list[tuple[MethodFacts, CallSite, list[MethodFacts]]]:
    """``(caller, call, methods)`` for each ``self.m()`` of the class's construction whose ``m`` a base
    of the same file defines (``self._finish()``, ``Base._finish()`` applying an init to every
    layer): ``methods`` is what the call runs, ``m`` and the methods of the bases it calls as
    ``self.x()`` (not the class's own: those are in its construction already)."""
    out = []
    for method in construction(cls):
        for call in method.calls:
            if call.receiver != "self" or call.method not in cls.from_bases:
                continue
            run: list[MethodFacts] = []
            todo = [call.method]
            while todo:
                name = todo.pop(0)
                m = cls.from_bases.get(name)
                if m is None or any(m is r for r in run):
                    continue  # the class's own methods are its construction already
                run.append(m)
                todo.extend(sorted(m.self_calls))
            out.append((method, call, run))
    return out


def _collect_base_methods(cls: ClassFacts, by_name: dict[str, ClassFacts]) -> None:
    """Fill ``cls.from_bases`` from the bases of the same file, nearest first."""
    todo, seen = list(cls.bases), {cls.fullname}
    while todo:
        b = by_name.get(todo.pop(0))
        if b is None or b.fullname in seen:
            continue
        seen.add(b.fullname)
        for name, m in b.methods.items():
            if name not in cls.methods and name not in cls.from_bases:
                cls.from_bases[name] = m
        todo.extend(b.bases)


def _called(cls: ClassFacts, seen: set[str], by_name: dict[str, ClassFacts]) -> set[str]:
    """``self.m()`` names the construction of ``cls`` (inherited too) calls. (A module-level
    function: a recursive closure would hold the file's facts in a reference cycle.)"""
    if cls.fullname in seen:
        return set()
    seen.add(cls.fullname)
    out: set[str] = set()
    init = cls.init
    if init is not None:
        for m in cls.reachable("__init__"):
            out |= m.self_calls
    if init is None or "__init__" in init.super_calls:
        for base in cls.bases:
            b = by_name.get(base)
            if b is not None:
                out |= _called(b, seen, by_name)
                break  # the first base's ``__init__`` is the one ``super()`` runs
    return out


def inherited_calls(facts: FileFacts) -> None:
    """Set ``ClassFacts.from_bases``, and ``ClassFacts.inherited`` of each class of the file:
    the methods it defines that the ``__init__`` it runs of a base of the same file calls as
    ``self.m()`` (directly or through the base's own methods): ``Base.__init__`` ->
    ``self._build()``, which the class overrides. Runs when the class has no ``__init__`` or
    its ``__init__`` calls ``super().__init__()``."""
    by_name = {c.fullname: c for c in facts.classes}
    for cls in facts.classes:
        _collect_base_methods(cls, by_name)
        if cls.init is not None and "__init__" not in cls.init.super_calls:
            continue
        names: set[str] = set()
        for base in cls.bases:
            b = by_name.get(base)
            if b is not None:
                names = _called(b, set(), by_name)
                break
        own = {m.name for m in cls.reachable("__init__")} if cls.init is not None else set()
        cls.inherited = tuple(sorted(n for n in names if n in cls.methods and n not in own))
