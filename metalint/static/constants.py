"""What a default build computes: constant values of constructor arguments and ``self`` flags.

timm builds call ``self.init_weights(needs_reset=False)`` from ``__init__`` and branch on
``self.weight_init_mode == 'reset'``; whether an applied init runs in the default build depends
on those values. This is a small evaluator over Python's ``ast`` (so that the cross-file step,
which never imports libcst, can use it too): constants, names bound in an environment, ``and``
/ ``or`` / ``not``, one-operator comparisons, ``x if c else y`` and ``str.startswith`` /
``endswith``. Anything else is :data:`UNKNOWN`, and an unknown condition never hides a finding.
"""

from __future__ import annotations

import ast
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}
_CONSTANT_TYPES = (str, int, float, bool, type(None))


def parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def _name(node: ast.expr) -> str | None:
    """``mode`` or ``self.weight_init_mode``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def evaluate(node: ast.expr | None, env: dict[str, Any]) -> Any:
    """The value of ``node`` given ``env`` (names and ``self.x`` -> constants), or UNKNOWN."""
    if node is None:
        return UNKNOWN
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, _CONSTANT_TYPES) else UNKNOWN
    name = _name(node)
    if name is not None:
        return env.get(name, UNKNOWN)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [evaluate(e, env) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = evaluate(node.operand, env)
        return UNKNOWN if value is UNKNOWN else not value
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, env)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return _compare(node, env)
    if isinstance(node, ast.IfExp):
        test = evaluate(node.test, env)
        return UNKNOWN if test is UNKNOWN else evaluate(node.body if test else node.orelse, env)
    if isinstance(node, ast.Call):
        return _string_test(node, env)
    return UNKNOWN


def _compare(node: ast.Compare, env: dict[str, Any]) -> Any:
    """``a == b`` (one comparison of :data:`_COMPARE`) of known values."""
    left, right = evaluate(node.left, env), evaluate(node.comparators[0], env)
    if left is UNKNOWN or right is UNKNOWN:
        return UNKNOWN
    try:
        return _COMPARE[type(node.ops[0])](left, right)
    except TypeError:
        return UNKNOWN


def _bool_op(node: ast.BoolOp, env: dict[str, Any]) -> Any:
    """Python's semantics: the first falsy (and) / truthy (or) operand, else the last."""
    for i, operand in enumerate(node.values):
        value = evaluate(operand, env)
        if value is UNKNOWN:
            return UNKNOWN
        last = i == len(node.values) - 1
        if (
            last
            or (isinstance(node.op, ast.And) and not value)
            or (isinstance(node.op, ast.Or) and value)
        ):
            return value
    return UNKNOWN


def _string_test(node: ast.Call, env: dict[str, Any]) -> Any:
    """``s.startswith(x)`` / ``s.endswith(x)`` of known strings; UNKNOWN for any other call."""
    if not (
        isinstance(node.func, ast.Attribute)
        and node.func.attr in ("startswith", "endswith")
        and len(node.args) == 1
        and not node.keywords
    ):
        return UNKNOWN
    obj, arg = evaluate(node.func.value, env), evaluate(node.args[0], env)
    if isinstance(obj, str) and isinstance(arg, (str, tuple)):
        try:
            return getattr(obj, node.func.attr)(arg)
        except TypeError:
            return UNKNOWN
    return UNKNOWN


def evaluate_text(text: str, env: dict[str, Any]) -> Any:
    return evaluate(parse(text), env)


def is_constant(value: Any) -> bool:
    return value is not UNKNOWN and (
        isinstance(value, _CONSTANT_TYPES)
        or (isinstance(value, tuple) and all(is_constant(v) for v in value))
    )


def dispatch(summary: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Which kind of init a module-level init factory returns for these arguments.

    ``summary`` (see :func:`metalint.static.engine.init_factories`): ``params`` (names in
    order), ``defaults`` (constant defaults), ``branches`` (``[test source or None, kind]`` in
    the order of the function's ``if``/``elif``/``else`` chain). ``args`` maps a parameter name,
    or its position as a string, to a constant. None when the branch taken is unknown.
    """
    params = summary.get("params", [])
    env = {k: v for k, v in summary.get("defaults", {}).items()}
    for key, value in args.items():
        name = params[int(key)] if key.isdigit() and int(key) < len(params) else key
        env[name] = value
    for name in params:
        env.setdefault(name, UNKNOWN)
    for test, kind in summary.get("branches", []):
        if test is None:
            return kind
        value = evaluate_text(test, env)
        if value is UNKNOWN:
            return None
        if value:
            return kind
    return None
