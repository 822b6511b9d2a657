from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from metalint.diagnostics import NoHook, NotRecreated
from metalint.static.construction import argument_of, computed
from metalint.static.model import ClassFacts, construction
from metalint.static.ownership import owned_tensors
from metalint.static.rule import Finding, Rule
from metalint.static.tensors import initialised_own, is_legacy_sizes, value_kind
from metalint.vocabulary import (
    APPLIED_INIT,
    CONVERSION_METHODS,
    EMPTY_FACTORIES,
    LEGACY_CONSTRUCTORS,
    PRIVATE_RESETS,
    SIZE_FIRST_FACTORIES,
)


def _names(attrs: list[str], limit: int = 4) -> str:
    shown = ", ".join(f"`{a}`" for a in attrs[:limit])
    return shown + (f" and {len(attrs) - limit} more" if len(attrs) > limit else "")


def _size_zero(value, qualify) -> bool:
    """``torch.empty(0)``, ``torch.zeros(0, d, device=x)``, ``torch.empty((0,))``,
    ``torch.tensor([])``: a tensor with no elements. Not ``torch.tensor(0)`` (a 0-dim tensor
    holding 0) nor ``torch.zeros(())`` (a 0-dim tensor: one element)."""
    if not isinstance(value, cst.Call) or not value.args:
        return False
    q = qualify(value.func)
    if q not in SIZE_FIRST_FACTORIES:
        return False
    first = value.args[0].value
    if q == "torch.tensor":  # data, not sizes: empty only as an empty literal
        return isinstance(first, (cst.List, cst.Tuple)) and not first.elements
    if isinstance(first, (cst.List, cst.Tuple)):
        sizes = [e.value for e in first.elements]
    else:
        sizes = [a.value for a in value.args if a.keyword is None and not a.star]
    return any(isinstance(d, cst.Integer) and d.evaluated_value == 0 for d in sizes)


def _from_argument(owned) -> bool:
    """``nn.Parameter(weight)`` / ``register_buffer("w", weight)`` with ``weight`` an argument."""
    v = owned.value
    return isinstance(v, cst.Name) and v.value in owned.method.params and v.value != "self"


def _has_value(expr, qualify, method, depth: int = 0) -> bool:
    """The expression computes something (not ``torch.empty``, ``torch.Tensor(3, 4)``, an
    argument): broader than ML002's test, so that nothing computed goes unreported."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Name):
        if expr.value in method.params or expr.value == "None":
            return False
        return any(
            v is not expr and _has_value(v, qualify, method, depth + 1)
            for _, v in method.local_values.get(expr.value, ())
        )
    if isinstance(expr, cst.Call):
        q = qualify(expr.func)
        if q in EMPTY_FACTORIES or (q in LEGACY_CONSTRUCTORS and is_legacy_sizes(expr, method)):
            return False
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in CONVERSION_METHODS:
            return _has_value(expr.func.value, qualify, method, depth + 1)
        return True
    return isinstance(
        expr, (cst.BinaryOperation, cst.Subscript, cst.List, cst.Tuple, cst.Integer, cst.Float)
    )


class MissingResetHook(Rule):
    """
    ## What it does
    Finds a module that creates its own parameters or buffers but has no public
    `reset_parameters()` (own or inherited) and no other public init hook (`init_weights()`,
    `init_non_persistent_buffers()`, a configured hook), naming the tensors whose value is lost.
    A private `_reset_parameters()` does not count.

    ## Why is this bad on meta?
    After `to_empty()` a materialiser (FSDP, Lightning, `reset_parameters()` loops) calls each
    module's public hook; a module without one keeps uninitialised memory.

    ## Example
    ```python
    class Attention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
            self._reset_parameters()

        def _reset_parameters(self):
            nn.init.xavier_uniform_(self.in_proj_weight)
    ```

    Use instead:
    ```python
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.xavier_uniform_(self.in_proj_weight)
    ```

    ## Fix safety
    No automatic fix: renaming the hook changes the class's interface.

    ## Options
    `protocol`, `hooks` (a configured hook counts as the module's hook).

    ## When to switch it off
    When the model's root `init_weights()` re-initialises every tensor of the class and
    `protocol` cannot say so.

    ## Known limits
    - Tensors ML001/ML002 report are left to them, so a class gets one finding.
    - A `torch.empty` tensor nothing initialises is not counted: it is uninitialised eagerly too.
    """

    code = "ML004"
    name = "missing-reset-hook"
    summary = "Module owns parameters or buffers but has no `reset_parameters()` to re-create them"

    VALID = [
        # dinov2 LayerScale: ML001/ML002 report the lost values; their fix adds the hook
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
        self.register_buffer("index", torch.arange(dim), persistent=False)
""",
        # torch-geometric's LinkPredDiversity: a non-persistent buffer from the caller's tensor
        # is ML002's (its fix adds the hook)
        """
import torch
from torch import Tensor
from torch.nn import Module

class LinkPredDiversity(Module):
    def __init__(self, k: int, category: Tensor) -> None:
        super().__init__()
        self.k = k
        self.register_buffer('category', category, persistent=False)
""",
        # timm 1.0 LayerScale: a public reset_parameters
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init_values)
""",
        # inherits reset_parameters from a torch.nn layer (timm LayerNorm2d)
        """
import torch.nn as nn
import torch.nn.functional as F

class LayerNorm2d(nn.LayerNorm):
    def __init__(self, num_channels, eps=1e-6):
        super().__init__(num_channels, eps=eps)

    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
""",
        # a root init_weights counts as a hook (timm VisionTransformer)
        """
import torch
import torch.nn as nn
from timm.layers import trunc_normal_

class VisionTransformer(nn.Module):
    def __init__(self, dim=192, num_patches=196):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * .02)
        self.init_weights()

    def init_weights(self):
        trunc_normal_(self.pos_embed, std=.02)
        nn.init.normal_(self.cls_token, std=1e-6)
""",
        # device anchors and uninitialised tensors nobody here sets: eager has garbage too
        """
import torch
import torch.nn as nn

class SinusoidalPositionalEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("_float_tensor", torch.FloatTensor(1))
        self.register_buffer("_anchor", torch.empty(0), persistent=False)
""",
        # owns no tensor itself: only children
        """
from torch import nn

class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
""",
        # the hook comes from a local base class
        """
import torch
import torch.nn as nn

class ResettableNorm(nn.Module):
    def reset_parameters(self):
        nn.init.ones_(self.weight)

class RMSNorm(ResettableNorm):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()
""",
    ]
    INVALID = [
        # no hook at all; `weight` comes from an argument (`scale` alone would be ML001's)
        """
import torch
import torch.nn as nn

class FrozenEmbedding(nn.Module):  # ERROR
    def __init__(self, weight):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.scale = nn.Parameter(torch.ones(1))
""",
        # only a private _reset_parameters, like nn.MultiheadAttention
        """
import torch
from torch import nn
from torch.nn import init as I

class Attention(nn.Module):  # ERROR
    def __init__(self, dim):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self._reset_parameters()

    def _reset_parameters(self):
        I.xavier_uniform_(self.in_proj_weight)
        I.zeros_(self.in_proj_bias)
""",
        # a subclass of nn.MultiheadAttention inherits no public hook
        """
import torch
import torch.nn as nn

class BiasedAttention(nn.MultiheadAttention):  # ERROR
    def __init__(self, dim, heads):
        super().__init__(dim, heads)
        self.attn_bias = nn.Parameter(torch.empty(heads, 1, 1))
        nn.init.zeros_(self.attn_bias)
""",
        # buffers count too, even from a helper; parent initialises the empty tensor
        """
import torch
from torch import nn

class PatchEmbed(nn.Module):
    def __init__(self, dim, n):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

class RelPosBias(nn.Module):  # ERROR
    def __init__(self, heads, size):
        super().__init__()
        self.table = nn.Parameter(torch.empty((2 * size - 1) ** 2, heads))
        nn.init.trunc_normal_(self.table, std=.02)
        self._make_index(size)

    def _make_index(self, size):
        self.register_buffer("index", torch.arange(size * size), persistent=False)
""",
    ]

    def _value_carrying(self, owned) -> bool:
        """Created from a value, or a non-persistent buffer from an argument: ML001
        (parameters) or ML002 (buffers) reports it."""
        value = owned.value
        if owned.kind == "parameter":
            return value_kind(value, self.qualify, owned.method) in ("value", "random")
        if (
            not owned.persistent
            and owned.method.name == "__init__"
            and argument_of(value, owned.method)
        ):
            return True  # a non-persistent buffer from an argument: ML002 reports it
        return computed(value, self.qualify, owned.method) in ("value", "random")

    def _uncovered(self, methods) -> list[str]:
        """The own tensors construction (``methods``) gives a value no other rule reports (not
        ``torch.empty(...)`` nobody initialises), in order."""
        owns = list(owned_tensors(methods, self.qualify))
        if not owns:
            return []  # most classes own no tensor: no call of theirs is read then
        initialised = initialised_own(methods, self.qualify)
        attrs: list[str] = []
        covered: set[str] = set()
        for owned in owns:
            if _size_zero(owned.value, self.qualify):
                continue  # `torch.empty(0)`: a device anchor, nothing to initialise
            if self._value_carrying(owned):
                covered.add(owned.attr)  # ML001/ML002 report it
            elif not (
                owned.attr in initialised
                or _from_argument(owned)
                or _has_value(owned.value, self.qualify, owned.method)
            ):
                # `torch.empty(...)` nobody here initialises: eager leaves it uninitialised too
                # (or a parent initialises it: ML010's finding), so nothing is lost on meta
                covered.add(owned.attr)
            if owned.attr not in attrs:
                attrs.append(owned.attr)
        return [a for a in attrs if a not in covered]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if "__init__" not in cls.methods:
            return
        public = [h for h in self.ctx.hooks if not h.startswith("_")]
        if any(h in cls.methods for h in public):
            return
        methods = construction(cls)
        attrs = self._uncovered(methods)
        if not attrs:
            return
        private = [h for h in (*PRIVATE_RESETS, APPLIED_INIT) if h in cls.methods]
        if private:
            why = f"only the private `{private[0]}()`, which nothing calls after `to_empty()`"
            advice = f"Rename `{private[0]}()` to `reset_parameters()` (own tensors only)"
        else:
            why = (
                "no `reset_parameters()` (own or inherited): after `to_empty()` they stay "
                "uninitialised under FSDP, `skip_init` or any per-module reset"
            )
            advice = "Add a `reset_parameters()` that gives them their values and call it from `__init__`"
        yield Finding(
            cls.node.name,
            f"`{cls.name}` owns {_names(attrs)} but has {why}",
            cls,
            help=advice,
            # judged under the model roots' protocol: not lost when every root re-creates them
            conditions=(NoHook(), NotRecreated(tuple(attrs))),
            subject=tuple(attrs),
        )
