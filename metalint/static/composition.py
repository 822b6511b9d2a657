"""What a class constructs, per file (libcst): the first half of :mod:`metalint.static.protocol`.

:func:`summarize_class` records what a class constructs (its *children*, also through a
module-level function of its file: ``replace_batch_norm(backbone)`` swapping frozen norms into
a sub-model), the attributes it sets, the per-module init functions it defines and what its
root entry point applies to every module; :func:`summarize_functions` does the same for the
module-level functions of the file. The blocks they record are those of
:mod:`metalint.static.init_dispatch`.
"""

from __future__ import annotations

from typing import Any

from metalint.static.init_dispatch import (
    _MODULE_ITERATORS,
    _applied_functions,
    _applies,
    _applies_to_modules,
    _block,
    _body,
    _body_of,
    _called_functions,
    _module_param,
    _returned_functions,
    _write,
)
from metalint.vocabulary import AFFINE_NORMS


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
    # the per-module init functions the entry points apply join ``wanted``
    wanted = {"_init_weights"}
    applies = _entry_applies(cls, ctx, hooks, wanted)
    dispatch, deleted = _dispatches(cls, ctx, wanted)
    inits = {
        name: writes
        for name in sorted(cls.methods)
        if "init" in name and name != "__init__" and name not in hooks
        if (writes := _method_writes(cls, name, ctx))
    }
    buffers, volatile = _buffers(cls, ctx)
    norms = sorted(
        {f"{a.target.split('.')[1]}.{t}" for a, ts in affine_norms(cls, ctx.qualify) for t in ts}
    )
    more = {
        "dispatch": dispatch,
        "inits": inits,
        "deleted": deleted,
        "applies": applies,
        "buffers": buffers,
        "volatile": volatile,
        "norms": norms,
    }
    out.update((k, v) for k, v in more.items() if v)
    return out


def _entry_applies(cls, ctx, hooks, wanted: set[str]) -> dict[str, list]:
    """Public method -> what it applies to every module: a public method may be a root's
    entry point (``init_weights``, or one configured)."""
    applies: dict[str, list] = {}
    for entry in cls.methods:
        if entry.startswith(("_", "forward")) or entry in hooks:
            continue
        items = [i for m in cls.reachable(entry) for i in _applies(m, ctx, wanted)]
        if items:
            applies[entry] = items
    return applies


def _dispatches(cls, ctx, wanted: set[str]) -> tuple[dict[str, list], list[str]]:
    """The per-module init methods of the class among ``wanted`` as blocks, and those that
    delete a tensor (not replayed)."""
    dispatch: dict[str, list] = {}
    deleted = []
    for name in sorted(wanted):
        m = cls.methods.get(name)
        param = _module_param(m.node) if m is not None else None
        if param and _deletes(m.node):
            deleted.append(name)
        elif param:
            dispatch[name] = _block(_body(m.node), param, ctx, m.node)
    return dispatch, deleted


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
    from metalint.static.model import construction

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
        children.update(_local_tables(m, ctx))
        for call in m.calls:
            child(call.node.func)
            for arg in call.node.args:
                child(arg.value)
            if call.receiver == "self" and call.method in _REGISTERS and call.node.args:
                _note_registration(call, ctx, attributes, members)
        for default in _defaults(m.node):
            child(default)
        for a in m.assigns:
            if a.target.count(".") == 1:
                _note_assignment(a, m, ctx, attributes, members, elements)
    return children, attributes, members, _swapped_in(methods, ctx, children), elements


def _local_tables(method, ctx) -> set[str]:
    """The classes a local of ``method`` picks from a table (``layer_class =
    LAYER_TYPES[kind]`` then ``layer_class(config)``)."""
    return {
        q
        for values in method.local_values.values()
        for _stmt, value in values
        for q in _table_classes(value, ctx)
    }


def _defaults(fn) -> list:
    """The default values of a function's parameters (``norm_layer=nn.LayerNorm``)."""
    params = (*fn.params.params, *fn.params.kwonly_params)
    return [p.default for p in params if p.default is not None]


def _note_registration(call, ctx, attributes: set[str], members: dict[str, set[str]]) -> None:
    """``self.register_buffer("b", ...)``, ``self.add_module("l", Linear())``: the attribute,
    and the class a registered module is built as."""
    import libcst as cst

    from metalint.static.tensors import string_value

    name = string_value(call.node.args[0].value)
    if name:
        attributes.add(name)
    value = call.node.args[1].value if len(call.node.args) > 1 else None
    q = _class_ref(value.func, ctx) if type(value) is cst.Call else None
    if name and q and call.method in _MODULE_REGISTERS:
        members.setdefault(name, set()).add(q)


def _note_assignment(a, m, ctx, attributes, members, elements) -> None:
    """``self.encoder = Encoder(...)``: the attribute, the class it is built as and the
    classes a container it is built as holds."""
    import libcst as cst

    attr = a.target.split(".")[1]
    attributes.add(attr)
    q = _class_ref(a.value.func, ctx) if type(a.value) is cst.Call else None
    if q:
        members.setdefault(attr, set()).add(q)
    held = _held(a.value, m, ctx) if type(a.value) is cst.Call else set()
    if held:
        elements.setdefault(attr, set()).update(held)


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
    ``ATTENTION_CLASSES = {"eager": Attention, "sdpa": SdpaAttention}``) or from a dict
    literal it indexes (``{"mamba": MambaLayer, "attention": Attention}[kind](config)``):
    every class value of the dict, list or tuple literal, since the key is a config value."""
    import libcst as cst

    kind = type(node)  # none of these has subclasses (isinstance of an ABC is slow)
    if kind is cst.Subscript:
        table = node.value
    elif kind is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "get":
        table = node.func.value
    else:
        return set()
    if type(table) is cst.Dict:  # ``{"mamba": MambaLayer, "attention": Attention}[kind]``
        values = [e.value for e in table.elements if type(e) is cst.DictElement]
    elif type(table) is cst.Name:
        values = _module_tables(ctx).get(table.value, ())
    else:
        return set()
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
            installs.extend(_installed_by_call(node, called))
        elif type(node) is cst.Assign and len(node.targets) == 1:
            installs.extend(_installed_by_assignment(node, ctx, made))
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


def _installed_by_call(node, called: str) -> list:
    """``setattr(model, k, v)``, ``model.add_module(k, v)``: (module, value)."""
    if called == "setattr" and len(node.args) == 3:
        return [(node.args[0].value, node.args[2].value)]
    if called.endswith(".add_module") and len(node.args) == 2:
        return [(node.func.value, node.args[1].value)]
    return []


def _installed_by_assignment(node, ctx, made: dict[str, str]) -> list:
    """``model._modules[k] = v``: (module, value); ``x = Cls(...)`` notes the class the
    local holds in ``made``."""
    import libcst as cst

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
        return [(target.value.value, node.value)]
    return []


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


def summarize_functions(
    module, module_name: str, ctx, classes: list[dict], applied: tuple[str, ...] = ()
) -> dict[str, dict]:
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
    # :mod:`metalint.static.pipeline`): the file cannot know, its name says it may be one;
    # one this file's builders apply or hand the model to (``applied``) is one
    todo += [n for n in top if "init" in n.lower()]
    todo += [q[len(prefix) :] for q in applied if q.startswith(prefix)]
    out: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done or name not in top:
            continue
        done.add(name)
        entry = _function_summary(top[name], ctx)
        more = _called_functions(entry.get("block", [])) + entry.get("returns", [])
        todo += [q[len(prefix) :] for q in more if q.startswith(prefix)]
        if entry:
            out[f"{prefix}{name}"] = entry
    if "modules(" in ctx.source:
        for name, stmt in top.items():
            param = _module_param(stmt, method=False)
            if param and _applies_to_modules(stmt, param, ctx):
                out.setdefault(f"{prefix}{name}", {})["applies_to_modules"] = True
    return out


def _function_summary(stmt, ctx) -> dict[str, Any]:
    """What a module-level function re-creates on its first argument (``block``), on each
    module of it it loops over (``modules``), and the functions it returns (``returns``)."""
    entry: dict[str, Any] = {}
    param = _module_param(stmt, method=False)
    if param is not None:
        block = _block(_body(stmt), param, ctx, stmt)
        if block:
            entry["block"] = block
        each = _each_module(stmt, param, ctx)
        if each:
            entry["modules"] = each
    returns = _returned_functions(stmt, ctx)
    if returns:
        entry["returns"] = returns
    return entry


def _each_module(fn, param: str, ctx) -> list:
    """What ``def init_model(model): for m in model.modules(): ...`` re-creates on each
    module it loops over (a block, as :func:`_block` reads it)."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    out: list = []
    for loop in walk_code(fn.body):
        if not type(loop) is cst.For or not type(loop.iter) is cst.Call:
            continue
        if (dotted(loop.iter.func) or "") not in {f"{param}.{m}" for m in _MODULE_ITERATORS}:
            continue
        names = [n.value for n in walk_code(loop.target) if type(n) is cst.Name]
        if names:
            out += _block(_body_of(loop), names[-1], ctx, fn)
    return out
