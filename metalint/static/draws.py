"""Does code draw random numbers? One answer, in three values (:class:`Draws`): a call of a
known random draw (a torch random factory, numpy's or Python's generators, an in-place init
that draws) makes it ``ALWAYS``; code whose every call is known to draw nothing (torch's
deterministic functions, the builtins, deterministic tensor methods, a function of the file
whose body draws nothing) is ``NEVER``; anything else (a function or method not known) is
``MAYBE``. The codemods ask it before they move code past other code that draws."""

from __future__ import annotations

import enum

import libcst as cst

from metalint.static.construction import top_function
from metalint.static.names import dotted
from metalint.static.rule import RuleContext
from metalint.static.syntax import walk_code
from metalint.static.tensors import random_draw
from metalint.vocabulary import (
    DETERMINISTIC_METHODS,
    HOST_RANDOM_MODULES,
    INIT_KIND,
    RNG_FREE_BUILTINS,
    RNG_FREE_TORCH,
)

#: how deep :func:`draws` follows the functions of the file that code calls
_DEPTH = 4


class Draws(enum.Enum):
    NEVER = "never"
    MAYBE = "maybe"
    ALWAYS = "always"


def draws(
    node: cst.CSTNode, ctx: RuleContext, host_only: bool = False, _seen: frozenset = frozenset()
) -> Draws:
    """Does ``node`` draw random numbers (see the module)? ``host_only``: only a draw that
    torch's generator state does not hold (numpy's, Python's) counts as ``ALWAYS``; torch's
    own draws are then ``MAYBE``."""
    found = Draws.NEVER
    for n in walk_code(node):
        if type(n) is cst.Call:
            kind = _call_draws(n, ctx, host_only, _seen)
            if kind is Draws.ALWAYS:
                return kind
            if kind is Draws.MAYBE:
                found = kind
    return found


def _call_draws(n: cst.Call, ctx: RuleContext, host_only: bool, seen: frozenset) -> Draws:
    q = ctx.qualify(n.func)
    last = (
        (q or "").rsplit(".", 1)[-1] if q else getattr(getattr(n.func, "attr", None), "value", "")
    )
    if random_call(q) or INIT_KIND.get(last) == "random":
        return (
            Draws.ALWAYS
            if not host_only or (q or "").startswith(HOST_RANDOM_MODULES)
            else Draws.MAYBE
        )
    if q in RNG_FREE_TORCH or dotted(n.func) in RNG_FREE_BUILTINS:
        return Draws.NEVER
    f = n.func
    if q is None and type(f) is cst.Attribute and f.attr.value in DETERMINISTIC_METHODS:
        return Draws.NEVER
    if q is None and type(f) is cst.Name and f.value not in seen and len(seen) < _DEPTH:
        fn = top_function(ctx.module, f.value)
        if (
            fn is not None
            and _read(fn)
            and draws(fn.body, ctx, False, seen | {f.value}) is Draws.NEVER
        ):
            return Draws.NEVER
    return Draws.MAYBE


def random_call(qualname: str | None) -> bool:
    """Does a call of ``qualname`` draw random numbers whatever its arguments: a torch random
    factory (``torch.randn``), numpy's or Python's generators (:func:`random_draw`)?"""
    return random_draw(qualname)


def _read(fn: cst.FunctionDef) -> bool:
    """Is the function's body there to read? One left out of the parse
    (:mod:`metalint.static.elide`) is a single string literal."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    return not (
        len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and len(body[0].body) == 1
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    ) and bool(body)
