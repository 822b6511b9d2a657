"""The default build of a class: which branches of its construction code run.

``SwinTransformerV2Cr(weight_init='reset')`` sets ``self.weight_init_mode = 'reset'`` and its
``init_weights()`` only applies a custom init in the ``else`` branch of
``if self.weight_init_mode == 'reset'``: the default build never runs it. These helpers bind
the constant defaults of ``__init__``, the ``self`` flags it sets, the arguments ``__init__``
passes to the method it calls, and the method's own locals, then ask
:mod:`metalint.static.constants` whether a statement is reached. They also summarise the
module-level init functions of a file (``get_init_weights_vit(mode)`` and what it returns for
each mode) so that another file's ``named_apply(get_init_weights_vit(mode), self)`` can be
judged across files.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from metalint.static import constants
from metalint.static.constants import UNKNOWN
from metalint.static.model import CallSite, ClassFacts, MethodFacts
from metalint.static.names import dotted
from metalint.static.syntax import code_children, node_text, walk_code
from metalint.vocabulary import RESET_ONLY_CALLS


def code(node: cst.CSTNode) -> str:
    return node_text(node)


def value_of(node: cst.BaseExpression | None, env: dict[str, Any]) -> Any:
    if node is None or _never_constant(node):
        return UNKNOWN
    kind = type(node)
    # a name or ``x.attr`` is looked up as :func:`constants.evaluate` does, without
    # rendering and parsing it (most of what is left); ``True``, ``None`` are constants
    if kind is cst.Name:
        return _NAMED[node.value] if node.value in _NAMED else env.get(node.value, UNKNOWN)
    if kind is cst.Attribute:
        inner = node.value
        if type(inner) is not cst.Name:
            return UNKNOWN
        return env.get(f"{inner.value}.{node.attr.value}", UNKNOWN)
    return constants.evaluate(constants.parse(code(node)), env)


#: the names CPython's parser reads as constants
_NAMED = {"True": True, "False": False, "None": None}


def _never_constant(node: cst.BaseExpression) -> bool:
    """What :func:`constants.evaluate` answers UNKNOWN for whatever the names are worth,
    told without rendering and parsing the node (``self.proj = nn.Linear(...)``, most of an
    ``__init__``'s assignments): a subscript, an arithmetic operation, a call other than a
    string's ``startswith``/``endswith``."""
    if type(node) is cst.Call:
        func = node.func
        return not (type(func) is cst.Attribute and func.attr.value in ("startswith", "endswith"))
    return type(node) in (cst.Subscript, cst.BinaryOperation)


def _param_defaults(fn: cst.FunctionDef, env: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in (*fn.params.params, *fn.params.kwonly_params):
        out[p.name.value] = value_of(p.default, env) if p.default is not None else UNKNOWN
    return out


def _positional(fn: cst.FunctionDef) -> list[str]:
    names = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _single_target(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``x = v`` / ``self.x = v`` / ``x: T = v`` as (dotted target, value)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target, value = small.targets[0].target, small.value
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        target, value = small.target, small.value
    else:
        return None
    name = dotted(target)
    return (name, value) if name else None


def _assigned_names(body: cst.CSTNode) -> set[str]:
    """Every dotted name assigned anywhere under ``body``."""
    out: set[str] = set()
    for n in walk_code(body):
        targets: list[cst.CSTNode] = []
        if type(n) is cst.Assign:
            targets = [t.target for t in n.targets]
        elif type(n) in (cst.AnnAssign, cst.AugAssign):
            targets = [n.target]
        elif type(n) in (cst.For, cst.CompFor):
            targets = [n.target]
        for t in targets:
            for x in walk_code(t):
                name = dotted(x) if type(x) in (cst.Name, cst.Attribute) else None
                if name:
                    out.add(name)
    return out


def _run_straight_line(fn: cst.FunctionDef, env: dict[str, Any]) -> None:
    """Bind the top-level single assignments of ``fn`` in order; a name also assigned inside
    a nested block (a branch, a loop) becomes unknown."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else []
    nested: set[str] = set()
    for stmt in body:
        if _single_target(stmt) is None:
            nested |= _assigned_names(stmt)
    for stmt in body:
        t = _single_target(stmt)
        if t is not None:
            env[t[0]] = UNKNOWN if t[0] in nested else value_of(t[1], env)
    for name in nested:
        env[name] = UNKNOWN


def default_env(cls: ClassFacts, method: MethodFacts) -> dict[str, Any]:
    """Constant values ``method`` sees in the default build (``cls()`` with default arguments,
    ``method`` called from ``__init__``): parameters, ``self.x`` flags and locals."""
    init = cls.methods.get("__init__")
    if init is None:
        return {}
    env = _init_env(cls, init)
    if method is init:
        return env
    flags = {k: v for k, v in env.items() if k.startswith("self.")}
    sites = [
        c.node
        for m in cls.methods.values()
        for c in m.calls
        if c.receiver == "self" and c.method == method.name
    ]
    if len(sites) == 1:
        call_env = env if any(c.node is sites[0] for c in init.calls) else {}
        bound = _bound_arguments(method, sites[0], call_env)
        if bound is None:
            return flags
    else:
        bound = {k: UNKNOWN for k in _param_defaults(method.node, {})}
    out = {**flags, **bound}
    _run_straight_line(method.node, out)
    return out


def _init_env(cls: ClassFacts, init: MethodFacts) -> dict[str, Any]:
    """What ``__init__`` sees with default arguments: its parameters, then the straight-line
    assignments; a ``self.x`` flag some other method (re)assigns is not known."""
    env = _param_defaults(init.node, {})
    _run_straight_line(init.node, env)
    written: dict[str, int] = {}
    for m in cls.methods.values():
        for a in m.assigns:
            written[a.target] = written.get(a.target, 0) + 1
    for name in [k for k in env if k.startswith("self.")]:
        if written.get(name, 0) > 1:
            env[name] = UNKNOWN
    return env


def _bound_arguments(method: MethodFacts, site: cst.Call, call_env: dict) -> dict | None:
    """The parameters of ``method`` as its one call ``site`` binds them (defaults for the
    rest); None when the call passes ``*args`` or ``**kwargs``."""
    bound = _param_defaults(method.node, {})
    names = _positional(method.node)
    for i, arg in enumerate(site.args):
        if arg.star:
            return None
        key = (
            arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
        )
        if key is not None:
            bound[key] = value_of(arg.value, call_env)
    return bound


def reached_by_default(method: MethodFacts, node: cst.CSTNode, env: dict[str, Any]) -> bool:
    """False only when an enclosing ``if`` of ``node`` certainly goes the other way."""
    return _reached(method.node, node, env) is not False


def _reached(stmt: cst.CSTNode, node: cst.CSTNode, env: dict[str, Any]) -> bool | None:
    """None: ``node`` is not under ``stmt``; otherwise whether it is reached."""
    if stmt is node:
        return True
    if type(stmt) is cst.If:
        test = value_of(stmt.test, env)
        for block, wanted in ((stmt.body, True), (stmt.orelse, False)):
            if block is None or not any(n is node for n in walk_code(block)):
                continue
            if test is not UNKNOWN and bool(test) != wanted:
                return False
            inner = _reached(block, node, env)
            return True if inner is None else inner
        return None
    for child in code_children(stmt):
        r = _reached(child, node, env)
        if r is not None:
            return r
    return None


def is_self_apply(call: CallSite) -> bool:
    """``self.apply(fn)``, ``named_apply(fn, self)`` / ``named_apply(fn=..., module=self)``."""
    if call.receiver == "self" and call.method == "apply" and call.node.args:
        return True
    func = call.qualname or dotted(call.node.func) or ""
    if func.rsplit(".", 1)[-1] == "named_apply":
        for i, arg in enumerate(call.node.args):
            is_module_arg = (arg.keyword is None and i == 1) or (
                arg.keyword is not None and arg.keyword.value == "module"
            )
            if is_module_arg and isinstance(arg.value, cst.Name) and arg.value.value == "self":
                return True
    return False


def applied_function(call: cst.Call) -> cst.BaseExpression | None:
    """The function argument of ``self.apply(fn)`` / ``named_apply(fn, self)``."""
    for i, arg in enumerate(call.args):
        if (arg.keyword is None and i == 0) or (
            arg.keyword is not None and arg.keyword.value == "fn"
        ):
            return arg.value
    return None


def unwrap_partial(fn: cst.BaseExpression, qualify) -> cst.BaseExpression:
    """``partial(f, ...)`` -> ``f``."""
    while (
        isinstance(fn, cst.Call)
        and (qualify(fn.func) or dotted(fn.func) or "").rsplit(".", 1)[-1] == "partial"
        and fn.args
        and fn.args[0].keyword is None
    ):
        fn = fn.args[0].value
    return fn


def calls_only_reset(fn: cst.FunctionDef, hooks: tuple[str, ...] = ("reset_parameters",)) -> bool:
    """A function whose only calls are each module's own hook (``m.reset_parameters()``, or
    one of ``hooks``: timm MaxxVit's ``m.init_weights()``) and type checks."""
    resets = False
    for c in walk_code(fn.body):
        if type(c) is cst.Call:
            name = c.func.attr.value if type(c.func) is cst.Attribute else dotted(c.func)
            if name not in RESET_ONLY_CALLS and name not in hooks:
                return False  # most functions: at their first call
            resets = resets or name in hooks
    return resets


def init_functions(module: cst.Module, module_name: str, qualify) -> dict[str, dict[str, Any]]:
    """Summaries of the module-level functions another file may apply: one that only calls each
    module's ``reset_parameters()`` (``kind: reset``) and a factory whose ``if``/``elif`` chain
    returns such functions (``partial(f, ...)``) by mode (``branches``)."""
    top = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    kinds = {name: "reset" if calls_only_reset(fn) else "init" for name, fn in top.items()}
    out: dict[str, dict[str, Any]] = {}
    for name, fn in top.items():
        if kinds[name] == "reset":
            out[f"{module_name}.{name}"] = {"kind": "reset"}
            continue
        branches = _dispatch_branches(fn, top, kinds, qualify)
        if branches and any(k == "reset" for _, k in branches):
            out[f"{module_name}.{name}"] = {
                "params": _positional(fn),
                "defaults": {
                    k: v for k, v in _param_defaults(fn, {}).items() if constants.is_constant(v)
                },
                "branches": branches,
            }
    return out


def _dispatch_branches(fn, top, kinds, qualify) -> list[list[Any]] | None:
    """``if c1: return partial(f1, ..) elif c2: return f2 else: return ...`` ->
    ``[[c1, kind(f1)], [c2, kind(f2)], [None, ...]]``; None for any other shape."""
    body = [
        s
        for s in (fn.body.body if isinstance(fn.body, cst.IndentedBlock) else [])
        if not (
            isinstance(s, cst.SimpleStatementLine)
            and all(
                isinstance(x, cst.Expr) and isinstance(x.value, cst.SimpleString) for x in s.body
            )
        )
    ]

    def returned(block) -> str | None:
        stmts = block.body.body if isinstance(block, cst.Else) else block.body
        if len(stmts) != 1 or not isinstance(stmts[0], cst.SimpleStatementLine):
            return None
        small = stmts[0].body[0]
        if not isinstance(small, cst.Return) or small.value is None:
            return None
        f = unwrap_partial(small.value, qualify)
        return kinds.get(f.value) if isinstance(f, cst.Name) else None

    if len(body) != 1 and not (len(body) == 2 and isinstance(body[0], cst.If)):
        return None
    out: list[list[Any]] = []
    node = body[0]
    while isinstance(node, cst.If):
        kind = returned(node.body)
        if kind is None:
            return None
        out.append([code(node.test), kind])
        node = node.orelse
    if isinstance(node, cst.Else):
        kind = returned(node)
    elif node is None and len(body) == 2:
        kind = returned(cst.IndentedBlock(body=[body[1]]))
    else:
        return None
    if kind is None:
        return None
    out.append([None, kind])
    return out
