from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.static.model import ClassFacts
from metalint.static.rule import Finding, Invalid, Rule
from metalint.vocabulary import APPLY_METHOD as APPLY


def takes_recurse(fn: cst.FunctionDef) -> bool:
    """Whether ``def _apply(...)`` accepts a ``recurse`` argument (by name, or in
    ``*args``/``**kwargs``)."""
    p = fn.params
    names = {q.name.value for q in (*p.posonly_params, *p.params, *p.kwonly_params)}
    return "recurse" in names or isinstance(p.star_arg, cst.Param) or p.star_kwarg is not None


@dataclass(frozen=True)
class ApplySite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.apply_without_recurse`):
    the class's ``def _apply(self, fn)`` (``fn``), or the value of ``_apply = move_states``
    (``alias``: a lambda or a function of the file, which the fix leaves alone)."""

    fn: cst.FunctionDef | None
    alias: cst.BaseExpression | None = None


class ApplyWithoutRecurse(Rule):
    """
    ## What it does
    Finds an `nn.Module` that overrides `_apply(self, fn)` without the `recurse` argument
    torch's own `Module._apply(self, fn, recurse=True)` takes (since torch 2.1), also one bound
    in the class body (`_apply = move_states`).

    ## Why is this bad on meta?
    `module.to_empty(device=...)` calls `module._apply(..., recurse=recurse)`: the override
    raises `TypeError: _apply() got an unexpected keyword argument 'recurse'`, so a model whose
    class has the override cannot be materialised at all. `.to()` and `.cuda()` pass no
    `recurse`, so nothing else shows the defect.

    ## Example
    ```python
    class MemoryModule(nn.Module):
        def _apply(self, fn):
            ...
            return super()._apply(fn)
    ```

    Use instead:
    ```python
        def _apply(self, fn, recurse=True):
            ...
            return super()._apply(fn, recurse)
    ```

    ## Fix safety
    The fix adds `recurse=True` and passes it on: calls that worked behave the same, but it is
    a signature change, so it is unsafe. Not offered when the base `_apply()` it calls is
    defined in another file.

    ## Options
    None beyond selecting the rule.

    ## When to switch it off
    When the tree supports only torch older than 2.1.

    ## Known limits
    - A base class of another file is not read: whether its `_apply()` takes `recurse` is
      unknown, so no fix is offered there.
    """

    code = "ML013"
    name = "apply-without-recurse"
    summary = "`_apply()` override takes no `recurse`: `to_empty()` raises TypeError"
    codemod = "metalint.fix.apply_without_recurse"
    site_type = ApplySite

    VALID = [
        # torch's signature
        """
import torch.nn as nn

class Memory(nn.Module):
    def _apply(self, fn, recurse=True):
        self.state = fn(self.state)
        return super()._apply(fn, recurse)
""",
        # everything handed on
        """
import torch.nn as nn

class Memory(nn.Module):
    def _apply(self, fn, *args, **kwargs):
        return super()._apply(fn, *args, **kwargs)
""",
        # not a module: a class of one's own with an `_apply` of another meaning
        """
class Pipeline:
    def _apply(self, fn):
        return [fn(x) for x in self.items]
""",
    ]
    INVALID = [
        Invalid(
            """
import torch
import torch.nn as nn

class MemoryModule(nn.Module):
    def _apply(self, fn):  # ERROR
        for key, value in self._memories.items():
            if isinstance(value, torch.Tensor):
                self._memories[key] = fn(value)
        return super()._apply(fn)
""",
            """
import torch
import torch.nn as nn

class MemoryModule(nn.Module):
    def _apply(self, fn, recurse=True):  # ERROR
        for key, value in self._memories.items():
            if isinstance(value, torch.Tensor):
                self._memories[key] = fn(value)
        return super()._apply(fn, recurse)
""",
            unsafe=True,
        ),
        # old-style super, the call before the module's own tensors
        Invalid(
            """
from torch import nn

class FeatureSelector(nn.Module):
    def _apply(self, fn):  # ERROR
        super(FeatureSelector, self)._apply(fn)
        self.noise = fn(self.noise)
        return self
""",
            """
from torch import nn

class FeatureSelector(nn.Module):
    def _apply(self, fn, recurse=True):  # ERROR
        super(FeatureSelector, self)._apply(fn, recurse)
        self.noise = fn(self.noise)
        return self
""",
            unsafe=True,
        ),
        # the override bound from a function of the file, on a model root
        """
import torch
from torch import nn

def move_states(self, fn):
    self.state = fn(self.state)
    return nn.Module._apply(self, fn)

class Recurrent(nn.Module):
    _apply = move_states  # ERROR

    def __init__(self, d):
        super().__init__()
        self.cell = nn.Linear(d, d)
        self.state = torch.zeros(d)
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        method = cls.methods.get(APPLY)
        if method is None:
            yield from self._aliased(cls)
            return
        if takes_recurse(method.node):
            return
        yield Finding(
            method.node.name,
            f"`{cls.name}._apply(self, fn)` takes no `recurse`: `to_empty()` calls "
            f"`_apply(fn, recurse=...)` on the module it materialises, so for a `{cls.name}` "
            f"(or a model that is one) it raises TypeError",
            cls,
            help="Take `recurse=True` like `torch.nn.Module._apply` and pass it to the base's "
            "`_apply()`",
            subject=(APPLY,),
            site=ApplySite(method.node),
        )

    def _aliased(self, cls: ClassFacts) -> Iterable[Finding]:
        """``_apply = move_states`` in the class body, ``move_states(self, fn)`` a function of
        the file (or a lambda) that takes no ``recurse``."""
        for stmt in cls.node.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == APPLY
                ):
                    continue
                value = small.value
                if isinstance(value, cst.Lambda):
                    p = value.params
                    names = {q.name.value for q in (*p.posonly_params, *p.params, *p.kwonly_params)}
                    ok = (
                        "recurse" in names
                        or isinstance(p.star_arg, cst.Param)
                        or p.star_kwarg is not None
                    )
                    name = "lambda"
                elif isinstance(value, cst.Name):
                    fn = next(
                        (
                            f
                            for f in self.ctx.module.body
                            if isinstance(f, cst.FunctionDef) and f.name.value == value.value
                        ),
                        None,
                    )
                    if fn is None:
                        continue
                    ok, name = takes_recurse(fn), fn.name.value
                else:
                    continue
                if ok:
                    continue
                yield Finding(
                    small.targets[0].target,
                    f"`{cls.name}._apply = {name}` takes no `recurse`: `to_empty()` calls "
                    f"`_apply(fn, recurse=...)` on the module it materialises, so for a "
                    f"`{cls.name}` (or a model that is one) it raises TypeError",
                    cls,
                    help="Take `recurse=True` like `torch.nn.Module._apply` and pass it to the "
                    "base's `_apply()`",
                    subject=(APPLY,),
                    site=ApplySite(None, alias=value),
                )
