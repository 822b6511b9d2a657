"""Per-module init functions as data (libcst): what :mod:`metalint.static.protocol` replays.

``_init_weights(self, module)``: an ``if``/``elif`` dispatch by ``isinstance``, class-name
tests, ``hasattr``/``getattr``, helpers and ``super()``, loops over a list of the module's
tensors, the module's own init methods (``module.init_mamba_weights()``), read into nested
lists (:func:`_block`) that the cross-file step runs without libcst; and what a root entry
point applies to every module (``self.apply(fn)``, ``named_apply(fn, self)``, ``for m in
self.modules():``) or to each module of a container child (:func:`_applies`).
"""

from __future__ import annotations

from typing import Any

from metalint.vocabulary import (
    RECURSIVE_TENSOR_ITERATORS,
    RESET_HOOK,
    ROOT_ENTRIES,
    ZEROS_LAW,
)

#: iterating these over the module argument visits every tensor of it
_TENSOR_ITERATORS = frozenset(RECURSIVE_TENSOR_ITERATORS)


_MODULE_ITERATORS = frozenset({"modules", "named_modules"})


#: a root entry calling one of these on a child (``self.encoder.init_weights()``) runs the
#: child's own entry point
_CHILD_ENTRIES = frozenset(ROOT_ENTRIES)


#: the calls on a child an entry point's summary records (a materialisation site that runs
#: the entry alone counts ``self.norm.reset_parameters()`` as restoring that child)
_CHILD_CALLS = _CHILD_ENTRIES | {RESET_HOOK}


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

    from metalint.static.defaults import applied_function, is_self_apply, unwrap_partial

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
        if fn is not None:
            out.append(_applied(unwrap_partial(fn, ctx.qualify), ctx, wanted))
    return out + _loop_items(method, ctx)


def _loop_items(method, ctx) -> list[list]:
    """What the loops of a root entry method apply: to every module (``for m in
    self.modules()``), to every module inside a child (``self.decoder.modules()``), to each
    element of a container child, and the element's own entry point."""
    import libcst as cst

    from metalint.static.names import dotted

    out: list[list] = []
    for node, targets, it in method.loops:
        over = (dotted(it.func) or "") if isinstance(it, cst.Call) else ""
        # ``self.modules()`` (child ""), ``self.decoder.modules()`` (child "decoder")
        child, _, iterator = over[5:].rpartition(".") if over.startswith("self.") else ("", "", "")
        modules = isinstance(node, cst.For) and bool(targets) and iterator in _MODULE_ITERATORS
        if modules and not child:
            out.append(["block", _block(_body_of(node), targets[-1], ctx, method.node)])
        elif modules and child.isidentifier():
            # for m in self.decoder.modules(): every module inside that child
            block = _block(_body_of(node), targets[-1], ctx, method.node)
            if block:
                out.append(["within", child, block])
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


def _applied(fn, ctx, wanted: set[str]) -> list:
    """What ``self.apply(fn)`` applies: ``["factory", q]`` (``fn`` a call), ``["method",
    name]`` (a method of the class, which joins ``wanted``), ``["function", q]`` or
    ``["unknown"]``."""
    import libcst as cst

    from metalint.static.names import dotted

    if isinstance(fn, cst.Call):
        q = ctx.qualify(fn.func) or _local_function(fn.func, ctx)
        return ["factory", q] if q else ["unknown"]
    name = dotted(fn) or ""
    if name.startswith("self.") and name.count(".") == 1:
        wanted.add(name[5:])
        return ["method", name[5:]]
    q = ctx.qualify(fn) or _local_function(fn, ctx)
    return ["function", q] if q else ["unknown"]


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

    out: list = []
    for stmt in stmts:
        if type(stmt) is cst.If:
            out.extend(_if_block(stmt, param, ctx, fn))
        elif type(stmt) in (cst.For, cst.While):
            out.extend(_loop_block(stmt, param, ctx, fn))
        elif type(stmt) in (cst.With, cst.Try):
            out.extend(_block(_body_of(stmt), param, ctx, fn))
        elif not type(stmt) in (cst.FunctionDef, cst.ClassDef):
            out.extend(_simple_block(stmt, param, ctx, fn))
    return out


def _if_block(stmt, param: str, ctx, fn) -> list:
    """``["if", condition, body, orelse]`` of an ``if`` (none when neither branch does
    anything to the module)."""
    import libcst as cst

    orelse = stmt.orelse
    if type(orelse) is cst.If:
        other = _block([orelse], param, ctx, fn)
    elif type(orelse) is cst.Else:
        other = _block(_body_of(orelse), param, ctx, fn)
    else:
        other = []
    body = _block(_body_of(stmt), param, ctx, fn)
    if body or other:
        return [["if", _condition(stmt.test, param, ctx), body, other]]
    return []


def _loop_block(stmt, param: str, ctx, fn) -> list:
    """A loop: ``["all"]`` for one over every tensor of the module that writes each in
    place (``for name, p in module.named_parameters(): init(p)``), the writes of one over a
    list of its tensors, else its body's block."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code
    from metalint.static.tensors import inplace_write

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
        return [["all"]]
    if listed:
        return [_write(names) for names in listed]
    return _block(_body_of(stmt), param, ctx, fn)


def _simple_block(stmt, param: str, ctx, fn) -> list:
    """What the nodes of a simple statement do to the module, each write followed by its
    law."""
    from metalint.static.syntax import walk_code

    out: list = []
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
    from metalint.static.tensors import inplace_write

    if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
        return _assigned_item(node, param)
    if not type(node) is cst.Call:
        return None
    w = inplace_write(_getattr_as_attribute(node, param), ctx.qualify)
    if w is not None:
        return _write(list(w.chain[1:])) if len(w.chain) >= 2 and w.chain[0] == param else None
    func = node.func
    first = dotted(node.args[0].value) if node.args else None
    if not type(func) is cst.Attribute:
        q = (ctx.qualify(func) or _local_function(func, ctx)) if first == param else None
        return ["fn", q] if q else None
    return _method_item(node, first, param, ctx)


def _assigned_item(node, param: str) -> list | None:
    """``module.weight = ...``: a write of that tensor."""
    import libcst as cst

    from metalint.static.syntax import chain

    targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
    for t in targets:
        parts = chain(t)
        if parts and len(parts) >= 2 and parts[0] == param:
            return _write(parts[1:])
    return None


def _method_item(node, first: str | None, param: str, ctx) -> list | None:
    """What a call of an attribute does to the module ``param`` (``first``: its first
    argument): its reset, another of its methods, a base class's dispatch called by name,
    ``super()``'s or the class's own dispatch, a function."""
    import libcst as cst

    from metalint.static.names import dotted

    func = node.func
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


_NORMS = ["torch.nn.GroupNorm", "torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d"]
#: the base dispatch's ``init.normal_(module.weight, mean=0.0, std=std)``, ``std =
#: self.config.initializer_range or 0.02`` when the config has it (see :func:`_law`)
_BASE_NORMAL = [
    "law",
    "weight",
    "torch.nn.init.normal_(mean=0.0, std=config.initializer_range)",
    ["config.initializer_range"],
]
_ZEROS = ZEROS_LAW
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
