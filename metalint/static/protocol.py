"""Which protocol materialises a class, under which roots.

A class is rarely materialised alone: it lives inside model roots, and the root's protocol is
what runs after ``to_empty()``. This module answers that one question for rules, codemods and
the probe, in two halves:

- per file (libcst, :func:`summarize_class`, :func:`summarize_functions`): what a class
  constructs (its *children*, also through a module-level function of its file:
  ``replace_batch_norm(backbone)`` swapping frozen norms into a sub-model), the attributes it
  sets, the per-module init functions it
  defines (``_init_weights(self, module)``: an ``if``/``elif`` dispatch by ``isinstance``,
  class-name tests, ``hasattr``/``getattr``, helpers and ``super()``, loops over a list of
  the module's tensors, the module's own init methods: ``module.init_mamba_weights()``) and the functions its
  root entry point (``init_weights()``) applies to every module (``self.apply(fn)``,
  ``named_apply(fn, self)``, ``for m in self.modules():``) or to each module of a container
  child (``for level in self.levels: trunc_normal_(level.pos_embed)``, timm's Nest);
- across files (torch-free, libcst-free, :class:`Protocols`): the roots that contain each
  class, the protocol of each root, and which tensors of a class that protocol re-creates.

The protocols (``[tool.metalint] protocol``, ``"auto"`` by default):

- ``transformers``: a ``PreTrainedModel`` subclass. ``init_weights()`` applies
  ``_init_weights`` (own or inherited; the library's base dispatch of transformers 5.x when
  the base is not in the checked tree) to every module, the nearest ``PreTrainedModel`` of a
  module dispatching for it (``smart_apply``).
- ``init_weights``: a root ``init_weights()`` (timm, torchtitan's
  ``init_weights(buffer_device=...)``, ``init_states()``) run after every module's own hooks;
  what it applies to every module is the re-initialisation.
- ``init_weights-only``: the root's entry point and nothing else (no module's own hook).
- ``reset_parameters``: every module's own hooks, children first (PyTorch, FSDP, Lightning,
  PyG): nothing beyond the class's own hooks.

A root that a materialisation site of the tree builds (:mod:`metalint.static.pipeline`: a
training script's meta build, ``to_empty()``, ``model.init_weights()``) is judged under what
that site runs instead (:meth:`Protocols.sequences_of`, :meth:`Protocols.lost_at`).

A tensor is lost when it is lost under at least one root that contains its class; a class no
root contains is judged per module.

Known limits: the composition is what construction names statically (a class picked from a
module-level literal table of its file, ``ALL_LAYERS[config.kind](...)``, is a child, as is
every class of that table; one from a registry filled at import or a table of another file has
no parent); a condition the dispatch cannot
decide (a config value) counts both branches as run; under the transformers protocol a
module's own ``reset_parameters()`` is still counted although ``_init_weights`` does not call
it; a class swapped into a sub-model built by a call that names no class
(``replace_batch_norm(load_backbone(config))``) is dispatched by the ``_init_weights`` of the
tree that test a module's class name and match it (``"BatchNorm" in
module.__class__.__name__``: what transformers' backbones write for those classes), so a
backbone without such a test (``TimmBackbone``, DETR's default) is not seen.
"""

from __future__ import annotations

from typing import Any

from metalint.diagnostics import (
    AtMaterialisation,
    ChildrenFirst,
    NotRecreated,
    RootReplays,
    SameLaw,
    SkipsModuleHooks,
)
from metalint.static.pipeline import Sequence, sequences
from metalint.vocabulary import (
    AFFINE_NORMS,
    PROTOCOLS,
    RECURSIVE_TENSOR_ITERATORS,
    RESET_HOOK,
    ROOT_ENTRIES,
    ROOT_ONLY_PROTOCOL,
    TEMPLATE_MODULE_PREFIXES,
    TIE_BASES,
    TORCH_WITHOUT_RESET,
)

TRANSFORMERS = "transformers _init_weights"
ROOT_INIT = "root init_weights"
#: the root's entry point and nothing else after ``to_empty()`` (no module's own hooks): what a
#: materialisation site of the tree runs (:mod:`metalint.static.pipeline`), or
#: ``protocol = "init_weights-only"``
ROOT_ONLY = "root init_weights only"
#: what a materialisation site of the tree runs when it calls no entry point (a checkpoint
#: load, ``model.apply(fn)``, nothing)
SITE = "materialisation site"
RESET = "reset_parameters"
#: the base classes of a transformers model
TRANSFORMERS_BASES = frozenset(TIE_BASES)
#: iterating these over the module argument visits every tensor of it
_TENSOR_ITERATORS = frozenset(RECURSIVE_TENSOR_ITERATORS)
_MODULE_ITERATORS = frozenset({"modules", "named_modules"})
#: a root entry calling one of these on a child (``self.encoder.init_weights()``) runs the
#: child's own entry point
_CHILD_ENTRIES = frozenset(ROOT_ENTRIES)
#: the calls on a child an entry point's summary records (a materialisation site that runs
#: the entry alone counts ``self.norm.reset_parameters()`` as restoring that child)
_CHILD_CALLS = _CHILD_ENTRIES | {RESET_HOOK}

_NORMS = ["torch.nn.GroupNorm", "torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d"]
#: the base dispatch's ``init.normal_(module.weight, mean=0.0, std=std)``, ``std =
#: self.config.initializer_range or 0.02`` when the config has it (see :func:`_law`)
_BASE_NORMAL = [
    "law",
    "weight",
    "torch.nn.init.normal_(mean=0.0, std=config.initializer_range)",
    ["config.initializer_range"],
]
_ZEROS = "torch.nn.init.zeros_()"
#: ``PreTrainedModel._init_weights`` of transformers 5.x (5.23.0), for models whose base is
#: not in the checked tree (a user's model subclassing ``transformers.PreTrainedModel``)
TRANSFORMERS_INIT_WEIGHTS: list = [
    [
        "if",
        [
            "isinstance",
            [
                "torch.nn.Linear",
                "torch.nn.Conv1d",
                "torch.nn.Conv2d",
                "torch.nn.Conv3d",
                "torch.nn.ConvTranspose1d",
                "torch.nn.ConvTranspose2d",
            ],
        ],
        [["w", "weight"], _BASE_NORMAL, ["w", "bias"], ["law", "bias", _ZEROS, []]],
        [
            [
                "if",
                ["isinstance", ["torch.nn.LSTM"]],
                [["all"]],
                [
                    [
                        "if",
                        ["isinstance", ["torch.nn.Embedding"]],
                        [["w", "weight"], _BASE_NORMAL, ["law", "weight", None, []]],
                        [
                            [
                                "if",
                                ["isinstance", ["torch.nn.MultiheadAttention"]],
                                [["all"]],
                                [
                                    [
                                        "if",
                                        [
                                            "or",
                                            ["isinstance", [*_NORMS, "torch.nn.BatchNorm3d"]],
                                            [
                                                "or",
                                                ["name_in", "LayerNorm"],
                                                ["name_in", "RMSNorm"],
                                            ],
                                        ],
                                        [
                                            ["w", "weight"],
                                            ["w", "bias"],
                                            ["w", "running_mean"],
                                            ["w", "running_var"],
                                            ["w", "num_batches_tracked"],
                                        ],
                                        [
                                            [
                                                "if",
                                                [
                                                    "and",
                                                    ["name_in", "RotaryEmbedding"],
                                                    ["has", "original_inv_freq"],
                                                ],
                                                [["w", "inv_freq"], ["w", "original_inv_freq"]],
                                                [],
                                            ]
                                        ],
                                    ]
                                ],
                            ]
                        ],
                    ]
                ],
            ]
        ],
    ]
]


# -- per file (libcst) ---------------------------------------------------------------------
def summarize_class(cls, ctx, hooks: tuple[str, ...] = ("reset_parameters",)) -> dict[str, Any]:
    """What the cross-file step needs of a class: ``children`` (names its construction
    refers to that may be classes), ``attributes`` (what it sets on ``self``), ``dispatch``
    (per-module init methods: name -> block) and ``applies`` (public method -> what it applies
    to every module, for the method that is a root's entry point). Empty keys are left out."""
    children, attributes, members, hosted, elements = _composition(cls, ctx)
    out: dict[str, Any] = {
        "children": sorted(children),
        "members": {a: sorted(q) for a, q in sorted(members.items())},
        "elements": {a: sorted(q) for a, q in sorted(elements.items())},
        "hosted": hosted,
        "attributes": sorted(attributes),
    }
    out = {k: v for k, v in out.items() if v}
    applies: dict[str, list] = {}
    wanted = {"_init_weights"}
    for entry in cls.methods:
        # a public method may be a root's entry point (``init_weights``, or one configured)
        if entry.startswith(("_", "forward")) or entry in hooks:
            continue
        items = [i for m in cls.reachable(entry) for i in _applies(m, ctx, wanted)]
        if items:
            applies[entry] = items
    dispatch: dict[str, list] = {}
    deleted = []
    for name in sorted(wanted):
        m = cls.methods.get(name)
        param = _module_param(m.node) if m is not None else None
        if param and _deletes(m.node):
            deleted.append(name)
        elif param:
            dispatch[name] = _block(_body(m.node), param, ctx, m.node)
    if dispatch:
        out["dispatch"] = dispatch
    inits = {
        name: writes
        for name in sorted(cls.methods)
        if "init" in name and name != "__init__" and name not in hooks
        if (writes := _method_writes(cls, name, ctx))
    }
    if inits:
        out["inits"] = inits
    if deleted:
        out["deleted"] = deleted
    if applies:
        out["applies"] = applies
    buffers, volatile = _buffers(cls, ctx)
    if buffers:
        out["buffers"] = buffers
    if volatile:
        out["volatile"] = volatile
    norms = sorted(
        {f"{a.target.split('.')[1]}.{t}" for a, ts in affine_norms(cls, ctx.qualify) for t in ts}
    )
    if norms:
        out["norms"] = norms
    return out


def affine_norms(cls, qualify) -> list[tuple[Any, tuple[str, ...]]]:
    """The assignments ``self.norm = nn.LayerNorm(dim)`` of a class's construction that build
    one of torch's norm layers with a weight or bias (not ``elementwise_affine=False``),
    each with those tensors: values (ones, zeros) of the class's tree that only the layer's
    own hook restores."""
    import libcst as cst

    from metalint.static.model import construction
    from metalint.static.syntax import is_false, keyword

    out = []
    for m in construction(cls):
        for a in m.assigns:
            if a.target.count(".") != 1 or type(a.value) is not cst.Call:
                continue
            tensors = AFFINE_NORMS.get(qualify(a.value.func) or "", {})
            kept = tuple(
                t
                for t, flags in tensors.items()
                if not any(is_false(keyword(a.value, f)) for f in flags)
            )
            if kept:
                out.append((a, kept))
    return out


def _buffers(cls, ctx) -> tuple[list[str], list[str]]:
    """The buffers a class registers, and those of them no checkpoint holds
    (``persistent=False``): what a checkpoint load leaves as the build made it."""
    from metalint.static.model import construction
    from metalint.static.ownership import owned_tensors

    buffers: set[str] = set()
    volatile: set[str] = set()
    for owned in owned_tensors(construction(cls), ctx.qualify):
        if owned.kind == "buffer":
            buffers.add(owned.attr)
            if not owned.persistent:
                volatile.add(owned.attr)
    return sorted(buffers), sorted(volatile)


def _method_writes(cls, name: str, ctx) -> list[str]:
    """What ``self.<name>()`` re-creates (own tensors, and a child's as ``dt_proj.weight``):
    a dispatch calling it on the module (``module.init_falcon_mamba_weights()``) re-creates
    these."""
    from metalint.static.tensors import inplace_write, recreated

    out: set[str] = set()
    for m in cls.reachable(name):
        out |= {n for n in recreated(m, ctx.qualify) if n[:1] not in ("@",)}
        for call in m.calls:
            w = inplace_write(call.node, ctx.qualify)
            if w is not None and len(w.chain) >= 3 and w.chain[0] == "self" and "[]" not in w.chain:
                out.add(".".join(_write(list(w.chain[1:]))[-1:]))
    return sorted(out)


def _deletes(fn) -> bool:
    """``def _init_weights(self, module): raise AttributeError()``: transformers' modular
    files delete an inherited method this way (the generated file inherits the base's)."""
    import libcst as cst

    from metalint.static.names import dotted

    body = _body(fn)
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
        return False
    stmt = body[0].body[0]
    exc = stmt.exc if isinstance(stmt, cst.Raise) else None
    if isinstance(exc, cst.Call):
        exc = exc.func
    return exc is not None and dotted(exc) == "AttributeError"


def _composition(cls, ctx) -> tuple[set[str], set[str], dict[str, set[str]], dict[str, str], dict]:
    """The names construction hands classes by (``Block(...)``, ``partial(LayerNorm, ...)``,
    ``block_fn=Block``), the attributes it sets on ``self`` (assigned or registered:
    ``self.add_module("l", nn.Linear(...))`` too), the classes an attribute is built as
    (``self.encoder = Encoder(...)``: encoder -> Encoder), the classes swapped in (see
    :func:`_swapped_in`) and the classes a container attribute holds (``self.levels =
    nn.Sequential(*levels)`` after ``levels.append(NestLevel(...))``: levels -> NestLevel)."""
    import libcst as cst

    from metalint.static.model import construction
    from metalint.static.tensors import string_value

    children: set[str] = set()
    attributes: set[str] = set()
    members: dict[str, set[str]] = {}
    elements: dict[str, set[str]] = {}

    def child(node) -> None:
        q = _class_ref(node, ctx)
        if q:
            children.add(q)
        children.update(_table_classes(node, ctx))

    methods = construction(cls)
    for m in methods:
        for call in m.calls:
            child(call.node.func)
            for arg in call.node.args:
                child(arg.value)
            if call.receiver == "self" and call.method in _REGISTERS and call.node.args:
                name = string_value(call.node.args[0].value)
                if name:
                    attributes.add(name)
                value = call.node.args[1].value if len(call.node.args) > 1 else None
                q = _class_ref(value.func, ctx) if type(value) is cst.Call else None
                if name and q and call.method in _MODULE_REGISTERS:
                    members.setdefault(name, set()).add(q)  # self.add_module("l", Linear())
        for p in (*m.node.params.params, *m.node.params.kwonly_params):
            if p.default is not None:
                child(p.default)
        for a in m.assigns:
            if a.target.count(".") != 1:
                continue
            attr = a.target.split(".")[1]
            attributes.add(attr)
            q = _class_ref(a.value.func, ctx) if type(a.value) is cst.Call else None
            if q:
                members.setdefault(attr, set()).add(q)
            held = _held(a.value, m, ctx) if type(a.value) is cst.Call else set()
            if held:
                elements.setdefault(attr, set()).update(held)
    return children, attributes, members, _swapped_in(methods, ctx, children), elements


_REGISTERS = ("register_buffer", "register_parameter", "add_module", "register_module")
_MODULE_REGISTERS = ("add_module", "register_module")
_LIST_FILLERS = ("append", "extend", "insert")


def _held(call, method, ctx) -> set[str]:
    """The classes a container call holds: ``nn.Sequential(*[Block() for _ in r])``,
    ``nn.ModuleList([A(), B()])``, or ``nn.Sequential(*levels)`` with a local list built
    in the method (``levels = [...]``, ``levels.append(NestLevel(...))``, ``levels += [...]``)."""
    import libcst as cst

    from metalint.static.syntax import walk_code

    def built(node) -> set[str]:
        return {q for n in walk_code(node) if type(n) is cst.Call if (q := _class_ref(n.func, ctx))}

    out: set[str] = set()
    for arg in call.args:
        v = arg.value
        if type(v) in (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp):
            out |= built(v)
        elif type(v) is cst.Name and arg.star != "**" and arg.keyword is None:
            for value in _list_fills(method, ctx).get(v.value, ()):
                out |= built(value)
    return out


def _list_fills(method, ctx) -> dict[str, list]:
    """What a method puts in each of its locals (``levels.append(NestLevel(...))``,
    ``levels = [...]``, ``levels += [...]``): name -> the values, read once per method (every
    container call of the method asks, for each name it is handed), from the calls and
    assignments the fact collector recorded (a walk of the body cost 2% of a cold check)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code
    from metalint.vocabulary import SKIPPED_METHOD_PREFIXES

    memo = ctx.memo.setdefault(_list_fills, {})
    hit = memo.get(id(method.node))
    if hit is not None and hit[0] is method.node:
        return hit[1]
    if (
        method.body_calls is None
        or method.nested_class
        or method.name.startswith(SKIPPED_METHOD_PREFIXES)
    ):
        # a body the fact collector did not read whole: walk it
        nodes = list(walk_code(method.node.body))
        calls = [n for n in nodes if type(n) is cst.Call]
        binds = [n for n in nodes if type(n) in (cst.Assign, cst.AugAssign)]
    else:  # what the collector recorded of the body (the order of a name's values is moot)
        calls = [c.node for c in method.calls[method.body_calls :]]
        binds = method.binds
    fills: dict[str, list] = {}
    for node in calls:
        if type(node.func) is cst.Attribute:
            if node.func.attr.value in _LIST_FILLERS and node.args:
                fills.setdefault(dotted(node.func.value), []).append(node.args[-1].value)
    for node in binds:
        targets = node.targets if type(node) is cst.Assign else [node]
        for name in {dotted(t.target) for t in targets}:
            fills.setdefault(name, []).append(node.value)
    memo[id(method.node)] = (method.node, fills)
    return fills


def _table_classes(node, ctx) -> set[str]:
    """The classes a call may pick from a module-level table of this file
    (``ATTENTION_CLASSES[config._attn_implementation](config)``, ``LAYERS.get(kind)(dim)``,
    ``ATTENTION_CLASSES = {"eager": Attention, "sdpa": SdpaAttention}``): every class value
    of the dict, list or tuple literal, since the key is a config value."""
    import libcst as cst

    kind = type(node)  # none of these has subclasses (isinstance of an ABC is slow)
    if kind is cst.Subscript:
        table = node.value
    elif kind is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "get":
        table = node.func.value
    else:
        return set()
    if type(table) is not cst.Name:
        return set()
    values = _module_tables(ctx).get(table.value, ())
    return {q for v in values if (q := _class_ref(v, ctx))}


def _module_tables(ctx) -> dict[str, list]:
    """The module-level ``NAME = {...}`` / ``[...]`` / ``(...)`` literals of this file: their
    values (a later assignment of the name replaces an earlier one)."""
    import libcst as cst

    if "module_tables" in ctx.memo:
        return ctx.memo["module_tables"]
    tables: dict[str, list] = {}
    for stmt in ctx.module.body:
        if not type(stmt) is cst.SimpleStatementLine:
            continue
        for small in stmt.body:
            if type(small) is cst.Assign and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
            elif type(small) is cst.AnnAssign and small.value is not None:
                target, value = small.target, small.value
            else:
                continue
            if not type(target) is cst.Name:
                continue
            if type(value) is cst.Dict:
                items = [e.value for e in value.elements if type(e) is cst.DictElement]
            elif type(value) in (cst.List, cst.Tuple):
                items = [e.value for e in value.elements if type(e) is cst.Element]
            else:
                tables.pop(target.value, None)
                continue
            tables[target.value] = items
    ctx.memo["module_tables"] = tables
    return tables


def _swapped_in(methods: list, ctx, children: set[str]) -> dict[str, str]:
    """Classes construction builds through a module-level function of this file it calls
    (``replace_batch_norm(backbone)``: ``model._modules[name] = FrozenBatchNorm2d(n)``) are
    children of the class (added to ``children``). A class such a function installs into
    the module it is handed (its first argument) lives in that module: ``hosted`` maps it to
    the class of that module (``backbone = ResNetBackbone(config)``), or to ``"?"`` when
    construction built it by a call that names no class (``load_backbone(config)``), whose
    own init protocol the check cannot see. A class swapped into ``self`` is a plain child."""
    import libcst as cst

    from metalint.static.names import dotted

    hosted: dict[str, str] = {}
    for m in methods:
        for call in m.calls:
            func = call.node.func
            if not type(func) is cst.Name or func.value not in ctx.facts.local_functions:
                continue
            built, swaps = _function_builds(func.value, ctx)
            children |= built
            arg = call.node.args[0].value if call.node.args else None
            if not swaps or arg is None or dotted(arg) == "self":
                continue
            host = _host_class(arg, m, methods, ctx)
            for q in swaps:
                hosted[q] = host if hosted.get(q, host) == host else "?"
    return hosted


def _function_builds(name: str, ctx) -> tuple[set[str], set[str]]:
    """The classes the module-level function ``name`` of this file (and those of this file it
    calls) constructs, and those of them it installs into the module it is handed as its
    first argument (see :func:`_builds_of`). Worked out once per file and function (every
    class whose construction calls it asks)."""
    import libcst as cst

    memo = ctx.memo.setdefault(_function_builds, {})
    if name in memo:
        return memo[name]
    top = {s.name.value: s for s in ctx.module.body if isinstance(s, cst.FunctionDef)}
    built: set[str] = set()
    swaps: set[str] = set()
    todo, seen = [name], set()
    while todo and len(seen) < 16:
        cur = todo.pop()
        if cur in seen or cur not in top:
            continue
        seen.add(cur)
        more, installed, calls = _builds_of(top[cur], ctx)
        built |= more
        swaps |= installed
        todo += [c for c in calls if c in top]
    memo[name] = frozenset(built), frozenset(swaps)
    return memo[name]


def _builds_of(fn, ctx) -> tuple[set[str], set[str], list[str]]:
    """What one function constructs, what it installs into its first argument or the modules
    it iterates of it (``model._modules[k] = v``, ``setattr(model, k, v)``,
    ``model.add_module(k, v)``), and the names it calls."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    built: set[str] = set()
    calls: list[str] = []
    made: dict[str, str] = {}  # local name -> the class it holds
    installs: list = []  # (module, value)
    for node in walk_code(fn.body):
        if type(node) is cst.Call:
            q = _class_ref(node.func, ctx)
            if q:
                built.add(q)
            called = dotted(node.func) or ""
            calls.append(called)
            if called == "setattr" and len(node.args) == 3:
                installs.append((node.args[0].value, node.args[2].value))
            elif called.endswith(".add_module") and len(node.args) == 2:
                installs.append((node.func.value, node.args[1].value))
        elif type(node) is cst.Assign and len(node.targets) == 1:
            target = node.targets[0].target
            if type(target) is cst.Name and type(node.value) is cst.Call:
                q = _class_ref(node.value.func, ctx)
                if q:
                    made[target.value] = q
            elif (
                type(target) is cst.Subscript
                and type(target.value) is cst.Attribute
                and target.value.attr.value == "_modules"
            ):
                installs.append((target.value.value, node.value))
    param = _module_param(fn, method=False)
    into = (param, *_iterated(fn, param)) if param else ()
    swaps = set()
    for module, value in installs:
        if (dotted(module) or "").split(".")[0] in into:
            q = _class_ref(value.func, ctx) if type(value) is cst.Call else None
            q = q or made.get(dotted(value) or "")
            if q:
                swaps.add(q)
    return built, swaps, calls


def _iterated(fn, param: str) -> tuple[str, ...]:
    """Names a function's loops bind to the modules of its argument (``for name, module in
    model.named_children():`` -> ``module``)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    out = []
    for loop in walk_code(fn.body):
        if type(loop) is cst.For and type(loop.iter) is cst.Call:
            head = dotted(loop.iter.func) or ""
            if head.startswith(param + "."):
                out += [n.value for n in walk_code(loop.target) if type(n) is cst.Name]
    return tuple(out)


def _host_class(arg, method, methods: list, ctx) -> str:
    """The class of the module ``arg`` (a local or ``self.attr``) as construction built it,
    ``"?"`` when a call that names no class made it."""
    import libcst as cst

    from metalint.static.names import dotted

    name = dotted(arg) or ""
    values = []
    if "." not in name:
        values = [v for _, v in method.local_values.get(name, ())]
    elif name.count(".") == 1 and name.startswith("self."):
        values = [a.value for m in methods for a in m.assigns if a.target == name]
    refs = {_class_ref(v.func, ctx) if isinstance(v, cst.Call) else None for v in values}
    return refs.pop() if len(refs) == 1 and None not in refs else "?"


def _class_ref(node, ctx) -> str | None:
    """The qualified name of ``Block`` / ``layers.Block`` (a capitalised name: maybe a class;
    any class of this file: transformers' ``xLSTMRMSNorm``; a module-level partial of a class:
    timm's ``_SE_LAYER = partial(SqueezeExcite, ...)``)."""
    import libcst as cst

    kind = type(node)  # Name and Attribute have no subclasses (isinstance of an ABC is slow)
    if kind is cst.Name or kind is cst.Attribute:
        last = node.value if kind is cst.Name else node.attr.value
        if last[:1].isupper() or (
            kind is cst.Name
            and (last in ctx.facts.local_classes or last in ctx.facts.aliases.constructors)
        ):
            return ctx.qualify(node)
    return None


def _called_functions(block: list) -> list[str]:
    """The functions a block hands the module to (``fn`` items, in branches too)."""
    out: list[str] = []
    for item in block:
        if item[0] == "fn":
            out.append(item[1])
        elif item[0] == "if":
            out += _called_functions(item[2]) + _called_functions(item[3])
    return out


def _applied_functions(classes: list[dict]) -> list[str]:
    """The functions the classes of a file apply, call from a dispatch or build by factory."""
    out: list[str] = []
    for summary in classes:
        for items in summary.get("applies", {}).values():
            for item in items:
                if item[0] in ("function", "factory"):
                    out.append(item[1])
                elif item[0] == "block":
                    out += _called_functions(item[1])
                elif item[0] == "each":
                    out += _called_functions(item[2])
        for block in summary.get("dispatch", {}).values():
            out += _called_functions(block)
    return out


def summarize_functions(module, module_name: str, ctx, classes: list[dict]) -> dict[str, dict]:
    """Module-level functions of this file that a class applies to every module (``def
    init_weights_vit_timm(module, name="")``), that an init factory returns, or that a
    dispatch calls with the module (``classes``: the :func:`summarize_class` results of the
    file): name -> ``block`` (what it re-creates on its first argument) and ``returns``
    (functions an init factory returns). Only those: summarising every function of a file
    would cost a fifth of a cold check."""
    import libcst as cst

    prefix = f"{module_name}." if module_name else ""
    top = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    todo = [q[len(prefix) :] for q in _applied_functions(classes) if q.startswith(prefix)]
    # an init function a training script applies (``model.apply(init_fn)``, see
    # :mod:`metalint.static.pipeline`): the file cannot know, its name says it may be one
    todo += [n for n in top if "init" in n.lower()]
    out: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done or name not in top:
            continue
        done.add(name)
        stmt = top[name]
        entry: dict[str, Any] = {}
        param = _module_param(stmt, method=False)
        if param is not None:
            block = _block(_body(stmt), param, ctx, stmt)
            if block:
                entry["block"] = block
        returns = _returned_functions(stmt, ctx)
        if returns:
            entry["returns"] = returns
        more = _called_functions(entry.get("block", [])) + returns
        todo += [q[len(prefix) :] for q in more if q.startswith(prefix)]
        if entry:
            out[f"{prefix}{name}"] = entry
    if "modules(" in ctx.source:
        for name, stmt in top.items():
            param = _module_param(stmt, method=False)
            if param and _applies_to_modules(stmt, param, ctx):
                out.setdefault(f"{prefix}{name}", {})["applies_to_modules"] = True
    return out


#: calls that only read the module they are handed
_READS = frozenset({"isinstance", "hasattr", "getattr", "callable", "type", "len", "id", "print"})


def _applies_to_modules(fn, param: str, ctx) -> bool:
    """``def efficientnet_init_weights(model): for n, m in model.named_modules(): init_fn(m,
    n)``: a loop over every module of the argument that hands the module to a function or
    writes one of its tensors in place."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code
    from metalint.static.tensors import inplace_write

    for loop in walk_code(fn.body):
        if not type(loop) is cst.For or not type(loop.iter) is cst.Call:
            continue
        it = loop.iter
        name = dotted(it.func) or ""
        over = name in {f"{param}.{m}" for m in _MODULE_ITERATORS} or (
            name.rsplit(".", 1)[-1] in _MODULE_ITERATORS
            and bool(it.args)
            and dotted(it.args[0].value) == param
        )
        if not over:
            continue
        targets = {n.value for n in walk_code(loop.target) if type(n) is cst.Name}
        for call in walk_code(loop.body):
            if not type(call) is cst.Call:
                continue
            w = inplace_write(call, ctx.qualify)
            if w is not None and w.chain and w.chain[0] in targets:
                return True
            callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
            if callee not in _READS and any(
                dotted(a.value) in targets for a in call.args if a.keyword is None
            ):
                return True
    return False


def _returned_functions(fn, ctx) -> list[str]:
    """What an init factory returns: ``return partial(init_weights_vit_timm, ...)``."""
    import libcst as cst

    from metalint.static.defaults import unwrap_partial
    from metalint.static.syntax import walk_code

    out = set()
    for node in walk_code(fn.body):
        if isinstance(node, cst.Return) and node.value is not None:
            q = ctx.qualify(unwrap_partial(node.value, ctx.qualify))
            q = q or _local_function(unwrap_partial(node.value, ctx.qualify), ctx)
            if q:
                out.add(q)
    return sorted(out)


def _local_function(node, ctx) -> str | None:
    import libcst as cst

    if isinstance(node, cst.Name):
        for stmt in ctx.module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == node.value:
                return f"{ctx.facts.module}.{node.value}" if ctx.facts.module else node.value
    return None


def _module_param(fn, method: bool = True) -> str | None:
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    if method:
        params = params[1:] if params and params[0] in ("self", "cls") else []
    return params[0] if params else None


def _body(fn) -> list:
    import libcst as cst

    return list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else [fn.body]


def _applies(method, ctx, wanted: set[str]) -> list[list]:
    """What a root entry method applies to every module."""
    import libcst as cst

    from metalint.static.defaults import applied_function, is_self_apply, unwrap_partial
    from metalint.static.names import dotted

    out: list[list] = []
    for call in method.calls:
        recv = call.receiver or ""
        if recv.startswith("self.") and recv.count(".") == 1 and call.method in _CHILD_CALLS:
            # self.encoder.init_weights(), self.norm.reset_parameters()
            out.append(["child", recv[5:], call.method])
            continue
        if not is_self_apply(call):
            continue
        fn = applied_function(call.node)
        if fn is None:
            continue
        fn = unwrap_partial(fn, ctx.qualify)
        if isinstance(fn, cst.Call):
            q = ctx.qualify(fn.func) or _local_function(fn.func, ctx)
            out.append(["factory", q] if q else ["unknown"])
            continue
        name = dotted(fn) or ""
        if name.startswith("self.") and name.count(".") == 1:
            wanted.add(name[5:])
            out.append(["method", name[5:]])
            continue
        q = ctx.qualify(fn) or _local_function(fn, ctx)
        out.append(["function", q] if q else ["unknown"])
    for node, targets, it in method.loops:
        if (
            isinstance(node, cst.For)
            and isinstance(it, cst.Call)
            and (dotted(it.func) or "") in {f"self.{n}" for n in _MODULE_ITERATORS}
            and targets
        ):
            out.append(["block", _block(_body_of(node), targets[-1], ctx, method.node)])
        elif (
            isinstance(node, cst.For)
            and len(targets) == 1
            and (held := dotted(it) or "").startswith("self.")
            and held.count(".") == 1
        ):
            # for level in self.levels: trunc_normal_(level.pos_embed) (timm Nest)
            block = _block(_body_of(node), targets[0], ctx, method.node)
            if block:
                out.append(["each", held[5:], block])
        if isinstance(node, cst.For) and len(targets) == 1:
            out += _element_calls(node, targets[0], it)
    return out


def _element_calls(loop, var: str, it) -> list[list]:
    """``for layer in self.layers.values(): layer.init_weights()`` (torchtitan): the entry
    point (or reset) of each element of a container child, as ``["child", attr, method]``."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and not it.args:
        if it.func.attr.value not in ("values", "children"):
            return []
        it = it.func.value
    held = dotted(it) or ""
    if not (held.startswith("self.") and held.count(".") == 1):
        return []
    out = []
    for node in walk_code(loop.body):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and node.func.value.value == var
            and node.func.attr.value in _CHILD_CALLS
            and ["child", held[5:], node.func.attr.value] not in out
        ):
            out.append(["child", held[5:], node.func.attr.value])
    return out


def _body_of(node) -> list:
    import libcst as cst

    body = node.body
    return list(body.body) if isinstance(body, cst.IndentedBlock) else [body]


def _block(stmts, param: str, ctx, fn=None) -> list:
    """What the statements (of the function ``fn``) re-create on the module ``param``:
    ``["w", attr]``, ``["all"]``, ``["reset", hook]``, ``["super", m]``, ``["self", m]``,
    ``["base", class, m]``, ``["fn", qualname]``, ``["if", condition, body, orelse]``; each
    ``w`` followed by ``["law", tensor, law, guards]``: the law its values are drawn from
    (:func:`~metalint.static.tensors.init_law`, None when unknown) when the configuration
    attributes ``guards`` exist (see :func:`_law`)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code
    from metalint.static.tensors import inplace_write

    out: list = []
    for stmt in stmts:
        if type(stmt) is cst.If:
            orelse = stmt.orelse
            if type(orelse) is cst.If:
                other = _block([orelse], param, ctx, fn)
            elif type(orelse) is cst.Else:
                other = _block(_body_of(orelse), param, ctx, fn)
            else:
                other = []
            body = _block(_body_of(stmt), param, ctx, fn)
            if body or other:
                out.append(["if", _condition(stmt.test, param, ctx), body, other])
        elif type(stmt) in (cst.For, cst.While):
            it = stmt.iter if type(stmt) is cst.For else None
            listed = _listed_tensors(stmt, param, ctx)
            if (
                type(it) is cst.Call
                and type(it.func) is cst.Attribute
                and dotted(it.func.value) == param
                and it.func.attr.value in _TENSOR_ITERATORS
                and any(
                    type(n) is cst.Call and inplace_write(n, ctx.qualify) is not None
                    for n in walk_code(stmt.body)
                )
            ):
                out.append(["all"])  # for name, p in module.named_parameters(): init(p)
            elif listed:
                out += [_write(names) for names in listed]
            else:
                out.extend(_block(_body_of(stmt), param, ctx, fn))
        elif type(stmt) in (cst.With, cst.Try):
            out.extend(_block(_body_of(stmt), param, ctx, fn))
        elif not type(stmt) in (cst.FunctionDef, cst.ClassDef):
            for node in walk_code(stmt):
                item = _item(node, param, ctx)
                if item is not None:
                    out.append(item)
                    if item[0] == "w" and ".[]" in item[-1]:
                        # a part of the tensor (``module.weight[module.padding_idx]``)
                        out.append(["law", item[-1].split(".[]")[0], None, []])
                    elif item[0] == "w":
                        out.append(["law", item[-1], *_law(node, fn, ctx)])
    return out


def _law(node, fn, ctx) -> list:
    """``[law, guards]`` of a write in a dispatch (``init.normal_(module.weight, mean=0.0,
    std=std)``): a local argument is read as its value, ``std = self.config.initializer_range
    or 0.02`` in the first branch of ``if hasattr(self.config, "initializer_range"): ... elif
    hasattr(self.config, "init_std"): ...`` (transformers' base ``_init_weights``) when that
    attribute exists: ``guards`` lists such attributes (``config.initializer_range``)."""
    import libcst as cst

    from metalint.static.tensors import init_law, law_text

    if not isinstance(node, cst.Call):
        return [None, []]
    guards: list[str] = []

    def value(expr):
        if isinstance(expr, cst.Name) and fn is not None:
            found = _local_value(fn, expr.value, ctx)
            if found is None:
                return None
            guard, expr = found
            if guard:
                guards.append(guard)
        return law_text(expr, {"self.config": "config"})

    return [init_law(node, ctx.qualify, value), guards]


def _local_value(fn, name: str, ctx) -> tuple[str, Any] | None:
    """``(guard, value)`` of the local ``name`` of ``fn``: assigned once at its top level
    (guard ``""``), or only in the branches of one top-level ``if hasattr(self.config, "a"):
    ... elif ...`` chain: its first branch's value, guard ``config.a``. None otherwise."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    def assigns(node) -> list:
        return [
            n
            for n in walk_code(node)
            if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)
            if any(
                dotted(t) == name
                for t in ([t.target for t in n.targets] if type(n) is cst.Assign else [n.target])
            )
        ]

    every = assigns(fn.body)
    for stmt in _body(fn):
        mine = assigns(stmt)
        if not mine:
            continue
        if len(mine) != len(every) or not isinstance(mine[0], cst.Assign):
            return None
        if isinstance(stmt, cst.SimpleStatementLine) and len(mine) == 1:
            return ("", mine[0].value)
        if not isinstance(stmt, cst.If):
            return None
        test = _condition(stmt.test, "self.config", ctx)
        first = stmt.body.body[0] if isinstance(stmt.body, cst.IndentedBlock) else None
        if test[0] != "has" or not isinstance(first, cst.SimpleStatementLine):
            return None
        if first.body[0] is not mine[0]:
            return None
        return (f"config.{test[1]}", mine[0].value)
    return None


def _listed_tensors(loop, param: str, ctx) -> list[list[str]]:
    """``for p in [module.q, module.k]: init.normal_(p)`` (transformers' XLNet): the tensors
    of the module the loop writes in place, each as its attribute chain."""
    import libcst as cst

    from metalint.static.syntax import chain, walk_code
    from metalint.static.tensors import inplace_write

    it = loop.iter if isinstance(loop, cst.For) else None
    if not isinstance(it, (cst.List, cst.Tuple)) or not isinstance(loop.target, cst.Name):
        return []
    chains = [chain(e.value) for e in it.elements]
    if not chains or not all(c and len(c) >= 2 and c[0] == param for c in chains):
        return []
    for node in walk_code(loop.body):
        if isinstance(node, cst.Call):
            w = inplace_write(node, ctx.qualify)
            if w is not None and w.chain and w.chain[0] == loop.target.value:
                return [c[1:] for c in chains]
    return []


def _item(node, param: str, ctx) -> list | None:
    """What one node of a simple statement does to the module ``param``."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import chain
    from metalint.static.tensors import inplace_write

    if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
        targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
        for t in targets:
            parts = chain(t)
            if parts and len(parts) >= 2 and parts[0] == param:
                return _write(parts[1:])
        return None
    if not type(node) is cst.Call:
        return None
    w = inplace_write(_getattr_as_attribute(node, param), ctx.qualify)
    if w is not None:
        return _write(list(w.chain[1:])) if len(w.chain) >= 2 and w.chain[0] == param else None
    func = node.func
    first = dotted(node.args[0].value) if node.args else None
    if not type(func) is cst.Attribute:
        if first != param:
            return None
        q = ctx.qualify(func) or _local_function(func, ctx)
        return ["fn", q] if q else None
    recv = func.value
    if dotted(recv) == param and func.attr.value in ("reset_parameters", "_reset_parameters"):
        return ["reset", func.attr.value]
    if dotted(recv) == param and not node.args:
        return ["call", func.attr.value]  # module.init_falcon_mamba_weights()
    if (
        len(node.args) >= 2
        and first == "self"
        and dotted(node.args[1].value) == param
        and ctx.qualify(recv)
    ):
        # ``PreTrainedModel._init_weights(self, module)``: a base class's, called by name
        return ["base", ctx.qualify(recv), func.attr.value]
    if first != param:
        return None
    if type(recv) is cst.Call and dotted(recv.func) == "super":
        return ["super", func.attr.value]
    if dotted(recv) == "self":
        return ["self", func.attr.value]
    q = ctx.qualify(func)
    return ["fn", q] if q else None


def _write(names: list[str]) -> list:
    """``["w", attr]`` for ``module.attr`` (``.data`` dropped); ``["w", attr, "gate.weight"]``
    for a child's tensor (``init.normal_(module.gate.weight)``: the dispatch on a parent
    re-creates a tensor of its child)."""
    if len(names) > 1 and names[-1] == "data":
        names = names[:-1]
    return ["w", names[0], ".".join(names)] if len(names) > 1 else ["w", names[0]]


def _getattr_as_attribute(call, param: str):
    """``init.copy_(getattr(module, "inv_freq"), v)`` read as ``init.copy_(module.inv_freq, v)``
    (transformers' Evolla rotary embedding)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.tensors import string_value

    first = call.args[0].value if call.args else None
    if not (
        isinstance(first, cst.Call)
        and dotted(first.func) == "getattr"
        and len(first.args) == 2
        and dotted(first.args[0].value) == param
    ):
        return call
    attr = string_value(first.args[1].value)
    if not attr or not attr.isidentifier():
        return call
    target = cst.Attribute(value=cst.Name(param), attr=cst.Name(attr))
    return call.with_changes(args=[call.args[0].with_changes(value=target), *call.args[1:]])


def _condition(test, param: str, ctx) -> list:
    """One ``if`` test of an init hook as data: and/or/not over the spellings below, ``["?"]``
    for anything else."""
    import libcst as cst

    from metalint.static.names import dotted

    if isinstance(test, cst.BooleanOperation):
        op = "and" if isinstance(test.operator, cst.And) else "or"
        return [op, _condition(test.left, param, ctx), _condition(test.right, param, ctx)]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return ["not", _condition(test.expression, param, ctx)]
    found = None
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Name):
        found = _call_condition(test, param, ctx)
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        found = _comparison_condition(test, param, ctx)
    if found is not None:
        return found
    name = dotted(test)
    if name and name.startswith(param + ".") and name.count(".") == 1:
        return ["has", name.split(".")[1]]
    return ["?"]


def structure_test(test, ctx) -> bool:
    """Does an ``if`` test of construction ask only about the structure of the module and its
    children, in the spellings :func:`_condition` reads in an init hook: ``isinstance(self.x,
    T)``, ``hasattr``/``getattr(self.x, "y")``, ``self.x.y is (not) None``, tests on a class
    name, joined by ``and``/``or``/``not``? Such a test reads no tensor's values, so a hook
    evaluates it again to the same answer (torchvision ``VisionTransformer``: ``if
    isinstance(self.conv_proj, nn.Conv2d):`` ... ``elif self.conv_proj.conv_last is not None
    and isinstance(self.conv_proj.conv_last, nn.Conv2d):``). A bare ``if self.x:`` asks a
    value for its truth (a tensor's, maybe): not structure."""
    import libcst as cst

    from metalint.static.names import dotted

    if isinstance(test, cst.BooleanOperation):
        return structure_test(test.left, ctx) and structure_test(test.right, ctx)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return structure_test(test.expression, ctx)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        left = test.left
        if isinstance(left, cst.Call) and dotted(left.func) == "getattr" and left.args:
            left = left.args[0].value
        if isinstance(comp.operator, (cst.Is, cst.IsNot)) and dotted(comp.comparator) == "None":
            # ``self.x.bias is not None``: whether it is there, never what it holds
            return _self_chain(dotted(left))
        else:
            subject = _class_subject(comp.comparator) or _class_subject(left)
    elif isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.args:
        subject = dotted(test.args[0].value)
    else:
        return False
    return _self_chain(subject) and _condition(test, subject, ctx)[0] != "?"


def _self_chain(name: str | None) -> bool:
    return name is not None and (name == "self" or name.startswith("self."))


#: functions of numbers a configuration expression may call (``math.sqrt(1 / fan_in)``)
_NUMBER_FUNCTIONS = frozenset({"int", "float", "len", "min", "max", "abs", "round"})


def structure_value(expr, ctx) -> bool:
    """Is ``expr`` a number computed from the configuration of the module's children only
    (torchvision ``VisionTransformer``: ``fan_in = self.conv_proj.in_channels *
    self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]``): literals, arithmetic,
    constant indexing, ``math`` functions and a few builtins of numbers, and attributes of a
    child (``self.child.attr``, ``attr`` none of a tensor's leaves)? It reads no tensor's
    values, so a hook computes it again to the same number."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.vocabulary import TENSOR_ATTRIBUTES, TENSOR_LEAVES

    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.BinaryOperation):
        return structure_value(expr.left, ctx) and structure_value(expr.right, ctx)
    if isinstance(expr, cst.UnaryOperation) and not isinstance(expr.operator, cst.Not):
        return structure_value(expr.expression, ctx)
    if isinstance(expr, cst.Subscript):
        return (
            len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Index)
            and isinstance(expr.slice[0].slice.value, cst.Integer)
            and structure_value(expr.value, ctx)
        )
    if isinstance(expr, cst.Call):
        q = (ctx.qualify(expr.func) or dotted(expr.func) or "").removeprefix("builtins.")
        return (
            (q.startswith("math.") or q in _NUMBER_FUNCTIONS)
            and all(a.keyword is None and not a.star for a in expr.args)
            and all(structure_value(a.value, ctx) for a in expr.args)
        )
    name = dotted(expr) or ""
    parts = name.split(".")
    return (
        isinstance(expr, cst.Attribute)
        and len(parts) >= 3
        and parts[0] == "self"
        and parts[-1] not in TENSOR_LEAVES
        and not set(parts) & TENSOR_ATTRIBUTES
    )


def _class_subject(node) -> str | None:
    """``self.x`` of ``self.x.__class__.__name__`` (the right side of ``"N" in ...``)."""
    from metalint.static.names import dotted

    name = dotted(node) or ""
    if name.endswith(".__class__.__name__"):
        return name[: -len(".__class__.__name__")]
    return None


def _call_condition(test, param: str, ctx) -> list | None:
    """``isinstance(module, (A, B))``, ``hasattr(module, "x")`` / ``getattr(module, "x", ...)``."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.tensors import string_value

    args = [a.value for a in test.args]
    name = test.func.value
    if name == "isinstance" and len(args) == 2 and dotted(args[0]) == param:
        types = args[1].elements if isinstance(args[1], cst.Tuple) else None
        nodes = [e.value for e in types] if types is not None else [args[1]]
        names = [ctx.qualify(n) or dotted(n) for n in nodes]
        if all(names):
            return ["isinstance", names]
    if name in ("hasattr", "getattr") and len(args) >= 2 and dotted(args[0]) == param:
        attr = string_value(args[1])
        if attr:
            return ["has", attr]
    return None


def _comparison_condition(test, param: str, ctx) -> list | None:
    """``getattr(module, "x", None) is not None`` and tests on the class name
    (``"Norm" in module.__class__.__name__``, ``== "X"``, ``in ("X", "Y")``)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.tensors import string_value

    comp = test.comparisons[0]
    left, right = test.left, comp.comparator
    op = comp.operator
    if isinstance(op, (cst.IsNot, cst.NotEqual)) and dotted(right) == "None":
        inner = _condition(left, param, ctx)
        if inner[0] == "has":
            return inner
    if _class_name(right, param) and isinstance(op, cst.In):
        text = string_value(left)
        if text:
            return ["name_in", text]
    if _class_name(left, param) and isinstance(op, cst.Equal):
        text = string_value(right)
        if text:
            return ["name_eq", text]
    if _class_name(left, param) and isinstance(op, cst.In):
        if isinstance(right, (cst.Tuple, cst.List, cst.Set)):
            texts = [string_value(e.value) for e in right.elements]
            if all(texts):
                return ["name_one_of", texts]
    return None


def _class_name(node, param: str) -> bool:
    """``module.__class__.__name__`` / ``type(module).__name__``."""
    import libcst as cst

    from metalint.static.names import dotted

    if dotted(node) == f"{param}.__class__.__name__":
        return True
    return (
        isinstance(node, cst.Attribute)
        and node.attr.value == "__name__"
        and isinstance(node.value, cst.Call)
        and dotted(node.value.func) == "type"
        and len(node.value.args) == 1
        and dotted(node.value.args[0].value) == param
    )


# -- across files (torch-free, libcst-free) -------------------------------------------------
def _reads(law: str, attr: str) -> bool:
    """Does the init ``law`` read the configuration attribute ``attr`` (then it exists)?"""
    import re

    return re.search(rf"=({re.escape(attr)})[,.)]", law) is not None


def _name_tests(block: list) -> list[list]:
    """The class-name tests (``"BatchNorm" in module.__class__.__name__``) of a dispatch."""
    out: list[list] = []
    for item in block:
        if item[0] == "if":
            todo = [item[1]]
            while todo:
                cond = todo.pop()
                if cond[0] in ("name_in", "name_eq", "name_one_of"):
                    out.append(cond)
                elif cond[0] in ("and", "or", "not"):
                    todo += cond[1:]
            out += _name_tests(item[2]) + _name_tests(item[3])
    return out


def is_template(cls: str) -> bool:
    """Is ``cls`` defined in a code-generation template (``modular_llama.py``)?"""
    return any(part.startswith(TEMPLATE_MODULE_PREFIXES) for part in cls.split(".")[:-1])


class Protocols:
    """Roots, their protocols and what they re-create, over every class of a checked tree."""

    def __init__(self, hierarchy, protocol: str = "auto", hooks: tuple[str, ...] = ()) -> None:
        self.h = hierarchy
        self.protocol = protocol
        self.hooks = hooks
        self.entries = ROOT_ENTRIES if protocol in PROTOCOLS else (protocol,)
        self.parents: dict[str, set[str]] = {}
        self.subclasses: dict[str, set[str]] = {}
        #: (class, parent): the parent swaps the class into a sub-model it built by a call
        #: that names no class (``replace_batch_norm(load_backbone(config))``)
        self.unknown_host: set[tuple[str, str]] = set()
        for name, c in hierarchy.classes.items():
            # a template's class (transformers' modular files) never runs: it contains and
            # extends only the template's own classes (the generated file has the real ones)
            template = is_template(name)
            hosted = c.protocol.get("hosted", {})
            for child in c.protocol.get("children", ()):
                r = hierarchy.resolve(child)
                if r is None or r == name or (template and not is_template(r)):
                    continue
                host = hierarchy.resolve(hosted.get(child, "")) or name
                self.parents.setdefault(r, set()).add(host)
                if hosted.get(child) == "?":
                    self.unknown_host.add((r, name))
            for base in hierarchy.bases(name):
                if is_template(base) or not template:
                    self.subclasses.setdefault(base, set()).add(name)
        self._roots: dict[str, frozenset[str]] = {}
        self._mro: dict[str, list[str]] = {}
        self._name_tests: list[tuple[str, list]] | None = None
        #: while :meth:`same_law` asks: tensor -> ``(law, guards)`` of every write the
        #: protocol makes to it (law None: a write whose law is unknown)
        self._laws: dict[str, list] | None = None
        #: model root -> what the tree's materialisation sites run on it; a site applying a
        #: function the tree does not summarise (``model.apply(fn)`` of another package) is
        #: not judged: the protocol the root's methods suggest stands
        self.sequences: dict[str, list[Sequence]] = {}
        for root, seqs in sequences(getattr(hierarchy, "sites", []), hierarchy.resolve).items():
            known = [q for q in seqs if all(k != "apply" or self._readable(n) for k, n in q.runs)]
            if known:
                self.sequences[root] = known
        self._children: dict[str, set[str]] | None = None

    # -- composition --------------------------------------------------------------------
    def roots(self, cls: str) -> frozenset[str]:
        """The classes nobody constructs that contain ``cls`` (``cls`` itself when nobody
        constructs it)."""
        if cls in self._roots:
            return self._roots[cls]
        out: set[str] = set()
        seen = {cls}
        todo = [cls]
        while todo:
            cur = todo.pop()
            ups = self.parents.get(cur, ())
            if not ups:
                out.add(cur)
            for p in ups:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        self._roots[cls] = frozenset(out)
        return self._roots[cls]

    def family(self, cls: str) -> list[str]:
        """``cls`` and its subclasses in the tree: what an instance holding its tensors is."""
        out = [cls]
        seen = {cls}
        for cur in out:
            for s in sorted(self.subclasses.get(cur, ())):
                if s not in seen and len(out) < 256:
                    seen.add(s)
                    out.append(s)
        return out

    def mro(self, cls: str) -> list[str]:
        if cls not in self._mro:
            out: list[str] = []
            todo = [cls]
            while todo:
                cur = todo.pop(0)
                if cur in out or len(out) > 64:
                    continue
                out.append(cur)
                todo.extend(self.h.bases(cur))
            self._mro[cls] = out
        return self._mro[cls]

    def raw_bases(self, cls: str) -> set[str]:
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None:
                out.update(summary.bases)
        return out

    def is_transformers(self, cls: str) -> bool:
        mro = self.mro(cls)
        if any(c in TRANSFORMERS_BASES for c in mro):
            return True
        return bool(self.raw_bases(cls) & TRANSFORMERS_BASES)

    # -- protocols ----------------------------------------------------------------------
    def protocol_of(self, root: str) -> str:
        seqs = self.sequences_of(root)
        if seqs:
            # what the tree runs on it: the per-module protocol only when every site runs
            # each module's own ``reset_parameters()``
            if all(q.per_module for q in seqs):
                return RESET
            return ROOT_ONLY if any(q.runs_entry for q in seqs) else SITE
        if self.protocol == "transformers" or (
            self.protocol == "auto" and self.is_transformers(root)
        ):
            return TRANSFORMERS
        if self.protocol == "reset_parameters":
            return RESET
        if self.h.defines(root, self.entries, set()):
            return ROOT_ONLY if self.protocol == ROOT_ONLY_PROTOCOL else ROOT_INIT
        return RESET

    def _readable(self, function: str) -> bool:
        summary = self._function(function)
        return summary is not None and ("block" in summary or "returns" in summary)

    def sequences_of(self, root: str) -> list[Sequence]:
        """What materialises ``root``: its sites in the tree, else under ``protocol =
        "init_weights-only"`` the root's entry point alone (no site named)."""
        seqs = self.sequences.get(root)
        if seqs:
            return seqs
        if self.protocol == ROOT_ONLY_PROTOCOL and self.h.defines(root, self.entries, set()):
            entry = self._entry(root)
            short = root.rsplit(".", 1)[-1]
            return [
                Sequence(
                    root, ("", 0, f"{short}.{entry}()"), "all", True, (("entry", entry),), False
                )
            ]
        return []

    def site_recreated(self, seq: Sequence, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``seq.root`` that what the site runs re-creates."""
        out: set[str] = set()
        for kind, name in seq.runs:
            if kind == "entry":
                out |= self._entry_recreated(seq.root, name, cls)
            elif kind == "apply":
                out |= self._run_function(name, cls, set())
            elif kind == "reset":
                out |= self._called(cls, name, name == RESET_HOOK)
        return out

    def _entry_recreated(self, root: str, entry: str, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``root`` that ``root.entry()`` re-creates: what it
        applies to every module, what it writes on the root itself (``self.freqs_cis =
        ...``), and what the children's entry points it calls do (torchtitan's
        ``layer.init_weights()``, ``self.norm.reset_parameters()``), transitively."""
        family = set(self.family(cls))
        out: set[str] = set()
        todo = [(root, entry)]
        seen = set(todo)
        while todo:
            owner, method = todo.pop()
            if owner in family:
                own = self.h.hook_tensors(owner, method)
                out |= own if own is not None else self._called(owner, method, False)
            for item in self._entry_items(owner, method):
                if item[0] != "child":
                    out |= self._applied(item, owner, cls)
                    continue
                if owner in family and item[2] == RESET_HOOK:
                    out.add(item[1])  # ``self.norm.reset_parameters()``: all of that child
                for q in self._child_classes(owner, item[1]):
                    if (q, item[2]) not in seen and len(seen) < 256:
                        seen.add((q, item[2]))
                        todo.append((q, item[2]))
        return out

    def _child_classes(self, owner: str, attr: str) -> set[str]:
        """The tree's classes ``self.attr`` of an ``owner`` is built as or holds; for a
        container whose elements the summary does not name (``nn.ModuleDict({str(i):
        TransformerBlock(i, args) for i in ...})``), every class ``owner`` builds that is no
        other attribute's."""
        got = self._members(owner, attr) | self._held(owner, attr)
        if got:
            return got
        summary = self.h.classes.get(owner)
        if summary is None:
            return set()
        others: set[str] = set()
        for a in summary.protocol.get("members", {}):
            if a != attr:
                others |= self._members(owner, a)
        built = {self.h.resolve(c) for c in summary.protocol.get("children", ())}
        return {c for c in built if c is not None} - others - {owner}

    def lost_at(self, seq: Sequence, cls: str, tensors) -> list[str]:
        """The ``tensors`` of a ``cls`` inside ``seq.root`` that the site leaves as
        ``to_empty()`` (or the meta build) left them: not re-created by what runs, not in the
        checkpoint it loads (non-persistent buffers), not built on the real device (buffers
        under accelerate's ``init_empty_weights()`` when nothing calls ``to_empty()``)."""
        done = self.site_recreated(seq, cls)
        if "*" in done:
            return []
        volatile = self._summary_names(cls, "volatile")
        buffers = self._summary_names(cls, "buffers")
        out = []
        for t in tensors:
            if t in done or (seq.loads and t not in volatile):
                continue
            if seq.meta == "params" and not seq.to_empty and t in buffers:
                continue
            if "." in t and self._child_restored(seq, cls, t, done):
                continue
            out.append(t)
        return out

    def _child_restored(self, seq: Sequence, cls: str, tensor: str, done: set[str]) -> bool:
        """``norm.weight`` of a ``cls`` (a torch layer it holds): restored when the site
        writes that child (``self.norm.reset_parameters()``, ``nn.init.ones_(self.norm.
        weight)`` on the root), runs each module's ``reset_parameters()``, or re-creates the
        tensor on every module of the layer's class (``isinstance(m, nn.LayerNorm)``)."""
        attr, _, leaf = tensor.partition(".")
        if attr in done or any(kind == "reset" and n == RESET_HOOK for kind, n in seq.runs):
            return True
        layers = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            layers.update((summary.protocol.get("members", {}) if summary else {}).get(attr, ()))
        for layer in layers:
            got = self.site_recreated(seq, layer)
            if "*" not in got and leaf not in got:
                return False
        return bool(layers)

    def _summary_names(self, cls: str, key: str) -> set[str]:
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None:
                out.update(summary.protocol.get(key, ()))
        return out

    def descendants(self, root: str) -> set[str]:
        """The tree's classes ``root`` contains, itself included."""
        if self._children is None:
            self._children = {}
            for child, parents in self.parents.items():
                for p in parents:
                    self._children.setdefault(p, set()).add(child)
        out = {root}
        todo = [root]
        while todo and len(out) < 4096:
            for c in self._children.get(todo.pop(), ()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    def model_roots(self, cls: str) -> list[str]:
        """The model roots containing ``cls`` (:meth:`roots`), then the classes containing
        it (or ``cls`` itself) that a materialisation site of the tree builds although
        another class constructs them too (a script materialising one block)."""
        out = sorted(self.roots(cls))
        if not self.sequences:
            return out
        seen = {cls}
        todo = [cls]
        built = []
        while todo and len(seen) < 4096:
            cur = todo.pop()
            if cur in self.sequences and cur not in out:
                built.append(cur)
            for p in self.parents.get(cur, ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return out + sorted(built)

    def first_loss(self, cls: str, tensors) -> tuple[Sequence, list[str]] | None:
        """The first site (of a root containing ``cls`` or a subclass) that loses some of
        ``tensors``, with those it loses."""
        for member in self.family(cls):
            for root in self.model_roots(member):
                for seq in self.sequences_of(root):
                    lost = self.lost_at(seq, member, tensors)
                    if lost:
                        return seq, lost
        return None

    def skipped_hooks(self, root: str, entry: str = "") -> tuple[Sequence, list[str]] | None:
        """A site that runs only ``root``'s entry point (``entry`` when given; no module's own
        ``reset_parameters()``), with the modules inside it whose own hook would restore
        a tensor the site loses (a class's short name, ``Block.norm`` for a torch norm
        layer it holds); None when there is none."""
        if not self.h.defines(root, self.entries, set()) or RESET_HOOK in self.module_hooks(root):
            return None
        for seq in self.sequences_of(root):
            if seq.per_module or not seq.runs_entry:
                continue
            if entry and ("entry", entry) not in seq.runs:
                continue  # the site calls another entry point than the one the fix edits
            classes = []
            for c in sorted(self.descendants(root)):
                # the root's own hook is no module's the fix may call (it may call the entry)
                own = self.h.hook_tensors(c, RESET_HOOK) if c != root else None
                short = c.rsplit(".", 1)[-1]
                if own and self.lost_at(seq, c, sorted(own)):
                    classes.append(short)
                norms = sorted(self._summary_names(c, "norms"))
                lost = {t.partition(".")[0] for t in self.lost_at(seq, c, norms)}
                classes += [f"{short}.{attr}" for attr in sorted(lost)]
            if classes:
                return seq, classes
        return None

    def module_hooks(self, root: str) -> set[str]:
        """The methods ``root``'s entry point calls on the modules it applies to: Levit's
        ``init_weights()`` applies ``_init_weights``, which calls ``m.reset_parameters()``;
        timm's ``init_weights_vit_timm`` calls ``module.init_weights()``."""
        out: set[str] = set()
        seen: set[tuple[str, str]] = set()
        todo: list = [self._entry_items(root, self._entry(root))]
        while todo and len(seen) < 64:
            node = todo.pop()
            if not isinstance(node, list):
                continue
            head = node[0] if node else None
            if head in ("reset", "call") and len(node) == 2 and isinstance(node[1], str):
                out.add(node[1])
                continue
            if head == "method" and len(node) == 2 and ("m", node[1]) not in seen:
                seen.add(("m", node[1]))
                for c in self.mro(root):
                    summary = self.h.classes.get(c)
                    block = summary.protocol.get("dispatch", {}).get(node[1]) if summary else None
                    if block is not None:
                        todo.append(block)
                        break
                continue
            if head in ("function", "factory") and len(node) == 2 and ("f", node[1]) not in seen:
                seen.add(("f", node[1]))
                summary = self._function(node[1]) or {}
                todo.append(summary.get("block", []))
                todo.extend([["function", q] for q in summary.get("returns", ())])
                continue
            todo.extend(x for x in node if isinstance(x, list))
        return out

    def lost_under(
        self, cls: str, tensors: tuple[str, ...], law: tuple = ()
    ) -> tuple[str, str] | None:
        """(protocol, root) under which one of ``tensors`` of ``cls`` is lost, or None when
        every model root that contains the class re-creates them. ``("", "")``: no model root
        (a root with the transformers or a root ``init_weights`` protocol) contains the class:
        it is judged per module. A parentless plain module (a layer swapped in at run time,
        ``AutoBitLinear``) is not a model root. ``law``: ``(child class, tensor, law)`` of an
        init ``cls`` gives a child's tensor: not lost under a root whose protocol re-draws
        that tensor of the child from the same law (:meth:`same_law`)."""
        pairs = [
            (member, root)
            for member in self.family(cls)
            for root in self.model_roots(member)
            if self.protocol_of(root) != RESET
        ]
        if not pairs:
            return ("", "")
        for member, root in pairs:
            seqs = self.sequences_of(root)
            if seqs:
                if any(self.lost_at(q, member, tensors) for q in seqs):
                    return (self.protocol_of(root), root)
                continue
            done = self.recreated(member, root, self.protocol_of(root))
            if "*" in done or all(t in done for t in tensors):
                continue
            if law and self.same_law(member, root, *law):
                continue
            return (self.protocol_of(root), root)
        return None

    def same_law(self, cls: str, root: str, child: str, tensor: str, law: str) -> bool:
        """Does ``root``'s protocol re-draw ``tensor`` of a child of class ``child`` held by
        a ``cls`` from ``law``, in every write it makes to it (transformers ConvBert's
        ``self.depthwise.weight.data.normal_(mean=0.0, std=config.initializer_range)`` and
        the base ``_init_weights``' ``init.normal_(module.weight, mean=0.0, std=std)`` with
        ``std = self.config.initializer_range or 0.02``)? The eager build's values and the
        protocol's then come from one law: nothing is lost."""
        protocol = self.protocol_of(root)
        child = self.h.resolve(child) or child
        self._laws = {}
        try:
            if protocol == TRANSFORMERS:
                done: set[str] = set()
                for owner in self._dispatchers(cls, root):
                    done |= self._run_method(owner, "_init_weights", child, set())
            else:
                done = self.recreated(child, root, protocol)
            writes = self._laws.get(tensor, []) + self._laws.get("*", [])
        finally:
            self._laws = None
        return (
            tensor in done
            and bool(writes)
            and all(got == law and all(_reads(law, g) for g in guards) for got, guards in writes)
        )

    def recreated(self, cls: str, root: str, protocol: str) -> set[str]:
        """Tensors of an instance of ``cls`` inside ``root`` that the root's protocol
        re-creates beyond the class's own hooks."""
        if protocol == TRANSFORMERS:
            out: set[str] | None = None
            for owner in self._dispatchers(cls, root):
                got = self._run_method(owner, "_init_weights", cls, set())
                out = got if out is None else out & got
            return (out or set()) | self._written_by_parents(cls, root)
        if protocol in (ROOT_ONLY, SITE):
            out = set()
            for seq in self.sequences_of(root):
                out |= self.site_recreated(seq, cls)
            return out
        if protocol == ROOT_INIT:
            out = set()
            for owner in self.mro(root):
                summary = self.h.classes.get(owner)
                if summary is None:
                    continue
                entry = next((e for e in self.entries if e in summary.methods), None)
                if entry is not None:
                    for item in summary.protocol.get("applies", {}).get(entry, ()):
                        out |= self._applied(item, root, cls)
                    break
            return out
        return set()

    def _written_by_parents(self, cls: str, root: str) -> set[str]:
        """Tensors of ``cls`` that the dispatch re-creates through every parent holding it in
        ``root``: ``if isinstance(module, SparseMoeBlock): init.normal_(module.gate.weight)``
        (transformers' top-k routers)."""
        out: set[str] | None = None
        for parent in sorted(self.parents.get(cls, ())):
            if parent != root and root not in self.roots(parent):
                continue
            attrs = self._member_attrs(parent, cls)
            got: set[str] | None = None
            for owner in self._dispatchers(parent, root):
                done = self._run_method(owner, "_init_weights", parent, set())
                got = done if got is None else got & done
            writes = {w[len(a) + 1 :] for w in (got or ()) for a in attrs if w.startswith(a + ".")}
            out = writes if out is None else out & writes
        return out or set()

    def _member_attrs(self, parent: str, cls: str) -> list[str]:
        """The attributes of ``parent`` built as ``cls`` (``self.gate = TopKRouter(...)``)."""
        out = []
        for c in self.mro(parent):
            summary = self.h.classes.get(c)
            for attr in summary.protocol.get("members", {}) if summary else {}:
                if attr not in out and cls in self._members(parent, attr):
                    out.append(attr)
        return out

    def _dispatchers(self, cls: str, root: str) -> list[str]:
        """The nearest ``PreTrainedModel`` classes above ``cls`` inside ``root`` (whose
        ``_init_weights`` ``smart_apply`` hands the module to)."""
        out: list[str] = []
        seen = {cls}
        todo = [cls]
        while todo:
            cur = todo.pop()
            if self.is_transformers(cur) or cur == root:
                if root in self.roots(cur) or cur == root:
                    out.append(cur)
                continue
            for p in self.parents.get(cur, ()):
                if (cur, p) in self.unknown_host and self._by_name(cur):
                    # in a sub-model of a class the check cannot name (``load_backbone``):
                    # dispatched by that model's ``_init_weights``, one of those written for
                    # the classes swapped in (``"BatchNorm" in module.__class__.__name__``)
                    out += [o for o in self._by_name(cur) if o not in out]
                elif p not in seen:
                    seen.add(p)
                    todo.append(p)
        return out or [root]

    def _by_name(self, cls: str) -> list[str]:
        """The transformers classes of the tree whose own ``_init_weights`` tests a module's
        class name and matches ``cls`` by it."""
        if self._name_tests is None:
            self._name_tests = []
            for name, c in sorted(self.h.classes.items()):
                block = c.protocol.get("dispatch", {}).get("_init_weights")
                tests = _name_tests(block or [])
                if tests and not is_template(name) and self.is_transformers(name):
                    self._name_tests.append((name, tests))
        return [o for o, tests in self._name_tests if any(self.test(t, cls) for t in tests)]

    def _applied(self, item: list, root: str, cls: str) -> set[str]:
        kind = item[0]
        if kind == "method":
            return self._run_method(root, item[1], cls, set())
        if kind == "function":
            return self._run_function(item[1], cls, set())
        if kind == "factory":
            summary = self._function(item[1])
            out: set[str] = set()
            for q in (summary or {}).get("returns", ()):
                out |= self._run_function(q, cls, set())
            return out
        if kind == "block":
            return self._run(item[1], cls, root, None, set())
        if kind == "each" and cls in self._held(root, item[1]):
            return self._run(item[2], cls, root, None, set())
        return set()

    def _called(self, cls: str, method: str, reset: bool) -> set[str]:
        """What ``module.<method>()`` re-creates on a module of class ``cls``: a reset hook's
        tensors (all of them for a torch built-in's ``reset_parameters()``), else what its
        nearest definition in the MRO writes (a configured hook's summary when it is one)."""
        if reset:
            done = self.h.hook_tensors(cls, method)
            if done is not None:
                return done
            if cls not in self.h.classes and cls.startswith("torch.nn."):
                # torch's own layer (a norm a site's loop resets): all of its tensors
                return set() if cls in TORCH_WITHOUT_RESET else {"*"}
            return {"*"} if self.h._torch_reset_base(cls, set()) else set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is None or method not in summary.methods:
                continue
            if method in summary.hooks:
                return self.h.hook_tensors(c, method) or set()
            return set(summary.protocol.get("inits", {}).get(method, ()))
        return set()

    def _function(self, name: str) -> dict | None:
        full = self.h.resolve(name, table=self.h.functions)
        return self.h.functions.get(full) if full else None

    def _run_function(self, name: str, cls: str, stack: set) -> set[str]:
        summary = self._function(name)
        if summary is None or "block" not in summary or name in stack:
            return set()
        return self._run(summary["block"], cls, None, None, stack | {name})

    def _run_method(self, owner: str, method: str, cls: str, stack: set, after: str = "") -> set:
        """Run ``owner.method(module)`` for a module of class ``cls`` (``after``: start the
        method lookup after this class, as ``super()`` does)."""
        mro = self.mro(owner)
        if after:
            mro = mro[mro.index(after) + 1 :] if after in mro else []
        for c in mro:
            summary = self.h.classes.get(c)
            if summary is None:
                continue
            if method in summary.protocol.get("deleted", ()):
                continue
            block = summary.protocol.get("dispatch", {}).get(method)
            if block is not None:
                key = (c, method)
                if key in stack:
                    return set()
                return self._run(block, cls, owner, c, stack | {key})
            if method in summary.methods:
                return set()  # defined but not a per-module dispatch we could read
        # the library's base class, outside the checked tree
        searched = [after, *mro] if after else mro
        bases = {b for c in searched if c in self.h.classes for b in self.h.classes[c].bases}
        if method == "_init_weights" and bases & TRANSFORMERS_BASES:
            return self._run(TRANSFORMERS_INIT_WEIGHTS, cls, owner, None, stack)
        return set()

    def _run_base(self, base: str, method: str, cls: str, owner: str | None, stack) -> set:
        """``Base.method(self, module)``: the method as the class ``base`` defines it."""
        full = self.h.resolve(base)
        if full is not None:
            return self._run_method(full, method, cls, stack)
        if base in TRANSFORMERS_BASES and method == "_init_weights":
            return self._run(TRANSFORMERS_INIT_WEIGHTS, cls, owner, None, stack)
        return set()

    def _run(self, block: list, cls: str, owner: str | None, defined: str | None, stack) -> set:
        out: set[str] = set()
        for item in block:
            kind = item[0]
            if kind == "w":
                out.update(item[1:])
            elif kind == "law":
                self._record([item[1]], item[2], item[3])
            elif kind in ("all",):
                out.add("*")
                self._record(["*"])
            elif kind in ("call", "reset"):
                got = self._called(cls, item[1], kind == "reset")
                self._record(got)
                out |= got
            elif kind == "super" and owner and defined:
                out |= self._run_method(owner, item[1], cls, stack, after=defined)
            elif kind == "self" and owner:
                out |= self._run_method(owner, item[1], cls, stack)
            elif kind == "base":
                out |= self._run_base(item[1], item[2], cls, owner, stack)
            elif kind == "fn" and self._function(item[1]) is None:
                # ``PreTrainedModel._init_weights(module)``: a class's method, not a function
                head, _, method = item[1].rpartition(".")
                out |= self._run_base(head, method, cls, owner, stack)
            elif kind == "fn":
                out |= self._run_function(item[1], cls, stack)
            elif kind == "if":
                value = self.test(item[1], cls)
                if value is not False:
                    out |= self._run(item[2], cls, owner, defined, stack)
                if value is not True:
                    out |= self._run(item[3], cls, owner, defined, stack)
        return out

    def _record(self, tensors, law: str | None = None, guards: list | tuple = ()) -> None:
        """While :meth:`same_law` asks, note a write of ``tensors`` from ``law`` (None: a
        write whose law is unknown, a module's own hook)."""
        if self._laws is not None:
            for t in tensors:
                self._laws.setdefault(t, []).append((law, list(guards)))

    def test(self, cond: list, cls: str) -> bool | None:
        """A dispatch condition on a module of class ``cls``: True, False or None (unknown)."""
        kind = cond[0]
        short = cls.rsplit(".", 1)[-1]
        if kind == "and":
            a, b = self.test(cond[1], cls), self.test(cond[2], cls)
            return False if a is False or b is False else (True if a and b else None)
        if kind == "or":
            a, b = self.test(cond[1], cls), self.test(cond[2], cls)
            return True if a or b else (False if a is False and b is False else None)
        if kind == "not":
            a = self.test(cond[1], cls)
            return None if a is None else not a
        if kind == "name_in":
            return cond[1] in short
        if kind == "name_eq":
            return cond[1] == short
        if kind == "name_one_of":
            return short in cond[1]
        if kind == "isinstance":
            mro = self.mro(cls)
            raw = self.raw_bases(cls)
            shorts = {c.rsplit(".", 1)[-1] for c in mro} | {b.rsplit(".", 1)[-1] for b in raw}
            for name in cond[1]:
                full = self.h.resolve(name)
                if name in mro or full in mro or name in raw:
                    return True
                if (
                    full is None
                    and not name.startswith("torch.")
                    and name.rsplit(".")[-1] in shorts
                ):
                    return True
            return False
        if kind == "has":
            known = False
            for c in self.mro(cls):
                summary = self.h.classes.get(c)
                if summary is None:
                    continue
                known = True
                # ``hasattr(m, "reset_parameters")``: a method is an attribute too
                if cond[1] in summary.protocol.get("attributes", ()) or cond[1] in summary.methods:
                    return True
            # a torch built-in base (nn.Linear) has attributes the tree does not show
            torch_base = any(
                b.startswith("torch.nn.") and b != "torch.nn.Module" for b in self.raw_bases(cls)
            )
            return False if known and not torch_base else None
        return None

    # -- findings -----------------------------------------------------------------------
    def judge(self, d):
        """A static finding judged under the protocols of the roots containing its class:
        None when every root re-creates what it says is lost (or replays what it says is
        not replayed), else the finding naming the protocol and root it is lost under."""
        cond = d.condition
        if cond.get(RootReplays):
            return self._judge_replayed(d)
        if cond.get(AtMaterialisation):
            return self._judge_site(d)
        if cond.get(SkipsModuleHooks):
            return self._judge_skipped(d)
        if cond.get(ChildrenFirst):
            return None if self._children_first(cond.cls) else d
        recreated = cond.get(NotRecreated)
        if recreated is None:
            return d
        law = cond.get(SameLaw)
        lost = self.lost_under(
            cond.cls, recreated.tensors, (law.child, law.tensor, law.law) if law else ()
        )
        if lost is None:
            return None
        protocol, root = lost
        if not protocol:
            # judged per module: name the site that materialises a root of it so, if any
            seq = next(
                (
                    q
                    for m in self.family(cond.cls)
                    for r in self.model_roots(m)
                    for q in self.sequences_of(r)
                    if q.per_module
                ),
                None,
            )
            if seq is None:
                return d.with_(protocol=RESET)
            return d.with_(
                message=f"{d.message}; lost under {seq.label}",
                protocol=RESET,
                materialised=seq.call,
            )
        seq = next(
            (
                q
                for q in self.sequences_of(root)
                if any(self.lost_at(q, m, recreated.tensors) for m in self.family(cond.cls))
            ),
            None,
        )
        if seq is not None:
            return d.with_(
                message=f"{d.message}; lost under {seq.label}",
                protocol=protocol,
                root=root,
                materialised=seq.call,
            )
        short = root.rsplit(".", 1)[-1]
        where = (
            f"`{short}.init_weights()` (transformers `_init_weights`)"
            if protocol == TRANSFORMERS
            else f"`{short}.{self._entry(root)}()`"
        )
        return d.with_(message=f"{d.message}; lost under {where}", protocol=protocol, root=root)

    def _children_first(self, cls: str) -> bool:
        """Does every site that materialises a model root containing ``cls`` run each
        module's own hooks children first (a parent's ``reset_parameters()`` last, so what it
        writes into a child stays)? False when no site builds one."""
        seqs = [
            q for m in self.family(cls) for r in self.model_roots(m) for q in self.sequences_of(r)
        ]
        return bool(seqs) and all(q.per_module and q.children_first for q in seqs)

    def _judge_site(self, d):
        """The tensors of a class its ``AtMaterialisation`` names, judged under the sites that
        build a root containing it: None when every site restores them, else the finding
        naming the site and the tensors lost there."""
        cond = d.condition
        found = self.first_loss(cond.cls, cond.get(AtMaterialisation).tensors)
        if found is None:
            return None
        seq, lost = found
        short = seq.root.rsplit(".", 1)[-1]
        help = d.help
        if not seq.runs_entry:
            help = (
                f"Re-create it where {seq.label.split(' at ')[0]} runs: call its module's "
                "hook there, or make it a tensor the checkpoint holds"
            )
        return d.with_(
            message=f"{d.message}: lost under {seq.label} ({seq.describe(short)})",
            help=help,
            subject=tuple(lost),
            protocol=self.protocol_of(seq.root),
            root=seq.root,
            materialised=seq.call,
        )

    def _judge_skipped(self, d):
        """A root whose entry point is all a site runs: the finding names the site and the
        classes whose own ``reset_parameters()`` it never calls."""
        cond = d.condition
        found = self.skipped_hooks(cond.cls, d.hook or "")
        if found is None:
            return None
        seq, classes = found
        names = ", ".join(f"`{c}`" for c in classes[:4])
        more = f" and {len(classes) - 4} more" if len(classes) > 4 else ""
        return d.with_(
            message=f"{d.message}; {seq.label} runs it alone after `to_empty()`, so the "
            f"own `reset_parameters()` of {names}{more} never runs",
            protocol=ROOT_ONLY,
            root=cond.cls,
            materialised=seq.call,
        )

    def _judge_replayed(self, d):
        """ML010: init applied by a parent that its hook (``RootReplays``) replays.
        Under a model root's ``init_weights()`` protocol that hook is the re-initialisation
        when the class is the root itself; inside another root (or per module) the finding
        stands, naming the first root that does not replay it."""
        cond = d.condition
        hook = cond.get(RootReplays).hook
        if self.protocol == RESET:
            return d.with_(protocol=RESET)
        roots = sorted(self.roots(cond.cls))
        seqs = self.sequences_of(cond.cls) if roots == [cond.cls] else []
        if seqs:
            # the tree materialises it: replayed only where the site calls that hook
            missed = next((q for q in seqs if ("entry", hook) not in q.runs), None)
            if missed is None:
                return None
            return d.with_(
                message=f"{d.message}; {missed.label} never calls it",
                protocol=self.protocol_of(cond.cls),
                root=cond.cls,
                materialised=missed.call,
            )
        if roots == [cond.cls]:
            protocol = self.protocol_of(cond.cls)
            if protocol in (ROOT_INIT, ROOT_ONLY) and hook in self.entries:
                return None
            return d.with_(protocol=protocol, root=cond.cls if protocol != RESET else None)
        lost = [r for r in roots if not self._replays_child(r, cond.cls, hook)]
        if not lost:
            return None
        root = lost[0]
        return d.with_(
            message=f"{d.message}; `{root.rsplit('.', 1)[-1]}`, the model it is built in, does "
            f"not call `{cond.cls.rsplit('.', 1)[-1]}.{hook}()`",
            protocol=self.protocol_of(root),
            root=root,
        )

    def _replays_child(self, root: str, cls: str, hook: str) -> bool:
        """Does ``root``'s entry point run ``hook`` on its instance of ``cls``, through its
        children's entry points (``self.encoder.init_weights()``, timm's classifier
        wrappers)?"""
        if hook not in self.entries or self.protocol_of(root) not in (ROOT_INIT, ROOT_ONLY):
            return False
        family = set(self.family(cls))
        todo = [(root, self._entry(root))]
        seen = set(todo)
        while todo:
            owner, entry = todo.pop()
            for item in self._entry_items(owner, entry):
                if item[0] != "child":
                    continue
                for q in self._members(owner, item[1]):
                    if q in family and item[2] == hook:
                        return True
                    if (q, item[2]) not in seen and len(seen) < 64:
                        seen.add((q, item[2]))
                        todo.append((q, item[2]))
        return False

    def _entry_items(self, cls: str, entry: str) -> list:
        """What ``cls.entry()`` does, as its nearest definition in the MRO summarises it."""
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None and entry in summary.methods:
                return summary.protocol.get("applies", {}).get(entry, [])
        return []

    def _members(self, cls: str, attr: str) -> set[str]:
        """The classes in the tree that ``self.attr`` of a ``cls`` is built as."""
        return self._summary_classes(cls, "members", attr)

    def _held(self, cls: str, attr: str) -> set[str]:
        """The classes in the tree that the container ``self.attr`` of a ``cls`` holds."""
        return self._summary_classes(cls, "elements", attr)

    def _summary_classes(self, cls: str, table: str, attr: str) -> set[str]:
        """The tree's classes named under ``attr`` in the protocol summary's ``table`` of
        ``cls`` or any of its bases."""
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            for q in (summary.protocol.get(table, {}) if summary else {}).get(attr, ()):
                r = self.h.resolve(q)
                if r is not None:
                    out.add(r)
        return out

    def _entry(self, root: str) -> str:
        return next((e for e in self.entries if self.h.defines(root, (e,), set())), "init_weights")
