from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from metalint.diagnostics import HelperReads, NoHook
from metalint.static.construction import top_function
from metalint.static.model import (
    NOT_THE_TREE,
    ClassFacts,
    MethodFacts,
    construction,
    function_facts,
)
from metalint.static.names import dotted
from metalint.static.rule import Finding, Rule
from metalint.static.syntax import short
from metalint.static.tensors import inplace_write
from metalint.vocabulary import WEIGHT_REPARAMETRIZATIONS


def _reparametrizations(method: MethodFacts) -> list[cst.Call]:
    return [c.node for c in method.calls if c.qualname in WEIGHT_REPARAMETRIZATIONS]


def _other_file(call) -> bool:
    """A call of an imported function that may be defined in another file of the tree,
    capitalised or not (``WNConv1d(...)``, a function named like the class it builds): whether
    the tree defines it, and whether it re-parametrises, is answered across files; a class
    resolves to no function there."""
    q = call.qualname
    return q is not None and not q.startswith(NOT_THE_TREE) and type(call.node.func) is not cst.Call


def _reparametrised(method: MethodFacts, node: cst.Call) -> str | None:
    """The attribute whose layer ``node`` re-parametrises: ``self.conv1 = weight_norm(self
    .conv1)`` or ``self.conv = weight_norm(nn.Conv1d(...))`` -> ``conv1`` / ``conv``."""
    arg = dotted(node.args[0].value) if node.args else None
    if arg and arg.startswith("self.") and arg.count(".") == 1:
        return arg[5:]
    for a in method.assigns:
        if a.value is node and a.target.startswith("self.") and a.target.count(".") == 1:
            return a.target[5:]
    return None


def _writes_computed_weight(cls: ClassFacts, hooks, attr: str, qualify) -> str | None:
    """The class's own hook that initialises ``self.<attr>.weight`` in place or hands it to a
    function (``initialize(self.conv1.weight)``) and never assigns it: it writes the weight
    the parametrization computes, a temporary, and leaves g and v as they are."""
    weight = f"self.{attr}.weight"
    for hook in hooks:
        if hook.startswith("_") or hook not in cls.methods:
            continue
        methods = cls.reachable(hook)
        if any(a.target == weight for m in methods for a in m.assigns):
            return None  # assigning it runs right_inverse: g and v follow
        for m in methods:
            for call in m.calls:
                w = inplace_write(call.node, qualify)
                handed = any(dotted(a.value) == weight for a in call.node.args)
                if handed or (w is not None and ".".join(w.chain) == weight):
                    return hook
    return None


class WeightNormNotReset(Rule):
    """
    ## What it does
    Finds `weight_norm(...)`, `spectral_norm(...)`, `orthogonal(...)` or
    `register_parametrization(...)` applied to a layer while a module is built, directly or
    through a function (`WNConv1d = lambda *a, **k: weight_norm(nn.Conv1d(*a, **k))`), in a
    class with no init hook of its own, or whose hook initialises the layer's computed
    `weight` (`init_fn(self.conv1.weight)`): that writes a temporary and leaves g and v.

    ## Why is this bad on meta?
    The re-parametrisation computes g and v (or spectral norm's vectors) from the weight's
    value; on meta there is none. After `to_empty()` the layer's `reset_parameters()` writes
    `self.weight`, now computed from g and v on every access: the init lands in a temporary and
    g and v stay uninitialised memory.

    ## Example
    ```python
    class ResidualUnit(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv = WNConv1d(dim, dim, kernel_size=7, padding=3)
    ```

    Use instead:
    ```python
        def reset_parameters(self):  # assigning `weight` sets g and v from the new value
            weight = torch.empty_like(self.conv.weight)
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            self.conv.weight = weight
    ```
    Or materialise such models from a checkpoint, which holds g and v.

    ## Fix safety
    No automatic fix: the hook must say which init the weight had, and assigning it changes
    what eager construction draws.

    ## Options
    `hooks` (a configured hook of the class counts as its own).

    ## When to switch it off
    When such models are always loaded from a checkpoint.

    ## Known limits
    - A class with any init hook of its own is taken to re-create g and v.
    """

    code = "ML014"
    name = "weight-norm-not-reset"
    summary = "Weight re-parametrised (weight norm, spectral norm) during construction: g and v are lost after `to_empty()`"

    VALID = [
        # the class re-derives the parametrised weight in its own hook
        """
import math
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm

class Unit(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(dim, dim, 3))

    def reset_parameters(self):
        weight = torch.empty_like(self.conv.weight)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.conv.weight = weight
""",
        # applied after construction, by the caller: not this rule's business
        """
import torch.nn as nn

class Unit(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3)

    def remove_weight_norm(self):
        nn.utils.remove_weight_norm(self.conv)
""",
    ]
    INVALID = [
        # directly, the old hook-based weight norm
        """
import torch.nn as nn

class Vocoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv_pre = nn.utils.weight_norm(nn.Conv1d(80, dim, 7, padding=3))  # ERROR
""",
        # through a function of the file (the audio codecs' WNConv1d)
        """
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm

def WNConv1d(*args, **kwargs):
    return weight_norm(nn.Conv1d(*args, **kwargs))

class ResidualUnit(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(
            nn.ELU(),
            WNConv1d(dim, dim, kernel_size=7, padding=3),  # ERROR
        )
""",
        # the class's own hook initialises the computed weight, a temporary
        """
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm

class TemporalBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3)
        self.conv = weight_norm(self.conv)  # ERROR
        self.init_weights()

    def init_weights(self):
        nn.init.xavier_uniform_(self.conv.weight)
""",
        # spectral norm in a loop over layers (a GAN discriminator)
        """
import torch.nn as nn
from torch.nn.utils import spectral_norm

class Discriminator(nn.Module):
    def __init__(self, dims=(3, 8, 16)):
        super().__init__()
        self.layers = nn.ModuleList()
        for a, b in zip(dims, dims[1:]):
            self.layers.append(spectral_norm(nn.Conv2d(a, b, 3)))  # ERROR
""",
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._helpers: dict[str, list[cst.Call]] = {}

    def function_reads(self, fn: MethodFacts) -> Iterable[cst.CSTNode]:
        return _reparametrizations(fn)

    def _helper(self, call) -> list[cst.Call]:
        """The re-parametrising calls of a module-level function of this file that
        ``call`` calls (``WNConv1d(...)``)."""
        func = call.node.func
        if type(func) is not cst.Name or call.qualname is not None:
            return []
        name = func.value
        if name not in self._helpers:
            fn = top_function(self.ctx.module, name)
            self._helpers[name] = (
                _reparametrizations(function_facts(fn, self.ctx.facts)) if fn is not None else []
            )
        return self._helpers[name]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if "__init__" not in cls.methods:
            return
        for method in construction(cls, enter_hooks=False, hooks=self.ctx.hooks):
            for call in method.calls:
                node = call.node
                if call.qualname in WEIGHT_REPARAMETRIZATIONS:
                    what = f"`{short(node, 60)}`"
                    cross = ""
                elif self._helper(call):
                    what = f"`{short(node, 60)}` (it calls `{short(self._helper(call)[0].func)}`)"
                    cross = ""
                elif _other_file(call):
                    if self.deferred(call.qualname):
                        continue
                    what = f"`{short(node, 60)}` (a function that re-parametrises a weight)"
                    cross = call.qualname or ""
                else:
                    continue
                attr = _reparametrised(method, node)
                hook = attr and _writes_computed_weight(cls, self.ctx.hooks, attr, self.qualify)
                tail = (
                    f"; `{hook}()` initialises the computed `self.{attr}.weight` in place, a "
                    f"temporary"
                    if hook
                    else ""
                )
                yield Finding(
                    node,
                    f"{what} in `{method.name}` re-parametrises a layer's weight from its init: "
                    f"built on meta there is none, and after `to_empty()` the layer's "
                    f"`reset_parameters()` writes the computed `weight`, not the new parameters "
                    f"(g and v), which stay uninitialised memory{tail}",
                    cls,
                    help="Re-derive it in a hook that runs after the layer's reset: assign a "
                    "freshly initialised `weight` (the parametrization's right_inverse sets g and "
                    "v), or load a checkpoint",
                    conditions=_conditions(not hook, cross),
                )


def _conditions(no_hook: bool, cross: str) -> tuple:
    """What the finding stands under: the class has no init hook (``no_hook``: unless its own
    hook writes the computed weight) and, when ``cross`` names a function of another file, that
    it re-parametrises (``HelperReads``)."""
    out: tuple = (NoHook(),) if no_hook else ()
    return (*out, HelperReads(cross)) if cross else out
